"""Resampling with torchaudio (spec: torchaudio for resampling).

Two entry points, one filter (torchaudio's windowed-sinc ``resample`` with its defaults):

* :func:`resample` for whole signals (clips, e.g. TTS output to the timeline rate);
* :class:`StreamResampler` for streams that arrive in chunks (the runner's model input and
  output, the VAD's 16 kHz input). It carries each stream's context from one chunk to the next,
  so its output equals :func:`resample` of the whole signal (to float32 rounding), delayed by a
  fixed :attr:`StreamResampler.delay`, bit for bit the same whatever the chunk sizes.
  Resampling each chunk on its own instead zero-pads every chunk edge (a click at every 80 ms
  frame edge).
"""

from __future__ import annotations

import itertools
import math
from concurrent.futures import Executor

import numpy as np
from numba import njit

_TILE = 2048  # output blocks per pass over the taps (cache-sized accumulators)
# The most filter coefficients a rate pair may need (about 32 MB of float32): torchaudio's kernel holds
# new/g x (orig/g + 2 * width) of them (g = gcd), so a pair of nearly coprime rates (16,001 -> 24,000 Hz:
# 24,000 x 16,013) would take gigabytes. Every rate pair the harness uses (8-48 kHz, 22,050 Hz espeak
# speech, multiples of 125 Hz) needs at most a few million.
MAX_KERNEL_COEFFICIENTS = 8_000_000


class ResampleError(ValueError):
    """Two rates whose resampling filter would be too large to build (see :func:`resample_problem`)."""


def resample_problem(orig_rate: int, new_rate: int) -> str | None:
    """Why ``orig_rate`` -> ``new_rate`` Hz cannot be resampled with bounded memory, or None.

    torchaudio's windowed-sinc filter has ``new / g`` phases of about ``orig / g + 2 * width``
    taps each (``g = gcd(orig, new)``; ``width`` about ``6 * orig / min(orig, new)``); more than
    :data:`MAX_KERNEL_COEFFICIENTS` in all is refused instead of allocated."""
    g = math.gcd(int(orig_rate), int(new_rate))
    o, q = orig_rate // g, new_rate // g
    width = math.ceil(6 * o / min(o, q)) if min(o, q) else 0
    n = q * (o + 2 * width)
    if orig_rate != new_rate and n > MAX_KERNEL_COEFFICIENTS:
        return (f"resampling {orig_rate} Hz to {new_rate} Hz needs a {q} x {o + 2 * width} filter "
                f"({n / 1e6:.0f} M coefficients, more than {MAX_KERNEL_COEFFICIENTS / 1e6:.0f} M): the two rates "
                "share too small a factor (gcd {g} Hz); resample the audio to a common rate first "
                "(e.g. `sox in.wav -r 48000 out.wav`)").replace("{g}", str(g))
    return None


@njit(cache=True, nogil=True)
def _polyphase(buf, kernel, o, n_blocks, out):  # pragma: no cover
    """``out[s, j * q + p] = sum_k buf[s, j * o + k] * kernel[p, k]`` for blocks ``j < n_blocks``.

    buf: float32[S, n]; kernel: float32[q, taps]; out: float32[S, n_blocks * q]. Each sum is
    the same float32 sequence whatever the batch, chunking or tiling: products rounded to
    float32 (no fused multiply-add), added tap by tap from 0.
    """
    q, taps = kernel.shape
    span = (taps - 1) // o + 1  # input samples of one phase that a block's taps reach
    acc = np.empty(min(n_blocks, _TILE), np.float32)
    phases = np.empty((o, min(n_blocks, _TILE) + span), np.float32)  # phases[r, i] = input[i * o + r]
    for s in range(buf.shape[0]):
        for j0 in range(0, n_blocks, _TILE):
            m = min(_TILE, n_blocks - j0)
            for r in range(o):
                for i in range(m + span):
                    t = (j0 + i) * o + r
                    phases[r, i] = buf[s, t] if t < buf.shape[1] else 0.0  # past the last tap: unused
            for p in range(q):
                acc[:m] = 0.0
                for k in range(taps):
                    w = kernel[p, k]
                    ph = phases[k % o, k // o:k // o + m]
                    for j in range(m):
                        acc[j] += ph[j] * w
                for j in range(m):
                    out[s, (j0 + j) * q + p] = acc[j]


def resample(x: np.ndarray, orig_rate: int, new_rate: int) -> np.ndarray:
    """Resample ``float32[..., n]`` from ``orig_rate`` to ``new_rate`` Hz (windowed sinc).

    Returns ``float32[..., ceil(n * new_rate / orig_rate)]``, zero-phase (not delayed; the
    signal is taken as zero before its start and after its end). Raises :class:`ResampleError`
    for a rate pair whose filter would be too large (:func:`resample_problem`).
    """
    if orig_rate == new_rate:
        return np.asarray(x, dtype=np.float32)
    if problem := resample_problem(orig_rate, new_rate):
        raise ResampleError(problem)
    import torch  # here, not at the top: importing torch costs a process about 1.5 s of CPU
    import torchaudio.functional as AF

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return AF.resample(t, orig_rate, new_rate).numpy()


def row_ranges(n: int, k: int) -> list[tuple[int, int]]:
    """Rows ``0..n`` cut into ``k`` contiguous ranges ``(lo, hi)`` whose sizes differ by at most one
    (``numpy.linspace``, rounded): the groups that row kernels (:class:`StreamResampler` here, the
    Silero scorer, the runner's input rendering) run side by side on a thread pool."""
    return list(itertools.pairwise(np.linspace(0, n, k + 1).round().astype(int).tolist()))


class StreamResampler:
    """Streaming :func:`resample` of ``n_streams`` streams from ``orig_rate`` to ``new_rate`` Hz.

    The filter is torchaudio's (the kernel of ``torchaudio.transforms.Resample``, the one
    :func:`resample` uses). With ``g = gcd(orig_rate, new_rate)``, every ``o = orig_rate / g``
    input samples make one block of ``q = new_rate / g`` output samples, computed from the
    block's input and ``width`` input samples either side. A block is computed as soon as its
    right context has arrived; the samples before a stream's start are zeros, as in
    :func:`resample`. Each output sample is the same sequence of float32 multiply-adds (tap by
    tap) whatever the chunking and batch size, so the output is bit-for-bit independent of
    both; it equals :func:`resample` (torch's convolution, another summation order) to float32
    rounding (about 145 dB SNR).

    :meth:`push` returns a fixed-rate stream: after ``N`` input samples in all it has returned
    ``floor(N * new_rate / orig_rate)`` samples, so a chunk of a whole number of blocks (e.g.
    one 80 ms frame) gives exactly its length at the new rate. That stream is the resampled
    signal delayed by :attr:`delay` output samples (``delay`` leading zeros): the fewest whole
    blocks that every chunking allows (the filter's look-ahead of ``width`` input samples,
    rounded up), so a whole number of samples at both rates (:attr:`delay_s` seconds; 0.5 ms
    between 24 and 16 kHz both ways). Callers that need the signal aligned drop the first
    ``delay`` samples; :meth:`flush` returns the last ones. Equal rates pass samples through
    (delay 0).

    Raises:
        ValueError: on a rate that is not a positive integer, or a chunk that is not
            ``[n_streams, n]``; :class:`ResampleError` for a rate pair whose filter would be too
            large (:func:`resample_problem`).
        RuntimeError: on :meth:`push` after :meth:`flush`.
    """

    POOL_ROWS = 32  # fewer streams than this are resampled in one call even with a pool (the hand-over costs more)

    def __init__(self, n_streams: int, orig_rate: int, new_rate: int):
        if min(orig_rate, new_rate) <= 0 or int(orig_rate) != orig_rate or int(new_rate) != new_rate:
            raise ValueError(f"sample rates must be positive integers, got {orig_rate} and {new_rate} Hz")
        if problem := resample_problem(int(orig_rate), int(new_rate)):
            raise ResampleError(problem)
        self.n_streams, self.orig_rate, self.new_rate = n_streams, int(orig_rate), int(new_rate)
        g = math.gcd(self.orig_rate, self.new_rate)
        self._o, self._q = self.orig_rate // g, self.new_rate // g
        self._width = 0
        self._kernel = np.zeros((self._q, 0), np.float32)
        if self.orig_rate != self.new_rate:
            import torch
            import torchaudio.transforms as AT

            tr = AT.Resample(self.orig_rate, self.new_rate, dtype=torch.float32)
            # kernel [q, 2 * width + o]: block m's output p = kernel[p] . input[m*o - width : m*o + o + width]
            self._width, self._kernel = tr.width, tr.kernel[:, 0].numpy()
        self._delay_blocks = -(-(self._width + self._o - 1) // self._o) if self._width else 0
        # the input behind `width` leading zeros, from the first sample of the next block's input on
        self._buf = np.zeros((n_streams, self._width), np.float32)
        self._ready = np.zeros((n_streams, self.delay), np.float32)  # output not yet returned
        self._n_in = 0
        self._n_out = 0  # output samples returned
        self._flushed = False
        self._mute: dict[int, tuple[int, int]] = {}  # row -> output samples [start, end) returned as zeros
        # an executor on which :meth:`push` computes row groups side by side (the kernel releases the GIL; each
        # row's samples are the same whichever group computes them), and how many groups; None: one call
        self.pool: Executor | None = None
        self.pool_groups = 2

    @property
    def delay(self) -> int:
        """Output samples by which :meth:`push`'s stream lags the resampled signal."""
        return self._delay_blocks * self._q

    @property
    def block_in(self) -> int:
        """Input samples per block of output (``orig_rate / gcd``; 1 for equal rates): a stream
        can only be :meth:`reset` where the input pushed so far is a whole number of blocks."""
        return self._o if self.orig_rate != self.new_rate else 1

    def reset(self, rows) -> None:
        """Start a fresh stream in each of ``rows`` (indices into the batch): from the next push
        on, their output is exactly a new ``StreamResampler``'s for the input that follows
        (``delay`` zeros, then the resampled new stream); the other rows are untouched.

        Raises:
            ValueError: the input pushed so far is not a whole number of :attr:`block_in`
                samples (the new stream's blocks would not line up), or after :meth:`flush`.
        """
        if self._flushed or self._n_in % self.block_in:
            raise ValueError(f"a stream can only be reset after a whole number of {self.block_in}-sample blocks "
                             f"of input ({self._n_in} pushed) and before flush")
        # before a stream starts its input is zeros; the output from here on starts with the delay's
        # zeros, where the filter would otherwise ring ahead of the new stream (a fresh resampler
        # never computes those blocks)
        start = self._n_in * self.new_rate // self.orig_rate
        for b in np.atleast_1d(rows):
            self._buf[b] = 0.0
            self._ready[b] = 0.0
            self._mute[int(b)] = (start, start + self.delay)

    @property
    def delay_s(self) -> float:
        """:attr:`delay` in seconds (a whole number of samples at both rates)."""
        return self.delay / self.new_rate

    def push(self, x: np.ndarray) -> np.ndarray:
        """Take the next ``float32[n_streams, n]`` input samples; return ``float32[n_streams, m]``,
        the next samples of the delayed output stream (``m`` may be 0)."""
        if self._flushed:
            raise RuntimeError("a flushed StreamResampler takes no more input")
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[0] != self.n_streams:
            raise ValueError(f"expected [{self.n_streams}, n] samples, got {x.shape}")
        self._n_in += x.shape[1]
        if self.orig_rate == self.new_rate:
            return x
        self._buf = np.concatenate([self._buf, x], axis=1)
        self._compute()
        return self._take(self._n_in * self._q // self._o - self._n_out)

    def flush(self) -> np.ndarray:
        """End of the streams: the rest of the output, ``float32[n_streams, m]``, taking the input
        as zeros after its end; the whole stream is then ``delay`` zeros followed by the
        resampled signal, ``ceil(N * new_rate / orig_rate)`` samples long as :func:`resample`'s.
        No :meth:`push` afterwards."""
        if self._flushed:
            raise RuntimeError("StreamResampler.flush called twice")
        self._flushed = True
        if self.orig_rate == self.new_rate:
            return np.zeros((self.n_streams, 0), np.float32)
        self._buf = np.concatenate([self._buf, np.zeros((self.n_streams, self._width + self._o), np.float32)], axis=1)
        self._compute()
        return self._take(self.delay + -(-self._n_in * self._q // self._o) - self._n_out)

    def _compute(self) -> None:
        """Append every block whose input (with context) is in the buffer to the ready output."""
        o, q, taps = self._o, self._q, self._kernel.shape[1]
        n_blocks = max(0, (self._buf.shape[1] - taps) // o + 1)
        out = np.empty((self.n_streams, n_blocks * q), np.float32)
        if self.pool is None or self.n_streams < self.POOL_ROWS or not n_blocks:
            _polyphase(self._buf, self._kernel, o, n_blocks, out)
        else:
            buf, kernel = self._buf, self._kernel
            list(self.pool.map(lambda ab: _polyphase(buf[ab[0]:ab[1]], kernel, o, n_blocks, out[ab[0]:ab[1]]),
                               row_ranges(self.n_streams, self.pool_groups)))
        self._ready = np.concatenate([self._ready, out], axis=1)
        self._buf = self._buf[:, n_blocks * o:]

    def _take(self, m: int) -> np.ndarray:
        out, self._ready = self._ready[:, :m], self._ready[:, m:]
        n0, self._n_out = self._n_out, self._n_out + out.shape[1]
        for b, (start, end) in list(self._mute.items()):
            out[b, max(0, start - n0):max(0, end - n0)] = 0.0
            if end <= self._n_out:
                del self._mute[b]
        return out
