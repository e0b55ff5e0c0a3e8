"""The input-silence signal: what the model hears where no human speaks (spec section 4).

The spec says that while the scheduler waits "the model keeps receiving silence (room
tone)". :class:`RoomTone` is a seeded, stationary noise floor streamed under the whole
input (preamble, turns, gaps and waits alike, a constant floor), or exact digital zeros.
Settings: ``protocol.room_tone`` (one of :data:`ROOM_TONE_KINDS`) and
``protocol.room_tone_dbfs``; the decision is argued in docs/protocol-decisions.md.

Levels are RMS in dB relative to full scale 1.0 (``20 * log10(rms)``): -70 dBFS is an RMS of
3.16e-4, about 10 steps of the 16-bit grid.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

ROOM_TONE_KINDS = ("zeros", "white", "pink")

# 1/f ("pink") filter of J. O. Smith, "Spectral Audio Signal Processing", section
# "Example: Synthesis of 1/F Noise (Pink Noise)": -3 dB/octave within about 1 dB over three decades.
_PINK_B = np.array([0.049922035, -0.095993537, 0.050612699, -0.004408786])
_PINK_A = np.array([1.0, -2.494956002, 2.017265875, -0.522189400])
# RMS of the filter's output for unit white noise: the L2 norm of its impulse response (the
# slowest pole is 0.995, so 2**16 samples hold it to double precision)
_PINK_GAIN = float(np.sqrt(np.sum(lfilter(_PINK_B, _PINK_A, np.r_[1.0, np.zeros(2**16 - 1)]) ** 2)))
_PINK_BURN_IN = 4096  # samples discarded at the start so the stream starts stationary (0.995**4096 < 1e-8)
_STREAM_KEY = 0x726F6F6D  # "room": separates this generator from others seeded with the conversation seed


def check_room_tone(kind: str, dbfs: float) -> None:
    """Raise ValueError unless ``kind`` is one of :data:`ROOM_TONE_KINDS` and ``dbfs`` < 0."""
    if kind not in ROOM_TONE_KINDS:
        raise ValueError(f"room_tone must be one of {', '.join(ROOM_TONE_KINDS)}, got {kind!r}")
    if not dbfs < 0:
        raise ValueError(f"room_tone_dbfs must be below 0 dBFS, got {dbfs!r}")


class RoomTone:
    """One conversation's input-silence stream on the timeline, read frame by frame.

    The stream depends only on ``(kind, dbfs, seed)``: reading it in frames of any size gives
    the same samples as one long read, so every model hears the same floor under the same
    conversation whatever its native step.

    Args:
        kind: ``"zeros"`` (digital silence), ``"white"`` or ``"pink"`` Gaussian noise.
        dbfs: RMS level of the noise in dBFS (ignored for ``"zeros"``).
        seed: the conversation seed (:meth:`harness.runtime.config.RunConfig.conversation_seed`).

    Raises:
        ValueError: unknown ``kind`` or a level at or above 0 dBFS.
    """

    def __init__(self, kind: str, dbfs: float, seed: int):
        check_room_tone(kind, dbfs)
        self.kind = kind
        self._rms = 10.0 ** (dbfs / 20.0)
        self._rng = np.random.default_rng([_STREAM_KEY, seed])
        self._zi = np.zeros(len(_PINK_A) - 1)
        if kind == "pink":
            self.read(_PINK_BURN_IN)

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` samples as ``float32[n]``."""
        if self.kind == "zeros":
            return np.zeros(n, np.float32)
        x = self._rng.standard_normal(n)
        if self.kind == "pink":
            x, self._zi = lfilter(_PINK_B, _PINK_A, x, zi=self._zi)
            x /= _PINK_GAIN
        return (x * self._rms).astype(np.float32)
