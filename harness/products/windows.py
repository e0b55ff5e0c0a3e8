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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.products import check_schema
from harness.store.base import ObjectStore, get_json
from harness.store.layout import RunLayout

WINDOWS = "windows.json"
SCHEMA = 1


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
