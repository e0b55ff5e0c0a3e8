"""``make model-env MODEL=<name>``: a model family's environment for real runs, without its image.

The image's recipe (images/<family>/), as ``make model-smoke`` uses it, in a virtualenv
``.venv-<family>`` at the repository root:

1. the virtualenv sees the harness's own packages (torch, ray, silero-vad, ...): a path file names
   the calling interpreter's site-packages (``--system-site-packages`` would expose the base
   Python's instead), and the repository root;
2. the family's pins are installed from the package index: ``images/<family>/requirements.txt``,
   the file the image installs, whose ``-c ../../requirements.txt`` keeps the harness's pins;
3. the upstream code: ``UPSTREAM_REPO`` cloned at ``UPSTREAM_COMMIT`` (``images/<family>/build-args``,
   the pins ``make images`` passes) into ``.venv-<family>/src/<family>`` (or ``SRC``, a checkout
   you have, at any commit: said so), and the adapter's ``SOURCE_DIRS`` put on the path by a path
   file that sorts before the harness's, so the upstream packages come first (PersonaPlex's fork
   of ``moshi`` before Kyutai's, which the harness environment holds).

Then ``.venv-<family>/bin/python -m jobs.pipeline 'model=[<name>]' ...`` runs the benchmark with
that model, its actors in the same interpreter. Weights are not fetched here: ``make weights``.
Needs the package index and (for source-only families) git access to the upstream repository.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
IMAGE_PREFIX = "duplex-mpe-"  # an image is duplex-mpe-<family>, built from images/<family>/ (`make images`)


def image_family(model_name: str, conf_dir: Path | None = None) -> str | None:
    """The image family of model config ``model_name`` (its ``image: duplex-mpe-<family>``), None
    for a model that runs in the base image (``image: null``). ``conf_dir``: the model configs
    (default: ``conf/model``).

    Raises:
        ValueError: an unknown model, or an image that is not ``duplex-mpe-<family>`` of a folder
            ``images/<family>/`` with a Dockerfile.
    """
    from harness.models.registry import CONF_DIR, model_config

    image = model_config(model_name, conf_dir or CONF_DIR).get("image")
    if image is None:
        return None
    family = str(image).removeprefix(IMAGE_PREFIX)
    if not image.startswith(IMAGE_PREFIX) or not (IMAGES / family / "Dockerfile").is_file():
        raise ValueError(f"model {model_name!r}: image {image!r} is not {IMAGE_PREFIX}<family> of a folder "
                         f"{IMAGES}/<family>/ with a Dockerfile")
    return family


def family_pins(family: str) -> tuple[list[str], dict[str, str]]:
    """What image family ``family`` pins, each written once in its folder: the requirements
    (``images/<family>/requirements.txt``, its lines without comments and options, e.g.
    ``transformers==4.51.3``) and the build arguments (``images/<family>/build-args``, ``KEY=VALUE``
    lines, e.g. ``UPSTREAM_COMMIT``: ``{}`` without that file)."""
    folder = IMAGES / family
    lines = [ln.split("#")[0].strip() for ln in (folder / "requirements.txt").read_text().splitlines()]
    args_file = folder / "build-args"
    args = [ln.strip() for ln in args_file.read_text().splitlines()] if args_file.is_file() else []
    return ([ln for ln in lines if ln and not ln.startswith("-")],
            dict(ln.split("=", 1) for ln in args if ln and not ln.startswith("#")))


UPSTREAM_PATHS = "00-duplex-mpe-upstream.pth"  # sorts before HARNESS_PATHS: the upstream code comes first
HARNESS_PATHS = "duplex_mpe_harness.pth"


def site_packages(python: Path) -> Path:
    """The ``purelib`` folder of interpreter ``python``."""
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def create(venv: Path, family: str | None) -> Path:
    """The virtualenv ``venv`` (made when absent) seeing the harness's packages, with image family
    ``family``'s requirements installed (``None``: the base image's, nothing to add); returns its
    interpreter.

    Raises:
        subprocess.CalledProcessError: ``venv`` or ``pip install`` failed (pip's own output says why).
    """
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        lines = [sysconfig.get_paths()["purelib"], str(REPO)]
        (site_packages(python) / HARNESS_PATHS).write_text("\n".join(lines) + "\n")
    if family is not None:
        reqs = IMAGES / family / "requirements.txt"
        pins = family_pins(family)[0]
        if pins:
            print(f"installing into {venv}: {' '.join(pins)} ({reqs})", flush=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
                            str(reqs)], check=True)
    return python


def checkout(family: str, dest: Path) -> Path:
    """``UPSTREAM_REPO`` at ``UPSTREAM_COMMIT`` of ``images/<family>/build-args`` in ``dest`` (cloned
    when absent, else moved to that commit).

    Raises:
        ValueError: the family's build-args name no upstream repository (its code is a package).
        subprocess.CalledProcessError: git failed (its output says why).
    """
    args = family_pins(family)[1]
    if "UPSTREAM_REPO" not in args or "UPSTREAM_COMMIT" not in args:
        raise ValueError(f"images/{family}/build-args names no UPSTREAM_REPO and UPSTREAM_COMMIT: the family's code "
                         "comes from its requirements alone")
    if not (dest / ".git").exists():
        subprocess.run(["git", "clone", "--quiet", args["UPSTREAM_REPO"], str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", args["UPSTREAM_COMMIT"]], check=True)
    return dest


def make(model_name: str, venv: Path | None = None, src: Path | None = None) -> Path:
    """The environment of model config ``model_name`` (see the module docstring); returns its folder."""
    from harness.models.registry import model_class

    family = image_family(model_name)
    venv = venv or REPO / f".venv-{family or 'base'}"
    python = create(venv, family)
    source_dirs = getattr(model_class(model_name), "SOURCE_DIRS", ())
    if family is not None and "UPSTREAM_COMMIT" in family_pins(family)[1]:
        if src is None:
            src = checkout(family, venv / "src" / family)
        else:
            head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()
            pinned = family_pins(family)[1]["UPSTREAM_COMMIT"]
            if head != pinned:
                print(f"model-env: {src} is at {head or 'an unknown commit'}, not the commit images/{family}/"
                      f"build-args pins ({pinned})", file=sys.stderr)
        paths = [str((src / d).resolve()) for d in source_dirs]
        (site_packages(python) / UPSTREAM_PATHS).write_text("\n".join(paths) + "\n")
    print(f"model-env: {venv} ready for model {model_name!r}: {venv}/bin/python -m jobs.pipeline "
          f"'model=[{model_name}]' cluster.num_gpus=<GPUs of this machine> ... (weights: make weights "
          f"MODEL={model_name})")
    return venv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make model-env", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model config name (conf/model/<name>.yaml), e.g. personaplex")
    ap.add_argument("--venv", type=Path, help="the virtualenv (default: .venv-<family> at the repository root)")
    ap.add_argument("--src", type=Path, help="an upstream checkout to use instead of cloning the pinned commit")
    args = ap.parse_args(argv)
    try:
        make(args.model, args.venv, args.src)
    except (ValueError, subprocess.CalledProcessError) as e:
        print(f"model-env: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
