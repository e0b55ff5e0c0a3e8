"""Placing clips on a stream timeline and rendering any window of it.

A :class:`Track` is a set of clips placed at sample offsets on one timeline; rendering a
window sums the clips that overlap it (silence elsewhere). The runner renders the model's
input from the scheduler's placements with it; the ``oracle`` baseline renders its output.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import List


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


@njit(cache=True, nogil=True)
def add_rows(out, rows, x):  # pragma: no cover
    """``out[b] += x[b]`` (float32) for each ``b`` of ``rows``: ``out[rows] += x[rows]`` without the copies."""
    for i in range(rows.shape[0]):
        b = rows[i]
        for j in range(out.shape[1]):
            out[b, j] += x[b, j]


@njit(cache=True)
def _clip_list():  # pragma: no cover
    """An empty typed list of ``float32[::1]`` clips. Made, and changed (:func:`_set_clip`), in cached
    compiled code: typed lists' own methods called from Python are compiled in every process (about a
    second of CPU for each actor that streams)."""
    return List.empty_list(types.float32[::1])


@njit(cache=True)
def _set_clip(clips, slot, clip):  # pragma: no cover
    """``clips[slot] = clip``, or append it when ``slot == len(clips)``."""
    if slot == len(clips):
        clips.append(clip)
    else:
        clips[slot] = clip


@njit(cache=True, nogil=True)
def _render_rows(out, t0, p_row, p_start, p_slot, clips, lo, hi):  # pragma: no cover
    """Add every placement ``i`` (clip ``clips[p_slot[i]]`` at ``p_start[i]`` of row ``p_row[i]``) of the
    rows ``lo <= b < hi`` to the window ``[t0[b], t0[b] + n)`` of its row ``b`` in ``out``
    (``float32[R, n]``), in the order of the placements; rows with ``t0 < 0`` are left alone. Returns how
    many of them ended before their row's window (they never overlap a later one) or belong to a row
    left alone."""
    n = out.shape[1]
    gone = 0
    for i in range(p_row.shape[0]):
        b = p_row[i]
        if b < lo or b >= hi:
            continue
        t = t0[b]
        if t < 0:
            gone += 1
            continue
        clip = clips[p_slot[i]]
        s = p_start[i]
        e = s + clip.shape[0]
        if e <= t:
            gone += 1
            continue
        a = max(s, t)
        z = min(e, t + n)
        for j in range(a, z):
            out[b, j - t] += clip[j - s]
    return gone


class TrackRows:
    """The :class:`Track` of every row of a batch, rendered for many rows in one compiled pass (the
    streaming runner's input, :mod:`harness.runtime.runner`): row ``b``'s window is what
    ``Track.render_into`` of a track holding row ``b``'s clips adds, bit for bit (the same float32
    additions in the same order). A clip that is not float32 is held as float32: the same samples
    wherever it overlaps no other clip of its row (the scheduler's placements never overlap).

    Args:
        n_rows: rows ``R``.
    """

    def __init__(self, n_rows: int):
        self.n_rows = n_rows
        self._clips = _clip_list()  # slots; a freed one holds an empty clip
        self._free: list[int] = []
        self._slots = 0  # len(self._clips), kept here: a typed list's len() from Python is compiled per process
        self._row = np.zeros(0, np.int64)  # the placements, in the order they were added
        self._start = np.zeros(0, np.int64)
        self._slot = np.zeros(0, np.int64)
        self._end = np.zeros(0, np.int64)
        self._empty = np.zeros(0, np.float32)

    def add(self, b: int, start: int, clip: np.ndarray) -> None:
        """Place ``clip`` at sample ``start`` of row ``b``'s timeline; raises ValueError for a negative start."""
        if start < 0:
            raise ValueError("a clip cannot start before the timeline")
        clip = np.ascontiguousarray(clip, dtype=np.float32).reshape(-1)
        if self._free:
            slot = self._free.pop()
        else:
            slot, self._slots = self._slots, self._slots + 1
        _set_clip(self._clips, slot, clip)
        self._row = np.append(self._row, b)
        self._start = np.append(self._start, start)
        self._slot = np.append(self._slot, slot)
        self._end = np.append(self._end, start + len(clip))

    def _keep(self, keep: np.ndarray) -> None:
        for slot in self._slot[~keep].tolist():
            _set_clip(self._clips, slot, self._empty)
            self._free.append(slot)
        self._row, self._start, self._slot, self._end = (a[keep] for a in (self._row, self._start, self._slot,
                                                                            self._end))

    def clear(self, b: int) -> None:
        """Drop every clip of row ``b`` (its stream ended; a new one starts with an empty track)."""
        if (mine := self._row == b).any():
            self._keep(~mine)

    def render_into(self, out: np.ndarray, t0: np.ndarray, rows: tuple[int, int] | None = None) -> int:
        """Add samples ``[t0[b], t0[b] + n)`` of each row's track to ``out[b]`` (``float32[R, n]``;
        ``t0``: ``int64[R]``, negative for a row to leave alone). A row's windows must come in
        non-decreasing order of start, as :meth:`Track.render_into`'s: clips that ended before its
        window are dropped, and so are the clips of the rows left alone.

        Args:
            rows: ``(lo, hi)``: only rows ``lo <= b < hi``, nothing dropped (several ranges may render
                side by side on threads; then :meth:`drop` once with the same ``t0``); returns how
                many clips :meth:`drop` would drop.
        """
        t0 = np.asarray(t0, dtype=np.int64)
        if out.dtype != np.float32 or out.shape[0] != self.n_rows or t0.shape != (self.n_rows,):
            raise ValueError(f"expected float32[{self.n_rows}, n] and int64[{self.n_rows}], got {out.dtype} "
                             f"{out.shape} and {t0.shape}")
        if not len(self._row):
            return 0
        lo, hi = (0, self.n_rows) if rows is None else rows
        gone = _render_rows(out, t0, self._row, self._start, self._slot, self._clips, lo, hi)
        if gone and rows is None:
            self.drop(t0)
        return gone

    def drop(self, t0: np.ndarray) -> None:
        """Drop the clips that ended before their row's window at ``t0`` (as :meth:`render_into`) and the
        clips of the rows with ``t0 < 0``."""
        t = np.asarray(t0, dtype=np.int64)[self._row]
        self._keep((t >= 0) & (self._end > t))
