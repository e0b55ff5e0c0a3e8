"""Duplex Cue self-checks: teacher-forced baselines whose responses are known (spec section 9; docs/cue.md).

Each is forced like any model before the switch point (its output there is the forced audio
itself) and after it:

* ``replay`` emits speaker A's recorded continuation: its output equals the reference
  condition exactly (the whole stream is A's recorded channel, on the 16-bit grid), so its
  response distribution must equal the human reference's. It cheats on purpose
  (``reads_schedule``): the runner gives it A's recording in
  :class:`~harness.cue.continuation.CueStreamContext` (docs/adding-a-model.md, "Duplex Cue").
* ``yield_now`` is silent from the switch point: every response Yielded.
* ``ignore`` talks on with unrelated speech (the ``babble`` baseline's espeak-ng weather
  report, from a seeded phase): every response Continued.

In Duplex-MPE ``yield_now`` behaves as ``silent`` and ``ignore`` as ``babble``; ``replay``
cannot run there (its open raises :class:`~harness.models.base.RowError`).
"""

from __future__ import annotations

import numpy as np

from harness.models.base import READS_SCHEDULE, TEACHER_FORCING, RowError, StreamContext
from harness.models.baselines import FRAME, BabbleModel, SilentModel, _Baseline


class _Forced:
    """Teacher forcing for a baseline: forced rows say exactly the forced audio, the others
    their own rendering (the baseline's clock advances on every step either way)."""

    def step_forced(self, frames: np.ndarray, forced: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``float32[R, 1920]`` heard, ``float32[R, 1920]`` forced where ``bool[R]`` ``mask`` ->
        ``float32[R, 1920]`` (24 kHz)."""
        out = self.step(frames)
        out[mask] = forced[mask]
        return out


class YieldNowModel(_Forced, SilentModel):
    name = "yield_now"
    capabilities = frozenset({TEACHER_FORCING})


class IgnoreModel(_Forced, BabbleModel):
    name = "ignore"
    capabilities = frozenset({TEACHER_FORCING})


class ReplayModel(_Forced, _Baseline):
    name = "replay"
    capabilities = frozenset({TEACHER_FORCING, READS_SCHEDULE})

    def __init__(self, voice: str = "en-us+f3", max_batch: int = 64):
        super().__init__(voice, max_batch)
        self._ref: list[np.ndarray | None] = [None] * self.info.max_batch

    def open(self, row: int, stream: StreamContext) -> None:
        """Takes A's recorded channel over the stream (``stream.reference``, ``float32[n]`` at 24 kHz).

        Raises:
            RowError: the stream carries no reference (not a Duplex Cue stream).
        """
        ref = getattr(stream, "reference", None)
        if ref is None:
            raise RowError({row: "replay is a Duplex Cue self-test: its stream must carry A's recording "
                                 "(CueStreamContext.reference)"})
        super().open(row, stream)
        self._ref[row] = np.asarray(ref, np.float32)

    def close(self, row: int) -> None:
        self._ref[row] = None

    def _render(self, row: int, t: int) -> np.ndarray:
        out = np.zeros(FRAME, np.float32)
        if self._ref[row] is not None:  # a row without a stream says nothing
            part = self._ref[row][t:t + FRAME]
            out[:len(part)] = part
        return out
