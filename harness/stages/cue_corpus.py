"""The ``cue-corpus`` stage of Duplex Cue (spec section 9; docs/cue.md): generate the corpus
(``cue.n_items``, ``cue.seed``: :func:`harness.cue.generate.generate_cue_corpus`) or ingest
``cue.manifest`` (:func:`harness.cue.corpus.ingest`), and write it under ``CuePlan.corpus``:

* ``recordings.jsonl``, ``items.jsonl`` (:mod:`harness.cue.corpus`'s JSON lines);
* ``audio/<recording_id>.flac``: stereo 16-bit FLAC at the timeline rate, channel 0 = A, 1 = B
  (:func:`recording_flac`; :func:`read_recording` reads it back bit for bit);
* ``problems.json``: what ingest rejected, each with its rule and reason (``[]`` when generated);
* the marker ``_SUCCESS.json`` last (counts).
"""

from __future__ import annotations

import io
import logging

import numpy as np
import soundfile as sf

from harness.audio.io import PCM_SCALE, AudioError, quantize
from harness.cue.corpus import CueCorpus, ingest, write_items, write_recordings
from harness.cue.plan import CuePlan
from harness.runtime.config import RunConfig
from harness.stages.common import stage_done
from harness.store.base import ObjectStore, put_json

log = logging.getLogger("duplex_mpe")


def recording_flac(audio: np.ndarray, sample_rate: int) -> bytes:
    """``float32[2, n]`` (A, B) -> stereo 16-bit FLAC bytes (channel 0 = A), on the grid of
    :func:`harness.audio.io.quantize`. Raises :class:`~harness.audio.io.AudioError` unless ``[2, n]``."""
    x = np.asarray(audio)
    if x.ndim != 2 or x.shape[0] != 2:
        raise AudioError(f"a recording's audio must be [2, n] (A, B), got shape {x.shape}")
    pcm = np.round(quantize(x) * PCM_SCALE).astype(np.int16).T
    buf = io.BytesIO()
    sf.write(buf, pcm, sample_rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def read_recording(store: ObjectStore, plan: CuePlan, recording_id: str, sample_rate: int) -> np.ndarray:
    """A stored recording as ``float32[2, n]`` (row 0 = A) exactly as written (16-bit / ``PCM_SCALE``).

    Raises:
        AudioError: undecodable, not stereo, or not at ``sample_rate`` Hz.
        FileNotFoundError: no such recording in the corpus.
    """
    key = plan.layout.file(plan.corpus, f"audio/{recording_id}.flac")
    try:
        pcm, rate = sf.read(io.BytesIO(store.get(key)), dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise AudioError(f"{key}: cannot decode: {e}") from None
    if pcm.shape[1] != 2 or rate != sample_rate:
        raise AudioError(f"{key}: {pcm.shape[1]} channel(s) at {rate} Hz; expected stereo (A, B) at {sample_rate} Hz")
    return np.ascontiguousarray(pcm.T.astype(np.float32) / PCM_SCALE)


def build_corpus(cfg: RunConfig) -> CueCorpus:
    """The run's corpus: ``cue.manifest`` ingested (at ``protocol.sample_rate``, checked with the
    run's switch lead and window), else generated from ``cue.n_items`` and ``cue.seed``."""
    c = cfg.cue
    if c.manifest:
        return ingest(c.manifest, sample_rate=cfg.protocol.sample_rate, lead_s=c.switch_lead_s, window_s=c.window_s)
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
        store.put(lay.file(plan.corpus, f"audio/{rec.recording_id}.flac"), recording_flac(audio[rec.recording_id], sr))
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

