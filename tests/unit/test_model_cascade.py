"""The listening cascade decides from audio alone: real espeak-ng speech, real Silero, the real
offline ASR. It answers the explicit version of a scene and stays silent through the implicit one."""

from __future__ import annotations

import numpy as np
import pytest

from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings

VOICES = {"A": "en-us+m1", "B": "en-us+f2", "C": "en-gb"}


def _pair(tts):
    out = []
    for condition, t_text in (("explicit", "Aria, what time does the train leave?"),
                              ("implicit", "Remind me, what time does the train leave?")):
        turns = (Turn("A", "Ben, the train leaves at seven tonight.", Label.N2, Target.HUMAN),
                 Turn("B", "I will pack my bag after dinner.", Label.N3, Target.NONE),
                 Turn("C", t_text, Label.T, Target.ARIA),
                 Turn("A", "We should leave the house early.", Label.N3, Target.NONE))
        scene = Scene(f"c0-{condition}", "c0", condition, ("A", "B", "C"), turns, "seven")
        clips = [tts.synthesize(t.text, VOICES[t.speaker]) for t in turns]
        out.append(ConversationInput(scene, clips, np.zeros(0, np.float32), 0))
    return out


@pytest.fixture(scope="module")
def results(tts):
    model = build_model("cascade")
    model.load("cpu")
    return run_conversations(model, _pair(tts), ProtocolSettings(tail_s=1.0), VadSettings(), rows=2)


def test_the_cascade_answers_when_named_and_stays_silent_otherwise(results):
    explicit, implicit = results
    assert explicit.status == implicit.status == "ok"
    kinds = [e.kind for e in explicit.events]
    assert "onset" in kinds and "t_end_silent" in kinds  # silent at T's end, then a fresh onset
    assert "onset" not in [e.kind for e in implicit.events]
    t_end = next(e.t for e in explicit.events if e.kind == "t_end_silent")
    assert not explicit.output[:t_end].any()  # nothing before the request (the other turns are not for it)
    assert np.abs(explicit.output[t_end:]).max() > 0.1 and not implicit.output.any()


def test_its_answer_is_the_earlier_turn_that_matches_the_request():
    m = build_model("cascade")
    turns = [["ben", "the", "train", "leaves", "at", "seven", "tonight"], ["i", "will", "pack", "my", "bag"]]
    assert m._answer(turns, {"aria", "time", "train", "leave"}) == "I heard: ben the train leaves at seven tonight."
    assert m._answer(turns, {"aria", "weather"}) == "Sorry, I did not catch that."
