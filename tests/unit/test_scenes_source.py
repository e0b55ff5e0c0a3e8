"""The scenes stage's sources (issue 22, "Scripts from an LLM, end to end" and "Imports checked for
content"): ``scenes.source=llm`` through the pipeline's scenes stage on the real SDK clients over a
mocked transport (scenes written, a pair whose script fails every attempt in ``invalid.json`` with
why), its plan hash (the template prefixes unchanged; the prompt's content and the model in it),
the cost projection (no call), the preflight (no key, no start) and ``scenes.strict`` for a
manifest import."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import replace

import pytest

from harness.products.scenes import SceneSet
from harness.runtime.config import ConfigError, RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.preflight import problems
from harness.runtime.projection import project
from harness.scenes import settings as scene_settings
from harness.scenes.generator import generate_pairs
from harness.scenes.llm import PROMPT
from harness.scoring.judge.llm import PROMPTS_DIR
from harness.stages import run_stage
from harness.store.base import LocalStore, get_json
from tests.fixtures.fake_llm import ProviderAPI, provider_env
from tests.fixtures.keys import KEYS
from tests.fixtures.runs import SILENT, tiny_config
from tests.fixtures.scripts import script

N_PAIRS = 3
LLM = {"source": "llm", "n_pairs": N_PAIRS, "llm": {"backend": "anthropic", "max_attempts": 2}}


def _cfg(tmp_path, **scenes) -> RunConfig:
    return tiny_config(tmp_path / "store", "src", SILENT, scenes=scenes, cluster={"num_cpus": 2, "num_gpus": 0})


def _on(api: ProviderAPI, monkeypatch) -> None:
    """The stage's backend is the real SDK client whose HTTP goes to ``api`` (no network)."""
    real = scene_settings.script_backend

    def backend(llm):
        b = real(llm)
        b.http_client, b.max_retries = api.http_client(), 0
        return b

    monkeypatch.setattr(scene_settings, "script_backend", backend)


_SEEN: list[str] = []  # the layouts asked for, in order


def _refuses_the_second_pair(prompt: str) -> str:
    """A valid script, except for the second pair's layout, to which every reply is not JSON."""
    layout = prompt.split("<layout>")[1]
    if layout not in _SEEN:
        _SEEN.append(layout)
    return "I would rather not write that one." if _SEEN.index(layout) == 1 else script(prompt)


@pytest.mark.parametrize("backend", ["anthropic", "gemini"])
def test_the_scenes_stage_writes_the_llms_scripts_and_reports_the_pair_it_could_not(tmp_path, monkeypatch, backend):
    provider_env(monkeypatch)
    _SEEN.clear()
    api = ProviderAPI(_refuses_the_second_pair, input_tokens=2000, output_tokens=800)
    _on(api, monkeypatch)
    cfg = _cfg(tmp_path, **LLM | {"llm": {**LLM["llm"], "backend": backend}})
    store = LocalStore(cfg.store.root)
    prefix = run_stage("scenes", cfg, store)
    plan = RunPlan.from_config(cfg)
    written = SceneSet.read(store, plan.layout, prefix)
    # one call for pairs 0 and 2 each, two (max_attempts) for pair 1, each through the SDK's HTTP API
    assert len(api.requests) == 4
    host = "api.anthropic.com" if backend == "anthropic" else "generativelanguage.googleapis.com"
    assert {r[1].split("/")[2] for r in api.requests} == {host}
    assert sorted({s.pair_id for s in written.scenes}) == ["p00000", "p00002"] and len(written.scenes) == 4
    assert any("dentist" in t.text for s in written.scenes for t in s.turns)  # the model's texts, not the templates'
    assert written.stats["n_pairs"] == 2 and "designator" in written.stats["diagnostic"]  # the same diagnostics
    assert set(written.invalid) == {"p00001-explicit", "p00001-implicit"}
    why = written.invalid["p00001-explicit"]
    assert "no valid script" in why and "after 2 attempt(s)" in why and "reply holds no JSON object" in why
    marker = get_json(store, plan.layout.marker(prefix))
    assert marker["llm"]["calls"] == 4 and marker["llm"]["rejected_pairs"] == 1 and marker["llm"]["usd"] > 0
    assert marker["llm"]["prompt"].startswith(PROMPT.removesuffix(".txt") + "@")
    # the replies are cached where the run's other caches live: a new run id on the same store pays nothing
    assert list((tmp_path / "store" / "_cache" / "scripts").glob("*/*.json"))
    again = tiny_config(tmp_path / "store", "src2", SILENT, scenes=dict(LLM, llm={**LLM["llm"], "backend": backend}))
    run_stage("scenes", again, store)
    assert len(api.requests) == 4


def test_pairs_the_budget_left_are_invalid_with_why(tmp_path, monkeypatch):
    provider_env(monkeypatch)
    api = ProviderAPI(script, input_tokens=2000, output_tokens=800)  # $0.018 a call (claude-sonnet-4-5)
    _on(api, monkeypatch)
    cfg = _cfg(tmp_path, **LLM | {"llm": {"budget_usd": 0.02}})
    store = LocalStore(cfg.store.root)
    written = SceneSet.read(store, RunPlan.from_config(cfg).layout, run_stage("scenes", cfg, store))
    assert len(api.requests) == 2 and len(written.scenes) == 4
    assert written.invalid == dict.fromkeys(
        ["p00002-explicit", "p00002-implicit"], "not scripted: the script budget scenes.llm.budget_usd=$0.02 was "
        "spent before this pair (raise it and rerun: cached replies cost nothing)")


def test_a_stage_without_any_valid_script_does_not_complete(tmp_path, monkeypatch):
    provider_env(monkeypatch)
    _on(ProviderAPI("no", input_tokens=10, output_tokens=1), monkeypatch)
    cfg = _cfg(tmp_path, **LLM)
    store = LocalStore(cfg.store.root)
    with pytest.raises(Exception, match="no valid scene"):
        run_stage("scenes", cfg, store)
    plan = RunPlan.from_config(cfg)
    assert len(get_json(store, plan.layout.file(plan.scenes, "invalid.json"))) == 2 * N_PAIRS
    assert not store.exists(plan.layout.marker(plan.scenes))


# -- the plan hash -----------------------------------------------------------------------------------
def test_the_template_hash_ignores_the_llm_settings_and_the_llm_hash_holds_them(tmp_path):
    template = RunPlan.from_config(_cfg(tmp_path, n_pairs=N_PAIRS))
    same = RunPlan.from_config(_cfg(tmp_path, n_pairs=N_PAIRS, source="template",
                                    llm={"backend": "gemini", "model": "gemini-2.5-pro", "budget_usd": 3}))
    assert (same.scenes, same.synth) == (template.scenes, template.synth) and "scenes.llm.prompt" not in same.inputs
    llm = RunPlan.from_config(_cfg(tmp_path, **LLM))
    assert llm.scenes != template.scenes
    assert llm.inputs["scenes.llm.prompt"] == hashlib.sha256((PROMPTS_DIR / PROMPT).read_bytes()).hexdigest()
    other_model = RunPlan.from_config(_cfg(tmp_path, **LLM | {"llm": {**LLM["llm"], "model": "claude-opus-4-1"}}))
    assert other_model.scenes != llm.scenes
    more = RunPlan.from_config(_cfg(tmp_path, **LLM | {"llm": {**LLM["llm"], "max_attempts": 3}}))
    assert more.scenes != llm.scenes


def test_the_llm_hash_reads_the_prompt_by_content(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    shutil.copy(PROMPTS_DIR / PROMPT, folder / PROMPT)
    llm = RunPlan.from_config(_cfg(tmp_path, **LLM))
    copied = RunPlan.from_config(_cfg(tmp_path, **LLM | {"llm": {**LLM["llm"], "prompts_dir": str(folder)}}))
    assert copied.scenes == llm.scenes  # another folder, the same bytes
    (folder / PROMPT).write_text((folder / PROMPT).read_text() + "\nWrite warmly.\n")
    edited = RunPlan.from_config(_cfg(tmp_path, **LLM | {"llm": {**LLM["llm"], "prompts_dir": str(folder)}}))
    assert edited.scenes != llm.scenes


def _manifest(path, unsupported: bool = False):
    """A JSONL manifest of one generated pair; ``unsupported``: its gold answer no longer said before T
    (every mention of it replaced): the form is fine, the content (rule ``support``) is not."""
    pair = generate_pairs(1, 3, 0.0, 0.0)
    lines = []
    for scene in pair:
        d = scene.to_dict()
        if unsupported:
            gold = re.compile(re.escape(scene.gold_answer), re.IGNORECASE)
            d["turns"] = [t | {"text": gold.sub("that", t["text"])} for t in d["turns"]]
        lines.append(json.dumps(d))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_strict_enters_the_hash_only_when_true(tmp_path):
    m = str(_manifest(tmp_path / "scenes.jsonl"))
    lax = RunPlan.from_config(_cfg(tmp_path, manifest=m))
    assert RunPlan.from_config(_cfg(tmp_path, manifest=m, strict=False)).scenes == lax.scenes
    assert RunPlan.from_config(_cfg(tmp_path, manifest=m, strict=True)).scenes != lax.scenes


@pytest.mark.parametrize("scenes, message", [
    ({"source": "llm", "manifest": "x.jsonl"}, "cannot import a manifest"),
    ({"strict": True}, "strict applies to an imported manifest"),
    ({"source": "gpt"}, "source must be one of template, llm"),
    ({"source": "llm", "llm": {"backend": "openai"}}, "llm.backend must be one of anthropic, gemini"),
    ({"source": "llm", "llm": {"budget_usd": -1}}, "llm.budget_usd must be a number >= 0"),
    ({"source": "llm", "llm": {"max_attempts": 0}}, "llm.max_attempts"),
    ({"source": "llm", "llm": {"temperature": 0}}, r"llm: unknown keys \['temperature'\]"),
])
def test_bad_source_settings_are_config_errors(tmp_path, scenes, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(tmp_path, **scenes)


def test_the_llm_settings_survive_run_json(tmp_path):
    cfg = _cfg(tmp_path, **LLM | {"llm": {**LLM["llm"], "budget_usd": 2.5}})
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.scenes.llm.budget_usd == 2.5 and cfg.scenes.llm.max_attempts == 2


# -- the projection and the preflight ----------------------------------------------------------------
def test_the_projection_calls_no_model_and_says_so(tmp_path, monkeypatch):
    provider_env(monkeypatch)

    def never(prompt: str) -> str:
        raise AssertionError("the projection called the script writer's model")

    api = ProviderAPI(never, input_tokens=0, output_tokens=0)
    _on(api, monkeypatch)
    cfg = _cfg(tmp_path, **LLM)
    p = project(cfg, LocalStore(cfg.store.root))
    assert api.requests == []
    assert len(p.audio.scenes) == 2 * N_PAIRS and "no model was called" in p.audio.basis
    scripts = next(c for c in p.calls if c.stage == "scenes (scripts)")
    assert scripts.calls == N_PAIRS and scripts.who == "anthropic/claude-sonnet-4-5" and scripts.usd > 0
    assert all(c.stage != "scenes (scripts)" for c in project(replace(cfg, scenes=replace(
        cfg.scenes, source="template")), LocalStore(cfg.store.root)).calls)


def test_the_preflight_refuses_source_llm_without_the_backends_key(tmp_path, monkeypatch):
    for k in KEYS:
        monkeypatch.delenv(k, raising=False)
    cfg = _cfg(tmp_path, **LLM)
    store = LocalStore(cfg.store.root)
    missing = ("scenes.llm.backend=anthropic: no API key: set ANTHROPIC_API_KEY in the environment (keys are read "
               "from the environment only); needed by the scenes stage (scenes.source=llm writes the scripts)")
    assert problems(cfg, store, ["scenes"]) == [missing]
    assert problems(cfg, store, ["synth"]) == []  # only the stage that calls it needs it
    gemini = _cfg(tmp_path, **LLM | {"llm": {"backend": "gemini"}})
    assert "set GEMINI_API_KEY or GOOGLE_API_KEY" in problems(gemini, store, ["scenes"])[0]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-real-key")
    assert problems(cfg, store, ["scenes"]) == []
    assert problems(_cfg(tmp_path, n_pairs=N_PAIRS), store, ["scenes"]) == []  # templates need no key


def test_the_preflight_names_a_missing_prompt_file(tmp_path):
    cfg = _cfg(tmp_path, **LLM | {"llm": {"prompts_dir": str(tmp_path / "nowhere")}})
    (found,) = problems(cfg, LocalStore(cfg.store.root), ["scenes"])
    assert found.startswith(f"scenes.llm.prompt={tmp_path / 'nowhere' / PROMPT}: no such file")


# -- strict imports ------------------------------------------------------------------------------------
def test_strict_refuses_an_imported_scene_the_lax_import_accepts(tmp_path):
    """The gold answer is no longer said before T: the form is fine, the content (support) is not."""
    m = _manifest(tmp_path / "scenes.jsonl", unsupported=True)
    store = LocalStore(tmp_path / "store")
    lax = _cfg(tmp_path, manifest=str(m))
    lax_set = SceneSet.read(store, RunPlan.from_config(lax).layout, run_stage("scenes", lax, store))
    assert len(lax_set.scenes) == 2 and lax_set.invalid == {}
    strict = _cfg(tmp_path, manifest=str(m), strict=True)
    with pytest.raises(Exception, match="no valid scene"):
        run_stage("scenes", strict, store)
    plan = RunPlan.from_config(strict)
    invalid = get_json(store, plan.layout.file(plan.scenes, "invalid.json"))
    assert set(invalid) == {s.scene_id for s in lax_set.scenes}
    assert all("[rule support]" in why for why in invalid.values()), invalid


def test_make_corpus_takes_a_seed(tmp_path, capsys):
    from harness.scenes.corpus import main

    for seed in (5, 6):
        assert main(["--n-pairs", "2", "--seed", str(seed), "--out", str(tmp_path / str(seed))]) == 0
    stats = json.loads((tmp_path / "5" / "corpus_stats.json").read_text())
    assert stats["source"]["generator"]["seed"] == 5 and stats["n_pairs"] == 2
    assert (tmp_path / "5" / "scenes.jsonl").read_text() != (tmp_path / "6" / "scenes.jsonl").read_text()
    with pytest.raises(SystemExit):
        main(["--llm", "anthropic", "--manifest", str(tmp_path / "5" / "scenes.jsonl")])
    assert "cannot be combined with --manifest" in capsys.readouterr().err


def test_a_run_started_before_these_settings_resumes(tmp_path):
    """run.json written before scenes.source / strict / llm existed: their defaults are not a change."""
    from jobs import _entry

    cfg = _cfg(tmp_path, n_pairs=N_PAIRS)
    store = LocalStore(cfg.store.root)
    old = cfg.to_dict()
    old["scenes"] = {k: v for k, v in old["scenes"].items() if k not in ("source", "strict", "llm")}
    store.put(RunPlan.from_config(cfg).layout.run_manifest(), json.dumps({"config": old}).encode())
    _entry.same_run(cfg, store, "jobs.pipeline")  # resumes
    with pytest.raises(SystemExit):  # scripting it instead is other scenes: a new run
        _entry.same_run(replace(cfg, scenes=replace(cfg.scenes, source="llm")), store, "jobs.pipeline")


def test_the_script_calls_are_a_row_of_the_api_spend(tmp_path, monkeypatch):
    from harness.pricing import load_prices, spend_rows

    provider_env(monkeypatch)
    _on(ProviderAPI(script, input_tokens=2000, output_tokens=800), monkeypatch)
    cfg = _cfg(tmp_path, **LLM)
    store = LocalStore(cfg.store.root)
    marker = get_json(store, RunPlan.from_config(cfg).layout.marker(run_stage("scenes", cfg, store)))
    (row,) = spend_rows([], {}, None, load_prices(None), scenes=marker)
    assert (row["stage"], row["who"], row["count"], row["tokens_in"]) == ("scenes (scripts)",
                                                                         "anthropic/claude-sonnet-4-5", 3, 6000)
    assert row["usd"] == pytest.approx(3 * (2000 * 3 + 800 * 15) / 1e6)
    assert spend_rows([], {}, None, load_prices(None), scenes={"scenes": 6, "invalid": 0}) == []  # templates
