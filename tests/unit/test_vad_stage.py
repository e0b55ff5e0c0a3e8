"""The vad stage at scale (issue 11): re-detection from the stored audio agrees with the online
detector's stored probabilities (within PROB_TOLERANCE, the same segments); the segment and
probability tables in Parquet."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.metrics.outcomes import conversation_outcomes
from harness.products.scenes import SceneSet
from harness.products.segments import read_offline_probabilities
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.stages import run_stage
from harness.stages.vad import detect_outputs, reuses_online_detector, segment_stored_probs
from harness.store.base import get_json
from harness.vad.sweep import sweep_scores
from harness.vad.tables import segment_table
from tests.fixtures.runs import babble_shard, tiny_config
from tests.fixtures.vad_checks import assert_probs_agree, same_decisions


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    return babble_shard(tmp_path_factory.mktemp("vadstage"), "vadstage")


def _redetecting(cfg: RunConfig) -> RunConfig:
    """babble_shard's run with an offline detector that is not the online one: Silero runs again."""
    return tiny_config(cfg.store.root, cfg.run_id, vad={"model": "silero-vad-jit-offline", "batch": 3})


def test_offline_redetection_agrees_with_the_online_probabilities(shard):
    cfg, store, _, recs = shard
    ids = sorted(recs)
    online = segment_stored_probs(cfg, store, [recs[s] for s in ids])
    offline = detect_outputs(cfg, [recs[s] for s in ids])
    assert_probs_agree([p for _, p in offline], [p for _, p in online], rules=cfg.vad.rules, clear=False)
    for (entry, p), (e, q) in zip(offline, online, strict=True):
        if same_decisions(p, q, cfg.vad.rules):
            assert entry.to_dict() == e.to_dict()
    assert all(len(e.segments) for e, _ in offline)


def test_vad_stage_writes_parquet_tables(shard):
    cfg, store, plan, recs = shard
    run_stage("vad", cfg, store)
    lay = plan.layout
    index = get_json(store, lay.file(plan.vad["babble"], "segments.json"))
    table = pq.read_table(io.BytesIO(store.get(lay.file(plan.vad["babble"], "segments.parquet"))))
    assert table.schema.names == ["conversation", "start", "end", "truncated"]
    assert table.schema.field("start").type == pa.int64() and table.schema.field("truncated").type == pa.bool_()
    rows = table.to_pylist()
    for sid, e in index.items():
        mine = [r for r in rows if r["conversation"] == sid]
        assert [[r["start"], r["end"]] for r in mine] == e["segments"]
        assert [r["truncated"] for r in mine] == [False] * (len(mine) - 1) + [e["truncated"]] * bool(len(mine))
    assert len(rows) == sum(len(e["segments"]) for e in index.values()) > 0
    assert not store.exists(lay.file(plan.vad["babble"], "probabilities.parquet"))  # online ones reused

    re_cfg = _redetecting(cfg)
    assert not reuses_online_detector(re_cfg)
    re_plan = RunPlan.from_config(re_cfg)
    assert re_plan.vad["babble"] != plan.vad["babble"]
    run_stage("vad", re_cfg, store)
    re_index = get_json(store, lay.file(re_plan.vad["babble"], "segments.json"))
    probs = read_offline_probabilities(store, lay, re_plan.vad["babble"])
    assert sorted(probs) == sorted(recs) == sorted(re_index) == sorted(index)
    online = {s: recs[s].probs(store) for s in sorted(probs)}
    assert_probs_agree([probs[s] for s in online], list(online.values()), rules=cfg.vad.rules, clear=False)
    for sid, p in online.items():
        if same_decisions(probs[sid], p, cfg.vad.rules):
            assert re_index[sid] == index[sid]


def test_segment_table_of_errors_and_silence():
    t = segment_table({"b": {"status": "ok", "segments": [[10, 20], [40, 90]], "truncated": True},
                       "a": {"status": "ok", "segments": [], "truncated": False},
                       "c": {"status": "error", "reason": "model crashed"}})
    assert t.to_pydict() == {"conversation": ["b", "b"], "start": [10, 40], "end": [20, 90],
                             "truncated": [False, True]}


def test_sweep_reruns_only_the_segmenter_and_matches_scoring_at_the_configured_rules(shard):
    cfg, store, plan, recs = shard
    sweep = {"threshold": [0.3, 0.5, 0.8], "min_silence_s": [0.2, 0.8]}
    sw_cfg = tiny_config(cfg.store.root, cfg.run_id, vad={"sweep": sweep})  # babble_shard's run, swept
    sw_plan = RunPlan.from_config(sw_cfg)
    run_stage("vad", sw_cfg, store)
    rows = pq.read_table(io.BytesIO(store.get(plan.layout.file(sw_plan.vad["babble"], "sweep.parquet")))).to_pylist()
    assert {(r["setting"], r["value"]) for r in rows} == {(k, v) for k, vs in sweep.items() for v in vs}
    # at the configured rules the sweep scores what the score stage would, from segments.json
    index = get_json(store, plan.layout.file(sw_plan.vad["babble"], "segments.json"))
    scenes = SceneSet.read(store, sw_plan.layout, sw_plan.scenes).by_id
    windows = [o for sid, e in index.items()
               for o in conversation_outcomes(scenes[sid], recs[sid].record(store), np.array(e["segments"]),
                                              sw_cfg.protocol, sw_cfg.metrics.yield_deadline_s)]
    expected = {(r["condition"], r["score"]): (r["successes"], r["n"]) for r in sweep_scores(windows)}
    for setting in sweep:
        got = {(r["condition"], r["score"]): (r["successes"], r["n"]) for r in rows
               if r["setting"] == setting and r["value"] == getattr(cfg.vad.rules, setting)}
        assert got == expected
    t = [r for r in rows if r["setting"] == "threshold" and r["score"] == "response_presence"]
    assert sum(r["n"] for r in t) > 0
    # a higher threshold never finds more speech: response presence cannot rise with it
    by_value = {}
    for r in t:
        by_value[r["value"]] = by_value.get(r["value"], 0) + r["successes"]
    assert by_value[0.3] >= by_value[0.5] >= by_value[0.8]
