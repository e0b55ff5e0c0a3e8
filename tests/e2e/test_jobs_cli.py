"""The job entry points as real processes (Hydra entry points, tests/fixtures/jobs.py): every job's
help, exit statuses, identifiers that look like numbers, jobs on an existing run (the session's
shared run), the preflight's exit 2 before anything runs (a missing key, a misspelt parameter,
missing weights, a stage job's own stages), sweeps, an edited scene manifest. What the entry points decide in-process:
tests/unit/test_jobs.py; the preflight's checks: tests/unit/test_preflight.py."""

from __future__ import annotations

import json
import os
import time

import pytest

from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.store.base import PROBE_KEY
from harness.store.content import input_digest
from tests.fixtures.jobs import REPO, job, jobs_at_once
from tests.fixtures.keys import ANTHROPIC_KEY_MISSING, KEYS
from tests.fixtures.runs import BASELINES, FAULTY, objects, one_pair_manifest, written

HELPED = ("pipeline", "scenes", "synth", "infer", "vad", "score", "reduce", "status", "cue")  # on the run's config


@pytest.fixture(scope="module")
def helps() -> dict:
    """``python -m jobs.<job> --help`` of every job and of the review kit, the processes started together."""
    return jobs_at_once({name: (name, "--help") for name in (*HELPED, "review")}, timeout=600)


@pytest.mark.parametrize("name", HELPED)
def test_every_job_entry_point_helps(helps, name):
    out = helps[name]
    assert out.returncode == 0, out.stderr
    models = ", ".join(sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml")))
    assert "Common overrides" in out.stdout and f"model: {models}" in out.stdout


def test_the_cue_and_review_helps_name_their_stages_and_overrides(helps):
    cue, review = helps["cue"], helps["review"]
    assert "cue-corpus -> cue-infer" in cue.stdout and "cue.manifest=" in cue.stdout
    assert review.returncode == 0, review.stderr[-2000:]
    assert "review.kind=cue review.action=export" in review.stdout and "make cue-review-export" in review.stdout


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


def test_jobs_on_an_existing_run_take_its_config_from_run_json(completed_run):
    """Stage jobs on the session's shared run (built in-process, its run.json written by the same
    code as the pipeline job's): they take its config from run.json; a new stage version writes its
    own prefix and nothing else."""
    root, store = completed_run.root, completed_run.store
    where = [f"store.root={root}", f"run_id={completed_run.cfg.run_id}"]
    before = objects(store)
    # a new reduce version (metrics.yield_deadline_s) of the stored run, without repeating its scenes or models
    reduce = job("reduce", *where, "metrics.yield_deadline_s=2.5")
    # the run's faulty models failed conversations: the report is written, then exit 5 naming them
    assert reduce.returncode == 5, reduce.stderr[-3000:]
    assert "finished with 9 conversation error(s) (nan, raising); the first: " in reduce.stderr
    from harness.runtime.manifest import load_run_config

    stored = load_run_config(store, RunConfig.from_dict({"run_id": completed_run.cfg.run_id,
                                                         "model": {"x": {"target": "x"}}}))
    assert stored.scenes.n_pairs == 3 and sorted(m.name for m in stored.models) == sorted({**BASELINES, **FAULTY})
    variant = stored.to_dict()
    variant["metrics"]["yield_deadline_s"] = 2.5
    plan = RunPlan.from_config(RunConfig.from_dict(variant))
    assert plan.reduce != completed_run.plan.reduce and store.exists(plan.layout.marker(plan.reduce))
    assert f"report: {root}/{plan.layout.file(plan.reduce, 'report.md')}" in reduce.stdout
    # the run's scenes cannot change under it
    scenes = job("vad", *where, "scenes.n_pairs=5")
    assert scenes.returncode == 2
    assert (f"config error: jobs.vad acts on the existing run '{completed_run.cfg.run_id}' and takes its config from "
            "run.json; it cannot change scenes.n_pairs: the run's scenes and shard plan are fixed") in scenes.stderr
    # status and rerun-failed change only where the run runs
    status = job("status", *where, "vad.rules.min_silence_s=0.5")
    assert status.returncode == 2 and f"jobs.status acts on the existing run '{completed_run.cfg.run_id}'" in \
        status.stderr
    assert "cannot change vad.rules.min_silence_s: only where it runs" in status.stderr
    # a stage whose input version does not exist: one message, no traceback
    missing = job("reduce", *where, "vad.rules.min_silence_s=0.5")
    assert missing.returncode == 2
    assert f"cannot run: stage 'score {stored.models[0].name}' has not completed" in missing.stderr
    assert "Traceback" not in missing.stderr
    nothing = job("reduce", f"store.root={root}", "run_id=nothing")
    assert nothing.returncode == 2 and "no run 'nothing'" in nothing.stderr
    # what they wrote: the new reduce version, the jobs' logs and the store probe; nothing of the run changed
    mine = (f"{plan.reduce}/", f"{completed_run.cfg.run_id}/logs/", "nothing/logs/", PROBE_KEY)
    assert not [k for k in written(before, objects(store)) if not k.startswith(mine)]


def test_a_stage_job_runs_the_preflight_for_its_own_stage_only(tmp_path):
    where = [f"store.root={tmp_path}", "run_id=pf"]
    no_keys = {k: v for k, v in os.environ.items() if k not in KEYS}
    scenes = job("scenes", *where, "scenes=tiny", "judge=anthropic", "model.silent.num_gpus=4")
    assert scenes.returncode == 0, scenes.stderr[-3000:]  # scenes needs neither the judge nor the models
    score = job("score", *where, "judge=anthropic", "score.num_gpus=1", "cluster.num_gpus=0", base_env=no_keys)
    assert score.returncode == 2, score.stderr[-3000:]
    lines = score.stderr.splitlines()
    assert lines[0] == "preflight: 2 problem(s); nothing was started:"  # before the missing vad input
    assert lines[1] == "  - " + ANTHROPIC_KEY_MISSING.format("the score stage")
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


def test_the_pipeline_without_the_judge_key_exits_2_before_writing_anything(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    out = job("pipeline", "run_id=x", f"store.root={tmp_path}", "scenes=tiny", "judge=anthropic", base_env=env)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.startswith("preflight: 1 problem(s); nothing was started:\n  - "
                                 + ANTHROPIC_KEY_MISSING.format("the score stage")), out.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["logs"]  # Hydra's log dir only: no run.json
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_probe", "x"]  # and the store probe's object


def test_the_pipeline_with_a_misspelt_model_param_exits_2_before_the_scenes_stage(tmp_path):
    out = job("pipeline", "run_id=x", f"store.root={tmp_path}", "scenes=tiny", "+model.oracle.params.bogus=1")
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.startswith(
        "preflight: 1 problem(s); nothing was started:\n  - model 'oracle' "
        "(harness.models.baselines:OracleModel): model.oracle.params: unknown parameter 'bogus'; OracleModel "
        "accepts: answer_delay_s, stop_delay_s, voice, max_batch"), out.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["logs"]  # no run.json, no scenes


def test_without_weights_the_pipeline_exits_2_in_seconds_naming_what_to_fetch(tmp_path):
    """The real entry point, the shipped configs, an empty cache: status 2 before any stage, one line
    per missing repository, each naming its repo, revision and fetch command (the time is printed,
    not asserted: the shared machine's load varies)."""
    t0 = time.perf_counter()
    out = job("pipeline", "run_id=x", f"store.root={tmp_path}", "scenes=tiny", "model=[moshi,freeze_omni]",
              "model.moshi.num_gpus=0", "model.moshi.num_cpus=1", "model.freeze_omni.num_gpus=0",
              env={"HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HUB_OFFLINE": "1"})
    print(f"exit {out.returncode} after {time.perf_counter() - t0:.1f} s:\n{out.stderr}")
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.splitlines()
    assert lines[0].startswith("preflight: ") and "nothing was started" in lines[0]
    moshi = [ln for ln in lines if ln.startswith("  - model 'moshi'")]
    assert len(moshi) == 1 and "kyutai/moshiko-pytorch-bf16@2bfc9ae6e89079a5cc7ed2a68436010d91a3d289" in moshi[0]
    assert "`make weights MODEL=moshi`" in moshi[0]
    freeze = [ln for ln in lines if ln.startswith("  - model 'freeze_omni'")]
    assert any("its stack does not import here: `models.pipeline`" in ln for ln in freeze)
    assert any("VITA-MLLM/Freeze-Omni (model.freeze_omni.params.repo) has no revision, not a commit" in ln
               for ln in freeze)
    assert any("Qwen/Qwen2-7B-Instruct@f2826a00ceef68f0f2b946d945ecc0477ce4450c" in ln and
               "`make weights MODEL=freeze_omni`" in ln for ln in freeze)
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["logs"]  # no run.json, no scenes


def test_the_same_command_after_a_manifest_edit_writes_the_new_scenes(tmp_path):
    """An edited scene manifest is a new scene set, not "complete, skipped": the job reads the
    file once and pins its digest in run.json (the digests themselves: tests/unit/test_content_hash.py)."""
    m = one_pair_manifest(tmp_path / "scenes.jsonl")
    runs = tmp_path / "runs"
    where = (f"store.root={runs}", "run_id=edit", "model=[silent]", f"scenes.manifest={m}")
    first = job("scenes", *where)
    assert first.returncode == 0 and "scenes: written at" in first.stdout, first.stdout[-2000:] + first.stderr
    pinned = json.loads((runs / "edit" / "run.json").read_text())["config"]["inputs"]
    assert pinned == {"scenes.manifest": input_digest("scenes.manifest", m, "")}  # read once, by the job
    again = job("scenes", *where)
    assert again.returncode == 0 and "scenes: complete at" in again.stdout, again.stdout[-2000:] + again.stderr
    m.write_text(m.read_text().replace("thirty dollars", "eighty dollars"))
    edited = job("scenes", *where)
    assert edited.returncode == 0, edited.stdout[-2000:] + edited.stderr
    assert "scenes: written at" in edited.stdout and "skipped" not in edited.stdout
    golds = {p.parent.name: {json.loads(line)["gold_answer"] for line in p.read_text().splitlines()}
             for p in (runs / "edit" / "scenes").glob("*/scenes.jsonl")}
    assert sorted(golds.values(), key=sorted) == [{"eighty dollars"}, {"thirty dollars"}]
