"""The runtime pool's failures as the stages and jobs report them, without Ray: a failed batch's
line, the stage's error over its failed batches, an out-of-memory kill's cause, exit status 4, and
``cluster.batch_attempts``. The pool on a real local Ray: tests/e2e/test_pool.py."""

from __future__ import annotations

import pytest

from harness.runtime.config import ConfigError
from harness.runtime.pool import BatchesFailed, BatchFailure
from tests.fixtures.runs import SILENT, tiny_config


def test_batches_failed_names_the_stage_each_batch_and_cause():
    failures = [BatchFailure("score", f"batch {i} of 9 (model 'm')", 3, f"OutOfMemoryError: cause {i}", died=True)
                for i in range(1, 6)]
    e = BatchesFailed("score", failures, 9)
    assert e.stage == "score" and e.failures == failures and e.total == 9
    assert str(e) == ("score: 5 of 9 batch(es) failed, the others' results are kept: "
                      "batch 1 of 9 (model 'm') failed after 3 attempt(s): OutOfMemoryError: cause 1; "
                      "batch 2 of 9 (model 'm') failed after 3 attempt(s): OutOfMemoryError: cause 2; "
                      "batch 3 of 9 (model 'm') failed after 3 attempt(s): OutOfMemoryError: cause 3; and 2 more")


def test_batch_attempts_is_a_positive_integer(tmp_path):
    assert tiny_config(tmp_path, "pool", SILENT).cluster.batch_attempts == 3
    for bad in (0, 1.5, True):
        with pytest.raises(ConfigError, match="batch_attempts"):
            tiny_config(tmp_path, "pool", SILENT, cluster={"batch_attempts": bad})


# Ray's out-of-memory report as Ray 2.60 words it (trimmed), two workers killed at once
OOM_REPORT = (
    "2 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.0.0.7, ID: 5d19) "
    "was 22.20GB used / 23.54GB limit (0.943102)\nOOM kill reason: Memory usage 23836661760B exceeded threshold\n"
    "Ray killed 2 worker(s) based on the killing policy\nConsidered workers: [\n"
    "Selected to kill: (Task: job ID=01000000, lease ID=0000, task name=t, required resources={CPU: 1}, pid=311, "
    "actual memory used=0.04GB, worker ID=894d)\n"
    "Selected to kill: (Actor(b1eec12554d7201faa501cae01000000): job ID=01000000, lease ID=0001, task name="
    "ClipSynthesizer.__init__, required resources={}, pid=312, actual memory used=19.61GB, worker ID=8e30)\n]\n"
    "Top 10 memory users: PID\tMEM(GB)\tCOMMAND\n312\t19.61\tray::ClipSynthesizer.run\n")


def test_an_out_of_memory_cause_names_the_memory_the_dead_actor_held():
    from ray.exceptions import OutOfMemoryError

    from harness.runtime.executor import _reason

    node = "node memory 22.20GB used / 23.54GB limit (0.943102)"
    assert _reason(OutOfMemoryError(OOM_REPORT), "b1eec12554d7201faa501cae01000000") == (
        f"OutOfMemoryError: killed by Ray's out-of-memory monitor ({node}; the killed worker (pid 312) held 19.61GB)")
    assert _reason(OutOfMemoryError(OOM_REPORT)) == (  # which one is unknown: each
        f"OutOfMemoryError: killed by Ray's out-of-memory monitor ({node}; the killed workers held 0.04GB (pid 311), "
        "19.61GB (pid 312))")
    older = ("Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.7, ID: 5d19) "
             "where the task (actor ID: b1ee, name=A.__init__, pid=312, memory used=19.6GB) was running was "
             "22.2GB / 23.5GB (0.944), which exceeds the memory usage threshold of 0.95.")
    assert _reason(OutOfMemoryError(older)) == ("OutOfMemoryError: killed by Ray's out-of-memory monitor (node memory "
                                                "22.2GB / 23.5GB (0.944); the killed worker (pid 312) held 19.6GB)")


def test_a_stage_whose_batches_failed_exits_4_with_the_status_and_how_to_continue(tmp_path, capsys):
    from harness.store.base import LocalStore
    from jobs import _entry

    cfg = tiny_config(tmp_path / "store", "pool", SILENT)
    failure = BatchFailure("score", "batch 2 of 9 (model 'm')", 3, "ActorDiedError: the actor died", died=True)

    def stage(run, store):
        raise BatchesFailed("score", [failure], 9)

    with pytest.raises(SystemExit) as stop:
        _entry.run_until_stopped(stage, cfg, LocalStore(tmp_path / "store"))
    err = capsys.readouterr().err
    assert stop.value.code == _entry.FAILED_SHARDS == 4
    assert ("stopped: score: 1 of 9 batch(es) failed, the others' results are kept: batch 2 of 9 (model 'm') failed "
            "after 3 attempt(s): ActorDiedError: the actor died") in err
    assert "\n  score     silent     missing" in err and "to continue: make rerun-failed RUN=pool" in err
