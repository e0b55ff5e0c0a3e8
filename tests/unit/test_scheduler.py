"""Streaming scheduler (spec section 4): golden timelines against a fake model.

The timeline runs at 1000 Hz, so one sample is one millisecond; the detector frame is 10
samples. The scheduler is driven exactly like ``harness.runtime.runner.run_batch`` does: at
each frame boundary ``t`` it first decides from the detector's view of the frames before
``t``, then the model's probability for frame ``[t, t + 10)`` is pushed to the detector.
The fake model is a function of the scheduler's placements known so far (e.g. "speak from
500 ms after T ends"), so it reacts to the schedule like a real model would.

Protocol numbers (spec section 4): turn gap 500, fresh-onset window 5000 (inclusive),
endpoint 2000 of silence, cap 60000, N4 answering window 3000, tail 2000 (conf/protocol).
Detector: onset confirmed after 120 ms of speech, a pause final after 800 ms.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.metrics.outcomes import conversation_outcomes
from harness.products.infer import InferRecord
from harness.protocol.scheduler import ProtocolSettings, Scheduler
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.segments import SegmentRules, SpeechTracker

SR = 1000
FRAME = 10
PROTO = ProtocolSettings(sample_rate=SR)
N1, N2, N3, T, Q, R = Label.N1, Label.N2, Label.N3, Label.T, Label.N4_Q, Label.N4_R

Model = Callable[[Scheduler, int], bool]


def drive(lengths: list[int], labels: list[Label], model: Model, preamble: int = 0, max_t: int = 200_000,
          proto: ProtocolSettings = PROTO, frame: int = FRAME,
          step: int | None = None, horizon: int | None = None) -> tuple[Scheduler, list[tuple[int, int]]]:
    """Run a scheduler against ``model`` the way the runner does; return it and the final segments.

    ``horizon``: keep detecting the model's frames up to this sample after the stream ended, so
    that speech still running at the end is segmented the same whatever the stream's length.

    The runner decides once per native model step of ``step`` samples (default: one detector
    frame), then pushes the step's output to the detector, which processes every frame that is
    complete by the step's end. ``model(sched, a)`` says whether frame ``[a, a + frame)`` is
    speech (probability 1.0, else 0.0); it is asked when the frame is produced.
    """
    step = frame if step is None else step
    sched = Scheduler(lengths, labels, preamble, proto)
    tracker = SpeechTracker(1, frame, SegmentRules(), proto.sample_rate)
    t, pushed = 0, 0
    while True:
        sched.advance(t, tracker.view(0))
        if sched.done and t >= sched.end:
            break
        assert t < max_t, "scheduler never finished"
        n = (t + step) // frame - pushed
        probs = [1.0 if model(sched, (pushed + k) * frame) else 0.0 for k in range(n)]
        tracker.push(np.array([probs], np.float32).reshape(1, n))
        pushed += n
        t += step
    if horizon is not None and horizon // frame > pushed:
        tracker.push(np.array([[1.0 if model(sched, k * frame) else 0.0 for k in range(pushed, horizon // frame)]],
                              np.float32))
    tracker.finish()
    return sched, tracker.segments(0)


def silent(sched: Scheduler, t: int) -> bool:
    return False


def after_t_end(*spans: tuple[float, float]) -> Model:
    """Speech in ``[T end + a, T end + b)`` for each span (``b`` may be ``math.inf``)."""
    def model(sched: Scheduler, t: int) -> bool:
        e = sched.turn_placement(sched.labels.index(T)).end
        return any(e + a <= t < e + b for a, b in spans)
    return model


def events(sched: Scheduler) -> list[tuple]:
    return [(e.kind, e.t, e.turn, e.at) for e in sched.events]


def places(sched: Scheduler) -> list[tuple]:
    return [(p.turn, p.start, p.length) for p in sched.placements]


# Ordinary scene: N2 [0, 1000), N1 [1500, 2700), T [3200, 5200), then N3 (700) and N2 (900)
# placed after the T decision at D: N3 at D, N2 at D + 700 + 500, stream end D + 1200 + 900 + 2000.
LENGTHS = [1000, 1200, 2000, 700, 900]
LABELS = [N2, N1, T, N3, N2]
E = 5200  # T end


def scripted_head() -> list[tuple]:
    return [("turn_start", 0, 0, None), ("turn_start", 1500, 1, None), ("turn_start", 3200, 2, None)]


def tail_after(d: int) -> tuple[list[tuple], list[tuple], int]:
    """(events, placements, end) of the two turns placed from the decision time ``d``."""
    evs = [("turn_start", d, 3, None), ("turn_start", d + 1200, 4, None), ("stream_end", d + 4100, None, None)]
    pls = [(3, d, 700), (4, d + 1200, 900)]
    return evs, pls, d + 4100


def check(sched: Scheduler, decision_events: list[tuple], d: int) -> None:
    evs, pls, end = tail_after(d)
    assert events(sched) == scripted_head() + decision_events + evs
    assert places(sched) == [(0, 0, 1000), (1, 1500, 1200), (2, 3200, 2000), *pls]
    assert sched.done and sched.end == end


# -- scripted part -------------------------------------------------------------------------

def test_ordinary_turns_and_silent_model():
    sched, segs = drive(LENGTHS, LABELS, silent)
    assert segs == []
    # turns 500 apart; T ends at 5200. The detector knows "silent at 5200" once frame
    # [5200, 5210) is processed -> decision at 5210. No onset by 5200 + 5000 = 10200: known
    # when frame [10200, 10210) is processed -> no_onset at t=10210, rule time 10200; the next
    # turn starts at the decision time 10210; stream end = last end 12310 + tail 2000.
    check(sched, [("t_end_silent", 5210, 2, 5200), ("no_onset", 10210, 2, 10200)], 10210)
    assert sched.events[3].reason.startswith("model silent")
    assert [e.reason for e in sched.events[:3]] == ["N2", "N1", "T"]


def test_gaps_between_scripted_turns_are_exactly_500():
    sched, _ = drive(LENGTHS, LABELS, silent)
    p = sched.placements
    assert [p[i + 1].start - p[i].end for i in (0, 1, 3)] == [500, 500, 500]


def test_preamble_first_then_turns():
    sched, _ = drive([1000, 2000, 800], [N2, T, N3], silent, preamble=3000)
    # preamble [0, 3000); N2 at 3000 + 500; T [5000, 7000); silent -> no_onset at 12010;
    # N3 at 12010, ends 12810; end 14810
    assert places(sched) == [(None, 0, 3000), (0, 3500, 1000), (1, 5000, 2000), (2, 12010, 800)]
    assert events(sched) == [("preamble_start", 0, None, None), ("turn_start", 3500, 0, None),
                             ("turn_start", 5000, 1, None), ("t_end_silent", 7010, 1, 7000),
                             ("no_onset", 12010, 1, 12000), ("turn_start", 12010, 2, None),
                             ("stream_end", 14810, None, None)]
    assert sched.end == 14810


def test_placements_before_t_are_fixed_at_construction():
    # N4 before T: N2 [0, 1000), N4_Q [1500, 3000), N4_R at 3000 + 3000, T at 7000 + 500
    sched = Scheduler([1000, 1500, 1000, 2000, 800], [N2, Q, R, T, N3], 0, PROTO)
    assert places(sched) == [(0, 0, 1000), (1, 1500, 1500), (2, 6000, 1000), (3, 7500, 2000)]
    assert events(sched) == [("turn_start", 0, 0, None), ("turn_start", 1500, 1, None),
                             ("n4_answer_window", 3000, 1, 6000), ("turn_start", 6000, 2, None),
                             ("turn_start", 7500, 3, None)]
    assert not sched.done and sched.end is None


@pytest.mark.parametrize(("lengths", "labels", "preamble", "message"), [
    ([1000, 2000], [N2, T, N3], 0, "equal length"),  # lengths and labels differ
    ([], [], 0, "non-empty"),  # empty
    ([1000, 0, 800], [N2, T, N3], 0, "must be positive"),  # zero-length clip
    ([1000, 2000, -5], [N2, T, N3], 0, "must be positive"),  # negative clip
    ([1000, 2000, 800], [N2, T, N3], -1, "must be positive"),  # negative preamble
])
def test_rejects_bad_lengths(lengths, labels, preamble, message):
    with pytest.raises(ValueError, match=message):
        Scheduler(lengths, labels, preamble, PROTO)


# -- after T: fresh-onset window -----------------------------------------------------------

def test_onset_exactly_at_window_end_counts():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((5000, 6000)))
    # speech [10200, 11200); onset at 10200 = T end + 5000 (inclusive), confirmed after 120
    # ms at 10320; closed at 11200 + 800; endpoint 11200 + 2000 = 13200, known at 13200
    assert segs == [(10200, 11200)]
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 10320, 2, 10200),
                  ("endpoint", 13200, 2, 13200)], 13200)


def test_onset_one_frame_late_does_not_count():
    sched, _ = drive(LENGTHS, LABELS, after_t_end((5010, 6000)))
    # nothing started by 10200: once frame [10200, 10210) is seen silent, the window is over
    check(sched, [("t_end_silent", 5210, 2, 5200), ("no_onset", 10210, 2, 10200)], 10210)


def test_answer_500ms_after_t_for_2s():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((500, 2500)))
    # speech [5700, 7700): onset 5700 confirmed at 5820; final at 8500; endpoint 7700 + 2000
    assert segs == [(5700, 7700)]
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 5820, 2, 5700),
                  ("endpoint", 9700, 2, 9700)], 9700)


def test_silent_at_t_end_waits_for_the_detector():
    # speech [4600, 4900) during T; at T end the pause may still be merged, so the scheduler
    # waits until the segment is final: 4900 + 800 = 5700, then "silent at T end"
    sched, segs = drive(LENGTHS, LABELS, after_t_end((-600, -300)))
    assert segs == [(4600, 4900)]
    check(sched, [("t_end_silent", 5700, 2, 5200), ("no_onset", 10210, 2, 10200)], 10210)


# -- after T: model speaking at T end ------------------------------------------------------

def test_speaking_at_t_end_endpoint_from_its_end():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((-1000, 1500)))
    # speech [4200, 6700) covers 5200: known once frame [5200, 5210) is active -> 5210;
    # endpoint 6700 + 2000 = 8700
    assert segs == [(4200, 6700)]
    check(sched, [("t_end_speaking", 5210, 2, 5200), ("endpoint", 8700, 2, 8700)], 8700)


def test_speech_starting_exactly_at_t_end_is_speaking():
    # [5200, 6200): covers sample 5200 (half-open intervals); confirmed 120 ms later at 5320
    sched, _ = drive(LENGTHS, LABELS, after_t_end((0, 1000)))
    check(sched, [("t_end_speaking", 5320, 2, 5200), ("endpoint", 8200, 2, 8200)], 8200)


def test_cap_speaking_branch_from_t_end():
    sched, _ = drive(LENGTHS, LABELS, after_t_end((-500, math.inf)))
    # never stops: cap at T end + 60000 = 65200
    check(sched, [("t_end_speaking", 5210, 2, 5200), ("cap", 65200, 2, 65200)], 65200)


def test_cap_fresh_branch_from_onset():
    sched, _ = drive(LENGTHS, LABELS, after_t_end((1000, math.inf)))
    # onset 6200 (confirmed 6320); cap at onset + 60000 = 66200
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 6320, 2, 6200), ("cap", 66200, 2, 66200)], 66200)


# -- after T: the endpoint -----------------------------------------------------------------

def test_short_pause_inside_answer_does_not_end_it():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((500, 1500), (2200, 3000)))
    # pause 6700..7400 = 700 ms < 800: one segment [5700, 8200); endpoint 10200 (not 6700 + 2000)
    assert segs == [(5700, 8200)]
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 5820, 2, 5700),
                  ("endpoint", 10200, 2, 10200)], 10200)


def test_pause_of_1500_does_not_trigger_endpoint():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((500, 1500), (3000, 4000)))
    # two segments; after the first (end 6700) speech resumes at 8200 < 6700 + 2000, so the
    # endpoint is 9200 + 2000 = 11200
    assert segs == [(5700, 6700), (8200, 9200)]
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 5820, 2, 5700),
                  ("endpoint", 11200, 2, 11200)], 11200)


def test_blip_after_answer_does_not_reset_endpoint():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((500, 2500), (4400, 4450)))
    # answer [5700, 7700), endpoint 9700. A 50 ms blip [9600, 9650) is a candidate until its
    # pause reaches 800 ms at 10450, when it is dropped: the decision is taken at 10450 with
    # the rule time unchanged (9700); the next turn starts at the decision time
    assert segs == [(5700, 7700)]
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 5820, 2, 5700),
                  ("endpoint", 10450, 2, 9700)], 10450)


def test_blip_within_min_silence_is_merged_into_answer():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((500, 2500), (3000, 3050)))
    # blip [8200, 8250) 500 ms after the answer: pause < 800 -> merged, speech ends 8250
    assert segs == [(5700, 8250)]
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 5820, 2, 5700),
                  ("endpoint", 10250, 2, 10250)], 10250)


def test_new_speech_segment_within_2s_resets_endpoint():
    sched, segs = drive(LENGTHS, LABELS, after_t_end((500, 2500), (4000, 4200)))
    # [9200, 9400) is 200 ms of real speech 1500 ms after the answer: endpoint 9400 + 2000
    assert segs == [(5700, 7700), (9200, 9400)]
    check(sched, [("t_end_silent", 5210, 2, 5200), ("onset", 5820, 2, 5700),
                  ("endpoint", 11400, 2, 11400)], 11400)


# -- N4 -------------------------------------------------------------------------------------

N4_LENGTHS = [1000, 2000, 1505, 1200, 800]  # N4_Q 1505: not a multiple of the frame
N4_LABELS = [N2, T, Q, R, N3]


def talks_through_n4(sched: Scheduler, t: int) -> bool:
    q = sched.turn_placement(2)
    return q is not None and q.start + 500 <= t < q.end + 10_000


@pytest.mark.parametrize("model", [silent, talks_through_n4], ids=["silent", "talking"])
def test_n4_r_starts_exactly_3000_after_n4_q(model):
    sched, _ = drive(N4_LENGTHS, N4_LABELS, model, preamble=3000)
    # preamble [0, 3000); N2 3500; T [5000, 7000); silent after T -> no_onset at 12010;
    # N4_Q [12010, 13515); N4_R at 13515 + 3000 = 16515 whatever the model does, ends 17715;
    # N3 at 18215, ends 19015; end 21015
    assert places(sched) == [(None, 0, 3000), (0, 3500, 1000), (1, 5000, 2000), (2, 12010, 1505),
                             (3, 16515, 1200), (4, 18215, 800)]
    assert events(sched)[-5:] == [("turn_start", 12010, 2, None), ("n4_answer_window", 13515, 2, 16515),
                                  ("turn_start", 16515, 3, None), ("turn_start", 18215, 4, None),
                                  ("stream_end", 21015, None, None)]
    assert sched.end == 21015


# -- the scheduler's decisions agree with the offline outcomes -----------------------------

SPAN = st.tuples(st.integers(-150, 700), st.integers(1, 300)).map(lambda x: (x[0] * 10, x[0] * 10 + x[1] * 10))


def _scene(labels: list[Label]) -> Scene:
    return Scene("p1-explicit", "p1", "explicit", ("A", "B", "C"),
                 tuple(Turn("ABC"[i % 3], f"turn {i}", lab, Target.ARIA if lab is T else Target.HUMAN)
                       for i, lab in enumerate(labels)), gold_answer="x")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spans=st.lists(SPAN, max_size=3))
def test_online_decisions_match_offline_outcomes(spans):
    """Decisions taken online from the causal view agree with outcomes from the final segments."""
    sched, segs = drive(LENGTHS, LABELS, after_t_end(*spans))
    record = InferRecord("x", "ok", "", PROTO.sample_rate, None, None, tuple(sched.placements), tuple(sched.events))
    row = next(r for r in conversation_outcomes(_scene(LABELS), record, np.array(segs).reshape(-1, 2), PROTO)
               if r["kind"] == "T")
    by_kind = {e.kind: e for e in sched.events}
    assert row["speaking_at_end"] == ("t_end_speaking" in by_kind)
    assert ("t_end_silent" in by_kind) != ("t_end_speaking" in by_kind)
    assert row["fresh_onset"] == ("onset" in by_kind)
    if "onset" in by_kind:
        assert row["onset"] == by_kind["onset"].at
    assert row["response_presence"] == (row["decision"] != "no_onset")
    if row["decision"] == "no_onset":
        assert row["window_end"] == E + 5000
    else:
        # spans end by T end + 10000: never capped; the endpoint is 2 s after the last speech
        # that started before it
        assert row["decision"] == "endpoint"
        last = max(e for s, e in segs if s < row["window_end"])
        assert row["window_end"] == last + 2000


def test_t_as_last_turn_is_rejected():
    with pytest.raises(ValueError, match="followed by more talk"):
        Scheduler([100, 100], [Label.N2, Label.T], 0, ProtocolSettings(sample_rate=1000))


# -- native model steps at the 24 kHz timeline --------------------------------------------
# The runner decides once per native model step (80 ms to about 1 s), so the detector has often
# processed frames past a rule time when the scheduler looks. The rule times must not depend on
# that. Timeline 24 kHz, detector frames of 32 ms = 768 samples; a frame is speech when its
# first sample is (``drive``), so speech edges round up to the frame grid: up(x).
# Scene: N2 [0, 24000), T [36000, 84000) (T end 84000), then N3 (1 s) and N2 (1.5 s) from the
# T decision. The model answers from 0.3 s after T (plus ``offset``) for 3 s, pauses, talks 3 s.

SR24, F24 = 24_000, 768
PROTO24 = ProtocolSettings()
LENGTHS24 = [24_000, 48_000, 24_000, 36_000]
LABELS24 = [N2, T, N3, N2]
E24 = 84_000
STEPS = {"80ms": 1920, "160ms": 3840, "0.5s": 12_000, "1s": 24_000, "1.035s": 24_840}


def up(x: int) -> int:
    """The frame boundary at or after sample ``x``."""
    return -(-x // F24) * F24


def answer_pause_answer(offset: int, pause: int) -> Model:
    a = E24 + 7200 + offset
    return after_t_end((a - E24, a - E24 + 72_000), (a - E24 + 72_000 + pause, a - E24 + 144_000 + pause))


def run24(model: Model, step: int, proto: ProtocolSettings = PROTO24, lengths: list[int] = LENGTHS24,
          labels: list[Label] = LABELS24, horizon: int | None = None,
          ) -> tuple[Scheduler, list[tuple[int, int]], list[dict]]:
    sched, segs = drive(lengths, labels, model, proto=proto, frame=F24, step=step, max_t=400 * SR24, horizon=horizon)
    record = InferRecord("x", "ok", "", proto.sample_rate, None, None, tuple(sched.placements), tuple(sched.events))
    rows = conversation_outcomes(_scene(labels), record, np.array(segs, np.int64).reshape(-1, 2), proto)
    return sched, segs, rows


def t_decision(sched: Scheduler):
    (ev,) = [e for e in sched.events if e.kind in ("endpoint", "no_onset", "cap")]
    return ev


def test_pause_of_2016ms_ends_the_response_golden():
    # 80 ms steps, offset 100: answer [91300, 163300) -> segment [up, up) = [91392, 163584);
    # the pause of 2.016 s = 63 frames: second utterance [211684, 283684) -> [211968, 284160).
    # Endpoint = 163584 + 48000 = 211584, known once the detector's clock reaches it: after
    # frame 275 ([211200, 211968)), first seen at the step t = 213120 (frames up to 212736),
    # when the detector already holds the next utterance's first frame (a candidate from
    # 211968 >= 211584: not the response). N3 is placed at 213120; its window runs from the
    # rule time 211584 to N2's start 213120 + 24000 + 12000 = 249120 and holds
    # 249120 - 211968 = 37152 samples of the second utterance: it fails.
    sched, segs, rows = run24(answer_pause_answer(100, 48_384), 1920)
    assert segs == [(91392, 163584), (211968, 284160)]
    ev = t_decision(sched)
    assert (ev.kind, ev.at, ev.t) == ("endpoint", 211_584, 213_120)
    assert sched.turn_placement(2).start == 213_120
    t_row, n3 = rows[1], rows[2]
    assert (t_row["window_end"], t_row["onset"], t_row["fresh_onset"]) == (211_584, 91_392, True)
    assert t_row["speech_s"] == 72_192 / SR24  # 3.008 s: the first answer only
    assert (n3["label"], n3["start"], n3["turn_start"], n3["window_end"]) == ("N3", 211_584, 213_120, 249_120)
    assert (n3["speech_s"], n3["silent"]) == (37_152 / SR24, False)


def test_pause_of_1984ms_merges_into_one_response_golden():
    # as above with a pause of 1.984 s = 62 frames: the second utterance [210916, 282916) ->
    # [211200, 283392) starts before 163584 + 48000 = 211584, so it is response speech; the
    # endpoint is 283392 + 48000 = 331392, after frame 431 -> first seen at t = 332160 (173
    # steps). Both utterances are in the T window (6.016 s); N3's window [331392, ...) is silent.
    sched, segs, rows = run24(answer_pause_answer(100, 47_616), 1920)
    assert segs == [(91392, 163584), (211200, 283392)]
    ev = t_decision(sched)
    assert (ev.kind, ev.at, ev.t) == ("endpoint", 331_392, 332_160)
    t_row, n3 = rows[1], rows[2]
    assert (t_row["window_end"], t_row["speech_s"]) == (331_392, 144_384 / SR24)
    assert (n3["start"], n3["turn_start"], n3["silent"]) == (331_392, 332_160, True)


@pytest.mark.parametrize("phase", range(5))
@pytest.mark.parametrize("step", list(STEPS.values()), ids=list(STEPS))
def test_speech_after_the_endpoint_is_never_the_response(step, phase):
    # the answer's start moves by phase * step / 5 (plus 100 samples, off the frame grid), so
    # the rule time falls at five places inside a native step; it is always the first answer's
    # end + 2.000 s, and the second utterance (2.016 s later) always fails the N3 window
    offset = 100 + phase * step // 5
    a = E24 + 7200 + offset
    first = (up(a), up(a + 72_000))
    second = (up(a + 72_000 + 48_384), up(a + 144_000 + 48_384))
    assert second[0] == first[1] + 48_384  # the detector sees the whole 2.016 s pause
    sched, segs, rows = run24(answer_pause_answer(offset, 48_384), step)
    assert segs == [first, second]
    ev = t_decision(sched)
    assert (ev.kind, ev.at) == ("endpoint", first[1] + 48_000)
    # decided as soon as the detector's clock passes the rule time: within a step and a frame
    assert ev.at <= ev.t < ev.at + step + F24
    t_row, n3 = rows[1], rows[2]
    assert (t_row["window_end"], t_row["speech_s"]) == (first[1] + 48_000, (first[1] - first[0]) / SR24)
    n3_end = ev.t + 24_000 + 12_000
    assert (n3["start"], n3["window_end"]) == (ev.at, n3_end)
    assert (n3["speech_s"], n3["silent"]) == ((n3_end - second[0]) / SR24, False)


@pytest.mark.parametrize("phase", range(5))
@pytest.mark.parametrize("step", list(STEPS.values()), ids=list(STEPS))
def test_late_onset_never_counts_however_late_the_decision(step, phase):
    # speech from T end + 5 s + 1 frame (up to the frame grid): after the inclusive window
    # (T end + 120000), whatever the step; the no-onset rule time is the deadline
    offset = phase * step // 5
    start = up(E24 + 120_001) + offset
    sched, _, rows = run24(after_t_end((start - E24, start - E24 + 48_000)), step)
    ev = t_decision(sched)
    assert (ev.kind, ev.at) == ("no_onset", E24 + 120_000)
    assert rows[1]["fresh_onset"] is False and rows[1]["response_presence"] is False
    assert rows[2]["silent"] is False  # the late speech is in N3's window, which starts at 204000
    assert rows[2]["start"] == E24 + 120_000


@pytest.mark.parametrize("phase", range(5))
@pytest.mark.parametrize("step", list(STEPS.values()), ids=list(STEPS))
def test_cap_rule_time_does_not_depend_on_the_step(step, phase):
    # cap of 8 s here: an answer from 0.3 s after T for 7.9 s, a pause of 1 s (< 2 s), then
    # endless speech: no endpoint by onset + 8 s, so the cap's rule time is the onset + 192000
    proto = ProtocolSettings(response_cap_s=8.0)
    offset = 100 + phase * step // 5
    a = E24 + 7200 + offset
    sched, segs, rows = run24(after_t_end((a - E24, a - E24 + 189_600), (a - E24 + 213_600, math.inf)), step,
                              proto=proto)
    assert segs[0] == (up(a), up(a + 189_600)) and segs[1][0] == up(a + 213_600)
    ev = t_decision(sched)
    assert (ev.kind, ev.at) == ("cap", up(a) + 192_000)
    assert ev.at <= ev.t < ev.at + step + F24
    assert rows[1]["window_end"] == up(a) + 192_000


@pytest.mark.parametrize("phase", range(5))
@pytest.mark.parametrize("step", list(STEPS.values()), ids=list(STEPS))
def test_cap_waits_for_a_candidate_before_an_earlier_endpoint(step, phase):
    # cap of 8 s: an answer of 5.5 s from the onset ends its segment at up(a + 132000), so the
    # endpoint (its end + 2 s, by onset + 7.53 s) comes before the cap (onset + 8 s). A 64 ms
    # blip 7.3 s after the onset starts before the endpoint: it may still become speech until
    # it is dropped, 800 ms after it, past the cap. The scheduler waits for it; the response
    # ended at the endpoint, not at the cap
    proto = ProtocolSettings(response_cap_s=8.0)
    offset = 100 + phase * step // 5
    a = E24 + 7200 + offset
    sched, segs, rows = run24(after_t_end((a - E24, a - E24 + 132_000), (a - E24 + 175_200, a - E24 + 176_736)),
                              step, proto=proto)
    assert segs == [(up(a), up(a + 132_000))]
    ev = t_decision(sched)
    assert (ev.kind, ev.at) == ("endpoint", up(a + 132_000) + 48_000)
    assert ev.at < up(a) + 192_000 < ev.t  # decided after the cap's time, at the earlier rule time
    assert rows[1]["window_end"] == ev.at


# -- property: the rule times do not depend on the native step or its phase -----------------

T_KINDS = ("t_end_speaking", "t_end_silent", "onset", "endpoint", "no_onset", "cap")
PROTO24_CAP8 = ProtocolSettings(response_cap_s=8.0)  # a short cap, so random speech reaches it


def rule_from_segments(segs: list[tuple[int, int]], t_end: int, proto: ProtocolSettings) -> tuple[str, int]:
    """The T decision's (kind, rule time) from the final segments (spec section 4, written out)."""
    window, silence, cap_s = proto.s(proto.fresh_onset_window_s), proto.s(proto.endpoint_silence_s), \
        proto.s(proto.response_cap_s)
    if any(a <= t_end < b for a, b in segs):
        anchor = t_end
    else:
        onsets = [a for a, _ in segs if a >= t_end]
        if not onsets or onsets[0] > t_end + window:
            return "no_onset", t_end + window
        anchor = onsets[0]
    response = [(a, b) for a, b in segs if b > t_end]
    end = response[0][1]
    for a, b in response[1:]:
        if a >= end + silence:
            break
        end = b
    return ("endpoint", end + silence) if end + silence <= anchor + cap_s else ("cap", anchor + cap_s)


SPAN24 = st.tuples(st.integers(-72_000, 240_000), st.integers(500, 120_000)).map(lambda x: (x[0], x[0] + x[1]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spans=st.lists(SPAN24, max_size=4), step=st.integers(300, 26_000), phase=st.integers(0, 4))
def test_rule_times_do_not_depend_on_the_native_step(spans, step, phase):
    """For any speech after T, any native step and any phase of it, the T decisions' rule times
    equal those of a run deciding at every detector frame and the rule written out on the final
    segments; speech starting at or after the T window's end is never inside it."""
    shift = phase * step // 5
    model = after_t_end(*[(a + shift, b + shift) for a, b in spans])
    # detected past the end of either stream: speech still running when a stream ended (whose end
    # depends on the decision time, so on the step) is segmented the same in both runs
    horizon = E24 + 400_000
    runs = [run24(model, s, proto=PROTO24_CAP8, horizon=horizon) for s in (step, F24)]
    (sched, segs, rows), (sched1, segs1, _) = runs
    assert segs == segs1  # the model does not react to the decision: same speech either way
    rules = [[(e.kind, e.at) for e in s.events if e.kind in T_KINDS] for s in (sched, sched1)]
    assert rules[0] == rules[1]
    ev = t_decision(sched)
    assert (ev.kind, ev.at) == rule_from_segments(segs, E24, PROTO24_CAP8)
    assert ev.at <= ev.t
    t_row = rows[1]
    assert t_row["window_end"] == ev.at
    inside = sum(max(0, min(b, ev.at) - max(a, E24)) for a, b in segs if a < ev.at)
    assert t_row["speech_s"] == inside / SR24
    if ev.kind == "endpoint":
        # the response's last speech ended 2 s before the rule time; nothing started in between
        assert max(b for a, b in segs if b > E24 and a < ev.at) == ev.at - 48_000
    # the turn after the wait is scored from the rule time on, whenever it was placed
    assert (rows[2]["start"], rows[2]["turn_start"]) == (ev.at, ev.t)


def test_a_stopped_detector_is_never_taken_for_silence():
    # the detector's clock stops at 6000 (silence so far) while the stream runs on for 100 s:
    # "silent at T end" is known, the onset window (to 10200) is not, so no_onset is never
    # decided (the runner's duration limit then fails the stream: an error, not silence)
    sched = Scheduler(LENGTHS, LABELS, 0, PROTO)
    tracker = SpeechTracker(1, FRAME, SegmentRules(), SR)
    tracker.push(np.zeros((1, 600), np.float32))
    for t in range(0, 105_200, FRAME):
        sched.advance(t, tracker.view(0))
    assert events(sched) == [*scripted_head(), ("t_end_silent", 5200, 2, 5200)]
    assert sched.phase == "t_fresh" and not sched.done
