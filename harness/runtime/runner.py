"""Runs one model over a batch of conversations in lockstep (the ``infer`` stage's core).

For each step of one native model frame the runner: lets every conversation's
:class:`~harness.protocol.scheduler.Scheduler` decide (from the online detector's view of
that conversation's output so far), renders the human input from the placements, resamples
it to the model's input rate, steps the model for all streams at once, checks and resamples
the output to the timeline rate, quantises it to the stored 16-bit grid and feeds it to the
batched online detector. Streams that have finished, or failed, keep a slot filled with
silence until the whole batch is done (an exec mask).

Failures stay local: a model output with NaN/Inf or the wrong shape fails that stream; an
exception in ``open``/``step`` fails every stream still running in the batch. A failed
conversation is returned with ``status="error"`` and its reason, never as silence.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.audio.assemble import Track
from harness.audio.io import quantize
from harness.audio.resample import resample
from harness.models.base import READS_SCHEDULE, DuplexModel, StreamContext
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
            "placements": [{"turn": p.turn, "start": p.start, "length": p.length} for p in self.placements],
            "events": [e.to_dict() for e in self.events],
            "wall_s": round(self.wall_s, 3),
        }


def _frame_on_timeline(model: DuplexModel, sample_rate: int) -> int:
    info = model.info
    n = info.frame_in * sample_rate / info.input_rate
    if n != int(n) or info.frame_out * info.input_rate != info.frame_in * info.output_rate:
        raise ValueError(f"model {info.name}: frame_in/frame_out do not span one whole number of timeline samples")
    return int(n)


def run_batch(model: DuplexModel, convs: Sequence[ConversationInput], protocol: ProtocolSettings,
              vad: VadSettings, max_duration_s: float = 3600.0) -> list[ConversationResult]:
    """Stream ``convs`` (at most ``model.info.max_batch``) through ``model`` together.

    Returns one :class:`ConversationResult` per input, in order.
    """
    sr = protocol.sample_rate
    info = model.info
    n = len(convs)
    if not 0 < n <= info.max_batch:
        raise ValueError(f"batch of {n} for a model with max_batch {info.max_batch}")
    frame = _frame_on_timeline(model, sr)
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

    try:
        model.open([StreamContext(c.scene.scene_id, c.seed, c.duty_text, c.scene) for c in convs])
    except Exception as e:
        fail(range(n), f"model.open raised {type(e).__name__}: {e}")
    det = StreamingDetector(n, sr, vad)
    reads_schedule = READS_SCHEDULE in info.capabilities
    prev_out = np.zeros((n, frame), np.float32)
    limit = round(max_duration_s * sr)
    t = 0
    while active.any():
        for b in np.flatnonzero(active):
            s = scheds[b]
            s.advance(t, det.view(b))
            for p in s.placements[seen[b]:]:
                clip = convs[b].preamble if p.turn is None else convs[b].turn_clips[p.turn]
                tracks[b].add(p.start, clip)
                if reads_schedule:
                    model.observe(int(b), p)
            seen[b] = len(s.placements)
            if s.done and t >= s.end:
                active[b] = False
        if not active.any():
            break
        if t >= limit:
            fail(np.flatnonzero(active), f"stream exceeded the {max_duration_s} s limit")
            break
        x = np.zeros((n, frame), np.float32)
        for b in np.flatnonzero(active):
            x[b] = tracks[b].render(t, frame)
        if protocol.echo:
            x += prev_out
        try:
            y = model.step(resample(x, sr, info.input_rate))
        except Exception as e:
            fail(np.flatnonzero(active), f"model.step raised {type(e).__name__} at {t / sr:.2f} s: {e}")
            break
        y = np.asarray(y)
        if y.shape != (n, info.frame_out):
            fail(np.flatnonzero(active), f"model output shape {y.shape}, expected {(n, info.frame_out)}")
            break
        bad = ~np.isfinite(y).all(axis=1)
        fail(np.flatnonzero(bad & active), f"model output contains NaN/Inf at {t / sr:.2f} s")
        y = np.where(bad[:, None], 0.0, y).astype(np.float32)
        y = quantize(resample(y, info.output_rate, sr))
        det.push(y)
        prev_out = y
        for b in np.flatnonzero(active):
            outputs[b].append(y[b])
        t += frame
    with contextlib.suppress(Exception):
        model.close()
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
