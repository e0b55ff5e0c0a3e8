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
        keep = []
        for start, clip in self._items:
            end = start + len(clip)
            if end <= t0:
                continue  # finished: never needed again
            keep.append((start, clip))
            a, b = max(start, t0), min(end, t0 + n)
            if a < b:
                out[a - t0: b - t0] += clip[a - start: b - start]
        self._items = keep
        return out
