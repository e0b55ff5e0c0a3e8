"""Detector sweeps (spec section 6, sensitivity): the segmenter rerun over stored probabilities.

Silero's probabilities do not depend on the segmenter's settings, so they are computed once
per output (online by ``infer``, or offline by the ``vad`` stage) and a sweep over
``threshold``, ``min_speech_s`` and ``min_silence_s`` reruns only the segmenter: one numba
call (:func:`sweep_segments`) over every conversation and every setting.

A sweep varies one setting at a time around the configured rules (``vad.sweep``, e.g.
``{threshold: [0.3, 0.4, 0.5, 0.6, 0.7]}``); the others keep their configured values. Moving
``threshold`` moves ``neg_threshold`` with it, keeping Silero's hysteresis gap (0.15 at the
defaults), floored at 0.01. docs/vad.md has the reasoning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from harness.vad.segments import _N_STATE, SegmentRules, _advance

SWEEPABLE = ("threshold", "min_speech_s", "min_silence_s")


@dataclass(frozen=True)
class SweepPoint:
    """One setting of a sweep: ``setting`` (a name of :data:`SWEEPABLE`) at ``value``, and the
    full rules used there."""

    setting: str
    value: float
    rules: SegmentRules


def sweep_points(base: SegmentRules, sweep: Mapping[str, Sequence[float]]) -> list[SweepPoint]:
    """The points of a one-at-a-time sweep around ``base``.

    Raises:
        ValueError: a setting outside :data:`SWEEPABLE`, or a value that makes invalid rules
            (e.g. a threshold of 1, a negative minimum).
    """
    unknown = set(sweep) - set(SWEEPABLE)
    if unknown:
        raise ValueError(f"vad.sweep: cannot sweep {sorted(unknown)} (sweepable: {list(SWEEPABLE)})")
    gap = base.threshold - base.neg_threshold
    points = []
    for setting in SWEEPABLE:
        for v in sweep.get(setting, ()):
            v = float(v)
            change = {setting: v}
            if setting == "threshold":
                change["neg_threshold"] = max(0.01, min(v, v - gap))
            try:
                points.append(SweepPoint(setting, v, dataclasses.replace(base, **change)))
            except ValueError as e:
                raise ValueError(f"vad.sweep.{setting}={v}: {e}") from None
    return points


@njit(cache=True)
def _sweep(probs, lengths, frame, thr, neg, min_speech, min_silence, out, counts):  # pragma: no cover
    """Every stream under every setting: ``counts[s]`` rows of ``out`` (stream, start, end) per setting."""
    first = np.zeros(probs.shape[0], np.int64)
    pos = 0
    for s in range(thr.shape[0]):
        state = np.zeros((probs.shape[0], _N_STATE), np.int64)
        n = _advance(probs, first, lengths, state, frame, thr[s], neg[s], min_speech[s], min_silence[s], True,
                     out[pos:])
        counts[s] = n
        pos += n


def sweep_segments(probs: Sequence[np.ndarray], frame: int, sample_rate: int,
                   rules: Sequence[SegmentRules]) -> list[list[np.ndarray]]:
    """Segments of every stream under every rule set, in one kernel call.

    Args:
        probs: per stream ``float32[k_i]`` Silero probabilities, one per ``frame`` timeline samples.
        frame: timeline samples per probability.
        sample_rate: timeline sample rate (Hz), to turn the rules' seconds into samples.
        rules: the rule sets (e.g. ``[p.rules for p in sweep_points(...)]``).
    Returns:
        ``out[r][i]``: stream ``i``'s ``int64[n, 2]`` ``[start, end)`` segments (timeline samples)
        under ``rules[r]``, equal to :func:`~harness.vad.segments.segments_from_probs` with those rules.
    """
    lengths = np.array([len(p) for p in probs], np.int64)
    padded = np.zeros((len(probs), int(lengths.max(initial=0))), np.float32)
    for i, p in enumerate(probs):
        padded[i, : len(p)] = p
    samples = np.array([r.samples(sample_rate) for r in rules], np.int64).reshape(-1, 2)
    # a segment closed before the end is followed by ceil(min_silence / frame) inactive frames
    gaps = np.maximum(1, -(-samples[:, 1] // frame))
    capacity = int(sum((lengths // (1 + g) + 1).sum() for g in gaps.tolist()))
    out = np.empty((max(capacity, 1), 3), np.int64)
    counts = np.zeros(len(rules), np.int64)
    _sweep(padded, lengths, frame, np.array([r.threshold for r in rules], np.float64),
           np.array([r.neg_threshold for r in rules], np.float64), samples[:, 0].copy(), samples[:, 1].copy(),
           out, counts)
    result, pos = [], 0
    for n in counts.tolist():
        rows = out[pos:pos + n]  # stream by stream, in order
        pos += n
        cuts = np.searchsorted(rows[:, 0], np.arange(1, len(probs)))
        result.append([s[:, 1:].copy() for s in np.split(rows, cuts)])
    return result


# score name -> (window kind, success, eligible): the spec section 5 scores that depend on the
# segments alone (no ASR or judge), and the acoustic half of silence preservation (section 6)
SWEPT_SCORES = {
    "fresh_onset_response_rate": ("T", lambda r: r["fresh_onset"], lambda r: True),
    "response_presence": ("T", lambda r: r["response_presence"], lambda r: True),
    "acoustic_silence_preservation": ("silence", lambda r: r["silent"], lambda r: True),
    "answering_window_yield": ("N4", lambda r: r["yield_outcome"] == "yield", lambda r: r["yield_eligible"]),
    "window_response": ("N4", lambda r: r["window_response"], lambda r: True),
}


def sweep_scores(outcomes: Sequence[Mapping]) -> list[dict]:
    """Per condition, every :data:`SWEPT_SCORES` score of the outcome rows of one sweep point
    (:func:`harness.metrics.outcomes.conversation_outcomes` rows): ``{condition, score,
    successes, n, rate}`` (``rate`` None when ``n`` is 0)."""
    out = []
    for cond in sorted({r["condition"] for r in outcomes}):
        for score, (kind, success, eligible) in SWEPT_SCORES.items():
            rows = [r for r in outcomes if r["condition"] == cond and r["kind"] == kind and eligible(r)]
            k = sum(bool(success(r)) for r in rows)
            out.append({"condition": cond, "score": score, "successes": k, "n": len(rows),
                        "rate": k / len(rows) if rows else None})
    return out
