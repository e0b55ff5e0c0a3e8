"""The ``score`` stage's product: every scored window of every conversation with its verdict
(spec section 5), written once, read by reduce, the review kit and the report.

A window is a row of :func:`harness.metrics.outcomes.conversation_outcomes` (the one place windows
are built: the score stage, and the vad stage's detector sweep per swept setting): its kind
(``T``, ``silence``, ``N4``), its turn and label, its bounds in timeline samples (``start``,
``end``, ``window_end``; N4: the question and resolution times) and its acoustic outcomes. For the
windows that need ASR and the judge, the score stage adds the verdict to the same row
(:func:`harness.metrics.outcomes.with_verdict`: ``transcript``, ``verdict``, ``answer_correct`` /
``exempt_backchannel``, ``silence_preserved``).
Verdicts are therefore never joined back to windows by a name: a change of the window rules
changes the rows the verdicts were computed for, in the same stage.

Object under a model's score prefix: ``windows.json`` = ``{"schema": 1, "conversations":
{conversation id: {"status": "ok", "windows": [row, ...]} | {"status": "error", "reason": ...}}}``.

The verdicts are counted here, once, from the rows
(:meth:`Windows.judge_verdicts`; the score stage writes the counts in its marker, reduce carries
them to ``statistics.json`` and the report): per condition and judged window kind (T answers,
N1, N2, N3; N4 windows are acoustic only, never judged) how many items needed a verdict, how many
had an empty transcript (``EMPTY_TRANSCRIPT``, never sent to the judge), how many the judge saw
and how many of those it left ``UNPARSEABLE``. :func:`unparseable_over` finds the cells whose
unparseable share of judged items exceeds ``metrics.max_unparseable_share``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.products import check_schema
from harness.scenes.schema import CONDITIONS
from harness.scoring.judge import EMPTY_TRANSCRIPT, UNPARSEABLE
from harness.store.base import ObjectStore, get_json
from harness.store.layout import RunLayout

WINDOWS = "windows.json"
SCHEMA = 1
# the window kinds (row labels) the judge sees (spec section 5): T responses and the N1/N2/N3 silence windows
JUDGED_KINDS = ("T", "N1", "N2", "N3")
KIND_NAMES = {"T": "T answers", "N1": "N1 windows", "N2": "N2 windows", "N3": "N3 windows"}


def judge_verdict_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """``{condition: {kind: {"items", "empty_transcript", "judged", "unparseable"}}}`` for every
    condition of :data:`~harness.scenes.schema.CONDITIONS` and kind of :data:`JUDGED_KINDS` (zeros
    included) over window rows with their verdicts (:func:`harness.metrics.outcomes.with_verdict`).

    ``items``: rows with a verdict (T with speech in its response window, silence windows with
    speech); ``empty_transcript``: of those, ``EMPTY_TRANSCRIPT`` (failed without the judge);
    ``judged``: the rest, which the judge answered (a cache hit counts: it answers a call made
    once); ``unparseable``: of those, ``UNPARSEABLE`` (scored as failures, spec section 5)."""
    out = {c: {k: dict.fromkeys(("items", "empty_transcript", "judged", "unparseable"), 0) for k in JUDGED_KINDS}
           for c in CONDITIONS}
    for r in rows:
        if r.get("verdict") is None or r["label"] not in JUDGED_KINDS:
            continue
        cell = out[r["condition"]][r["label"]]
        cell["items"] += 1
        if r["verdict"] == EMPTY_TRANSCRIPT:
            cell["empty_transcript"] += 1
            continue
        cell["judged"] += 1
        cell["unparseable"] += r["verdict"] == UNPARSEABLE
    return out


def unparseable_over(counts: Mapping[str, Mapping[str, Mapping[str, Mapping[str, int]]]],
                     max_share: float) -> list[dict[str, Any]]:
    """The (model, condition, kind) cells of ``counts`` (``{model: judge_verdict_counts(...)}``) whose
    ``unparseable / judged`` exceeds ``max_share`` (``metrics.max_unparseable_share``), in order:
    ``{"model", "condition", "kind", "unparseable", "judged", "share", "max_share"}``. A cell with no
    judged item has no share and is never listed."""
    return [{"model": m, "condition": c, "kind": k, "unparseable": v["unparseable"], "judged": v["judged"],
             "share": v["unparseable"] / v["judged"], "max_share": max_share}
            for m, by_cond in counts.items() for c, by_kind in by_cond.items() for k, v in by_kind.items()
            if v["judged"] and v["unparseable"] / v["judged"] > max_share]


def unparseable_warning(cell: Mapping[str, Any]) -> str:
    """One line for a cell of :func:`unparseable_over`, e.g. ``model x, explicit, T answers: 3 of
    40 judged verdicts UNPARSEABLE (7.5 % > metrics.max_unparseable_share 2.0 %)``."""
    return (f"model {cell['model']}, {cell['condition']}, {KIND_NAMES[cell['kind']]}: {cell['unparseable']} of "
            f"{cell['judged']} judged verdicts UNPARSEABLE ({100 * cell['share']:.1f} % > "
            f"metrics.max_unparseable_share {100 * cell['max_share']:.1f} %)")


@dataclass(frozen=True)
class ConversationWindows:
    """One conversation's windows with their verdicts (``ok``), or why it could not be scored."""

    status: str
    windows: tuple[dict[str, Any], ...] = ()
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"status": "ok", "windows": list(self.windows)} if self.ok else \
            {"status": self.status, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConversationWindows:
        return cls(d["status"], tuple(d.get("windows", ())), d.get("reason", ""))


@dataclass(frozen=True)
class Windows:
    """One model's scored windows, per conversation the score stage saw (its ok conversations)."""

    conversations: dict[str, ConversationWindows] = field(default_factory=dict)

    def judge_verdicts(self) -> dict[str, dict[str, dict[str, int]]]:
        """:func:`judge_verdict_counts` over the windows of every ``ok`` conversation."""
        return judge_verdict_counts(r for c in self.conversations.values() if c.ok for r in c.windows)

    def objects(self) -> dict[str, Any]:
        """The object to write under a model's score prefix."""
        return {WINDOWS: {"schema": SCHEMA, "conversations": {sid: self.conversations[sid].to_dict()
                                                              for sid in sorted(self.conversations)}}}

    @classmethod
    def read(cls, store: ObjectStore, layout: RunLayout, prefix: str) -> Windows:
        """Raises FileNotFoundError when score has not run, ProductMismatch for another schema."""
        doc = get_json(store, layout.file(prefix, WINDOWS))
        check_schema(doc, SCHEMA, layout.file(prefix, WINDOWS))
        return cls({sid: ConversationWindows.from_dict(c) for sid, c in doc["conversations"].items()})
