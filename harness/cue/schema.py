"""The Duplex Cue item and recording types (spec section 9; formats in docs/formats.md).

A *recording* is a two-party conversation: speaker A (who holds the floor, and whom a model
replaces) and speaker B (who contributes cues), one channel each, at one sample rate. A *cue
item* is one of B's cues in a recording: its intent, its words with times, and where A's
recorded continuation is. Times are seconds on the recording's own timeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.store.layout import SAFE_ID

INTENTS = ("backchannel", "collaboration", "interruption")  # B's cue intent
RESPONSES = ("continued", "adapted", "yielded")  # A's (or the model's) response to the cue
SWITCH_LEAD_S = 0.08  # spec section 9: the switch point is 80 ms before the cue's first word
WINDOW_S = 10.0  # spec section 9: the model generates 10 s after the switch point


class CueError(ValueError):
    """A cue item, recording or word is malformed or breaks a corpus rule (docs/formats.md,
    "Duplex Cue corpus"). ``rule`` names the rule (e.g. ``"bad_value"``, ``"time_range"``)."""

    def __init__(self, rule: str, message: str):
        super().__init__(f"{message} [rule {rule}]")
        self.rule = rule
        self.message = message


def _get(d: Any, key: str, kind: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
    """``d[key]`` checked to be a ``kind`` (a bool is never a number); raise :class:`CueError`
    naming ``where.key`` when it is missing (and has no default) or of another type."""
    if not isinstance(d, dict):
        raise CueError("bad_value", f"{where}: expected a JSON object, got {type(d).__name__}")
    if key not in d:
        if default is ...:
            raise CueError("missing_field", f"{where}: missing field {key!r}")
        return default
    v = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise CueError("bad_value", f"{where}.{key}: expected {names}, got {json_repr(v)}")
    if isinstance(v, float) and not math.isfinite(v):
        raise CueError("bad_value", f"{where}.{key}: expected a finite number, got {v}")
    return v


def _id(d: Any, key: str, where: str) -> str:
    v = _get(d, key, str, where)
    if not SAFE_ID.fullmatch(v):
        raise CueError("bad_id", f"{where}.{key}: {v!r} is not a safe id (ASCII letters, digits, '.', '_', '-', "
                                 "starting with a letter or digit, at most 128 characters)")
    return v


def json_repr(v: Any) -> str:
    """A short repr of a JSON value for error messages."""
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


@dataclass(frozen=True)
class Word:
    """One word with its start and end in seconds."""

    text: str
    start_s: float
    end_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "start_s": self.start_s, "end_s": self.end_s}

    @classmethod
    def from_dict(cls, d: Any, where: str = "word") -> Word:
        """Parse ``{"text", "start_s", "end_s"}``; raise :class:`CueError` (naming ``where``) on a
        missing field, a wrong type, an empty text or ``end_s <= start_s``. Ranges against the
        audio are checked by :func:`harness.cue.corpus.check_words`."""
        text = _get(d, "text", str, where)
        start, end = (float(_get(d, k, (int, float), where)) for k in ("start_s", "end_s"))
        if not text.strip():
            raise CueError("bad_value", f"{where}.text: empty")
        if not end > start:
            raise CueError("time_order", f"{where} {text!r}: end_s {end} is not after start_s {start}")
        return cls(text, start, end)


def words_from(v: Any, where: str) -> tuple[Word, ...]:
    """Parse a JSON list of words (``where`` names the field in errors)."""
    if not isinstance(v, list):
        raise CueError("bad_value", f"{where}: expected a list of words, got {json_repr(v)}")
    return tuple(Word.from_dict(w, f"{where}[{i}]") for i, w in enumerate(v))


@dataclass(frozen=True)
class Recording:
    """A two-party recording.

    Attributes:
        recording_id: unique id.
        sample_rate: Hz of both channels.
        n_samples: length of each channel in samples.
        a_words, b_words: word times of each speaker (optional for imported corpora; the
            generator always fills them).
        forced_a: the recording carries a third channel, A's track converted to the voice the
            model is forced with (the paper converts A to one stock voice before forcing it);
            it is what Duplex Cue forces, while A's original channel stays the reference
            (docs/formats.md, "audio_a_forced"). False: A's original channel is both.
        meta: free-form provenance (source files and rate of an imported recording, the
            generator's settings).
    """

    recording_id: str
    sample_rate: int
    n_samples: int
    a_words: tuple[Word, ...] = ()
    b_words: tuple[Word, ...] = ()
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    forced_a: bool = False

    @property
    def duration_s(self) -> float:
        return self.n_samples / self.sample_rate

    @property
    def channels(self) -> int:
        """Rows of its audio: A, B, and A converted for forcing when :attr:`forced_a`."""
        return 3 if self.forced_a else 2

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; :meth:`from_dict` inverts it exactly (``meta`` included)."""
        return {"recording_id": self.recording_id, "sample_rate": self.sample_rate, "n_samples": self.n_samples,
                "a_words": [w.to_dict() for w in self.a_words], "b_words": [w.to_dict() for w in self.b_words],
                "meta": self.meta, "forced_a": self.forced_a}

    @classmethod
    def from_dict(cls, d: Any) -> Recording:
        """Parse :meth:`to_dict`'s form; raise :class:`CueError` naming the field on a missing
        field or a wrong type (``a_words``, ``b_words``, ``meta`` and ``forced_a`` are optional)."""
        rid = _id(d, "recording_id", "recording")
        where = f"recording {rid!r}"
        rate, n = _get(d, "sample_rate", int, where), _get(d, "n_samples", int, where)
        if rate <= 0 or n < 0:
            raise CueError("bad_value", f"{where}: sample_rate must be > 0 and n_samples >= 0, got {rate}, {n}")
        return cls(rid, rate, n, words_from(d.get("a_words", []), f"{where}.a_words"),
                   words_from(d.get("b_words", []), f"{where}.b_words"), dict(_get(d, "meta", dict, where, {})),
                   _get(d, "forced_a", bool, where, False))


@dataclass(frozen=True)
class CueItem:
    """One cue of B while A holds the floor.

    Attributes:
        item_id: unique id.
        recording_id: the :class:`Recording` it belongs to.
        intent: one of :data:`INTENTS`.
        cue_words: B's cue words (at least one); ``cue_words[0].start_s`` is the cue onset.
        continuation_start_s, continuation_end_s: A's recorded continuation after the cue.
        label: the reference response (one of :data:`RESPONSES`) when known by construction
            (generated corpora), else None (a reviewer labels it).
        meta: free-form provenance (generator template, source corpus).
    """

    item_id: str
    recording_id: str
    intent: str
    cue_words: tuple[Word, ...]
    continuation_start_s: float
    continuation_end_s: float
    label: str | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def cue_onset_s(self) -> float:
        """B's cue onset: the start of its first word, in seconds."""
        return self.cue_words[0].start_s

    def switch_s(self, lead_s: float) -> float:
        """The switch point: ``lead_s`` (spec: 0.08 s) before the cue's first word, clipped at 0."""
        return max(0.0, self.cue_onset_s - lead_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; :meth:`from_dict` inverts it exactly (``meta`` included)."""
        return {"item_id": self.item_id, "recording_id": self.recording_id, "intent": self.intent,
                "cue_words": [w.to_dict() for w in self.cue_words],
                "continuation_start_s": self.continuation_start_s, "continuation_end_s": self.continuation_end_s,
                "label": self.label, "meta": self.meta}

    @classmethod
    def from_dict(cls, d: Any) -> CueItem:
        """Parse :meth:`to_dict`'s form; raise :class:`CueError` naming the item and field on a
        missing field, a wrong type, an intent not in :data:`INTENTS`, a label not in
        :data:`RESPONSES` (or null), no cue word, or ``continuation_end_s`` before
        ``continuation_start_s``. Times against the recording: :func:`harness.cue.corpus.check_item`."""
        iid = _id(d, "item_id", "cue")
        where = f"cue {iid!r}"
        rid = _id(d, "recording_id", where)
        intent = _get(d, "intent", str, where)
        if intent not in INTENTS:
            raise CueError("bad_value", f"{where}.intent: {intent!r} is not one of {', '.join(INTENTS)}")
        label = _get(d, "label", (str, type(None)), where, None)
        if label is not None and label not in RESPONSES:
            raise CueError("bad_value", f"{where}.label: {label!r} is not one of {', '.join(RESPONSES)} (or null)")
        cue = words_from(_get(d, "cue_words", list, where), f"{where}.cue_words")
        if not cue:
            raise CueError("bad_value", f"{where}.cue_words: at least one word is needed (its start is the cue onset)")
        c0, c1 = (float(_get(d, k, (int, float), where)) for k in ("continuation_start_s", "continuation_end_s"))
        if c1 < c0:
            raise CueError("time_order", f"{where}: continuation_end_s {c1} is before continuation_start_s {c0}")
        return cls(iid, rid, intent, cue, c0, c1, label, dict(_get(d, "meta", dict, where, {})))
