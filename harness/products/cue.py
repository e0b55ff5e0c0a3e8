"""Duplex Cue's products (spec section 9; docs/cue.md): the corpus, the continuations, the rows.

* the ``cue-corpus`` prefix: ``recordings.jsonl`` and ``items.jsonl`` (:mod:`harness.cue.corpus`'s
  JSON lines), ``audio/<recording_id>.flac`` (stereo 16-bit at the timeline rate, channel 0 = A),
  ``problems.json`` (what ingest rejected);
* a model's ``cue-infer`` prefix: the infer product's layout (:mod:`harness.products.infer`: shard
  plan, markers naming each item's ``json`` record and ``flac`` output), or, for a model that does
  not declare teacher forcing, only a marker ``{"applicable": false, "reason"}``;
* a model's ``cue-score`` prefix: ``rows.json`` (one row per corpus item, corpus order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.audio.io import AudioError
from harness.cue.corpus import decode_recording, read_items, read_recordings
from harness.cue.schema import CueItem, Recording
from harness.products.infer import InferEntry, read_ledger
from harness.store.base import ObjectStore, get_json
from harness.store.layout import RunLayout

RECORDINGS, ITEMS, PROBLEMS, ROWS = "recordings.jsonl", "items.jsonl", "problems.json", "rows.json"


def recording_key(layout: RunLayout, corpus: str, recording_id: str) -> str:
    return layout.file(corpus, f"audio/{recording_id}.flac")


def load_items(store: ObjectStore, layout: RunLayout, corpus: str) -> list[CueItem]:
    """The corpus's items, in corpus order."""
    return read_items(store.get(layout.file(corpus, ITEMS)).decode().splitlines())


def load_corpus(store: ObjectStore, layout: RunLayout, corpus: str) -> tuple[list[CueItem], dict[str, Recording]]:
    """The corpus's items and recordings (by id)."""
    recs = read_recordings(store.get(layout.file(corpus, RECORDINGS)).decode().splitlines())
    return load_items(store, layout, corpus), {r.recording_id: r for r in recs}


def read_recording(store: ObjectStore, layout: RunLayout, corpus: str, recording_id: str,
                   sample_rate: int) -> np.ndarray:
    """A stored recording as ``float32[2, n]`` (row 0 = A) exactly as written
    (:func:`harness.cue.corpus.decode_recording` of the stored FLAC).

    Raises:
        AudioError: undecodable, not stereo, or not at ``sample_rate`` Hz (the message names the key).
        FileNotFoundError: no such recording in the corpus.
    """
    key = recording_key(layout, corpus, recording_id)
    try:
        return decode_recording(store.get(key), sample_rate)
    except AudioError as e:
        raise AudioError(f"{key}: {e}") from None


def not_applicable(store: ObjectStore, layout: RunLayout, cue_infer: str) -> dict[str, Any] | None:
    """The cue-infer marker of a model that was not run (``{"applicable": false, ...}``), else None."""
    key = layout.marker(cue_infer)
    if store.exists(key):
        mk = get_json(store, key)
        if mk.get("applicable") is False:
            return mk
    return None


def continuation_entries(store: ObjectStore, layout: RunLayout, cue_infer: str, model: str) -> dict[str, InferEntry]:
    """``{item_id: InferEntry}`` of a model's cue-infer outputs (its ``json`` record: item_id, status,
    reason, sample_rate, start_s, switch_s, end_s, forced_steps, n_samples, wall_s, step_s, usage;
    ``flac``: the model's channel from start_s to end_s). Raises
    :class:`~harness.products.infer.InferIncomplete` when a shard has no marker."""
    return read_ledger(store, layout, cue_infer, model, failures=False).entries()


def read_rows(store: ObjectStore, layout: RunLayout, cue_score: str) -> list[dict[str, Any]]:
    """A model's cue-score rows (:func:`harness.cue.scoring.item_row`), in corpus order."""
    return get_json(store, layout.file(cue_score, ROWS))
