"""The runner's paced clock (realtime capability, hosted services): a first step's warm-up is not
made up afterwards by a burst of steps faster than real time."""

from __future__ import annotations

import time

import numpy as np

from harness.models.base import REALTIME, DuplexModel, ModelInfo
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.silero import VadSettings

SR, FRAME = 24_000, 1_920  # 80 ms steps


class SlowFirstStep(DuplexModel):
    """A silent paced model whose first step takes ``warm_up_s`` (as a first call that connects or
    compiles); it records when each step was called."""

    def __init__(self, warm_up_s: float):
        self.info = ModelInfo("slow_first", SR, SR, FRAME, FRAME, 1, frozenset({REALTIME}))
        self.warm_up_s, self.calls = warm_up_s, []

    def load(self, device: str) -> None:
        pass

    def open(self, row, stream) -> None:
        pass

    def close(self, row) -> None:
        pass

    def step(self, frames: np.ndarray) -> np.ndarray:
        self.calls.append(time.perf_counter())
        if len(self.calls) == 1:
            time.sleep(self.warm_up_s)
        return np.zeros((frames.shape[0], FRAME), np.float32)


def test_a_slow_first_step_does_not_make_the_next_steps_go_in_a_burst():
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    scene = Scene("p0-explicit", "p0", "explicit", ("A", "B", "C"), turns, "yes")
    conv = ConversationInput(scene, [np.zeros(SR // 4, np.float32)] * 3, np.zeros(0, np.float32), 0)
    model = SlowFirstStep(warm_up_s=0.5)
    # paced in real time: the stream is cut after 1.5 s (an error; the steps so far are all this needs)
    (result,) = run_conversations(model, [conv], ProtocolSettings(), VadSettings(), max_duration_s=1.5)
    assert "exceeded the 1.5 s limit" in result.reason
    assert len(model.calls) > 12
    # step k >= 2 no earlier than k - 1 frames after step 1 (half a frame's slack; a loaded machine can only
    # make steps later); without the clock restarted after the first step, the steps after it would come
    # back to back to make up the warm-up (the model's 0.5 s here, and the runner's first detector call)
    frame_s = FRAME / SR
    early = [k for k, t in enumerate(model.calls[2:12], 2) if t < model.calls[1] + (k - 1 - 0.5) * frame_s]
    assert early == []


class StallAt(SlowFirstStep):
    """A paced model whose step ``at`` stalls ``stall_s`` (a service that stops answering a while)."""

    def __init__(self, at: int, stall_s: float):
        super().__init__(0.0)
        self.at, self.stall_s = at, stall_s

    def step(self, frames: np.ndarray) -> np.ndarray:
        self.calls.append(time.perf_counter())
        if len(self.calls) == self.at:
            time.sleep(self.stall_s)
        return np.zeros((frames.shape[0], FRAME), np.float32)


def _conversation() -> ConversationInput:
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    scene = Scene("p0-explicit", "p0", "explicit", ("A", "B", "C"), turns, "yes")
    return ConversationInput(scene, [np.zeros(SR // 4, np.float32)] * 3, np.zeros(0, np.float32), 0)


def test_a_stall_mid_stream_is_recorded_as_lag_behind_real_time():
    model = StallAt(at=5, stall_s=0.5)
    (result,) = run_conversations(model, [_conversation()], ProtocolSettings(), VadSettings(), max_duration_s=1.5)
    assert model.calls, result.reason
    record = result.record(SR)
    # the frame after the stalled step was due one frame (80 ms) into the 0.5 s stall: it goes 0.42 s late,
    # and the stream catches up in a burst of steps (a loaded machine can only make it later, never earlier)
    assert record["pacing"]["max_lag_s"] >= 0.5 - FRAME / SR - 0.01
    # the frames sent while >= 80 ms late: at least the stalled step's successor and the burst until
    # the 0.5 s are made up (a loaded machine makes the burst longer)
    assert record["pacing"]["behind_s"] >= 2 * FRAME / SR


def test_an_unpaced_model_records_no_pacing():
    model = StallAt(at=5, stall_s=0.0)
    model.info = ModelInfo("unpaced", SR, SR, FRAME, FRAME, 1)
    (result,) = run_conversations(model, [_conversation()], ProtocolSettings(), VadSettings(), max_duration_s=1.5)
    assert result.pacing is None and result.record(SR)["pacing"] is None
