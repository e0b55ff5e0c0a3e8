"""A run stopped by its budget half-way, its status, and ``rerun-failed`` finishing it: real job
processes (Hydra entry points), real Ray actors, the local store."""

from __future__ import annotations

from harness.products.infer import read_ledger
from harness.runtime.config import RunConfig
from harness.runtime.manifest import load_run_config
from harness.runtime.plan import RunPlan
from harness.store.base import LocalStore
from tests.fixtures.jobs import job
from tests.fixtures.runs import tiny_config


def test_budget_stop_status_and_rerun_failed(tmp_path):
    where = [f"store.root={tmp_path}", "run_id=budget"]
    first = job("pipeline", *where, "scenes=tiny", "model=[silent]", "infer.shard_size=2",
                "infer.actors_per_model=1", "budget.gpu_hours=1e-9", "budget.usd_per_gpu_hour=2.5")
    assert first.returncode == 3, first.stderr[-3000:]
    assert "the budget leaves 2 shard(s) not started: budget.gpu_hours" in first.stderr
    # the hint names the store override the rerun needs to find this run
    assert f'to continue: make rerun-failed RUN=budget ARGS="store.root={tmp_path}"' in first.stderr
    store = LocalStore(tmp_path)
    cfg = load_run_config(store, RunConfig.from_dict({"run_id": "budget", "model": {"x": {"target": "x"}}}))
    plan = RunPlan.from_config(cfg)
    led = read_ledger(store, plan.layout, plan.infer["silent"], "silent")
    assert len(led.shards) == 3 and len(led.markers) == 1 and len(led.missing) == 2
    assert not store.exists(plan.layout.marker(plan.vad["silent"]))  # nothing after infer ran on partial input
    spent_first = led.spent_hours

    status = job("status", *where, "budget.usd_per_gpu_hour=2.5")
    assert status.returncode == 0, status.stderr[-2000:]
    assert "1/3 shards complete, 0 failed, 2 missing" in status.stdout and "$" in status.stdout
    assert "vad       silent     missing" in status.stdout

    done_attempt = next(iter(led.markers.values()))["attempt"]
    rerun = job("rerun_failed", *where, "budget.gpu_hours=null")  # the run's config comes from its manifest
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "report:" in rerun.stdout
    led = read_ledger(store, plan.layout, plan.infer["silent"], "silent")
    assert not led.missing and done_attempt in {m["attempt"] for m in led.markers.values()}
    assert store.exists(plan.layout.marker(plan.reduce))

    again = job("rerun_failed", *where)  # a finished run: nothing runs, nothing is spent
    assert again.returncode == 0, again.stderr[-3000:]
    led_again = read_ledger(store, plan.layout, plan.infer["silent"], "silent")
    assert led_again.spent_hours == led.spent_hours > spent_first
    assert len(list(store.list(plan.layout.run_manifest().rsplit("/", 1)[0] + "/invocations"))) == 3


def test_pipeline_on_s3_with_injected_faults_completes_and_loses_nothing(tmp_path):
    """The whole pipeline against S3 over real HTTP (moto) behind a proxy failing 10 % of requests."""
    from harness.runtime.status import run_status
    from harness.stages import run_pipeline
    from harness.store.base import get_json
    from harness.store.settings import open_store
    from tests.fixtures.s3 import s3_endpoint

    with s3_endpoint(fail_rate=0.1, seed=7) as ep:
        cfg = tiny_config(tmp_path, "s3run", {"silent": {"target": "silent"}, "oracle": {"target": "oracle"}},
                          n_pairs=2, seed=5, n4_share=0.6, infer={"shard_size": 2},  # n4_share: the default
                          store=ep.store_settings(prefix="team/runs"))
        store = open_store(cfg.store)
        key = run_pipeline(cfg, store)
        assert sum(ep.proxy.injected.values()) > 0  # faults really happened
        assert key.endswith("report.md") and "Duplex-MPE" in store.get(key).decode()
        plan = RunPlan.from_config(cfg)
        errors = get_json(store, plan.layout.file(plan.reduce, "errors.json"))
        assert errors["conversations"] == []
        metrics = get_json(store, plan.layout.file(plan.reduce, "metrics.json"))
        for cond in ("explicit", "implicit"):
            assert metrics["silent"][cond]["response_presence"]["n"] == 2
            assert metrics["silent"][cond]["response_presence"]["rate"] is None  # n < 30: n/a, never a number
        for m in ("silent", "oracle"):
            led = read_ledger(store, plan.layout, plan.infer[m], m)
            assert len(led.markers) == 2 and not led.missing
        assert "2/2 shards complete, 0 failed, 0 missing" in run_status(cfg, store)


def test_failed_shards_exit_4_and_nothing_after_infer_runs(tmp_path):
    """docs/cluster.md "Exit statuses": 4 when shards failed every attempt (nothing after infer
    runs). Exit 5 (the run finished and wrote its report, but conversations are ``error``):
    tests/e2e/test_jobs_cli.py, on the shared run's faulty models."""
    base = [f"store.root={tmp_path}", "scenes=tiny", "model=[silent]", "infer.shard_size=6"]
    crash = job("pipeline", *base, "run_id=crash", "model.silent.target=tests.fixtures.faulty_models:CrashingModel",
                "cluster.shard_attempts=1", "cluster.max_restarts=0", "cluster.max_task_retries=0")
    assert crash.returncode == 4, crash.stderr[-3000:]
    assert "stopped: 1 shard(s) failed after 1 attempts" in crash.stderr
    assert "CUDA out of memory" in crash.stderr
    assert not list(tmp_path.glob("crash/vad/*/*/_SUCCESS.json")) and not list(tmp_path.glob("crash/reduce/*"))
