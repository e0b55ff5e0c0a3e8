"""A shard with broken inputs: those conversations become errors, the rest complete, the marker is last."""

from __future__ import annotations

import hashlib

import numpy as np

from harness.audio.io import decode, encode
from harness.runtime import stages
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.shard import ShardWorker
from harness.runtime.stages import scenes_stage, synth_stage
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

    worker = ShardWorker(cfg, cfg.models[0], store)
    summary = worker.run("shard-00000", ids)
    assert (summary.ok, summary.error) == (len(ids) - 2, 2)
    marker = get_json(store, plan.layout.marker(plan.layout.shard(plan.infer["silent"], "shard-00000")))
    conv = marker["conversations"]
    assert "cannot decode" in conv[ids[0]]["reason"] and "16000 Hz" in conv[ids[1]]["reason"]
    assert all(conv[s]["status"] == "ok" for s in ids[2:])
    for sid in ids:  # every object the marker names exists with its checksum
        for key, digest in conv[sid]["objects"].items():
            assert hashlib.sha256(store.get(key)).hexdigest() == digest
    # a completed shard is skipped on a second call
    again = worker.run("shard-00000", ids)
    assert again.skipped and (again.ok, again.error) == (summary.ok, summary.error)


def test_scoring_failure_marks_the_conversation_error(tmp_path, monkeypatch):
    """An ASR/judge failure on one conversation is recorded as that conversation's error."""
    def boom(self, *a, **k):
        raise RuntimeError("decoder crashed")

    monkeypatch.setattr(ConversationScorer, "score", boom)
    cfg = RunConfig.from_dict({"run_id": "sc", "scenes": {"n_pairs": 1, "seed": 3, "n4_share": 0.0},
                               "model": {"babble": {"target": "babble"}}, "store": {"root": str(tmp_path)}})
    store = LocalStore(tmp_path)
    scenes_stage(cfg, store)
    synth_stage(cfg, store)
    plan = RunPlan.from_config(cfg)
    ids = sorted(get_json(store, plan.layout.file(plan.synth, "index.json"))["conversations"])
    ShardWorker(cfg, cfg.models[0], store).run("shard-00000", ids)
    segs = {}
    for sid in ids:
        key = plan.layout.conversation(plan.layout.shard(plan.infer["babble"], "shard-00000"), sid, "flac")
        segs[sid] = {"status": "ok", "segments": detect([decode(store.get(key))[0]], 24_000, cfg.vad)[0].tolist()}
    put_json(store, plan.layout.file(plan.vad["babble"], "segments.json"), segs)
    out = stages.score_conversations(cfg, "babble", [(sid, "shard-00000") for sid in ids])
    assert all("decoder crashed" in out["results"][sid][stages.ERROR_KEY] for sid in ids)
