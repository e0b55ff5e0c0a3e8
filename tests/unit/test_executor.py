"""The infer executor on real Ray actors: GPU pinning, a killed actor, failing shards, the budget.

Ray runs locally with 4 logical GPUs (``ray.init(num_gpus=4)``); the workers are
:class:`~harness.runtime.simulate.NullWorker` variants that write real shard outputs and
markers to a real store without streaming audio.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict

import pytest

from harness.runtime.config import RunConfig
from harness.runtime.executor import ray_session, run_shards
from harness.runtime.ledger import read_ledger
from harness.runtime.plan import RunPlan
from harness.runtime.shard import read_output
from harness.runtime.simulate import NullWorker
from harness.store.base import LocalStore, get_json, put_json
from tests.fixtures import executor_workers

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_gpus(tmp_path_factory):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = tmp_path_factory.mktemp("ray")
    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, _temp_dir=str(tmp), logging_level="WARNING")
    yield
    ray.shutdown()


def _setup(tmp_path, n_shards=8, per_shard=4, num_gpus=1, params=None, budget=None, actors=None, **cluster):
    cfg = RunConfig.from_dict({
        "run_id": "ex", "store": {"root": str(tmp_path / "store")},
        "model": {"null": {"target": "null", "num_gpus": num_gpus, "num_cpus": 0.5,
                           "params": {"seconds_per_conversation": 0.02, **(params or {})}}},
        "infer": {"shard_size": per_shard, "actors_per_model": actors},
        "cluster": {"num_gpus": 4, **cluster}, "budget": budget or {}})
    store = LocalStore(tmp_path / "store")
    plan = RunPlan.from_config(cfg)
    shards = {f"shard-{i:05d}": [f"s{i:03d}-{j}" for j in range(per_shard)] for i in range(n_shards)}
    put_json(store, plan.layout.file(plan.infer["null"], "plan.json"), shards)
    return cfg, store, plan, shards


def test_one_actor_per_gpu_each_sees_only_its_own_device(ray_gpus, tmp_path):
    cfg, store, plan, shards = _setup(tmp_path, n_shards=12)
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=NullWorker)
    assert not report.failed and len(report.done) == 12
    by_actor = defaultdict(set)
    for s in report.done:
        by_actor[s.actor].add(s.devices)
    assert len(by_actor) == 4  # actors_per_model null: one per logical GPU
    seen = [devs.pop() for devs in by_actor.values() if len(devs) == 1]
    assert sorted(seen) == ["0", "1", "2", "3"]  # each actor always its own single GPU
    marker = get_json(store, plan.layout.marker(plan.layout.shard(plan.infer["null"], "shard-00000")))
    assert marker["devices"] in {"0", "1", "2", "3"}


def test_actor_killed_mid_shard_is_retried_and_partial_output_is_never_read(ray_gpus, tmp_path):
    flags = tmp_path / "flags"
    flags.mkdir()
    cfg, store, plan, shards = _setup(tmp_path, n_shards=3, actors=1,
                                      params={"crash_shard": "shard-00001", "flag_dir": str(flags)})
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=executor_workers.CrashOnceWorker)
    assert not report.failed and sorted(s.shard_id for s in report.done) == sorted(shards)
    led = read_ledger(store, plan, "null")
    assert not led.missing
    lay = plan.layout
    shard_prefix = lay.shard(plan.infer["null"], "shard-00001")
    dead_attempt = (flags / f"crashed-{shard_prefix.replace('/', '_')}").read_text()
    marker = led.markers["shard-00001"]
    assert marker["attempt"] != dead_attempt
    # the dead attempt left half its outputs under its own prefix; the marker never names them
    dead = list(store.list(lay.attempt(shard_prefix, dead_attempt)))
    assert len(dead) == len(shards["shard-00001"]) // 2
    named = {o["key"] for e in marker["conversations"].values() for o in e["objects"].values()}
    assert named and not named & set(dead)
    for entry in marker["conversations"].values():
        assert get_json(store, entry["objects"]["json"]["key"])["status"] == "ok"
        assert read_output(store, entry, "json")


def test_shard_failing_every_attempt_is_reported_with_its_reason(ray_gpus, tmp_path):
    cfg, store, plan, shards = _setup(tmp_path, n_shards=4, actors=2, params={"raise_shard": "shard-00002"},
                                      shard_attempts=3)
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=executor_workers.RaisingWorker)
    assert set(report.failed) == {("null", "shard-00002")}
    assert "object store unreachable" in report.failed[("null", "shard-00002")]
    led = read_ledger(store, plan, "null")
    assert led.missing == ["shard-00002"] and len(led.failures["shard-00002"]) == 3
    assert "object store unreachable" in led.failed["shard-00002"]
    assert led.spent_hours > 0  # failed attempts are spend too


def test_budget_stops_cleanly_and_the_books_match(ray_gpus, tmp_path):
    # each shard sleeps 4 x 0.05 s = 0.2 s on one GPU ~ 5.6e-5 device-hours
    cfg, store, plan, shards = _setup(tmp_path, n_shards=12, actors=2, params={"seconds_per_conversation": 0.05},
                                      budget={"gpu_hours": 2.5e-4})
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=NullWorker)
    assert report.budget_stop and "budget.gpu_hours" in report.budget_stop
    led = read_ledger(store, plan, "null")
    done = {s.shard_id for s in report.done}
    assert 0 < len(done) < 12
    assert set(led.markers) == done and set(led.missing) == {s for _, s in report.not_started}
    assert led.spent_hours == pytest.approx(report.spent_hours)
    # the stop is taken before a shard whose projected cost would exceed the budget
    assert led.spent_hours <= 2.5e-4 + 2 * max(m["device_hours"] for m in led.markers.values())


def test_completed_shards_are_skipped_and_cost_nothing(ray_gpus, tmp_path):
    cfg, store, plan, shards = _setup(tmp_path, n_shards=4, actors=2)
    with ray_session(cfg):
        first = run_shards(cfg, store, {"null": shards}, factory=NullWorker)
        again = run_shards(cfg, store, {"null": shards}, factory=NullWorker)
    assert all(s.skipped for s in again.done) and again.spent_hours == 0
    led = read_ledger(store, plan, "null")
    assert {m["attempt"] for m in led.markers.values()} == {s.attempt for s in first.done}


def test_a_duplicate_attempt_cannot_overwrite_the_committed_one(tmp_path):
    cfg, store, plan, shards = _setup(tmp_path, n_shards=1)
    worker = NullWorker(cfg, cfg.models[0], store)
    first = worker.run("shard-00000", shards["shard-00000"])
    real_exists = store.exists
    store.exists = lambda key: False if key.endswith("_SUCCESS.json") else real_exists(key)  # a racing duplicate
    second = worker.run("shard-00000", shards["shard-00000"])
    store.exists = real_exists
    assert first.committed and not second.committed and second.attempt != first.attempt
    marker = read_ledger(store, plan, "null").markers["shard-00000"]
    assert marker["attempt"] == first.attempt
    entry = next(iter(marker["conversations"].values()))
    data = store.get(entry["objects"]["json"]["key"])
    assert hashlib.sha256(data).hexdigest() == entry["objects"]["json"]["sha256"]


def test_a_model_that_cannot_load_fails_its_shards_with_the_loader_error(ray_gpus, tmp_path):
    cfg, store, plan, shards = _setup(tmp_path, n_shards=2, actors=1, shard_attempts=2, max_restarts=0,
                                      max_task_retries=0)
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=executor_workers.BrokenLoadWorker)
    assert set(report.failed) == {("null", s) for s in shards}
    for reason in report.failed.values():
        assert reason.startswith("ActorDiedError") and "RuntimeError: weights not found: kyutai/nothing" in reason
    assert all(len(v) == 2 for v in read_ledger(store, plan, "null").failures.values())
