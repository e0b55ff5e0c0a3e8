"""The scoring flow of spec section 5 (harness/scoring/flow.py) with a recording ASR and judge.

Sample rate 1000 Hz: one sample is one millisecond. The recording ASR applies the backends'
shared input rule (:func:`harness.scoring.asr.prepare_input`: under 100 ms is ``""``) and
replies from a script; the recording judge keeps every call's arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from harness.audio.preamble import DUTY_TEXT
from harness.metrics.outcomes import conversation_outcomes, with_verdict
from harness.products.infer import InferRecord
from harness.products.windows import judge_verdict_counts
from harness.protocol.scheduler import ProtocolSettings
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.scoring.asr import Transcript, prepare_input
from harness.scoring.cache import CachedJudge, ContentCache
from harness.scoring.flow import JOIN_GAP_S, ConversationScorer, window_audio
from harness.scoring.judge import (
    BACKCHANNEL,
    CORRECT,
    EMPTY_TRANSCRIPT,
    UNPARSEABLE,
    ContextTurn,
    Cost,
    Verdict,
    answer_verdict,
    window_verdict,
)
from harness.scoring.judge.llm import AnthropicJudge
from harness.store.base import LocalStore
from tests.fixtures.fake_llm import FakeAnthropic

SR = 1000


class RecordingASR:
    name, version = "recording", "1"

    def __init__(self, replies: dict[int, str]):
        self.replies = replies  # audio length in samples -> transcript
        self.calls: list[tuple[np.ndarray, int, list[str]]] = []

    def transcribe(self, audio: np.ndarray, sample_rate: int, vocabulary: Sequence[str] = ()) -> Transcript:
        self.calls.append((np.array(audio), sample_rate, list(vocabulary)))
        y, _ = prepare_input(audio, sample_rate, vocabulary, sample_rate)
        return Transcript("" if y is None else self.replies[len(audio)])


class RecordingJudge:
    name, model, prompt_version = "recording", "r1", "r1"

    def __init__(self) -> None:
        self.answers: list[tuple[str, str, str]] = []
        self.windows: list[tuple[str, list[ContextTurn], float, float]] = []

    def judge_answer(self, transcript: str, gold: str, question: str) -> Verdict:
        self.answers.append((transcript, gold, question))
        return answer_verdict(CORRECT, "CORRECT", Cost(10, 1, 0.25))

    def classify_window(self, transcript: str, context: Sequence[ContextTurn], speech_s: float,
                        overlap_s: float) -> Verdict:
        self.windows.append((transcript, list(context), speech_s, overlap_s))
        return window_verdict(BACKCHANNEL, "BACKCHANNEL", Cost(20, 1, 0.5))


# -- window audio --------------------------------------------------------------------------

def test_window_audio_clips_segments_to_the_window_and_joins_them_with_100_ms_gaps():
    assert JOIN_GAP_S == 0.1
    output = np.arange(1, 1301, dtype=np.float32)  # sample i holds i + 1: the pieces are recognisable
    segments = np.array([[0, 50], [100, 300], [500, 700], [900, 1200], [1250, 1400]])
    # window [200, 1000): [0, 50) is outside; [100, 300) -> [200, 300); [500, 700) whole;
    # [900, 1200) -> [900, 1000); [1250, 1400) is outside
    x = window_audio(output, segments, 200, 1000, SR)
    gap = np.zeros(100, np.float32)
    expected = np.concatenate([output[200:300], gap, output[500:700], gap, output[900:1000]])
    assert x.dtype == np.float32 and x.shape == (100 + 100 + 200 + 100 + 100,)
    np.testing.assert_array_equal(x, expected)
    # a segment running past the stored output is cut at its end: [1250, 1300)
    np.testing.assert_array_equal(window_audio(output, segments, 1100, 2000, SR),
                                  np.concatenate([output[1100:1200], gap, output[1250:1300]]))
    assert window_audio(output, segments, 50, 100, SR).shape == (0,)  # between segments
    assert window_audio(output, np.zeros((0, 2), np.int64), 0, 1300, SR).shape == (0,)


# -- scoring a conversation ----------------------------------------------------------------
# turns (start, length in ms): 0 N2 [0, 1000), 1 N3 [1500, 2500), 2 N1 [3000, 4000),
# 3 T [4500, 6000) answered until the endpoint decision at 9000, 4 N2 [9500, 10500).
# Silence windows run from a turn's start to the next turn's start (the last: its end + 500).
SCENE = Scene("p5-explicit", "p5", "explicit", ("A", "B", "C"), (
    Turn("A", "Bob, grab the tickets.", Label.N2, Target.HUMAN),
    Turn("B", "Hmm, where is my scarf.", Label.N3, Target.NONE),
    Turn("C", "Aria is so handy.", Label.N1, Target.GROUP),
    Turn("A", "Aria, when does the bus leave?", Label.T, Target.ARIA),
    Turn("B", "Let's go then.", Label.N2, Target.HUMAN),
), "at nine fifteen")
RECORD = InferRecord.from_dict({
    "scene_id": "x", "status": "ok", "sample_rate": 1000,
    "placements": [{"turn": i, "start": s, "length": n} for i, (s, n) in
                   enumerate([(0, 1000), (1500, 1000), (3000, 1000), (4500, 1500), (9500, 1000)])],
    "events": [{"t": 9000, "kind": "endpoint", "turn": 3, "at": 9000}]})
SEGMENTS = np.array([
    [200, 800],  # window 0 [0, 1500): 600 ms, all of it over turn 0
    [2950, 3050],  # window 1 [1500, 3000) gets [2950, 3000): 50 ms, under 100 ms: heard as nothing;
    [4400, 4700],  # window 2 [3000, 4500) gets [3000, 3050) + [4400, 4500) = 150 ms, 50 ms over turn 2
    [6200, 7000], [7300, 7400],  # the T response window [6000, 9000): 800 + 100 ms
])  # window 4 [9500, 11000) is silent: no ASR, no judge


def _score(tmp_path, asr: RecordingASR, judge: RecordingJudge) -> dict:
    rows = conversation_outcomes(SCENE, RECORD, SEGMENTS, ProtocolSettings(sample_rate=SR))
    output = np.full(11_100, 0.25, np.float32)
    scorer = ConversationScorer(asr, judge, ContentCache(LocalStore(tmp_path), "asr"), SR, DUTY_TEXT)
    return scorer.score(SCENE, rows, output, SEGMENTS)


def test_score_transcribes_merged_windows_and_judges_them_with_the_right_inputs(tmp_path):
    # joined lengths: window 0: 600; window 1: 50; window 2: 50 + 100 + 100 = 250; T: 800 + 100 + 100 = 1000
    asr = RecordingASR({600: "mm hmm", 250: "okay", 1000: "at nine fifteen"})
    judge = RecordingJudge()
    out = _score(tmp_path, asr, judge)
    assert [len(a) for a, _, _ in asr.calls] == [600, 50, 250, 1000]  # script order; window 4 is silent
    assert all(sr == SR for _, sr, _ in asr.calls)
    room = [t.text for t in SCENE.turns] + [DUTY_TEXT]  # no gold answer by default (asr.bias_with_gold)
    assert all(vocab == room for _, _, vocab in asr.calls)
    t = SCENE.turns
    assert judge.windows == [
        ("mm hmm", [ContextTurn("A", t[0].text)], 0.6, 0.6),  # fewer than three turns so far
        ("okay", [ContextTurn(x.speaker, x.text) for x in t[0:3]], 0.15, 0.05),
    ]
    assert judge.answers == [("at nine fifteen", "at nine fifteen", "Aria, when does the bus leave?")]
    assert out == {
        "silence:0": {"transcript": "mm hmm", "label": BACKCHANNEL, "passed": True, "usd": 0.5},
        # 50 ms of speech: the recogniser hears nothing, the window fails without a judge call
        "silence:1": {"transcript": "", "label": EMPTY_TRANSCRIPT, "passed": False, "usd": 0.0},
        "silence:2": {"transcript": "okay", "label": BACKCHANNEL, "passed": True, "usd": 0.5},
        "T:3": {"transcript": "at nine fifteen", "label": CORRECT, "passed": True, "usd": 0.25},
    }


def test_score_context_is_the_three_turns_up_to_the_windows_own_and_empty_answers_fail(tmp_path):
    # window 4 gets 120 ms of speech, enough to be heard; the T response is heard as nothing
    segments = np.concatenate([SEGMENTS, [[10880, 11020]]])  # window 4 gets [10880, 11000)
    asr = RecordingASR({600: "mm hmm", 250: "okay", 120: "yeah"})
    judge = RecordingJudge()
    rows = conversation_outcomes(SCENE, RECORD, segments, ProtocolSettings(sample_rate=SR))
    # the T response window cut at 6299: [6200, 6299) is 99 ms of speech, an empty transcript
    rows = [{**r, "window_end": 6299} if r["kind"] == "T" else r for r in rows]
    scorer = ConversationScorer(asr, judge, ContentCache(LocalStore(tmp_path), "asr"), SR, DUTY_TEXT)
    out = scorer.score(SCENE, rows, np.full(11_100, 0.25, np.float32), segments)
    t = SCENE.turns
    # turns 2, 3, 4: the window's own turn and the two before it (the T turn is a human turn too)
    assert judge.windows[-1] == ("yeah", [ContextTurn(x.speaker, x.text) for x in t[2:5]], 0.12, 0.0)
    assert judge.answers == []
    assert out["T:3"] == {"transcript": "", "label": EMPTY_TRANSCRIPT, "passed": False, "usd": 0.0}


def test_score_caches_transcripts_by_audio_and_vocabulary(tmp_path):
    replies = {600: "mm hmm", 250: "okay", 1000: "at nine fifteen"}
    first = RecordingASR(replies)
    _score(tmp_path, first, RecordingJudge())
    again = RecordingASR(replies)
    out = _score(tmp_path, again, RecordingJudge())
    assert again.calls == [] and out["T:3"]["transcript"] == "at nine fifteen"
    biased = RecordingASR(replies)  # the vocabulary is part of the key: the biased run transcribes afresh
    rows = conversation_outcomes(SCENE, RECORD, SEGMENTS, ProtocolSettings(sample_rate=SR))
    ConversationScorer(biased, RecordingJudge(), ContentCache(LocalStore(tmp_path), "asr"), SR, DUTY_TEXT,
                       bias_with_gold=True).score(SCENE, rows, np.full(11_100, 0.25, np.float32), SEGMENTS)
    assert len(biased.calls) == 4
    assert biased.calls[0][2] == [t.text for t in SCENE.turns] + ["at nine fifteen", DUTY_TEXT]


@pytest.mark.parametrize("n", [99, 100])
def test_the_100_ms_rule_is_on_the_joined_window_audio(n):
    # the rule the backends share: fewer than sample_rate / 10 samples is not recognised
    y, _ = prepare_input(np.full(n, 0.25, np.float32), SR, (), SR)
    assert (y is None) == (n < 100)


def test_an_empty_transcript_is_never_judged_and_refused_items_are_asked_again_by_the_next_run(tmp_path):
    """The real judge cache under the flow: a judge that refuses everything leaves UNPARSEABLE verdicts,
    which the next run asks again, while the window heard as nothing is EMPTY_TRANSCRIPT in both runs,
    never sent and never cached (issue 19 item 5)."""
    store = LocalStore(tmp_path)
    rows = conversation_outcomes(SCENE, RECORD, SEGMENTS, ProtocolSettings(sample_rate=SR))

    def run(reply) -> tuple[dict, FakeAnthropic, CachedJudge]:
        fake = FakeAnthropic(reply)
        judge = CachedJudge(AnthropicJudge(client=fake), store, "judge")
        asr = RecordingASR({600: "mm hmm", 250: "okay", 1000: "at nine fifteen"})
        scorer = ConversationScorer(asr, judge, ContentCache(store, "asr"), SR, DUTY_TEXT)
        return scorer.score(SCENE, rows, np.full(11_100, 0.25, np.float32), SEGMENTS), fake, judge

    out, fake, judge = run("I would rather not label this.")
    assert {k: v["label"] for k, v in out.items()} == {"silence:0": UNPARSEABLE, "silence:1": EMPTY_TRANSCRIPT,
                                                       "silence:2": UNPARSEABLE, "T:3": UNPARSEABLE}
    assert len(fake.calls) == judge.misses == 3 and all(not v["passed"] for v in out.values())
    counts = judge_verdict_counts(with_verdict(r, out) for r in rows)["explicit"]
    assert counts["N3"] == {"items": 1, "empty_transcript": 1, "judged": 0, "unparseable": 0}  # window 1
    assert counts["N2"] == {"items": 1, "empty_transcript": 0, "judged": 1, "unparseable": 1}  # window 0
    assert counts["N1"]["unparseable"] == counts["T"]["unparseable"] == 1

    out, fake, judge = run(lambda prompt: BACKCHANNEL if "BACKCHANNEL" in prompt else CORRECT)
    assert (len(fake.calls), judge.retried, judge.hits) == (3, 3, 0)
    assert {k: v["label"] for k, v in out.items()} == {"silence:0": BACKCHANNEL, "silence:1": EMPTY_TRANSCRIPT,
                                                       "silence:2": BACKCHANNEL, "T:3": CORRECT}
    counts = judge_verdict_counts(with_verdict(r, out) for r in rows)["explicit"]
    assert sum(c["unparseable"] for c in counts.values()) == 0 and counts["N3"]["empty_transcript"] == 1
    assert len(list(store.list("judge"))) == 3  # the empty window has no entry

    _, fake, judge = run("never asked")
    assert (fake.calls, judge.hits) == ([], 3)
