"""The ``vad`` stage: the model's speech segments from its stored output (spec section 5; docs/vad.md)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from harness.audio.io import decode
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.pool import BatchesFailed, BatchFailure, Resources, map_batches
from harness.runtime.shard import read_output
from harness.stages.common import load_scenes, require_infer, stage_done
from harness.stages.infer import infer_records
from harness.stages.score import scored_windows
from harness.store.base import ObjectStore, put_json
from harness.store.settings import open_store
from harness.vad.silero import frame_samples, segment_probs, speech_probs
from harness.vad.sweep import sweep_points, sweep_scores, sweep_segments
from harness.vad.tables import probability_bytes, segment_table_bytes, sweep_table_bytes

log = logging.getLogger("duplex_mpe")


def reuses_online_detector(cfg: RunConfig) -> bool:
    """True when the scored detector is the online one (same model; the streaming resampler gives
    the same 16 kHz samples online and offline; the post-processing rules may differ), so the
    ``vad`` stage post-processes the probabilities ``infer`` stored, exactly what the scheduler
    acted on, instead of re-running Silero (which would agree within
    :data:`~harness.vad.silero.PROB_TOLERANCE`, not bit for bit)."""
    return cfg.vad.model == cfg.detector.model


def segment_entry(segments: np.ndarray, scored_samples: int, cfg: RunConfig) -> dict[str, Any]:
    """One ok conversation's ``segments.json`` entry (without ``status``).

    ``segments``: ``int64[k, 2]`` sorted ``[start, end)`` speech in timeline samples.
    ``scored_samples``: where the last scored detector frame ends (samples). The entry's
    ``truncated`` is True when the last segment was still open when the stream ended: its pause
    was never confirmed (its end + ``vad.rules.min_silence_s`` lies beyond the last scored
    frame), so it was closed at the end of the stream. Readers of older entries without the key
    take it as False.
    """
    sr = cfg.protocol.sample_rate
    segs = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    truncated = bool(len(segs)) and int(segs[-1, 1]) + cfg.vad.rules.samples(sr)[1] > scored_samples
    return {"segments": segs.tolist(), "truncated": truncated}


def detect_outputs(cfg: RunConfig, entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], np.ndarray]]:
    """Offline Silero over the stored outputs of ``entries`` (one batch, all streams in one call
    of :func:`~harness.vad.silero.speech_probs` on ``vad.device``), then the post-processor:
    per entry its :func:`segment_entry` and its probabilities (``float32[k]``, kept for sweeps)."""
    store = open_store(cfg.store)
    sr = cfg.protocol.sample_rate
    waves = [decode(read_output(store, e, "flac"), expected_rate=sr)[0] for e in entries]
    probs = speech_probs(waves, sr, cfg.vad.device)
    segments = segment_probs(probs, sr, cfg.vad.rules)
    frame = frame_samples(sr)
    return [(segment_entry(s, len(p) * frame, cfg), p) for s, p in zip(segments, probs, strict=True)]


class OutputDetector:
    """The re-detection worker of the ``vad`` stage's pool (one per actor):
    :func:`detect_outputs` over a batch of infer entries."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def detect(self, entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], np.ndarray]]:
        return detect_outputs(self.cfg, entries)


def stored_probs(store: ObjectStore, entry: dict[str, Any]) -> np.ndarray:
    """The online probabilities ``infer`` stored for one conversation (``float32[k]``)."""
    return np.load(io.BytesIO(read_output(store, entry, "probs.npy")), allow_pickle=False)


def segment_stored_probs(cfg: RunConfig, store: ObjectStore, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The post-processor (``vad.rules``) over the online probabilities ``infer`` stored: one
    :func:`segment_entry` per entry."""
    probs = [stored_probs(store, e) for e in entries]
    sr = cfg.protocol.sample_rate
    segs = segment_probs(probs, sr, cfg.vad.rules)
    return [segment_entry(s, len(p) * frame_samples(sr), cfg) for s, p in zip(segs, probs, strict=True)]


def vad_sweep(cfg: RunConfig, store: ObjectStore, plan: RunPlan, recs: dict[str, dict[str, Any]],
              probs: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """``vad.sweep`` for one model: the segmenter rerun over the stored probabilities of every ok
    conversation under every swept setting (one call of :func:`~harness.vad.sweep.sweep_segments`),
    then each segment-only score (:data:`~harness.vad.sweep.SWEPT_SCORES`) per condition. Rows
    ``{setting, value, condition, score, successes, n, rate}``; a conversation whose record does
    not fit its scene (the score stage reports it) is left out."""
    points = sweep_points(cfg.vad.rules, dict(cfg.vad.sweep))
    ids = sorted(probs)
    sr = cfg.protocol.sample_rate
    segs = sweep_segments([probs[s] for s in ids], frame_samples(sr), sr, [p.rules for p in points])
    scenes = {s.scene_id: s for s in load_scenes(store, plan)}
    records = {sid: json.loads(read_output(store, recs[sid], "json")) for sid in ids}
    rows = []
    for point, per_conv in zip(points, segs, strict=True):
        windows = []
        for sid, s in zip(ids, per_conv, strict=True):
            try:
                windows += scored_windows(cfg, scenes[sid], records[sid], s)
            except ValueError:
                continue
        rows += [{"setting": point.setting, "value": point.value, **r} for r in sweep_scores(windows)]
    return rows


def vad_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Find the model's speech in every stored output.

    When :func:`reuses_online_detector`, the post-processor runs over the stored online
    probabilities (seconds); otherwise Silero runs again over the stored audio in batches of
    ``vad.batch`` conversations on a pool of Ray actors (:func:`~harness.runtime.pool.map_batches`;
    one CPU each, or one GPU with ``vad.device: cuda``), and the probabilities are kept in
    ``probabilities.parquet``. Either way a batch that raises is run again conversation by
    conversation, so a corrupt or missing output is an error of its own conversation only.
    Writes ``segments.json`` (the per-model index: status, segments, truncated) and
    ``segments.parquet`` (one row per segment, :mod:`harness.vad.tables`).

    Raises:
        BatchesFailed: a re-detection batch's actor died on every ``cluster.batch_attempts``
            attempt; raised once the other models are written (that model is not).
    """
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    todo = {}
    for m in cfg.models:
        require_infer(store, plan, m.name)
        if not stage_done(store, plan, plan.vad[m.name], f"vad {m.name}"):
            todo[m.name] = infer_records(store, plan, m.name)
    if not todo:
        return dict(plan.vad)
    results = {name: {s: {"status": "error", "reason": r["reason"]} for s, r in recs.items() if r["status"] != "ok"}
               for name, recs in todo.items()}
    probs: dict[str, dict[str, np.ndarray]] = {name: {} for name in todo}
    batches = [(name, ids[i:i + cfg.vad.batch]) for name, recs in todo.items()
               for ids in [sorted(s for s, r in recs.items() if r["status"] == "ok")]
               for i in range(0, len(ids), cfg.vad.batch)]

    def keep(name: str, ids: list[str], segs: list) -> None:
        for sid, (seg, p) in zip(ids, segs, strict=True):
            results[name][sid] = {"status": "ok", **seg}
            if p is not None:
                probs[name][sid] = p

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
                results[name][ids[0]] = {"status": "error",
                                         "reason": f"speech detection failed: {type(e).__name__}: {e}"}
            return
        keep(name, ids, segs)

    lost: list[tuple[str, BatchFailure]] = []  # (model, batch) whose actor died on every attempt
    reuse = reuses_online_detector(cfg)
    if reuse:
        def from_probs(name: str, ids: list[str]) -> list:
            ps = [stored_probs(store, todo[name][s]) for s in ids]
            sr = cfg.protocol.sample_rate
            return [(segment_entry(s, len(p) * frame_samples(sr), cfg), p)
                    for s, p in zip(segment_probs(ps, sr, cfg.vad.rules), ps, strict=True)]

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
                                      [([todo[name][s] for s in ids],) for name, ids in work], resources,
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
                    results[name][ids[0]] = {"status": "error",
                                             "reason": f"speech detection failed: {out.cause}"}
            work = split
    for name, result in results.items():
        if any(m == name for m, _ in lost):
            continue
        prefix = plan.vad[name]
        put_json(store, lay.file(prefix, "segments.json"), result)
        store.put(lay.file(prefix, "segments.parquet"), segment_table_bytes(result))
        if not reuse:  # the online probabilities are infer's; these are the only copy of the offline ones
            store.put(lay.file(prefix, "probabilities.parquet"), probability_bytes(probs[name]))
        if cfg.vad.sweep:
            store.put(lay.file(prefix, "sweep.parquet"),
                      sweep_table_bytes(vad_sweep(cfg, store, plan, todo[name], probs[name])))
        put_json(store, lay.marker(prefix), {"conversations": len(result),
                                             "ok": sum(r["status"] == "ok" for r in result.values()),
                                             "truncated": sum(r.get("truncated", False) for r in result.values()),
                                             "source": "online probabilities" if reuse else "offline Silero"})
    if lost:  # the other models are written
        raise BatchesFailed("vad", [f for _, f in lost], len(batches))
    return dict(plan.vad)
