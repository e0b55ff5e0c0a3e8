"""Per-window outcomes and scores (spec section 5) on hand-built records.

ProtocolSettings(sample_rate=1000): one sample is one millisecond. Turn gap 500, fresh-onset
window 5000 (inclusive), N4 answering window 3000, yield deadline N4_R start + 2000.
Segments are half-open ``[start, end)`` in samples.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.metrics.outcomes import Speech, conversation_outcomes, n4_outcome
from harness.metrics.scores import condition_scores
from harness.products.infer import InferRecord
from harness.protocol.scheduler import ProtocolSettings
from harness.scenes.schema import Label, Scene, Target, Turn

PROTO = ProtocolSettings(sample_rate=1000)
N1, N2, N3, T, Q, R = Label.N1, Label.N2, Label.N3, Label.T, Label.N4_Q, Label.N4_R
TARGETS = {N1: Target.GROUP, N2: Target.HUMAN, N3: Target.NONE, T: Target.ARIA, Q: Target.ARIA, R: Target.ARIA}


def scene(*labels: Label) -> Scene:
    return Scene("p7-explicit", "p7", "explicit", ("A", "B", "C"),
                 tuple(Turn("ABC"[i % 3], f"turn {i}", lab, TARGETS[lab]) for i, lab in enumerate(labels)),
                 gold_answer="at nine")


def record(placements: list[tuple[int, int]], *events: dict) -> InferRecord:
    """``placements``: ``(start, length)`` per turn in order."""
    return InferRecord.from_dict({"scene_id": "x", "status": "ok", "sample_rate": 1000,
                                  "placements": [{"turn": i, "start": s, "length": n}
                                                 for i, (s, n) in enumerate(placements)], "events": list(events)})


def rows_of(sc: Scene, rec: InferRecord, segments: list[list[int]]) -> list[dict]:
    return conversation_outcomes(sc, rec, np.array(segments, dtype=np.int64).reshape(-1, 2), PROTO)


# -- T ---------------------------------------------------------------------------------------
# N2 [0, 1000), T [1500, 3500) (T end 3500, onset window up to 8500 inclusive), N3 at the
# decision time d.

T_SCENE = scene(N2, T, N3)


def t_row(segments: list[list[int]], decision: dict) -> dict:
    d = decision["t"]
    rows = rows_of(T_SCENE, record([(0, 1000), (1500, 2000), (d, 800)], decision), segments)
    (row,) = [r for r in rows if r["kind"] == "T"]
    assert (row["turn"], row["label"], row["start"], row["end"]) == (1, "T", 1500, 3500)
    return row


def endpoint(at: int, t: int | None = None) -> dict:
    return {"t": at if t is None else t, "kind": "endpoint", "turn": 1, "at": at}


NO_ONSET = {"t": 8510, "kind": "no_onset", "turn": 1, "at": 8500}

# name: (segments, decision event, expected subset of the row)
T_CASES = {
    # onset at exactly T end + 5.000 s counts; the endpoint 9500 + 2000 closes the window
    "onset_at_5s": ([[8500, 9500]], endpoint(11500),
                    {"speaking_at_end": False, "onset": 8500, "fresh_onset": True, "response_presence": True,
                     "speech_s": 1.0, "window_end": 11500, "decision": "endpoint"}),
    # onset at T end + 5.001 s does not; the no-onset window ends at 8500, before the speech
    "onset_at_5001ms": ([[8501, 9501]], NO_ONSET,
                        {"speaking_at_end": False, "onset": None, "fresh_onset": False,
                         "response_presence": False, "speech_s": 0.0, "window_end": 8500, "decision": "no_onset"}),
    # speech covering T end: never fresh, but present (1500 samples inside [3500, 7000))
    "covering_t_end": ([[3000, 5000]], endpoint(7000),
                       {"speaking_at_end": True, "onset": None, "fresh_onset": False, "response_presence": True,
                        "speech_s": 1.5}),
    # covering speech then a new segment within 5 s: still not fresh (never credited twice)
    "covering_then_new_onset": ([[3000, 4000], [5000, 6000]], endpoint(8000),
                                {"speaking_at_end": True, "onset": 5000, "fresh_onset": False,
                                 "response_presence": True, "speech_s": 1.5}),
    # speech ending exactly at T end does not cover it: the later onset is fresh
    "ends_at_t_end": ([[3000, 3500], [4000, 4500]], endpoint(6500),
                      {"speaking_at_end": False, "onset": 4000, "fresh_onset": True, "response_presence": True,
                       "speech_s": 0.5}),
    # speech starting exactly at T end covers sample 3500: speaking at the end, not fresh
    "starts_at_t_end": ([[3500, 4500]], endpoint(6500),
                        {"speaking_at_end": True, "onset": None, "fresh_onset": False, "response_presence": True,
                         "speech_s": 1.0}),
    # silent model
    "silent": ([], NO_ONSET, {"speaking_at_end": False, "onset": None, "fresh_onset": False,
                              "response_presence": False, "speech_s": 0.0}),
    # the window ends at the rule time "at" (7000), not at the decision time t (7750)
    "window_end_is_at": ([[4000, 5000]], endpoint(7000, t=7750),
                         {"window_end": 7000, "fresh_onset": True, "speech_s": 1.0}),
    # endless speech capped at onset + 60 s = 64000: 60 s of speech in [3500, 64000)
    "capped": ([[4000, 70_000]], {"t": 64_000, "kind": "cap", "turn": 1, "at": 64_000},
               {"window_end": 64_000, "decision": "cap", "fresh_onset": True, "speech_s": 60.0}),
}


@pytest.mark.parametrize("name", list(T_CASES))
def test_t_outcomes(name):
    segments, decision, want = T_CASES[name]
    row = t_row(segments, decision)
    assert {k: row[k] for k in want} == want


def test_speech_after_the_decision_belongs_to_the_next_window():
    # answer [4000, 5000), endpoint 7000; N3 [7000, 7800) with the model talking at [7500, 8000)
    rows = rows_of(T_SCENE, record([(0, 1000), (1500, 2000), (7000, 800)], endpoint(7000)),
                   [[4000, 5000], [7500, 8000]])
    t, n3 = rows[1], rows[2]
    assert (t["kind"], t["speech_s"]) == ("T", 1.0)  # window [3500, 7000): 1000 samples
    # N3 is the last turn: window [7000, 7800 + 500) holds [7500, 8000): 500 samples
    assert (n3["kind"], n3["window_end"], n3["speech_s"], n3["silent"]) == ("silence", 8300, 0.5, False)


def test_decision_latency_speech_is_in_the_next_silence_window():
    # answer [4000, 5000): endpoint rule time 7000, decided (N3 placed) only at 7750. Speech at
    # [7200, 7400) starts after the rule time: not the T response (its window ends at 7000) but
    # speech after it, in the N3 window [7000, 7750 + 800 + 500 = 9050), which it fails; it does
    # not overlap the human N3 turn [7750, 8550)
    rows = rows_of(T_SCENE, record([(0, 1000), (1500, 2000), (7750, 800)], endpoint(7000, t=7750)),
                   [[4000, 5000], [7200, 7400]])
    t, n3 = rows[1], rows[2]
    assert (t["window_end"], t["speech_s"]) == (7000, 1.0)
    assert (n3["start"], n3["turn_start"], n3["end"], n3["window_end"]) == (7000, 7750, 8550, 9050)
    assert (n3["speech_s"], n3["silent"], n3["overlap_s"]) == (0.2, False, 0.0)


def test_inconsistent_records_raise():
    with pytest.raises(ValueError, match="no T decision"):
        rows_of(T_SCENE, record([(0, 1000), (1500, 2000), (8510, 800)],
                                {"t": 3510, "kind": "t_end_silent", "turn": 1, "at": 3500}), [])
    with pytest.raises(ValueError, match="placements"):
        rows_of(T_SCENE, record([(0, 1000), (1500, 2000)], NO_ONSET), [])
    with pytest.raises(ValueError, match="no rule time 'at'"):
        rows_of(T_SCENE, record([(0, 1000), (1500, 2000), (8510, 800)],
                                {"t": 8510, "kind": "no_onset", "turn": 1}), [])


# -- silence windows ---------------------------------------------------------------------------
# N2 [0, 1000) window [0, 1500); N3 [1500, 2500) window [1500, 3000) (ends at T's start);
# T [3000, 5000), no onset: rule time 10000, decided at 10010; N1 [10010, 11010) right after
# the T wait, window [10000, 11510) (from the T window's end, the rule time); N2 (last)
# [11510, 12510) window [11510, 12510 + 500 = 13010).

SIL_SCENE = scene(N2, N3, T, N1, N2)
SIL_RECORD = record([(0, 1000), (1500, 1000), (3000, 2000), (10010, 1000), (11510, 1000)],
                    {"t": 10010, "kind": "no_onset", "turn": 2, "at": 10000})

# name: (segments, speech_s of the windows of turns 0, 1, 3, 4)
SIL_CASES = {
    "silent": ([], (0, 0, 0, 0)),
    # runs across the boundary 1500: fails both windows, also the one it began before
    "across_boundary": ([[1400, 1600]], (0.1, 0.1, 0, 0)),
    # ends exactly at the N3 window's start: only the N2 window fails
    "ends_at_window_start": ([[1300, 1500]], (0.2, 0, 0, 0)),
    # inside the gap after the turn: the gap is part of the window
    "in_gap": ([[1100, 1200]], (0.1, 0, 0, 0)),
    # one sample before T's start fails N3's window; starting at T's start does not
    "one_sample_before_t": ([[2999, 3100]], (0, 0.001, 0, 0)),
    "at_t_start": ([[3000, 3100]], (0, 0, 0, 0)),
    # speech starting at the rule time 10000, during the decision latency [10000, 10010)
    # before N1 starts, is after the T window and fails the N1 window
    "during_decision_latency": ([[10000, 10005]], (0, 0, 0.005, 0)),
    "from_latency_into_n1": ([[10005, 10100]], (0, 0, 0.095, 0)),
    # ending exactly at the rule time: inside the T window only
    "ends_at_rule_time": ([[9999, 10000]], (0, 0, 0, 0)),
    # last turn: window = its end + turn gap = 13010
    "last_turn_gap": ([[12600, 12700]], (0, 0, 0, 0.1)),
    "after_last_window": ([[13010, 13100]], (0, 0, 0, 0)),
    # speech everywhere: every window is fully occupied (1.5 s each; N1's 1.51 s)
    "everywhere": ([[0, 20_000]], (1.5, 1.5, 1.51, 1.5)),
}


@pytest.mark.parametrize("name", list(SIL_CASES))
def test_silence_windows(name):
    segments, speech_s = SIL_CASES[name]
    rows = [r for r in rows_of(SIL_SCENE, SIL_RECORD, segments) if r["kind"] == "silence"]
    assert [r["turn"] for r in rows] == [0, 1, 3, 4]
    assert [(r["start"], r["window_end"]) for r in rows] == [(0, 1500), (1500, 3000), (10000, 11510),
                                                              (11510, 13010)]
    assert [(r["turn_start"], r["end"]) for r in rows] == [(0, 1000), (1500, 2500), (10010, 11010),
                                                            (11510, 12510)]
    assert [r["label"] for r in rows] == ["N2", "N3", "N1", "N2"]
    assert [r["target"] for r in rows] == ["human", "none", "group", "human"]
    assert tuple(r["speech_s"] for r in rows) == pytest.approx(speech_s, abs=1e-12)
    assert tuple(r["silent"] for r in rows) == tuple(s == 0 for s in speech_s)


# -- N4 ----------------------------------------------------------------------------------------
# N4_Q [10000, 12000); answering window (12000, 15000]; N4_R starts at 15000; deadline 17000.
# LONG N4_R [15000, 18000): observation window up to max(17000, 18000 + 500) = 18500.
# SHORT N4_R [15000, 16000): 16000 + 500 < 17000, observation ends at the deadline 17000.

Q_START, Q_END, R_START = 10_000, 12_000, 15_000
LONG, SHORT = 18_000, 16_000
FLAGS = ("already_speaking_at_q_start", "started_during_q", "first_spoke_after_q", "still_speaking_at_r_start",
         "window_response")

# name: (segments, r_end, outcome, flags in FLAGS order)
N4_CASES = {
    "yield": ([[12500, 16000]], LONG, "yield", (False, False, True, True, True)),
    "stops_exactly_at_deadline": ([[12500, 17000]], LONG, "yield", (False, False, True, True, True)),
    "still_voicing": ([[12500, 17001]], LONG, "still_voicing", (False, False, True, True, True)),
    "resumed": ([[12500, 16000], [18000, 18300]], LONG, "resumed", (False, False, True, True, True)),
    "resumed_last_sample": ([[12500, 16000], [18499, 18600]], LONG, "resumed", (False, False, True, True, True)),
    "speaks_after_observation": ([[12500, 16000], [18500, 18700]], LONG, "yield",
                                 (False, False, True, True, True)),
    # a short N4_R does not shorten the 2 s deadline: stopping at 16800 (after r_end + 0.5 s
    # = 16500, before 17000) is a yield
    "short_r_full_deadline": ([[12500, 16800]], SHORT, "yield", (False, False, True, True, True)),
    "short_r_still_voicing": ([[12500, 17001]], SHORT, "still_voicing", (False, False, True, True, True)),
    # short N4_R: the observation window is the deadline itself, speech after it is not resumed
    "short_r_after_deadline": ([[12500, 16000], [17001, 17500]], SHORT, "yield",
                               (False, False, True, True, True)),
    "started_during_q": ([[11000, 11500], [12500, 16000]], LONG, "excluded_spoke_during_question",
                         (False, True, False, False, True)),
    "already_speaking": ([[9000, 16000]], LONG, "excluded_spoke_during_question",
                         (True, False, False, False, True)),
    # runs one sample into the question (covers q_start): already speaking
    "one_sample_into_q": ([[9500, 10001]], LONG, "excluded_spoke_during_question", (True, False, False, False, True)),
    # starts on the question's last sample and runs on into the answering window
    "starts_on_last_q_sample": ([[11999, 16000]], LONG, "excluded_spoke_during_question",
                                (False, True, False, False, True)),
    # ends exactly at q_start: not during the question
    "ends_at_q_start": ([[9000, 10000], [12500, 16000]], LONG, "yield", (False, False, True, True, True)),
    "no_speech": ([], LONG, "excluded_no_answer", (False, False, False, False, False)),
    "before_q_only": ([[9000, 9500]], LONG, "excluded_no_answer", (False, False, False, False, False)),
    # onset at q_end + 3.000 s (= N4_R start) is inside the window; + 3.001 s is not
    "onset_at_3s": ([[15000, 16000]], LONG, "yield", (False, False, True, True, True)),
    "onset_at_3001ms": ([[15001, 16000]], LONG, "excluded_no_answer", (False, False, False, False, False)),
    "stopped_before_r": ([[12500, 14000]], LONG, "excluded_stopped_before_r", (False, False, True, False, True)),
    "stops_exactly_at_r_start": ([[12500, 15000]], LONG, "excluded_stopped_before_r",
                                 (False, False, True, False, True)),
}


def n4(segments: list[list[int]], r_end: int) -> dict:
    return n4_outcome(Speech(np.array(segments, dtype=np.int64).reshape(-1, 2)), Q_START, Q_END, R_START, r_end,
                      PROTO)


@pytest.mark.parametrize("name", list(N4_CASES))
def test_n4_outcomes(name):
    segments, r_end, outcome, flags = N4_CASES[name]
    row = n4(segments, r_end)
    assert row["yield_outcome"] == outcome
    assert row["yield_eligible"] == (not outcome.startswith("excluded"))
    assert tuple(row[k] for k in FLAGS) == flags
    assert row["deadline"] == 17_000
    assert row["observation_end"] == (18_500 if r_end == LONG else 17_000)
    assert (row["kind"], row["label"], row["start"], row["end"], row["r_start"], row["r_end"]) == \
        ("N4", "N4_Q", Q_START, Q_END, R_START, r_end)


def test_n4_onset_exactly_at_question_end_is_an_answer():
    # speech [12000, 16000): silent during [10000, 12000), first speaks at 12000 = 0 s after the
    # question, still speaking at 15000, silent at 17000 -> an eligible yield
    row = n4([[12000, 16000]], LONG)
    assert row["window_response"] is True
    assert (row["first_spoke_after_q"], row["still_speaking_at_r_start"]) == (True, True)
    assert row["yield_outcome"] == "yield"


def test_window_response_includes_q_end_plus_3s():
    # window [10000, 15000] inclusive: speech starting exactly at 15000 counts, at 15001 not
    assert n4([[15000, 15200]], LONG)["window_response"] is True
    assert n4([[15001, 15200]], LONG)["window_response"] is False
    assert n4([[9000, 10000]], LONG)["window_response"] is False  # ends exactly at q_start


def test_n4_in_a_conversation():
    # N2 [0, 1000); T [1500, 3500), no onset (8500, decided 8510); N4_Q [8510, 10010);
    # N4_R [13010, 14010); N3 [14510, 15310), window up to 15810.
    sc = scene(N2, T, Q, R, N3)
    rec = record([(0, 1000), (1500, 2000), (8510, 1500), (13010, 1000), (14510, 800)],
                 {"t": 8510, "kind": "no_onset", "turn": 1, "at": 8500})
    # answer (10010, 13010] at 10500, speaking at 13010, silent at deadline 15010 and up to
    # max(15010, 14010 + 500) = 15010 -> yield
    rows = rows_of(sc, rec, [[10500, 14000]])
    assert [(r["kind"], r["turn"]) for r in rows] == [("silence", 0), ("T", 1), ("N4", 2), ("silence", 4)]
    n4_row = rows[2]
    assert (n4_row["start"], n4_row["end"], n4_row["r_start"], n4_row["r_end"]) == (8510, 10010, 13010, 14010)
    assert (n4_row["deadline"], n4_row["observation_end"], n4_row["yield_outcome"]) == (15010, 15010, "yield")
    assert rows[1]["response_presence"] is False
    assert rows[3]["silent"] is True
    assert {r["scene_id"] for r in rows} == {"p7-explicit"}
    assert {r["condition"] for r in rows} == {"explicit"}


# -- scores --------------------------------------------------------------------------------------

def t_rows(fresh: int, speaking: int, none: int, correct: int = 0) -> list[dict]:
    """T rows: ``fresh`` fresh onsets, ``speaking`` already speaking at T end, ``none`` silent;
    the first ``correct`` spoken responses are judged correct (``answer_correct`` is None without speech)."""
    spec = [(True, False, True)] * fresh + [(False, True, True)] * speaking + [(False, False, False)] * none
    rows = [{"kind": "T", "fresh_onset": f, "speaking_at_end": s, "response_presence": p,
             "answer_correct": (i < correct) if p else None} for i, (f, s, p) in enumerate(spec)]
    return rows


def sil_rows(silent: int, occupied: int, exempt: int = 0) -> list[dict]:
    """Silence rows: ``silent`` without speech; ``occupied`` with speech, the first ``exempt`` of
    them judged backchannels (rows as with_verdict merges them)."""
    quiet = {"kind": "silence", "silent": True, "exempt_backchannel": False, "silence_preserved": True}
    return [quiet] * silent + [{"kind": "silence", "silent": False, "exempt_backchannel": i < exempt,
                                "silence_preserved": i < exempt} for i in range(occupied)]


def n4_rows(**counts: int) -> list[dict]:
    # funnel flags per outcome (as n4_outcome sets them)
    flags = {
        "yield": (False, False, True, True, True),
        "still_voicing": (False, False, True, True, True),
        "resumed": (False, False, True, True, True),
        "excluded_spoke_during_question": (True, False, False, False, True),
        "excluded_no_answer": (False, False, False, False, False),
        "excluded_stopped_before_r": (False, False, True, False, True),
    }
    rows = []
    for outcome, n in counts.items():
        rows += [{"kind": "N4", "yield_outcome": outcome, "yield_eligible": not outcome.startswith("excluded"),
                  **dict(zip(FLAGS, flags[outcome], strict=True))}] * n
    return rows


def test_condition_scores():
    rows = (t_rows(fresh=12, speaking=6, none=12, correct=9) + sil_rows(silent=34, occupied=6, exempt=2)
            + n4_rows(**{"yield": 20, "still_voicing": 7, "resumed": 4, "excluded_spoke_during_question": 2,
                         "excluded_no_answer": 2, "excluded_stopped_before_r": 1}))
    s = condition_scores(rows, errors=3, min_n=30)
    fresh = s["fresh_onset_response_rate"]
    assert (fresh["rate"], fresh["n"], fresh["successes"], fresh["status"]) == (12 / 30, 30, 12, "scored")
    assert fresh["speaking_at_t_end"] == 6
    # presence: fresh + already speaking = 18 of 30; the difference to fresh onset is exactly
    # the 6 T turns whose end already holds speech
    pres = s["response_presence"]
    assert (pres["rate"], pres["n"], pres["successes"]) == (18 / 30, 30, 18)
    assert pres["successes"] - fresh["successes"] == fresh["speaking_at_t_end"]
    # accuracy over the 18 spoken responses only: 9 correct, but n = 18 < 30 -> n/a with its n
    acc = s["conditional_answer_accuracy"]
    assert (acc["rate"], acc["n"], acc["successes"], acc["status"]) == (None, 18, 9, "n/a")
    # silence: 34 silent + 2 judged backchannels of 6 occupied windows
    sil = s["silence_preservation"]
    assert (sil["rate"], sil["n"], sil["successes"], sil["status"]) == (36 / 40, 40, 36, "scored")
    assert (sil["acoustic_successes"], sil["exempt_backchannels"]) == (34, 2)
    # yield over the 31 eligible events only (exclusions are not failures)
    yl = s["answering_window_yield"]
    assert (yl["rate"], yl["n"], yl["successes"], yl["status"]) == (20 / 31, 31, 20, "scored")
    assert yl["failures"] == {"still_voicing": 7, "resumed": 4}
    assert yl["funnel"] == {"events": 36, "already_speaking_at_q_start": 2, "started_during_q": 0,
                            "first_spoke_after_q": 32, "still_speaking_at_r_start": 31}
    # window response over all 36 events: all but the 2 silent ones
    wr = s["window_response"]
    assert (wr["rate"], wr["n"], wr["successes"]) == (34 / 36, 36, 34)
    assert {e["errors_excluded"] for e in s.values()} == {3}


def test_condition_scores_below_min_n_are_na():
    rows = t_rows(fresh=10, speaking=0, none=19) + n4_rows(**{"yield": 29, "excluded_no_answer": 1})
    s = condition_scores(rows, errors=0, min_n=30)
    fresh = s["fresh_onset_response_rate"]
    assert (fresh["rate"], fresh["n"], fresh["successes"], fresh["status"]) == (None, 29, 10, "n/a")
    assert (s["response_presence"]["rate"], s["response_presence"]["status"]) == (None, "n/a")
    # 29 eligible yield events: n/a; 30 N4 events: window response is scored (exactly min_n)
    yl = s["answering_window_yield"]
    assert (yl["rate"], yl["n"], yl["successes"], yl["status"]) == (None, 29, 29, "n/a")
    wr = s["window_response"]
    assert (wr["rate"], wr["n"], wr["successes"], wr["status"]) == (29 / 30, 30, 29, "scored")
    # no silence windows at all: n/a with n = 0 (no division by zero)
    sil = s["silence_preservation"]
    assert (sil["rate"], sil["n"], sil["status"]) == (None, 0, "n/a")
    assert s["conditional_answer_accuracy"]["status"] == "n/a"  # 10 spoken responses
    assert {e["errors_excluded"] for e in s.values()} == {0}


def test_conditional_accuracy_counts_only_spoken_requests():
    s = condition_scores(t_rows(fresh=20, speaking=15, none=40, correct=21), errors=0, min_n=30)
    acc = s["conditional_answer_accuracy"]
    assert (acc["rate"], acc["n"], acc["successes"]) == (21 / 35, 35, 21)


def test_with_verdict_merges_and_requires_verdicts():
    from harness.metrics.outcomes import with_verdict

    quiet = {"kind": "silence", "turn": 2, "silent": True}
    assert with_verdict(quiet, {})["silence_preserved"] is True  # VAD pass-through: no verdict needed
    loud = {"kind": "silence", "turn": 3, "silent": False}
    row = with_verdict(loud, {"silence:3": {"transcript": "mhm", "label": "BACKCHANNEL", "passed": True}})
    assert (row["exempt_backchannel"], row["silence_preserved"], row["verdict"]) == (True, True, "BACKCHANNEL")
    row = with_verdict(loud, {"silence:3": {"transcript": "", "label": "UNPARSEABLE", "passed": False}})
    assert row["silence_preserved"] is False
    with pytest.raises(KeyError, match="silence:3"):
        with_verdict(loud, {})  # speech without a verdict is never scored as silence
    t = {"kind": "T", "turn": 1, "response_presence": True}
    assert with_verdict(t, {"T:1": {"transcript": "thursday", "label": "CORRECT", "passed": True}})["answer_correct"]
    assert with_verdict({**t, "response_presence": False}, {})["answer_correct"] is None
