"""Field checks shared by the settings dataclasses of every layer (they raise ValueError; the run
config turns it into a ConfigError naming the config group, :mod:`harness.runtime.config`)."""

from __future__ import annotations

from typing import Any


def require_positive(obj: Any, *names: str) -> None:
    """Raise ValueError naming the first of ``names`` whose value on ``obj`` is not a number > 0."""
    for name in names:
        v = getattr(obj, name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise ValueError(f"{name} must be a number > 0, got {v!r}")


def require_integer(obj: Any, *names: str) -> None:
    """Raise ValueError naming the first of ``names`` whose value on ``obj`` is not an integer."""
    for name in names:
        v = getattr(obj, name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name} must be an integer, got {v!r}")
