"""A shard with broken inputs: those conversations become errors, the rest complete, the marker is last;
the stored online probabilities give the offline detector's segments; scoring failures stay local."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from harness.audio.io import decode, encode
from harness.runtime import stages
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.shard import CorruptOutput, InferWorker, read_output
from harness.runtime.stages import infer_records, scenes_stage, segment_stored_probs, synth_stage
from harness.scoring.flow import ConversationScorer
from harness.store.base import LocalStore, get_json, put_json
from harness.vad.silero import detect


def test_corrupt_and_wrong_rate_clips_fail_their_conversations(tmp_path):
    cfg = RunConfig.from_dict({"run_id": "shard", "scenes": {"n_pairs": 2, "seed": 3, "n4_share": 0.0},
                               "model": {"silent": {"target": "silent"}},
                               "store": {"root": str(tmp_path)}})
    store = LocalStore(tmp_path)
    scenes_stage(cfg, store)
    synth_stage(cfg, store)
    plan = RunPlan.from_config(cfg)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    ids = sorted(index["conversations"])
    # clips unique to one conversation: the T turns differ between versions
    t_clip = {sid: index["conversations"][sid]["turns"] for sid in ids}
    only = {sid: next(t["clip"] for t in turns if sum(t in v for v in t_clip.values()) == 1)
            for sid, turns in t_clip.items()}
    store.put(plan.layout.clip(plan.synth, only[ids[0]]), b"garbage, not FLAC")
    store.put(plan.layout.clip(plan.synth, only[ids[1]]), encode(np.zeros(800, np.float32), 16_000))

    worker = InferWorker(cfg, cfg.models[0], store)
    summary = worker.run("shard-00000", ids)
    assert (summary.ok, summary.error) == (len(ids) - 2, 2)
    marker = get_json(store, plan.layout.marker(plan.layout.shard(plan.infer["silent"], "shard-00000")))
    conv = marker["conversations"]
    assert "cannot decode" in conv[ids[0]]["reason"] and "16000 Hz" in conv[ids[1]]["reason"]
    assert all(conv[s]["status"] == "ok" for s in ids[2:])
    for sid in ids:  # every object the marker names exists, under the attempt's prefix, with its checksum
        kinds = {"json", "flac", "probs.npy"} if conv[sid]["status"] == "ok" else {"json"}
        assert set(conv[sid]["objects"]) == kinds
        for obj in conv[sid]["objects"].values():
            assert f"/attempts/{marker['attempt']}/" in obj["key"]
            assert hashlib.sha256(store.get(obj["key"])).hexdigest() == obj["sha256"]
    # a completed shard is skipped on a second call
    again = worker.run("shard-00000", ids)
    assert again.skipped and (again.ok, again.error) == (summary.ok, summary.error)


def _babble_shard(tmp_path, run_id: str) -> tuple[RunConfig, LocalStore, RunPlan, dict]:
    cfg = RunConfig.from_dict({"run_id": run_id, "scenes": {"n_pairs": 1, "seed": 3, "n4_share": 0.0},
                               "model": {"babble": {"target": "babble"}}, "store": {"root": str(tmp_path)}})
    store = LocalStore(tmp_path)
    scenes_stage(cfg, store)
    synth_stage(cfg, store)
    plan = RunPlan.from_config(cfg)
    ids = sorted(get_json(store, plan.layout.file(plan.synth, "index.json"))["conversations"])
    put_json(store, plan.layout.file(plan.infer["babble"], "plan.json"), {"shard-00000": ids})
    InferWorker(cfg, cfg.models[0], store).run("shard-00000", ids)
    return cfg, store, plan, infer_records(store, plan, "babble")


def test_stored_online_probabilities_give_the_offline_segments(tmp_path):
    """The vad stage post-processes what the scheduler acted on; re-running Silero on the stored
    audio gives the same segments (spec section 4: one causal detector)."""
    cfg, store, _, recs = _babble_shard(tmp_path, "probs")
    ids = sorted(recs)
    stored = segment_stored_probs(cfg, store, [recs[s] for s in ids])
    waves = [decode(read_output(store, recs[s], "flac"))[0] for s in ids]
    offline = [x.tolist() for x in detect(waves, 24_000, cfg.vad)]
    assert stored == offline and all(len(x) > 0 for x in stored)


def test_corrupt_output_is_detected_by_its_checksum(tmp_path):
    _, store, _, recs = _babble_shard(tmp_path, "corrupt")
    entry = next(iter(recs.values()))
    store.put(entry["objects"]["flac"]["key"], b"bit rot")
    with pytest.raises(CorruptOutput, match="checksum"):
        read_output(store, entry, "flac")


def test_scoring_failure_marks_the_conversation_error(tmp_path, monkeypatch):
    """An ASR/judge failure on one conversation is recorded as that conversation's error."""
    def boom(self, *a, **k):
        raise RuntimeError("decoder crashed")

    monkeypatch.setattr(ConversationScorer, "score", boom)
    cfg, store, plan, recs = _babble_shard(tmp_path, "sc")
    ids = sorted(recs)
    segs = {sid: {"status": "ok", "segments": s}
            for sid, s in zip(ids, segment_stored_probs(cfg, store, [recs[s] for s in ids]), strict=True)}
    put_json(store, plan.layout.file(plan.vad["babble"], "segments.json"), segs)
    out = stages.ConversationScoring(cfg).score("babble", [(sid, recs[sid]) for sid in ids])
    assert all("decoder crashed" in out["results"][sid][stages.ERROR_KEY] for sid in ids)


def test_rerunning_a_shard_reproduces_its_outputs(tmp_path):
    """Per-conversation seeds depend on (run seed, conversation id) only: a shard run again
    elsewhere writes byte-identical outputs (docs/reproducibility.md)."""
    a = _babble_shard(tmp_path / "a", "rep")[3]
    b = _babble_shard(tmp_path / "b", "rep")[3]
    digests = [{sid: {k: o["sha256"] for k, o in e["objects"].items() if k != "json"} for sid, e in recs.items()}
               for recs in (a, b)]
    assert digests[0] == digests[1] and all(len(d) == 2 for d in digests[0].values())


def test_a_corrupt_stored_output_fails_only_its_conversation_in_vad(tmp_path):
    cfg, store, plan, recs = _babble_shard(tmp_path, "vadcorrupt")
    bad, good = sorted(recs)
    store.put(recs[bad]["objects"]["probs.npy"]["key"], b"bit rot")
    stages.vad_stage(cfg, store)
    segs = get_json(store, plan.layout.file(plan.vad["babble"], "segments.json"))
    assert segs[bad]["status"] == "error" and "CorruptOutput" in segs[bad]["reason"]
    assert "checksum" in segs[bad]["reason"]
    assert segs[good]["status"] == "ok" and segs[good]["segments"]
