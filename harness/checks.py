"""Field checks shared by the settings dataclasses of every layer (they raise ValueError; the run
config turns it into a ConfigError naming the config group, :mod:`harness.runtime.config`), and
the check that no setting carries credentials inside a URL (they would be written to ``run.json``,
the invocation manifests and Hydra's logs)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit


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


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s'\"]*@")


def url_has_credentials(value: object) -> bool:
    """Whether ``value`` is a string holding a URL with a user or password (``scheme://user:pw@host``)."""
    if not isinstance(value, str) or "://" not in value:
        return False
    try:
        url = urlsplit(value.strip())
    except ValueError:
        return bool(_URL_USERINFO.search(value))
    return url.username is not None or url.password is not None


def settings_with_url_credentials(tree: Any, path: str = "") -> list[str]:
    """The dotted paths (``model.x.params.base_url``) of every string in a nested config (dicts and
    lists) that holds a URL with credentials; the values themselves are never returned."""
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in settings_with_url_credentials(v, f"{path}.{k}" if path else str(k))]
    if isinstance(tree, list | tuple):
        return [p for i, v in enumerate(tree) for p in settings_with_url_credentials(v, f"{path}[{i}]")]
    return [path] if url_has_credentials(tree) else []


def redact_url_credentials(text: str) -> str:
    """``text`` with the user and password of every URL in it replaced by ``***``."""
    return _URL_USERINFO.sub(r"\1***@", text)
