"""The cluster recipe of the paper's benchmark (docs/cluster.md, "The paper's benchmark"): the stage jobs
``k8s/render.py --stage scenes|synth|score`` run each stage in the image that holds its stack, ``--stage
infer`` a model's inference in its own image, every Ray pod but the submitter reads the LLM keys'
Secret, and each model's worker pod holds what its replicas read into CPU memory at load (docs/models.md,
"Memory"). Rendered with real kustomize, validated with kubernetes-validate and yamllint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from harness.models.registry import model_configs
from tests.fixtures.deploy import IMAGES, K8S, KUBE_VERSION, as_pod_template
from tests.fixtures.memory_table import memory_table, replicas

RENDER = [sys.executable, str(K8S / "render.py")]
RUN_ID = "paper-1"
COMMON = ["--run-id", RUN_ID, "--bucket", "bench", "--registry", "registry.example/lab", "--tag", "0123abcd",
          "--workers", "2", "--args", "+experiment=paper"]
# stage -> (entry module, image family, whose stack it holds: a package its requirements pin; GPU workers)
STAGE_JOBS = {"scenes": ("jobs.scenes", "base", None, False),
              "synth": ("jobs.synth", "synth-qwen3", "qwen-tts", True),
              "score": ("jobs.pipeline", "qwen-asr", "qwen-asr", True)}

pytestmark = pytest.mark.skipif(not (shutil.which("kustomize") or shutil.which("kubectl")),
                                reason="neither kustomize nor kubectl (which embeds it) is installed")


def render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RENDER, *args], capture_output=True, text=True, check=False)


def rayjob(tmp_path, *args: str) -> dict:
    out = tmp_path / "job.yaml"
    proc = render(*args, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    lint = subprocess.run([str(Path(sys.executable).parent / "yamllint"), "--strict", "-c",
                           str(K8S / ".yamllint.yaml"), str(out)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout
    (job,) = [d for d in yaml.safe_load_all(out.read_text()) if d]
    return job


def pods(job: dict) -> dict[str, dict]:
    cluster = job["spec"]["rayClusterSpec"]
    return {"submitter": job["spec"]["submitterPodTemplate"], "head": cluster["headGroupSpec"]["template"],
            "worker": cluster["workerGroupSpecs"][0]["template"]}


@pytest.mark.parametrize("stage", sorted(STAGE_JOBS))
def test_a_stage_job_runs_its_stage_in_the_image_of_its_stack(stage, tmp_path):
    module, family, package, gpu = STAGE_JOBS[stage]
    job = rayjob(tmp_path, "--stage", stage, *COMMON)
    assert job["kind"] == "RayJob" and job["metadata"]["name"] == f"duplex-mpe-{stage}-{RUN_ID}"
    tokens = job["spec"]["entrypoint"].split()
    assert tokens[:5] == ["python", "-m", module, "cluster=kuberay", "store=s3"]
    assert {f"run_id={RUN_ID}", "store.bucket=bench", "+experiment=paper"} <= set(tokens)
    assert not any(t.startswith("model=") for t in tokens)  # every model of the config (the experiment's)
    if package:  # the image is the one whose requirements hold the stage's stack
        assert package in (IMAGES / family / "requirements.txt").read_text()
    for role, template in pods(job).items():
        kubernetes_validate.validate(as_pod_template(f"{stage}-{role}", template), KUBE_VERSION, strict=True)
        for c in template["spec"]["containers"]:
            assert c["image"] == f"registry.example/lab/duplex-mpe-{family}:0123abcd", role
    worker = pods(job)["worker"]["spec"]
    limits = worker["containers"][0]["resources"]["limits"]
    assert (limits.get("nvidia.com/gpu") == "1") is gpu
    (models,) = [v for v in worker["volumes"] if v["name"] == "models"]
    if gpu:  # Qwen3-TTS / Qwen3-ASR weights from the model volume, read-only
        assert models["persistentVolumeClaim"] == {"claimName": "duplex-mpe-models", "readOnly": True}
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["ttlSecondsAfterFinished"] == 0


def test_the_infer_stage_runs_one_model_in_its_own_image(tmp_path):
    job = rayjob(tmp_path, "--stage", "infer", "--model", "moshi", *COMMON)
    assert job["metadata"]["name"] == f"duplex-mpe-moshi-{RUN_ID}"
    tokens = job["spec"]["entrypoint"].split()
    assert tokens[:3] == ["python", "-m", "jobs.infer"] and {"model=[moshi]", "+experiment=paper"} <= set(tokens)
    assert {c["image"] for p in pods(job).values() for c in p["spec"]["containers"]} == \
        {"registry.example/lab/duplex-mpe-moshi:0123abcd"}


def test_the_llm_keys_reach_the_head_and_the_workers_from_their_secret(tmp_path):
    for args, name in (((), "duplex-mpe-llm"), (("--llm-secret", "lab-llm-keys"), "lab-llm-keys")):
        job = rayjob(tmp_path, "--model", "oracle", *COMMON, *args)
        for role, template in pods(job).items():
            (c,) = template["spec"]["containers"]
            refs = [e["secretRef"] for e in c.get("envFrom", [])]
            if role == "submitter":  # it only submits: no key there
                assert not refs
            else:  # the preflight and the reference on the head, the judge in the workers' scoring actors
                assert {"name": name, "optional": True} in refs and {"name": "duplex-mpe-s3", "optional": True} in refs


@pytest.mark.parametrize(("args", "message"), [
    (["--stage", "synth", "--model", "moshi"], "--stage synth runs in image duplex-mpe-synth-qwen3"),
    (["--stage", "infer"], "--stage infer needs --model"),
    (["--job", "weights"], "--job weights needs --model"),
])
def test_a_stage_job_refuses_the_wrong_model_arguments(args, message, tmp_path):
    out = tmp_path / "out.yaml"
    proc = render(*args, "--run-id", RUN_ID, "--out", str(out))
    assert proc.returncode == 2 and message in proc.stderr and not out.exists(), proc.stderr


@pytest.mark.parametrize("name", sorted(memory_table()))
def test_a_models_worker_pod_holds_what_its_replicas_read_at_load(name, tmp_path):
    row = memory_table()[name]
    job = rayjob(tmp_path, "--model", name.replace("_", "-"), *COMMON)
    (c,) = pods(job)["worker"]["spec"]["containers"]
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"] == row.pod_memory
    if row.cpu_at_load is not None:  # every replica of the pod loads at once
        gib = int(row.pod_memory.removesuffix("Gi"))
        assert gib >= replicas(model_configs()[name]["num_gpus"]) * row.cpu_at_load, name
