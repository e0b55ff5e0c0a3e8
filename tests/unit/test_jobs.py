"""The job entry points (jobs/) in this process: each kind of stop has its exit status and message,
a finished run with conversation errors exits 5, a run's scenes cannot change under it. The
entry points as real processes: tests/e2e/test_jobs_cli.py."""

from __future__ import annotations

import pytest

from harness.products.infer import InferIncomplete
from harness.runtime.config import RunConfig
from harness.runtime.driver import StageInputMissing
from harness.runtime.executor import BudgetExceeded, UnmetResources
from harness.runtime.plan import RunPlan
from harness.stages.synth import SynthIncomplete
from harness.store.base import LocalStore, put_json
from jobs import _entry
from tests.fixtures.runs import SILENT, tiny_config


def _run(tmp_path) -> tuple[RunConfig, LocalStore]:
    return tiny_config(tmp_path, "r1", SILENT), LocalStore(tmp_path)


@pytest.mark.parametrize(("error", "status", "message"), [
    (BudgetExceeded("the budget leaves 2 shard(s) not started"), 3, "stopped: the budget leaves 2 shard"),
    (InferIncomplete("1 shard(s) failed after 3 attempts"), 4, "stopped: 1 shard(s) failed after 3 attempts"),
    (SynthIncomplete("1 batch(es) lost"), 4, "stopped: 1 batch(es) lost"),
    (StageInputMissing("stage 'vad' has not completed"), 2, "cannot run: stage 'vad' has not completed"),
    (UnmetResources("model 'silent' asks for num_cpus=1, num_gpus=1"), 2, "cannot schedule: model 'silent'"),
])
def test_each_kind_of_stop_has_its_exit_status(tmp_path, capsys, error, status, message):
    cfg, store = _run(tmp_path)

    def stage(run, store):
        raise error

    with pytest.raises(SystemExit) as stop:
        _entry.run_until_stopped(stage, cfg, store)
    assert stop.value.code == status
    assert message in capsys.readouterr().err


def test_a_stopped_cue_run_shows_its_own_shards_and_how_to_resume_it(tmp_path, capsys):
    from jobs.cue import cue_status

    cfg, store = _run(tmp_path)

    def stage(run, store):
        raise InferIncomplete("1 shard(s) failed after 3 attempts")

    with pytest.raises(SystemExit) as stop:
        _entry.run_until_stopped(stage, cfg, store, status=cue_status, resume="run the same command again")
    err = capsys.readouterr().err
    assert stop.value.code == 4
    assert "cue-infer shards:\n  silent: 0/0 complete" in err and "to continue: run the same command again" in err
    assert "rerun-failed" not in err


def test_a_finished_run_with_conversation_errors_exits_5_and_names_them(tmp_path, capsys):
    cfg, store = _run(tmp_path)
    plan = RunPlan.from_config(cfg)
    errors = plan.layout.file(plan.reduce, "errors.json")
    put_json(store, errors, {"conversations": [], "invalid_scenes": {}})
    _entry.finish(cfg, store)  # no error: returns (exit status 0)
    assert f"report: {tmp_path}/{plan.layout.file(plan.reduce, 'report.md')}" in capsys.readouterr().out
    put_json(store, errors, {"conversations": [
        {"model": "silent", "scene_id": "p001-explicit", "reason": "model failed: adapter exploded"},
        {"model": "silent", "scene_id": "p001-implicit", "reason": "model failed: adapter exploded"}],
        "invalid_scenes": {}})
    with pytest.raises(SystemExit) as stop:
        _entry.finish(cfg, store)
    assert stop.value.code == 5
    assert ("finished with 2 conversation error(s) (silent); the first: silent p001-explicit: model failed: "
            "adapter exploded") in capsys.readouterr().err


def test_starting_a_run_again_with_other_scenes_is_refused_not_split(tmp_path, capsys):
    """A second jobs.pipeline / jobs.scenes on an existing run id with other scenes would write a
    second scene set and report under the same run while run.json, status and reduce describe the
    first: refused with exit 2. The same scenes (a resume) and a new stage version pass."""
    from dataclasses import replace

    from harness.runtime.manifest import write_run_manifest

    cfg, store = _run(tmp_path)
    _entry.same_run(cfg, store, "jobs.pipeline")  # no run yet: a new run
    write_run_manifest(cfg, store)
    _entry.same_run(cfg, store, "jobs.pipeline")  # the same config resumes it
    _entry.same_run(replace(cfg, vad=replace(cfg.vad, rules=replace(cfg.vad.rules, min_silence_s=0.5))), store,
                    "jobs.pipeline")  # a new vad version of the same run
    other = replace(cfg, scenes=replace(cfg.scenes, n_pairs=5), infer=replace(cfg.infer, shard_size=2))
    with pytest.raises(SystemExit) as stop:
        _entry.same_run(other, store, "jobs.pipeline")
    assert stop.value.code == 2
    assert ("config error: jobs.pipeline: run 'r1' exists and fixed infer.shard_size, scenes.n_pairs at its first "
            "invocation (run.json)") in capsys.readouterr().err


def test_rerun_failed_may_give_a_stalled_model_more_time_but_not_change_results():
    # a shard that failed on the step watchdog is rerun with a longer timeout: not a new version
    assert _entry.where_or_speed("infer.step_timeout_s") and _entry.where_or_speed("infer.first_step_timeout_s")
    assert not _entry.where_or_speed("infer.max_duration_s") and not _entry.where_or_speed("protocol.turn_gap_s")
