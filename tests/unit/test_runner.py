"""The runner: bad model behaviour fails only what it must, and the echo switch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_batch
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.silero import VadSettings

SR = 24_000


@pytest.fixture(scope="module")
def scene() -> Scene:
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    return Scene("p0-explicit", "p0", "explicit", ("A", "B", "C"), turns, "yes")


def _conv(scene: Scene, seed: int = 0) -> ConversationInput:
    rng = np.random.default_rng(seed)
    clips = [(rng.standard_normal(SR) * 0.01).astype(np.float32) for _ in scene.turns]
    return ConversationInput(scene, clips, np.zeros(0, np.float32), seed)


def _model(name: str):
    m = build_model(f"tests.fixtures.faulty_models:{name}")
    m.load("cpu")
    return m


def test_nan_output_fails_only_that_stream(scene):
    res = run_batch(_model("NaNModel"), [_conv(scene, 0), _conv(scene, 1)], ProtocolSettings(), VadSettings())
    assert res[0].status == "error" and "NaN" in res[0].reason and res[0].output is None
    assert res[1].status == "ok" and res[1].output is not None and len(res[1].output) > 0


def test_raising_adapter_fails_the_batch_with_its_reason(scene):
    res = run_batch(_model("RaisingModel"), [_conv(scene), _conv(scene, 1)], ProtocolSettings(), VadSettings())
    assert [r.status for r in res] == ["error", "error"]
    assert all("adapter exploded" in r.reason for r in res)


def test_wrong_output_shape_is_an_error(scene):
    (res,) = run_batch(_model("WrongShapeModel"), [_conv(scene)], ProtocolSettings(), VadSettings())
    assert res.status == "error" and "shape" in res.reason


def test_unschedulable_conversation_is_an_error(scene):
    bad = _conv(scene)
    bad.turn_clips[1] = np.zeros(0, np.float32)  # an empty clip cannot be placed
    ok = _conv(scene, 1)
    res = run_batch(build_model("silent"), [bad, ok], ProtocolSettings(), VadSettings())
    assert res[0].status == "error" and "schedule" in res[0].reason
    assert res[1].status == "ok"


def test_output_length_equals_stream_end_and_silent_model_is_zero(scene):
    m = build_model("silent")
    m.load("cpu")
    (res,) = run_batch(m, [_conv(scene)], ProtocolSettings(), VadSettings())
    last = max(p.start + p.length for p in res.placements)
    assert len(res.output) == last + ProtocolSettings().s(ProtocolSettings().tail_s)
    assert not res.output.any()


@pytest.mark.parametrize("echo", [False, True])
def test_echo_switch(scene, echo):
    m = _model("EchoProbeModel")
    proto = replace(ProtocolSettings(), echo=echo)
    run_batch(m, [_conv(scene)], proto, VadSettings())
    # the probe always says 0.25; with echo its own output comes back in its input one frame later
    second_frame = m.inputs[1][0, :10]  # no preamble: turn 0 starts at sample 0
    human = _conv(scene).turn_clips[0][1920:1930]
    expected = human + (0.25 if echo else 0.0)
    np.testing.assert_allclose(second_frame, expected, atol=1e-4)
