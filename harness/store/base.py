"""The object-store contract, its local-filesystem implementation and :func:`open_store`.

Keys are ``/``-separated relative paths such as ``demo/infer/oracle/3f2a.../shard-0000/x.flac``.
Keys are validated before any I/O or request: no empty parts, no ``.``/``..``, no absolute
paths, no backslashes, no control characters (C0, DEL, C1) and valid UTF-8, so no key can
escape the store's root or prefix. Every backend stores a key at the same place relative to
its root (a directory for :class:`LocalStore`, ``s3://bucket/prefix`` for
:class:`harness.store.s3.S3Store`), so a run can be copied between them unchanged.
"""

from __future__ import annotations

import json
import os
import secrets
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol


class InvalidKey(ValueError):
    """An object key is malformed or would escape its prefix."""


class StoreError(OSError):
    """A remote store operation failed for good (retries exhausted, access denied, no bucket, no
    credentials). The message names the store (``describe()``) and the key, never a secret."""


def check_key(key: str) -> str:
    """Return ``key`` when it is a safe relative key; raise :class:`InvalidKey` otherwise."""
    if not key or key.startswith("/") or "\\" in key:
        raise InvalidKey(f"invalid object key {key!r}: empty, absolute or with a backslash")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in key):
        raise InvalidKey(f"invalid object key {key!r}: control character or lone surrogate")
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
    def probe(self) -> None: ...  # raises StoreError: the store cannot be written or ignores if_absent


PROBE_KEY = "_probe/conditional-put.json"  # the one object a probe writes (and leaves) under a store's root


def conditional_put_problem(put_if_absent: Callable[[str, bytes], bool], get: Callable[[str], bytes]) -> str | None:
    """Check that a conditional put refuses an existing object; return what is wrong, or None.

    Writes :data:`PROBE_KEY` if it is absent (a small JSON object, left in place so no delete
    permission is needed; concurrent probes are harmless), reads it, makes a second conditional
    put of it with a different body, which must return False, and reads it again, which must
    give the same bytes. Request failures propagate (``StoreError``/``OSError``) unchanged.
    """
    put_if_absent(PROBE_KEY, json_bytes({"purpose": "conditional-put probe (docs/storage.md); safe to keep"}))
    try:
        before = get(PROBE_KEY)
        accepted = put_if_absent(PROBE_KEY, json_bytes({"purpose": "must never be stored",
                                                        "nonce": secrets.token_hex(8)}))
        after = get(PROBE_KEY)
    except FileNotFoundError:
        return f"the probe object {PROBE_KEY!r} vanished right after it was written"
    if accepted:
        return (f"a conditional put (create only if absent) of the existing probe object {PROBE_KEY!r} was "
                "accepted instead of refused")
    if after != before:
        return f"a refused conditional put of the existing probe object {PROBE_KEY!r} overwrote it anyway"
    return None


class LocalStore:
    """Objects as files under ``root``; writes are atomic (temp file + rename).

    ``put(if_absent=True)`` is a conditional put: it returns False and writes nothing when
    the key already exists. Files are created with mode ``0o666`` and directories ``0o777``,
    both less the process umask (and any default ACL), as other tools do: 0644/0755 under the
    usual umask 022, so colleagues on a shared disk can read the results.
    """

    def __init__(self, root: str | os.PathLike[str]):
        """Raises :class:`StoreError` when ``root`` cannot be created as a directory."""
        self.root = Path(root).resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"local:{self.root}: not usable as a store: {type(e).__name__}: {e}") from None

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def get(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def put(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # not tempfile.mkstemp, which makes 0600 files whatever the umask: 0o666 less the umask
        tmp = path.parent / f".tmp-{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
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
        """Keys under the directory ``prefix`` (``""``: all), sorted as strings (S3's order)."""
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        if not base.is_dir():
            return
        yield from sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*")
                          if p.is_file() and not p.name.startswith(".tmp-"))

    def describe(self) -> str:
        return f"local:{self.root}"

    def probe(self) -> None:
        """Check that the root is writable and that ``put(if_absent=True)`` refuses an existing
        file (a filesystem without hard links fails here); leaves :data:`PROBE_KEY` under the root.
        Raises :class:`StoreError` naming the root and the cause."""
        try:
            problem = conditional_put_problem(lambda k, d: self.put(k, d, if_absent=True), self.get)
        except OSError as e:
            raise StoreError(f"{self.describe()}: not usable as a store: {type(e).__name__}: {e}") from e
        if problem:
            raise StoreError(f"{self.describe()}: {problem}")


def json_bytes(obj: Any) -> bytes:
    """``obj`` as the indented, key-sorted JSON every stored JSON object uses."""
    return json.dumps(obj, indent=1, sort_keys=True).encode()


def put_json(store: ObjectStore, key: str, obj: Any, if_absent: bool = False) -> bool:
    """Write ``obj`` as indented JSON."""
    return store.put(key, json_bytes(obj), if_absent=if_absent)


def get_json(store: ObjectStore, key: str) -> Any:
    return json.loads(store.get(key))
