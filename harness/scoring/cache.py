"""Content-addressed JSON cache in an object store, and :class:`CachedJudge` on top of it.

:class:`ContentCache` maps *key parts* (any JSON-able mapping that names everything the result
depends on) to a JSON value. The object key is ``<prefix>/<h[:2]>/<h>.json`` where ``h`` is the
SHA-256 of the key parts as canonical JSON (sorted keys, no whitespace, UTF-8); the object holds
``{"schema": 1, "key_parts": ..., "value": ...}``, so every entry says what produced it. Entries
are written with a conditional put (the first writer wins; two workers computing the same key
at once both pay, one result is kept). A corrupt entry is recomputed and overwritten.
:meth:`ContentCache.get_or_compute` returns the JSON form of the value on a miss too, so a miss
and a later hit return equal values; its ``reuse`` test turns a stored value that is not a result
(an unparseable verdict) into a miss. It serves any deterministic-by-key result, e.g. ASR::

    cache = ContentCache(store, "demo/cache/asr")
    out = cache.get_or_compute(
        {"asr": asr.name, "version": asr.version, "audio_sha256": digest, "vocabulary": list(vocab)},
        lambda: {"text": asr.transcribe(audio, sr, vocab).text})

:class:`CachedJudge` wraps any :class:`~harness.scoring.judge.Judge`. Its key parts are the
backend ``name``, ``model``, the task's prompt version (``prompt_versions[task]`` when the judge
has it, else ``prompt_version``), the backend's ``settings`` (when it has them), the task and
the inputs (speech and overlap durations rounded to the millisecond). A hit returns the stored
verdict with its ``cost`` **zeroed** (nothing was spent this time); the original cost stays in
the entry, is added up in :attr:`CachedJudge.saved` and can be read back with
:meth:`CachedJudge.stored_verdict`. :attr:`CachedJudge.cost` adds up what misses really spent,
and :meth:`CachedJudge.usage` gives it as the usage ledger's raw usage (:mod:`harness.pricing`).
Errors raised by the judge propagate and are never cached. An ``UNPARSEABLE`` verdict (a refusal,
a reply cut off) is stored for audit but never served: a lookup of it is a miss, the judge is
asked again (:attr:`CachedJudge.retried` counts these calls), and the first verdict with a label
replaces it (docs/judge.md, "Caching and cost accounting").
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from harness.scoring.judge import TASKS, UNPARSEABLE, ContextTurn, Cost, Judge, Verdict
from harness.store.base import ObjectStore, check_key, get_json, put_json

R = TypeVar("R")  # a paid result: has cost, to_dict() and from_dict()

SCHEMA = 1
_MISSING = object()


def canonical_json(obj: Any) -> str:
    """The canonical JSON text that cache keys are hashed from."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def content_key(key_parts: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of ``key_parts`` as canonical JSON."""
    return hashlib.sha256(canonical_json(key_parts).encode("utf-8")).hexdigest()


class ContentCache:
    """A JSON cache keyed by the SHA-256 of its key parts, stored under ``prefix`` in ``store``.

    ``hits`` and ``misses`` count :meth:`get_or_compute` calls; ``rejected``, the misses whose
    stored value its ``reuse`` test refused.
    """

    def __init__(self, store: ObjectStore, prefix: str):
        self.store = store
        self.prefix = check_key(prefix.strip("/"))
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        self._lock = threading.Lock()

    def object_key(self, key_parts: Mapping[str, Any]) -> str:
        h = content_key(key_parts)
        return f"{self.prefix}/{h[:2]}/{h}.json"

    def _read(self, okey: str) -> Any:
        """The stored value, or ``_MISSING`` when absent; ``ValueError`` when the entry is corrupt."""
        try:
            entry = get_json(self.store, okey)
        except FileNotFoundError:
            return _MISSING
        if not isinstance(entry, dict) or entry.get("schema") != SCHEMA or "value" not in entry:
            raise ValueError(f"cache entry {okey} has an unknown layout")
        return entry["value"]

    def get(self, key_parts: Mapping[str, Any], default: Any = None) -> Any:
        """The cached value for ``key_parts``, or ``default`` (absent or unreadable). Not counted."""
        try:
            value = self._read(self.object_key(key_parts))
        except ValueError:
            return default
        return default if value is _MISSING else value

    def put(self, key_parts: Mapping[str, Any], value: Any, overwrite: bool = False) -> Any:
        """Store ``value`` (made JSON) under ``key_parts``; returns the JSON form that was offered.
        Without ``overwrite`` an existing entry is kept (first writer wins)."""
        value = json.loads(canonical_json(value))
        entry = {"schema": SCHEMA, "key_parts": json.loads(canonical_json(key_parts)), "value": value}
        put_json(self.store, self.object_key(key_parts), entry, if_absent=not overwrite)
        return value

    def get_or_compute(self, key_parts: Mapping[str, Any], fn: Callable[[], Any],
                       reuse: Callable[[Any], bool] | None = None) -> Any:
        """The cached value for ``key_parts``; on a miss, ``fn()`` is computed, stored and returned
        in its JSON form (tuples become lists, ...).

        ``reuse`` (default: every value) tells a result from a stored non-result: a stored value it
        refuses is a miss as well (counted in :attr:`rejected`), so ``fn()`` runs again, and the
        new value replaces the stored one only when ``reuse`` accepts it. A refused value never
        replaces an entry (the first one stays for audit, and a result another worker stored
        meanwhile is not overwritten by a non-result)."""
        okey = self.object_key(key_parts)
        try:
            value = self._read(okey)
            corrupt = False
        except ValueError:  # includes json.JSONDecodeError
            value, corrupt = _MISSING, True
        refused = value is not _MISSING and reuse is not None and not reuse(value)
        if value is not _MISSING and not refused:
            with self._lock:
                self.hits += 1
            return value
        with self._lock:
            self.misses += 1
            self.rejected += refused
        fresh = json.loads(canonical_json(fn()))
        return self.put(key_parts, fresh, overwrite=corrupt or (refused and reuse(fresh)))


def answer_inputs(transcript: str, gold: str, question: str) -> dict[str, Any]:
    """The inputs of an answer judgement as they enter the cache key."""
    return {"transcript": transcript, "gold": gold, "question": question}


def window_inputs(transcript: str, context: Sequence[ContextTurn], speech_s: float,
                  overlap_s: float) -> dict[str, Any]:
    """The inputs of a window judgement as they enter the cache key (durations to the millisecond)."""
    return {"transcript": transcript, "context": [[t.speaker, t.text] for t in context],
            "speech_s": round(float(speech_s), 3), "overlap_s": round(float(overlap_s), 3)}


class MeteredCache:
    """Paid results behind an optional :class:`ContentCache`, with the counters every LLM backend
    reports: ``hits``, ``misses`` (paid calls), ``cost`` (what the misses spent) and ``saved``
    (the original cost of the hits). Shared by :class:`CachedJudge`, the LLM text reference and
    the Duplex Cue LLM labeller.

    Args:
        cache: where results are kept; None pays for every call (nothing is kept).
        reuse: which stored results may be served (default: all); a refused one is paid for again
            (:meth:`ContentCache.get_or_compute`), and counted in :attr:`retried`.
    """

    def __init__(self, cache: ContentCache | None, reuse: Callable[[Any], bool] | None = None):
        self.cache = cache
        self.reuse = reuse
        self.hits = 0
        self.misses = 0
        self.cost = Cost()
        self.saved = Cost()
        self._lock = threading.Lock()

    def paid(self, key_parts: Mapping[str, Any], fn: Callable[[], R], result_type: type[R]) -> R:
        """``fn()``'s result for ``key_parts``: computed (and counted as a miss) unless cached; a hit
        is ``result_type.from_dict`` of the stored value with its ``cost`` zeroed (nothing was spent
        this time) and its original cost added to :attr:`saved`. ``R`` has ``cost``, ``to_dict``
        and ``from_dict``. Errors from ``fn`` propagate and are never cached."""
        computed: list[R] = []

        def compute() -> dict[str, Any]:
            computed.append(fn())
            return computed[0].to_dict()

        reuse = None if self.reuse is None else (lambda d: self.reuse(result_type.from_dict(d)))
        stored = self.cache.get_or_compute(key_parts, compute, reuse) if self.cache is not None else compute()
        with self._lock:
            if computed:
                self.misses += 1
                self.cost = self.cost + computed[0].cost
                return computed[0]
            original = result_type.from_dict(stored)
            self.hits += 1
            self.saved = self.saved + original.cost
        return replace(original, cost=Cost())

    @property
    def retried(self) -> int:
        """Paid calls for a key whose stored result ``reuse`` refused (an unparseable verdict asked again)."""
        return self.cache.rejected if self.cache is not None else 0


class CachedJudge(MeteredCache):
    """Any :class:`~harness.scoring.judge.Judge`, with its verdicts cached in ``store`` under ``prefix``.

    It is a Judge itself (same ``name``, ``model``, ``prompt_version``). Counters: ``hits``,
    ``misses``, ``cost`` (spent by misses), ``saved`` (the original cost of the hits) and
    ``retried`` (misses on a stored ``UNPARSEABLE`` verdict). An ``UNPARSEABLE`` verdict is
    stored (its ``raw`` kept for audit) but never served: the next lookup asks the judge again,
    and a verdict with a label replaces it (docs/judge.md; spec section 5 scores it as a
    failure, so serving it would keep a judge's refusal or cut-off reply for every later run).
    """

    def __init__(self, judge: Judge, store: ObjectStore, prefix: str):
        super().__init__(ContentCache(store, prefix), reuse=lambda v: v.label != UNPARSEABLE)
        self.judge = judge
        self.name = judge.name
        self.model = judge.model
        self.prompt_version = judge.prompt_version
        versions = getattr(judge, "prompt_versions", None) or {}
        self.prompt_versions = {t: versions.get(t, judge.prompt_version) for t in TASKS}

    def key_parts(self, task: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        if task not in TASKS:
            raise ValueError(f"unknown judge task {task!r}; expected one of {', '.join(TASKS)}")
        return {
            "backend": self.name,
            "model": self.model,
            "prompt_version": self.prompt_versions[task],
            "settings": dict(getattr(self.judge, "settings", None) or {}),
            "task": task,
            "inputs": dict(inputs),
        }

    def stored_verdict(self, task: str, inputs: Mapping[str, Any]) -> Verdict | None:
        """The stored verdict for ``inputs`` (:func:`answer_inputs`/:func:`window_inputs`) with its
        original cost, or ``None``; computes nothing and counts nothing. It may be an
        ``UNPARSEABLE`` verdict, kept for audit, which a lookup does not serve."""
        d = self.cache.get(self.key_parts(task, inputs))
        return Verdict.from_dict(d) if d is not None else None

    def _cached(self, task: str, inputs: Mapping[str, Any], fn: Callable[[], Verdict]) -> Verdict:
        return self.paid(self.key_parts(task, inputs), fn, Verdict)

    def judge_answer(self, transcript: str, gold: str, question: str) -> Verdict:
        return self._cached("answer", answer_inputs(transcript, gold, question),
                            lambda: self.judge.judge_answer(transcript, gold, question))

    def classify_window(self, transcript: str, context: Sequence[ContextTurn], speech_s: float,
                        overlap_s: float) -> Verdict:
        return self._cached("window", window_inputs(transcript, context, speech_s, overlap_s),
                            lambda: self.judge.classify_window(transcript, context, speech_s, overlap_s))

    def usage(self) -> dict[str, Any] | None:
        """The usage ledger's raw usage of the paid calls (misses) so far, when the judge meters an
        API (:meth:`~harness.scoring.judge.llm.LLMJudge.usage`); None for an offline judge or no call."""
        usage = getattr(self.judge, "usage", None)
        return usage(self.cost, self.misses) if usage is not None else None

    def stats(self) -> dict[str, Any]:
        """Counters as JSON: hits, misses (of which ``retried``: unparseable verdicts asked again),
        cost spent and cost saved, and ``usage``, the paid calls' raw usage for the ledger
        (re-priced by the report; None when nothing is metered)."""
        return {"backend": self.name, "model": self.model, "hits": self.hits, "misses": self.misses,
                "retried": self.retried, "cost": self.cost.to_dict(), "saved": self.saved.to_dict(),
                "usage": self.usage()}


__all__ = ["CachedJudge", "ContentCache", "MeteredCache", "answer_inputs", "canonical_json", "content_key",
           "window_inputs"]
