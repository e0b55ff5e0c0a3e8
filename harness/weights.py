"""Model weights on local disk: what a model needs, where it is, and the one command that fetches it.

Nothing downloads at run time (docs/models.md, "Weights"): a job's image or volume carries the
weights, in a plain folder or in the Hugging Face hub cache (``HF_HOME``, or ``HF_HUB_CACHE`` for
the cache folder itself). Each adapter states once what it reads (:class:`Requirements`: the
modules of its stack and the repositories with the files its loader opens, from
``DuplexModel.requirements``); three readers use that one statement, so they never disagree:

* the job's preflight (:mod:`harness.runtime.preflight`) checks it before anything is spent;
* the fetch command (``make weights MODEL=<m>``, ``jobs/weights.py``: :func:`fetch`, the only
  code that downloads) fetches every repository at its pinned revision and verifies the files;
* the adapter's ``load`` reads the folder :func:`locate` gives, and records what it loaded
  (:func:`loaded`: ``repo@<snapshot commit>`` or the folder) in ``ModelInfo.weights``.

A repository is pinned to a commit (40 hex digits): a branch or tag moves, so a run that read
``main`` could not say what it evaluated. :func:`local_weights` is the lower-level lookup (a folder,
or a repo id at a revision in the cache, with huggingface_hub's own offline API, never a walk of
the cache); the ASR and TTS backends call it directly.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["COMMIT", "Repo", "Requirements", "WeightsNotFoundError", "fetch", "fetch_command", "loaded",
           "local_weights", "locate", "missing_files", "pin_problem"]

_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")
COMMIT = re.compile(r"[0-9a-f]{40}")  # a pinned revision: a commit of the repository
FIND_COMMIT = ("the Hub page's \"Files and versions\" tab, \"History\", or "
               "`python -c \"import huggingface_hub as h; print(h.model_info('{repo}').sha)\"` (main's commit)")


class WeightsNotFoundError(FileNotFoundError):
    """Weights that are not on local disk (or not complete, or not pinned): the message names the
    repository, the revision, where it looked and the command that fetches them."""


@dataclass(frozen=True)
class Repo:
    """One set of weights a model reads: a Hugging Face repository at a revision, or a local folder.

    Attributes:
        source: a repo id (``owner/name``) or a local folder.
        revision: the repository's commit (40 hex digits); a branch, tag or ``None`` is refused
            for a repo id (:func:`pin_problem`); unused for a folder.
        files: paths, relative to the snapshot's root, that the loader opens. A ``*.index.json``
            (a sharded checkpoint's index) also requires every shard its ``weight_map`` names.
        any_of: groups of alternative paths: at least one of each group (e.g. a single
            ``model.safetensors`` or a sharded ``model.safetensors.index.json``).
        role: what the messages call it (``"weights"``, ``"LLM"``, ``"codec"``).
        source_key, revision_key: the adapter's params that name ``source`` and ``revision``
            (messages say ``model.<m>.params.<key>``).
        gated: the Hub asks for its licence to be accepted before it serves the files (a token in
            ``HF_TOKEN`` of an account that did).
    """

    source: str
    revision: str | None = None
    files: tuple[str, ...] = ()
    any_of: tuple[tuple[str, ...], ...] = ()
    role: str = "weights"
    source_key: str = "weights_path"
    revision_key: str = "revision"
    gated: bool = False

    @property
    def on_hub(self) -> bool:
        """A Hugging Face repo id (looked up in the cache), not a local folder."""
        return not Path(self.source).is_dir() and bool(_REPO_ID.fullmatch(self.source))

    def __str__(self) -> str:
        return f"{self.source}@{self.revision or 'unpinned'}" if self.on_hub else self.source


@dataclass(frozen=True)
class Requirements:
    """What a model needs in the environment it runs in (``DuplexModel.requirements``).

    Attributes:
        imports: its stack, as ``"module"`` or ``"module:name"`` (the module must define ``name``):
            what ``load`` imports, so that the preflight's import of them is the real test.
        repos: the weights it reads (:class:`Repo`), in the order ``load`` reads them.
        stack: a sentence on where that stack lives when it is not importable (an image, a
            package that shadows it), added to the preflight's message.
    """

    imports: tuple[str, ...] = ()
    repos: tuple[Repo, ...] = ()
    stack: str = ""


def fetch_command(model: str) -> str:
    """The command that fetches model config ``model``'s weights (``jobs/weights.py``)."""
    return f"make weights MODEL={model}"


def _key(model: str, key: str) -> str:
    return f"model.{model}.params.{key}"


def pin_problem(repo: Repo, model: str) -> str | None:
    """Why ``repo`` is not pinned to a commit (a repo id whose revision is a branch, a tag or
    ``None``), or None (pinned, or a local folder)."""
    if not repo.on_hub or (isinstance(repo.revision, str) and COMMIT.fullmatch(repo.revision)):
        return None
    what = f"revision {repo.revision!r}" if repo.revision else "no revision"
    return (f"{repo.role} {repo.source} ({_key(model, repo.source_key)}) has {what}, not a commit: pin the 40-hex "
            f"commit you evaluate ({_key(model, repo.revision_key)}=<commit>, conf/model/{model}.yaml); find it on "
            + FIND_COMMIT.format(repo=repo.source))


def missing_files(root: Path, repo: Repo) -> list[str]:
    """The paths of ``repo.files`` and ``repo.any_of`` that are not files under ``root``, with the
    shards a present ``*.index.json`` names (an alternative group is shown as ``a | b``)."""
    missing: list[str] = []

    def need(path: str) -> bool:
        if not (root / path).is_file():
            return False
        if path.endswith(".index.json"):
            try:
                shards = sorted(set(json.loads((root / path).read_text())["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError):
                missing.append(f"{path} (not a checkpoint index with a weight_map)")
                return True
            folder = Path(path).parent
            missing.extend(str(folder / s) for s in shards if not (root / folder / s).is_file())
        return True

    missing.extend(f for f in repo.files if not need(f))
    missing.extend(" | ".join(group) for group in repo.any_of if not any(need(f) for f in group))
    return missing


def locate(repo: Repo, model: str) -> Path:
    """The local folder of ``repo``, complete, for model config ``model``: the folder itself, or
    the repository's snapshot at its pinned commit in the local Hugging Face cache. Never downloads.

    Raises:
        WeightsNotFoundError: the repo id is not pinned to a commit (:func:`pin_problem`), is not
            in the cache at that commit, or the snapshot (or folder) lacks files the loader reads;
            the message names the repository, the revision, the cache and ``make weights MODEL=...``.
        ImportError: ``huggingface_hub`` is not installed (only needed for a repo id).
    """
    problem = pin_problem(repo, model)
    if problem:
        raise WeightsNotFoundError(problem)
    command = fetch_command(model)
    try:
        root = local_weights(repo.source, repo.revision, what=f"{repo.role} {repo} ({_key(model, repo.source_key)})",
                             command=command)
    except WeightsNotFoundError as e:
        gated = " (gated: accept its licence on the Hub, then fetch with HF_TOKEN set)" if repo.gated else ""
        raise WeightsNotFoundError(f"{e}{gated}") from None
    missing = missing_files(root, repo)
    if missing:
        if repo.on_hub:
            raise WeightsNotFoundError(f"{repo.role} {repo} ({_key(model, repo.source_key)}): the snapshot {root} "
                                       f"lacks {', '.join(missing)}: fetch it again with `{command}` (it resumes, "
                                       "then verifies)")
        raise WeightsNotFoundError(f"{repo.role} folder {root} ({_key(model, repo.source_key)}) lacks "
                                   f"{', '.join(missing)}: give a folder laid out as the model's repository is")
    return root


def fetch(repo: Repo, model: str) -> Path:
    """Download ``repo`` into the local Hugging Face cache (huggingface_hub's ``snapshot_download``:
    resumable, its own progress bars, ``HF_TOKEN`` for a gated repository), then verify the files
    the loader reads; the only function of the harness that downloads. A folder is only verified.
    An unpinned repo id (``revision`` ``None`` or a branch) is fetched at that branch's head: the
    returned folder's name is the commit to pin.

    Raises:
        WeightsNotFoundError: the download failed (the message keeps huggingface_hub's reason and,
            for a gated repository, says how to get access) or files are missing afterwards.
    """
    if not repo.on_hub:
        return locate(repo, model)
    try:
        root = local_weights(repo.source, repo.revision, what=f"{repo.role} {repo}", allow_download=True)
    except WeightsNotFoundError as e:
        gated = (f"; {repo.source} is gated: accept its licence at https://huggingface.co/{repo.source} with the "
                 "account whose token is in HF_TOKEN") if repo.gated else ""
        raise WeightsNotFoundError(f"{e}{gated}") from None
    missing = missing_files(root, repo)
    if missing:
        raise WeightsNotFoundError(f"{repo.role} {repo}: the snapshot {root} lacks {', '.join(missing)} after the "
                                   "download: the repository at this revision is not laid out as the adapter reads it")
    return root


def loaded(repo: Repo, root: Path) -> str:
    """What was read, for ``ModelInfo.weights``: ``repo@<snapshot commit>`` (the snapshot folder's
    name) for a repo id, else the folder."""
    return f"{repo.source}@{root.name}" if repo.on_hub else str(root)


def local_weights(path_or_repo: str | os.PathLike, revision: str | None = None, *, what: str | None = None,
                  allow_download: bool = False, command: str | None = None) -> Path:
    """The local folder holding a model's weights.

    Args:
        path_or_repo: a folder (returned as is), or a Hugging Face repo id (``owner/name``) whose
            snapshot at ``revision`` is looked up in the local hub cache (``huggingface_hub``'s
            ``HF_HUB_CACHE``, by default ``$HF_HOME/hub``).
        revision: branch, tag or commit of the repo (``None``: ``main``); unused for a folder.
        what: the noun phrase the error message starts with (e.g. ``"minicpm_o weights
            openbmb/MiniCPM-o-4_5@abc"``); default ``"weights <repo>@<revision>"``.
        allow_download: let ``huggingface_hub`` fetch a missing snapshot: only :func:`fetch` (and
            the Qwen3-ASR backend's explicit opt-in) turn it on.
        command: the command the message says fetches it (default: the ``huggingface-cli
            download`` command for this repo and revision).

    Returns:
        The folder (``<cache>/models--owner--name/snapshots/<commit>`` for a cached repo).

    Raises:
        WeightsNotFoundError: (a ``FileNotFoundError``) ``path_or_repo`` is neither a folder nor a
            repo id, or the repo at ``revision`` is not in the local cache; the message names the
            repo, the revision, the cache folder looked in and the command that fetches it.
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
    except Exception as e:  # LocalEntryNotFoundError, RevisionNotFoundError, GatedRepoError, HFValidationError, OSError
        if allow_download:
            raise WeightsNotFoundError(f"{what or f'weights {source}@{rev}'}: fetching {source} at revision {rev} "
                                       f"into {_cache_dir()} failed ({type(e).__name__}: {e})") from None
        command = command or f"HF_HUB_CACHE={_cache_dir()} huggingface-cli download {source} --revision {rev}"
        why = "" if type(e).__name__ == "LocalEntryNotFoundError" else f" ({type(e).__name__}: {e})"
        raise WeightsNotFoundError(
            f"{what or f'weights {source}@{rev}'} are not in the Hugging Face cache: looked for {source} at revision "
            f"{rev} in the local Hugging Face cache {_cache_dir()}{why}; the harness never downloads weights at run "
            f"time: fetch them where that cache is mounted with `{command}`") from None
    return Path(found)


def _cache_dir() -> str:
    """The hub cache folder ``huggingface_hub`` reads now (``HF_HUB_CACHE``)."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return os.environ.get("HF_HUB_CACHE", "$HF_HOME/hub")
    return str(constants.HF_HUB_CACHE)
