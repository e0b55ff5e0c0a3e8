"""Duplex Cue's conditional continuation (spec section 9; decisions in docs/cue.md): one model
over a queue of cue items, with continuous batching.

For an item with switch point ``switch = item.switch_s(lead_s)`` the stream covers the
recording from ``start`` (about ``max(0, switch - context_s)``, see below) to
``end = switch + window_s``. Each step of one native model frame the runner feeds the row B's
channel (resampled to the model's input rate, as
:func:`harness.runtime.runner.run_conversations` feeds the human input) and, while the step
lies before the switch point, forces the row's output to A's channel (A converted to the
forcing voice where the recording has that third channel; resampled to the model's
output rate) through :meth:`~harness.models.base.DuplexModel.step_forced`; from the switch
point on the row generates freely (``mask`` False) while B's recording keeps playing on its
own timeline. The model's output is resampled to the timeline, quantised to the stored 16-bit
grid and collected from ``start`` to ``end``. A model whose step ``n`` returns the frame it
wrote at step ``n - k`` (``ModelInfo.output_lag_steps = k``; PersonaPlex: 1) has its first
``k`` frames dropped and runs ``k`` steps longer, so the stored window ``[switch, end)`` holds
exactly the frames the model itself wrote for that span (not A's last forced frame).

The switch point on the step grid (:func:`item_span`): the step grid is anchored at the switch
point, so the switch is always a step boundary: forcing stops exactly there (no forced audio
after it, and the model's first free step starts at it). The stream starts a whole number of
steps before it, ``forced = floor(min(context_s, switch) / frame)`` steps, so
``start = switch - forced * frame``: the context is the longest whole number of frames that
fits both ``context_s`` and the recording before the switch, less than one frame (80 ms for
Moshi) short of ``max(0, switch - context_s)`` when that is not a whole number of frames (the
default 120 s is 1500 frames of 80 ms; a context clipped at the recording's start usually is
not). The stored ``start_s`` is this first fed instant.

The machinery is the Duplex-MPE runner's (:class:`~harness.runtime.runner.RowBatch`): the
model thread and its watchdog, :class:`~harness.models.base.RowError` semantics, the output
contract, per-row resampler resets on the refill grid (:func:`~harness.runtime.runner.refill_period`)
and the output resampler's delay trimmed. An item that cannot run (its recording too short
for the window, audio of the wrong shape) is that item's error with its reason; a
:class:`~harness.runtime.runner.ModelFailure` fails the whole call.

Self-tests (models declaring ``reads_schedule`` as well as ``teacher_forcing``) are opened
with a :class:`CueStreamContext` that carries the item and A's recorded channel over the
stream (docs/adding-a-model.md, "Duplex Cue"); other models get neither.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.audio.io import quantize
from harness.audio.resample import StreamResampler
from harness.cue.schema import CueItem
from harness.models.base import READS_SCHEDULE, TEACHER_FORCING, DuplexModel, StreamContext
from harness.runtime.runner import ModelThread, RowBatch, refill_period


@dataclass(frozen=True)
class CueStreamContext(StreamContext):
    """What a model is told when a Duplex Cue stream opens (``scene`` is None: there is no script).

    Attributes:
        item: the cue item; only for self-tests declaring ``reads_schedule`` (else None).
        reference: speaker A's recorded channel over the stream, ``float32[n]`` at the timeline
            rate (24 kHz) from the stream's first sample (``start``) to its end; only for
            ``reads_schedule`` self-tests (``replay`` emits it), else None.
    """

    item: CueItem | None = None
    reference: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass
class ContinuationInput:
    """One item ready to stream.

    Attributes:
        item: the cue item.
        audio: its recording, ``float32[c, n]`` at the timeline rate: row 0 = A (the reference),
            row 1 = B (what the model hears) and, when ``c == 3``, row 2 = A converted to the
            forcing voice (forced instead of row 0; ``Recording.forced_a``).
        seed: the per-item seed (``RunConfig.conversation_seed(item_id)``).
    """

    item: CueItem
    audio: np.ndarray
    seed: int


@dataclass(frozen=True)
class Span:
    """An item's stream on the recording's timeline, in samples at the timeline rate:
    ``start`` (the first fed sample), ``switch``, ``end`` = switch + window, and ``forced``,
    the number of forced steps (``switch - start == forced * frame``)."""

    start: int
    switch: int
    end: int
    forced: int

    @property
    def length(self) -> int:
        return self.end - self.start


def item_span(item: CueItem, sample_rate: int, frame: int, lead_s: float, context_s: float,
              window_s: float) -> Span:
    """:class:`Span` of ``item`` on a step grid anchored at its switch point (module docstring).

    Args:
        sample_rate: the timeline rate in Hz.
        frame: timeline samples per model step.
        lead_s, context_s, window_s: seconds (``cue.switch_lead_s``, ``cue.context_s``, ``cue.window_s``).
    """
    switch = round(item.switch_s(lead_s) * sample_rate)
    forced = min(round(context_s * sample_rate), switch) // frame
    return Span(switch - forced * frame, switch, switch + round(window_s * sample_rate), forced)


@dataclass
class ContinuationResult:
    """Outcome of one item. ``output``: the model's channel ``float32[n]`` on the recording's
    timeline from ``start_s`` to ``end_s`` at the timeline rate (None on error)."""

    item_id: str
    status: str  # "ok" | "error"
    reason: str = ""
    output: np.ndarray | None = None
    start_s: float | None = None
    switch_s: float | None = None
    end_s: float | None = None
    forced_steps: int | None = None
    wall_s: float = 0.0
    step_s: float = 0.0
    usage: dict | None = None

    def record(self, sample_rate: int) -> dict:
        """JSON-able record (without audio): the storage contract's ``json`` (docs/cue.md)."""
        return {"item_id": self.item_id, "status": self.status, "reason": self.reason, "sample_rate": sample_rate,
                "start_s": self.start_s, "switch_s": self.switch_s, "end_s": self.end_s,
                "forced_steps": self.forced_steps,
                "n_samples": None if self.output is None else len(self.output),
                "wall_s": round(self.wall_s, 3), "step_s": round(self.step_s, 3), "usage": self.usage}


@dataclass
class _CueStream:
    """An item occupying a row."""

    index: int  # into the inputs
    inp: ContinuationInput
    span: Span
    times: dict  # start_s, switch_s, end_s, forced_steps of its result
    drop: int  # leading samples of the row's output before this stream started
    opened: float  # time.perf_counter() at open
    t: int = 0  # timeline samples streamed
    step_s: float = 0.0
    outputs: list[np.ndarray] = field(default_factory=list)

    def result(self, status: str = "ok", reason: str = "") -> ContinuationResult:
        return ContinuationResult(self.inp.item.item_id, status, reason, wall_s=time.perf_counter() - self.opened,
                                  step_s=self.step_s, **self.times)


def _window(x: np.ndarray, at: int, n: int) -> np.ndarray:
    """``x[at:at + n]`` zero-padded to ``n`` samples."""
    out = np.zeros(n, np.float32)
    part = x[at:at + n]
    out[:len(part)] = part
    return out


def run_continuations(model: DuplexModel, inputs: Sequence[ContinuationInput], sample_rate: int, *, lead_s: float,
                      context_s: float, window_s: float, rows: int | None = None,
                      step_timeout_s: float | None = None, first_step_timeout_s: float | None = None,
                      thread: ModelThread | None = None) -> list[ContinuationResult]:
    """Stream every item of ``inputs`` through ``model``, ``rows`` at a time (continuous batching).

    Args:
        model: a loaded model declaring ``teacher_forcing``.
        sample_rate: the timeline rate in Hz (the recordings' rate, ``protocol.sample_rate``).
        lead_s, context_s, window_s: ``cue.switch_lead_s``, ``cue.context_s``, ``cue.window_s`` (seconds).
        rows, step_timeout_s, first_step_timeout_s, thread: as
            :func:`~harness.runtime.runner.run_conversations`.

    Returns:
        One :class:`ContinuationResult` per input, in order.

    Raises:
        ValueError: ``model`` does not declare ``teacher_forcing``.
        ModelFailure, ModelStalled: as :func:`~harness.runtime.runner.run_conversations`.
    """
    info = model.info
    if TEACHER_FORCING not in info.capabilities:
        raise ValueError(f"model {info.name} does not declare {TEACHER_FORCING!r}: Duplex Cue cannot force it")
    steps_late = info.output_lag_steps
    if isinstance(steps_late, bool) or not isinstance(steps_late, int) or steps_late < 0:
        raise ValueError(f"model {info.name}: output_lag_steps must be an int >= 0, got {steps_late!r}")
    if not inputs:
        return []
    sr = sample_rate
    rb = RowBatch(model, len(inputs), sr, rows, step_timeout_s, first_step_timeout_s, thread)
    n_rows, frame, slots = rb.n_rows, rb.frame, rb.slots
    reads_schedule = READS_SCHEDULE in info.capabilities

    def fresh_state() -> None:
        nonlocal rs_in, rs_forced, rs_out, skip, clock
        # one stream per row each: B's channel to the input rate, A's to the output rate (forced), the output back
        rs_in, rs_forced = StreamResampler(n_rows, sr, info.input_rate), StreamResampler(n_rows, sr, info.output_rate)
        rs_out = StreamResampler(n_rows, info.output_rate, sr)
        skip, clock = rs_out.delay, 0

    rs_in: StreamResampler
    rs_forced: StreamResampler
    rs_out: StreamResampler
    skip = clock = 0
    fresh_state()
    # a row's output lags its stream by the output resampler's delay and the model's own lag (whole steps):
    # both are dropped from the front and streamed on at the end (B's channel zero-padded past the recording)
    lag = rs_out.delay + steps_late * frame
    period = refill_period(frame, sr, info.output_rate, [
        (sr, rs_in.block_in), (sr, rs_forced.block_in), (info.output_rate, rs_out.block_in)])

    def refill(b: int) -> None:
        """Open the next runnable item of the queue in free row ``b`` (if any)."""
        while rb.queue and slots[b] is None:
            if not rb.call("admit", f"admission to row {b}", model.admit):
                return
            i = rb.queue.pop()
            inp = inputs[i]
            item = inp.item
            span = item_span(item, sr, frame, lead_s, context_s, window_s)
            times = {"start_s": span.start / sr, "switch_s": item.switch_s(lead_s), "end_s": span.end / sr,
                     "forced_steps": span.forced}
            audio = np.asarray(inp.audio)
            why = None
            if audio.ndim != 2 or audio.shape[0] not in (2, 3) or audio.dtype != np.float32:
                why = (f"recording audio must be float32[2, n] (A, B) or float32[3, n] (A, B, A forced), got "
                       f"{audio.dtype}{list(audio.shape)}")
            elif audio.shape[1] < span.end:
                why = (f"the recording ends at {audio.shape[1] / sr:.3f} s, before the continuation window's end "
                       f"({span.end / sr:.3f} s = switch {item.switch_s(lead_s):.3f} s + window {window_s:g} s)")
            if why:
                rb.results[i] = ContinuationResult(item.item_id, "error", f"cannot run: {why}", **times)
                continue
            rs_in.reset([b])
            rs_forced.reset([b])
            rs_out.reset([b])
            slots[b] = _CueStream(i, inp, span, times, drop=lag if clock else lag - rs_out.delay,
                                  opened=time.perf_counter())
            cheat = {"item": item, "reference": audio[0, span.start:span.end].copy()} if reads_schedule else {}
            rb.call("open", f"open of {item.item_id} in row {b}", model.open, b,
                    CueStreamContext(item.item_id, inp.seed, "", None, given_back=rb.preempted.get(i, 0), **cheat))

    try:
        while rb.admit(clock, period, fresh_state, refill):
            for b in rb.live():
                st = slots[b]
                if st.t >= st.span.length + lag:
                    res = st.result()
                    res.output = np.concatenate(st.outputs)[st.drop:st.drop + st.span.length]
                    rb.end(b, res)
            live = rb.live()
            if not live:
                continue
            x = np.zeros((n_rows, frame), np.float32)
            forced = np.zeros((n_rows, frame), np.float32)
            mask = np.zeros(n_rows, bool)
            for b in live:
                st = slots[b]
                at = st.span.start + st.t
                x[b] = _window(st.inp.audio[1], at, frame)  # B's recording plays on its own timeline
                if st.t // frame < st.span.forced:
                    mask[b] = True
                    forced[b] = _window(st.inp.audio[2 if len(st.inp.audio) == 3 else 0], at, frame)
            where = f"step {clock // frame} at {clock / sr:.2f} s of the run"
            t0 = time.perf_counter()
            y = rb.call("step_forced", where, model.step_forced, rs_in.push(x), rs_forced.push(forced), mask,
                        output=True)
            dt = time.perf_counter() - t0
            y = quantize(rs_out.push(rb.output(y, where)))
            y, skip = y[:, skip:], max(0, skip - y.shape[1])  # aligned: drop the output resampler's delay
            for b in rb.live():
                st = slots[b]
                st.outputs.append(y[b])
                st.t += frame
                st.step_s += dt
            clock += frame
    finally:
        rb.close()
    return rb.results
