"""The ``vad`` stage's product: the model's speech segments per conversation (spec section 4).

Objects under a model's vad prefix: ``segments.json`` (conversation id -> :class:`SegmentEntry`),
``segments.parquet`` (one row per segment, :mod:`harness.vad.tables`), and when the stage ran
Silero itself ``probabilities.parquet``; with ``vad.sweep`` ``sweep.parquet``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.products import check_schema
from harness.store.base import ObjectStore, get_json
from harness.store.layout import RunLayout
from harness.vad.tables import (
    probability_bytes,
    read_probabilities,
    read_sweep_rows,
    segment_table_bytes,
    sweep_table_bytes,
)

SEGMENTS, TABLE, PROBABILITIES, SWEEP = "segments.json", "segments.parquet", "probabilities.parquet", "sweep.parquet"
SCHEMA = 1


@dataclass(frozen=True)
class SegmentEntry:
    """One conversation: ``ok`` with its speech ``segments`` (``int64[k, 2]``, sorted ``[start, end)``
    timeline samples) and ``truncated`` (the last segment was still open when the stream ended:
    its pause was never confirmed), or ``error`` with its ``reason``."""

    status: str
    segments: np.ndarray
    truncated: bool = False
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def speech_samples(self) -> int:
        return int((self.segments[:, 1] - self.segments[:, 0]).sum())

    def to_dict(self) -> dict[str, Any]:
        if not self.ok:
            return {"status": self.status, "reason": self.reason}
        return {"status": "ok", "segments": self.segments.tolist(), "truncated": self.truncated}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SegmentEntry:
        segs = np.asarray(d.get("segments", []), dtype=np.int64).reshape(-1, 2)
        return cls(d["status"], segs, bool(d.get("truncated", False)), d.get("reason", ""))

    @classmethod
    def error(cls, reason: str) -> SegmentEntry:
        return cls("error", np.zeros((0, 2), np.int64), reason=reason)


def segment_objects(entries: Mapping[str, SegmentEntry], probabilities: Mapping[str, np.ndarray] | None = None,
                    sweep: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The objects of one model's vad prefix: ``segments.json`` and ``segments.parquet``; with
    ``probabilities`` (a vad stage that re-ran Silero) ``probabilities.parquet``; with ``sweep``
    (``vad.sweep``'s rows) ``sweep.parquet``."""
    index = {sid: entries[sid].to_dict() for sid in sorted(entries)}
    out: dict[str, Any] = {SEGMENTS: index, TABLE: segment_table_bytes(index)}
    if probabilities is not None:
        out[PROBABILITIES] = probability_bytes(probabilities)
    if sweep is not None:
        out[SWEEP] = sweep_table_bytes(sweep)
    return out


def read_segments(store: ObjectStore, layout: RunLayout, prefix: str) -> dict[str, SegmentEntry]:
    """``{conversation id: SegmentEntry}`` of one model. Raises FileNotFoundError when vad has not run."""
    doc = get_json(store, layout.file(prefix, SEGMENTS))
    check_schema(doc, SCHEMA, layout.file(prefix, SEGMENTS))
    return {sid: SegmentEntry.from_dict(e) for sid, e in doc.items()}


def read_offline_probabilities(store: ObjectStore, layout: RunLayout, prefix: str) -> dict[str, np.ndarray]:
    """The probabilities of a vad stage that re-ran Silero (``{conversation id: float32[k]}``)."""
    return read_probabilities(store.get(layout.file(prefix, PROBABILITIES)))


def read_sweep(store: ObjectStore, layout: RunLayout, prefix: str, model: str) -> list[dict[str, Any]]:
    """The rows of a model's ``sweep.parquet`` (:func:`harness.vad.tables.read_sweep_rows`)."""
    return read_sweep_rows(store.get(layout.file(prefix, SWEEP)), model)
