"""The runner: what fails a conversation, what fails the attempt, the output contract, the
step watchdog, the input room tone and the echo switch."""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from scipy.signal import welch

from harness.audio.room_tone import TABLE_SAMPLES, RoomTone, noise_table
from harness.models.base import DuplexModel, ModelInfo, RowError, RowPreempted
from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import (
    ConversationInput,
    ModelFailure,
    ModelStalled,
    ModelThread,
    OutputContractError,
    RowBatch,
    check_output,
    refill_period,
    run_conversations,
    stream_conversations,
)
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings
from tests.fixtures.listener import Listener

SR = 24_000
FRAME = 1_920
TONE_0 = np.float32(3277 / 32767)  # ToneModel row 0 says 0.1: on the stored 16-bit grid, round(0.1 * 32767) steps


@pytest.fixture(scope="module")
def scene() -> Scene:
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    return Scene("p0-explicit", "p0", "explicit", ("A", "B", "C"), turns, "yes")


def _conv(scene: Scene, seed: int = 0, clip_s: float = 1.0) -> ConversationInput:
    rng = np.random.default_rng(seed)
    clips = [(rng.standard_normal(round(clip_s * SR)) * 0.01).astype(np.float32) for _ in scene.turns]
    return ConversationInput(scene, clips, np.zeros(0, np.float32), seed)


def _model(name: str, **params):
    m = build_model(f"tests.fixtures.faulty_models:{name}", params)
    m.load("cpu")
    return m


def _run(model, convs, **kw):
    return run_conversations(model, convs, ProtocolSettings(), VadSettings(), **kw)


# --- per-conversation faults: only the rows at fault fail ---------------------------------------

def test_nan_output_fails_only_that_stream(scene):
    res = _run(_model("NaNModel"), [_conv(scene, 0), _conv(scene, 1)])
    assert res[0].status == "error" and res[0].output is None
    assert res[0].reason == "model nan returned NaN/Inf samples (step 10 at 0.80 s of stream)"
    assert res[1].status == "ok" and res[1].output is not None and len(res[1].output) > 0


@pytest.mark.parametrize("overlap", [False, True])
def test_row_error_fails_its_row_and_the_others_complete_in_full(scene, overlap):
    convs = [_conv(scene, 0), _conv(scene, 1), _conv(scene, 2)]
    clean = _run(_model("ToneModel"), convs)
    res = _run(_model("ToneModel", fault_step=5, rows=(1,)), convs, overlap=overlap)
    assert [r.status for r in res] == ["ok", "error", "ok"]
    assert res[1].reason == "model tone step 5 at 0.40 s of stream: decoder failed on stream 1"
    assert res[1].output is None
    for b in (0, 2):  # the other rows: the same full output as without the fault
        np.testing.assert_array_equal(res[b].output, clean[b].output)
        assert len(res[b].output) == max(p.end for p in res[b].placements) + SR * 2  # up to the 2 s tail
    assert np.all(res[0].output == TONE_0)


def test_the_record_carries_the_stored_outputs_peak(scene):
    """reduce flags a model whose peak stays below metrics.suspect_peak_dbfs: the peak is of the
    stored (16-bit) output, 3277/32767 for ToneModel's row 0, and None for a failed row."""
    res = _run(_model("ToneModel", fault_step=5, rows=(1,)), [_conv(scene, 0), _conv(scene, 1)])
    assert res[0].record(SR)["output_peak"] == float(TONE_0)
    assert res[1].record(SR)["output_peak"] is None


def test_a_row_that_finished_before_the_fault_stays_ok(scene):
    convs = [_conv(scene, 0, clip_s=0.2), _conv(scene, 1, clip_s=3.0), _conv(scene, 2, clip_s=3.0)]
    clean = _run(_model("ToneModel"), convs)
    ended = -(-len(clean[0].output) // FRAME)  # row 0 has streamed its last frame before this step
    assert ended < len(clean[1].output) // FRAME
    res = _run(_model("ToneModel", fault_step=ended + 2, rows=(0, 1)), convs)
    assert [r.status for r in res] == ["ok", "error", "ok"]
    assert res[1].reason.endswith("decoder failed on stream 1")
    for b in (0, 2):
        np.testing.assert_array_equal(res[b].output, clean[b].output)


def test_row_error_in_open_fails_only_that_row(scene):
    res = _run(_model("ToneModel", fault_step=-1, rows=(0,)), [_conv(scene, 0), _conv(scene, 1)])
    assert res[0].status == "error"
    assert res[0].reason == "model tone open of p0-explicit in row 0: decoder failed on stream 0"
    assert res[1].status == "ok" and len(res[1].output) > 0


def test_row_error_from_step_without_the_others_output_fails_the_others(scene):
    res = _run(_model("ToneModel", fault_step=5, rows=(1,), with_output=False), [_conv(scene, s) for s in range(3)])
    assert [r.status for r in res] == ["error", "error", "error"]
    assert res[1].reason.endswith("decoder failed on stream 1")
    assert res[0].reason == res[2].reason == ("model tone step 5 at 0.40 s of the run raised RowError for rows [1] "
                                              "without the output of the other rows (RowError.output)")


def test_row_error_naming_a_row_outside_the_batch_fails_the_batch(scene):
    res = _run(_model("ToneModel", fault_step=5, rows=(7,)), [_conv(scene, 0), _conv(scene, 1)])
    assert [r.reason for r in res] == ["model tone step 5 at 0.40 s of the run blamed rows [7] of 2"] * 2


def test_unschedulable_conversation_is_an_error(scene):
    bad = _conv(scene)
    bad.turn_clips[1] = np.zeros(0, np.float32)  # an empty clip cannot be placed
    ok = _conv(scene, 1)
    res = _run(build_model("silent"), [bad, ok])
    assert res[0].status == "error" and res[0].reason.startswith("cannot schedule: ")
    assert res[1].status == "ok"


# --- failures that may be transient fail the attempt ------------------------------------------

@pytest.mark.parametrize(("call", "where"), [("step", "step 3 at 0.24 s of the run"),
                                             ("open", "open of p0-explicit in row 0")])
def test_an_exception_that_is_not_a_row_error_fails_the_attempt(scene, call, where):
    with pytest.raises(ModelFailure, match=rf"^model crashing: {where} raised RuntimeError: "
                                           r"CUDA out of memory\. Tried to allocate 2\.00 GiB$") as info:
        _run(_model("CrashingModel", call=call), [_conv(scene), _conv(scene, 1)])
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_stalled_step_fails_the_attempt_naming_the_step(scene, overlap):
    m = _model("StallingModel", stall_step=2)
    try:
        with pytest.raises(ModelStalled, match=r"^model stalling: step 2 at 0\.16 s of the run did not return within "
                                               r"0\.2 s \(infer\.step_timeout_s\); the actor must be discarded$"):
            _run(m, [_conv(scene)], step_timeout_s=0.2, first_step_timeout_s=60.0, overlap=overlap)
    finally:
        m.release.set()


@pytest.mark.parametrize("overlap", [False, True])
def test_the_first_step_has_its_own_allowance(scene, overlap):
    m = _model("StallingModel", stall_step=0)
    try:
        with pytest.raises(ModelStalled, match=r"step 0 at 0\.00 s of the run did not return within 0\.2 s "
                                               r"\(infer\.first_step_timeout_s\)"):
            _run(m, [_conv(scene)], step_timeout_s=60.0, first_step_timeout_s=0.2, overlap=overlap)
    finally:
        m.release.set()


class SlowFirstStep(Listener):
    """Silent; its first step takes 1 s (a warm-up, within the first step's allowance)."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def step(self, frames: np.ndarray) -> np.ndarray:
        self.steps += 1
        if self.steps == 1:
            time.sleep(1.0)
        return super().step(frames)


def test_an_error_beside_a_step_waits_the_step_out_and_leaves_the_thread_usable(scene, monkeypatch):
    """With overlap, the runner's own work during a step (here the detector, made to fail) raising while the
    step runs: the step is waited out under its own allowance before the error goes up, so closing the rows
    does not queue behind it on the shorter allowance and mark a healthy model thread stuck."""
    from harness.runtime import runner

    def broken(det):
        raise RuntimeError("detector broke")

    monkeypatch.setattr(runner.StreamingDetector, "settle", broken)
    thread = ModelThread("slow")
    m = SlowFirstStep()
    with pytest.raises(RuntimeError, match="detector broke"):
        _run(m, [_conv(scene)], step_timeout_s=0.3, first_step_timeout_s=5.0, thread=thread, overlap=True)
    assert thread.stuck is None and m.steps == 1
    assert thread.call("a later call", lambda: 42, timeout_s=1.0) == 42


# --- the output contract ---------------------------------------------------------------------

def test_int16_counts_fail_every_row_naming_the_adapter_and_dtype(scene):
    res = _run(_model("BadOutputModel", kind="int16"), [_conv(scene, 0), _conv(scene, 1)])
    assert [r.status for r in res] == ["error", "error"]
    assert res[0].reason == ("model bad_output returned int16 samples; expected float32 in [-1, 1] "
                             "(step 0 at 0.00 s of the run)")


def test_an_out_of_range_row_fails_only_that_row(scene):
    res = _run(_model("BadOutputModel", kind="counts_row1"), [_conv(scene, 0), _conv(scene, 1)])
    assert res[1].reason == "model bad_output returned samples outside [-1, 1]: peak 3276 (step 0 at 0.00 s of stream)"
    assert res[0].status == "ok" and np.all(res[0].output == TONE_0)


def test_wrong_output_shape_is_an_error(scene):
    (res,) = _run(_model("WrongShapeModel"), [_conv(scene)])
    assert res.reason == ("model wrong_shape returned shape (1, 1919); expected (1, 1920) ([B, frame_out]) "
                          "(step 0 at 0.00 s of the run)")


def test_check_output_tolerates_less_than_one_16_bit_step_over_full_scale():
    y = np.zeros((3, 4))  # float64 is accepted and converted
    y[0, 1] = 1 + 0.5 / 32767  # rounds to full scale on the stored grid: accepted
    y[1, 2] = -(1 + 2 / 32767)
    y[2, 3] = np.inf
    out, bad = check_output(y, "m", (3, 4))
    assert out.dtype == np.float32 and out[0, 1] == np.float32(1 + 0.5 / 32767)
    assert bad == {1: "model m returned samples outside [-1, 1]: peak 1.00006", 2: "model m returned NaN/Inf samples"}
    assert not out[1:].any()  # failing rows are zeroed, never passed on
    with pytest.raises(OutputContractError, match=r"^model m returned object samples; expected float32 in \[-1, 1\]$"):
        check_output(None, "m", (3, 4))


# --- the input: room tone and echo -------------------------------------------------------------

def test_room_tone_is_the_same_stream_whatever_the_frame_size():
    whole = RoomTone("pink", -70.0, 7, SR).read(24_000)
    tone = RoomTone("pink", -70.0, 7, SR)
    np.testing.assert_array_equal(np.concatenate([tone.read(n) for n in (1920, 1280, 333, 20_467)]), whole)
    assert not np.array_equal(RoomTone("pink", -70.0, 8, SR).read(24_000), whole)  # seeded per conversation


def test_room_tone_loops_without_a_seam():
    tone = RoomTone("white", -70.0, 7, SR)
    start = tone.read(10)
    tone.read(TABLE_SAMPLES - 10)
    np.testing.assert_array_equal(tone.read(10), start)  # the table is periodic: the read wraps around
    table = noise_table("pink", SR).astype(np.float64)
    step = np.abs(np.diff(table))
    assert abs(table[0] - table[-1]) <= step.max()  # its end joins its start like any two neighbours


@pytest.mark.parametrize("kind", ["white", "pink"])
def test_room_tone_level_and_spectrum(kind):
    x = RoomTone(kind, -70.0, 3, SR).read(TABLE_SAMPLES).astype(np.float64)  # one whole period
    assert 20 * np.log10(np.sqrt(np.mean(x**2))) == pytest.approx(-70.0, abs=1e-3)
    f, p = welch(x, SR, nperseg=4096)

    def band_db(lo):  # mean power density over one octave
        return 10 * np.log10(p[(f >= lo) & (f < 2 * lo)].mean())

    # white: flat; pink: -3 dB per octave, 12 dB over the four octaves from 100 Hz to 1.6 kHz
    assert band_db(100) - band_db(1600) == pytest.approx(0.0 if kind == "white" else 12.0, abs=1.5)


def test_room_tone_runs_under_the_whole_input(scene):
    conv = _conv(scene, seed=5)
    m = _model("EchoProbeModel")
    run_conversations(m, [conv], ProtocolSettings(), VadSettings())  # default: pink at -70 dBFS
    heard = np.concatenate([f[0] for f in m.inputs])
    tone = RoomTone("pink", -70.0, 5, SR).read(len(heard))
    # turn 0 (speech) is samples [0, 24000), then the 0.5 s gap: the floor runs under both
    np.testing.assert_array_equal(heard[:SR], conv.turn_clips[0] + tone[:SR])
    np.testing.assert_array_equal(heard[SR:SR + SR // 2], tone[SR:SR + SR // 2])
    m = _model("EchoProbeModel")
    run_conversations(m, [conv], replace(ProtocolSettings(), room_tone="zeros"), VadSettings())
    assert not np.concatenate([f[0] for f in m.inputs])[SR:SR + SR // 2].any()  # exact digital silence


def test_room_tone_setting_is_checked():
    with pytest.raises(ValueError, match=r"room_tone must be one of zeros, white, pink, got 'brown'"):
        ProtocolSettings(room_tone="brown")
    with pytest.raises(ValueError, match=r"room_tone_dbfs must be below 0 dBFS, got 0"):
        ProtocolSettings(room_tone_dbfs=0)


@pytest.mark.parametrize("echo", [False, True])
def test_echo_switch(scene, echo):
    m = _model("EchoProbeModel")
    proto = replace(ProtocolSettings(), echo=echo, room_tone="zeros")
    run_conversations(m, [_conv(scene)], proto, VadSettings())
    # the probe always says 0.25; with echo its own output comes back in its input one frame later
    second_frame = m.inputs[1][0, :10]  # no preamble: turn 0 starts at sample 0
    human = _conv(scene).turn_clips[0][1920:1930]
    expected = human + (0.25 if echo else 0.0)
    np.testing.assert_allclose(second_frame, expected, atol=1e-4)


def test_silent_model_output_is_zero_up_to_the_stream_end(scene):
    m = build_model("silent")
    m.load("cpu")
    (res,) = _run(m, [_conv(scene)])
    last = max(p.start + p.length for p in res.placements)
    assert len(res.output) == last + ProtocolSettings().s(ProtocolSettings().tail_s)
    assert not res.output.any()


@pytest.mark.parametrize("kind", [RowError, RowPreempted])
def test_row_error_needs_a_row_and_pickles_with_its_fields(kind):
    with pytest.raises(ValueError, match=f"{kind.__name__} needs at least one row"):
        kind({})
    e = pickle.loads(pickle.dumps(kind({2: "bad input"}, np.ones((3, 4), np.float32))))
    assert type(e) is kind
    assert e.reasons == {2: "bad input"} and e.output.shape == (3, 4) and str(e) == "row 2: bad input"


# --- continuous batching: rows refilled as conversations end, each row independent ----------------

class DelayedEcho16k(DuplexModel):
    """A 16 kHz model with 80 ms frames that says back what it heard 0.4 s earlier (per-row
    state; its speech is real speech, so the detector and the scheduler react to it)."""

    DELAY = 6 * 1280

    def __init__(self, max_batch: int = 4):
        self.info = ModelInfo("delayed_echo16k", 16_000, 16_000, 1280, 1280, max_batch)
        self.opens: list[tuple[int, str]] = []
        self.closes: list[int] = []

    def load(self, device: str) -> None:
        self._hist = np.zeros((self.info.max_batch, self.DELAY), np.float32)

    def open(self, row, stream) -> None:
        self.opens.append((row, stream.conversation_id))
        self._hist[row] = 0.0

    def close(self, row) -> None:
        self.closes.append(row)

    def step(self, frames: np.ndarray) -> np.ndarray:
        r = frames.shape[0]
        out = self._hist[:r, :1280].copy()
        self._hist[:r] = np.concatenate([self._hist[:r, 1280:], frames], axis=1)
        return 0.8 * out


@pytest.fixture(scope="module")
def spoken():
    from harness.models.smoke import smoke_conversations

    return smoke_conversations()


def test_a_conversation_streams_the_same_alone_and_refilled_into_a_busy_batch(spoken):
    """Row independence: each conversation alone (one row) and in two rows where the third is
    refilled into the row the shortest one freed, while the other row streams on."""
    proto = ProtocolSettings(tail_s=0.5)
    alone = []
    for c in spoken:
        m = DelayedEcho16k()
        m.load("cpu")
        alone += run_conversations(m, [c], proto, VadSettings())
    m = DelayedEcho16k()
    m.load("cpu")
    batch = run_conversations(m, spoken, proto, VadSettings(), rows=2)
    assert [r.status for r in batch] == ["ok"] * 3
    # the third conversation went into the row the first one to end freed, and every row was closed
    freed = 0 if len(batch[0].output) < len(batch[1].output) else 1
    ids = [c.scene.scene_id for c in spoken]
    assert m.opens == [(0, ids[0]), (1, ids[1]), (freed, ids[2])]
    assert sorted(m.closes) == sorted([0, 1, freed])
    assert {e.kind for r in batch for e in r.events} & {"endpoint", "cap"}  # the scheduler heard the echo
    for a, b in zip(alone, batch, strict=True):
        np.testing.assert_array_equal(a.output, b.output)
        assert a.events == b.events and a.placements == b.placements
        # Silero's kernels round differently at batch 1 and 2 (about 1e-6): far from any threshold
        np.testing.assert_allclose(a.speech_probs, b.speech_probs, atol=1e-5)
        assert b.wall_s > 0 and 0 < b.step_s <= b.wall_s


class FailsARow(DelayedEcho16k):
    """DelayedEcho16k whose row 1 says NaN at step ``at`` (that stream fails; the row is refilled)."""

    def __init__(self, at: int):
        super().__init__(max_batch=2)
        self.at, self.steps = at, 0

    def step(self, frames: np.ndarray) -> np.ndarray:
        y = super().step(frames)
        self.steps += 1
        if self.steps == self.at:
            y[1] = np.nan
        return y


class PreemptsAStream(DelayedEcho16k):
    """DelayedEcho16k whose K/V pool runs out: the stream of conversation ``cid`` is given up
    (:class:`RowPreempted`, with the other rows' output) at its own step ``at``, its first ``times`` times.
    ``metered``: the conversations whose usage was asked, in order."""

    def __init__(self, cid: str, at: int, times: int = 1):
        super().__init__(max_batch=2)
        self.cid, self.at, self.times = cid, at, times
        self.streams: dict[int, str] = {}  # row -> conversation it holds
        self.k = np.zeros(2, np.int64)  # each row's steps since its open
        self.metered: list[str] = []

    def open(self, row, stream) -> None:
        super().open(row, stream)
        self.streams[row], self.k[row] = stream.conversation_id, 0

    def step(self, frames: np.ndarray) -> np.ndarray:
        y = super().step(frames)
        due = [b for b, cid in self.streams.items() if cid == self.cid and self.k[b] == self.at]
        self.k[:len(frames)] += 1
        if due and self.times > 0:
            self.times -= 1
            raise RowPreempted({due[0]: "K/V pool exhausted"}, y)
        return y

    def usage(self, row) -> None:
        self.metered.append(self.streams[row])


def _stream(model, convs, proto, **kw):
    """:func:`stream_conversations` of a loaded ``model``: ``(every (index, result) handed over, stats)``."""
    model.load("cpu")
    handed = []
    stats = stream_conversations(model, convs, proto, VadSettings(), 600.0, lambda i, r: handed.append((i, r)), **kw)
    return handed, stats


@pytest.mark.parametrize("overlap", [False, True])
def test_a_stream_given_up_runs_again_from_its_start_and_ends_as_if_never_given_up(spoken, overlap):
    """RowPreempted: the stream of the first conversation is given up mid-turn (5.6 s in, its scheduler
    has placed and decided): its row is closed, its partial output dropped, and it reruns from its start
    behind the queue's last, handed over once, the same as in a run never given up, as are the others."""
    proto = ProtocolSettings(tail_s=0.5)
    ids = [c.scene.scene_id for c in spoken]
    clean, _ = _stream(DelayedEcho16k(max_batch=2), spoken, proto, rows=2)
    m = PreemptsAStream(ids[0], at=70)
    handed, stats = _stream(m, spoken, proto, rows=2, overlap=overlap)
    assert sorted(i for i, _ in handed) == [0, 1, 2]  # each once
    assert [cid for _, cid in m.opens] == [ids[0], ids[1], ids[2], ids[0]]  # back of the queue
    assert sorted(m.closes) == sorted(b for b, _ in m.opens)  # every stream opened was closed, the given-up one too
    assert sorted(m.metered) == ids  # usage asked of the delivered streams alone (a discarded one meters nothing)
    assert stats.requeued == stats.to_dict()["requeued"] == 1
    clean = dict(clean)
    for i, r in handed:
        assert r.status == "ok", r.reason
        assert r.events == clean[i].events and r.placements == clean[i].placements
        np.testing.assert_array_equal(r.output, clean[i].output)
        np.testing.assert_allclose(r.speech_probs, clean[i].speech_probs, atol=1e-5)  # Silero's batch rounding


@pytest.mark.parametrize("times", [RowBatch.MAX_REQUEUES, RowBatch.MAX_REQUEUES + 1])
def test_a_stream_given_up_more_than_max_requeues_times_is_an_error_naming_the_preemptions(spoken, times):
    (conv,) = spoken[:1]
    m = PreemptsAStream(conv.scene.scene_id, at=10, times=times)
    handed, stats = _stream(m, [conv], ProtocolSettings(tail_s=0.5))
    ((_, r),) = handed
    assert stats.requeued == RowBatch.MAX_REQUEUES == 3 and len(m.opens) == RowBatch.MAX_REQUEUES + 1
    if times == RowBatch.MAX_REQUEUES:
        assert r.status == "ok"
    else:
        assert r.status == "error" and r.output is None
        assert r.reason == ("preempted 4 times (run again at most 3 times), the last: model delayed_echo16k "
                            "step 10 at 0.80 s of stream: K/V pool exhausted")


@pytest.mark.parametrize("echo", [False, True])
def test_overlap_changes_when_the_runner_works_not_what_it_computes(spoken, echo):
    """With ``overlap`` the detector scores the rows no decision waits on, and the next input is rendered
    for the rows the next step will not visit, while the model steps; the rows are divided between the
    detector's batches alike either way, so inputs (said back by the model), decisions and speech
    probabilities are bit for bit the same: two rows, refills, a stream failing mid-run (its row
    rendered ahead, then refilled), the echo heard as speech, with the output mixed back in or not."""
    proto = ProtocolSettings(tail_s=0.5, echo=echo, room_tone="white")
    convs = [*spoken, *spoken]
    runs = []
    for overlap in (False, True):
        m = FailsARow(at=40)
        m.load("cpu")
        runs.append(run_conversations(m, convs, proto, VadSettings(), rows=2, overlap=overlap))
    off, on = runs
    assert [r.status for r in on] == ["ok", "error"] + ["ok"] * 4 and "NaN" in on[1].reason
    assert {e.kind for r in on for e in r.events} & {"endpoint", "cap"}
    for a, b in zip(off, on, strict=True):
        assert (a.status, a.reason, a.events, a.placements) == (b.status, b.reason, b.events, b.placements)
        if a.status == "ok":
            np.testing.assert_array_equal(a.output, b.output)
            np.testing.assert_array_equal(a.speech_probs, b.speech_probs)


def test_overlap_on_many_rows_renders_each_row_as_without(scene):
    """36 rows (the input rendered in row groups on the detector's threads, ahead and after the step): the
    model says back what it heard, bit for bit the same with and without overlap, refills included."""
    convs = [_conv(scene, seed, clip_s=0.6 + 0.02 * seed) for seed in range(44)]
    runs = []
    for overlap in (False, True):
        m = DelayedEcho16k(max_batch=36)
        m.load("cpu")
        runs.append(run_conversations(m, convs, ProtocolSettings(room_tone="white"), VadSettings(threads=2), rows=36,
                                      overlap=overlap))
    for a, b in zip(*runs, strict=True):
        assert a.status == b.status == "ok" and a.events == b.events
        np.testing.assert_array_equal(a.output, b.output)
        np.testing.assert_array_equal(a.speech_probs, b.speech_probs)


class WaitsForTheDetector(DelayedEcho16k):
    """Each step waits (at most 0.5 s) until the runner's detector has been told to settle: with
    ``overlap`` that happens while the step runs, so the step never waits long."""

    def __init__(self):
        super().__init__(max_batch=1)
        self.settling, self.stepping = threading.Event(), threading.Event()

    def step(self, frames: np.ndarray) -> np.ndarray:
        self.stepping.set()
        self.settling.wait(0.5)
        self.settling.clear()
        self.stepping.clear()
        return super().step(frames)


def test_with_overlap_the_detector_scores_the_waiting_rows_while_the_model_steps(spoken, monkeypatch):
    """Every push whose rows were not all due is settled while the model's next step runs (on its
    thread), not after it; the row-steps whose scores were due are counted."""
    from harness.runtime import runner

    m = WaitsForTheDetector()
    m.load("cpu")
    during: list[bool] = []
    settle = runner.StreamingDetector.settle

    def watched(det):
        if det._pending is not None:  # work left: is a step running (or about to start, just submitted)?
            during.append(m.stepping.wait(0.5))
        settle(det)
        m.settling.set()

    monkeypatch.setattr(runner.StreamingDetector, "settle", watched)
    done = []
    stats = runner.stream_conversations(m, spoken[:1], ProtocolSettings(tail_s=0.5), VadSettings(), 600.0,
                                        lambda i, r: done.append(r), overlap=True)
    assert [r.status for r in done] == ["ok"] and len(during) > stats.steps // 2 and all(during)
    assert 0 < stats.due_row_steps < stats.steps  # the first step, T's wait, the end: not every step


def test_refills_wait_for_the_resampler_and_detector_grids():
    # 80 ms at 24 kHz is 2.5 Silero windows (768 samples): refills every second step
    assert refill_period(1920, 24_000, 24_000, [(24_000, 1), (24_000, 1), (24_000, 768)]) == 3840
    # a 16 kHz model: 1280 samples per 80 ms step, resampler blocks of 3 (24 kHz) and 2 (16 kHz)
    assert refill_period(1920, 24_000, 16_000, [(24_000, 3), (16_000, 2), (24_000, 768)]) == 3840
    # MiniCPM-o's 1 s units: 4 s
    assert refill_period(24_000, 24_000, 24_000, [(24_000, 768)]) == 96_000


class MeteredRealtime(DuplexModel):
    """A remote-service stand-in: realtime, refuses admission a few times, meters its streams."""

    def __init__(self, refusals: int = 3):
        from harness.models.base import REALTIME

        self.info = ModelInfo("metered", SR, SR, FRAME, FRAME, 2, frozenset({REALTIME}))
        self.refusals, self.steps = refusals, np.zeros(2, np.int64)

    def load(self, device: str) -> None:
        pass

    def admit(self) -> bool:
        self.refusals -= 1
        return self.refusals < 0

    def open(self, row, stream) -> None:
        self.steps[row] = 0

    def step(self, frames: np.ndarray) -> np.ndarray:
        self.steps[: frames.shape[0]] += 1
        return np.zeros_like(frames)

    def usage(self, row) -> dict:
        return {"audio_in_s": round(float(self.steps[row]) * FRAME / SR, 2)}


def test_a_realtime_model_is_paced_admitted_when_it_says_so_and_metered(scene):
    m = MeteredRealtime()
    proto = ProtocolSettings(tail_s=0.2, fresh_onset_window_s=0.3, turn_gap_s=0.1)
    convs = [_conv(scene, 0, clip_s=0.2), _conv(scene, 1, clip_s=0.2)]
    import time as _time

    t0 = _time.perf_counter()
    res = run_conversations(m, convs, proto, VadSettings(), rows=2)
    wall = _time.perf_counter() - t0
    assert [r.status for r in res] == ["ok", "ok"] and m.refusals < 0
    longest = max(len(r.output) for r in res) / SR
    assert wall >= longest  # never faster than the wall clock (pacing is a lower bound, not a speed claim)
    for r in res:
        rec = r.record(SR)
        assert rec["usage"] == {"audio_in_s": pytest.approx(-(-len(r.output) // FRAME) * FRAME / SR, abs=0.09)}


# --- what a model is told when a stream opens: only what it declares (issue 20) -----------------

def test_only_a_model_that_declares_reads_schedule_sees_the_script_and_vocabulary_never_has_the_answer():
    from harness.models.base import READS_SCHEDULE, VOCABULARY

    turns = (Turn("A", "Ben, the train leaves at seven.", Label.N2, Target.HUMAN),
             Turn("B", "Aria, when does the train leave?", Label.T, Target.ARIA),
             Turn("A", "Dana, is the shop open?", Label.N4_Q, Target.HUMAN, answer="until nine"))
    secret = Scene("s0-explicit", "s0", "explicit", ("A", "B"), turns, "at half past six")
    conv = replace(_conv(secret, 3, clip_s=0.2), duty_text="Answer when addressed.")
    told = {}
    for caps in (frozenset(), frozenset({VOCABULARY}), frozenset({READS_SCHEDULE})):
        m = Listener(caps, rows=2)
        (res,) = run_conversations(m, [conv], ProtocolSettings(tail_s=0.2), VadSettings())
        assert res.status == "ok", res.reason
        (told[caps],) = m.opened
    plain, listening, cheating = told.values()
    # no text_prompt: no duty text either (tests/unit/test_protocol_prompts.py); the vocabulary still has it
    assert (plain.conversation_id, plain.seed, plain.duty_text) == ("s0-explicit", 3, "")
    assert plain.scene is None and plain.vocabulary == ()  # no capability: neither script nor room text
    assert listening.scene is None
    assert listening.vocabulary == (*[t.text for t in turns], "Answer when addressed.")
    assert not any(key in text for text in listening.vocabulary for key in ("half past six", "until nine"))
    assert cheating.scene is secret and cheating.vocabulary == ()
