"""The runner's vectorised pieces (issue 24, item 5) equal what they replace."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audio.assemble import Track, TrackRows, add_rows
from harness.audio.io import PCM_SCALE, pcm_steps, quantize
from harness.audio.room_tone import TABLE_SAMPLES, RoomTone, RoomToneRows
from harness.protocol.scheduler import ProtocolSettings, Scheduler
from harness.scenes.schema import Label
from harness.vad.segments import SpeechView
from harness.vad.settings import VadSettings
from harness.vad.silero import PROB_TOLERANCE, SileroProbs

SR = 24_000


@pytest.mark.parametrize("kind", ["pink", "white", "zeros"])
def test_tone_rows_read_what_room_tone_reads(kind):
    """Every row's frames are its RoomTone's read(), bit for bit, also across the table's wrap."""
    seeds = [1, 2, 3, 4]
    tones = [RoomTone(kind, -70.0, s, SR) for s in seeds]
    rows = RoomToneRows(len(seeds), 1920)
    for b, t in enumerate(tones):
        rows.open(b, t)
    if kind != "zeros":  # row 2 starts just before the end of the table: its second read wraps
        tones[2]._pos = rows._pos[2] = TABLE_SAMPLES - 2500
    refs = [RoomTone(kind, -70.0, s, SR) for s in seeds]
    for r, t in zip(refs, tones, strict=True):
        r._pos = t._pos
    for _ in range(3):
        got = rows.read([0, 1, 2, 3])
        np.testing.assert_array_equal(got, np.stack([r.read(1920) for r in refs]))
    np.testing.assert_array_equal(rows.read([1, 3]), np.stack([refs[1].read(1920), refs[3].read(1920)]))


def test_pcm_steps_are_the_stored_int16():
    """The runner keeps pcm_steps(): k / PCM_SCALE is quantize(x), and rint of it times PCM_SCALE
    is k (what the stored int16 were)."""
    x = np.random.default_rng(0).standard_normal((4, 5000)).astype(np.float32) * 0.7
    k = pcm_steps(x)
    assert np.abs(k).max() == PCM_SCALE and (k == np.round(k)).all()  # clipped samples reach full scale
    y = (k / PCM_SCALE).astype(np.float32)
    np.testing.assert_array_equal(y, quantize(x))
    np.testing.assert_array_equal(k.astype(np.int16), np.rint(y * PCM_SCALE).astype(np.int16))


def test_needs_detector_only_where_advance_can_decide():
    p = ProtocolSettings()
    s = Scheduler([SR, SR, SR], [Label.N1, Label.T, Label.N2], 0, p)
    t_end = s.turn_placement(1).end
    assert not s.needs_detector(0) and not s.needs_detector(t_end - 1)
    assert s.needs_detector(t_end)
    silent = SpeechView(t_end + 10 * SR, (), None, None, round(0.12 * SR), round(0.8 * SR))
    s.advance(t_end + 10 * SR, silent)  # silent at T end, no onset in the window: scripted to the end
    assert s.done and not s.needs_detector(t_end + 20 * SR)


def test_scoring_only_live_rows_keeps_their_probabilities():
    """Rows left out of a push are not scored (NaN); the scored rows agree with scoring every row."""
    rng = np.random.default_rng(1)
    audio = (rng.standard_normal((5, 1920 * 12)) * 0.1).astype(np.float32)
    full, part = SileroProbs(5, SR, VadSettings()), SileroProbs(5, SR, VadSettings())
    a, b = [], []
    for i in range(0, audio.shape[1], 1920):
        a.append(full.push(audio[:, i:i + 1920]))
        b.append(part.push(audio[:, i:i + 1920], rows=[0, 2, 3]))
    a, b = np.concatenate(a, axis=1), np.concatenate(b, axis=1)
    assert np.isnan(b[[1, 4]]).all()
    np.testing.assert_allclose(b[[0, 2, 3]], a[[0, 2, 3]], rtol=0, atol=PROB_TOLERANCE)


def test_detector_threads_change_speed_not_numbers(monkeypatch):
    """Rows scored in groups (150 rows: two groups of 75) give the same numbers bit for bit on one
    thread or two, and agree with one batch of every row within the promised tolerance."""
    rng = np.random.default_rng(2)
    audio = (rng.standard_normal((150, 1920 * 6)) * 0.1).astype(np.float32)
    rows = np.arange(0, 150)

    def probs(threads: int) -> np.ndarray:
        det = SileroProbs(150, SR, VadSettings(threads=threads))
        return np.concatenate([det.push(audio[:, i:i + 1920], rows) for i in range(0, audio.shape[1], 1920)], axis=1)

    one, two = probs(1), probs(2)
    np.testing.assert_array_equal(one, two)
    monkeypatch.setattr(SileroProbs, "GROUP_ROWS", 1000)  # every row in one batch
    np.testing.assert_allclose(probs(2), one, rtol=0, atol=PROB_TOLERANCE)
    with pytest.raises(ValueError, match=r"vad\.threads must be >= 1"):
        VadSettings(threads=0)


def test_track_rows_render_what_track_renders():
    """Each row's windows are its Track's, bit for bit: clips added between windows, clips overlapping
    each other and the window's edges, shorter than a window, a row left alone (its clips dropped),
    a row cleared and refilled; also rendered in two row ranges (side by side in the runner), then
    dropped."""
    rng = np.random.default_rng(3)
    n_rows, n = 5, 700
    tracks, rows, halves = [Track() for _ in range(n_rows)], TrackRows(n_rows), TrackRows(n_rows)

    def add(b, start, length):
        clip = (rng.standard_normal(length) * 0.3).astype(np.float32)
        tracks[b].add(start, clip)
        rows.add(b, start, clip)
        halves.add(b, start, clip)

    for b in range(n_rows):
        for _ in range(4):
            add(b, int(rng.integers(0, 5000)), int(rng.integers(1, 1500)))  # overlapping, some shorter than n
    left_out = 3
    for k in range(12):
        t = k * n
        if k == 4:
            add(0, t + 100, 50)
            add(1, t - 300, 2000)  # started before the window
        if k == 6:  # row 2's stream ends: a new one with a fresh track
            tracks[2] = Track()
            rows.clear(2)
            halves.clear(2)
            add(2, t + 10, 900)
        got = np.zeros((n_rows, n), np.float32)
        at = np.full(n_rows, t, np.int64)
        at[left_out] = -1
        rows.render_into(got, at)
        by_halves = np.zeros((n_rows, n), np.float32)
        if halves.render_into(by_halves, at, (0, 2)) + halves.render_into(by_halves, at, (2, n_rows)):
            halves.drop(at)
        np.testing.assert_array_equal(by_halves, got)
        assert halves._row.tolist() == rows._row.tolist()
        want = np.zeros((n_rows, n), np.float32)
        for b in range(n_rows):
            if b != left_out:
                tracks[b].render_into(t, want[b])
        np.testing.assert_array_equal(got, want)
    assert left_out not in rows._row.tolist() and len(rows._row) < 10  # ended and left-out clips are dropped
    with pytest.raises(ValueError, match="before the timeline"):
        rows.add(0, -1, np.zeros(3, np.float32))


@pytest.mark.parametrize("kind", ["pink", "white", "zeros"])
def test_tone_rows_add_into_adds_what_read_reads(kind):
    """add_into(out, rows) is out[rows] += read(rows), bit for bit, across the table's wrap and on rows
    that already hold clips (and -0.0, which digital silence turns into +0.0 as the addition does)."""
    seeds = [1, 2, 3, 4, 5]
    a, b = RoomToneRows(len(seeds), 1920), RoomToneRows(len(seeds), 1920)
    for i, s in enumerate(seeds):
        a.open(i, RoomTone(kind, -70.0, s, SR))
        b.open(i, RoomTone(kind, -70.0, s, SR))
    if kind != "zeros":
        a._pos[2] = b._pos[2] = TABLE_SAMPLES - 2500  # wraps on its second read
    rng = np.random.default_rng(4)
    for rows in ([0, 1, 2, 3, 4], [0, 2, 4], [2, 3], [0, 1, 2, 3, 4]):
        x = (rng.standard_normal((len(seeds), 1920)) * 0.1).astype(np.float32)
        x[:, :3] = -0.0
        want = x.copy()
        want[rows] += a.read(rows)
        b.add_into(x, np.asarray(rows))
        np.testing.assert_array_equal(x.view(np.int32), want.view(np.int32))


def test_add_rows_is_the_fancy_indexed_add():
    rng = np.random.default_rng(5)
    out, x = rng.standard_normal((2, 6, 50)).astype(np.float32)
    want = out.copy()
    want[[1, 4, 5]] += x[[1, 4, 5]]
    add_rows(out, np.array([1, 4, 5]), x)
    np.testing.assert_array_equal(out, want)


def test_next_decision_agrees_with_needs_detector():
    """Before next_decision() advance is a no-op whatever the view (needs_detector False); from it on
    it may decide; None once done."""
    p = ProtocolSettings()
    s = Scheduler([SR, SR, SR], [Label.N1, Label.T, Label.N2], 0, p)
    t_end = s.turn_placement(1).end
    assert s.next_decision() == t_end
    for now in (0, t_end - 1, t_end, t_end + 5):
        assert s.needs_detector(now) == (now >= s.next_decision())
    s.advance(t_end, SpeechView(t_end, (), None, None, round(0.12 * SR), round(0.8 * SR)))  # not yet known
    assert s.next_decision() == 0 and s.needs_detector(t_end)
    s.advance(t_end + 10 * SR, SpeechView(t_end + 10 * SR, (), None, None, round(0.12 * SR), round(0.8 * SR)))
    assert s.done and s.next_decision() is None and not s.needs_detector(t_end + 20 * SR)


def test_resampler_row_groups_on_a_pool_give_the_same_samples():
    """StreamResampler.pool computes row groups side by side: the same samples bit for bit, also
    around resets and in uneven chunks."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.audio.resample import StreamResampler

    rng = np.random.default_rng(6)
    x = (rng.standard_normal((40, 9000)) * 0.2).astype(np.float32)
    one, two = StreamResampler(40, SR, 16_000), StreamResampler(40, SR, 16_000)
    with ThreadPoolExecutor(3) as pool:
        two.pool, two.pool_groups = pool, 3
        for a, b in ((0, 1920), (1920, 3840), (3840, 5001), (5001, 9000)):
            if a == 3840:
                one.reset([3, 17])
                two.reset([3, 17])
            np.testing.assert_array_equal(two.push(x[:, a:b]), one.push(x[:, a:b]))
        np.testing.assert_array_equal(two.flush(), one.flush())


def test_detector_history_is_each_rows_pushed_probabilities(monkeypatch):
    """StreamingDetector.probabilities(b, n) is what was pushed for row b's stream since its reset (the
    columns the tracker took), at most n of them, through growth of the history, resets and rows
    left out of a push."""
    from harness.vad.silero import StreamingDetector

    det = StreamingDetector(4, SR, VadSettings())
    det._history = np.zeros((4, 3), np.float32)  # small, so that it grows
    want = [[] for _ in range(4)]
    push = det.tracker.push

    def record(p, first):
        for b in range(4):
            want[b].extend(p[b, first[b]:].tolist())
        push(p, first=first)

    monkeypatch.setattr(det.tracker, "push", record)
    audio = (np.random.default_rng(7).standard_normal((4, 1920 * 16)) * 0.1).astype(np.float32)
    period = det.reset_period
    for i in range(16):
        if i * 1920 % period == 0 and i in (6, 12):
            det.reset([1, 3] if i == 6 else [0], at=i * 1920)
            for b in [1, 3] if i == 6 else [0]:
                want[b] = []
        det.push(audio[:, i * 1920:(i + 1) * 1920], [0, 1, 3] if i < 10 else None)
        for b in range(4):
            np.testing.assert_array_equal(det.probabilities(b, 10_000), np.asarray(want[b], np.float32))
            np.testing.assert_array_equal(det.probabilities(b, 5), np.asarray(want[b][:5], np.float32))
    assert det._history.shape[1] > 3 and 0 < len(want[0]) < len(want[2])  # grown; row 0 reset at step 12


def test_quantize_rows_is_quantize_and_the_stored_steps():
    """quantize_rows(x) is quantize(x) and writes pcm_steps(x)[:, skip:] as int16, bit for bit: clipped
    samples, exact halves of a step (rounded to even), -0.0, full scale."""
    from harness.audio.io import quantize_rows

    rng = np.random.default_rng(8)
    x = (rng.standard_normal((6, 3000)) * 0.6).astype(np.float32)
    halves = (np.arange(-40, 40) + 0.5).astype(np.float32) / np.float32(PCM_SCALE)
    x[0, :80] = halves
    x[1, :6] = [-0.0, 1.0, -1.0, 1.5, -7.0, np.float32(0.5) / np.float32(PCM_SCALE)]
    for skip in (0, 17):
        stage = np.full((6, 4000), 99, np.int16)
        q = quantize_rows(x, stage, 500, skip)
        np.testing.assert_array_equal(q.view(np.int32), quantize(x).view(np.int32))
        np.testing.assert_array_equal(stage[:, 500:500 + 3000 - skip], pcm_steps(x)[:, skip:].astype(np.int16))
        assert (stage[:, :500] == 99).all() and (stage[:, 3500 - skip:] == 99).all()
    with pytest.raises(ValueError, match="room"):
        quantize_rows(x, np.zeros((6, 100), np.int16), 0)


def test_detector_rows_not_due_are_scored_later_as_their_own_batch():
    """StreamingDetector.push(..., due): the due rows are scored at once, the others by settle(), each
    set as one batch: bit for bit what two detectors, each pushed only its own rows, give (so the
    numbers depend on how the rows are divided, never on when settle() runs); every row's view before
    settle() is already settled (a read settles), and due=all rows is the push without due."""
    from harness.models.smoke import smoke_conversations
    from harness.vad.silero import StreamingDetector

    clips = [c for conv in smoke_conversations() for c in conv.turn_clips]  # espeak speech, 24 kHz
    audio = np.zeros((6, 1920 * 50), np.float32)
    for b in range(6):  # each row a clip after a pause of its own
        clip = clips[b % len(clips)][:audio.shape[1] - 4000 * b]
        audio[b, 4000 * b:4000 * b + len(clip)] = clip
    due, rest = np.array([1, 4]), np.array([0, 2, 3, 5])

    def run(rows=None, due_rows=None, read=None):
        det = StreamingDetector(6, SR, VadSettings())
        for i in range(0, audio.shape[1], 1920):
            det.push(audio[:, i:i + 1920], rows, due_rows)
            if read is not None:
                read(det)
        return det

    split, alone, others = run(due_rows=due), run(rows=due), run(rows=rest)
    n = 10_000
    for b in due:
        np.testing.assert_array_equal(split.probabilities(b, n), alone.probabilities(b, n))
    for b in rest:
        np.testing.assert_array_equal(split.probabilities(b, n), others.probabilities(b, n))
        assert split.segments(b) == others.segments(b)
    assert all(split.segments(b) for b in range(6))  # the speech was heard
    views = []
    run(due_rows=due, read=lambda det: views.append(det.view(3)))  # row 3 waits: its view settles first
    settled = []

    def read_settled(det):
        det.settle()
        settled.append(det.view(3))

    run(due_rows=due, read=read_settled)
    assert views == settled and views[-1].now > 0
    full, all_due = run(), run(due_rows=np.arange(6))
    for b in range(6):
        np.testing.assert_array_equal(full.probabilities(b, n), all_due.probabilities(b, n))


def test_a_push_scores_each_prepared_row_once():
    """SileroProbs.score refuses a row it was not prepared for, a row twice, or one scored already."""
    probs = SileroProbs(4, SR, VadSettings())
    w = probs.prepare(np.zeros((4, 3840), np.float32), rows=[0, 2])
    probs.score(w, [2])
    with pytest.raises(ValueError, match="scored already"):
        probs.score(w, [2])
    with pytest.raises(ValueError, match="not increasing"):
        probs.score(w, [0, 0])
    with pytest.raises(ValueError, match="not all among the prepared rows"):
        probs.score(w, [1])
    probs.score(w)  # what is left: row 0
    assert w.scored.all() and not np.isnan(w.probs[[0, 2]]).any() and np.isnan(w.probs[[1, 3]]).all()
