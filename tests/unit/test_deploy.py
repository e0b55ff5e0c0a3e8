"""Container images and KubeRay manifests, read in this process: every Dockerfile runs as a
non-root batch job from a pinned base, every family's requirements pin exact versions under the
harness pins, every model has an overlay, the test environment's moshi is the image's, and
kubernetes-validate rejects a broken pod template. Linted, built and rendered by the real tools
(hadolint, yamllint, make, kustomize): tests/e2e/test_deploy.py."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from harness.models.model_env import family_pins
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


def test_the_test_environments_moshi_is_the_images():
    """requirements-nodeps.txt installs Kyutai's moshi for the tiny-model tests: the release the image pins."""
    dev = [ln.strip() for ln in (ROOT / "requirements-nodeps.txt").read_text().splitlines()
           if ln.startswith("moshi==")]
    assert len(dev) == 1 and dev == [p for p in family_pins("moshi")[0] if p.startswith("moshi==")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_runs_as_non_root_batch_job_from_a_pinned_base(dockerfile):
    ins = instructions(dockerfile)
    users = [a for i, a in ins if i == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", users[-1]), f"last USER must be numeric non-root: {users}"
    assert "HEALTHCHECK" not in {i for i, _ in ins}, "batch images carry no HEALTHCHECK"
    froms = [a.split()[0] for i, a in ins if i == "FROM"]
    args = {a.split("=", 1)[0]: (a.split("=", 1)[1] if "=" in a else None) for i, a in ins if i == "ARG"}
    for ref in froms:
        if ref.startswith("${"):
            # a model image: the base reference is a build argument that `make images` must pass
            assert ref == "${BASE_IMAGE}" and args.get("BASE_IMAGE") is None
        else:
            name, _, tag = ref.rpartition(":")
            assert name and tag and tag != "latest" and "/" not in tag, f"FROM {ref} is not pinned to a tag"
    if dockerfile.parent.name == "base":
        entry = [a for i, a in ins if i == "ENTRYPOINT"]
        assert entry == ['["python", "-m"]']
        assert any(i == "RUN" and "pip install --no-deps ." in a for i, a in ins)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_requirements_pin_exact_versions_under_the_harness_pins(family):
    lines = [ln.split("#")[0].strip() for ln in (IMAGES / family / "requirements.txt").read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    assert "-c ../../requirements.txt" in lines, "the harness pins must constrain every family"
    for req in (ln for ln in lines if not ln.startswith("-")):
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[\w,]+\])?==[\w.+\-]+", req), f"{family}: {req!r} is not pinned"
    spec_pins = {"minicpm-o": "4.51.0", "flm-audio": "4.51.3", "freeze-omni": "4.45.2", "qwen-asr": "4.57.6"}
    if family in spec_pins:
        assert f"transformers=={spec_pins[family]}" in lines


def test_every_model_has_an_overlay_and_every_family_image_is_used():
    assert set(OVERLAYS) == set(BASELINES) | set(MODEL_FAMILIES)
    # each overlay's RayJob selects a model config that exists (family flm-audio -> conf/model/flm_audio.yaml)
    for overlay in OVERLAYS:
        entry = (K8S / "overlays" / overlay / "kustomization.yaml").read_text()
        name = overlay.replace("-", "_")
        assert f"model=[{name}]" in entry and (ROOT / "conf" / "model" / f"{name}.yaml").is_file(), overlay


def test_kubernetes_validate_rejects_a_broken_pod_template():
    template = {"spec": {"containers": [{"name": "x", "image": "y", "resources": {"limits": {"cpu": ["8"]}},
                                         "securityContext": {"allowPrivilegeEscalation": "no"}}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(as_pod_template("bad", template), KUBE_VERSION, strict=True)
    template = {"spec": {"containers": [{"name": "x", "image": "y", "resourcez": {}}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(as_pod_template("bad", template), KUBE_VERSION, strict=True)
