"""The job entry points (jobs/): exit statuses, identifiers that look like numbers, jobs on an
existing run, preflight. Each runs the real Hydra entry point in a subprocess where the
behaviour is the process's (its exit status, its messages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.products.infer import InferIncomplete
from harness.runtime.config import RunConfig
from harness.runtime.driver import StageInputMissing
from harness.runtime.executor import BudgetExceeded, UnmetResources
from harness.runtime.plan import RunPlan
from harness.stages.synth import SynthIncomplete
from harness.store.base import LocalStore, put_json
from jobs import _entry

REPO = Path(__file__).resolve().parents[2]


def job(name: str, *overrides: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"jobs.{name}", *overrides], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "RAY_AUTH_MODE": "disabled", **(env or {})})


def _run(tmp_path) -> tuple[RunConfig, LocalStore]:
    cfg = RunConfig.from_dict({"run_id": "r1", "store": {"root": str(tmp_path)},
                               "model": {"silent": {"target": "silent"}}})
    return cfg, LocalStore(tmp_path)


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


def test_a_config_error_exits_2_before_anything_runs(tmp_path):
    out = job("pipeline", f"store.root={tmp_path}", "run_id=c", "model=[]")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config error: no model selected" in out.stderr
    assert not (tmp_path / "c" / "run.json").exists()


def test_identifiers_that_look_like_numbers_stay_strings_through_the_entry_point(tmp_path):
    # Hydra reads run_id=20260115, store.bucket=123456 and store.prefix=2026 as ints; before the
    # fix they failed with InvalidKey, TypeError and AttributeError
    from tests.fixtures.s3 import REGION, s3_endpoint

    with s3_endpoint(bucket="123456") as ep:
        out = job("scenes", "store=s3", "store.bucket=123456", "store.prefix=2026", "run_id=20260115",
                  f"store.endpoint_url={ep.endpoint_url}", f"store.region={REGION}", "store.addressing_style=path",
                  f"store.root={tmp_path}", "scenes=tiny")
        assert out.returncode == 0, out.stderr[-3000:]
        keys = [o["Key"] for o in ep.client().list_objects_v2(Bucket="123456")["Contents"]]
    assert any(k.startswith("2026/20260115/scenes/") and k.endswith("/_SUCCESS.json") for k in keys), keys


@pytest.mark.slow
def test_jobs_on_an_existing_run_take_its_config_from_run_json(tmp_path):
    where = [f"store.root={tmp_path}", "run_id=old"]
    first = job("pipeline", *where, "scenes=tiny", "model=[silent]", "infer.shard_size=6")
    assert first.returncode == 0, first.stderr[-3000:]
    # a new reduce version (metrics.yield_deadline_s) of the stored run, without repeating scenes=tiny
    # or model=[silent]
    reduce = job("reduce", *where, "metrics.yield_deadline_s=2.5")
    assert reduce.returncode == 0, reduce.stderr[-3000:]
    store = LocalStore(tmp_path)
    from harness.runtime.manifest import load_run_config

    stored = load_run_config(store, RunConfig.from_dict({"run_id": "old", "model": {"x": {"target": "x"}}}))
    assert stored.scenes.n_pairs == 3 and [m.name for m in stored.models] == ["silent"]
    variant = {**stored.to_dict(), "metrics": {"min_n": 30, "yield_deadline_s": 2.5}}
    plan = RunPlan.from_config(RunConfig.from_dict(variant))
    assert store.exists(plan.layout.marker(plan.reduce))
    assert f"report: {tmp_path}/{plan.layout.file(plan.reduce, 'report.md')}" in reduce.stdout
    # the run's scenes cannot change under it
    scenes = job("vad", *where, "scenes.n_pairs=5")
    assert scenes.returncode == 2
    assert ("config error: jobs.vad acts on the existing run 'old' and takes its config from run.json; it cannot "
            "change scenes.n_pairs: the run's scenes and shard plan are fixed") in scenes.stderr
    # status and rerun-failed change only where the run runs
    status = job("status", *where, "vad.rules.min_silence_s=0.5")
    assert status.returncode == 2 and "jobs.status acts on the existing run 'old'" in status.stderr
    assert "cannot change vad.rules.min_silence_s: only where it runs" in status.stderr
    # a stage whose input version does not exist: one message, no traceback
    missing = job("reduce", *where, "vad.rules.min_silence_s=0.5")
    assert missing.returncode == 2
    assert "cannot run: stage 'score silent' has not completed" in missing.stderr
    assert "Traceback" not in missing.stderr
    nothing = job("reduce", f"store.root={tmp_path}", "run_id=nothing")
    assert nothing.returncode == 2 and "no run 'nothing'" in nothing.stderr


def test_a_stage_job_runs_the_preflight_for_its_own_stage_only(tmp_path):
    where = [f"store.root={tmp_path}", "run_id=pf"]
    keys = ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
    no_keys = {k: v for k, v in os.environ.items() if k not in keys}
    scenes = job("scenes", *where, "scenes=tiny", "judge=anthropic", "model.silent.num_gpus=4")
    assert scenes.returncode == 0, scenes.stderr[-3000:]  # scenes needs neither the judge nor the models
    score = subprocess.run([sys.executable, "-m", "jobs.score", *where, "judge=anthropic", "score.num_gpus=1",
                            "cluster.num_gpus=0"], cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**no_keys, "RAY_AUTH_MODE": "disabled"})
    assert score.returncode == 2, score.stderr[-3000:]
    lines = score.stderr.splitlines()
    assert lines[0] == "preflight: 2 problem(s); nothing was started:"  # before the missing vad input
    assert lines[1] == ("  - judge=anthropic: no API key: set ANTHROPIC_API_KEY in the environment (keys are read "
                        "from the environment only); needed by the score stage")
    assert lines[2].startswith("  - the scoring actor (score.num_cpus / score.num_gpus) asks for num_cpus=1, "
                               "num_gpus=1 per actor")
    assert "model 'silent'" not in score.stderr  # infer is not one of the score job's stages


def test_credentials_in_a_url_setting_are_refused_and_written_nowhere(tmp_path):
    """A hosted model's base_url with a password: exit 2 naming the setting (never the value)
    before anything runs; Hydra's own copies of the config and overrides are redacted."""
    secret = "s3cr3t-PW"
    out = job("pipeline", f"store.root={tmp_path}", "run_id=leak", "model=[openai_realtime]",
              f"model.openai_realtime.params.base_url=http://user:{secret}@proxy.example/v1")
    assert out.returncode == 2, out.stderr
    assert "model.openai_realtime.params.base_url: a URL holds credentials" in out.stderr
    assert secret not in out.stdout + out.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.parent.name == ".hydra" for p in files)  # Hydra wrote its copies; they were redacted
    assert not [p for p in files if secret in p.read_text(errors="replace")]
    assert "http://***@proxy.example/v1" in (next(p for p in files if p.name == "overrides.yaml")).read_text()
    assert not [p for p in files if p.name == "run.json" or "logs" not in p.parts]  # Hydra's logs only: no run


def test_a_manifest_with_no_valid_scene_exits_2_saying_where_the_reasons_are(tmp_path):
    """Every scene invalid: no stage runs on nothing and no empty report is written (issue 19.14)."""
    path = tmp_path / "all_invalid.jsonl"
    path.write_text('{"scene_id": "p1-explicit"}\n{"not": "a scene"}\n', encoding="utf-8")
    out = job("pipeline", f"store.root={tmp_path / 'runs'}", "run_id=empty", "model=[silent]",
              f"scenes.manifest={path}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "cannot run: scenes: no valid scene (2 invalid)" in out.stderr and "invalid.json" in out.stderr
    assert list((tmp_path / "runs" / "empty").glob("scenes/*/invalid.json"))
    assert not list((tmp_path / "runs" / "empty").glob("reduce/*"))


def test_a_sweep_runs_its_other_jobs_when_one_fails_and_lists_it(tmp_path):
    """Hydra multirun: job 1's config error ends that job only; jobs 0 and 2 still run; the sweep
    exits with the failed job's status and names it (issue 19.15)."""
    root = tmp_path / "runs"
    out = job("scenes", "-m", f"store.root={root}", "run_id=sw", "scenes=tiny", "model=[silent]",
              "scenes.n_pairs=1,0,2")
    assert out.returncode == 2, out.stderr[-3000:]
    assert "sweep: 1 job(s) failed, the others completed:" in out.stderr
    assert "job 1 (run sw-1): exit 2: config error: scenes: n_pairs must be >= 1" in out.stderr
    done = sorted(p.parent.parent.parent.name for p in root.glob("sw-*/scenes/*/_SUCCESS.json"))
    assert done == ["sw-0", "sw-2"]


def test_ray_address_in_the_environment_with_the_local_cluster_is_refused_before_anything_runs(tmp_path):
    """RAY_ADDRESS set and cluster=local (no cluster.address): exit 2 saying how, before run.json."""
    out = job("pipeline", f"store.root={tmp_path}", "run_id=ra", "scenes=tiny", "model=[silent]",
              env={"RAY_ADDRESS": "127.0.0.1:6379"})
    assert out.returncode == 2, out.stderr[-2000:]
    assert "RAY_ADDRESS is set ('127.0.0.1:6379') but cluster.address is null" in out.stderr
    assert "unset RAY_ADDRESS to run locally, or join that cluster with cluster.address=auto" in out.stderr
    assert not (tmp_path / "ra" / "run.json").exists()
