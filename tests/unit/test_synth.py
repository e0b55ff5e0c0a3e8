"""The synth stage: resumable, parallel, failures per clip, Qwen3-TTS through the stage (a stand-in
``qwen_tts`` package written here: the real one and its weights are never needed)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from harness.audio.io import decode
from harness.audio.tts import SynthesisError
from harness.audio.tts.espeak import EspeakTTS
from harness.products.scenes import SceneSet
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.stages import run_stage
from harness.stages.synth import SynthIncomplete
from harness.store.base import LocalStore, get_json

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for PyPI qwen-tts with the API the backend uses: from_pretrained(folder, device_map,
# dtype, local_files_only) and generate_custom_voice(text, speaker, language, instruct) ->
# (list of float arrays, rate), speakers validated with ValueError. Each load is logged in the
# weights folder, so a test can see which process loaded the model on which device.
FAKE_QWEN_TTS = textwrap.dedent('''
    import json, os
    import numpy as np

    SPEAKERS = {"ryan", "aiden", "eric", "dylan", "serena"}
    RATE = 12_000


    class Qwen3TTSModel:
        @classmethod
        def from_pretrained(cls, path, device_map, dtype, local_files_only=False):
            if not os.path.isdir(path) or local_files_only is not True:
                raise OSError(f"would download {path}")
            with open(os.path.join(path, "loads.jsonl"), "a") as fh:
                fh.write(json.dumps({"pid": os.getpid(), "device": device_map, "dtype": str(dtype)}) + "\\n")
            return cls()

        def generate_custom_voice(self, text, speaker, language=None, instruct=None, **kwargs):
            bad = [s for s in speaker if s.lower() not in SPEAKERS]
            if bad:
                raise ValueError(f"Unsupported speakers: {bad}")
            pad = np.zeros(RATE // 10, np.float32)
            out = []
            for t, s in zip(text, speaker):
                n = int(0.05 * RATE * len(t))
                tone = 0.3 * np.sin(np.arange(n) * (0.05 + 0.01 * sorted(SPEAKERS).index(s))).astype(np.float32)
                out.append(np.concatenate([pad, tone, pad]))
            return out, RATE
''')


def _cfg(root: Path, n_pairs: int = 1, four_party_share: float = 0.0, cluster: dict | None = None,
         **tts) -> RunConfig:
    return RunConfig.from_dict({
        "run_id": "syn", "scenes": {"n_pairs": n_pairs, "seed": 3, "n4_share": 0.0,
                                    "four_party_share": four_party_share},
        "model": {"silent": {"target": "silent"}}, "store": {"root": str(root)}, "tts": {"actors": 0, **tts},
        "cluster": cluster or {}})


def _scenes(root: Path, **kw) -> tuple[RunConfig, LocalStore, RunPlan]:
    cfg = _cfg(root, **kw)
    store = LocalStore(root)
    run_stage("scenes", cfg, store)
    return cfg, store, RunPlan.from_config(cfg)


def _outputs(store: LocalStore, plan: RunPlan) -> tuple[bytes, dict[str, bytes]]:
    """The index's bytes and every stored clip's bytes."""
    clips = {k.rsplit("/", 1)[1]: store.get(k) for k in store.list(plan.layout.file(plan.synth, "clips"))}
    return store.get(plan.layout.file(plan.synth, "index.json")), clips


@pytest.fixture
def spoken(monkeypatch):
    """Counts (and optionally breaks) espeak-ng calls: ``spoken.texts`` lists every text spoken."""

    class Spoken:
        texts: ClassVar[list[str]] = []
        kill_at: int | None = None  # KeyboardInterrupt on this call (1-based), as a killed job
        refuse: str | None = None  # SynthesisError for this text

    real = EspeakTTS.synthesize

    def synthesize(self, text, voice):
        Spoken.texts.append(text)
        if len(Spoken.texts) == Spoken.kill_at:
            raise KeyboardInterrupt
        if text == Spoken.refuse:
            raise SynthesisError("espeak-ng failed for this text (test)")
        return real(self, text, voice)

    monkeypatch.setattr(EspeakTTS, "synthesize", synthesize)
    Spoken.texts = []
    return Spoken


def test_a_killed_run_resumes_making_only_the_missing_clips(tmp_path, spoken):
    cfg, store, plan = _scenes(tmp_path / "a", batch=4)
    lay = plan.layout
    spoken.kill_at = 7  # batch 1 (4 clips) is complete and recorded; batch 2 has stored 2 clips, no record
    with pytest.raises(KeyboardInterrupt):
        run_stage("synth", cfg, store)
    assert not store.exists(lay.marker(plan.synth)) and not store.exists(lay.file(plan.synth, "index.json"))
    first = list(spoken.texts[:6])
    stored = sorted(store.list(lay.file(plan.synth, "clips")))
    assert len(stored) == 6 and len(list(store.list(lay.file(plan.synth, "batches")))) == 1
    recorded = get_json(store, next(store.list(lay.file(plan.synth, "batches"))))["lengths"]
    unrecorded = [k for k in stored if k.rsplit("/", 1)[1].removesuffix(".flac") not in recorded]
    assert len(recorded) == 4 and len(unrecorded) == 2
    store.put(unrecorded[0], store.get(unrecorded[0])[:200])  # cut short, as a copy that did not finish leaves it

    spoken.texts, spoken.kill_at = [], None
    run_stage("synth", cfg, store)
    index = get_json(store, lay.file(plan.synth, "index.json"))
    n_distinct = len({t["clip"] for c in index["conversations"].values() for t in c["turns"]} |
                     {index["preamble"]["clip"]})
    # made now: everything but the 4 recorded clips and the 1 stored, unrecorded clip that decodes
    assert len(spoken.texts) == n_distinct - 5
    assert set(spoken.texts).isdisjoint(first[:4])
    assert len(set(spoken.texts) & set(first[4:6])) == 1  # the cut clip was made again, its neighbour not

    # the resumed outputs are exactly an uninterrupted run's
    cfg2, store2, _ = _scenes(tmp_path / "b", batch=4)
    run_stage("synth", cfg2, store2)
    assert _outputs(store, plan) == _outputs(store2, plan)
    for key in store.list(lay.file(plan.synth, "clips")):
        assert len(decode(store.get(key), 24_000)[0]) > 0
    spoken.texts = []
    run_stage("synth", cfg, store)  # complete: skipped
    assert spoken.texts == []


def test_a_failing_clip_errors_only_the_conversations_that_need_it(tmp_path, spoken):
    cfg, store, plan = _scenes(tmp_path, n_pairs=2)
    scenes = {s.scene_id: s for s in SceneSet.read(store, plan.layout, plan.scenes).scenes}
    counts: dict[str, int] = {}
    for s in scenes.values():
        for t in {t.text for t in s.turns}:
            counts[t] = counts.get(t, 0) + 1
    victim = next(sid for sid in sorted(scenes) if any(counts[t.text] == 1 for t in scenes[sid].turns))
    k, turn = next((i, t) for i, t in enumerate(scenes[victim].turns) if counts[t.text] == 1)
    spoken.refuse = turn.text
    run_stage("synth", cfg, store)
    lay = plan.layout
    index = get_json(store, lay.file(plan.synth, "index.json"))
    assert set(index["errors"]) == {victim}
    assert index["errors"][victim] == (f"synthesis failed: turn {k} (speaker {turn.speaker}, voice "
                                       f"{cfg.tts.voices[turn.speaker]!r}): SynthesisError: espeak-ng failed for "
                                       "this text (test)")
    [(cid, rec)] = index["failed_clips"].items()
    assert rec["text"] == turn.text and "failed for this text" in rec["reason"]
    assert not store.exists(lay.clip(plan.synth, cid))
    assert set(index["conversations"]) == set(scenes) - {victim}
    for sid, conv in index["conversations"].items():
        assert len(conv["turns"]) == len(scenes[sid].turns)
    marker = get_json(store, lay.marker(plan.synth))
    assert (marker["errors"], marker["failed_clips"]) == (1, 1)


def test_a_preamble_espeak_cannot_speak_stops_the_stage(tmp_path):
    cfg, store, plan = _scenes(tmp_path, narrator="nonexistentvoice")
    with pytest.raises(SynthesisError, match=r"duty preamble.*nonexistentvoice"):
        run_stage("synth", cfg, store)
    assert not store.exists(plan.layout.marker(plan.synth))


def _qwen3(root: Path, weights: Path, cluster: dict | None = None, **tts) -> tuple[RunConfig, LocalStore, RunPlan]:
    """conf/tts/qwen3.yaml as shipped, with the stand-in's weights folder."""
    conf = yaml.safe_load((ROOT / "conf/tts/qwen3.yaml").read_text())
    conf["params"]["weights"] = str(weights)
    return _scenes(root, n_pairs=2, four_party_share=0.5, cluster=cluster,
                   **{**conf, "actors": 0, "num_gpus": 0, **tts})


@pytest.fixture
def fake_qwen_tts(tmp_path_factory, monkeypatch) -> Path:
    """The stand-in package's folder, importable here (and, through PYTHONPATH, in Ray workers)."""
    pkg = tmp_path_factory.mktemp("fake_pkg")
    (pkg / "qwen_tts").mkdir()
    (pkg / "qwen_tts" / "__init__.py").write_text(FAKE_QWEN_TTS)
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.delitem(sys.modules, "qwen_tts", raising=False)
    return pkg


def test_qwen3_through_the_stage(tmp_path, fake_qwen_tts):
    weights = tmp_path / "weights"
    weights.mkdir()
    cfg, store, plan = _qwen3(tmp_path / "store", weights, batch=5)
    run_stage("synth", cfg, store)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    assert index["errors"] == {} and index["failed_clips"] == {} and len(index["conversations"]) == 4
    loads = [json.loads(x) for x in (weights / "loads.jsonl").read_text().splitlines()]
    assert loads == [{"pid": os.getpid(), "device": "cpu", "dtype": "torch.bfloat16"}]  # loaded once
    # 12 kHz stand-in output, trimmed to 10 ms margins, at 24 kHz
    for s in SceneSet.read(store, plan.layout, plan.scenes).scenes:
        for t, c in zip(s.turns, index["conversations"][s.scene_id]["turns"], strict=True):
            assert abs(c["n"] - 2 * (int(0.05 * 12_000 * len(t.text)) + 240)) <= 4
            assert len(decode(store.get(plan.layout.clip(plan.synth, c["clip"])), 24_000)[0]) == c["n"]
    # a speaker the model does not know fails its clips (the batch is retried clip by clip), not the others
    cfg, store, plan = _qwen3(tmp_path / "store2", weights, batch=5,
                              voices={"A": "ryan", "B": "aiden", "C": "eric", "D": "nobody"})
    run_stage("synth", cfg, store)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    four = {s.scene_id for s in SceneSet.read(store, plan.layout, plan.scenes).scenes if "D" in s.speakers}
    assert four and set(index["errors"]) == four and set(index["conversations"]).isdisjoint(four)
    assert all("Unsupported speakers" in e and "speaker D" in e for e in index["errors"].values())
    assert {r["voice"] for r in index["failed_clips"].values()} == {"nobody"}


@pytest.fixture(scope="module")
def ray_with_fake(tmp_path_factory):
    """One Ray for this module (2 CPUs, 1 logical GPU) whose workers can import the stand-in."""
    import ray

    pkg = tmp_path_factory.mktemp("fake_pkg_ray")
    (pkg / "qwen_tts").mkdir()
    (pkg / "qwen_tts" / "__init__.py").write_text(FAKE_QWEN_TTS)
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", os.pathsep.join([str(pkg), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    mp.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, _temp_dir=f"/tmp/dmpe-synth-ray-{os.getpid()}",
             logging_level="WARNING")
    yield
    ray.shutdown()
    mp.undo()


def test_the_parallel_path_gives_the_serial_outputs(tmp_path, ray_with_fake):
    cfg, store, plan = _scenes(tmp_path / "serial")
    run_stage("synth", cfg, store)
    par, pstore, _ = _scenes(tmp_path / "parallel", actors=2, batch=3)
    assert RunPlan.from_config(par).synth == plan.synth  # execution settings are not in the stage's hash
    run_stage("synth", par, pstore)
    assert _outputs(pstore, plan) == _outputs(store, plan)
    assert len(list(pstore.list(plan.layout.file(plan.synth, "batches")))) >= 4  # it did run in batches


def test_qwen3_on_a_gpu_actor_and_an_engine_that_cannot_load(tmp_path, ray_with_fake):
    weights = tmp_path / "weights"
    weights.mkdir()
    cfg, store, plan = _qwen3(tmp_path / "store", weights, actors=None, num_gpus=1, num_cpus=1)
    run_stage("synth", cfg, store)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    assert index["errors"] == {} and len(index["conversations"]) == 4
    [load] = [json.loads(x) for x in (weights / "loads.jsonl").read_text().splitlines()]
    assert load["pid"] != os.getpid() and load["device"] == "cuda:0"  # one actor, on the (logical) GPU
    # weights that are not there: every batch is lost, nothing is marked, the reason is named
    cfg, store, plan = _qwen3(tmp_path / "store2", tmp_path / "absent", actors=None, num_gpus=1, num_cpus=1,
                              cluster={"max_restarts": 0, "max_task_retries": 0})
    with pytest.raises(SynthIncomplete, match="does not exist"):
        run_stage("synth", cfg, store)
    assert not store.exists(plan.layout.marker(plan.synth))


def test_tts_settings_are_checked():
    with pytest.raises(Exception, match="engine 'festival'"):
        _cfg(Path("/tmp"), engine="festival")
    with pytest.raises(Exception, match="batch"):
        _cfg(Path("/tmp"), batch=0)
    from harness.audio.tts import build_tts

    with pytest.raises(ValueError, match="qwen3 engine takes"):
        build_tts(_cfg(Path("/tmp"), engine="qwen3", params={"speed": 2}).tts, 24_000)
    assert _cfg(Path("/tmp"), engine="qwen3", params={"weights": "/w", "seed": 1}).tts.audio_settings()["params"] == \
        {"seed": 1}
