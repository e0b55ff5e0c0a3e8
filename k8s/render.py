"""Render the KubeRay RayJob of one model for one run, or the Job that fills its model volume, with real kustomize.

    python k8s/render.py --model moshi --run-id r1 --bucket my-bucket [--out rayjob.yaml]
    make k8s-render MODEL=moshi RUN=r1 BUCKET=my-bucket          # the same, from make variables
    python k8s/render.py --stage synth --run-id r1 --args +experiment=paper   # a stage on the image of its stack
    python k8s/render.py --job weights --model moshi [--registry ... --tag ...] [--out weights.yaml]

The overlay ``k8s/overlays/<model>`` fixes the image family and the model; this script writes a
throw-away kustomization on top of it that sets what differs per run: the Hydra overrides of the
entry point (``run_id``, ``store.*`` and any extra ``key=value``), the registry and tag of the
images, the RayJob's name suffix and run label, the number of workers, their node selector and
tolerations, the service account, the credentials Secrets (S3, LLM keys) and the model volume's claim.
``--stage`` picks what the RayJob runs (:data:`STAGES`): by default the whole pipeline in the model's
image; ``infer`` only that model's inference there; ``scenes``, ``synth`` and ``score`` a stage job on the
image that holds that stage's stack (the base image, Qwen3-TTS's, Qwen3-ASR's), for a run whose stacks
cannot share one image (``+experiment=paper``, docs/cluster.md "The paper's benchmark"). With
``--job weights`` it renders ``k8s/weights`` instead: the batch Job that runs the fetch command
(``python -m jobs.weights 'model=[<m>]'``, as ``make weights``) in the model's image onto the claim,
once, before the RayJobs that mount it read-only. kustomize (a standalone ``kustomize`` or
``kubectl kustomize``) does every transformation; docs/cluster.md says why and what each parameter means.

Errors (unknown model, a run id or value that cannot travel through the entry point's shells,
a name too long for KubeRay, no kustomize) exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

K8S = Path(__file__).resolve().parent
OVERLAYS = K8S / "overlays"
BASE = K8S / "base"
CPU_WORKERS = K8S / "components" / "cpu-workers"
WEIGHTS = K8S / "weights"
MODEL_CLAIM = "duplex-mpe-models"  # the model volume's claim in the manifests (k8s/storage/models-pvc.yaml)
# KubeRay names the cluster `<rayjob>-<5 chars>` and its head Service `<cluster>-head-svc`,
# which must stay a 63-character DNS label.
MAX_NAME = 47
# Values travel through the submitter's shell and Ray's entry-point shell unquoted: no spaces,
# quotes, `$`, `;`, `|`, `&`, backquotes, globs other than Hydra's list brackets.
SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/@+\-\[\]]*$")
SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
WORKERS = "/spec/rayClusterSpec/workerGroupSpecs/0"
HEAD = "/spec/rayClusterSpec/headGroupSpec/template/spec"
POD_PATHS = ("/spec/submitterPodTemplate/spec", HEAD, f"{WORKERS}/template/spec")


@dataclass(frozen=True)
class StageJob:
    """What a RayJob of ``--stage`` runs: ``module`` (``python -m <module>``) in ``family``'s image
    (``images/<family>``; None: the model overlay's image, and ``--model`` is required) on GPU
    workers, or on CPU workers when ``cpu``."""

    module: str
    family: str | None = None
    cpu: bool = False


STAGES = {
    "pipeline": StageJob("jobs.pipeline"),  # every stage in the model's image: one image holds every stack
    "infer": StageJob("jobs.infer"),  # the model's inference only, in its image
    "scenes": StageJob("jobs.scenes", "base", cpu=True),  # starts the run: its scenes and run.json
    "synth": StageJob("jobs.synth", "synth-qwen3"),  # the audio, with Qwen3-TTS (tts=qwen3) on GPU actors
    # the rest of the run (the reference, the baselines' infer, vad, score with Qwen3-ASR on GPU actors,
    # reduce: one report for every model of the config); every model's infer must be complete
    "score": StageJob("jobs.pipeline", "qwen-asr"),
}


class RenderError(Exception):
    """A parameter that cannot produce a valid manifest; the message says which and why."""


def models() -> list[str]:
    """The overlays there are, i.e. the values ``--model`` accepts."""
    return sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def kustomize_command(given: str | None) -> list[str]:
    """``given`` split like a shell would, else ``kustomize`` when on PATH, else ``kubectl kustomize``."""
    if given:
        return shlex.split(given)
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    raise RenderError("no kustomize: install kubectl (it embeds kustomize) or a kustomize binary, "
                      "or pass --kustomize 'CMD'")


def build(kustomize: list[str], directory: Path) -> str:
    """Run kustomize on ``directory`` and return the YAML it prints."""
    proc = subprocess.run([*kustomize, str(directory)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RenderError(f"{' '.join(kustomize)} {directory} failed: {proc.stderr.strip()}")
    return proc.stdout


def merge_overrides(entrypoint: str, overrides: list[str]) -> str:
    """The entry point with each Hydra ``key=value`` of ``overrides`` replacing the same key, or appended."""
    tokens = shlex.split(entrypoint)
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key or not SAFE_VALUE.match(key) or not SAFE_VALUE.match(value):
            raise RenderError(f"override {override!r} is not key=value of letters, digits and _.,:/@+-[]")
        same = [i for i, t in enumerate(tokens) if t.partition("=")[0] == key and "=" in t]
        if same:
            tokens[same[0]] = override
        else:
            tokens.append(override)
    return " ".join(tokens)


def parse_tolerations(spec: str) -> list[dict]:
    """``key[=value]:Effect,...`` -> tolerations (``Exists`` without a value, ``Equal`` with one)."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        kv, sep, effect = item.rpartition(":")
        if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not kv:
            raise RenderError(f"toleration {item!r} is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
        key, eq, value = kv.partition("=")
        out.append({"key": key, "operator": "Equal", "value": value, "effect": effect} if eq
                   else {"key": key, "operator": "Exists", "effect": effect})
    return out


def parse_labels(spec: str) -> dict[str, str]:
    """``k=v,k2=v2`` -> a node selector."""
    pairs = [s.strip() for s in spec.split(",") if s.strip()]
    if any("=" not in p or not p.partition("=")[0] for p in pairs):
        raise RenderError(f"node selector {spec!r} is not k=v[,k=v...]")
    return dict(p.partition("=")[::2] for p in pairs)


def resource_name(run_id: str, base_name: str) -> tuple[str, str]:
    """(name suffix, label value) for ``run_id``: lower-case DNS-label characters only."""
    if not SAFE_RUN_ID.match(run_id):
        raise RenderError(f"run id {run_id!r}: use letters, digits, '_', '.', '-' (starting with a letter or digit)")
    label = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    if len(base_name) + 1 + len(label) > MAX_NAME:
        raise RenderError(f"RayJob name {base_name}-{label} is longer than {MAX_NAME} characters "
                          "(KubeRay derives Service names from it): use a shorter run id")
    return f"-{label}", label


def config_name(overlay: str) -> str:
    """The model's config name (``conf/model/<name>.yaml``) for an overlay, named after its image
    family: ``flm-audio`` -> ``flm_audio``."""
    return overlay.replace("-", "_")


def claim_ops(spec: dict, path: str, claim: str, read_only: bool) -> list[dict]:
    """JSON patches giving pod spec ``spec`` (at ``path``) the model volume ``claim``."""
    index = next(i for i, v in enumerate(spec["volumes"]) if v["name"] == "models")
    source = {"claimName": claim, **({"readOnly": True} if read_only else {})}
    return [{"op": "replace", "path": f"{path}/volumes/{index}",
             "value": {"name": "models", "persistentVolumeClaim": source}}]


def image_ops(images: list[str], args: argparse.Namespace) -> list[dict]:
    """kustomize ``images`` entries: every image under ``--registry`` with ``--tag``."""
    registry = args.registry.rstrip("/")
    return [{"name": i, "newName": f"{registry}/{i}" if registry else i, "newTag": args.tag} for i in images]


def build_on(base: Path, kustomize: list[str], kustomization: dict) -> str:
    """Build ``kustomization`` (its ``resources``: ``base``) in a throw-away folder."""
    with tempfile.TemporaryDirectory(prefix="duplex-mpe-render-") as tmp:
        kustomization["resources"] = [os.path.relpath(base, tmp)]  # kustomize refuses absolute roots
        Path(tmp, "kustomization.yaml").write_text(json.dumps(kustomization, indent=1))
        return build(kustomize, Path(tmp))


def render_weights(args: argparse.Namespace) -> str:
    """The weights Job of ``args.model`` (``k8s/weights``): ``python -m jobs.weights 'model=[<m>]' <args>``
    in the model's image, the claim mounted read-write, the HF token Secret ``--hf-secret``."""
    sys.path.insert(0, str(K8S.parent))
    from harness.models.model_env import IMAGE_PREFIX, image_family

    name = config_name(args.model)
    try:
        family = image_family(name)
    except ValueError as e:
        raise RenderError(str(e)) from None
    overrides = [f"model=[{name}]", *shlex.split(args.args or "")]
    for o in overrides:
        merge_overrides("", [o])  # the same check of each value as the RayJob's
    pod = "/spec/template/spec"
    ops = [{"op": "replace", "path": f"{pod}/containers/0/args", "value": ["jobs.weights", *overrides]},
           {"op": "replace", "path": f"{pod}/serviceAccountName", "value": args.service_account},
           {"op": "replace", "path": f"{pod}/containers/0/envFrom/0/secretRef/name", "value": args.hf_secret},
           {"op": "replace", "path": f"{pod}/volumes/0/persistentVolumeClaim/claimName",
            "value": args.model_cache_pvc or MODEL_CLAIM}]
    image = f"{IMAGE_PREFIX}{family or 'base'}"
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [],
        "nameSuffix": f"-{args.model}",
        "images": [{**i, "name": "duplex-mpe-base"} for i in image_ops([image], args)],
        "patches": [{"target": {"group": "batch", "kind": "Job"}, "patch": json.dumps(ops)}],
    }
    return build_on(WEIGHTS, kustomize_command(args.kustomize), kustomization)


def check_model(model: str, what: str) -> None:
    """Refuse a missing or unknown ``--model`` for ``what`` (a RayJob of a model's image, the weights Job)."""
    if not model:
        raise RenderError(f"{what} needs --model: one of {', '.join(models())}")
    if model not in models():
        raise RenderError(f"unknown model {model!r}: one of {', '.join(models())}")


@contextlib.contextmanager
def overlay_for(args: argparse.Namespace) -> Iterator[Path]:
    """The kustomization the run's parameters go on: the model's overlay (``--model``), or for a stage
    job on an image of its own a throw-away one on ``k8s/base`` (that image, the stage's entry point
    with no model list: the config's; the CPU workers' component for a CPU stage)."""
    job = STAGES[args.stage]
    if job.family is None:
        check_model(args.model, f"--stage {args.stage}")
        name = config_name(args.model)
        if not (K8S.parent / "conf" / "model" / f"{name}.yaml").exists():
            print(f"warning: model {args.model!r} has an overlay and an image but no adapter yet "
                  f"(conf/model/{name}.yaml is missing): this RayJob stops at config composition "
                  "until one is added (docs/adding-a-model.md)", file=sys.stderr)
        yield OVERLAYS / args.model
        return
    if args.model:
        raise RenderError(f"--stage {args.stage} runs in image duplex-mpe-{job.family} for every model of the "
                          f"config: no --model (select models with --args 'model=[...]')")
    entry = [{"op": "replace", "path": "/spec/entrypoint", "value": f"python -m {job.module} cluster=kuberay store=s3"}]
    with tempfile.TemporaryDirectory(prefix=f"duplex-mpe-{args.stage}-") as tmp:
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(BASE, tmp)],
            "components": [os.path.relpath(CPU_WORKERS, tmp)] if job.cpu else [],
            "nameSuffix": f"-{args.stage}",
            "images": [{"name": "duplex-mpe-base", "newName": f"duplex-mpe-{job.family}"}],
            "patches": [{"target": {"group": "ray.io", "kind": "RayJob"}, "patch": json.dumps(entry)}],
        }
        Path(tmp, "kustomization.yaml").write_text(json.dumps(kustomization, indent=1))
        yield Path(tmp)


def with_module(entrypoint: str, module: str) -> str:
    """``python -m <module> ...`` for the entry point ``python -m <other> ...`` (its arguments kept)."""
    tokens = shlex.split(entrypoint)
    return " ".join([*tokens[:2], module, *tokens[3:]])


def render(args: argparse.Namespace) -> str:
    """The rendered manifests (YAML) for ``args`` (see :func:`parser`)."""
    if args.job == "weights":
        check_model(args.model, "--job weights")
        return render_weights(args)
    if not args.run_id:
        raise RenderError("--run-id is required for the RayJob")
    if args.workers < 1:
        raise RenderError(f"workers must be at least 1, not {args.workers}")
    kustomize = kustomize_command(args.kustomize)
    with overlay_for(args) as overlay:
        return render_rayjob(args, kustomize, overlay)


def render_rayjob(args: argparse.Namespace, kustomize: list[str], overlay: Path) -> str:
    """The RayJob of ``overlay`` with the run's parameters of ``args`` (see :func:`render`)."""
    docs = [d for d in yaml.safe_load_all(build(kustomize, overlay)) if d]
    job = next(d for d in docs if d.get("kind") == "RayJob")
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    suffix, label = resource_name(args.run_id, job["metadata"]["name"])

    overrides = [f"run_id={args.run_id}", f"store.bucket={args.bucket}", f"store.prefix={args.prefix}",
                 f"store.endpoint_url={args.endpoint_url or 'null'}", f"store.region={args.region or 'null'}",
                 *shlex.split(args.args or "")]
    entrypoint = with_module(job["spec"]["entrypoint"], STAGES[args.stage].module)
    ops: list[dict] = [{"op": "replace", "path": "/spec/entrypoint", "value": merge_overrides(entrypoint, overrides)}]
    ops += [{"op": "replace", "path": f"{WORKERS}/{k}", "value": args.workers}
            for k in ("replicas", "minReplicas", "maxReplicas")]
    ops += [{"op": "add", "path": f"{p}/serviceAccountName", "value": args.service_account} for p in POD_PATHS]
    ops += [{"op": "replace", "path": f"{p}/containers/0/envFrom/{i}/secretRef/name", "value": secret}
            for p in POD_PATHS[1:] for i, secret in enumerate((args.secret, args.llm_secret))]
    if args.node_selector:
        ops.append({"op": "add", "path": f"{WORKERS}/template/spec/nodeSelector",
                    "value": parse_labels(args.node_selector)})
    if args.tolerations:
        ops.append({"op": "add", "path": f"{WORKERS}/template/spec/tolerations",
                    "value": worker.get("tolerations", []) + parse_tolerations(args.tolerations)})
    if args.model_cache_pvc:  # the head's preflight and the workers' loaders read it, neither writes
        head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
        ops += claim_ops(head, HEAD, args.model_cache_pvc, True)
        ops += claim_ops(worker, f"{WORKERS}/template/spec", args.model_cache_pvc, True)

    images = sorted({c["image"] for p in (job["spec"]["submitterPodTemplate"]["spec"],
                                           job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"], worker)
                     for c in p["containers"]})
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [],
        "nameSuffix": suffix,
        "labels": [{"pairs": {"duplex-mpe/run-id": label}, "includeSelectors": False}],
        "images": image_ops(images, args),
        "patches": [{"target": {"group": "ray.io", "kind": "RayJob"}, "patch": json.dumps(ops)}],
    }
    return build_on(overlay, kustomize, kustomization)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--job", choices=("rayjob", "weights"), default="rayjob",
                   help="the run's RayJob, or the Job that fills the model volume with the model's weights")
    p.add_argument("--model", default="", help="overlay under k8s/overlays/ (the RayJob of --stage pipeline or "
                   "infer, and the weights Job)")
    p.add_argument("--stage", choices=tuple(STAGES), default="pipeline",
                   help="what the RayJob runs: pipeline or infer in the model's image; scenes, synth or score "
                        "(every model of the config) in the image of that stage's stack")
    p.add_argument("--run-id", default="", help="the harness run id (run_id=...); required for the RayJob")
    p.add_argument("--bucket", default="duplex-mpe", help="store.bucket")
    p.add_argument("--prefix", default="runs", help="store.prefix: runs live under <prefix>/<run_id>/")
    p.add_argument("--endpoint-url", default="", help="store.endpoint_url (MinIO, Ceph, GCS); empty: AWS S3")
    p.add_argument("--region", default="", help="store.region; empty: boto3's chain (AWS_REGION, role)")
    p.add_argument("--args", default="", help="more Hydra overrides, space-separated key=value")
    p.add_argument("--registry", default="", help="image registry, e.g. ghcr.io/org (empty: local names)")
    p.add_argument("--tag", default="latest", help="image tag (make passes IMAGE_TAG)")
    p.add_argument("--workers", type=int, default=1, help="worker pods (one GPU each for model overlays)")
    p.add_argument("--node-selector", default="", help="worker node selector, k=v[,k=v]")
    p.add_argument("--tolerations", default="", help="extra worker tolerations, key[=value]:Effect[,...]")
    p.add_argument("--service-account", default="duplex-mpe", help="pods' service account (IRSA role)")
    p.add_argument("--secret", default="duplex-mpe-s3", help="Secret with S3 keys, read by envFrom (optional)")
    p.add_argument("--llm-secret", default="duplex-mpe-llm",
                   help="Secret with LLM API keys (ANTHROPIC_API_KEY, GEMINI_API_KEY, ...), read by envFrom (optional)")
    p.add_argument("--model-cache-pvc", default="",
                   help=f"the model volume's claim, HF_HOME (empty: {MODEL_CLAIM}; the baselines: none)")
    p.add_argument("--hf-secret", default="duplex-mpe-hf", help="weights Job: Secret with HF_TOKEN (optional)")
    p.add_argument("--kustomize", default="",
                   help="kustomize command (default: `kustomize build`, else `kubectl kustomize`)")
    p.add_argument("--out", default="", help="write here instead of stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        text = render(args)
    except RenderError as e:
        print(f"k8s-render: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(text)
        print(f"k8s-render: wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
