"""The input-silence signal: what the model hears where no human speaks (spec section 4).

The spec says that while the scheduler waits "the model keeps receiving silence (room
tone)". :class:`RoomTone` is a stationary noise floor streamed under the whole input
(preamble, turns, gaps and waits alike: a constant floor), or exact digital zeros.
Settings: ``protocol.room_tone`` (one of :data:`ROOM_TONE_KINDS`) and
``protocol.room_tone_dbfs``; the decision is argued in docs/protocol-decisions.md.

The noise is read from one fixed, seeded table of :data:`TABLE_SAMPLES` samples (174.8 s at
24 kHz) that is periodic by construction (shaped in the frequency domain, so its end joins
its start without a seam), starting at an offset drawn from the conversation seed: the same
conversation always hears the same floor, whatever the model's native step, and reading it
costs a slice per frame. ``pink`` has a 1/f power spectrum (-3 dB per octave) from
:data:`PINK_LOW_HZ` to the Nyquist frequency and nothing below; ``white`` is flat.

Levels are RMS in dB relative to full scale 1.0 (``20 * log10(rms)``): -70 dBFS is an RMS of
3.16e-4, about 10 steps of the 16-bit grid.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

ROOM_TONE_KINDS = ("zeros", "white", "pink")
TABLE_SAMPLES = 2**22
PINK_LOW_HZ = 20.0  # below the band a room microphone records; keeps the 1/f floor from drifting
_TABLE_SEED = 20260902
_STREAM_KEY = 0x726F6F6D  # "room": separates the offset from other draws seeded with the conversation seed


def check_room_tone(kind: str, dbfs: float) -> None:
    """Raise ValueError unless ``kind`` is one of :data:`ROOM_TONE_KINDS` and ``dbfs`` < 0."""
    if kind not in ROOM_TONE_KINDS:
        raise ValueError(f"room_tone must be one of {', '.join(ROOM_TONE_KINDS)}, got {kind!r}")
    if not dbfs < 0:
        raise ValueError(f"room_tone_dbfs must be below 0 dBFS, got {dbfs!r}")


@lru_cache(maxsize=4)
def noise_table(kind: str, sample_rate: int) -> np.ndarray:
    """The periodic unit-RMS noise table ``float32[TABLE_SAMPLES]`` of ``kind`` (``white``, ``pink``)."""
    x = np.random.default_rng(_TABLE_SEED).standard_normal(TABLE_SAMPLES)
    if kind == "pink":
        f = np.fft.rfftfreq(TABLE_SAMPLES, 1.0 / sample_rate)
        gain = np.zeros_like(f)
        band = f >= PINK_LOW_HZ
        gain[band] = f[band] ** -0.5
        x = np.fft.irfft(np.fft.rfft(x) * gain, TABLE_SAMPLES)
    return (x / np.sqrt(np.mean(x**2))).astype(np.float32)


class RoomTone:
    """One conversation's input-silence stream on the timeline, read frame by frame.

    The stream depends only on ``(kind, dbfs, seed, sample_rate)``: reading it in frames of
    any size gives the same samples as one long read.

    Args:
        kind: ``"zeros"`` (digital silence), ``"white"`` or ``"pink"`` Gaussian noise.
        dbfs: RMS level of the noise in dBFS (ignored for ``"zeros"``).
        seed: the conversation seed (:meth:`harness.runtime.config.RunConfig.conversation_seed`).
        sample_rate: the timeline's rate in Hz.

    Raises:
        ValueError: unknown ``kind`` or a level at or above 0 dBFS.
    """

    def __init__(self, kind: str, dbfs: float, seed: int, sample_rate: int):
        check_room_tone(kind, dbfs)
        self._table = None if kind == "zeros" else noise_table(kind, sample_rate)
        self._gain = np.float32(10.0 ** (dbfs / 20.0))
        self._pos = int(np.random.default_rng([_STREAM_KEY, seed]).integers(TABLE_SAMPLES))

    def read(self, n: int) -> np.ndarray:
        """The next ``n`` samples as ``float32[n]``."""
        if self._table is None:
            return np.zeros(n, np.float32)
        x = np.take(self._table, np.arange(self._pos, self._pos + n), mode="wrap") * self._gain
        self._pos = (self._pos + n) % TABLE_SAMPLES
        return x


@njit(cache=True, nogil=True)
def _add_tone(out, rows, table, pos, gain):  # pragma: no cover
    """``out[b] += table[pos[b]:pos[b] + n] * gain[b]`` (float32, the table read around its end) for
    each ``b`` of ``rows``; then ``pos[b]`` moves on by ``n``, around the table."""
    n = out.shape[1]
    size = table.shape[0]
    for i in range(rows.shape[0]):
        b = rows[i]
        k = pos[b]
        g = gain[b]
        j = 0
        while j < n:
            m = min(n - j, size - k)
            for q in range(m):
                out[b, j + q] += table[k + q] * g
            j += m
            k += m
            if k == size:
                k = 0
        pos[b] = k


class RoomToneRows:
    """The room tone of every row of a batch, read for many rows in one gather (the streaming
    runner's input, :mod:`harness.runtime.runner`): each row's samples are its :class:`RoomTone`'s
    :meth:`RoomTone.read`, bit for bit (the same table slice times the same float32 gain), from the
    position it had when the row's stream opened.

    Args:
        n_rows: rows ``R``.
        frame: samples per read (timeline samples per model step).
    """

    def __init__(self, n_rows: int, frame: int):
        self.frame = frame
        self._pos = np.zeros(n_rows, np.int64)
        self._gain = np.zeros(n_rows, np.float32)
        self._table: list[np.ndarray | None] = [None] * n_rows

    def open(self, b: int, tone: RoomTone) -> None:
        """Row ``b`` hears ``tone`` from its current position on (``tone`` itself is not read again)."""
        self._table[b], self._gain[b], self._pos[b] = tone._table, tone._gain, tone._pos

    def read(self, rows: list[int]) -> np.ndarray:
        """The next frame of each of ``rows``: ``float32[len(rows), frame]`` (zeros for digital silence)."""
        n = self.frame
        out = np.zeros((len(rows), n), np.float32)
        groups: dict[int, tuple[np.ndarray, list[int]]] = {}
        for j, b in enumerate(rows):
            table = self._table[b]
            if table is not None:
                groups.setdefault(id(table), (table, []))[1].append(j)
        for table, sel in groups.values():
            every = len(sel) == len(rows)  # the usual case: one kind of tone for the whole run
            sel_a = np.asarray(sel)
            rows_a = np.asarray(rows)[sel_a]
            pos = self._pos[rows_a]
            block = np.lib.stride_tricks.sliding_window_view(table, n)[np.minimum(pos, len(table) - n)]
            for j in np.flatnonzero(pos > len(table) - n).tolist():  # these wrap around the periodic table
                block[j] = np.take(table, np.arange(pos[j], pos[j] + n), mode="wrap")
            np.multiply(block, self._gain[rows_a][:, None], out=block)
            if every:
                out = block
            else:
                out[sel_a] = block
            self._pos[rows_a] = (pos + n) % len(table)
        return out

    def add_into(self, out: np.ndarray, rows: np.ndarray) -> None:
        """``out[rows] += read(rows)`` in place (``out``: ``float32[R, frame]``, ``rows``: ``int64``
        indices), bit for bit, in one compiled pass per table (digital silence adds +0.0, as there)."""
        rows = np.asarray(rows, dtype=np.int64)
        if out.dtype != np.float32 or out.shape[1] != self.frame:
            raise ValueError(f"expected float32[R, {self.frame}], got {out.dtype} {out.shape}")
        groups: dict[int, tuple[np.ndarray | None, list[int]]] = {}
        for b in rows.tolist():
            table = self._table[b]
            groups.setdefault(id(table), (table, []))[1].append(b)
        for table, sel in groups.values():
            if table is None:
                out[sel] += np.float32(0.0)
                continue
            _add_tone(out, rows if len(sel) == len(rows) else np.asarray(sel, np.int64), table, self._pos,
                      self._gain)
