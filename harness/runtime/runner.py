"""Runs one model over a batch of conversations in lockstep (the ``infer`` stage's core).

For each step of one native model frame the runner: lets every conversation's
:class:`~harness.protocol.scheduler.Scheduler` decide (from the online detector's view of
that conversation's output so far), renders the human input from the placements, resamples
it to the model's input rate, steps the model for all streams at once, checks and resamples
the output to the timeline rate, quantises it to the stored 16-bit grid and feeds it to the
batched online detector. Streams that have finished, or failed, keep a slot filled with
silence until the whole batch is done (an exec mask). Under the whole input (preamble,
turns, gaps and waits) runs the conversation's :class:`~harness.audio.room_tone.RoomTone`.

Failures (docs/adding-a-model.md):

* deterministic faults of single conversations are that conversation's error, returned with
  ``status="error"`` and its reason, never as silence: an unschedulable scene, a
  :class:`~harness.models.base.RowError` the adapter raises for its rows, a row of output
  with NaN/Inf or a sample outside [-1, 1]; output of the wrong dtype or shape fails every
  row of the batch (:func:`check_output`). A row that had already finished stays ``ok``.
* any other exception from a model call may be transient (CUDA out of memory, a broken
  remote stream): :func:`run_batch` raises :class:`ModelFailure`, nothing of the batch is
  returned, and the shard's attempt fails and is retried by the executor.
* a model call that does not return within the watchdog's timeout raises
  :class:`ModelStalled` (a :class:`ModelFailure`); the stuck thread cannot be stopped, so the
  actor must be discarded.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.audio.assemble import Track
from harness.audio.io import PCM_SCALE, quantize
from harness.audio.resample import StreamResampler
from harness.audio.room_tone import RoomTone
from harness.models.base import READS_SCHEDULE, DuplexModel, RowError, StreamContext
from harness.protocol.scheduler import Event, Placement, ProtocolSettings, Scheduler
from harness.scenes.schema import Scene
from harness.vad.silero import StreamingDetector, VadSettings


@dataclass
class ConversationInput:
    """One conversation ready to stream: clips are ``float32[n]`` at the timeline rate."""

    scene: Scene
    turn_clips: list[np.ndarray]
    preamble: np.ndarray
    seed: int
    duty_text: str = ""


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
    wall_s: float = 0.0

    def record(self, sample_rate: int) -> dict:
        """JSON-able record (without audio) for the store."""
        return {
            "scene_id": self.scene_id,
            "status": self.status,
            "reason": self.reason,
            "sample_rate": sample_rate,
            "n_samples": None if self.output is None else len(self.output),
            # max |sample| of the stored output (linear, full scale 1.0): reduce flags a model whose
            # peak stays below metrics.suspect_peak_dbfs everywhere (a broken output path)
            "output_peak": None if self.output is None else float(np.max(np.abs(self.output), initial=0.0)),
            "placements": [{"turn": p.turn, "start": p.start, "length": p.length} for p in self.placements],
            "events": [e.to_dict() for e in self.events],
            "wall_s": round(self.wall_s, 3),
        }


class ModelFailure(RuntimeError):
    """A model call failed in a way that may not recur (not a :class:`RowError`): the attempt fails.

    The message names the model, the call, the stream time in seconds and the original
    exception (also chained as ``__cause__``).
    """


class ModelStalled(ModelFailure):
    """A model call did not return within the watchdog's timeout (``infer.step_timeout_s``)."""


class OutputContractError(ValueError):
    """A model's step output is not a floating-point ``[B, frame_out]`` array (fails every row)."""


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
    finite = np.isfinite(a).all(axis=1)
    peaks = np.abs(np.where(np.isfinite(a), a, 0.0)).max(axis=1, initial=0.0)
    for b in range(shape[0]):
        if not finite[b]:
            bad[b] = f"model {model} returned NaN/Inf samples"
        elif peaks[b] > 1.0 + PEAK_TOLERANCE:
            bad[b] = f"model {model} returned samples outside [-1, 1]: peak {peaks[b]:.6g}"
    if bad:
        a = np.where(np.isin(np.arange(shape[0]), list(bad))[:, None], 0.0, a)
    return a.astype(np.float32, copy=False), bad


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
        threading.Thread(target=self._serve, name=f"model-{name}", daemon=True).start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fut, fn, args = job
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # delivered to the caller, whatever it is
                fut.set_exception(e)

    def call(self, what: str, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        """``fn(*args)`` on the thread; returns its result or raises its exception.

        Raises:
            TimeoutError: it did not return within ``timeout_s`` seconds (``what`` is then
                :attr:`stuck`), or an earlier call is stuck.
        """
        if self.stuck is not None:
            raise TimeoutError(f"{what} not started: an earlier call ({self.stuck}) never returned")
        fut: Future = Future()
        self._jobs.put((fut, fn, args))
        try:
            return fut.result(timeout_s)
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


def run_batch(model: DuplexModel, convs: Sequence[ConversationInput], protocol: ProtocolSettings,
              vad: VadSettings, max_duration_s: float = 3600.0, *, step_timeout_s: float | None = None,
              first_step_timeout_s: float | None = None, thread: ModelThread | None = None,
              ) -> list[ConversationResult]:
    """Stream ``convs`` (at most ``model.info.max_batch``) through ``model`` together.

    Args:
        max_duration_s: a stream longer than this (seconds) is that conversation's error.
        step_timeout_s: the watchdog: the longest a model call (``step``, ``observe``,
            ``close``) may take, in seconds; ``None`` waits forever.
        first_step_timeout_s: the same for ``open`` and the batch's first step, which may
            include warm-up or compilation (``None``: ``step_timeout_s``).
        thread: the model's :class:`ModelThread` (the one it was loaded on); default: a new
            one for this batch.

    Returns:
        One :class:`ConversationResult` per input, in order.

    Raises:
        ModelFailure: a model call raised something other than :class:`RowError` (the
            attempt fails; nothing of the batch is kept).
        ModelStalled: a model call did not return in time; ``thread`` is then unusable.
    """
    sr = protocol.sample_rate
    info = model.info
    n = len(convs)
    if not 0 < n <= info.max_batch:
        raise ValueError(f"batch of {n} for a model with max_batch {info.max_batch}")
    frame = _frame_on_timeline(model, sr)
    own_thread = thread is None
    thread = thread or ModelThread(info.name)
    t_start = time.perf_counter()
    results = [ConversationResult(c.scene.scene_id, "ok") for c in convs]
    scheds: list[Scheduler | None] = [None] * n
    tracks = [Track() for _ in convs]
    seen = [0] * n
    outputs: list[list[np.ndarray]] = [[] for _ in convs]
    active = np.zeros(n, bool)
    for b, c in enumerate(convs):
        try:
            scheds[b] = Scheduler([len(x) for x in c.turn_clips], [t.label for t in c.scene.turns],
                                  len(c.preamble), protocol)
            active[b] = True
        except ValueError as e:
            results[b].status, results[b].reason = "error", f"cannot schedule: {e}"

    def fail(rows, reason: str) -> None:
        for b in rows:
            if active[b]:
                active[b] = False
                results[b].status, results[b].reason = "error", reason

    def call(what: str, fn: Callable[..., Any], *args: Any, first: bool = False, output: bool = False) -> Any:
        """One model call on the model thread; a RowError fails its rows and returns its ``output``."""
        where = f"{what} at {t / sr:.2f} s of stream"
        timeout = (first_step_timeout_s or step_timeout_s) if first else step_timeout_s
        setting = "infer.first_step_timeout_s" if first and first_step_timeout_s else "infer.step_timeout_s"
        try:
            return thread.call(where, fn, *args, timeout_s=timeout)
        except RowError as e:
            outside = sorted(set(e.reasons) - set(range(n)))
            if outside:
                fail(range(n), f"model {info.name} {where} blamed rows {outside} of a batch of {n}")
                return None
            for b, why in e.reasons.items():
                fail([b], f"model {info.name} {where}: {why}")
            if output and e.output is None:
                fail(range(n), f"model {info.name} {where} raised RowError for rows {sorted(e.reasons)} without "
                               "the output of the other rows (RowError.output)")
            return e.output
        except TimeoutError as e:
            if thread.stuck is None:  # the model itself raised TimeoutError
                raise ModelFailure(f"model {info.name}: {where} raised TimeoutError: {e}") from e
            raise ModelStalled(f"model {info.name}: {e} ({setting}); the actor must be discarded") from None
        except Exception as e:
            raise ModelFailure(f"model {info.name}: {where} raised {type(e).__name__}: {e}") from e

    det = StreamingDetector(n, sr, vad)
    reads_schedule = READS_SCHEDULE in info.capabilities
    tones = [RoomTone(protocol.room_tone, protocol.room_tone_dbfs, c.seed, sr) for c in convs]
    prev_out = np.zeros((n, frame), np.float32)
    # streaming resamplers, one stream per row (docs/protocol-decisions.md, "Time and audio"): the output
    # side's fixed delay (lag) is trimmed, so the stored output is resample(model output) on the
    # timeline; a stream runs until lag samples past its end have been output
    rs_in, rs_out = StreamResampler(n, sr, info.input_rate), StreamResampler(n, info.output_rate, sr)
    lag = skip = rs_out.delay
    limit = round(max_duration_s * sr)
    t = k = 0
    try:
        call("open", model.open, [StreamContext(c.scene.scene_id, c.seed, c.duty_text, c.scene) for c in convs],
             first=True)
        while active.any():
            for b in np.flatnonzero(active):
                s = scheds[b]
                s.advance(t, det.view(b))
                for p in s.placements[seen[b]:]:
                    clip = convs[b].preamble if p.turn is None else convs[b].turn_clips[p.turn]
                    tracks[b].add(p.start, clip)
                    if reads_schedule and active[b]:
                        call("observe", model.observe, int(b), p)
                seen[b] = len(s.placements)
                if s.done and t >= s.end + lag:
                    active[b] = False
            if not active.any():
                break
            if t >= limit:
                fail(np.flatnonzero(active), f"stream exceeded the {max_duration_s} s limit")
                break
            x = np.zeros((n, frame), np.float32)
            for b in np.flatnonzero(active):
                x[b] = tracks[b].render(t, frame) + tones[b].read(frame)
            if protocol.echo:
                x += prev_out
            y = call(f"step {k}", model.step, rs_in.push(x), first=k == 0, output=True)
            if not active.any():  # every running row was blamed
                break
            try:
                y, bad = check_output(y, info.name, (n, info.frame_out))
            except OutputContractError as e:
                fail(range(n), f"{e} (step {k} at {t / sr:.2f} s)")
                break
            for b, why in bad.items():
                fail([b], f"{why} (step {k} at {t / sr:.2f} s)")
            y = quantize(rs_out.push(y))
            prev_out = y
            y, skip = y[:, skip:], max(0, skip - y.shape[1])  # aligned: drop the output resampler's delay
            det.push(y)
            for b in np.flatnonzero(active):
                outputs[b].append(y[b])
            t += frame
            k += 1
    finally:
        if thread.stuck is None:
            with contextlib.suppress(Exception):
                thread.call("close", model.close, timeout_s=step_timeout_s)
        if own_thread:
            thread.close()
    wall = time.perf_counter() - t_start
    for b, r in enumerate(results):
        s = scheds[b]
        if s is not None:
            r.placements, r.events = list(s.placements), list(s.events)
        r.wall_s = wall / n
        if r.status == "ok":
            r.output = np.concatenate(outputs[b])[: s.end] if outputs[b] else np.zeros(0, np.float32)
            r.speech_probs = det.probabilities(b, det.probs.complete_frames(len(r.output)))
    return results
