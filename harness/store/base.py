"""The object-store contract and its local-filesystem implementation.

Keys are ``/``-separated relative paths such as ``demo/infer/oracle/3f2a.../shard-0000/x.flac``.
Keys are validated: no empty parts, no ``.``/``..``, no absolute paths, no backslashes or
control characters, so no key can escape the store's root.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol


class InvalidKey(ValueError):
    """An object key is malformed or would escape its prefix."""


def check_key(key: str) -> str:
    """Return ``key`` when it is a safe relative key; raise :class:`InvalidKey` otherwise."""
    if not key or key.startswith("/") or "\\" in key:
        raise InvalidKey(f"invalid object key {key!r}: empty, absolute or with a backslash")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise InvalidKey(f"invalid object key {key!r}: control character")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidKey(f"invalid object key {key!r}: empty, '.' or '..' path part")
    return key


class ObjectStore(Protocol):
    """What every stage needs from storage."""

    def get(self, key: str) -> bytes: ...  # raises FileNotFoundError
    def put(self, key: str, data: bytes, if_absent: bool = False) -> bool: ...  # False: existed, not written
    def exists(self, key: str) -> bool: ...
    def list(self, prefix: str) -> Iterator[str]: ...
    def describe(self) -> str: ...


class LocalStore:
    """Objects as files under ``root``; writes are atomic (temp file + rename).

    ``put(if_absent=True)`` is a conditional put: it returns False and writes nothing when
    the key already exists.
    """

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def get(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def put(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            if if_absent:
                try:
                    os.link(tmp, path)  # atomic create-if-absent
                except FileExistsError:
                    return False
                return True
            os.replace(tmp, path)
            return True
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        if not base.is_dir():
            return
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.name.startswith(".tmp-"):
                yield p.relative_to(self.root).as_posix()

    def describe(self) -> str:
        return f"local:{self.root}"


def put_json(store: ObjectStore, key: str, obj: Any, if_absent: bool = False) -> bool:
    """Write ``obj`` as indented JSON."""
    return store.put(key, json.dumps(obj, indent=1, sort_keys=True).encode(), if_absent=if_absent)


def get_json(store: ObjectStore, key: str) -> Any:
    return json.loads(store.get(key))


def open_store(kind: str, root: str) -> ObjectStore:
    """Build the store named by config ``store.kind`` (``local``)."""
    if kind == "local":
        return LocalStore(root)
    raise ValueError(f"unknown store kind {kind!r} (known: local)")
