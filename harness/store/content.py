"""Content digests of the files a run's settings name, for the stage hashes (issue 19.4).

A stage's prefix hashes the settings that produced it (:func:`harness.store.layout.settings_hash`);
a setting that names a file (``scenes.manifest``, ``cue.manifest`` and the recordings it lists, an
LLM backend's prompt files) enters that hash by the file's **bytes**, never by its path, so an
edited file gets a new prefix and a moved or copied one (another machine, a fresh clone) keeps
its prefix. docs/configuration.md, "Files named by settings", says which file enters which stage.

A digest is SHA-256 over the whole file (streamed, :func:`hashlib.file_digest`): size and
modification time are not an identity (a copy gets a new mtime and would rerun everything; an
edit can keep both); it costs about 0.75 s per GB from the page cache on the 2-core development
machine (``bench/content_hash.py``; a cold read is bounded by the disk).
Within one process a file is read once while its identity on disk (device, inode, size, mtime,
ctime) is unchanged; a file modified less than :data:`RACY_S` before it was read is read again
next time, so an edit in the same timestamp tick as the read is never missed (git's "racy
timestamp" rule).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

RACY_S = 2.0  # a file modified this close to its read is not remembered (file system timestamp granularity)

_seen: dict[tuple[str, int, int, int, int, int], str] = {}  # identity on disk -> digest (this process)
_lock = threading.Lock()


class InputFileError(ValueError):
    """A file a setting names cannot be read: the message names the setting, the path and what the
    file should be. Raised where the plan is built, so the job stops before anything is spent."""


def input_digest(setting: str, path: str | os.PathLike[str], what: str) -> str:
    """SHA-256 (64 hex digits) of the bytes of the file ``path`` that the setting ``setting``
    names (e.g. ``"scenes.manifest"``); ``what`` says what the file should be, for the message.

    Raises:
        InputFileError: ``path`` does not exist, is a directory or cannot be read, as
            ``"<setting>=<path>: no such file (<what>)"`` (or ``a directory``, ``cannot be read: ...``).
    """
    p = Path(path)
    if not p.is_file():
        raise InputFileError(f"{setting}={path}: {'a directory' if p.is_dir() else 'no such file'} ({what})")
    try:
        return _digest(p)
    except OSError as e:
        raise InputFileError(f"{setting}={path}: cannot be read: {e.strerror or e} ({what})") from None


def listed_digest(path: str | os.PathLike[str]) -> str:
    """The digest of a file that a manifest lists (a recording): its SHA-256 as
    :func:`input_digest`, or ``"absent"`` / ``"unreadable"``: such a file is the problem of its
    line, which the stage reports (it is not the run's), and its appearing later changes the digest."""
    p = Path(path)
    if not p.is_file():
        return "absent"
    try:
        return _digest(p)
    except OSError:
        return "unreadable"


def _digest(p: Path) -> str:
    started = time.time_ns()
    st = p.stat()
    key = (str(p.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with _lock:
        known = _seen.get(key)
    if known is not None:
        return known
    with p.open("rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    if max(st.st_mtime_ns, st.st_ctime_ns) < started - RACY_S * 1e9:  # not modified around the read
        with _lock:
            _seen[key] = digest
    return digest
