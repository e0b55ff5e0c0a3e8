"""Placing clips on a stream timeline and rendering any window of it.

A :class:`Track` is a set of clips placed at sample offsets on one timeline; rendering a
window sums the clips that overlap it (silence elsewhere). The runner renders the model's
input from the scheduler's placements with it; the ``oracle`` baseline renders its output.
"""

from __future__ import annotations

import numpy as np


class Track:
    """Clips (``float32[n]``) placed at integer sample offsets; rendered window by window.

    Windows must be requested in non-decreasing order of start (streaming use): clips that
    ended before a requested window are dropped from the working set.
    """

    def __init__(self) -> None:
        self._items: list[tuple[int, np.ndarray]] = []

    def add(self, start: int, clip: np.ndarray) -> None:
        """Place ``clip`` at sample ``start``; raises ValueError for a negative start."""
        if start < 0:
            raise ValueError("a clip cannot start before the timeline")
        self._items.append((start, clip))

    def render(self, t0: int, n: int) -> np.ndarray:
        """Samples ``[t0, t0 + n)`` of the track as ``float32[n]``."""
        out = np.zeros(n, np.float32)
        self.render_into(t0, out)
        return out

    def render_into(self, t0: int, out: np.ndarray) -> None:
        """Add samples ``[t0, t0 + len(out))`` of the track to ``out`` (``float32[n]``; zeros give
        :meth:`render`'s samples). Once the first clip has ended before ``t0``, every clip that has
        is dropped from the working set."""
        if self._items and self._items[0][0] + len(self._items[0][1]) <= t0:
            self._items = [(start, clip) for start, clip in self._items if start + len(clip) > t0]
        t1 = t0 + len(out)
        for start, clip in self._items:
            a, b = max(start, t0), min(start + len(clip), t1)
            if a < b:
                out[a - t0: b - t0] += clip[a - start: b - start]
