"""VAD segment post-processor (spec section 4): probabilities -> ``[start, end)`` segments.

Every case runs at sample_rate = 1000 Hz with a frame of 10 samples, so one sample is one
millisecond and frame ``k`` covers ``[10 k, 10 k + 10)``. Default rules: threshold 0.5,
neg_threshold 0.35, min_speech 0.12 s = 120 samples, min_silence 0.8 s = 800 samples.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.vad.segments import SegmentRules, SpeechTracker, SpeechView, segments_from_probs
from harness.vad.silero import PROB_TOLERANCE

SR = 1000
FRAME = 10
RULES = SegmentRules()


def runs(*parts: tuple[float, int]) -> list[float]:
    """Probabilities from ``(value, n_frames)`` runs."""
    return [v for v, n in parts for _ in range(n)]


def offline(probs: list[float], rules: SegmentRules = RULES) -> list[list[int]]:
    arr = np.asarray([probs], dtype=np.float32).reshape(1, -1)
    out = segments_from_probs(arr, np.array([len(probs)]), FRAME, rules, SR)
    assert len(out) == 1 and out[0].dtype == np.int64 and out[0].shape[1:] == (2,)
    return out[0].tolist()


# -- rules ---------------------------------------------------------------------------------

def test_rules_in_samples():
    # 0.12 s and 0.8 s at 1 kHz and at the 24 kHz timeline rate
    assert RULES.samples(1000) == (120, 800)
    assert RULES.samples(24_000) == (2880, 19_200)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"threshold": 0.5, "neg_threshold": 0.6}, "neg_threshold <= threshold"),  # neg above threshold
    ({"threshold": 1.0, "neg_threshold": 0.35}, "threshold < 1"),  # threshold must be < 1
    ({"threshold": 0.5, "neg_threshold": 0.0}, "need 0 < neg_threshold"),  # neg must be > 0
    ({"min_speech_s": -0.01}, "min_speech_s must be >= 0"),
    ({"min_silence_s": 0.0}, "min_silence_s > 0"),
])
def test_rules_reject_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SegmentRules(**kwargs)


# -- golden offline cases ------------------------------------------------------------------

GOLDEN = {
    # 12 active frames = 120 ms: exactly min_speech is kept
    "burst_120ms_kept": (runs((0, 5), (1, 12), (0, 100)), [[50, 170]]),
    # 11 active frames = 110 ms < 120 ms: dropped
    "burst_110ms_dropped": (runs((0, 5), (1, 11), (0, 100)), []),
    # a pause of exactly 800 ms separates: [0, 200) and [1000, 1200)
    "pause_800ms_splits": (runs((1, 20), (0, 80), (1, 20), (0, 100)), [[0, 200], [1000, 1200]]),
    # a pause of 790 ms is merged: one segment [0, 1190)
    "pause_790ms_merges": (runs((1, 20), (0, 79), (1, 20), (0, 100)), [[0, 1190]]),
    # two 50 ms bursts 20 ms apart merge into [0, 120): exactly min_speech after merging, kept
    "merged_bursts_120ms_kept": (runs((1, 5), (0, 2), (1, 5), (0, 100)), [[0, 120]]),
    # two 50 ms bursts 10 ms apart merge into [0, 110): too short after merging, dropped
    "merged_bursts_110ms_dropped": (runs((1, 5), (0, 1), (1, 5), (0, 100)), []),
    # a 50 ms blip 800 ms before real speech is its own (dropped) candidate, not merged
    "blip_then_speech": (runs((1, 5), (0, 80), (1, 20), (0, 100)), [[850, 1050]]),
    # hysteresis: 0.4 (between neg 0.35 and threshold 0.5) never starts speech ...
    "mid_prob_alone": (runs((0.4, 50), (0, 100)), []),
    # ... but continues it: 5 frames at 1.0 then 10 at 0.4 = 15 active frames
    "mid_prob_continues": (runs((1, 5), (0.4, 10), (0, 100)), [[0, 150]]),
    # ... and does not start it before real speech: onset at the first frame >= 0.5
    "mid_prob_before_onset": (runs((0.4, 10), (1, 12), (0, 100)), [[100, 220]]),
    # once the frame dropped below neg, 0.4 inside the pause does not re-activate (end stays 120)
    "mid_prob_after_drop": (runs((1, 12), (0, 5), (0.4, 5), (0, 100)), [[0, 120]]),
    # probability exactly at threshold (0.5 is exact in float32) starts speech
    "exact_threshold_starts": (runs((0.5, 12), (0, 100)), [[0, 120]]),
    # a stream ending mid-speech is closed at the end of its last active frame
    "ends_mid_speech": (runs((0, 10), (1, 15)), [[100, 250]]),
    # a stream ending inside a pause shorter than min_silence: end = last active frame
    "ends_in_pause": (runs((1, 12), (0, 30)), [[0, 120]]),
    # a stream ending mid-speech that is too short: dropped
    "ends_mid_short_speech": (runs((0, 10), (1, 5)), []),
    "empty": ([], []),
}


@pytest.mark.parametrize("name", list(GOLDEN))
def test_golden_segments(name):
    probs, expected = GOLDEN[name]
    assert offline(probs) == expected


def test_neg_threshold_is_inclusive():
    # neg 0.25 and threshold 0.5 are exact in float32. 6 frames at 1.0 then 6 at exactly 0.25:
    # 0.25 >= neg keeps the frames active -> 12 active frames = [0, 120), kept. Had 0.25
    # ended speech the 60 ms segment would have been dropped.
    rules = SegmentRules(threshold=0.5, neg_threshold=0.25)
    assert offline(runs((1, 6), (0.25, 6), (0, 100)), rules) == [[0, 120]]
    # just below neg: only the 6 frames at 1.0 are active -> 60 ms, dropped
    assert offline(runs((1, 6), (0.24, 6), (0, 100)), rules) == []


def test_batch_of_streams_with_different_lengths():
    k = 120
    probs = np.ones((4, k), np.float32)  # padding past each length is 1.0 and must be ignored
    probs[0, :40] = runs((0, 10), (1, 30))  # length 40: speech closed at the end -> [100, 400)
    probs[1, :] = runs((1, 20), (0, 80), (1, 20))  # length 120: 800 ms pause -> two segments
    probs[2, :11] = 1.0  # length 11, all speech: 110 ms, dropped
    lengths = np.array([40, 120, 11, 0])  # stream 3 is empty
    out = segments_from_probs(probs, lengths, FRAME, RULES, SR)
    assert [o.tolist() for o in out] == [[[100, 400]], [[0, 200], [1000, 1200]], [], []]
    assert all(o.shape[1] == 2 and o.dtype == np.int64 for o in out)


def test_frame_size_scales_times():
    # the same probabilities with frame 768 at 24 kHz (32 ms frames): 4 active frames =
    # [768 * 2, 768 * 6) = [1536, 4608), 3072 samples = 128 ms >= 120 ms -> kept
    probs = np.asarray([runs((0, 2), (1, 4), (0, 30))], np.float32)
    out = segments_from_probs(probs, np.array([36]), 768, RULES, 24_000)
    assert out[0].tolist() == [[1536, 4608]]
    # 3 active frames = 96 ms < 120 ms -> dropped
    probs = np.asarray([runs((0, 2), (1, 3), (0, 30))], np.float32)
    assert segments_from_probs(probs, np.array([35]), 768, RULES, 24_000)[0].tolist() == []


# -- online tracker ------------------------------------------------------------------------

def test_tracker_closes_open_speech_only_at_finish():
    tr = SpeechTracker(1, FRAME, RULES, SR)
    tr.push(np.asarray([runs((0, 10), (1, 15))], np.float32))
    assert tr.segments(0) == []  # still open: the pause after it may not have started
    tr.finish()
    assert tr.segments(0) == [(100, 250)]


def test_tracker_rejects_wrong_shape():
    tr = SpeechTracker(2, FRAME, RULES, SR)
    with pytest.raises(ValueError, match=re.escape("probs must be [2, k], got (1, 5)")):
        tr.push(np.zeros((1, 5), np.float32))
    with pytest.raises(ValueError, match=re.escape("probs must be [2, k], got (5,)")):
        tr.push(np.zeros(5, np.float32))


PROB = st.sampled_from([0.0, 0.2, 0.3, 0.4, 0.6, 1.0])
RULE_SET = st.sampled_from([
    RULES,
    SegmentRules(min_speech_s=0.0, min_silence_s=0.01),  # 1-frame segments, 1-frame pauses
    SegmentRules(threshold=0.6, neg_threshold=0.3, min_speech_s=0.03, min_silence_s=0.05),
])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams=st.lists(st.lists(PROB, max_size=250), min_size=1, max_size=3), rules=RULE_SET,
       seed=st.integers(0, 2**32 - 1))
def test_online_chunks_equal_offline(streams, rules, seed):
    """Any chunking, also different per stream, gives exactly the offline segments, and the
    closed segments at every moment are a prefix of the final ones."""
    n = len(streams)
    k = max(len(s) for s in streams)
    padded = np.zeros((n, k), np.float32)
    for b, s in enumerate(streams):
        padded[b, : len(s)] = s
    want = [o.tolist() for o in segments_from_probs(padded, np.array([len(s) for s in streams]), FRAME, rules, SR)]

    rng = np.random.default_rng(seed)  # chunk sizes 0..40 frames, drawn per stream and push
    tr = SpeechTracker(n, FRAME, rules, SR)
    pos = [0] * n
    while any(p < len(s) for p, s in zip(pos, streams, strict=True)):
        sizes = [int(rng.integers(0, min(40, len(s) - p), endpoint=True)) for p, s in zip(pos, streams, strict=True)]
        width = max(sizes)
        chunk = np.full((n, width), 0.9, np.float32)  # padding of the chunk must be ignored
        for b, c in enumerate(sizes):
            chunk[b, :c] = streams[b][pos[b]: pos[b] + c]
            pos[b] += c
        tr.push(chunk, np.array(sizes, dtype=np.int64))
        for b in range(n):
            got = [list(x) for x in tr.segments(b)]
            assert got == want[b][: len(got)]
            assert tr.view(b).now == pos[b] * FRAME
    tr.finish()
    assert [[list(x) for x in tr.segments(b)] for b in range(n)] == want


# -- SpeechView ----------------------------------------------------------------------------

def _view_after(probs: list[float], n_frames: int) -> SpeechView:
    tr = SpeechTracker(1, FRAME, RULES, SR)
    tr.push(np.asarray([probs[:n_frames]], np.float32).reshape(1, -1))
    return tr.view(0)


SPEECH_100_300 = runs((0, 10), (1, 20), (0, 100))  # speech [100, 300), then silence


def test_view_before_any_speech():
    v = _view_after(SPEECH_100_300, 10)  # now = 100
    assert v.now == 100
    assert v.covers(50) is False  # in the past, nothing there
    assert v.covers(100) is None  # not processed yet
    assert v.first_onset_from(0) == (None, False)
    assert v.endpoint(0, 2000) == (None, False)  # no speech at all


def test_view_unconfirmed_onset():
    v = _view_after(SPEECH_100_300, 15)  # now = 150, candidate [100, 150): 50 ms < 120
    assert (v.open_start, v.open_end, v.open_confirmed) == (100, 150, False)
    assert v.covers(120) is None  # may still be dropped
    assert v.covers(50) is False
    assert v.first_onset_from(0) == (100, False)
    assert v.first_onset_from(100) == (100, False)
    assert v.first_onset_from(110) == (None, False)  # the candidate starts before 110


def test_view_confirmed_open_candidate():
    v = _view_after(SPEECH_100_300, 22)  # now = 220, candidate [100, 220): 120 ms, confirmed
    assert v.open_confirmed
    assert v.covers(150) is True
    assert v.covers(219) is True
    assert v.covers(220) is None  # not processed yet
    assert v.first_onset_from(0) == (100, True)
    assert v.segments == ()


def test_view_pause_undecided_until_min_silence():
    # now = 1090: pause after 300 is 790 ms, candidate still open; a sample in the pause may
    # still be merged into speech
    v = _view_after(SPEECH_100_300, 109)
    assert (v.open_start, v.open_end) == (100, 300)
    assert v.covers(299) is True
    assert v.covers(400) is None
    # speech until at least 300: the endpoint is 2300 at the earliest, not yet known
    assert v.endpoint(0, 2000) == (2300, False)
    # now = 1100: 800 ms pause, the segment is final
    v = _view_after(SPEECH_100_300, 110)
    assert v.segments == ((100, 300),) and v.open_start is None
    assert v.covers(299) is True
    assert v.covers(300) is False
    assert v.covers(400) is False
    assert v.covers(1099) is False
    assert v.covers(1100) is None  # the future
    assert v.first_onset_from(0) == (100, True)
    assert v.first_onset_from(100) == (100, True)
    assert v.first_onset_from(101) == (None, False)
    assert v.endpoint(0, 2000) == (2300, False)  # the detector has seen 800 of the 2000 ms
    assert v.endpoint(300, 2000) == (None, False)  # nothing ends after 300


def test_view_dropped_candidate_becomes_silence():
    probs = runs((0, 10), (1, 5), (0, 100))  # a 50 ms blip at [100, 150)
    v = _view_after(probs, 94)  # now = 940: pause 790 ms, still undecided
    assert v.covers(120) is None
    assert v.first_onset_from(0) == (100, False)
    v = _view_after(probs, 95)  # now = 950: pause 800 ms, candidate dropped
    assert v.covers(120) is False
    assert v.first_onset_from(0) == (None, False)
    assert v.segments == () and v.open_start is None


# speech [100, 300) then silence, followed (or not) by more activity; endpoint silence 2000.
# name: (probabilities, frames processed, after, expected endpoint(after, 2000))
ENDPOINT_CASES = {
    # the rule time 300 + 2000 is known once the detector's clock reaches it, not before
    "one_frame_early": (SPEECH_100_300 + runs((0, 200)), 229, 0, (2300, False)),
    "at_rule_time": (SPEECH_100_300 + runs((0, 200)), 230, 0, (2300, True)),
    # speech starting exactly at the rule time is after the response, whether the detector
    # sees it as a candidate still in progress or as a closed segment
    "next_candidate_at_rule_time": (runs((0, 10), (1, 20), (0, 200), (1, 30), (0, 100)), 240, 0, (2300, True)),
    "next_segment_at_rule_time": (runs((0, 10), (1, 20), (0, 200), (1, 30), (0, 100)), 430, 0, (2300, True)),
    # speech starting 10 ms before the rule time: while shorter than 120 ms it may still be
    # dropped (the rule time would stand), then it is speech and moves the endpoint past its end
    "candidate_10ms_early_unconfirmed": (runs((0, 10), (1, 20), (0, 199), (1, 30), (0, 300)), 240, 0,
                                         (2300, False)),
    "candidate_10ms_early_confirmed": (runs((0, 10), (1, 20), (0, 199), (1, 30), (0, 300)), 250, 0,
                                       (4500, False)),
    "candidate_10ms_early_closed": (runs((0, 10), (1, 20), (0, 199), (1, 30), (0, 300)), 458, 0, (4590, False)),
    "candidate_10ms_early_known": (runs((0, 10), (1, 20), (0, 199), (1, 30), (0, 300)), 459, 0, (4590, True)),
    # a 50 ms blip at 2200 is waited for until it is dropped (its pause reaches 800 ms at 3050)
    "blip_pending": (runs((0, 10), (1, 20), (0, 190), (1, 5), (0, 200)), 304, 0, (2300, False)),
    "blip_dropped": (runs((0, 10), (1, 20), (0, 190), (1, 5), (0, 200)), 305, 0, (2300, True)),
    # segments ending at or before ``after`` are not the response: [1200, 1500) is
    "after_skips_earlier_speech": (runs((0, 10), (1, 20), (0, 90), (1, 30), (0, 250)), 350, 300, (3500, True)),
    # a pause of 1500 < 2000 before 120 ms of speech [1800, 1920) keeps the response going
    "short_gap_chains": (runs((0, 10), (1, 20), (0, 150), (1, 12), (0, 250)), 392, 0, (3920, True)),
    # ... while 110 ms there is no speech: dropped, the endpoint is 2 s after the first segment
    "short_blip_in_gap": (runs((0, 10), (1, 20), (0, 150), (1, 11), (0, 250)), 392, 0, (2300, True)),
}


@pytest.mark.parametrize("name", list(ENDPOINT_CASES))
def test_view_endpoint(name):
    probs, n, after, want = ENDPOINT_CASES[name]
    assert _view_after(probs, n).endpoint(after, 2000) == want


@settings(max_examples=200, deadline=None)
@given(probs=st.lists(st.floats(0.0, 1.0, width=32), min_size=1, max_size=300), rules=RULE_SET,
       seed=st.integers(0, 2**32 - 1))
def test_segments_depend_on_threshold_comparisons_only(probs, rules, seed):
    """The detector's cross-batch guarantee (harness.vad.silero.PROB_TOLERANCE) rests on this:
    probabilities moved by less than the tolerance, none of them crossing a threshold, give exactly
    the same segments."""
    p = np.asarray(probs, np.float32)
    thresholds = np.array([rules.threshold, rules.neg_threshold], np.float32)
    p = p[np.abs(p[:, None] - thresholds).min(axis=1) > PROB_TOLERANCE]  # keep the windows clear of both
    noise = np.random.default_rng(seed).uniform(-0.5, 0.5, len(p)).astype(np.float32) * PROB_TOLERANCE
    q = np.clip(p + noise, 0.0, 1.0)
    assert all(np.array_equal(p >= t, q >= t) for t in thresholds)
    n = np.array([len(p)])
    np.testing.assert_array_equal(segments_from_probs(p[None], n, FRAME, rules, SR)[0],
                                  segments_from_probs(q[None], n, FRAME, rules, SR)[0])
