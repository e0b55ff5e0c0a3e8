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
        self._model = _silero_jit()
        self._model.reset_states()

    def complete_frames(self, n_samples: int) -> int:
        """Windows computed once a stream's first ``n_samples`` timeline samples are pushed: the
        ones whose probability does not depend on what follows the stream's end. A window needs
        the resampler's look-ahead after it (:attr:`StreamResampler.delay`, 0.5 ms from 24 kHz),
        so an output's last window is not scored when it ends less than that before the end."""
        n_16k = n_samples * self._resampler.new_rate // self.sample_rate - self._resampler.delay
        return max(0, n_16k) // SILERO_WINDOW

    def push(self, audio: np.ndarray) -> np.ndarray:
        x16 = self._resampler.push(audio)
        drop = min(self._skip, x16.shape[1])
        self._skip -= drop
        x16 = np.concatenate([self._pending_16k, x16[:, drop:]], axis=1)
        n_win = x16.shape[1] // SILERO_WINDOW
        self._pending_16k = x16[:, n_win * SILERO_WINDOW:]
        windows = torch.from_numpy(np.ascontiguousarray(x16[:, : n_win * SILERO_WINDOW]))
        probs = np.empty((self.n_streams, n_win), np.float32)
        with torch.inference_mode():
            for k in range(n_win):
                w = windows[:, k * SILERO_WINDOW:(k + 1) * SILERO_WINDOW]
                probs[:, k] = self._model(w, SILERO_RATE)[:, 0].numpy()
        return probs


class StreamingDetector:
    """Online speech detector: :class:`SileroProbs` followed by a :class:`SpeechTracker`."""

    def __init__(self, n_streams: int, sample_rate: int, settings: VadSettings):
        self.probs = SileroProbs(n_streams, sample_rate, settings)
        self.tracker = SpeechTracker(n_streams, self.probs.frame, settings.rules, sample_rate)
        self._chunks: list[np.ndarray] = []

    def push(self, audio: np.ndarray) -> None:
        """Feed the next ``float32[B, n]`` output samples of every stream."""
        p = self.probs.push(audio)
        if p.shape[1]:
            self.tracker.push(p)
            self._chunks.append(p)

    def probabilities(self, b: int, n_frames: int) -> np.ndarray:
        """Stream ``b``'s speech probabilities so far, at most ``n_frames``: ``float32[k]``, one per
        :attr:`SileroProbs.frame` timeline samples, what the scheduler acted on. Causal, so equal to
        what :func:`detect` computes from the stored output (the ``vad`` stage reuses them)."""
        p = np.concatenate([c[b] for c in self._chunks]) if self._chunks else np.zeros(0, np.float32)
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
