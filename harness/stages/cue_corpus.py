"""The ``cue-corpus`` stage of Duplex Cue (spec section 9; docs/cue.md): generate the corpus
(``cue.n_items``, ``cue.seed``: :func:`harness.cue.generate.generate_cue_corpus`) or ingest
``cue.manifest`` (:func:`harness.cue.corpus.ingest`), and write it under ``CuePlan.corpus``:

* ``recordings.jsonl``, ``items.jsonl`` (:mod:`harness.cue.corpus`'s JSON lines);
* ``audio/<recording_id>.flac``: stereo 16-bit FLAC at the timeline rate, channel 0 = A, 1 = B
  (:func:`harness.cue.corpus.encode_recording`; :func:`read_recording` reads it back bit for bit);
* ``problems.json``: what ingest rejected, each with its rule and reason (``[]`` when generated);
* the marker ``_SUCCESS.json`` last (counts).
"""

from __future__ import annotations

import io
import logging

import numpy as np

from harness.audio.io import AudioError
from harness.cue.corpus import (
    CueCorpus,
    decode_recording,
    encode_recording,
    ingest,
    read_items,
    write_items,
    write_recordings,
)
from harness.cue.plan import CuePlan
from harness.cue.schema import CueItem
from harness.runtime.config import RunConfig
from harness.stages.common import stage_done
from harness.store.base import ObjectStore, put_json

log = logging.getLogger("duplex_mpe")


def load_items(store: ObjectStore, plan: CuePlan) -> list[CueItem]:
    """The corpus's items, in corpus order."""
    return read_items(store.get(plan.layout.file(plan.corpus, "items.jsonl")).decode().splitlines())


def read_recording(store: ObjectStore, plan: CuePlan, recording_id: str, sample_rate: int) -> np.ndarray:
    """A stored recording as ``float32[2, n]`` (row 0 = A) exactly as written
    (:func:`harness.cue.corpus.decode_recording` of the stored FLAC).

    Raises:
        AudioError: undecodable, not stereo, or not at ``sample_rate`` Hz (the message names the key).
        FileNotFoundError: no such recording in the corpus.
    """
    key = plan.layout.file(plan.corpus, f"audio/{recording_id}.flac")
    try:
        return decode_recording(store.get(key), sample_rate)
    except AudioError as e:
        raise AudioError(f"{key}: {e}") from None


def build_corpus(cfg: RunConfig) -> CueCorpus:
    """The run's corpus: ``cue.manifest`` ingested (at ``protocol.sample_rate``, checked with the
    run's switch lead and window), else generated from ``cue.n_items`` and ``cue.seed``."""
    c = cfg.cue
    if c.manifest:
        return ingest(c.manifest, sample_rate=cfg.protocol.sample_rate, lead_s=c.switch_lead_s, window_s=c.window_s,
                      allow_outside=c.allow_outside_paths)
    from harness.cue.generate import GeneratorSettings, generate_cue_corpus

    return generate_cue_corpus(c.n_items, c.seed, settings=GeneratorSettings(lead_s=c.switch_lead_s,
                                                                             window_s=c.window_s))


def cue_corpus_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Write the corpus (module docstring); skipped when its marker exists. Returns its prefix.

    Raises:
        ValueError: the generated or ingested corpus has no item (the problems are logged and stored).
        OSError: the manifest cannot be read.
    """
    plan = CuePlan.from_config(cfg)
    lay = plan.layout
    if stage_done(store, plan, plan.corpus, "cue-corpus"):  # type: ignore[arg-type]
        return plan.corpus
    recordings, audio, items, problems = build_corpus(cfg)
    sr = cfg.protocol.sample_rate
    for p in problems:
        log.warning("cue-corpus: rejected %s", p["reason"])
    put_json(store, lay.file(plan.corpus, "problems.json"), problems)
    if not items:
        raise ValueError(f"cue-corpus: no usable item ({len(problems)} problem(s), listed in "
                         f"{lay.file(plan.corpus, 'problems.json')})")
    for rec in recordings:
        store.put(lay.file(plan.corpus, f"audio/{rec.recording_id}.flac"),
                  encode_recording(audio[rec.recording_id], sr))
    for name, write, rows in (("recordings.jsonl", write_recordings, recordings), ("items.jsonl", write_items, items)):
        fh = io.StringIO()
        write(rows, fh)
        store.put(lay.file(plan.corpus, name), fh.getvalue().encode())
    counts = {"recordings": len(recordings), "items": len(items), "problems": len(problems),
              "source": cfg.cue.manifest or "generated"}
    put_json(store, lay.marker(plan.corpus), counts)
    log.info("cue-corpus: %d items of %d recordings (%d problems) at %s", len(items), len(recordings),
             len(problems), plan.corpus)
    return plan.corpus

