"""End-to-end: the whole pipeline on real Ray actors, real espeak-ng speech and real Silero VAD
(the session's shared run, ``completed_run``: tests/fixtures/runs.py).

The three baselines have known correct scores (harness/models/baselines.py); a faulty
model and a broken voice check that errors are counted and never scored as silence.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.runtime.plan import RunPlan
from harness.stages import run_pipeline
from harness.store.base import LocalStore, get_json
from tests.fixtures.runs import TINY_SCENES, local_cluster, objects, tiny_config

SCORE_KEYS = ("fresh_onset_response_rate", "silence_preservation", "answering_window_yield",
              "response_presence", "window_response")
EXPECTED = {  # rate per score; None = no eligible event (n = 0)
    "silent": (0.0, 1.0, None, 0.0, 0.0),
    "babble": (0.0, 0.0, None, 1.0, 1.0),
    "oracle": (1.0, 1.0, 1.0, 1.0, 1.0),
}


@pytest.fixture
def run(completed_run):
    return completed_run.cfg, completed_run.store, completed_run.report_key


def test_baselines_get_their_known_scores(run):
    cfg, store, _ = run
    plan = RunPlan.from_config(cfg)
    metrics = get_json(store, plan.layout.file(plan.reduce, "metrics.json"))
    for model, expected in EXPECTED.items():
        for cond in ("explicit", "implicit"):
            got = tuple(metrics[model][cond][k]["rate"] for k in SCORE_KEYS)
            assert got == expected, (model, cond, metrics[model][cond])
            entry = metrics[model][cond]
            assert entry["fresh_onset_response_rate"]["n"] == 3  # one T per scene
            assert entry["answering_window_yield"]["funnel"]["events"] >= 3  # every scene has N4
            acc = entry["conditional_answer_accuracy"]
            # accuracy is over the T requests with speech in the window; its value depends on the
            # offline ASR (docs/asr.md), so only its denominator is known exactly here
            assert acc["n"] == entry["response_presence"]["successes"] and acc["successes"] <= acc["n"]
    babble = metrics["babble"]["explicit"]["answering_window_yield"]["funnel"]
    assert babble["already_speaking_at_q_start"] == babble["events"]  # excluded, not failed
    oracle = metrics["oracle"]["explicit"]["answering_window_yield"]
    assert oracle["n"] == oracle["funnel"]["events"] and oracle["failures"] == {"still_voicing": 0, "resumed": 0}


def test_errors_are_counted_never_scored_as_silence(run):
    cfg, store, _ = run
    plan = RunPlan.from_config(cfg)
    metrics = get_json(store, plan.layout.file(plan.reduce, "metrics.json"))
    errors = get_json(store, plan.layout.file(plan.reduce, "errors.json"))["conversations"]
    # raising: every conversation fails -> every denominator is 0, nothing scored as silent
    for cond in ("explicit", "implicit"):
        r = metrics["raising"][cond]
        assert r["silence_preservation"]["n"] == 0 and r["silence_preservation"]["errors_excluded"] == 3
        assert r["fresh_onset_response_rate"]["n"] == 0
    assert sum(e["model"] == "raising" and "adapter exploded" in e["reason"] for e in errors) == 6
    # nan: every explicit conversation fails with NaN output; the implicit ones are scored
    nan_errors = [e for e in errors if e["model"] == "nan"]
    assert len(nan_errors) == 3 and all("NaN" in e["reason"] for e in nan_errors)
    scored = sum(metrics["nan"][c]["fresh_onset_response_rate"]["n"] for c in ("explicit", "implicit"))
    assert scored == 3
    assert sum(metrics["nan"][c]["silence_preservation"]["errors_excluded"] for c in ("explicit", "implicit")) == 3


def test_report_and_table_written(run):
    cfg, store, report_key = run
    plan = RunPlan.from_config(cfg)
    report = store.get(report_key).decode()
    assert "| oracle | 1.0000 (n=3) |" in report
    assert "adapter exploded" in report
    import pyarrow.parquet as pq

    table = pq.read_table(store.root / plan.layout.file(plan.reduce, "events.parquet"))
    assert set(table.column("model").to_pylist()) == {"silent", "babble", "oracle", "nan"}
    assert set(table.column("kind").to_pylist()) == {"T", "silence", "N4"}
    # babble's occupied windows were transcribed and judged; none is a backchannel
    rows = [r for r in table.to_pylist() if r["model"] == "babble" and r["kind"] == "silence"]
    assert rows and all(r["verdict"] in ("SUBSTANTIVE_INTRUSION", "EMPTY_TRANSCRIPT") for r in rows)
    assert not any(r["silence_preserved"] for r in rows)


def test_rerun_skips_completed_stages_and_writes_nothing_but_its_invocation_record(run, monkeypatch):
    import ray

    cfg, store, report_key = run
    plan = RunPlan.from_config(cfg)
    before = objects(store)
    assert any(k.endswith("_SUCCESS.json") and "/infer/" in k for k in before)  # shard markers, every stage's
    assert not ray.is_initialized()

    def no_ray(*args, **kwargs):
        raise AssertionError("a complete run started Ray")

    monkeypatch.setattr(ray, "init", no_ray)  # nothing to run: Ray is never started (ray_scope)
    assert run_pipeline(cfg, store) == report_key
    after = objects(store)
    [new] = set(after) - set(before)  # this invocation's provenance record (docs/reproducibility.md)
    assert new.startswith(f"{plan.layout.run_id}/invocations/") and new.endswith(".json")
    assert {k: v for k, v in after.items() if k != new} == before  # every object as it was, not even rewritten


def test_changed_vad_setting_reruns_vad_onward_only(run):
    cfg, store, _ = run
    plan = RunPlan.from_config(cfg)
    cfg2 = replace(cfg, models=tuple(m for m in cfg.models if m.name == "oracle"),
                   vad=replace(cfg.vad, rules=replace(cfg.vad.rules, min_silence_s=0.5)))
    plan2 = RunPlan.from_config(cfg2)
    assert plan2.infer["oracle"] == plan.infer["oracle"] and plan2.synth == plan.synth
    assert plan2.vad["oracle"] != plan.vad["oracle"] and plan2.reduce != plan.reduce
    assert plan2.score["oracle"] != plan.score["oracle"]
    before = objects(store)
    run_pipeline(cfg2, store)
    metrics = json.loads(store.get(plan2.layout.file(plan2.reduce, "metrics.json")))
    assert metrics["oracle"]["explicit"]["fresh_onset_response_rate"]["rate"] == 1.0
    # the shared run is not disturbed: nothing it had changed, the new objects are the new versions'
    after = objects(store)
    assert {k: after[k] for k in before} == before
    new = (plan2.vad["oracle"], plan2.score["oracle"], plan2.reduce, f"{plan.layout.run_id}/invocations", "_cache")
    assert not [k for k in set(after) - set(before) if not k.startswith(new)]


def test_failed_synthesis_marks_scene_error(tmp_path):
    from harness.products.scenes import SceneSet
    from harness.stages import run_stage

    cfg = tiny_config(tmp_path / "runs", "e2e", {"silent": {"target": "silent"}}, scenes=TINY_SCENES,
                      cluster=local_cluster("synth"))
    cfg = replace(cfg, tts=replace(cfg.tts, voices={**cfg.tts.voices, "D": "nonexistentvoice"}))
    store = LocalStore(cfg.store.root)
    run_stage("scenes", cfg, store)
    run_stage("synth", cfg, store)
    plan = RunPlan.from_config(cfg)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    scenes = SceneSet.read(store, plan.layout, plan.scenes).scenes
    four_party = {s.scene_id for s in scenes if any(t.speaker == "D" for t in s.turns)}
    three_party = {s.scene_id for s in scenes} - four_party
    assert four_party and three_party  # the demo's n_pairs=3, four_party_share=0.34 gives both
    # exactly the scenes with speaker D fail, each with its reason; the others are synthesised
    assert set(index["errors"]) == four_party
    assert all("synthesis failed" in index["errors"][s] and "nonexistentvoice" in index["errors"][s]
               for s in four_party)
    assert set(index["conversations"]) == three_party


def test_statistics_written_and_consistent(run):
    cfg, store, _ = run
    plan = RunPlan.from_config(cfg)
    st = get_json(store, plan.layout.file(plan.reduce, "statistics.json"))
    pairs = {(t["a"], t["b"], t["metric"]): t for t in st["between_models"]["explicit"]}
    # oracle always has a fresh onset, silent never: 3 discordant scenes, p = 2 * 0.5^3
    t = pairs[("oracle", "silent", "fresh_onset_response_rate")]
    assert (t["n"], t["a_only"], t["b_only"]) == (3, 3, 0) and t["p"] == 0.25
    assert t["m"] == 20  # 5 models -> 10 pairs x 2 metrics, as in the paper
    # accuracy compares only requests where both spoke: silent never speaks
    assert pairs[("oracle", "silent", "conditional_answer_accuracy")]["n"] == 0
    assert pairs[("babble", "oracle", "conditional_answer_accuracy")]["n"] == 3
    boot = {(r["a"], r["b"]): r for r in st["silence_bootstrap"]["explicit"]}
    assert boot[("babble", "silent")]["diff"] == -1.0 and boot[("oracle", "silent")]["hi"] == 0.0
    sweep = st["silence"]["babble"]["explicit"]["threshold_sweep"]["0"]
    assert sweep["occupied"] == sweep["n"] and sweep["rate"] == 0.0
    assert sum(v["n"] for v in st["request_timing"]["bins"]["oracle"].values()) == 6
