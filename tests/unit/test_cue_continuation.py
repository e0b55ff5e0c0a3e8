"""Duplex Cue's conditional continuation runner: the switch point on the step grid, what is
forced and fed when, the known-outcome baselines, and item errors."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audio.io import quantize
from harness.cue.continuation import ContinuationInput, item_span, run_continuations
from harness.cue.schema import CueItem, Word
from harness.models.base import TEACHER_FORCING, DuplexModel, ModelInfo, RowError, RowPreempted
from harness.models.registry import build_model

SR = 24_000
F = 1_920
LEAD, CONTEXT, WINDOW = 0.08, 1.0, 1.0


def _item(iid: str, onset_s: float) -> CueItem:
    return CueItem(iid, f"{iid}-rec", "backchannel", (Word("yeah", onset_s, onset_s + 0.3),), onset_s + 0.3,
                   onset_s + 1.5, "continued")


def _input(iid: str, onset_s: float, seed: int, dur_s: float = 4.0) -> ContinuationInput:
    rng = np.random.default_rng(seed)
    audio = quantize((rng.standard_normal((2, round(dur_s * SR))) * 0.1).astype(np.float32))
    return ContinuationInput(_item(iid, onset_s), audio, seed)


def _run(model, inputs, **kw):
    return run_continuations(model, inputs, SR, lead_s=LEAD, context_s=CONTEXT, window_s=WINDOW, **kw)


class Probe(DuplexModel):
    """Records every step_forced call per open stream: (step of the stream, heard, forced, mask);
    says 0.25 on free steps and the forced audio on forced ones. ``fail``: item id -> RowError at open."""

    def __init__(self, fail: str | None = None):
        self.info = ModelInfo("probe", SR, SR, F, F, 4, frozenset({TEACHER_FORCING}))
        self.fail = fail
        self.rows: dict[int, str] = {}
        self.log: dict[str, list[tuple[int, np.ndarray, np.ndarray, bool]]] = {}
        self.contexts: dict[str, object] = {}

    def load(self, device: str) -> None:
        pass

    def open(self, row, stream):
        if stream.conversation_id == self.fail:
            raise RowError({row: "cannot take this one"})
        self.rows[row] = stream.conversation_id
        self.log[stream.conversation_id] = []
        self.contexts[stream.conversation_id] = stream

    def close(self, row):
        self.rows.pop(row, None)

    def step(self, frames):
        raise AssertionError("a cue stream is stepped with step_forced only")

    def step_forced(self, frames, forced, mask):
        out = np.full(frames.shape, 0.25, np.float32)
        for b, iid in self.rows.items():
            log = self.log[iid]
            log.append((len(log), frames[b].copy(), forced[b].copy(), bool(mask[b])))
        out[mask] = forced[mask]
        return out


def test_the_switch_point_on_the_step_grid():
    # switch 2.5 s, context 1 s = 12.5 frames: 12 whole frames fit, so the stream starts 12 steps before the switch
    span = item_span(_item("a", 2.58), SR, F, LEAD, CONTEXT, WINDOW)
    assert (span.start, span.switch, span.end, span.forced) == (60_000 - 12 * F, 60_000, 84_000, 12)
    exact = item_span(_item("a", 2.58), SR, F, LEAD, 0.96, WINDOW)  # 12 whole frames: start = switch - context
    assert (exact.start, exact.forced) == (60_000 - 24_000 + 960, 12)
    clipped = item_span(_item("b", 0.58), SR, F, LEAD, CONTEXT, WINDOW)  # 0.5 s before the switch: 6 frames fit
    assert (clipped.start, clipped.switch, clipped.forced) == (12_000 - 6 * F, 12_000, 6)
    none = item_span(_item("c", 0.05), SR, F, LEAD, CONTEXT, WINDOW)  # switch clipped at 0: nothing to force
    assert (none.start, none.switch, none.forced, none.end) == (0, 0, 0, 24_000)


def test_forced_exactly_before_the_switch_with_as_audio_bs_audio_heard_throughout():
    inputs = [_input("a", 2.58, 0), _input("b", 0.58, 1), _input("c", 1.9, 2)]
    model = Probe()
    res = _run(model, inputs, rows=2)  # three items on two rows: one row is refilled
    assert [r.status for r in res] == ["ok"] * 3
    for inp, r in zip(inputs, res, strict=True):
        span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
        log = model.log[inp.item.item_id]
        assert len(log) == -(-span.length // F)
        for k, heard, forced, mask in log:
            at = span.start + k * F
            np.testing.assert_array_equal(heard, inp.audio[1, at:at + F])
            assert mask == (k < span.forced)
            if mask:
                np.testing.assert_array_equal(forced, inp.audio[0, at:at + F])
        assert r.forced_steps == span.forced and len(r.output) == span.length
        free = span.forced * F
        assert span.start + free == span.switch  # forcing stops exactly at the switch point
        np.testing.assert_array_equal(r.output[:free], inp.audio[0, span.start:span.start + free])
        assert np.all(r.output[free:] == np.float32(quantize(np.float32([0.25]))[0]))
        rec = r.record(SR)
        assert rec["start_s"] == span.start / SR and rec["end_s"] == span.end / SR
        assert rec["switch_s"] == pytest.approx(inp.item.cue_onset_s - LEAD) and rec["n_samples"] == span.length
        assert model.contexts[inp.item.item_id].reference is None  # a real model never sees A's recording


class Lagged(DuplexModel):
    """Returns at step n the frame it wrote at step n - 1 (PersonaPlex's output lag): it writes the
    forced frame on forced steps and, on free ones, a frame of its own (the step's index, / 1000,
    on every sample), so each stored sample says which step wrote it."""

    def __init__(self):
        self.info = ModelInfo("lagged", SR, SR, F, F, 4, frozenset({TEACHER_FORCING}), output_lag_steps=1)
        self.steps: dict[int, int] = {}
        self.written = np.zeros((4, F), np.float32)

    def load(self, device: str) -> None:
        pass

    def open(self, row, stream):
        self.steps[row] = 0
        self.written[row] = 0.0  # the first step returns nothing written yet

    def step(self, frames):
        raise AssertionError("a cue stream is stepped with step_forced only")

    def step_forced(self, frames, forced, mask):
        out = self.written[:len(frames)].copy()
        for b in range(len(frames)):
            k = self.steps.get(b, 0)
            self.written[b] = forced[b] if mask[b] else np.float32((k + 1) / 1000)
            self.steps[b] = k + 1
        return out


def test_a_models_output_lag_is_taken_out_of_the_window():
    """Issue 23.2: the window [switch, end) holds exactly the model's own frames for that span:
    not A's last forced frame at its start, none of its frames cut at its end."""
    inputs = [_input("a", 2.58, 0), _input("b", 0.58, 1), _input("c", 1.9, 2)]
    res = _run(Lagged(), inputs, rows=2)  # c is opened in a refilled row
    for inp, r in zip(inputs, res, strict=True):
        span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
        assert r.status == "ok" and len(r.output) == span.length
        free = span.forced * F
        np.testing.assert_array_equal(r.output[:free], inp.audio[0, span.start:span.switch])  # forced, on time
        steps = -(-(span.length - free) // F)
        own = np.repeat(quantize(np.float32([(span.forced + k + 1) / 1000 for k in range(steps)])), F)
        np.testing.assert_array_equal(r.output[free:], own[:span.length - free])  # step forced + k from the switch
    assert _run(Probe(), inputs[:1])[0].output.shape == res[0].output.shape  # a model without lag: same length
    with pytest.raises(ValueError, match="output_lag_steps must be an int >= 0"):
        bad = Lagged()
        bad.info = ModelInfo("lagged", SR, SR, F, F, 4, frozenset({TEACHER_FORCING}), output_lag_steps=-1)
        _run(bad, inputs)


def test_a_converted_a_channel_is_forced_and_the_reference_stays_the_original():
    """Issue 23.4: a recording with A converted to the forcing voice (its third row) is forced with
    that row; A's original channel stays the reference (replay's window is the original)."""
    inp = _input("a", 2.58, 0)
    rng = np.random.default_rng(9)
    converted = quantize((rng.standard_normal(inp.audio.shape[1]) * 0.1).astype(np.float32))
    three = ContinuationInput(inp.item, np.concatenate([inp.audio, converted[None]]), inp.seed)
    model = Probe()
    r = _run(model, [three])[0]
    span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
    for k, heard, forced, mask in model.log["a"]:
        at = span.start + k * F
        np.testing.assert_array_equal(heard, inp.audio[1, at:at + F])
        if mask:
            np.testing.assert_array_equal(forced, converted[at:at + F])
    np.testing.assert_array_equal(r.output[:span.forced * F], converted[span.start:span.switch])
    out = _run(_baseline("replay"), [three])[0].output
    np.testing.assert_array_equal(out[span.forced * F:], inp.audio[0, span.switch:span.end])  # the reference: A's own


class Echo16k(DuplexModel):
    """At 16 kHz: says the forced audio on forced steps and half of what it hears on free ones (row-local)."""

    def __init__(self):
        self.info = ModelInfo("echo16k", 16_000, 16_000, 1_280, 1_280, 4, frozenset({TEACHER_FORCING}))

    def load(self, device: str) -> None:
        pass

    def open(self, row, stream):
        pass

    def step(self, frames):
        raise AssertionError("a cue stream is stepped with step_forced only")

    def step_forced(self, frames, forced, mask):
        return np.where(mask[:, None], forced, 0.5 * frames).astype(np.float32)


def _tones(iid: str, onset_s: float, seed: int, dur_s: float = 4.0) -> ContinuationInput:
    """An item whose two channels are tones under 3 kHz (they pass 16 kHz resampling unchanged)."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(dur_s * SR)) / SR
    ch = [sum(0.1 * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)) for f in rng.uniform(200, 3000, 3))
          for _ in range(2)]
    return ContinuationInput(_item(iid, onset_s), quantize(np.stack(ch).astype(np.float32)), seed)


def test_resampled_rows_are_aligned_and_independent_of_batching_and_refills():
    from harness.audio.resample import StreamResampler

    inputs = [_tones("a", 2.58, 0), _tones("b", 0.58, 1), _tones("c", 1.9, 2)]
    batched = _run(Echo16k(), inputs, rows=2)  # c is opened in a refilled row, after a's or b's stream
    lag = round(StreamResampler(1, SR, 16_000).delay_s * SR)  # the 24 -> 16 kHz side's fixed delay (12 samples)
    for inp, r in zip(inputs, batched, strict=True):
        alone = _run(Echo16k(), [inp])[0]
        np.testing.assert_array_equal(r.output, alone.output)  # per-row resampler resets: bit for bit
        span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
        a, b = inp.audio[:, span.start - lag:span.end - lag]  # what the model's output should be, delayed by lag
        free = span.forced * F
        for part, want in ((slice(lag + 100, free - 100), a), (slice(free + 100, span.length), 0.5 * b)):
            np.testing.assert_allclose(r.output[part], want[part], atol=2e-3)  # A forced, then B heard: aligned


class GivesUpAnItem(Echo16k):
    """Echo16k whose memory runs out once: the stream of item ``iid`` is given up (:class:`RowPreempted`,
    with the other rows' output) at its own step ``at``. ``opened``: the items opened, in order."""

    def __init__(self, iid: str, at: int):
        super().__init__()
        self.iid, self.at, self.given_up = iid, at, False
        self.opened: list[str] = []
        self.rows: dict[int, list] = {}  # row -> [item, its steps since its open]

    def open(self, row, stream):
        self.opened.append(stream.conversation_id)
        self.rows[row] = [stream.conversation_id, 0]

    def step_forced(self, frames, forced, mask):
        y = super().step_forced(frames, forced, mask)
        due = [b for b, (iid, k) in self.rows.items() if iid == self.iid and k == self.at]
        for stream in self.rows.values():
            stream[1] += 1
        if due and not self.given_up:
            self.given_up = True
            raise RowPreempted({due[0]: "K/V pool exhausted"}, y)
        return y


def test_an_item_given_up_runs_again_from_its_start_and_ends_as_if_never_given_up():
    inputs = [_tones("a", 2.58, 0), _tones("b", 0.58, 1), _tones("c", 1.9, 2)]
    clean = _run(Echo16k(), inputs, rows=2)
    m = GivesUpAnItem("a", at=10)
    res = _run(m, inputs, rows=2)
    assert m.opened == ["a", "b", "c", "a"]  # given up while forced, run again behind the queue
    for c, r in zip(clean, res, strict=True):
        assert r.status == "ok" and (r.start_s, r.switch_s, r.end_s) == (c.start_s, c.switch_s, c.end_s)
        np.testing.assert_array_equal(r.output, c.output)


def _baseline(name: str):
    m = build_model(name)
    m.load("cpu")
    return m


def test_replay_equals_as_recording_over_the_stream_bit_for_bit():
    inputs = [_input("a", 2.58, 0), _input("b", 0.58, 1), _input("c", 1.9, 2)]
    res = _run(_baseline("replay"), inputs, rows=2)
    for inp, r in zip(inputs, res, strict=True):
        span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
        assert r.status == "ok"
        np.testing.assert_array_equal(r.output, inp.audio[0, span.start:span.end])


def test_yield_now_is_silent_from_the_switch_and_ignore_says_its_history_again():
    inputs = [_input("a", 2.58, 0), _input("b", 0.58, 1)]
    quiet, talk = _run(_baseline("yield_now"), inputs), _run(_baseline("ignore"), inputs)
    for inp, q, t in zip(inputs, quiet, talk, strict=True):
        span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
        free = span.forced * F
        np.testing.assert_array_equal(q.output[:free], inp.audio[0, span.start:span.start + free])
        np.testing.assert_array_equal(t.output[:free], inp.audio[0, span.start:span.start + free])
        assert not q.output[free:].any()
        # ignore says its forced history again from its first speech (here the first sample), looped
        history = inp.audio[0, span.start:span.switch]
        again = np.resize(history, span.length - free)
        np.testing.assert_array_equal(t.output[free:], again)


def test_yield_on_cue_talks_until_it_hears_b_then_falls_silent():
    inp = _input("a", 2.58, 0)
    onset = round(2.58 * SR)
    inp.audio[1, :onset] = 0.0  # B silent until its cue
    r = _run(_baseline("yield_on_cue"), [inp])[0]
    span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
    free = span.forced * F
    np.testing.assert_array_equal(r.output[:free], inp.audio[0, span.start:span.switch])
    heard = (onset - span.start) // F * F  # the first step whose input holds B's cue (0.3 s reaction after it)
    stop = heard + round(0.3 * SR)
    assert np.sqrt(np.mean(r.output[free:stop] ** 2)) > 0.01 and not r.output[stop:].any()


def test_an_item_that_cannot_run_is_an_error_with_its_reason_and_the_others_complete():
    short = _input("short", 2.58, 3, dur_s=3.0)  # ends before switch 2.5 s + window 1 s
    inputs = [_input("a", 2.58, 0), short, _input("b", 0.58, 1), _input("c", 1.9, 2)]
    res = _run(Probe(fail="c"), inputs, rows=2)
    assert [r.status for r in res] == ["ok", "error", "ok", "error"]
    assert res[1].reason == ("cannot run: the recording ends at 3.000 s, before the continuation window's end "
                             "(3.500 s = switch 2.500 s + window 1 s)")
    assert res[1].output is None and res[1].record(SR)["start_s"] == (60_000 - 12 * F) / SR
    assert res[3].reason == "model probe open of c in row 1: cannot take this one"
    assert (len(res[0].output), len(res[2].output)) == (12 * F + 24_000, 6 * F + 24_000)  # context + window


def test_a_model_without_teacher_forcing_is_refused():
    with pytest.raises(ValueError, match="does not declare 'teacher_forcing'"):
        _run(_baseline("silent"), [_input("a", 2.58, 0)])


def test_replay_outside_duplex_cue_fails_its_stream():
    m = _baseline("replay")
    with pytest.raises(RowError, match="Duplex Cue self-test"):
        from harness.models.base import StreamContext

        m.open(0, StreamContext("x", 0, "", None))


# --- the cue-infer stage: shards, markers, the not-applicable marker, resume ----------------------

def test_cue_infer_stage_writes_the_contract_and_a_second_invocation_skips_completed_shards(tmp_path, monkeypatch):
    from contextlib import nullcontext

    import harness.runtime.sharded as sharded
    import harness.stages.cue_corpus as cue_corpus
    from harness.cue.corpus import CueCorpus
    from harness.cue.plan import CuePlan
    from harness.cue.schema import Recording
    from harness.products.infer import read_ledger
    from harness.runtime.config import CueSettings, ModelSettings, RunConfig
    from harness.runtime.executor import InferReport
    from harness.stages import run_stage
    from harness.store.base import get_json
    from harness.store.settings import StoreSettings, open_store

    inputs = [_input("a", 2.58, 0), _input("b", 0.58, 1), _input("c", 1.9, 2)]
    corpus = CueCorpus([Recording(i.item.recording_id, SR, i.audio.shape[1]) for i in inputs],
                       {i.item.recording_id: i.audio for i in inputs}, [i.item for i in inputs], [])
    monkeypatch.setattr(cue_corpus, "build_corpus", lambda cfg: corpus)
    cfg = RunConfig(run_id="r", models=(ModelSettings("replay", "replay"), ModelSettings("silent", "silent")),
                    cue=CueSettings(shard_size=2, context_s=CONTEXT, window_s=WINDOW),
                    store=StoreSettings(root=str(tmp_path)))
    store = open_store(cfg.store)
    sent: list[dict] = []

    def in_process(cfg_, store_, work, spent, estimates, factory, roots, stage):  # run_shards without Ray
        assert stage == "cue-infer"
        sent.append({m: sorted(shards) for m, shards in work.items()})
        done = [factory(cfg_, next(m for m in cfg_.models if m.name == name), store_).run(shard, ids)
                for name, shards in work.items() for shard, ids in shards.items()]
        return InferReport(done=done)

    monkeypatch.setattr(sharded, "ray_session", lambda cfg_: nullcontext())
    monkeypatch.setattr(sharded, "run_shards", in_process)
    run_stage("cue-corpus", cfg, store)
    run_stage("cue-infer", cfg, store)
    plan = CuePlan.from_config(cfg)
    assert sent == [{"replay": ["shard-00000", "shard-00001"]}]
    na = get_json(store, plan.layout.marker(plan.infer["silent"]))
    assert na["applicable"] is False and "does not declare 'teacher_forcing'" in na["reason"]
    led = read_ledger(store, plan.layout, plan.infer["replay"], "replay")
    entries = led.entries()
    for inp in inputs:
        span = item_span(inp.item, SR, F, LEAD, CONTEXT, WINDOW)
        rec = entries[inp.item.item_id].json(store)
        assert rec["status"] == "ok" and rec["start_s"] == span.start / SR and rec["end_s"] == span.end / SR
        out = entries[inp.item.item_id].audio(store, SR)
        np.testing.assert_array_equal(out, inp.audio[0, span.start:span.end])  # through the stored corpus and FLAC
    shard0 = plan.layout.marker(plan.layout.shard(plan.infer["replay"], "shard-00000"))
    first = get_json(store, shard0)["attempt"]
    (tmp_path / plan.layout.marker(plan.layout.shard(plan.infer["replay"], "shard-00001"))).unlink()  # as if it failed
    run_stage("cue-infer", cfg, store)
    run_stage("cue-infer", cfg, store)
    assert sent[1:] == [{"replay": ["shard-00001"]}]  # only the incomplete shard; then nothing at all
    assert get_json(store, shard0)["attempt"] == first
