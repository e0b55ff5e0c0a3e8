"""Duplex Cue self-checks: teacher-forced baselines whose responses are known (spec section 9; docs/cue.md).

Each is forced like any model before the switch point (its output there is the forced audio
itself) and after it:

* ``replay`` emits speaker A's recorded continuation: its output equals the reference
  condition exactly (the whole stream is A's recorded channel, on the 16-bit grid), so its
  response distribution must equal the human reference's. It cheats on purpose
  (``reads_schedule``): the runner gives it A's recording in
  :class:`~harness.cue.continuation.CueStreamContext` (docs/adding-a-model.md, "Duplex Cue").
* ``yield_now`` is silent from the switch point, 80 ms before the cue, so it has stopped
  before hearing any of it: not active at the cue onset, every item excluded
  (``model_inactive_at_onset``; docs/cue.md, "Eligibility").
* ``yield_on_cue`` listens: it talks on (as ``ignore``) until it hears B (an input frame
  louder than ``hear_dbfs``) and stops ``reaction_s`` later: active at the onset, then silent
  for the rest of the window: every response Yielded, after hearing the cue.
* ``ignore`` talks on, deaf to the cue: after the switch point it says again what it was
  forced to say, from the first speech of its stream (its own earlier words, which is what an
  offline recogniser whose vocabulary is the context hears best); a stream with no forced
  speech says the ``babble`` baseline's espeak-ng weather report from a seeded phase: every
  response Continued.

In Duplex-MPE ``yield_now`` behaves as ``silent``, ``ignore`` and ``yield_on_cue`` as
``babble`` (``yield_on_cue`` listens only on Duplex Cue's free steps); ``replay`` cannot run
there (its open raises :class:`~harness.models.base.RowError`).
"""

from __future__ import annotations

import numpy as np

from harness.models.base import READS_SCHEDULE, TEACHER_FORCING, RowError, StreamContext
from harness.models.baselines import FRAME, RATE, BabbleModel, SilentModel, _Baseline


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
    """Talks on after the switch point, repeating its forced history (module docstring).

    Args:
        speech_dbfs: where its history's speech starts: the first sample above this many dBFS
            (the generated corpus's room tone is at -70 dBFS).
        gap_s, voice, max_batch: as :class:`~harness.models.baselines.BabbleModel`.
    """

    name = "ignore"
    capabilities = frozenset({TEACHER_FORCING})

    def __init__(self, speech_dbfs: float = -40.0, gap_s: float = 0.15, voice: str = "en-us+f3",
                 max_batch: int = 64):
        super().__init__(gap_s, voice, max_batch)
        self.speech = 10.0 ** (speech_dbfs / 20.0)
        self._said: list[list[np.ndarray]] = [[] for _ in range(self.info.max_batch)]
        self._again: list[np.ndarray | None] = [None] * self.info.max_batch  # per row: what it says again
        self._free = np.zeros(self.info.max_batch, np.int64)  # per row: free samples said so far

    def open(self, row: int, stream: StreamContext) -> None:
        super().open(row, stream)
        self._said[row], self._again[row], self._free[row] = [], None, 0

    def close(self, row: int) -> None:
        self._said[row], self._again[row] = [], None

    def step_forced(self, frames: np.ndarray, forced: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """As :meth:`_Forced.step_forced`; a free row with forced speech in its history says that
        history again, from its first speech on, looped."""
        out = super().step_forced(frames, forced, mask)
        for b in range(frames.shape[0]):
            if mask[b]:
                self._said[b].append(forced[b].copy())
                continue
            if self._again[b] is None and self._said[b]:
                history = np.concatenate(self._said[b])
                loud = np.flatnonzero(np.abs(history) > self.speech)
                self._again[b] = history[loud[0]:] if loud.size else np.zeros(0, np.float32)
                self._said[b] = []
            again = self._again[b]
            if again is not None and again.size:
                out[b] = again[(self._free[b] + np.arange(FRAME)) % again.size]
            self._free[b] += FRAME
        return out


class YieldOnCueModel(IgnoreModel):
    """Talks on after the switch point until it hears B, then yields (module docstring).

    Args:
        hear_dbfs: an input frame (80 ms) whose RMS is above this many dBFS is B speaking
            (the generated corpus's room tone is at -70 dBFS, its speech near -20).
        reaction_s: how long after the first frame it hears B it stops, ``>= 0``.
        speech_dbfs, gap_s, voice, max_batch: as :class:`IgnoreModel`.

    Raises:
        ValueError: ``reaction_s < 0``.
    """

    name = "yield_on_cue"

    def __init__(self, hear_dbfs: float = -45.0, reaction_s: float = 0.3, speech_dbfs: float = -40.0,
                 gap_s: float = 0.15, voice: str = "en-us+f3", max_batch: int = 64):
        if reaction_s < 0:
            raise ValueError(f"yield_on_cue reaction_s must be >= 0, got {reaction_s}")
        super().__init__(speech_dbfs, gap_s, voice, max_batch)
        self.hear = 10.0 ** (hear_dbfs / 20.0)
        self.reaction = round(reaction_s * RATE)
        self._stop = np.full(self.info.max_batch, -1, np.int64)  # per row: stream sample it falls silent at

    def open(self, row: int, stream: StreamContext) -> None:
        super().open(row, stream)
        self._stop[row] = -1

    def step_forced(self, frames: np.ndarray, forced: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """As :meth:`_Forced.step_forced`; on a free row's step it listens to ``frames`` and is
        silent from ``reaction_s`` after the first frame it heard B in."""
        rows = frames.shape[0]
        t0 = self._t[:rows].copy()
        out = super().step_forced(frames, forced, mask)
        for b in np.flatnonzero(~np.asarray(mask)):
            if self._stop[b] < 0 and np.sqrt(np.mean(np.square(frames[b], dtype=np.float64))) > self.hear:
                self._stop[b] = t0[b] + self.reaction
            if self._stop[b] >= 0:
                out[b, max(0, self._stop[b] - t0[b]):] = 0.0
        return out


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
