"""The runtime pool (harness.runtime.pool) on a real local Ray (2 CPUs, started here): a killed
actor's batch runs again on a fresh actor, an actor that always dies fails its batch after
``cluster.batch_attempts`` and the rest is kept, a worker's exception is its batch's failure
without a retry, ``actors=0`` gives the same results in this process, and no actor outlives a
call (Ray's CPUs are all free again). The workers kill themselves with SIGKILL, as the kernel or
Ray's out-of-memory monitor would; a real out-of-memory kill runs in a child process whose Ray
kills at 1 % memory use."""

from __future__ import annotations

import _thread
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ray

from harness.runtime.config import RunConfig
from harness.runtime.executor import UnmetResources
from harness.runtime.pool import BatchesFailed, BatchFailure, Resources, map_batches
from tests.fixtures.runs import SILENT, tiny_config

ROOT = Path(__file__).resolve().parents[2]
CPUS = 2.0


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    ray.init(num_cpus=int(CPUS), include_dashboard=False, _temp_dir=tmp, logging_level="WARNING")
    yield
    ray.shutdown()


def _first(flag: Path) -> bool:
    """True for the one caller that creates ``flag`` (atomic across processes)."""
    try:
        os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class Squares:
    """A pool worker: ``run(x, action)`` squares ``x``; each call is logged in ``flags/calls-<x>``.
    ``action``: ``die-once`` (SIGKILL on the first attempt), ``die`` (on every attempt),
    ``raise`` (ValueError), ``sleep`` (60 s)."""

    def __init__(self, flags: str, broken: bool = False):
        if broken:
            raise ValueError("cannot load the model (test)")
        self.flags = Path(flags)

    def run(self, x: int, action: str = "") -> dict[str, int]:
        with open(self.flags / f"calls-{x}", "a") as fh:
            fh.write(f"{os.getpid()}\n")
        if action == "die" or (action == "die-once" and _first(self.flags / f"died-{x}")):
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "raise":
            raise ValueError(f"bad item {x} (test)")
        if action == "sleep":
            time.sleep(60)
        return {"x": x, "square": x * x, "pid": os.getpid()}


def _cfg(tmp_path: Path, **cluster) -> RunConfig:
    return tiny_config(tmp_path / "store", "pool", SILENT, cluster=cluster)


def _run(cfg: RunConfig, flags: Path, actions: dict[int, str], n: int = 4, actors: int | None = 2,
         **kw) -> dict[int, object]:
    flags.mkdir(exist_ok=True)
    batches = [(x, actions.get(x, "")) for x in range(n)]
    return dict(map_batches(cfg, "toy", Squares, "run", batches, Resources(actors=actors, who="the toy actor"),
                            args=(str(flags), *kw.pop("args", ())), describe=lambda i: f"x={i}", **kw))


def _calls(flags: Path, x: int) -> list[str]:
    return (flags / f"calls-{x}").read_text().split()


def _released() -> bool:
    """Bounded poll: every actor is gone once Ray has all its CPUs free again (``ray.kill`` is
    asynchronous)."""
    for _ in range(300):
        if ray.available_resources().get("CPU", 0.0) == CPUS:
            return True
        time.sleep(0.1)
    return False


def _squares(out: dict[int, object]) -> dict[int, object]:
    """The results without the worker's pid (which differs between modes)."""
    return {i: {k: v for k, v in r.items() if k != "pid"} if isinstance(r, dict) else r for i, r in out.items()}


def test_a_batch_whose_actor_is_killed_runs_again_on_a_fresh_actor(local_ray, tmp_path):
    flags = tmp_path / "flags"
    out = _run(_cfg(tmp_path), flags, {2: "die-once"}, n=5)
    assert _squares(out) == {x: {"x": x, "square": x * x} for x in range(5)}
    first, second = _calls(flags, 2)
    assert first != second and out[2]["pid"] == int(second)  # the retry ran in another process
    assert all(len(_calls(flags, x)) == 1 for x in (0, 1, 3, 4))
    assert _released()


def test_an_actor_that_always_dies_fails_its_batch_after_the_attempts_and_keeps_the_rest(local_ray, tmp_path):
    flags = tmp_path / "flags"
    out = _run(_cfg(tmp_path, batch_attempts=2), flags, {1: "die"})
    failure = out.pop(1)
    assert isinstance(failure, BatchFailure) and failure.died and failure.attempts == 2
    assert len(_calls(flags, 1)) == 2 and len(set(_calls(flags, 1))) == 2  # a fresh actor each attempt
    assert failure.stage == "toy" and failure.batch == "batch 2 of 4 (x=1)"
    assert failure.cause.startswith("ActorDiedError: The actor died unexpectedly") and "worker exit" in failure.cause
    assert str(failure) == f"toy batch 2 of 4 (x=1) failed after 2 attempt(s): {failure.cause}"
    assert _squares(out) == {x: {"x": x, "square": x * x} for x in (0, 2, 3)}  # the others' results are kept
    assert "\n" not in str(failure)
    message = str(BatchesFailed("toy", [failure], 4))
    assert message.startswith("toy: 1 of 4 batch(es) failed, the others' results are kept: batch 2 of 4 (x=1) "
                              "failed after 2 attempt(s): ActorDiedError")
    assert _released()


def test_a_worker_exception_is_its_batch_failure_without_a_retry_the_same_in_this_process(local_ray, tmp_path):
    results = {}
    for actors in (2, 0):
        flags = tmp_path / f"flags-{actors}"
        results[actors] = _squares(_run(_cfg(tmp_path), flags, {3: "raise"}, n=5, actors=actors))
        assert len(_calls(flags, 3)) == 1  # never retried
        pids = {int(p) for x in range(5) for p in _calls(flags, x)}
        assert (os.getpid() in pids) == (actors == 0) and len(pids) <= max(actors, 1)
    assert results[2] == results[0]
    assert results[0][3] == BatchFailure("toy", "batch 4 of 5 (x=3)", 1, "ValueError: bad item 3 (test)", died=False)
    assert results[0][4] == {"x": 4, "square": 16}
    assert _released()


def test_a_worker_that_cannot_be_built_fails_every_batch_with_its_error(local_ray, tmp_path):
    for actors in (2, 0):
        out = _run(_cfg(tmp_path), tmp_path / f"flags-{actors}", {}, n=3, actors=actors, args=(True,))
        assert sorted(out) == [0, 1, 2]
        for f in out.values():
            assert isinstance(f, BatchFailure) and not f.died and f.attempts == 0
            assert f.cause.startswith("the worker could not be built: ")
            assert "ValueError: cannot load the model (test)" in f.cause
            assert str(f).startswith("toy batch ") and " was not run: the worker could not be built" in str(f)
    assert _released()


def test_no_actor_outlives_a_caller_that_stops_or_an_interrupt(local_ray, tmp_path):
    flags = tmp_path / "flags"
    flags.mkdir()
    with pytest.raises(RuntimeError, match="the caller failed"):
        for _ in map_batches(_cfg(tmp_path), "toy", Squares, "run", [(0,), (1, "sleep"), (2, "sleep")],
                             Resources(actors=2), args=(str(flags),)):
            raise RuntimeError("the caller failed")
    assert _released()
    # Ctrl-C while the driver waits on running batches: they are stopped, the interrupt goes on
    timer = threading.Timer(5.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(_cfg(tmp_path), flags, {0: "sleep", 1: "sleep"}, n=2)
    finally:
        timer.cancel()
    assert _released()


def test_a_request_no_node_can_hold_fails_before_any_actor_starts(local_ray, tmp_path):
    with pytest.raises(UnmetResources, match=r"^the toy actor asks for num_cpus=1, num_gpus=1 per actor"):
        dict(map_batches(_cfg(tmp_path), "toy", Squares, "run", [(0,)], Resources(num_gpus=1, who="the toy actor"),
                         args=(str(tmp_path),)))
    assert not list(tmp_path.glob("calls-*"))


OOM_CHILD = textwrap.dedent('''
    import json, os, sys, tempfile, time

    os.environ.update(RAY_AUTH_MODE="disabled", RAY_memory_usage_threshold="0.01", RAY_memory_monitor_refresh_ms="100")
    import ray
    from harness.runtime.config import RunConfig
    from harness.runtime.pool import BatchFailure, Resources, map_batches

    class Sleeper:
        def nap(self, s):
            time.sleep(s)
            return s

    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR",
             _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    cfg = RunConfig.from_dict({"run_id": "oom", "store": {"root": sys.argv[1]},
                               "model": {"silent": {"target": "silent"}}, "cluster": {"batch_attempts": 2}})
    [(i, out)] = map_batches(cfg, "toy", Sleeper, "nap", [(60,)], Resources(actors=1), progress=False)
    print(json.dumps({"failure": isinstance(out, BatchFailure), "died": out.died, "attempts": out.attempts,
                      "line": str(out)}))
    ray.shutdown()
''')


def test_an_out_of_memory_kill_is_retried_then_named_with_the_memory_it_held(tmp_path):
    # a Ray whose memory monitor kills at 1 % node memory: every attempt is a real OOM kill (nothing is allocated)
    done = subprocess.run([sys.executable, "-c", OOM_CHILD, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["failure"] and out["died"] and out["attempts"] == 2
    line = out["line"]
    assert line.startswith("toy batch 1 of 1 failed after 2 attempt(s): OutOfMemoryError: killed by Ray's "
                           "out-of-memory monitor (node memory ")
    # the node's use and limit, and what the killed worker held, as Ray reported them
    assert re.search(r"node memory [\d.]+GB used / [\d.]+GB limit \([\d.]+\); the killed worker \(pid \d+\) "
                     r"held [\d.]+GB\)$", line), line


def test_scoring_actors_no_node_can_hold_fail_at_once_instead_of_queueing(local_ray, tmp_path):
    # score.num_gpus=1 on a Ray node without GPUs (this module's: 2 CPUs): the actor pool would wait forever
    from harness.products.segments import SegmentEntry, segment_objects
    from harness.runtime.driver import write_objects
    from harness.runtime.executor import RESOURCE_HINT
    from harness.runtime.plan import RunPlan
    from harness.stages import run_stage
    from harness.store.base import LocalStore, put_json

    cfg = tiny_config(tmp_path / "store", "sc", SILENT, score={"num_gpus": 1})
    store = LocalStore(tmp_path / "store")
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    put_json(store, lay.file(plan.infer["silent"], "plan.json"), {"shard-00000": ["p001-explicit"]})
    put_json(store, lay.marker(lay.shard(plan.infer["silent"], "shard-00000")),
             {"conversations": {"p001-explicit": {"status": "ok", "reason": "", "objects": {}}}})
    write_objects(store, lay, plan.vad["silent"], segment_objects({"p001-explicit": SegmentEntry("ok",
                                                                                                 np.array([[1, 2]]))}))
    put_json(store, lay.marker(plan.vad["silent"]), {})
    message = ("the scoring actor (score.num_cpus / score.num_gpus) asks for num_cpus=1, num_gpus=1 per actor, but "
               "no node of the Ray cluster has that (nodes: 2 CPU, 0 GPU)" + RESOURCE_HINT)
    with pytest.raises(UnmetResources, match=f"^{re.escape(message)}$"):
        run_stage("score", cfg, store)
    assert not store.exists(lay.marker(plan.score["silent"]))
