"""The infer executor on real Ray actors: GPU pinning, a killed actor, failing shards, the budget.

Ray runs locally with 4 logical GPUs (``ray.init(num_gpus=4)``); the workers are
:class:`~harness.runtime.simulate.NullWorker` variants that write real shard outputs and
markers to a real store without streaming audio.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
import ray

from harness.products.infer import read_ledger
from harness.runtime.config import RunConfig
from harness.runtime.executor import UnmetResources, ray_session, run_shards
from harness.runtime.plan import RunPlan
from harness.runtime.simulate import NullWorker
from harness.runtime.status import run_status
from harness.store.base import LocalStore, get_json, put_json
from tests.fixtures import executor_workers
from tests.fixtures.runs import local_cluster, null_run, planned, tiny_config


@pytest.fixture(scope="module")
def ray_gpus():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, _temp_dir=tmp, logging_level="WARNING")
    yield
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def _setup(tmp_path, n_shards=8, per_shard=4, num_gpus=1, params=None, budget=None, actors=None, **cluster):
    """One ``null`` model whose conversations take 20 ms each (``params`` add to its settings)."""
    return null_run(tmp_path / "store", {"null": {"seconds_per_conversation": 0.02, **(params or {})}}, n_shards,
                    per_shard, num_gpus, actors, budget, **cluster)


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
    led = read_ledger(store, plan.layout, plan.infer["null"], "null")
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
    for entry in led.entries().values():
        assert entry.ok and entry.read(store, "json")  # through the checksum


def test_shard_failing_every_attempt_is_reported_with_its_reason(ray_gpus, tmp_path):
    spent = {"openai/gpt-realtime": {"provider": "openai", "model": "gpt-realtime", "count": 2,
                                     "tokens": {"input_audio": 500, "output_audio": 300}}}
    cfg, store, plan, shards = _setup(tmp_path, n_shards=4, actors=2,
                                      params={"raise_shard": "shard-00002", "usage": spent}, shard_attempts=3)
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=executor_workers.RaisingWorker)
    assert set(report.failed) == {("null", "shard-00002")}
    assert "object store unreachable" in report.failed[("null", "shard-00002")]
    led = read_ledger(store, plan.layout, plan.infer["null"], "null")
    assert led.missing == ["shard-00002"] and len(led.failures["shard-00002"]) == 3
    assert "object store unreachable" in led.failed["shard-00002"]
    assert led.spent_hours > 0  # failed attempts are spend too
    # and so is the API usage the worker said each failed attempt had spent (through Ray's exception)
    assert led.failed_usage["openai/gpt-realtime"]["count"] == 6 and led.failed_usage_unknown == 0
    assert led.failed_usage["openai/gpt-realtime"]["tokens"] == {"input_audio": 1500, "output_audio": 900}


def _models_setup(tmp_path, models, n_shards, budget, actors=None, per_shard=2):
    """A run of several ``models`` ({name: device-hours per shard}), each with ``n_shards`` stored shards."""
    return null_run(tmp_path / "store", {name: {"device_hours": cost} for name, cost in models.items()}, n_shards,
                    per_shard, actors=actors, budget=budget)


def _bounded(*args, **kwargs):
    """``run_shards(*args, **kwargs)`` in a thread: the test fails, instead of hanging the suite,
    when the call does not return within 300 s (the hang guard of a budget stop)."""
    out: dict = {}

    def call() -> None:
        try:
            out["report"] = run_shards(*args, **kwargs)
        except BaseException as e:  # re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(300)
    assert not t.is_alive(), "run_shards did not return: the budget stop hangs"
    if "error" in out:
        raise out["error"]
    return out["report"]


def _released(resource: str, total: float) -> bool:
    """Bounded poll: every actor of the call is gone once Ray has all of ``resource`` free again
    (``ray.kill`` is asynchronous)."""
    for _ in range(300):
        if ray.available_resources().get(resource, 0.0) == total:
            return True
        time.sleep(0.1)
    return False


def test_budget_stop_with_two_models_and_waiting_actors_returns_and_frees_every_actor(ray_gpus, tmp_path):
    # 4 logical GPUs, 4 actors per model at 1 GPU each: model b's actors wait for a's GPUs.
    # Every shard costs 1e-3 device-hours and is estimated so; budget 5.5e-3. In the first
    # round a's shards 0-3 (4e-3 in flight) and b's shard 0 (5e-3) start; b's shard 1 would make
    # 6e-3 with the shards in flight: refused, nothing else starts. b's shard 0 can only run once
    # a's idle actors are stopped (before the fix they held the GPUs and the call never returned).
    cfg, store, plan, shards = _models_setup(tmp_path, {"a": 1e-3, "b": 1e-3}, n_shards=6,
                                             budget={"gpu_hours": 5.5e-3})
    with ray_session(cfg):
        report = _bounded(cfg, store, {"a": shards, "b": shards}, shard_estimates={"a": 1e-3, "b": 1e-3},
                            factory=executor_workers.FixedCostWorker)
        assert _released("GPU", 4.0)
    assert sorted((s.model, s.shard_id) for s in report.done) == [
        ("a", "shard-00000"), ("a", "shard-00001"), ("a", "shard-00002"), ("a", "shard-00003"),
        ("b", "shard-00000")]
    assert sorted(report.not_started) == [("a", "shard-00004"), ("a", "shard-00005")] + [
        ("b", f"shard-{i:05d}") for i in range(1, 6)]
    assert report.budget_stop == ("budget.gpu_hours 0.0055: 0.0000 device-hours spent, "
                                  "0.0060 projected with the next shard")
    assert report.spent_hours == pytest.approx(5e-3)
    for name, done in (("a", 4), ("b", 1)):
        led = read_ledger(store, plan.layout, plan.infer[name], name)
        assert len(led.markers) == done and led.spent_hours == pytest.approx(done * 1e-3)


def test_budget_counts_shards_in_flight_before_starting_one(ray_gpus, tmp_path):
    # one model, 2 actors, 1e-3 device-hours per shard (estimate and actual), budget 4.5e-3:
    # spent + in flight + next <= 4.5e-3 admits exactly 4 shards whatever order they finish in;
    # ignoring the shards in flight would start a 5th (spent 3e-3 + 1e-3 with one still running).
    cfg, store, plan, shards = _models_setup(tmp_path, {"a": 1e-3}, n_shards=8, actors=2,
                                             budget={"gpu_hours": 4.5e-3})
    with ray_session(cfg):
        report = _bounded(cfg, store, {"a": shards}, shard_estimates={"a": 1e-3},
                            factory=executor_workers.FixedCostWorker)
    assert sorted(s.shard_id for s in report.done) == [f"shard-{i:05d}" for i in range(4)]
    assert sorted(report.not_started) == [("a", f"shard-{i:05d}") for i in range(4, 8)]
    led = read_ledger(store, plan.layout, plan.infer["a"], "a")
    assert set(led.markers) == {s.shard_id for s in report.done}
    assert set(led.missing) == {s for _, s in report.not_started}
    assert led.spent_hours == pytest.approx(report.spent_hours) == pytest.approx(4e-3)


def test_a_model_without_an_estimate_runs_one_calibration_shard_under_a_budget(ray_gpus, tmp_path):
    # no estimate yet: shard 0 runs alone (its cost is unknown); then 1e-3 is known, shard 1
    # starts (2e-3 projected) and shard 2 would make 3e-3 > 2.5e-3 with shard 1 in flight.
    # Without the calibration rule both actors would start at an estimate of 0.
    cfg, store, _, shards = _models_setup(tmp_path, {"a": 1e-3}, n_shards=6, actors=2,
                                          budget={"gpu_hours": 2.5e-3})
    with ray_session(cfg):
        report = _bounded(cfg, store, {"a": shards}, factory=executor_workers.FixedCostWorker)
    assert sorted(s.shard_id for s in report.done) == ["shard-00000", "shard-00001"]
    assert sorted(report.not_started) == [("a", f"shard-{i:05d}") for i in range(2, 6)]
    assert report.spent_hours == pytest.approx(2e-3)


def test_overshoot_is_the_in_flight_shards_spend_beyond_their_estimates_and_status_shows_it(
        ray_gpus, tmp_path):
    # estimated 1e-3 per shard, each really costs 2e-3; budget 2.5e-3, 2 actors: shards 0 (1e-3
    # projected) and 1 (2e-3) start together, shard 2 (3e-3) is refused; both run to the end:
    # spent 4e-3: overshoot 4e-3 - 2.5e-3 = 1.5e-3, within the bound 2 x (2e-3 - 1e-3) of the
    # in-flight shards' spend beyond their estimates.
    cfg, store, _, shards = _models_setup(tmp_path, {"a": 2e-3}, n_shards=4, actors=2,
                                          budget={"gpu_hours": 2.5e-3})
    with ray_session(cfg):
        report = _bounded(cfg, store, {"a": shards}, shard_estimates={"a": 1e-3},
                            factory=executor_workers.FixedCostWorker)
    assert sorted(s.shard_id for s in report.done) == ["shard-00000", "shard-00001"]
    assert report.spent_hours == pytest.approx(4e-3)
    assert ("budget 0.0025 device-h (overshoot 0.0015 device-h: shards in flight when the budget was reached "
            "ran to the end)") in run_status(cfg, store)


def test_an_unpriced_hosted_model_starts_no_shard_under_a_usd_budget(ray_gpus, tmp_path):
    cfg = tiny_config(tmp_path / "store", "ex", {"hosted": {"target": "openai_realtime", "num_gpus": 0, "num_cpus": 0.5,
                                                           "params": {"model": "gpt-realtime-9"}}},  # in no price table
                      cluster={"num_gpus": 4}, budget={"usd": 100.0, "usd_per_gpu_hour": 1.0})
    store, plan = LocalStore(tmp_path / "store"), RunPlan.from_config(cfg)
    shards = {"shard-00000": ["a"], "shard-00001": ["b"]}
    put_json(store, plan.layout.file(plan.infer["hosted"], "plan.json"), shards)
    with ray_session(cfg):
        report = _bounded(cfg, store, {"hosted": shards}, factory=NullWorker)
    assert not report.done and sorted(report.not_started) == [("hosted", s) for s in shards]
    assert "the API usage of hosted is unpriced (openai/gpt-realtime-9 is not in prices v" in report.budget_stop


def test_completed_shards_are_skipped_and_cost_nothing(ray_gpus, tmp_path):
    cfg, store, plan, shards = _setup(tmp_path, n_shards=4, actors=2)
    with ray_session(cfg):
        first = run_shards(cfg, store, {"null": shards}, factory=NullWorker)
        again = run_shards(cfg, store, {"null": shards}, factory=NullWorker)
    assert all(s.skipped for s in again.done) and again.spent_hours == 0
    led = read_ledger(store, plan.layout, plan.infer["null"], "null")
    assert {m["attempt"] for m in led.markers.values()} == {s.attempt for s in first.done}


def test_a_model_that_cannot_load_fails_its_shards_with_the_loader_error(ray_gpus, tmp_path):
    cfg, store, plan, shards = _setup(tmp_path, n_shards=2, actors=1, shard_attempts=2, max_restarts=0,
                                      max_task_retries=0)
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=executor_workers.BrokenLoadWorker)
    assert set(report.failed) == {("null", s) for s in shards}
    for reason in report.failed.values():
        assert reason.startswith("ActorDiedError") and "RuntimeError: weights not found: kyutai/nothing" in reason
    assert all(len(v) == 2 for v in read_ledger(store, plan.layout, plan.infer["null"], "null").failures.values())


def test_a_request_no_node_can_hold_fails_at_once_naming_the_model(ray_gpus, tmp_path):
    # the cluster has 4 logical GPUs on one node; 5 per actor would wait forever
    cfg, store, _, shards = _setup(tmp_path, n_shards=1, num_gpus=5)
    with ray_session(cfg), pytest.raises(UnmetResources, match=r"model 'null' asks for num_cpus=0\.5, num_gpus=5 "
                                                                r"per actor, but no node of the Ray cluster has that "
                                                                r"\(nodes: 4 CPU, 4 GPU\)"):
        run_shards(cfg, store, {"null": shards}, factory=NullWorker)


def test_a_failed_attempt_is_retried_on_a_fresh_actor(ray_gpus, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    cfg, store, plan, shards = _setup(tmp_path, n_shards=1, actors=1, shard_attempts=2,
                                      params={"pid_dir": str(pids), "raise_shard": "shard-00000"})
    with ray_session(cfg):
        report = run_shards(cfg, store, {"null": shards}, factory=executor_workers.PidWorker)
        assert _released("GPU", 4.0)
    assert "injected stall" in report.failed[("null", "shard-00000")]
    assert len(list(pids.iterdir())) == 2  # two attempts, two actor processes
    assert len(read_ledger(store, plan.layout, plan.infer["null"], "null").failures["shard-00000"]) == 2


DRIVER = """
import sys
from harness.runtime.config import RunConfig
from harness.runtime.executor import ray_session, run_shards
from harness.runtime.plan import RunPlan
from harness.store.base import LocalStore, put_json
from jobs._entry import run_until_stopped
from tests.fixtures.executor_workers import PidWorker

root, ray_tmp, pids = sys.argv[1:]
params = {"pid_dir": pids, "block_shard": "shard-00000"}
cfg = RunConfig.from_dict({"run_id": "term", "store": {"root": root},
                           "model": {"null": {"target": "null", "params": params}},
                           "infer": {"actors_per_model": 1}, "cluster": {"num_cpus": 2, "ray_tmp": ray_tmp}})
store = LocalStore(root)
plan = RunPlan.from_config(cfg)
shards = {"shard-00000": ["s0"]}
put_json(store, plan.layout.file(plan.infer["null"], "plan.json"), shards)


def go(cfg, store):
    with ray_session(cfg):
        run_shards(cfg, store, {"null": shards}, factory=PidWorker)


run_until_stopped(go, cfg, store)  # the jobs' own path: one message, exit status 128 + signal
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_driver_stopped_by_sigterm_leaves_no_actor_behind(tmp_path):
    import signal
    import subprocess
    import sys

    pids = tmp_path / "pids"
    pids.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="h3r")  # Ray's socket paths must stay short
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "store"), ray_tmp, str(pids)],
                              cwd=Path(__file__).resolve().parents[2], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # bounded poll: the actor has started the blocking shard
            if any(pids.iterdir()) or driver.poll() is not None:
                break
            time.sleep(0.1)
        [pid_file] = list(pids.iterdir())
        actor_pid = int(pid_file.name)
        assert _alive(actor_pid)
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=120)
        assert driver.returncode == 143, err[-3000:]  # 128 + SIGTERM (Ray's own handler would abort: 134)
        assert "interrupted (SIGTERM): completed stages and shards are kept" in err and "Traceback" not in err
        # the attempt that was running is booked: a failure record with its spend, so status and the budget count it
        params = {"pid_dir": str(pids), "block_shard": "shard-00000"}  # the driver's config
        cfg = RunConfig.from_dict({"run_id": "term", "store": {"root": str(tmp_path / "store")},
                                   "model": {"null": {"target": "null", "params": params}}})
        plan = RunPlan.from_config(cfg)
        led = read_ledger(LocalStore(tmp_path / "store"), plan.layout, plan.infer["null"], "null")
        [failure] = led.failures["shard-00000"]
        assert failure["reason"] == "interrupted: the driver was stopped by SIGTERM"
        assert failure["device_hours"] > 0
        for _ in range(600):  # bounded poll: Ray stops the actor's process with the driver
            if not _alive(actor_pid):
                break
            time.sleep(0.1)
        assert not _alive(actor_pid)
    finally:
        if driver.poll() is None:
            driver.kill()


def test_the_executor_retries_a_failed_attempt_then_reports_the_shard(tmp_path):
    """Through Ray and InferWorker: a one-off model failure costs an attempt, not conversations;
    one that recurs leaves a failed shard without a marker, which rerun-failed runs again."""
    flags = tmp_path / "flags"
    flags.mkdir()
    crashing = "tests.fixtures.faulty_models:CrashingModel"
    cfg = tiny_config(tmp_path / "store", "fail", {"flaky": {"target": crashing, "params": {"flag_dir": str(flags)}},
                                                   "broken": {"target": crashing}},
                      infer={"actors_per_model": 1}, cluster={**local_cluster("retry"), "shard_attempts": 2})
    store, plan, ids = planned(cfg)
    with ray_session(cfg):
        report = run_shards(cfg, store, {m: {"shard-00000": ids} for m in ("flaky", "broken")})
    assert [(s.model, s.shard_id, s.ok, s.error) for s in report.done] == [("flaky", "shard-00000", 2, 0)]
    assert list(report.failed) == [("broken", "shard-00000")]
    # the reason names the adapter (ModelInfo.name), the call and the stream time
    assert report.failed[("broken", "shard-00000")] == ("ModelFailure: model crashing: step 3 at 0.24 s of the run "
                                                        "raised RuntimeError: CUDA out of memory. Tried to allocate "
                                                        "2.00 GiB")
    flaky, broken = (read_ledger(store, plan.layout, plan.infer[m], m) for m in ("flaky", "broken"))
    assert not flaky.missing and len(flaky.failures["shard-00000"]) == 1
    assert "CUDA out of memory" in flaky.failures["shard-00000"][0]["reason"]
    assert broken.missing == ["shard-00000"] and len(broken.failures["shard-00000"]) == 2
