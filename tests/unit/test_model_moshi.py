"""The Moshi adapter on a tiny randomly initialised Mimi + LM built from the real ``moshi``
package (no weights): through the real runner at batch 1 and with refills at batch 2, streams
of different lengths, per-row resets, and the upstream quirks (no tokens on a stream's first step)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("moshi")

from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.silero import VadSettings

SR, FRAME = 24_000, 1_920
# short waits: the random model's noise may read as speech, and the caps bound how long it runs
PROTO = ProtocolSettings(tail_s=0.3, fresh_onset_window_s=0.8, endpoint_silence_s=0.5, response_cap_s=1.5,
                         n4_answer_window_s=0.5, turn_gap_s=0.2)


@pytest.fixture(autouse=True)
def _no_compile(monkeypatch):
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")


def _moshi(**kw):
    m = build_model("moshi", {"tiny": True, "use_sampling": False, "dtype": "float32", "max_batch": 4, **kw})
    m.load("cpu")
    return m


def _conv(i: int, clip_s: float) -> ConversationInput:
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    scene = Scene(f"m{i}-explicit", f"m{i}", "explicit", ("A", "B", "C"), turns, "yes")
    rng = np.random.default_rng(i)
    clips = [(rng.standard_normal(round(clip_s * SR)) * 0.05).astype(np.float32) for _ in turns]
    return ConversationInput(scene, clips, np.zeros(0, np.float32), i)


def test_tiny_moshi_streams_at_batch_1_and_says_nothing_on_its_first_step():
    m = _moshi()
    steps = []
    real_step = m.step
    m.step = lambda frames: steps.append(real_step(frames)) or steps[-1]
    (res,) = run_conversations(m, [_conv(0, 0.4)], PROTO, VadSettings())
    assert res.status == "ok", res.reason
    assert steps[0].shape == (1, FRAME) and not steps[0].any()  # LMGen has no tokens for step 0
    assert steps[1].any() and np.abs(res.output).max() <= 1.0  # then Mimi decodes every step
    assert len(res.output) == max(p.end for p in res.placements) + PROTO.s(PROTO.tail_s)


def test_tiny_moshi_refills_rows_and_a_conversation_does_not_depend_on_its_row_or_neighbours():
    """Three streams of different lengths in two rows: the third is opened in the row the
    shortest frees (a masked reset of Mimi and LMGen while the other row streams on); with
    greedy decoding each conversation's output is the same as next to another neighbour."""
    convs = [_conv(0, 0.3), _conv(1, 0.9), _conv(2, 0.5)]
    batch = run_conversations(_moshi(), convs, PROTO, VadSettings(), rows=2)
    assert [r.status for r in batch] == ["ok"] * 3, [r.reason for r in batch]
    assert len({len(r.output) for r in batch}) == 3
    # conversation 2 again, now opened at the start in row 1 beside conversation 1 in row 0
    again = run_conversations(_moshi(), [convs[1], convs[2]], PROTO, VadSettings(), rows=2)
    np.testing.assert_array_equal(again[1].output, batch[2].output)
    assert again[1].events == batch[2].events
    np.testing.assert_array_equal(again[0].output, batch[1].output)


def test_the_row_count_can_change_between_runs():
    m = _moshi()
    (one,) = run_conversations(m, [_conv(3, 0.3)], PROTO, VadSettings())
    two = run_conversations(m, [_conv(3, 0.3), _conv(4, 0.3)], PROTO, VadSettings(), rows=2)
    assert one.status == two[0].status == two[1].status == "ok"
    assert m.info.weights == "random:tiny"
