"""Causal Silero VAD, batched across streams (spec section 4: the detector is causal Silero).

:class:`StreamingDetector` (online: the runner's scheduler) turns model output on the timeline
(``float32[B, n]`` at the timeline rate, typically 24 kHz) into speech segments, chunk by chunk:

1. resample to 16 kHz with a streaming resampler per stream
   (:class:`~harness.audio.resample.StreamResampler`, torchaudio's filter with carried context:
   the same 16 kHz samples whatever the chunk sizes; Silero supports 8/16 kHz only, so 24 kHz
   audio is never fed as 16 kHz);
2. score 512-sample windows (32 ms) with :class:`SileroNet`, the bundled Silero model split at
   its recurrence, the streams in one batch, or in two: those whose view is due before the next
   push, then the others (:meth:`StreamingDetector.push`, :meth:`StreamingDetector.settle`);
3. segment the probabilities with :mod:`harness.vad.segments`.

:func:`speech_probs` / :func:`detect` (offline: the ``vad`` stage) compute the same
probabilities from whole stored outputs, many conversations per call (the features of every
window at once, the LSTM stepped through streams of different lengths), on CPU or CUDA.

What holds between the two (docs/vad.md, "What online and offline agree on"): the same calls
(rows and chunks) give the same probabilities bit for bit on one machine; any other batch,
chunking, worker count, CPU or CUDA gives each window's probability within
:data:`PROB_TOLERANCE`, since torch's kernels pick their summation order by shape and
instruction set. Segments are identical unless a probability lies within that tolerance of
a threshold (the segmenter only compares probabilities with its two thresholds).
"""

from __future__ import annotations

import copy
import math
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from harness.audio.resample import StreamResampler, row_ranges
from harness.vad.segments import SegmentRules, SpeechTracker, SpeechView, segments_from_probs
from harness.vad.settings import VadSettings

SILERO_RATE = 16_000
SILERO_WINDOW = 512  # samples at 16 kHz (32 ms)
# The most a window's speech probability moves with the batch, the chunking, the worker threads,
# the CPU's instruction set or the device (measured: at most 9.2e-7 online in 80 ms pushes against
# offline over 10 min of speech under four kernel caps, tests/unit/test_vad_batched.py; up to 2.3e-5
# when the same audio is pushed in odd chunks (1001, 7777, 333 samples) under AVX2 or SSE4.1 caps,
# tests/unit/test_silero_real.py; docs/vad.md). Promised, and tested, no more.
PROB_TOLERANCE = 1e-4


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


@cache
def row_pool(threads: int) -> ThreadPoolExecutor:
    """The process's worker threads for row groups (one pool per size, kept): the online detector's
    scoring groups and 16 kHz resampler, and the runner's input rendering (``vad.threads`` of them)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="silero")


@contextmanager
def _one_thread():
    """Torch's intra-op threads at 1 for the duration (restored after): a call's result then
    depends on its shapes, never on the thread count (see :class:`SileroNet`)."""
    n = torch.get_num_threads()
    if n != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if n != 1:
            torch.set_num_threads(n)



class SileroNet:
    """The bundled Silero VAD model (``silero-vad``'s JIT, 16 kHz branch) split at its recurrence.

    Silero scores a 512-sample window from 576 samples (the previous window's last 64 as
    context, zeros at a stream's start): an STFT and four convolutions (:meth:`features`, no
    state: any number of windows of any streams in one call), then one LSTM cell step carried
    per stream (:meth:`step`) and a 1x1 convolution with a sigmoid (:meth:`head`). The stock
    forward runs all three per window; splitting lets the offline detector run the features of
    all windows of all streams at once, which is where the time goes.

    What a result depends on: on CPU every call runs single-threaded, so it is a function of
    its inputs and shapes alone (the same calls give the same numbers bit for bit, whatever the
    thread count). A window computed in another batch, in other chunks, on another CPU
    (oneDNN/MKL choose kernels, hence summation orders, by shape and instruction set) or on
    CUDA agrees to :data:`PROB_TOLERANCE`, not bit for bit: ``tests/unit/test_vad_batched.py``
    checks that bound, also under other instruction-set caps.

    Args:
        device: ``"cpu"`` or a CUDA device (``"cuda"``, ``"cuda:1"``).
    """

    CONTEXT = 64  # samples of the previous window prepended to each window (Silero's context at 16 kHz)
    FEATURE_CHUNK = (("cpu", 4096), ("cuda", 131_072))  # windows per feature call (~4 KB of activations each)

    def __init__(self, device: str = "cpu"):
        self.device = torch.device(device)
        self.feature_chunk = dict(self.FEATURE_CHUNK)[self.device.type]
        net = _silero_jit()._model
        if self.device.type != "cpu":
            net = copy.deepcopy(net).to(self.device)
        self._stft, self._encoder = net.stft, net.encoder
        # The features as the JIT computes them, in fewer and larger operations (about 8 instead of 13 us a
        # window on one core): the STFT is a 258 x 256 convolution (a Hann-windowed DFT basis, hop 128, after
        # reflecting 64 samples onto the end) whose phase is thrown away, here a real FFT of the windowed
        # frames; the encoder's four 3-tap convolutions (ReLU after each), here matrix products over
        # frames-by-channels (channels last, no transposes). Equal to float32 rounding (checked on load).
        basis = self._stft.forward_basis_buffer
        self._window = basis[0, 0].clone()  # the k = 0 cosine row is the window itself
        self._n_fft, self._hop = int(self._stft.filter_length), int(self._stft.hop_length)
        self._convs = []  # (stride, padding, weight float32[taps * C_in, C_out] tap-major, bias float32[C_out])
        for block in self._encoder.children():
            conv = block.reparam_conv
            w = conv.weight  # [C_out, C_in, taps]
            self._convs.append((int(conv.stride[0]), int(conv.padding[0]),
                                w.permute(2, 1, 0).reshape(-1, w.shape[0]).contiguous(), conv.bias))
        self._check_features()
        rnn = net.decoder.rnn
        self._lstm = (rnn.weight_ih, rnn.weight_hh, rnn.bias_ih, rnn.bias_hh)
        head = dict(net.decoder.decoder.named_parameters())
        w, b = head["2.weight"][0, :, 0], head["2.bias"]
        self._head = (w, b)

    PAD = 64  # samples reflected onto each input's end before the STFT (the JIT's ReflectionPad1d((0, 64)))

    def magnitude(self, x: torch.Tensor) -> torch.Tensor:
        """The JIT STFT's magnitude by FFT, channels last: ``float32[N, 576]`` -> ``float32[N, 4, 129]``
        (frames x bins), within float32 rounding of the stock convolution's (about 2e-6 absolute on
        speech-level input)."""
        x = torch.nn.functional.pad(x, (0, self.PAD), mode="reflect")
        z = torch.view_as_real(torch.fft.rfft(x.unfold(1, self._n_fft, self._hop) * self._window, dim=-1))
        re, im = z[..., 0], z[..., 1]
        return torch.sqrt(re * re + im * im)

    def encode(self, z: torch.Tensor) -> torch.Tensor:
        """The JIT encoder, channels last: ``float32[N, 4, 129]`` (:meth:`magnitude`) -> ``float32[N, 128]``.
        Each 3-tap convolution is one matrix product of the padded frames' taps side by side."""
        n = z.shape[0]
        for stride, pad, w, bias in self._convs:
            taps = w.shape[0] // z.shape[2]
            zp = torch.nn.functional.pad(z, (0, 0, pad, pad))  # [N, L + 2 pad, C]
            cols = zp.unfold(1, taps, stride).transpose(2, 3)  # [N, L_out, taps, C]
            l_out = cols.shape[1]
            z = torch.relu(torch.addmm(bias, cols.reshape(n * l_out, -1), w)).reshape(n, l_out, -1)
        return z[:, 0]

    def _check_features(self) -> None:
        """Refuse a Silero build whose features :meth:`magnitude` and :meth:`encode` do not reproduce
        (another STFT layout, window or encoder shape).

        Raises:
            RuntimeError: on random input they differ from the JIT's by more than 1e-4.
        """
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 576)).astype(np.float32) * 0.1)
        with torch.inference_mode(), _one_thread():
            x = x.to(self.device)
            ref = self._encoder(self._stft(x))
            try:
                ours = self.encode(self.magnitude(x))
            except RuntimeError as e:
                raise RuntimeError(f"this Silero's features do not have the layout SileroNet expects: {e}") from e
        if ref.shape[2:] != (1,) or ref.shape[:2] != ours.shape or float((ref[:, :, 0] - ours).abs().max()) > 1e-4:
            raise RuntimeError(f"this Silero's features are not a Hann-windowed {self._n_fft}-point DFT (hop "
                               f"{self._hop}, {self.PAD} samples reflected) and 3-tap convolutions: "
                               f"{tuple(ref.shape)} vs {tuple(ours.shape)}")

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``float32[N, 576]`` (context + window, 16 kHz) -> encoder output ``float32[N, 128]``
        (:meth:`magnitude`, then :meth:`encode`)."""
        out = x.new_empty((x.shape[0], 128))
        with torch.inference_mode(), _one_thread():
            for i in range(0, x.shape[0], self.feature_chunk):
                part = x[i:i + self.feature_chunk]
                out[i:i + len(part)] = self.encode(self.magnitude(part))
        return out

    def step(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One LSTM step of ``B`` streams: features ``float32[B, 128]``, state ``h, c`` (``float32[B, 128]``,
        zeros at a stream's start) -> the next ``h, c``."""
        with torch.inference_mode(), _one_thread():
            return torch.lstm_cell(x, (h, c), *self._lstm)

    def head(self, h: torch.Tensor) -> np.ndarray:
        """LSTM outputs ``float32[N, 128]`` -> speech probabilities ``float32[N]`` (numpy, on the host)."""
        w, b = self._head
        with torch.inference_mode(), _one_thread():
            return torch.sigmoid(torch.relu(h) @ w + b).float().cpu().numpy()

    def windows_with_context(self, x16: np.ndarray, context: np.ndarray) -> np.ndarray:
        """``float32[B, k * 512]`` 16 kHz samples and each stream's context before them (``float32[B, 64]``)
        -> Silero's inputs ``float32[B, k, 576]``."""
        b, n = x16.shape
        k = n // SILERO_WINDOW
        w = x16[:, : k * SILERO_WINDOW].reshape(b, k, SILERO_WINDOW)
        if not k:
            return np.zeros((b, 0, self.CONTEXT + SILERO_WINDOW), np.float32)
        ctx = np.concatenate([context[:, None], w[:, :-1, -self.CONTEXT:]], axis=1)
        return np.concatenate([ctx, w], axis=2)


@dataclass
class Windows:
    """One push's Silero windows, prepared (:meth:`SileroProbs.prepare`) and scored in one or more
    parts (:meth:`SileroProbs.score`)."""

    probs: np.ndarray  # float32[B, k]: each row's probabilities, NaN until scored (and for rows not held)
    rows: np.ndarray  # int64[R]: the rows held, increasing
    inputs: np.ndarray  # float32[R, k, 576]: their Silero inputs (context + window, 16 kHz)
    starts: dict[int, int]  # place in rows -> window at which that row's new stream starts (fresh state)
    scored: np.ndarray = field(init=False)  # bool[R]: the rows scored so far

    def __post_init__(self) -> None:
        self.scored = np.zeros(len(self.rows), bool)


class SileroProbs:
    """Causal Silero speech probabilities for ``n_streams`` streams on a timeline at ``sample_rate``.

    :meth:`push` takes the next ``float32[B, n]`` timeline samples of every stream and returns
    the probabilities ``float32[B, k]`` of the Silero windows completed by them (one window =
    :attr:`frame` timeline samples, 768 at 24 kHz). The resampler's delay is dropped, so window
    ``k`` covers timeline samples ``[k * frame, (k + 1) * frame)``; a window is computed once the
    resampler's look-ahead after it has arrived (:meth:`complete_frames`). The probabilities are
    :class:`SileroNet`'s: the same calls give the same numbers; other chunkings, batches or
    :func:`speech_probs` over the stored output agree within :data:`PROB_TOLERANCE`.

    The scored rows of a push are split into ``ceil(rows / GROUP_ROWS)`` balanced groups of
    consecutive rows, each scored as one batch; on CPU ``settings.threads`` threads score the
    groups side by side (torch releases the GIL), so the numbers depend on the rows scored, never
    on the thread count.

    Raises:
        ValueError: when a Silero window is not a whole number of timeline samples, or a
            pushed chunk has the wrong shape.
    """

    GROUP_ROWS = 128  # most rows in one scoring batch (smaller groups cost more than two threads save)

    def __init__(self, n_streams: int, sample_rate: int, settings: VadSettings, device: str = "cpu"):
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
        self._net = SileroNet(device)
        self.threads = settings.threads if self._net.device.type == "cpu" else 1
        if self.threads > 1:  # the 16 kHz resampler's rows side by side too (the same samples)
            self._resampler.pool, self._resampler.pool_groups = row_pool(self.threads), self.threads
        self._context = np.zeros((n_streams, SileroNet.CONTEXT), np.float32)
        self._h = torch.zeros((n_streams, 128), device=self._net.device)
        self._c = torch.zeros((n_streams, 128), device=self._net.device)

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

    def push(self, audio: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Take the next timeline samples ``float32[B, n]`` of every stream; return the probabilities
        ``float32[B, k]`` of the ``k`` windows they complete (the same ``k`` for every stream):
        :meth:`prepare`, then :meth:`score` of every row it holds.

        Args:
            rows: the streams to score (indices, increasing; default all of them), in one batch:
                the others are resampled but not scored, their columns are NaN and their Silero
                state stands still, so leave a stream out only while it holds nothing and
                :meth:`reset` it before it holds a stream again (the runner's free rows).

        Raises:
            ValueError: ``audio`` is not ``[B, n]``.
        """
        windows = self.prepare(audio, rows)
        self.score(windows)
        return windows.probs

    def prepare(self, audio: np.ndarray, rows: np.ndarray | None = None) -> Windows:
        """Resample the next timeline samples ``float32[B, n]`` of every stream and cut the windows
        they complete, scoring none: :meth:`score` then scores them, all rows at once or in parts
        (each row once, and every row before the next :meth:`prepare`: a row's Silero state carries
        from window to window). ``rows`` as in :meth:`push`.

        Raises:
            ValueError: ``audio`` is not ``[B, n]``.
        """
        audio = np.asarray(audio, dtype=np.float32)
        parts, cut = [], 0
        for at, reset_rows in sorted(self._resets):  # split the chunk where rows start new streams
            if at > self._n_in + audio.shape[-1] - cut:
                break
            parts.append(self._resampler.push(audio[:, cut:cut + at - self._n_in]))
            cut, self._n_in = cut + at - self._n_in, at
            self._resampler.reset(reset_rows)
            self._resets.remove((at, reset_rows))
        parts.append(self._resampler.push(audio[:, cut:]))
        self._n_in += audio.shape[-1] - cut
        x16 = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        drop = min(self._skip, x16.shape[1])
        self._skip -= drop
        x16 = np.concatenate([self._pending_16k, x16[:, drop:]], axis=1)
        n_win = x16.shape[1] // SILERO_WINDOW
        self._pending_16k = x16[:, n_win * SILERO_WINDOW:]
        fresh = [(b, w - self.windows) for b, w in self._fresh_at.items() if w < self.windows + n_win]
        for b, _ in fresh:
            del self._fresh_at[b]
        self.windows += n_win
        idx = np.arange(self.n_streams) if rows is None else np.asarray(rows, dtype=np.int64)
        out = np.full((self.n_streams, n_win), 0.0 if rows is None else np.nan, np.float32)
        if not n_win or not len(idx):
            return Windows(out, idx[:0], np.zeros((0, n_win, SileroNet.CONTEXT + SILERO_WINDOW), np.float32), {})
        inputs = self._net.windows_with_context(x16[idx, : n_win * SILERO_WINDOW], self._context[idx])
        pos = {int(b): j for j, b in enumerate(idx.tolist())}  # row -> its place in idx
        for b, k in fresh:  # a row's new stream starts at window k: no context before it
            if b in pos:
                inputs[pos[b], k, :SileroNet.CONTEXT] = 0.0
        self._context[idx] = inputs[:, -1, -SileroNet.CONTEXT:]
        return Windows(out, idx, inputs, {pos[b]: k for b, k in fresh if b in pos})

    def score(self, windows: Windows, rows: np.ndarray | None = None) -> None:
        """Score ``rows`` (indices, increasing; default the rows of ``windows`` not scored yet) of a :meth:`prepare`'s
        windows into ``windows.probs``, carrying their Silero state. The rows scored in one call are
        split into ``ceil(rows / GROUP_ROWS)`` balanced groups of consecutive rows, each one batch (so
        the numbers depend on how a push's rows are divided between calls, never on the threads).

        Raises:
            ValueError: a row is not one of ``windows``', the rows are not increasing, or one
                was scored already.
        """
        sel = np.flatnonzero(~windows.scored)
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64)
            if not np.isin(rows, windows.rows).all():
                raise ValueError(f"rows {rows.tolist()} are not all among the prepared rows {windows.rows.tolist()}")
            sel = np.searchsorted(windows.rows, rows)
        if windows.scored[sel].any() or (np.diff(sel) <= 0).any():
            raise ValueError(f"rows {windows.rows[sel].tolist()} are not increasing, or some were scored already")
        if not len(sel) or not windows.probs.shape[1]:
            windows.scored[sel] = True
            return
        idx = windows.rows[sel]
        tidx = torch.from_numpy(idx).to(self._net.device)
        h0, c0 = self._h[tidx], self._c[tidx]
        inputs = windows.inputs[sel]
        starts = {j: windows.starts[int(i)] for j, i in enumerate(sel.tolist()) if int(i) in windows.starts}
        # fixed groups of the scored rows (their number a function of the rows alone, so the numbers
        # never depend on the threads, which only run the groups side by side)
        groups = row_ranges(len(idx), -(-len(idx) // self.GROUP_ROWS))

        def score(group: tuple[int, int]) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
            lo, hi = group
            return self._score(inputs[lo:hi], h0[lo:hi], c0[lo:hi],
                               {j - lo: k for j, k in starts.items() if lo <= j < hi})

        parts = (list(row_pool(self.threads).map(score, groups)) if len(groups) > 1 and self.threads > 1
                 else [score(g) for g in groups])
        windows.probs[idx] = np.concatenate([p for p, _, _ in parts])
        self._h[tidx] = torch.cat([h for _, h, _ in parts])
        self._c[tidx] = torch.cat([c for _, _, c in parts])
        windows.scored[sel] = True

    def _score(self, inputs: np.ndarray, h: torch.Tensor, c: torch.Tensor,
               starts: dict[int, int]) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """Silero over ``float32[G, k, 576]`` windows of ``G`` streams from LSTM state ``h, c``
        (``float32[G, 128]``), the state cleared before window ``starts[g]`` of stream ``g``:
        the probabilities ``float32[G, k]`` and the state after the last window."""
        g, k = inputs.shape[:2]
        net = self._net
        feats = net.features(torch.from_numpy(inputs.reshape(-1, inputs.shape[2])).to(net.device)).reshape(g, k, 128)
        hs = []
        with torch.inference_mode():
            for w in range(k):
                fresh = [j for j, kb in starts.items() if kb == w]
                if fresh:  # a fresh Silero state for streams that start here
                    keep = torch.ones((g, 1), device=net.device)
                    keep[fresh] = 0.0
                    h, c = h * keep, c * keep
                h, c = net.step(feats[:, w], h, c)
                hs.append(h)
            return net.head(torch.stack(hs, 1).reshape(-1, 128)).reshape(g, k), h, c


class StreamingDetector:
    """Online speech detector: :class:`SileroProbs` followed by a :class:`SpeechTracker`.

    Rows can be reused for a new stream (:meth:`reset`, the runner's continuous batching): a
    row's probabilities, segments and view are then exactly a fresh detector's for the new stream.
    """

    def __init__(self, n_streams: int, sample_rate: int, settings: VadSettings, device: str | None = None):
        """``device``: where Silero runs (default ``settings.device`` when it is CUDA and torch can
        use CUDA here, else the CPU: an infer actor without a GPU still runs its detector)."""
        if device is None:
            cuda = torch.device(settings.device).type == "cuda"
            device = settings.device if cuda and torch.cuda.is_available() else "cpu"
        self.probs = SileroProbs(n_streams, sample_rate, settings, device)
        self.tracker = SpeechTracker(n_streams, self.probs.frame, settings.rules, sample_rate)
        # each row's probabilities so far: row b's stream has _kept[b] of them, in _history[b, :_kept[b]]
        self._history = np.zeros((n_streams, 256), np.float32)
        self._kept = np.zeros(n_streams, np.int64)
        self._first = np.zeros(n_streams, np.int64)  # window index at which each row's stream starts
        self._pending: tuple[Windows, np.ndarray] | None = None  # a push not wholly scored, its rows' first columns
        self._waiting = np.zeros(n_streams, bool)  # the rows of it not yet scored

    @property
    def reset_period(self) -> int:
        """Timeline samples that :meth:`reset` positions must be a multiple of."""
        return self.probs.reset_period

    def reset(self, rows, at: int | None = None) -> None:
        """Start a fresh stream in each of ``rows`` at timeline sample ``at`` (default: the samples
        pushed so far; a multiple of :attr:`reset_period`, ValueError otherwise). Their views are
        fresh at once; samples pushed for them before ``at`` are ignored."""
        self._settle_for(rows)
        first = self.probs.reset(rows, at)
        self.tracker.reset(rows)
        for b in np.atleast_1d(rows):
            self._first[b] = first
            self._kept[b] = 0

    def push(self, audio: np.ndarray, rows: np.ndarray | None = None, due: np.ndarray | None = None) -> None:
        """Feed the next ``float32[B, n]`` output samples of every stream.

        Args:
            rows: the streams that hold something (indices, increasing; default all), scored: the
                others' probabilities, segments and views stand still, and each of them must be
                :meth:`reset` before it holds a stream again (:meth:`SileroProbs.push`).
            due: of ``rows``, those whose view is wanted before the next push (indices,
                increasing; default all of them): scored now, in one batch; the others are scored,
                in another, by :meth:`settle`, which a caller may run while it waits on something
                else (the runner: while the model steps). Any read or reset of a row, and the next
                push, settle first, so what ``due`` changes is only where the batches are cut
                (hence the probabilities, within :data:`PROB_TOLERANCE`), never what is read.
        """
        self.settle()
        w0 = self.probs.windows
        windows = self.probs.prepare(audio, rows)
        k = windows.probs.shape[1]
        if not k:
            return
        first = np.full(self.probs.n_streams, k, np.int64)  # rows not held take no column
        first[windows.rows] = np.clip(self._first[windows.rows] - w0, 0, k)  # nor do windows of a previous stream
        now = np.ones(len(windows.rows), bool) if due is None else np.isin(windows.rows, due)
        if not now.all():
            self._waiting[windows.rows[~now]] = True
            self._pending = (windows, first)
        self._score(windows, first, windows.rows[now])

    def _settle_for(self, rows) -> None:
        """:meth:`settle` if any of ``rows`` waits to be scored (before it is read or reset)."""
        if self._pending is not None and self._waiting[rows].any():
            self.settle()

    def settle(self) -> None:
        """Score the rows of the last push that were not due (:meth:`push`); nothing if none wait."""
        if self._pending is not None:
            windows, first = self._pending
            rows = np.flatnonzero(self._waiting)
            self._pending = None
            self._waiting[:] = False
            self._score(windows, first, rows)

    def _score(self, windows: Windows, first: np.ndarray, rows: np.ndarray) -> None:
        """Score ``rows`` of ``windows`` and hand their columns from ``first`` on to the tracker and history."""
        if not len(rows):
            return
        self.probs.score(windows, rows)
        mine = np.full(len(first), windows.probs.shape[1], np.int64)
        mine[rows] = first[rows]
        self.tracker.push(windows.probs, first=mine)
        self._keep(windows.probs, mine)

    def _keep(self, p: np.ndarray, first: np.ndarray) -> None:
        """Append ``p[b, first[b]:]`` to each row's history (all rows at once, a window column at a time)."""
        k = p.shape[1]
        if (self._kept + k).max(initial=0) > self._history.shape[1]:  # grow: double
            grown = np.zeros((self.probs.n_streams, 2 * self._history.shape[1] + k), np.float32)
            grown[:, :self._history.shape[1]] = self._history
            self._history = grown
        for j in range(k):
            rows = np.flatnonzero(first <= j)
            self._history[rows, self._kept[rows]] = p[rows, j]
            self._kept[rows] += 1

    def probabilities(self, b: int, n_frames: int) -> np.ndarray:
        """Stream ``b``'s speech probabilities so far, at most ``n_frames``: ``float32[k]``, one per
        :attr:`SileroProbs.frame` timeline samples, what the scheduler acted on. Causal, so
        :func:`detect` on the stored output agrees within :data:`PROB_TOLERANCE` (the ``vad``
        stage reuses these)."""
        self._settle_for(b)
        return self._history[b, :min(int(self._kept[b]), n_frames)].copy()

    def finish(self) -> None:
        """End of every stream: close open segments (a partial last window is not scored)."""
        self.settle()
        self.tracker.finish()

    def view(self, b: int) -> SpeechView:
        self._settle_for(b)
        return self.tracker.view(b)

    def segments(self, b: int) -> list[tuple[int, int]]:
        self._settle_for(b)
        return self.tracker.segments(b)


def speech_probs(waveforms: list[np.ndarray], sample_rate: int, device: str = "cpu",
                 workers: int = 1) -> list[np.ndarray]:
    """Offline Silero probabilities of whole outputs, many streams per call.

    Each output is resampled to 16 kHz by its own :class:`StreamResampler` (the online
    detector's resampler, so the same samples), then the features of every window of every
    stream are computed together (:meth:`SileroNet.features`) and the LSTM steps through the
    streams in time order, longest first: at step ``k`` only the streams with more than ``k``
    windows are in the batch (rows of different lengths are masked by leaving them out). Each
    window's probability is within :data:`PROB_TOLERANCE` of what :class:`SileroProbs` computes
    from the same output in any chunks and batch (on CPU or CUDA).

    Args:
        waveforms: mono ``float32[n_i]`` outputs on the timeline at ``sample_rate``.
        device: ``"cpu"`` or a CUDA device.
        workers: CPU threads, each computing a share of the streams single-threaded (torch
            releases the GIL); ignored on CUDA.
    Returns:
        per waveform ``float32[k_i]``, ``k_i = complete_frames(n_i)``: window ``k`` covers
        timeline samples ``[k * frame, (k + 1) * frame)`` (:func:`frame_samples`).
    Raises:
        ValueError: a waveform is not one-dimensional, or a Silero window is not a whole
            number of samples at ``sample_rate``.
    """
    waves = [np.asarray(w, dtype=np.float32) for w in waveforms]
    if any(w.ndim != 1 for w in waves):
        raise ValueError(f"waveforms must be mono float32[n], got shapes {[w.shape for w in waves if w.ndim != 1]}")
    frame_samples(sample_rate)
    net = SileroNet(device)
    workers = 1 if net.device.type != "cpu" else max(1, min(workers, len(waves)))
    order = sorted(range(len(waves)), key=lambda i: -len(waves[i]))
    shares = [order[w::workers] for w in range(workers)]  # longest first, dealt round-robin: balanced
    out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(waves)

    def run(share: list[int]) -> None:
        if workers > 1:
            torch.set_num_threads(1)  # this thread's kernels single-threaded (results independent of threads)
        for i, p in zip(share, _group_probs(net, [waves[i] for i in share], sample_rate), strict=True):
            out[i] = p

    if workers == 1:
        run(shares[0])
    else:
        n_threads = torch.get_num_threads()
        try:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(run, shares))
        finally:
            torch.set_num_threads(n_threads)
    return out


def _group_probs(net: SileroNet, waves: list[np.ndarray], sample_rate: int) -> list[np.ndarray]:
    """:func:`speech_probs` of ``waves`` in one batch (host memory: one feature chunk of inputs at a time)."""
    delay = StreamResampler(1, sample_rate, SILERO_RATE).delay
    counts = np.array([max(0, len(w) * SILERO_RATE // sample_rate - delay) // SILERO_WINDOW for w in waves],
                      np.int64)  # = SileroProbs.complete_frames
    if not counts.sum():
        return [np.zeros(0, np.float32) for _ in waves]
    order = np.argsort(-counts, kind="stable")  # longest first: the streams still running are a prefix
    n = counts[order]
    feats = torch.empty((int(n.sum()), 128), device=net.device)
    pending: list[np.ndarray] = []
    done = 0
    for j, i in enumerate(order):
        x16 = StreamResampler(1, sample_rate, SILERO_RATE).push(waves[i][None])
        pending.append(net.windows_with_context(x16[:, delay:delay + n[j] * SILERO_WINDOW],
                                                np.zeros((1, SileroNet.CONTEXT), np.float32))[0])
        if sum(map(len, pending)) >= net.feature_chunk or j == len(order) - 1:
            x = torch.from_numpy(np.concatenate(pending)).to(net.device)
            feats[done:done + len(x)] = net.features(x)
            done += len(x)
            pending = []
    hidden = torch.empty_like(feats)
    starts = torch.from_numpy(np.concatenate([[0], np.cumsum(n)[:-1]])).to(net.device)
    with torch.inference_mode():
        h = torch.zeros((len(waves), 128), device=net.device)
        c = torch.zeros_like(h)
        for k, a in enumerate(np.searchsorted(-n, -np.arange(n[0]), side="left").tolist()):  # a: streams > k windows
            idx = starts[:a] + k
            h[:a], c[:a] = net.step(feats[idx], h[:a], c[:a])
            hidden[idx] = h[:a]
        probs = np.split(net.head(hidden), np.cumsum(n)[:-1])
    out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(waves)
    for j, i in enumerate(order):
        out[i] = probs[j]
    return out


def detect(waveforms: list[np.ndarray], sample_rate: int, settings: VadSettings, device: str = "cpu",
           workers: int = 1) -> list[np.ndarray]:
    """Offline detection over whole outputs: :func:`speech_probs` then the segmenter.

    Args:
        waveforms: mono ``float32[n_i]`` outputs on the timeline at ``sample_rate``.
    Returns:
        per waveform an ``int64[k, 2]`` array of ``[start, end)`` speech segments in timeline
        samples (only the windows of :meth:`SileroProbs.complete_frames`, as online).
    """
    if not waveforms:
        return []
    return segment_probs(speech_probs(waveforms, sample_rate, device, workers), sample_rate, settings.rules)


def segment_probs(probs: list[np.ndarray], sample_rate: int, rules: SegmentRules) -> list[np.ndarray]:
    """:func:`~harness.vad.segments.segments_from_probs` of per-stream probabilities of different
    lengths (``float32[k_i]``, one per Silero window at ``sample_rate``): one kernel call."""
    padded = np.zeros((len(probs), max((len(p) for p in probs), default=0)), np.float32)
    for i, p in enumerate(probs):
        padded[i, : len(p)] = p
    return segments_from_probs(padded, np.array([len(p) for p in probs], np.int64), frame_samples(sample_rate),
                               rules, sample_rate)
