"""The ``vad`` stage: the model's speech segments from its stored output (spec section 4; docs/vad.md).

Reads each model's infer product, writes its :mod:`harness.products.segments` (``segments.json``,
``segments.parquet``; ``probabilities.parquet`` when Silero ran again; ``sweep.parquet`` with
``vad.sweep``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from harness.metrics.outcomes import conversation_outcomes
from harness.products.infer import InferEntry, read_entries
from harness.products.scenes import SceneSet
from harness.products.segments import SegmentEntry, segment_objects
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.runtime.plan import VAD_VERSION, RunPlan
from harness.runtime.pool import BatchesFailed, BatchFailure, Resources, map_batches
from harness.store.base import ObjectStore
from harness.store.settings import open_store
from harness.vad.silero import frame_samples, segment_probs, speech_probs
from harness.vad.sweep import sweep_points, sweep_scores, sweep_segments

log = logging.getLogger("duplex_mpe")


def reuses_online_detector(cfg: RunConfig) -> bool:
    """True when the scored detector is the online one (same model; the streaming resampler gives
    the same 16 kHz samples online and offline; the post-processing rules may differ), so the
    ``vad`` stage post-processes the probabilities ``infer`` stored, exactly what the scheduler
    acted on, instead of re-running Silero (which would agree within
    :data:`~harness.vad.silero.PROB_TOLERANCE`, not bit for bit)."""
    return cfg.vad.model == cfg.detector.model


def segment_entry(segments: np.ndarray, scored_samples: int, cfg: RunConfig) -> SegmentEntry:
    """One ok conversation's :class:`~harness.products.segments.SegmentEntry`.

    ``segments``: ``int64[k, 2]`` sorted ``[start, end)`` speech in timeline samples.
    ``scored_samples``: where the last scored detector frame ends (samples). ``truncated`` is True
    when the last segment was still open when the stream ended: its pause was never confirmed
    (its end + ``vad.rules.min_silence_s`` lies beyond the last scored frame), so it was closed at
    the end of the stream.
    """
    sr = cfg.protocol.sample_rate
    segs = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    truncated = bool(len(segs)) and int(segs[-1, 1]) + cfg.vad.rules.samples(sr)[1] > scored_samples
    return SegmentEntry("ok", segs, truncated)


def _segmented(cfg: RunConfig, probs: list[np.ndarray]) -> list[tuple[SegmentEntry, np.ndarray]]:
    sr = cfg.protocol.sample_rate
    segs = segment_probs(probs, sr, cfg.vad.rules)
    return [(segment_entry(s, len(p) * frame_samples(sr), cfg), p) for s, p in zip(segs, probs, strict=True)]


def detect_outputs(cfg: RunConfig, entries: list[InferEntry]) -> list[tuple[SegmentEntry, np.ndarray]]:
    """Offline Silero over the stored outputs of ``entries`` (one batch, all streams in one call
    of :func:`~harness.vad.silero.speech_probs` on ``vad.device``), then the post-processor:
    per entry its :func:`segment_entry` and its probabilities (``float32[k]``, kept for sweeps)."""
    store = open_store(cfg.store)
    sr = cfg.protocol.sample_rate
    return _segmented(cfg, speech_probs([e.audio(store, sr) for e in entries], sr, cfg.vad.device))


def segment_stored_probs(cfg: RunConfig, store: ObjectStore,
                         entries: list[InferEntry]) -> list[tuple[SegmentEntry, np.ndarray]]:
    """The post-processor (``vad.rules``) over the online probabilities ``infer`` stored: per entry
    its :func:`segment_entry` and those probabilities."""
    return _segmented(cfg, [e.probs(store) for e in entries])


class OutputDetector:
    """The re-detection worker of the ``vad`` stage's pool (one per actor):
    :func:`detect_outputs` over a batch of infer entries."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def detect(self, entries: list[InferEntry]) -> list[tuple[SegmentEntry, np.ndarray]]:
        return detect_outputs(self.cfg, entries)


def vad_sweep(cfg: RunConfig, store: ObjectStore, scenes: SceneSet, entries: dict[str, InferEntry],
              probs: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """``vad.sweep`` for one model: the segmenter rerun over the probabilities of every ok
    conversation under every swept setting (one call of :func:`~harness.vad.sweep.sweep_segments`),
    then its windows (:func:`~harness.metrics.outcomes.conversation_outcomes`, once per
    conversation and setting) and each segment-only score (:data:`~harness.vad.sweep.SWEPT_SCORES`)
    per condition. Rows ``{setting, value, condition, score, successes, n, rate}``; a conversation
    whose record does not fit its scene (the score stage reports it) is left out."""
    points = sweep_points(cfg.vad.rules, dict(cfg.vad.sweep))
    ids = sorted(probs)
    sr = cfg.protocol.sample_rate
    segs = sweep_segments([probs[s] for s in ids], frame_samples(sr), sr, [p.rules for p in points])
    records = {sid: entries[sid].record(store) for sid in ids}
    rows = []
    for point, per_conv in zip(points, segs, strict=True):
        windows = []
        for sid, s in zip(ids, per_conv, strict=True):
            try:
                windows += conversation_outcomes(scenes.by_id[sid], records[sid], s, cfg.protocol,
                                                 cfg.metrics.yield_deadline_s)
            except ValueError:
                continue
        rows += [{"setting": point.setting, "value": point.value, **r} for r in sweep_scores(windows)]
    return rows


class VadStage(Stage):
    """Find the model's speech in every stored output.

    When :func:`reuses_online_detector`, the post-processor runs over the stored online
    probabilities (seconds); otherwise Silero runs again over the stored audio in batches of
    ``vad.batch`` conversations on a pool of Ray actors (:func:`~harness.runtime.pool.map_batches`;
    one CPU each, or one GPU with ``vad.device: cuda``), and the probabilities are kept. Either way
    a batch that raises is run again conversation by conversation, so a corrupt or missing output
    is an error of its own conversation only. A conversation infer recorded as an error keeps its
    reason.

    Raises:
        BatchesFailed: a re-detection batch's actor died on every ``cluster.batch_attempts``
            attempt; raised once the other models are written (that model is not).
    """

    name, version = "vad", VAD_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: RunPlan) -> list[Unit]:
        return [Unit(self.name, plan.vad[m.name], m.name) for m in self.cfg.models]

    def inputs(self, plan: RunPlan) -> list[Unit]:
        return [Unit("infer", plan.infer[m.name], m.name, sharded=True) for m in self.cfg.models]

    def compute(self, store: ObjectStore, plan: RunPlan, todo: list[Unit]):
        cfg = self.cfg
        entries = {u.model: read_entries(store, plan.layout, plan.infer[u.model], u.model) for u in todo}
        results = {name: {s: SegmentEntry.error(e.reason) for s, e in ents.items() if not e.ok}
                   for name, ents in entries.items()}
        probs: dict[str, dict[str, np.ndarray]] = {name: {} for name in entries}
        batches = [(name, ids[i:i + cfg.vad.batch]) for name, ents in entries.items()
                   for ids in [sorted(s for s, e in ents.items() if e.ok)]
                   for i in range(0, len(ids), cfg.vad.batch)]

        def keep(name: str, ids: list[str], segs: list[tuple[SegmentEntry, np.ndarray]]) -> None:
            for sid, (seg, p) in zip(ids, segs, strict=True):
                results[name][sid] = seg
                probs[name][sid] = p

        def error(name: str, sid: str, why: str) -> None:
            results[name][sid] = SegmentEntry.error(f"speech detection failed: {why}")

        def store_batch(name: str, ids: list[str], compute: Callable[[str, list[str]], list]) -> None:
            """Segments of ``ids``; a batch that fails is retried conversation by conversation, so a
            corrupt or missing output is an error on its own conversation only."""
            try:
                segs = compute(name, ids)
            except Exception as e:
                if len(ids) > 1:
                    for sid in ids:
                        store_batch(name, [sid], compute)
                else:
                    error(name, ids[0], f"{type(e).__name__}: {e}")
                return
            keep(name, ids, segs)

        lost: list[tuple[str, BatchFailure]] = []  # (model, batch) whose actor died on every attempt
        reuse = reuses_online_detector(cfg)
        if reuse:
            def from_probs(name: str, ids: list[str]) -> list:
                return segment_stored_probs(cfg, store, [entries[name][s] for s in ids])

            for name, ids in tqdm(batches, desc="vad (stored probabilities)", unit="batch"):
                store_batch(name, ids, from_probs)
        else:  # Silero again on a pool of actors, one CPU (vad.device cuda: one GPU) each; Ray starts per
            # round unless it runs already (jobs.pipeline), and a second round only splits failed batches
            resources = Resources(1, 1 if cfg.vad.device.startswith("cuda") else 0, None,
                                  "the speech detection actor (vad.device)")
            work = batches
            while work:
                split = []
                for i, out in map_batches(cfg, "vad", OutputDetector, "detect",
                                          [([entries[name][s] for s in ids],) for name, ids in work], resources,
                                          args=(cfg,), describe=lambda i, w=work: f"model {w[i][0]!r}, "
                                          f"{len(w[i][1])} conversation(s) from {w[i][1][0]}"):
                    name, ids = work[i]
                    if not isinstance(out, BatchFailure):
                        keep(name, ids, out)
                    elif out.died:  # not the conversations' fault: that model's segments are not written
                        lost.append((name, out))
                    elif len(ids) > 1:  # the worker raised: one conversation at a time finds the one at fault
                        split += [(name, [sid]) for sid in ids]
                    else:
                        error(name, ids[0], out.cause)
                work = split
        scenes = SceneSet.read(store, plan.layout, plan.scenes) if cfg.vad.sweep else None
        for unit in todo:
            name, result = unit.model, results[unit.model]
            if any(m == name for m, _ in lost):
                continue
            sweep = vad_sweep(cfg, store, scenes, entries[name], probs[name]) if scenes is not None else None
            # the online probabilities are infer's; offline ones are kept, this being their only copy
            yield unit, Output({"conversations": len(result), "ok": sum(r.ok for r in result.values()),
                                "truncated": sum(r.truncated for r in result.values()),
                                "source": "online probabilities" if reuse else "offline Silero"},
                               segment_objects(result, None if reuse else probs[name], sweep))
        if lost:  # the other models are written
            raise BatchesFailed("vad", [f for _, f in lost], len(batches))
