"""`+experiment=paper` (conf/experiment/paper.yaml) is the paper's benchmark in one override: it composes
to the values the spec names, the command line still overrides it, and without keys, stacks or weights
the preflight refuses it naming each missing thing."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.stages import STAGES
from harness.store.settings import open_store
from tests.fixtures.hub import use_cache

CONF = Path(__file__).resolve().parents[2] / "conf"
PAPER_MODELS = {"minicpm_o", "moshi", "flm_audio", "voila", "freeze_omni"}  # spec section 8's results table
BASELINES = {"silent", "babble", "oracle"}


def paper(*overrides: str) -> RunConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+experiment=paper", *overrides])
    return RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True))


def test_the_paper_experiment_composes_to_the_spec():
    cfg = paper()
    s = cfg.scenes  # spec section 2: 2,000 pairs (4,000 conversations), 500 four-person, 968 with N4
    assert (s.n_pairs, s.profile, s.manifest) == (2000, "paper", None)
    assert round(s.n_pairs * s.four_party_share) == 500 and round(s.n_pairs * s.n4_share) == 968
    assert cfg.tts.engine == "qwen3"  # spec section 3: Qwen3-TTS, 24 kHz, the fixed speaker-to-voice map
    assert cfg.tts.voices == {"A": "ryan", "B": "aiden", "C": "eric", "D": "dylan"}
    assert cfg.protocol.sample_rate == 24_000
    assert cfg.asr.kind == "qwen3" and cfg.asr.bias_with_gold is False  # spec section 5: Qwen3-ASR-1.7B
    assert cfg.judge.kind == "anthropic"  # an LLM judge, never the lexical stand-in
    assert cfg.reference.kind == "anthropic" and cfg.reference.runs == 2  # spec section 7: run twice
    assert cfg.score.num_gpus == 1 and cfg.tts.num_gpus == 1  # both on GPU actors (their own images)
    roles = {m.name: m.role for m in cfg.models}
    assert roles == {**{m: "evaluated" for m in PAPER_MODELS}, **{b: "baseline" for b in BASELINES}}
    # spec section 6: Bonferroni over 10 model pairs x 2 metrics = 20 tests per condition
    assert 2 * len(list(combinations([m for m in cfg.models if m.role == "evaluated"], 2))) == 20
    for m in cfg.models:
        assert m.image is None if m.name in BASELINES else m.image == f"duplex-mpe-{m.name.replace('_', '-')}"
    RunPlan.from_config(cfg)


def test_the_command_line_still_overrides_the_experiment():
    cfg = paper("model=[moshi]", "judge=gemini", "reference=gemini", "scenes.manifest=/data/paper.jsonl")
    assert [m.name for m in cfg.models] == ["moshi"]
    assert (cfg.judge.kind, cfg.reference.kind) == ("gemini", "gemini")
    assert cfg.scenes.manifest == "/data/paper.jsonl" and cfg.tts.engine == "qwen3"


def test_without_keys_stacks_or_weights_the_preflight_names_what_is_missing(tmp_path, monkeypatch):
    from harness.runtime.preflight import problems

    for key in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    use_cache(monkeypatch, tmp_path / "hub")  # an empty Hugging Face cache
    cfg = paper(f"store.root={tmp_path / 'runs'}", "run_id=paper-check")
    found = problems(cfg, open_store(cfg.store), STAGES)
    text = "\n".join(found)
    assert "judge=anthropic: no API key: set ANTHROPIC_API_KEY" in text
    assert "reference=anthropic: no API key: set ANTHROPIC_API_KEY" in text
    assert any(p.startswith("asr=qwen3: ") and "qwen_asr" in p for p in found)
    for name in PAPER_MODELS:  # each model's weights (or its unpinned revision) is named with how to fix it
        mine = [p for p in found if p.startswith(f"model {name!r}: ")]
        assert any("make weights MODEL=" in p or "has no revision" in p for p in mine), (name, mine)
    assert not any(p.startswith(f"model {b!r}") for b in BASELINES for p in found)
    assert not (tmp_path / "runs" / "paper-check" / "run.json").exists()  # nothing was started

