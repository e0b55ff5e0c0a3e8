"""A shard with broken inputs: those conversations become errors, the rest complete, the marker is last;
a model failure that may be transient fails the attempt (nothing committed, retried, then reported);
the stored online probabilities give the offline detector's segments; scoring failures stay local."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from harness.audio.io import encode
from harness.products.infer import CorruptOutput, read_ledger
from harness.products.segments import read_segments, segment_objects
from harness.products.timeline import Timeline
from harness.runtime.config import RunConfig
from harness.runtime.driver import write_objects
from harness.runtime.infer_worker import InferWorker, ModelLoadStalled, longest_first
from harness.runtime.plan import RunPlan
from harness.runtime.runner import ModelFailure, ModelStalled
from harness.scoring.flow import ConversationScorer
from harness.stages import run_stage
from harness.stages.score import ConversationScoring
from harness.stages.vad import segment_stored_probs
from harness.store.base import LocalStore, get_json
from tests.fixtures.runs import SILENT, babble_shard, planned, stages_to_synth, tiny_config


def test_corrupt_and_wrong_rate_clips_fail_their_conversations(tmp_path):
    cfg = tiny_config(tmp_path, "shard", SILENT, n_pairs=2)
    store, plan, ids = stages_to_synth(cfg)
    timeline = Timeline.read(store, plan.layout, plan.synth)
    # clips unique to one conversation: the T turns differ between versions
    t_clip = {sid: timeline.conversations[sid] for sid in ids}
    only = {sid: next(t.clip for t in turns if sum(t in v for v in t_clip.values()) == 1)
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


def _model_run(tmp_path, models: dict[str, dict], **cfg) -> tuple[RunConfig, LocalStore, RunPlan, list[str]]:
    """A run of ``models`` ({name: model settings}) over one synthesised scene pair, each with
    one planned shard ``shard-00000`` of both conversations."""
    cfg = tiny_config(tmp_path, "fail", models, **cfg)
    return cfg, *planned(cfg)


FAULTY = "tests.fixtures.faulty_models"


def test_a_model_failure_fails_the_attempt_and_commits_nothing(tmp_path):
    cfg, store, plan, ids = _model_run(tmp_path, {"crashing": {"target": f"{FAULTY}:CrashingModel"}})
    worker = InferWorker(cfg, cfg.models[0], store)
    with pytest.raises(ModelFailure, match=r"^model crashing: step 3 at 0\.24 s of the run raised RuntimeError: "
                                           r"CUDA out of memory"):
        worker.run("shard-00000", ids)
    shard_prefix = plan.layout.shard(plan.infer["crashing"], "shard-00000")
    assert not store.exists(plan.layout.marker(shard_prefix))
    assert list(store.list(shard_prefix)) == []  # not even a conversation's json: nothing to mistake for a result
    # what rerun-failed runs
    assert read_ledger(store, plan.layout, plan.infer["crashing"], "crashing").missing == ["shard-00000"]


def test_a_stalled_model_fails_the_attempt_and_its_worker_takes_no_more(tmp_path):
    cfg, store, plan, ids = _model_run(tmp_path, {"stalling": {"target": f"{FAULTY}:StallingModel"}},
                                       infer={"step_timeout_s": 0.2})
    worker = InferWorker(cfg, cfg.models[0], store)
    try:
        with pytest.raises(ModelStalled, match=r"^model stalling: step 2 at 0\.16 s of the run did not return "
                                               r"within 0\.2 s \(infer\.step_timeout_s\)"):
            worker.run("shard-00000", ids)
        with pytest.raises(ModelStalled, match=r"^model stalling: fit_streams not started: an earlier call "
                                               r"\(step 2 at 0\.16 s of the run\) never returned"):
            worker.run("shard-00000", ids)
    finally:
        worker.model.release.set()
    assert not store.exists(plan.layout.marker(plan.layout.shard(plan.infer["stalling"], "shard-00000")))


def test_a_load_that_never_returns_fails_the_attempt_naming_the_model_the_time_and_where_it_waits(tmp_path):
    cfg, store, *_ = _model_run(tmp_path, {"hangs": {"target": f"{FAULTY}:HangingLoadModel"}},
                                infer={"load_timeout_s": 0.5})
    with pytest.raises(ModelLoadStalled, match=r"^model hangs: load on cpu did not return within 0\.5 s "
                                               r"\(infer\.load_timeout_s; \d+ s elapsed\), waiting in "
                                               r"wait \(threading\.py:\d+\) <- .*load \(faulty_models\.py:\d+\)"):
        InferWorker(cfg, cfg.models[0], store)  # in an actor: its attempt fails and is retried on a fresh one


def test_a_row_error_in_a_shard_blames_only_its_conversation(tmp_path):
    cfg, store, plan, ids = _model_run(tmp_path, {"tone": {"target": f"{FAULTY}:ToneModel",
                                                           "params": {"fault_step": 4, "rows": [1]}}})
    summary = InferWorker(cfg, cfg.models[0], store).run("shard-00000", ids)
    assert (summary.ok, summary.error, summary.committed) == (1, 1, True)
    conv = read_ledger(store, plan.layout, plan.infer["tone"], "tone").markers["shard-00000"]["conversations"]
    row0, row1 = longest_first(ids, Timeline.read(store, plan.layout, plan.synth))  # the shard's queue order
    assert conv[row0]["status"] == "ok" and set(conv[row0]["objects"]) == {"json", "flac", "probs.npy"}
    assert conv[row1]["status"] == "error" and set(conv[row1]["objects"]) == {"json"}
    assert conv[row1]["reason"] == "model tone step 4 at 0.32 s of stream: decoder failed on stream 1"


def test_room_tone_changes_the_infer_stage_and_is_recorded_in_run_json(tmp_path):
    """What the model hears changes with the room tone: a new infer prefix (synthesis is reused)."""
    from harness.runtime.manifest import write_run_manifest

    def cfg(**protocol):
        return tiny_config(tmp_path, "rt", SILENT, protocol=protocol)

    default, zeros, louder = cfg(), cfg(room_tone="zeros"), cfg(room_tone_dbfs=-60.0)
    plans = [RunPlan.from_config(c) for c in (default, zeros, louder)]
    assert len({p.synth for p in plans}) == 1 and len({p.infer["silent"] for p in plans}) == 3
    stored = write_run_manifest(zeros, LocalStore(tmp_path))
    proto = stored["config"]["protocol"]
    assert (proto["room_tone"], proto["room_tone_dbfs"]) == ("zeros", -70.0)
    assert RunConfig.from_dict(stored["config"]) == zeros


def test_corrupt_output_is_detected_by_its_checksum(tmp_path):
    _, store, _, recs = babble_shard(tmp_path, "corrupt")
    entry = next(iter(recs.values()))
    store.put(entry.objects["flac"]["key"], b"bit rot")
    with pytest.raises(CorruptOutput, match="checksum"):
        entry.read(store, "flac")


def test_scoring_failure_marks_the_conversation_error(tmp_path, monkeypatch):
    """An ASR/judge failure on one conversation is recorded as that conversation's error."""
    def boom(self, *a, **k):
        raise RuntimeError("decoder crashed")

    monkeypatch.setattr(ConversationScorer, "score", boom)
    cfg, store, plan, recs = babble_shard(tmp_path, "sc")
    ids = sorted(recs)
    segs = {sid: seg for sid, (seg, _) in zip(ids, segment_stored_probs(cfg, store, [recs[s] for s in ids]),
                                              strict=True)}
    write_objects(store, plan.layout, plan.vad["babble"], segment_objects(segs))
    out = ConversationScoring(cfg).score("babble", [(sid, recs[sid]) for sid in ids])
    assert all(not w.ok and "decoder crashed" in w.reason for w in out["windows"].values())


def test_rerunning_a_shard_reproduces_its_outputs(tmp_path):
    """Per-conversation seeds depend on (run seed, conversation id) only: a shard run again
    elsewhere writes byte-identical outputs (docs/reproducibility.md)."""
    a = babble_shard(tmp_path / "a", "rep")[3]
    b = babble_shard(tmp_path / "b", "rep")[3]
    digests = [{sid: {k: o["sha256"] for k, o in e.objects.items() if k != "json"} for sid, e in recs.items()}
               for recs in (a, b)]
    assert digests[0] == digests[1] and all(len(d) == 2 for d in digests[0].values())


def test_a_corrupt_stored_output_fails_only_its_conversation_in_vad(tmp_path):
    cfg, store, plan, recs = babble_shard(tmp_path, "vadcorrupt")
    bad, good = sorted(recs)
    store.put(recs[bad].objects["probs.npy"]["key"], b"bit rot")
    run_stage("vad", cfg, store)
    segs = read_segments(store, plan.layout, plan.vad["babble"])
    assert not segs[bad].ok and "CorruptOutput" in segs[bad].reason and "checksum" in segs[bad].reason
    assert segs[good].ok and len(segs[good].segments)


def test_an_actor_given_a_gpu_without_usable_cuda_fails_unless_cpu_is_intended(tmp_path, monkeypatch):
    # before: it loaded on CPU silently and booked GPU-hours (issue 8 item 7, "Resources")
    import torch

    from harness.models.baselines import SilentModel
    from harness.runtime.shard import NoUsableCuda

    devices: list[str] = []
    monkeypatch.setattr(SilentModel, "load", lambda self, device: devices.append(device))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    store = LocalStore(tmp_path)

    def worker(num_gpus: float, allow_cpu: bool = False) -> InferWorker:
        cfg = tiny_config(tmp_path, "cuda", {"silent": {"target": "silent", "num_gpus": num_gpus}},
                          infer={"allow_cpu_for_gpu_actors": allow_cpu})
        return InferWorker(cfg, cfg.models[0], store)

    message = (f"model 'silent' is given num_gpus=1 but torch sees no usable CUDA (CUDA_VISIBLE_DEVICES='3', torch "
               f"{torch.__version__} built for CUDA {torch.version.cuda or 'none'}): it would run on CPU and book "
               "GPU-hours. Check the node's NVIDIA driver and the image's torch build, or set "
               "infer.allow_cpu_for_gpu_actors=true to run it on CPU on purpose")
    with pytest.raises(NoUsableCuda, match=f"^{re.escape(message)}$"):
        worker(1)
    assert devices == []  # nothing was loaded
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(NoUsableCuda, match=r"\(CUDA_VISIBLE_DEVICES=unset, torch "):
        worker(0.5)
    worker(1, allow_cpu=True)  # CPU on purpose
    worker(0)  # a CPU model never needs CUDA
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    worker(1)
    assert devices == ["cpu", "cpu", "cuda"]


def test_device_hours_book_a_fractional_gpu_share_and_a_cpu_actor_as_one_device():
    from harness.runtime.shard import device_hours

    assert device_hours(3600, 0.25) == 0.25  # four replicas share one GPU: an hour each books one GPU-hour
    assert device_hours(1800, 2) == 1.0
    assert device_hours(3600, 0) == 1.0
