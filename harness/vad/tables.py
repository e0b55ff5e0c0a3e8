"""The ``vad`` stage's tables in Parquet (pandas, duckdb and pyarrow read them as they are).

* ``segments.parquet``: one row per speech segment: ``conversation`` (scene id, string),
  ``start`` and ``end`` (int64 timeline samples, ``[start, end)``, at the run's
  ``protocol.sample_rate``) and ``truncated`` (bool: the segment was still open when the
  stream ended and was closed there; only a conversation's last segment can be). Conversations
  without speech or without an output have no rows; ``segments.json`` (the per-model index)
  says which conversations are ``ok``.
* ``probabilities.parquet``: one row per conversation: ``conversation`` and ``probs``
  (list<float32>, one Silero probability per window of ``frame_samples(sample_rate)`` timeline
  samples, window ``k`` covering ``[k * frame, (k + 1) * frame)``). Written when the stage ran
  Silero itself, so a sweep over the segmenter's settings never reruns it.
* ``sweep.parquet`` (with ``vad.sweep``): the segment-only scores per swept setting
  (:func:`sweep_table_bytes`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SEGMENT_SCHEMA = pa.schema([("conversation", pa.string()), ("start", pa.int64()), ("end", pa.int64()),
                            ("truncated", pa.bool_())])
PROBABILITY_SCHEMA = pa.schema([("conversation", pa.string()), ("probs", pa.list_(pa.float32()))])


def _bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def segment_table(entries: Mapping[str, Mapping[str, Any]]) -> pa.Table:
    """``segments.json`` entries (``{scene_id: {"status", "segments", "truncated"}}``) -> the
    segment table, conversations in sorted order; entries that are not ``ok`` give no rows."""
    conv, start, end, trunc = [], [], [], []
    for sid in sorted(entries):
        e = entries[sid]
        if e.get("status") != "ok":
            continue
        segs = np.asarray(e["segments"], dtype=np.int64).reshape(-1, 2)
        conv += [sid] * len(segs)
        start += segs[:, 0].tolist()
        end += segs[:, 1].tolist()
        trunc += [False] * (len(segs) - 1) + [bool(e.get("truncated", False))] * bool(len(segs))
    return pa.table({"conversation": conv, "start": start, "end": end, "truncated": trunc}, schema=SEGMENT_SCHEMA)


def segment_table_bytes(entries: Mapping[str, Mapping[str, Any]]) -> bytes:
    return _bytes(segment_table(entries))


def probability_bytes(probs: Mapping[str, np.ndarray]) -> bytes:
    """``{scene_id: float32[k]}`` -> ``probabilities.parquet`` bytes (sorted by conversation)."""
    ids = sorted(probs)
    return _bytes(pa.table({"conversation": ids,
                            "probs": [np.asarray(probs[s], dtype=np.float32) for s in ids]}, schema=PROBABILITY_SCHEMA))


def read_probabilities(data: bytes) -> dict[str, np.ndarray]:
    """``probabilities.parquet`` bytes -> ``{scene_id: float32[k]}``.

    Raises ValueError when the file lacks the ``conversation`` or ``probs`` column."""
    table = pq.read_table(io.BytesIO(data))
    if not {"conversation", "probs"} <= set(table.column_names):
        raise ValueError(f"not a probabilities table: columns {table.column_names}")
    probs = table.column("probs").combine_chunks()
    flat = probs.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    offsets = probs.offsets.to_numpy() - probs.offsets[0].as_py()
    return {sid: flat[offsets[i]:offsets[i + 1]] for i, sid in enumerate(table.column("conversation").to_pylist())}


SWEEP_SCHEMA = pa.schema([("setting", pa.string()), ("value", pa.float64()), ("condition", pa.string()),
                          ("score", pa.string()), ("successes", pa.int64()), ("n", pa.int64()),
                          ("rate", pa.float64())])


def sweep_table_bytes(rows: list[Mapping[str, Any]]) -> bytes:
    """``sweep.parquet``: one row per (swept setting, value, condition, score) with ``successes``,
    ``n`` and ``rate`` (null when ``n`` is 0); see :func:`harness.vad.sweep.sweep_scores`."""
    return _bytes(pa.Table.from_pylist(list(rows), schema=SWEEP_SCHEMA))


def read_sweep_rows(data: bytes, model: str) -> list[dict[str, Any]]:
    """``sweep.parquet`` bytes of one model -> its rows with a ``model`` column (what
    :func:`harness.report.figures.vad_sweep` plots)."""
    return [{"model": model, **r} for r in pq.read_table(io.BytesIO(data)).to_pylist()]
