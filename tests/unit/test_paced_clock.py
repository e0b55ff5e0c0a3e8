"""The runner's paced clock (realtime capability, hosted services): a first step's warm-up is not
made up afterwards by a burst of steps faster than real time, and a stall is recorded as lag.

The runner reads a stand-in clock here (its ``time`` module replaced by :class:`StepClock`): time
passes only while something sleeps (the runner waiting for a frame's due time, or the model's
warm-up or stall), so every step's time is exact whatever the machine's load, and the runner's own
work takes no time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.models.base import REALTIME, DuplexModel, ModelInfo
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime import runner
from harness.runtime.runner import BEHIND_TOLERANCE_S, ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings

SR, FRAME = 24_000, 1_920  # 80 ms steps
FRAME_S = FRAME / SR


class StepClock:
    """``perf_counter`` and ``sleep`` of a clock that moves only by what is slept (seconds)."""

    def __init__(self):
        self.now = 1_000.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += max(0.0, s)


@pytest.fixture
def clock(monkeypatch) -> StepClock:
    c = StepClock()
    monkeypatch.setattr(runner, "time", c)
    return c


class SlowStep(DuplexModel):
    """A silent paced model whose step number ``at`` (1-based) takes ``slow_s`` (a first call that
    connects or compiles, or a service that stops answering a while); it records when each step was
    called, on the runner's clock."""

    def __init__(self, clock: StepClock, at: int, slow_s: float, capabilities=frozenset({REALTIME})):
        self.info = ModelInfo("slow_step", SR, SR, FRAME, FRAME, 1, capabilities)
        self.clock, self.at, self.slow_s, self.calls = clock, at, slow_s, []

    def load(self, device: str) -> None:
        pass

    def open(self, row, stream) -> None:
        pass

    def close(self, row) -> None:
        pass

    def step(self, frames: np.ndarray) -> np.ndarray:
        self.calls.append(self.clock.perf_counter())
        if len(self.calls) == self.at:
            self.clock.sleep(self.slow_s)
        return np.zeros((frames.shape[0], FRAME), np.float32)


def _run(model: SlowStep, overlap: bool = False):
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    scene = Scene("p0-explicit", "p0", "explicit", ("A", "B", "C"), turns, "yes")
    conv = ConversationInput(scene, [np.zeros(SR // 4, np.float32)] * 3, np.zeros(0, np.float32), 0)
    # the stream is cut after 1.5 s of it (an error; the steps so far are all this needs)
    (result,) = run_conversations(model, [conv], ProtocolSettings(), VadSettings(), max_duration_s=1.5,
                                  overlap=overlap)
    assert "exceeded the 1.5 s limit" in result.reason
    assert len(model.calls) == math.ceil(1.5 / FRAME_S)  # 19 steps: after the 19th the stream is at 1.52 s
    return result


@pytest.mark.parametrize("overlap", [False, True])
def test_a_slow_first_step_does_not_make_the_next_steps_go_in_a_burst(clock, overlap):
    model = SlowStep(clock, at=1, slow_s=0.5)
    _run(model, overlap)
    # the clock restarts after the first step: step k (0-based, k >= 1) k - 1 frames after it returned.
    # Without the restart, steps 1-6 were due before the warm-up ended and would go back to back.
    first_done = model.calls[0] + 0.5
    assert model.calls[1:] == pytest.approx([first_done + (k - 1) * FRAME_S for k in range(1, len(model.calls))])


@pytest.mark.parametrize("overlap", [False, True])
def test_a_stall_mid_stream_is_recorded_as_lag_behind_real_time(clock, overlap):
    """Paced and, with overlap, the runner's work beside each step: the same times on the clock."""
    model = SlowStep(clock, at=5, slow_s=0.5)
    record = _run(model, overlap).record(SR)
    # the frame after the stalled step was due 80 ms into the 0.5 s stall: 0.42 s late; the stream catches up
    # in a burst, each frame 80 ms less late: 0.42, 0.34, 0.26, 0.18, 0.10 s are behind (>= 80 ms), 0.02 is not
    lags = [0.5 - FRAME_S * (1 + j) for j in range(6)]
    assert record["pacing"]["max_lag_s"] == pytest.approx(lags[0], abs=1e-3)
    behind = sum(FRAME_S for lag in lags if lag >= BEHIND_TOLERANCE_S)
    assert behind == pytest.approx(5 * FRAME_S)
    assert record["pacing"]["behind_s"] == pytest.approx(behind, abs=1e-3)
    stalled = model.calls[4]
    assert model.calls[5:11] == pytest.approx([stalled + 0.5] * 6)  # the burst: back to back on the clock
    assert model.calls[11] == pytest.approx(stalled + 7 * FRAME_S)  # then in real time again


def test_an_unpaced_model_records_no_pacing(clock):
    model = SlowStep(clock, at=5, slow_s=0.0, capabilities=frozenset())
    result = _run(model)
    assert result.pacing is None and result.record(SR)["pacing"] is None
