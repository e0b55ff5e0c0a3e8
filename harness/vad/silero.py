"""Causal Silero VAD, batched across streams (spec section 4: the detector is causal Silero).

:class:`StreamingDetector` turns model output on the timeline (``float32[B, n]`` at the
timeline rate, typically 24 kHz) into speech segments, chunk by chunk:

1. resample to 16 kHz with a streaming resampler per stream
   (:class:`~harness.audio.resample.StreamResampler`, torchaudio's filter with carried context:
   the same 16 kHz samples whatever the chunk sizes; Silero supports 8/16 kHz only, so 24 kHz
   audio is never fed as 16 kHz);
2. run the Silero JIT model on 512-sample windows (32 ms) for all streams in one batch;
3. segment the probabilities with :mod:`harness.vad.segments`.

The online scheduler and the offline ``vad`` stage both use this class, so the audio Silero
sees is identical in both, bit for bit (the offline stage simply pushes whole outputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from harness.audio.resample import StreamResampler
from harness.vad.segments import SegmentRules, SpeechTracker, SpeechView, segments_from_probs

SILERO_RATE = 16_000
SILERO_WINDOW = 512  # samples at 16 kHz (32 ms)


@dataclass(frozen=True)
class VadSettings:
    """conf/vad: the detector and its post-processor."""

    rules: SegmentRules = field(default_factory=SegmentRules)
    model: str = "silero-vad-jit"
    batch: int = 32  # conversations per offline batch (one Ray task each)



def frame_samples(sample_rate: int) -> int:
    """Timeline samples per Silero window (512 samples at 16 kHz): 768 at 24 kHz.

    Raises ValueError when a window is not a whole number of samples at ``sample_rate``.
    """
    frame = SILERO_WINDOW * sample_rate / SILERO_RATE
    if frame != int(frame):
        raise ValueError(f"a Silero window is not a whole number of samples at {sample_rate} Hz")
    return int(frame)


@cache
def _silero_jit():
    import silero_vad  # sets torch threads to 1 on import: callers set threads afterwards

    return silero_vad.load_silero_vad(onnx=False)


class SileroProbs:
    """Causal Silero speech probabilities for ``n_streams`` streams on a timeline at ``sample_rate``.

    :meth:`push` takes the next ``float32[B, n]`` timeline samples of every stream and returns
    the probabilities ``float32[B, k]`` of the Silero windows completed by them (one window =
    :attr:`frame` timeline samples, 768 at 24 kHz). The resampler's delay is dropped, so window
    ``k`` covers timeline samples ``[k * frame, (k + 1) * frame)``; a window is computed once the
    resampler's look-ahead after it has arrived (:meth:`complete_frames`).

    Raises:
        ValueError: when a Silero window is not a whole number of timeline samples, or a
            pushed chunk has the wrong shape.
    """

    def __init__(self, n_streams: int, sample_rate: int, settings: VadSettings):
        self.n_streams = n_streams
        self.sample_rate = sample_rate
        self.settings = settings
        self.frame = frame_samples(sample_rate)
        self._resampler = StreamResampler(n_streams, sample_rate, SILERO_RATE)
        self._skip = self._resampler.delay  # leading resampler output that only delays the stream
        self._pending_16k = np.zeros((n_streams, 0), np.float32)  # 16 kHz samples not yet windowed
        self._n_in = 0  # timeline samples pushed
        self.windows = 0  # windows computed (window k covers timeline samples [k * frame, (k + 1) * frame))
        self._fresh_at: dict[int, int] = {}  # row -> window before which its Silero state is cleared
        self._resets: list[tuple[int, list[int]]] = []  # (timeline sample, rows) where the resampler resets
        self._model = _silero_jit()
        self._model.reset_states()

    @property
    def reset_period(self) -> int:
        """Timeline samples that :meth:`reset` positions must be a multiple of (whole windows and
        whole resampler blocks)."""
        return math.lcm(self.frame, self._resampler.block_in)

    def reset(self, rows, at: int | None = None) -> int:
        """Start a fresh stream in each of ``rows`` at timeline sample ``at`` (default: the samples
        pushed so far; a later position takes effect when the pushes reach it): from there on each
        such row's probabilities are exactly a new detector's for the audio that follows, whatever
        its neighbours. Returns the index of the new streams' first window (the earlier windows of
        these rows still belong to whatever they held before).

        Raises:
            ValueError: ``at`` is before the samples pushed so far or not a multiple of
                :attr:`reset_period`.
        """
        at = self._n_in if at is None else int(at)
        if at < self._n_in or at % self.reset_period:
            raise ValueError(f"detector streams can only be reset every {self.reset_period} timeline samples, "
                             f"not before the {self._n_in} pushed (asked at {at})")
        rows = [int(b) for b in np.atleast_1d(rows)]
        self._resets.append((at, rows))
        for b in rows:
            self._fresh_at[b] = at // self.frame
        return at // self.frame

    def complete_frames(self, n_samples: int) -> int:
        """Windows computed once a stream's first ``n_samples`` timeline samples are pushed: the
        ones whose probability does not depend on what follows the stream's end. A window needs
        the resampler's look-ahead after it (:attr:`StreamResampler.delay`, 0.5 ms from 24 kHz),
        so an output's last window is not scored when it ends less than that before the end."""
        n_16k = n_samples * self._resampler.new_rate // self.sample_rate - self._resampler.delay
        return max(0, n_16k) // SILERO_WINDOW

    def push(self, audio: np.ndarray) -> np.ndarray:
        audio = np.asarray(audio, dtype=np.float32)
        parts, cut = [], 0
        for at, rows in sorted(self._resets):  # split the chunk where rows start new streams
            if at > self._n_in + audio.shape[-1] - cut:
                break
            parts.append(self._resampler.push(audio[:, cut:cut + at - self._n_in]))
            cut, self._n_in = cut + at - self._n_in, at
            self._resampler.reset(rows)
            self._resets.remove((at, rows))
        parts.append(self._resampler.push(audio[:, cut:]))
        self._n_in += audio.shape[-1] - cut
        x16 = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        drop = min(self._skip, x16.shape[1])
        self._skip -= drop
        x16 = np.concatenate([self._pending_16k, x16[:, drop:]], axis=1)
        n_win = x16.shape[1] // SILERO_WINDOW
        self._pending_16k = x16[:, n_win * SILERO_WINDOW:]
        windows = torch.from_numpy(np.ascontiguousarray(x16[:, : n_win * SILERO_WINDOW]))
        probs = np.empty((self.n_streams, n_win), np.float32)
        with torch.inference_mode():
            for k in range(n_win):
                self._clear_states(self.windows + k)
                w = windows[:, k * SILERO_WINDOW:(k + 1) * SILERO_WINDOW]
                probs[:, k] = self._model(w, SILERO_RATE)[:, 0].numpy()
        self.windows += n_win
        return probs

    def _clear_states(self, window: int) -> None:
        """Before ``window``: a fresh Silero state (and context) for rows reset to start there."""
        rows = [b for b, w in self._fresh_at.items() if w == window]
        if rows:
            if self._model._state is not None and len(self._model._state):  # batch size seen: per-row state
                self._model._state[:, rows] = 0.0
                self._model._context[rows] = 0.0
            for b in rows:
                del self._fresh_at[b]


class StreamingDetector:
    """Online speech detector: :class:`SileroProbs` followed by a :class:`SpeechTracker`.

    Rows can be reused for a new stream (:meth:`reset`, the runner's continuous batching): a
    row's probabilities, segments and view are then exactly a fresh detector's for the new stream.
    """

    def __init__(self, n_streams: int, sample_rate: int, settings: VadSettings):
        self.probs = SileroProbs(n_streams, sample_rate, settings)
        self.tracker = SpeechTracker(n_streams, self.probs.frame, settings.rules, sample_rate)
        self._rows: list[list[np.ndarray]] = [[] for _ in range(n_streams)]  # each row's probabilities so far
        self._first = np.zeros(n_streams, np.int64)  # window index at which each row's stream starts

    @property
    def reset_period(self) -> int:
        """Timeline samples that :meth:`reset` positions must be a multiple of."""
        return self.probs.reset_period

    def reset(self, rows, at: int | None = None) -> None:
        """Start a fresh stream in each of ``rows`` at timeline sample ``at`` (default: the samples
        pushed so far; a multiple of :attr:`reset_period`, ValueError otherwise). Their views are
        fresh at once; samples pushed for them before ``at`` are ignored."""
        first = self.probs.reset(rows, at)
        self.tracker.reset(rows)
        for b in np.atleast_1d(rows):
            self._first[b] = first
            self._rows[b] = []

    def push(self, audio: np.ndarray) -> None:
        """Feed the next ``float32[B, n]`` output samples of every stream."""
        w0 = self.probs.windows
        p = self.probs.push(audio)
        if p.shape[1]:
            first = np.clip(self._first - w0, 0, p.shape[1])  # windows of a row's previous stream are skipped
            self.tracker.push(p, first=first)
            for b, row in enumerate(self._rows):
                if first[b] < p.shape[1]:
                    row.append(p[b, first[b]:])

    def probabilities(self, b: int, n_frames: int) -> np.ndarray:
        """Stream ``b``'s speech probabilities so far, at most ``n_frames``: ``float32[k]``, one per
        :attr:`SileroProbs.frame` timeline samples, what the scheduler acted on. Causal, so equal to
        what :func:`detect` computes from the stored output (the ``vad`` stage reuses them)."""
        p = np.concatenate(self._rows[b]) if self._rows[b] else np.zeros(0, np.float32)
        return p[:n_frames].copy()

    def finish(self) -> None:
        """End of every stream: close open segments (a partial last window is not scored)."""
        self.tracker.finish()

    def view(self, b: int) -> SpeechView:
        return self.tracker.view(b)

    def segments(self, b: int) -> list[tuple[int, int]]:
        return self.tracker.segments(b)


def detect(waveforms: list[np.ndarray], sample_rate: int, settings: VadSettings) -> list[np.ndarray]:
    """Offline detection over whole outputs, batched across streams.

    Args:
        waveforms: mono ``float32[n_i]`` outputs on the timeline at ``sample_rate``.
    Returns:
        per waveform an ``int64[k, 2]`` array of ``[start, end)`` speech segments in samples
        (only the windows of :meth:`SileroProbs.complete_frames`, as online; the padding of
        shorter rows is ignored).
    """
    if not waveforms:
        return []
    batch = np.zeros((len(waveforms), max(len(w) for w in waveforms)), np.float32)
    for i, w in enumerate(waveforms):
        batch[i, : len(w)] = w
    sp = SileroProbs(len(waveforms), sample_rate, settings)
    probs = sp.push(batch)
    lengths = np.array([sp.complete_frames(len(w)) for w in waveforms])
    return segments_from_probs(probs, lengths, sp.frame, settings.rules, sample_rate)
