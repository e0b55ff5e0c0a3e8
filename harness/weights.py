"""Model weights on local disk: a folder, or a Hugging Face repo's snapshot already in the local cache.

The harness never downloads weights at run time (docs/models.md, "Weights"): a job's image or
volume carries them, in a plain folder or in the Hugging Face hub cache (``HF_HOME``, or
``HF_HUB_CACHE`` for the cache folder itself). :func:`local_weights` is the one place that turns a
model's ``weights_path`` / repo id and revision into a folder; it uses ``huggingface_hub``'s own
offline lookup (``snapshot_download(..., local_files_only=True)``), never a walk of the cache.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["WeightsNotFoundError", "local_weights"]

_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


class WeightsNotFoundError(FileNotFoundError):
    """Weights that are neither a local folder nor in the local Hugging Face cache."""


def local_weights(path_or_repo: str | os.PathLike, revision: str | None = None, *, what: str | None = None,
                  allow_download: bool = False) -> Path:
    """The local folder holding a model's weights.

    Args:
        path_or_repo: a folder (returned as is), or a Hugging Face repo id (``owner/name``) whose
            snapshot at ``revision`` is looked up in the local hub cache (``huggingface_hub``'s
            ``HF_HUB_CACHE``, by default ``$HF_HOME/hub``).
        revision: branch, tag or commit of the repo (``None``: ``main``); unused for a folder.
        what: the noun phrase the error message starts with (e.g. ``"minicpm_o weights
            openbmb/MiniCPM-o-4_5@abc"``); default ``"weights <repo>@<revision>"``.
        allow_download: let ``huggingface_hub`` fetch a missing snapshot (off everywhere the
            harness runs a benchmark; only an explicit opt-in may turn it on).

    Returns:
        The folder (``<cache>/models--owner--name/snapshots/<commit>`` for a cached repo).

    Raises:
        WeightsNotFoundError: (a ``FileNotFoundError``) ``path_or_repo`` is neither a folder nor a
            repo id, or the repo at ``revision`` is not in the local cache; the message names the
            repo, the revision, the cache folder looked in and the ``huggingface-cli download``
            command that pre-fetches it.
        ImportError: ``huggingface_hub`` is not installed (only needed for a repo id).
    """
    source = os.fspath(path_or_repo)
    if Path(source).is_dir():
        return Path(source)
    if not _REPO_ID.fullmatch(source):
        raise WeightsNotFoundError(f"{what or 'weights'}: {source!r} is neither a directory nor a Hugging Face "
                                   "repo id (owner/name)")
    from huggingface_hub import snapshot_download  # ImportError propagates: the caller says which image lacks it

    rev = revision or "main"
    try:
        # revision only when given: None is huggingface_hub's own default (main)
        found = snapshot_download(source, local_files_only=not allow_download,
                                  **({"revision": revision} if revision else {}))
    except Exception as e:  # LocalEntryNotFoundError, RevisionNotFoundError, HFValidationError, OSError
        raise WeightsNotFoundError(
            f"{what or f'weights {source}@{rev}'} are not in the Hugging Face cache (HF_HOME); the harness never "
            f"downloads weights. Looked for {source} at revision {rev}: not in the local Hugging Face cache "
            f"{_cache_dir()}; pre-fetch it where that cache is mounted with "
            f"`HF_HUB_CACHE={_cache_dir()} huggingface-cli download {source} --revision {rev}` "
            f"({type(e).__name__}: {e})") from None
    return Path(found)


def _cache_dir() -> str:
    """The hub cache folder ``huggingface_hub`` reads now (``HF_HUB_CACHE``)."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return os.environ.get("HF_HUB_CACHE", "$HF_HOME/hub")
    return str(constants.HF_HUB_CACHE)
