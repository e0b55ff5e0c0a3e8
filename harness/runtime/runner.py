"""Runs one model over a queue of conversations with continuous batching (the ``infer`` stage's core).

The model steps ``R`` rows together (``R <= max_batch``); each row holds one conversation at
a time. For each step of one native model frame the runner: lets every row's
:class:`~harness.protocol.scheduler.Scheduler` decide (from the online detector's view of
that conversation's output so far), renders the human input from the placements, resamples
it to the model's input rate, steps the model for all rows at once, checks and resamples
the output to the timeline rate, quantises it to the stored 16-bit grid and feeds it to the
batched online detector. When a conversation ends its row is closed and refilled with the
next conversation of the queue (:meth:`~harness.models.base.DuplexModel.open`), so the model
stays full until the queue drains. Inputs are read from the queue only when a row frees up, and
:func:`stream_conversations` hands each result over as its conversation ends, so the runner's
memory is bounded by its rows, not by its queue (issue 24, item 7). Under the whole input
(preamble, turns, gaps and waits) runs the conversation's :class:`~harness.audio.room_tone.RoomTone`.

Row independence: a conversation's output does not depend on its row, its neighbours or when
it was opened. Every per-row state the runner holds (input and output resamplers, the online
detector, room tone, echo) restarts exactly when a row is refilled; the resamplers and Silero
windows restart bit-exactly only on their block grids, so refills happen at multiples of
:func:`refill_period` (one or two steps for 80 ms models); when every row is free the whole
state simply starts afresh. The harness paces only models with the ``realtime`` capability (hosted
services, which hear the stream in real time): step ``k`` of a fresh state starts no earlier than
``k`` frames after step 0 started, nor ``k - 1`` frames after step 0 was done (so that step's
warm-up, the model's or the runner's own, never makes the next steps go in a burst to catch up). It records each
conversation's wall time and model-step time (its per-stream real-time factor) and, when paced, how far
its stream fell behind real time (:class:`Pacing`: a slow step or a stalled service delays every
later frame until the stream catches up in a burst, so the service heard it late).

Off the step's critical path (``overlap``, a GPU model; issue 24, item 5): only the rows whose loop
body does something at the next step (a decision pending past T's end, or a stream's end) need
the detector's view of this step's output and a fresh render of the next input before the next
step (a row refilled meanwhile is rendered then anyway). The detector scores those rows at once
and the others in a batch of their own (:meth:`~harness.vad.silero.StreamingDetector.push`'s
``due``), and with ``overlap`` that second batch, and the next input of the rows no body will
visit, are computed while the model steps (the step runs on the :class:`ModelThread`). The rows
are divided alike with or without ``overlap``, so nothing the runner computes depends on it; only
when it is computed does.

Failures (docs/adding-a-model.md):

* deterministic faults of single conversations are that conversation's error, returned with
  ``status="error"`` and its reason, never as silence: an unschedulable scene, a
  :class:`~harness.models.base.RowError` the adapter raises for its rows, a row of output
  with NaN/Inf or a sample outside [-1, 1]; output of the wrong dtype or shape fails every
  row of the batch (:func:`check_output`). A row that had already finished stays ``ok``.
* rows the model gives up for want of memory (:class:`~harness.models.base.RowPreempted`, not a
  fault of their streams) are closed, their partial output discarded, and their conversations
  run again from their start later in the same run (:attr:`RowBatch.MAX_REQUEUES` times at most,
  then that conversation's error).
* any other exception from a model call may be transient (CUDA out of memory, a broken
  remote stream): :func:`stream_conversations` raises :class:`ModelFailure`, nothing of the batch is
  returned, and the shard's attempt fails and is retried by the executor.
* a model call that does not return within the watchdog's timeout raises
  :class:`ModelStalled` (a :class:`ModelFailure`); the stuck thread cannot be stopped, so the
  actor must be discarded.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.audio.assemble import TrackRows, add_rows
from harness.audio.io import PCM_SCALE, quantize_rows
from harness.audio.resample import StreamResampler, row_ranges
from harness.audio.room_tone import RoomTone, RoomToneRows
from harness.models.base import (
    READS_SCHEDULE,
    REALTIME,
    VOCABULARY,
    DuplexModel,
    ModelInfo,
    RowError,
    RowPreempted,
    StreamContext,
    gives_duty_text,
)
from harness.products.infer import InferRecord
from harness.protocol.scheduler import Event, Placement, ProtocolSettings, Scheduler
from harness.scenes.schema import Scene
from harness.scoring.flow import scene_vocabulary
from harness.vad.settings import VadSettings
from harness.vad.silero import StreamingDetector, row_pool


@dataclass
class ConversationInput:
    """One conversation ready to stream: clips are ``float32[n]`` at the timeline rate;
    ``duty_text`` is the preamble's text (the duty instruction), part of the room's vocabulary and
    given to a model as text only as :func:`stream_context` decides."""

    scene: Scene
    turn_clips: list[np.ndarray]
    preamble: np.ndarray
    seed: int
    duty_text: str = ""


class InputUnavailable(Exception):
    """A conversation's input cannot be read (its clips missing or undecodable): raised by the
    input sequence's ``__getitem__`` when the runner admits it; that conversation ends ``error``
    with ``reason`` and the run goes on.

    Attributes:
        scene_id: the conversation's id.
        reason: why, e.g. ``"cannot load input: AudioError: ..."``.
    """

    def __init__(self, scene_id: str, reason: str):
        super().__init__(f"{scene_id}: {reason}")
        self.scene_id, self.reason = scene_id, reason


@dataclass
class RunStats:
    """What one :func:`stream_conversations` call did with its rows.

    Attributes:
        rows: rows stepped together (``R``).
        steps: model steps (each of one native frame for all ``R`` rows).
        idle_row_steps: row-steps without a stream (free rows stepped while the queue drained or a
            row waited for the refill grid): ``idle_row_steps / row_steps`` is the share of the
            model's work thrown away.
        due_row_steps: row-steps whose detector scores were due before the next step (a decision
            pending past T's end, or an end): the rows the detector scores on the step's critical
            path; the others it may score while the model steps (``overlap``).
        requeued: streams the model gave up (:class:`~harness.models.base.RowPreempted`) that were put
            back in the queue to run again from their start. The row-steps they had streamed count as
            busy (not in ``idle_row_steps``) though their output was discarded.
        model_s: seconds inside the model's step calls; ``wall_s - model_s`` is the runner's own
            time (scheduler, resampling, detector, hand-over of results) where it does not run
            beside the model's steps (``overlap``).
        wall_s: seconds of the whole call.
    """

    rows: int = 0
    steps: int = 0
    idle_row_steps: int = 0
    due_row_steps: int = 0
    requeued: int = 0
    model_s: float = 0.0
    wall_s: float = 0.0

    @property
    def row_steps(self) -> int:
        return self.rows * self.steps

    def to_dict(self) -> dict[str, float]:
        return {"rows": self.rows, "steps": self.steps, "row_steps": self.row_steps,
                "idle_row_steps": self.idle_row_steps, "due_row_steps": self.due_row_steps,
                "requeued": self.requeued, "model_s": round(self.model_s, 3),
                "wall_s": round(self.wall_s, 3)}


# a paced frame sent this late (seconds) or more counts as behind real time (one 80 ms frame: jitter of
# the sleep and the event loop stays under it)
BEHIND_TOLERANCE_S = 0.08


@dataclass
class Pacing:
    """How a paced stream (a ``realtime`` model's) kept to real time; seconds of wall clock.

    Attributes:
        max_lag_s: the most any of its frames was sent after its due time (0 when always on time).
        behind_s: seconds of its stream (frames x frame duration) sent :data:`BEHIND_TOLERANCE_S` or
            more late: how long it was behind.
    """

    max_lag_s: float = 0.0
    behind_s: float = 0.0

    def frame(self, lag_s: float, frame_s: float) -> None:
        """One frame of ``frame_s`` seconds sent ``lag_s`` seconds after its due time."""
        self.max_lag_s = max(self.max_lag_s, lag_s)
        if lag_s >= BEHIND_TOLERANCE_S:
            self.behind_s += frame_s

    def to_dict(self) -> dict[str, float]:
        return {"max_lag_s": round(self.max_lag_s, 3), "behind_s": round(self.behind_s, 3)}


@dataclass
class ConversationResult:
    """Outcome of one conversation. ``output`` is the model's audio on the timeline (None on error)."""

    scene_id: str
    status: str  # "ok" | "error"
    reason: str = ""
    output: np.ndarray | None = None
    speech_probs: np.ndarray | None = None  # float32[k]: online Silero probabilities (complete_frames)
    placements: list[Placement] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    wall_s: float = 0.0  # seconds from open to the stream's end (the per-stream real-time factor's denominator)
    step_s: float = 0.0  # of which inside the model's step calls (shared with the other rows of each step)
    usage: dict | None = None  # the model's raw usage of this stream (DuplexModel.usage), e.g. API tokens
    pacing: Pacing | None = None  # a paced stream's lag behind real time (None: not paced)

    def record(self, sample_rate: int) -> dict:
        """JSON-able record (without audio) for the store: an :class:`~harness.products.infer.InferRecord`."""
        return InferRecord(
            self.scene_id, self.status, self.reason, sample_rate,
            None if self.output is None else len(self.output),
            # max |sample| of the stored output (linear, full scale 1.0): reduce flags a model whose
            # peak stays below metrics.suspect_peak_dbfs everywhere (a broken output path)
            None if self.output is None else float(np.max(np.abs(self.output), initial=0.0)),
            tuple(self.placements), tuple(self.events), self.wall_s, self.step_s, self.usage,
            None if self.pacing is None else self.pacing.to_dict()).to_dict()


def stream_context(conv: ConversationInput, info: ModelInfo, duty_as_text: bool, given_back: int = 0) -> StreamContext:
    """What a model opening ``conv`` is told: the duty text only when ``duty_as_text``
    (``protocol.duty_as_text``) and it declares ``text_prompt`` (:func:`gives_duty_text`), the
    script (answer key included) only when it declares ``reads_schedule``, the room's vocabulary
    (the preamble's text included: it is said in the room) only when it declares ``vocabulary``
    (issue 20: no other model can see the answer key); ``given_back``: the times its stream was given
    back before (:class:`~harness.models.base.RowPreempted`)."""
    caps = info.capabilities
    return StreamContext(conv.scene.scene_id, conv.seed, conv.duty_text if gives_duty_text(caps, duty_as_text) else "",
                         scene=conv.scene if READS_SCHEDULE in caps else None,
                         vocabulary=tuple(scene_vocabulary(conv.scene, conv.duty_text)) if VOCABULARY in caps else (),
                         given_back=given_back)


class ModelFailure(RuntimeError):
    """A model call failed in a way that may not recur (not a :class:`RowError`): the attempt fails.

    The message names the model, the call, the stream time in seconds and the original
    exception (also chained as ``__cause__``).
    """


class ModelStalled(ModelFailure):
    """A model call did not return within the watchdog's timeout (``infer.step_timeout_s``)."""


def model_failure(thread: ModelThread, model: str, where: str, e: Exception, setting: str) -> ModelFailure:
    """What a model call on ``thread`` that raised ``e`` fails the attempt with, to ``raise`` as it is:
    :class:`ModelStalled` when the call timed out (``thread`` is then unusable; ``setting`` names the
    timeout's setting; no cause, as ``from None``), else :class:`ModelFailure` naming ``where`` and the
    exception, chained to it (as ``from e``)."""
    if isinstance(e, TimeoutError) and thread.stuck is not None:
        failure: ModelFailure = ModelStalled(f"model {model}: {e} ({setting}); the actor must be discarded")
        failure.__cause__ = None
    else:
        failure = ModelFailure(f"model {model}: {where} raised {type(e).__name__}: {e}")
        failure.__cause__ = e
    failure.__suppress_context__ = True
    return failure


class OutputContractError(ValueError):
    """A model's step output is not a floating-point ``[B, frame_out]`` array (fails every row)."""


ADMIT_POLL_S = 0.05  # while a model admits no stream and none is open, ask again this often
PEAK_TOLERANCE = 1.0 / PCM_SCALE  # a sample may exceed full scale by less than one 16-bit step


def check_output(y: Any, model: str, shape: tuple[int, int]) -> tuple[np.ndarray, dict[int, str]]:
    """Check one step's output against the adapter contract (docs/adding-a-model.md).

    Args:
        y: what ``step`` returned; must be a floating-point array of exactly ``shape``
            (``(B, frame_out)``) with every sample finite and within [-1, 1] (up to
            :data:`PEAK_TOLERANCE`).
        model: the model's name, for the messages.

    Returns:
        ``(float32[B, frame_out], {row: reason})``: rows with NaN/Inf or a sample out of range
        are zeroed in the array and named with the reason (e.g. ``"model m returned samples
        outside [-1, 1]: peak 3276"``).

    Raises:
        OutputContractError: not an array, not floating point (e.g. int16 counts), or the
            wrong shape; these are the adapter's faults, the same for every row.
    """
    try:
        a = np.asarray(y)
    except (TypeError, ValueError, RuntimeError) as e:  # e.g. a CUDA tensor
        raise OutputContractError(f"model {model} returned a {type(y).__name__}, not an array: {e}") from None
    if not np.issubdtype(a.dtype, np.floating):
        raise OutputContractError(f"model {model} returned {a.dtype} samples; expected float32 in [-1, 1]")
    if a.shape != shape:
        raise OutputContractError(f"model {model} returned shape {a.shape}; expected {shape} ([B, frame_out])")
    bad: dict[int, str] = {}
    peaks = np.abs(a).max(axis=1, initial=0.0)  # NaN where a row has one: one pass for the usual all-good case
    for b in map(int, np.flatnonzero(~(peaks <= 1.0 + PEAK_TOLERANCE))):
        if not np.isfinite(a[b]).all():
            bad[b] = f"model {model} returned NaN/Inf samples"
        else:
            bad[b] = f"model {model} returned samples outside [-1, 1]: peak {peaks[b]:.6g}"
    if bad:
        a = np.where(np.isin(np.arange(shape[0]), list(bad))[:, None], 0.0, a)
    return a.astype(np.float32, copy=False), bad


@dataclass
class PendingCall:
    """A call submitted to a :class:`ModelThread` (:meth:`ModelThread.submit`)."""

    what: str  # which call, for messages
    future: Future
    submitted: float  # time.perf_counter() at submission
    ran_s: float = 0.0  # seconds the call itself ran on the thread (set once it returned or raised)


@dataclass
class BatchCall:
    """A call :class:`RowBatch` submitted: the thread's :class:`PendingCall` and how the watchdog and a
    RowError treat it."""

    pending: PendingCall
    first: bool  # the run's first step or an open (the longer allowance)
    is_step: bool  # a step (a RowError names its rows by their streams' steps)


class ModelThread:
    """One long-lived daemon thread on which every call into a model runs (the step watchdog).

    The caller waits for each call at most ``timeout_s``. A call that does not return is
    abandoned (a thread cannot be killed): :attr:`stuck` names it and every later call raises
    at once, so whoever holds the thread must be discarded (the executor never reuses the
    actor of a failed attempt). Being a daemon, a stuck thread does not keep the process
    alive. Per-thread state a model sets up in ``load`` (torch's current CUDA device or grad
    mode) holds for its later calls when ``load`` runs here too (:class:`InferWorker` does).
    """

    def __init__(self, name: str):
        self.stuck: str | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=f"model-{name}", daemon=True)
        self._thread.start()

    def doing(self) -> str:
        """Where the thread is now: its innermost frames, ``function (file:line)``, innermost last,
        for the message of a call that did not return (what a stuck ``load`` was waiting on)."""
        frame = sys._current_frames().get(self._thread.ident or -1)
        if frame is None:
            return "not running"
        stack = traceback.extract_stack(frame)[-3:]
        return " <- ".join(f"{f.name} ({os.path.basename(f.filename)}:{f.lineno})" for f in reversed(stack))

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            call, fn, args = job
            t0 = time.perf_counter()
            try:
                result = fn(*args)
            except BaseException as e:  # delivered to the caller, whatever it is
                call.ran_s = time.perf_counter() - t0
                call.future.set_exception(e)
            else:
                call.ran_s = time.perf_counter() - t0
                call.future.set_result(result)

    def call(self, what: str, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        """``fn(*args)`` on the thread; returns its result or raises its exception
        (:meth:`submit`, then :meth:`wait`).

        Raises:
            TimeoutError: it did not return within ``timeout_s`` seconds (``what`` is then
                :attr:`stuck`), or an earlier call is stuck.
        """
        return self.wait(self.submit(what, fn, *args), timeout_s)

    def submit(self, what: str, fn: Callable[..., Any], *args: Any) -> PendingCall:
        """Start ``fn(*args)`` on the thread and return at once; :meth:`wait` for it (which raises
        TimeoutError at once when an earlier call is stuck: this one never starts)."""
        call = PendingCall(what, Future(), time.perf_counter())
        if self.stuck is not None:
            stuck = TimeoutError(f"{what} not started: an earlier call ({self.stuck}) never returned")
            call.future.set_exception(stuck)
        else:
            self._jobs.put((call, fn, args))
        return call

    def wait(self, call: PendingCall, timeout_s: float | None = None) -> Any:
        """The result of a :meth:`submit`: returns it or raises its exception. ``timeout_s`` counts
        from the submission.

        Raises:
            TimeoutError: it did not return within ``timeout_s`` seconds of its submission (its
                ``what`` is then :attr:`stuck`).
        """
        fut, what = call.future, call.what
        try:
            left = None if timeout_s is None else max(0.0, call.submitted + timeout_s - time.perf_counter())
            return fut.result(left)
        except TimeoutError:
            if fut.done():  # the call itself raised TimeoutError
                raise
            self.stuck = what
            raise TimeoutError(f"{what} did not return within {timeout_s:g} s") from None

    def close(self) -> None:
        """Let the thread end after its current call (a stuck one never ends)."""
        self._jobs.put(None)


def _frame_on_timeline(model: DuplexModel, sample_rate: int) -> int:
    info = model.info
    n = info.frame_in * sample_rate / info.input_rate
    if n != int(n) or info.frame_out * info.input_rate != info.frame_in * info.output_rate:
        raise ValueError(f"model {info.name}: frame_in/frame_out do not span one whole number of timeline samples")
    return int(n)


def refill_period(frame: int, sample_rate: int, output_rate: int, blocks: Sequence[tuple[int, int]]) -> int:
    """Timeline samples between the steps at which a row may be refilled (a multiple of ``frame``).

    Args:
        frame: timeline samples per model step.
        blocks: ``(rate, block)`` pairs: a stream state fed at ``rate`` Hz that restarts
            exactly only after a whole number of ``block`` samples at that rate (the resamplers'
            blocks, the detector's windows).
    """
    j = 1
    while not all((frame * j * rate) % (sample_rate * block) == 0 for rate, block in blocks):
        j += 1
    return frame * j


class RowBatch:
    """The rows of one model stepped together: what every streaming protocol's runner shares
    (:func:`run_conversations` here, Duplex Cue's :func:`harness.cue.continuation.run_continuations`).

    It holds the work queue (item indices, taken in order), the rows' streams (``slots``: any
    object with ``index`` (into the items), ``t`` (timeline samples streamed) and
    ``result(status, reason)``), the results, and the model's :class:`ModelThread`. Every call
    into the model goes through :meth:`call`, which applies the failure semantics of the module
    docstring: a :class:`~harness.models.base.RowError` fails the rows it names, a
    :class:`~harness.models.base.RowPreempted` puts their items back in the queue (:meth:`requeue`),
    a stall raises :class:`ModelStalled`, any other exception :class:`ModelFailure`. A runner drives
    the loop (refills, inputs, steps: an item taken from the queue again is read and opened like a
    fresh one); :meth:`output` checks each step's output (:func:`check_output`).

    Args:
        n_items: length of the queue.
        rows, step_timeout_s, first_step_timeout_s, thread: as :func:`run_conversations`.
        sample_rate: the timeline's rate in Hz.
        on_result: called as ``on_result(index, result)`` with each item's result as it is
            decided (:meth:`deliver`), which then is not kept; None: kept in :attr:`results`.

    Attributes:
        requeued: streams given up by the model and put back in the queue so far (:meth:`requeue`).
        preempted: item index -> times the model gave its stream up (items given up at least once).

    Raises:
        ValueError: no row (``max_batch`` or ``rows`` < 1), or frames that do not span a whole
            number of timeline samples.
    """

    # the most times one item may be given up by the model (RowPreempted) and run again from its start; the next
    # time it is that item's error (a pool too small for it alone would otherwise requeue it forever)
    MAX_REQUEUES = 3

    def __init__(self, model: DuplexModel, n_items: int, sample_rate: int, rows: int | None = None,
                 step_timeout_s: float | None = None, first_step_timeout_s: float | None = None,
                 thread: ModelThread | None = None, on_result: Callable[[int, Any], None] | None = None):
        self.model, self.info, self.sr = model, model.info, sample_rate
        self.on_result = on_result
        self.n_rows = min(rows or self.info.max_batch, self.info.max_batch, n_items)
        if self.n_rows < 1:
            raise ValueError(f"model {self.info.name}: max_batch {self.info.max_batch} and rows {rows} leave no row")
        self.frame = _frame_on_timeline(model, sample_rate)
        self.step_timeout_s, self.first_step_timeout_s = step_timeout_s, first_step_timeout_s
        self.own_thread = thread is None
        self.thread = thread or ModelThread(self.info.name)
        self.results: list[Any] = [None] * n_items
        self.queue = list(range(n_items))[::-1]  # pop() takes the next item; insert(0, i) puts i at the back
        self.preempted: dict[int, int] = {}
        self.requeued = 0
        self.slots: list[Any] = [None] * self.n_rows
        self.stepped = False

    def admit(self, clock: int, period: int, fresh_state: Callable[[], None], refill: Callable[[int], None]) -> bool:
        """The head of a runner's step loop at stream sample ``clock``: False when every row is free
        and the queue is empty (the run is over); when every row is free mid-run, ``fresh_state()``
        first (the whole per-row state simply restarts); at multiples of ``period`` samples (the
        grid where per-row resets are exact, :func:`refill_period`), ``refill(b)`` for each free row."""
        if not any(self.slots):
            if not self.queue:
                return False
            if clock:
                fresh_state()
        if clock % period == 0:
            for b in range(self.n_rows):
                if self.slots[b] is None:
                    refill(b)
        return True

    def live(self) -> list[int]:
        """The rows holding a stream."""
        return [b for b in range(self.n_rows) if self.slots[b] is not None]

    def at(self, b: int) -> str:
        """Where row ``b``'s stream is, for messages."""
        st = self.slots[b]
        return f"step {st.t // self.frame} at {st.t / self.sr:.2f} s of stream" if st is not None else f"row {b}"

    def call(self, what: str, where: str, fn: Callable[..., Any], *args: Any, output: bool = False) -> Any:
        """One model call on the model thread; a RowError fails its rows and returns its ``output``.
        ``what`` is the method (``step`` and ``step_forced`` are steps), ``where`` says which call
        it is, for messages. :meth:`submit`, then :meth:`wait`."""
        return self.wait(self.submit(what, where, fn, *args), output=output)

    def submit(self, what: str, where: str, fn: Callable[..., Any], *args: Any) -> BatchCall:
        """Start a model call (as :meth:`call`) and return at once; :meth:`wait` for it before the next."""
        is_step = what in ("step", "step_forced")
        first = what == "open" or (is_step and not self.stepped)
        self.stepped = self.stepped or is_step
        return BatchCall(self.thread.submit(where, fn, *args), first, is_step)

    def _allowance(self, call: BatchCall) -> float | None:
        """The watchdog's seconds for ``call``: the run's first step and opens have their own."""
        return (self.first_step_timeout_s or self.step_timeout_s) if call.first else self.step_timeout_s

    def wait(self, call: BatchCall, output: bool = False) -> Any:
        """The result of a :meth:`submit` under the watchdog and failure semantics of :meth:`call`."""
        info, n_rows, where, is_step = self.info, self.n_rows, call.pending.what, call.is_step
        setting = "infer.first_step_timeout_s" if call.first and self.first_step_timeout_s else "infer.step_timeout_s"
        try:
            return self.thread.wait(call.pending, self._allowance(call))
        except RowError as e:
            outside = sorted(set(e.reasons) - set(range(n_rows)))
            if outside:
                self.fail(range(n_rows), f"model {info.name} {where} blamed rows {outside} of {n_rows}")
                return None
            give_up = self.requeue if isinstance(e, RowPreempted) else self.fail
            for b, why in e.reasons.items():
                give_up([b], f"model {info.name} {self.at(b) if is_step else where}: {why}")
            if output and e.output is None and any(self.slots):
                kind = type(e).__name__
                self.fail(range(n_rows), f"model {info.name} {where} raised {kind} for rows {sorted(e.reasons)} "
                                         f"without the output of the other rows ({kind}.output)")
            return e.output
        except Exception as e:
            raise model_failure(self.thread, info.name, where, e, setting)  # noqa: B904 - chained by model_failure

    def abandon(self, call: BatchCall) -> None:
        """Wait out a submitted call whose outcome is no longer wanted (the runner failed while it ran),
        under its own allowance, ignoring how it ends: what follows (closing the rows) must not queue
        behind it on a shorter allowance and mark a healthy thread stuck."""
        with contextlib.suppress(Exception):
            self.thread.wait(call.pending, self._allowance(call))

    def deliver(self, index: int, result: Any) -> None:
        """Item ``index``'s final result: to ``on_result``, else into :attr:`results`."""
        if self.on_result is None:
            self.results[index] = result
        else:
            self.on_result(index, result)

    def end(self, b: int, result: Any | None) -> None:
        """Close row ``b`` and deliver its stream's result (its ``usage`` set from the model); None: the
        stream is discarded (:meth:`requeue`), nothing is delivered and its usage is not asked (the
        record of a rerun stream meters the rerun alone)."""
        st = self.slots[b]
        self.slots[b] = None
        if result is not None:
            result.usage = self.call("usage", f"usage of row {b}", self.model.usage, b)
        self.call("close", f"close of row {b}", self.model.close, b)
        if result is not None:
            self.deliver(st.index, result)

    def fail(self, rows: Any, reason: str) -> None:
        """End the streams of ``rows`` (those holding one) as errors with ``reason``."""
        for b in rows:
            if self.slots[b] is not None:
                self.end(b, self.slots[b].result("error", reason))

    def requeue(self, rows: Any, reason: str) -> None:
        """The model gave up the streams of ``rows`` (those holding one; ``reason`` says why): each is
        closed and discarded (:meth:`end` without a result: a partial output is never delivered) and
        its item put at the back of the queue, to run again from its start; an item given up more
        than :attr:`MAX_REQUEUES` times fails instead, naming the preemptions and ``reason``."""
        for b in rows:
            st = self.slots[b]
            if st is None:
                continue
            n = self.preempted[st.index] = self.preempted.get(st.index, 0) + 1
            if n > self.MAX_REQUEUES:
                self.fail([b], f"preempted {n} times (run again at most {self.MAX_REQUEUES} times), "
                               f"the last: {reason}")
            else:
                self.end(b, None)
                self.queue.insert(0, st.index)
                self.requeued += 1

    def output(self, y: Any, where: str) -> np.ndarray:
        """A step's output (``None``: every running row was blamed) checked with :func:`check_output`:
        ``float32[R, frame_out]``; an output contract error fails every row, a bad row fails that
        row, and failed rows read as silence."""
        if y is None:
            return np.zeros((self.n_rows, self.info.frame_out), np.float32)
        try:
            y, bad = check_output(y, self.info.name, (self.n_rows, self.info.frame_out))
        except OutputContractError as e:
            self.fail(range(self.n_rows), f"{e} ({where})")
            return np.zeros((self.n_rows, self.info.frame_out), np.float32)
        for b, why in bad.items():
            self.fail([b], f"{why} ({self.at(b)})")
        return y

    def close(self) -> None:
        """Close the rows still open (unless the thread is stuck) and a thread of our own."""
        if self.thread.stuck is None:
            for b in self.live():
                with contextlib.suppress(Exception):
                    self.thread.call(f"close of row {b}", self.model.close, b, timeout_s=self.step_timeout_s)
        if self.own_thread:
            self.thread.close()


@dataclass
class _RunClock:
    """What every row of a run shares: timeline samples stepped since the state was fresh, and
    seconds inside the model's step calls (a stream's own clock and step time are differences)."""

    samples: int = 0
    model_s: float = 0.0


RENDER_POOL_ROWS = 32  # with fewer live rows the input is rendered on the runner's thread alone (hand-over costs more)
STAGE_SAMPLES = 1 << 17  # output samples per row staged before they are handed to the streams (5.5 s at 24 kHz)


@dataclass
class _Stream:
    """A conversation occupying a row: its schedule, input track and output so far."""

    index: int  # into the run's conversations
    conv: ConversationInput
    sched: Scheduler
    drop: int  # leading samples of the row's output before this stream started
    opened: float  # time.perf_counter() at open
    run: _RunClock  # the run's clock, shared by the rows
    seen: int = 0  # placements already on the row's track
    outputs: list[np.ndarray] = field(default_factory=list)  # int16 blocks: the output is on the 16-bit grid
    staged_from: int = 0  # where this stream's output not yet in `outputs` starts in the run's stage
    pacing: Pacing | None = None  # paced streams only
    t0: int = field(init=False)  # the run's clock and model seconds at open
    m0: float = field(init=False)

    def __post_init__(self) -> None:
        self.t0, self.m0 = self.run.samples, self.run.model_s

    @property
    def t(self) -> int:
        """Timeline samples streamed (the stream's own clock): every row steps together."""
        return self.run.samples - self.t0

    @property
    def step_s(self) -> float:
        """Seconds inside the model's step calls since the stream opened."""
        return self.run.model_s - self.m0

    def result(self, status: str = "ok", reason: str = "") -> ConversationResult:
        return ConversationResult(self.conv.scene.scene_id, status, reason, placements=list(self.sched.placements),
                                  events=list(self.sched.events), wall_s=time.perf_counter() - self.opened,
                                  step_s=self.step_s, pacing=self.pacing)


@dataclass
class _Ahead:
    """The next step's input rendered while the model steps (``overlap``): clips and room tone of the rows
    the next step's loop body will not visit, which nothing can change before then."""

    x: np.ndarray  # float32[R, frame]: those rows rendered, zeros elsewhere
    streams: dict[int, Any]  # row -> the stream it was rendered for (a row failed or refilled since is redone)


def run_conversations(model: DuplexModel, convs: Sequence[ConversationInput], protocol: ProtocolSettings,
                      vad: VadSettings, max_duration_s: float = 3600.0, *, rows: int | None = None,
                      step_timeout_s: float | None = None, first_step_timeout_s: float | None = None,
                      thread: ModelThread | None = None, overlap: bool = False) -> list[ConversationResult]:
    """:func:`stream_conversations` collecting the results: one :class:`ConversationResult` per
    input, in order (every output held until the end: for a queue that fits in memory, e.g. tests
    and benchmarks; the ``infer`` stage streams them out). Arguments and errors as there."""
    results: list[ConversationResult] = [None] * len(convs)  # type: ignore[list-item]

    def keep(i: int, r: ConversationResult) -> None:
        results[i] = r

    stream_conversations(model, convs, protocol, vad, max_duration_s, keep, rows=rows, step_timeout_s=step_timeout_s,
                         first_step_timeout_s=first_step_timeout_s, thread=thread, overlap=overlap)
    return results


def stream_conversations(model: DuplexModel, convs: Sequence[ConversationInput], protocol: ProtocolSettings,
                         vad: VadSettings, max_duration_s: float, on_result: Callable[[int, ConversationResult], None],
                         *, rows: int | None = None, step_timeout_s: float | None = None,
                         first_step_timeout_s: float | None = None, thread: ModelThread | None = None,
                         overlap: bool = False) -> RunStats:
    """Stream every conversation of ``convs`` through ``model``, ``rows`` at a time (continuous batching),
    in the order of ``convs``, handing each result to ``on_result(index, result)`` as its conversation ends.

    Args:
        convs: the queue; ``convs[i]`` is read when a row frees up for it (a lazy sequence loads its
            inputs then), once, or again each time the model gives its stream up
            (:class:`~harness.models.base.RowPreempted`: it reruns from its start), and may raise
            :class:`InputUnavailable` (that conversation's error).
        on_result: called on this thread with each result as soon as it is decided (in the order the
            conversations end); the runner keeps nothing of it, so its memory is bounded by its rows.
        rows: rows stepped together, ``R = min(rows, info.max_batch, len(convs))`` (default
            ``info.max_batch``).
        max_duration_s: a stream longer than this (seconds) is that conversation's error.
        step_timeout_s: the watchdog: the longest a model call (``step``, ``observe``,
            ``close``) may take, in seconds; ``None`` waits forever.
        first_step_timeout_s: the same for ``open`` and the run's first step, which may
            include warm-up or compilation (``None``: ``step_timeout_s``).
        thread: the model's :class:`ModelThread` (the one it was loaded on); default: a new
            one for this run.
        overlap: while the model steps, score the online detector's rows that no decision waits on
            (most of them: only rows with a decision pending past T's end, or ending, need their
            view before the next step) and render the next input of the rows the next step's loop
            body will not visit, instead of doing both before the step. For a model that steps on a
            GPU (the ``infer`` stage sets it then): a CPU model's step computes on the same cores,
            so there is little to hide (not measured). Nothing computed depends on it, only when
            (the rows are divided between the detector's batches alike; docs/models.md, "Off the
            critical path").

    Returns:
        :class:`RunStats`: steps, idle row-steps, requeued streams, model and wall seconds.

    Raises:
        ModelFailure: a model call raised something other than :class:`RowError` (the
            attempt fails; results already handed over belong to it and must be discarded).
        ModelStalled: a model call did not return in time; ``thread`` is then unusable.
    """
    stats = RunStats()
    if not convs:
        return stats
    t_run = time.perf_counter()
    sr = protocol.sample_rate
    info = model.info
    rb = RowBatch(model, len(convs), sr, rows, step_timeout_s, first_step_timeout_s, thread, on_result)
    n_rows, frame, slots, queue_ = rb.n_rows, rb.frame, rb.slots, rb.queue
    stats.rows = n_rows
    call = rb.call
    reads_schedule = READS_SCHEDULE in info.capabilities
    limit = round(max_duration_s * sr)

    def fresh_state() -> None:
        nonlocal det, rs_in, rs_out, skip, prev_out, clock, t_fresh, ahead
        run.samples = 0
        det = StreamingDetector(n_rows, sr, vad)
        # streaming resamplers, one stream per row (docs/protocol-decisions.md, "Time and audio"): the output
        # side's fixed delay (lag) is trimmed, so the stored output is resample(model output) on the timeline; a
        # stream runs until lag samples past its end have been output
        rs_in, rs_out = StreamResampler(n_rows, sr, info.input_rate), StreamResampler(n_rows, info.output_rate, sr)
        skip, prev_out, clock, ahead = rs_out.delay, np.zeros((n_rows, frame), np.float32), 0, None
        t_fresh = time.perf_counter()

    det: StreamingDetector
    rs_in: StreamResampler
    rs_out: StreamResampler
    skip = clock = 0  # clock: timeline samples stepped since the state was fresh
    t_fresh = 0.0  # perf_counter() when it was (a realtime model's step k waits for t_fresh + k frames)
    paced = REALTIME in info.capabilities
    prev_out = np.zeros((n_rows, frame), np.float32)
    tones = RoomToneRows(n_rows, frame)
    tracks = TrackRows(n_rows)  # each row's input clips, placed by its scheduler
    # per row: the run's clock when its stream opened, and the stream time from which the loop's body may do
    # anything for it (Scheduler.next_decision, its end, the duration limit): before that the row is skipped
    opened_at = np.zeros(n_rows, np.int64)
    wake = np.zeros(n_rows, np.int64)
    render_pool = row_pool(vad.threads) if vad.threads > 1 else None
    render_groups = row_ranges(n_rows, vad.threads)
    run = _RunClock()
    # the rows' int16 output of the last steps, side by side (one copy a step for all rows); each
    # stream takes its part when the stage is full and when it ends
    stage = np.empty((n_rows, max(STAGE_SAMPLES, 2 * frame)), np.int16)
    ahead: _Ahead | None = None  # the next step's input, rendered while the model stepped (overlap)
    staged = 0  # columns of the stage in use
    fresh_state()
    lag = rs_out.delay
    period = refill_period(frame, sr, info.output_rate, [
        (sr, rs_in.block_in), (info.output_rate, rs_out.block_in), (sr, det.reset_period)])

    def wake_at(sched: Scheduler) -> int:
        """The stream time from which a row's body may do anything: a scheduler decision (advance, which
        alone adds placements), the stream's end, or the duration limit."""
        if sched.done:
            return min(sched.end + lag, limit)
        nd = sched.next_decision()
        return limit if nd is None else min(nd, limit)

    def render(x: np.ndarray, at: np.ndarray, rows: np.ndarray, lo_hi: tuple[int, int]) -> None:
        """The input of ``rows`` (``at`` negative for every other row) in ``lo <= b < hi``: clips + tone, as
        Track.render(...) + RoomTone.read(...) (each row's samples the same whichever group renders it)."""
        lo, hi = lo_hi
        tracks.render_into(x, at, lo_hi)
        tones.add_into(x, rows[(rows >= lo) & (rows < hi)])

    def render_rows(x: np.ndarray, when: int, rows: np.ndarray) -> np.ndarray:
        """Render the input of ``rows`` at the run's clock ``when`` into ``x`` (row groups side by side on the
        detector's threads when there are enough rows); returns the rows' stream times (-1 elsewhere)."""
        at = np.full(n_rows, -1, np.int64)
        at[rows] = when - opened_at[rows]
        if render_pool is not None and len(rows) >= RENDER_POOL_ROWS:
            list(render_pool.map(functools.partial(render, x, at, rows), render_groups))
        else:
            render(x, at, rows, (0, n_rows))
        return at

    def refill(b: int) -> None:
        """Open the next schedulable conversation of the queue in free row ``b`` (if any)."""
        while queue_ and slots[b] is None:
            if not call("admit", f"admission to row {b}", model.admit):
                return
            i = queue_.pop()
            try:
                c = convs[i]
            except InputUnavailable as e:
                rb.deliver(i, ConversationResult(e.scene_id, "error", e.reason))
                continue
            try:
                sched = Scheduler([len(x) for x in c.turn_clips], [t.label for t in c.scene.turns],
                                  len(c.preamble), protocol)
            except ValueError as e:
                rb.deliver(i, ConversationResult(c.scene.scene_id, "error", f"cannot schedule: {e}"))
                continue
            rs_in.reset([b])
            rs_out.reset([b])
            det.reset([b], at=clock)
            prev_out[b] = 0.0
            slots[b] = _Stream(i, c, sched,
                               drop=lag if clock else 0, opened=time.perf_counter(), run=run, staged_from=staged,
                               pacing=Pacing() if paced else None)
            tracks.clear(b)
            opened_at[b], wake[b] = clock, 0  # its first step places the script's first clips
            tones.open(b, RoomTone(protocol.room_tone, protocol.room_tone_dbfs, c.seed, sr))
            call("open", f"open of {c.scene.scene_id} in row {b}", model.open, b,
                 stream_context(c, info, protocol.duty_as_text, rb.preempted.get(i, 0)))
    def unstage() -> None:
        """Hand every stream its staged output and empty the stage."""
        nonlocal staged
        for b, st in enumerate(slots):
            if st is not None:
                st.outputs.append(stage[b, st.staged_from:staged].copy())
                st.staged_from = 0
        staged = 0

    try:
        while rb.admit(clock, period, fresh_state, refill):
            # the rows whose body may do anything now, in row order (the others: no decision, no new placement,
            # no end, as the body would find them); each gets its next wake time after its body
            for b in np.flatnonzero(clock - opened_at >= wake).tolist():
                st = slots[b]
                if st is None:
                    continue
                t = st.t
                sched = st.sched
                if sched.needs_detector(t):  # else advance() would decide nothing: no view to build
                    sched.advance(t, det.view(b))
                if len(sched.placements) > st.seen:
                    for p in sched.placements[st.seen:]:
                        clip = st.conv.preamble if p.turn is None else st.conv.turn_clips[p.turn]
                        tracks.add(b, p.start, clip)
                        if reads_schedule and slots[b] is st:
                            call("observe", f"observe of row {b} at {t / sr:.2f} s of stream", model.observe, b, p)
                    st.seen = len(sched.placements)
                    if slots[b] is not st:
                        continue
                if sched.done and t >= sched.end + lag:
                    pcm = np.concatenate([*st.outputs, stage[b, st.staged_from:staged]])
                    # exactly quantize()'s float32 values: k / PCM_SCALE in float32
                    out = pcm[st.drop:st.drop + sched.end].astype(np.float32) / PCM_SCALE
                    res = st.result()
                    res.output = out
                    res.speech_probs = det.probabilities(b, det.probs.complete_frames(len(out)))
                    rb.end(b, res)
                elif t >= limit:
                    rb.fail([b], f"stream exceeded the {max_duration_s} s limit")
                else:
                    wake[b] = wake_at(sched)
            live = rb.live()
            if not live:
                if queue_:  # nothing admitted yet: ask again shortly (a paced clock resumes from now)
                    time.sleep(ADMIT_POLL_S)
                    t_fresh = time.perf_counter() - clock / sr
                continue
            live_a = np.asarray(live, np.int64)
            # the input: the rows rendered ahead (during the last step) that still hold the same stream are
            # done; the others (the rows visited above, and any row failed or refilled since) rendered now
            if ahead is None:
                x, done = np.zeros((n_rows, frame), np.float32), np.zeros(0, np.int64)
            else:
                rows_ahead = np.fromiter(ahead.streams, np.int64, len(ahead.streams))
                same = np.fromiter((slots[b] is st for b, st in ahead.streams.items()), bool, len(rows_ahead))
                x, done, ahead = ahead.x, rows_ahead[same], None
                x[rows_ahead[~same]] = 0.0
            at = render_rows(x, clock, np.setdiff1d(live_a, done, assume_unique=True))
            at[done] = clock - opened_at[done]  # each live row's stream time (free rows are left alone)
            if protocol.echo:
                add_rows(x, live_a, prev_out)
            tracks.drop(at)  # the clips that ended before this window, and those of free rows
            # the rows the next step's loop body visits (a decision pending past T's end, an end): the detector
            # scores them at once; the others' scores and next input wait (with overlap: done during the step)
            visit_next = clock + frame - opened_at[live_a] >= wake[live_a]
            k = clock // frame
            where = f"step {k} at {clock / sr:.2f} s of the run"
            if paced:  # a remote service hears the stream in real time: step k no earlier than k frames in
                late = time.perf_counter() - (t_fresh + clock / sr)
                for b in live:
                    slots[b].pacing.frame(late, frame / sr)
                time.sleep(max(0.0, -late))
            stepping = rb.submit("step", where, model.step, rs_in.push(x))
            if overlap:  # while the model steps: the last push's rows that no decision waits on are scored, and
                try:  # the next input rendered for the rows the next step's body will not visit
                    det.settle()
                    quiet = live_a[~visit_next]
                    ahead = _Ahead(np.zeros((n_rows, frame), np.float32), {b: slots[b] for b in quiet.tolist()})
                    render_rows(ahead.x, clock + frame, quiet)
                except BaseException:
                    rb.abandon(stepping)
                    raise
            y = rb.wait(stepping, output=True)
            dt = stepping.pending.ran_s
            stats.steps += 1
            stats.idle_row_steps += n_rows - len(live)
            stats.model_s += dt
            # quantize(), with the 16-bit steps of the samples past the resampler's delay staged for the stored int16
            y = rs_out.push(rb.output(y, where))
            if staged + max(0, y.shape[1] - skip) > stage.shape[1]:
                unstage()
            prev_out = y = quantize_rows(y, stage, staged, skip)
            y, skip = y[:, skip:], max(0, skip - y.shape[1])  # drop the resampler's delay
            # free rows are not scored (each is reset when it is refilled); of the others, the rows the next
            # step's body visits (a decision, an end) are scored now, the rest by the next det.settle()
            due = live_a[visit_next]
            det.push(y, live_a, due)
            stats.due_row_steps += len(due)
            staged += y.shape[1]
            clock += frame
            run.samples, run.model_s = clock, run.model_s + dt
            if paced and clock == frame:  # the first step (the model's and the runner's) may include warm-up:
                t_fresh = max(t_fresh, time.perf_counter() - clock / sr)  # restart after it, or the next steps burst
    finally:
        rb.close()
        stats.requeued = rb.requeued
        stats.wall_s = time.perf_counter() - t_run
    return stats
