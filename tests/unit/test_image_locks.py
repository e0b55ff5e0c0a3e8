"""Each model image's ``requirements.lock`` (the full resolution of its ``requirements.txt``, see
the lock's header) pins every requirement at a version its specifier allows."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

IMAGES = Path(__file__).resolve().parents[2] / "images"
FAMILIES = sorted(p.parent.name for p in IMAGES.glob("*/requirements.txt"))


def requirements(path: Path) -> list[Requirement]:
    """The requirement lines of ``path`` (options such as ``-c`` and comments skipped)."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-")):
            out.append(Requirement(line))
    return out


def lock(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"{path}: {line!r} is not name==version"
            assert canonicalize_name(name) not in pins, f"{path}: {name} pinned twice"
            pins[canonicalize_name(name)] = version
    return pins


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lock_pins_every_requirement_within_its_specifier(family):
    folder = IMAGES / family
    assert (folder / "requirements.lock").is_file(), f"images/{family} has no requirements.lock"
    pins = lock(folder / "requirements.lock")
    for req in requirements(folder / "requirements.txt"):
        if req.marker is not None and not req.marker.evaluate({"sys_platform": "linux", "platform_machine": "x86_64",
                                                               "python_version": "3.11"}):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"images/{family}: {req.name} is required but not in requirements.lock"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"images/{family}: requirements.lock pins {req.name}=={pins[name]}, outside {req}"


def test_a_lock_outside_its_specifier_is_caught(tmp_path):
    (tmp_path / "requirements.txt").write_text("-c ../../requirements.txt\nmoshi==0.2.13\n")
    (tmp_path / "requirements.lock").write_text("# header\nmoshi==0.2.12\n")
    pins, (req,) = lock(tmp_path / "requirements.lock"), requirements(tmp_path / "requirements.txt")
    assert not req.specifier.contains(pins["moshi"])
