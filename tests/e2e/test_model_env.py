"""``make model-env`` (harness/models/model_env.py): a family's environment from its image's recipe, for
real runs without the image. The package index and GitHub are not reachable here, so the family's
folder is a temporary one (its requirements hold no package, its build-args name a local git
repository as UPSTREAM_REPO at a commit of it); what is checked is the environment that results: the
harness importable, the upstream checkout at the pinned commit, and its packages first on the path,
before the harness environment's (PersonaPlex's fork of ``moshi`` before Kyutai's)."""

from __future__ import annotations

import subprocess

import pytest

from harness.models import model_env


def git(*args, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def family(tmp_path, monkeypatch):
    """images/personaplex/ in a temporary folder, its upstream a local repository whose ``moshi/`` holds a
    package ``moshi`` (as NVIDIA/personaplex's does); yields ``(upstream, pinned commit, head commit)``."""
    upstream = tmp_path / "personaplex.git"
    (upstream / "moshi" / "moshi").mkdir(parents=True)
    git("init", "-q", cwd=upstream)
    for version in ("pinned", "later"):
        (upstream / "moshi" / "moshi" / "__init__.py").write_text(f"FORK = {version!r}\n")
        git("add", "-A", cwd=upstream)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", version, cwd=upstream)
    later = git("rev-parse", "HEAD", cwd=upstream)
    pinned = git("rev-parse", "HEAD~1", cwd=upstream)
    images = tmp_path / "images"
    (images / "personaplex").mkdir(parents=True)
    (images / "personaplex" / "Dockerfile").write_text("FROM x\n")
    (images / "personaplex" / "requirements.txt").write_text("-c ../../requirements.txt\n")
    (images / "personaplex" / "build-args").write_text(f"UPSTREAM_COMMIT={pinned}\nUPSTREAM_REPO={upstream}\n")
    monkeypatch.setattr(model_env, "IMAGES", images)
    return upstream, pinned, later


def test_the_environment_has_the_pinned_checkout_first_and_sees_the_harness(family, tmp_path, capsys):
    _, pinned, _ = family
    venv = model_env.make("personaplex", tmp_path / "venv")
    assert git("rev-parse", "HEAD", cwd=venv / "src" / "personaplex") == pinned
    fork = str(venv / "src" / "personaplex" / "moshi")
    code = f"import moshi, harness.weights, torch; print(moshi.FORK, moshi.__file__.startswith({fork!r}))"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["pinned", "True"]  # the fork, not the harness environment's Kyutai moshi
    assert f"{venv}/bin/python -m jobs.pipeline 'model=[personaplex]'" in capsys.readouterr().out


def test_a_checkout_of_ones_own_at_another_commit_is_used_and_said_so(family, tmp_path, capsys):
    upstream, pinned, later = family
    model_env.make("personaplex", tmp_path / "venv", src=upstream)
    assert f"is at {later}, not the commit images/personaplex/build-args pins ({pinned})" in capsys.readouterr().err
    code = "import moshi; print(moshi.FORK)"
    out = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "later"


def test_make_model_env_needs_a_model():
    out = subprocess.run(["make", "-s", "-C", str(model_env.REPO), "model-env"], capture_output=True, text=True)
    assert out.returncode == 2 and "usage: make model-env MODEL=<name>" in out.stderr
