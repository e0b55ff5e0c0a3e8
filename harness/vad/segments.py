"""The VAD segment post-processor (spec section 4): speech probabilities -> speech segments.

One numba kernel, :func:`_advance`, turns per-frame speech probabilities into segments for
a batch of streams and carries its state between calls. The scheduler's online detector
(:class:`SpeechTracker`, fed one chunk at a time while the model talks) and the offline
``vad`` stage (:func:`segments_from_probs`, fed whole outputs) call the same kernel, so the
segments the scheduler acted on and the segments that are scored come from one rule.

The rule (spec section 4, Silero settings of the paper):

* a frame is *active* when its probability is >= ``threshold``; once active, a frame stays
  active while its probability is >= ``neg_threshold`` (Silero's hysteresis);
* runs of active frames separated by pauses shorter than ``min_silence_s`` (800 ms) are
  merged into one segment; a pause of exactly ``min_silence_s`` separates two segments;
* merged segments shorter than ``min_speech_s`` (120 ms) are dropped; exactly 120 ms is kept.

Times are integer sample indices on the conversation's stream timeline at ``sample_rate``
(the timeline rate, 24 kHz by default), never seconds. A segment is a half-open interval
``[start, end)``: frame ``k`` covers samples ``[k * frame, (k + 1) * frame)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

# state columns of the kernel
_ACTIVE, _OPEN, _START, _END, _POS = range(5)
_N_STATE = 5


@dataclass(frozen=True)
class SegmentRules:
    """Post-processor settings (conf/vad). Seconds here; converted to samples at use."""

    threshold: float = 0.5
    neg_threshold: float = 0.35
    min_speech_s: float = 0.12
    min_silence_s: float = 0.8

    def __post_init__(self) -> None:
        if not 0.0 < self.neg_threshold <= self.threshold < 1.0:
            raise ValueError(f"need 0 < neg_threshold <= threshold < 1, got {self.neg_threshold}, {self.threshold}")
        if self.min_speech_s < 0 or self.min_silence_s <= 0:
            raise ValueError("min_speech_s must be >= 0 and min_silence_s > 0")

    def samples(self, sample_rate: int) -> tuple[int, int]:
        """``(min_speech, min_silence)`` in samples at ``sample_rate`` (rounded to nearest)."""
        return round(self.min_speech_s * sample_rate), round(self.min_silence_s * sample_rate)


@njit(cache=True)
def _emit(out, n_out, b, start, end, min_speech):  # pragma: no cover
    """Write segment ``[start, end)`` of stream ``b`` when it is long enough; return the new count."""
    if end - start >= min_speech:
        out[n_out, 0] = b
        out[n_out, 1] = start
        out[n_out, 2] = end
        n_out += 1
    return n_out


@njit(cache=True)
def _advance(probs, first, n_valid, state, frame, thr, neg_thr, min_speech, min_silence, final,
             out):  # pragma: no cover
    """Advance every stream over its next ``n_valid[b]`` frames, ``probs[b, first[b]:]``; emit closed segments.

    probs: float32[B, K]; first, n_valid: int64[B]; state: int64[B, 5] (updated in place);
    out: int64[M, 3] rows (stream, start, end); returns the number of rows written.
    """
    n_out = 0
    for b in range(probs.shape[0]):
        active = state[b, _ACTIVE]
        is_open = state[b, _OPEN]
        start = state[b, _START]
        end = state[b, _END]
        pos = state[b, _POS]
        for k in range(n_valid[b]):
            p = probs[b, first[b] + k]
            t0 = pos * frame
            t1 = t0 + frame
            active = 1 if p >= (neg_thr if active == 1 else thr) else 0
            if active == 1:
                if is_open == 0:
                    is_open = 1
                    start = t0
                end = t1
            elif is_open == 1 and t1 - end >= min_silence:
                n_out = _emit(out, n_out, b, start, end, min_speech)
                is_open = 0
            pos += 1
        if final and is_open == 1:
            n_out = _emit(out, n_out, b, start, end, min_speech)
            is_open = 0
        state[b, _ACTIVE] = active
        state[b, _OPEN] = is_open
        state[b, _START] = start
        state[b, _END] = end
        state[b, _POS] = pos
    return n_out


@dataclass(frozen=True)
class SpeechView:
    """What the online detector knows about one stream at detector time ``now``.

    Attributes:
        now: samples of model output processed so far (the detector's clock).
        segments: closed, final segments ``(start, end)`` in samples, in order.
        open_start, open_end: the segment candidate still in progress (``None`` if none):
            first active sample and end of its last active frame. It becomes a segment
            unless it ends shorter than ``min_speech``.
        min_speech, min_silence: the rules in samples.
    """

    now: int
    segments: tuple[tuple[int, int], ...]
    open_start: int | None
    open_end: int | None
    min_speech: int
    min_silence: int

    @property
    def open_confirmed(self) -> bool:
        """The open candidate is already long enough to be a segment (an onset is confirmed)."""
        return self.open_start is not None and self.open_end - self.open_start >= self.min_speech

    def covers(self, t: int) -> bool | None:
        """Whether final speech covers sample ``t``; ``None`` while that is not yet known."""
        for s, e in self.segments:
            if s <= t < e:
                return True
        if self.open_start is not None and self.open_start <= t:
            if self.open_end > t and self.open_confirmed:
                return True
            return None  # speech at t not yet long enough, or a pause that may still be merged
        if t >= self.now:
            return None
        return False

    def first_onset_from(self, t: int) -> tuple[int | None, bool]:
        """First segment start ``>= t``.

        Returns ``(start, confirmed)``: ``(s, True)`` for a confirmed onset, ``(c, False)``
        for an unconfirmed candidate starting at ``c``, ``(None, False)`` when nothing has
        started since ``t`` as far as the detector knows.
        """
        for s, _ in self.segments:
            if s >= t:
                return s, True
        if self.open_start is not None and self.open_start >= t:
            return self.open_start, self.open_confirmed
        return None, False

    def endpoint(self, after: int, silence: int) -> tuple[int | None, bool]:
        """Rule time of the endpoint of the speech that runs past sample ``after`` (spec section 4).

        The response is the final speech ending after ``after``, from its first segment on. It
        ends at the end ``e`` of the first of its segments that is followed by ``silence``
        samples in which no speech starts; the endpoint is ``e + silence``. Speech that starts at
        or after ``e + silence`` is not part of the response, however far the detector has run
        past that time (the detector may be a whole model step ahead of the rule).

        Args:
            after: sample time the response runs past (T's end).
            silence: the endpoint's silence in samples (``endpoint_silence_s`` at the timeline rate).

        Returns:
            ``(time, True)`` once the detector knows the endpoint: its clock has reached
            ``e + silence`` and no candidate that may still become speech starts before it;
            ``(bound, False)`` while it does not, ``bound`` being the earliest endpoint still
            possible (a candidate in progress is speech until at least its last active frame,
            an unconfirmed one may still be dropped); ``(None, False)`` when no speech ending
            after ``after`` is known.
        """
        end = None
        for s, e in self.segments:
            if e <= after:
                continue
            if end is not None and s >= end + silence:
                return end + silence, True
            end = e
        if self.open_start is not None:
            if end is not None and self.open_start >= end + silence:
                return end + silence, True
            if end is None or self.open_confirmed:
                return max(self.open_end, after + 1) + silence, False
            return end + silence, False
        if end is None:
            return None, False
        return end + silence, self.now >= end + silence


class SpeechTracker:
    """Online (causal) segmenter for ``n_streams`` streams fed chunk by chunk.

    Args:
        n_streams: number of streams B.
        frame: samples per probability frame on the timeline (e.g. 768 = 32 ms at 24 kHz).
        rules: :class:`SegmentRules`.
        sample_rate: timeline sample rate in Hz.
    """

    def __init__(self, n_streams: int, frame: int, rules: SegmentRules, sample_rate: int):
        self.n_streams = n_streams
        self.frame = frame
        self.rules = rules
        self.min_speech, self.min_silence = rules.samples(sample_rate)
        self._state = np.zeros((n_streams, _N_STATE), dtype=np.int64)
        self._segments: list[list[tuple[int, int]]] = [[] for _ in range(n_streams)]

    def push(self, probs: np.ndarray, n_valid: np.ndarray | None = None, final: bool = False,
             first: np.ndarray | None = None) -> None:
        """Feed probabilities ``float32[B, k]``: stream ``b`` takes ``probs[b, first[b]:first[b] + n_valid[b]]``
        (default: every column).

        Raises:
            ValueError: ``probs`` is not ``[B, k]``, or a stream's columns run past ``k``.
        """
        probs = np.ascontiguousarray(probs, dtype=np.float32)
        if probs.ndim != 2 or probs.shape[0] != self.n_streams:
            raise ValueError(f"probs must be [{self.n_streams}, k], got {probs.shape}")
        first = np.zeros(self.n_streams, np.int64) if first is None else np.asarray(first, dtype=np.int64)
        if n_valid is None:
            n_valid = probs.shape[1] - first
        n_valid = np.asarray(n_valid, dtype=np.int64)
        if (first < 0).any() or (n_valid < 0).any() or (first + n_valid > probs.shape[1]).any():
            raise ValueError(f"columns past the {probs.shape[1]} given (first {first}, n_valid {n_valid})")
        out = np.empty((int(n_valid.sum()) // 2 + self.n_streams + 1, 3), dtype=np.int64)
        r = self.rules
        n = _advance(probs, first, n_valid, self._state, self.frame, r.threshold, r.neg_threshold,
                     self.min_speech, self.min_silence, final, out)
        for b, s, e in out[:n]:
            self._segments[b].append((int(s), int(e)))

    def reset(self, rows) -> None:
        """Start a fresh stream in each of ``rows``: its position, open candidate and segments are cleared."""
        for b in np.atleast_1d(rows):
            self._state[b] = 0
            self._segments[b] = []

    def finish(self) -> None:
        """Close every open candidate (end of stream)."""
        self.push(np.zeros((self.n_streams, 0), np.float32), final=True)

    def segments(self, b: int) -> list[tuple[int, int]]:
        """Closed segments of stream ``b`` (all of them after :meth:`finish`)."""
        return list(self._segments[b])

    def view(self, b: int) -> SpeechView:
        """Snapshot of stream ``b`` for the scheduler."""
        st = self._state[b]
        is_open = bool(st[_OPEN])
        return SpeechView(
            now=int(st[_POS]) * self.frame,
            segments=tuple(self._segments[b]),
            open_start=int(st[_START]) if is_open else None,
            open_end=int(st[_END]) if is_open else None,
            min_speech=self.min_speech,
            min_silence=self.min_silence,
        )


def segments_from_probs(probs: np.ndarray, lengths: np.ndarray, frame: int, rules: SegmentRules,
                        sample_rate: int) -> list[np.ndarray]:
    """Offline post-processing of whole streams (vectorised across streams in one kernel call).

    Args:
        probs: float32[B, K] speech probabilities per frame (rows padded past their length).
        lengths: int[B] valid frames per row.
        frame: samples per frame on the timeline.
        rules: :class:`SegmentRules`.
        sample_rate: timeline sample rate in Hz.

    Returns:
        per stream an int64[n, 2] array of ``[start, end)`` segments in samples.
    """
    tracker = SpeechTracker(probs.shape[0], frame, rules, sample_rate)
    tracker.push(probs, np.asarray(lengths, dtype=np.int64), final=True)
    return [np.asarray(tracker.segments(b), dtype=np.int64).reshape(-1, 2) for b in range(probs.shape[0])]
