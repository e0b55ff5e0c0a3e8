"""Moshi's LM attending over its ring's filled slots only (issue 24, item 1; ``MoshiModel(attention="flex")``,
``harness.models.moshi_attention``) against upstream's masked dense SDPA, on CPU:

* two attention layers (the second reads the first's block mask) streamed past rings of two blocks with
  resets and an exec mask, flex_attention compiled (the kernel reads only the listed blocks; eager it
  scores every slot, as the tiny Moshi's tests below run it): the same output to float32 rounding, and
  slots past a row's filled blocks are never read (NaN there changes nothing; dense reads them);
* the tiny Moshi, greedy: over a stream with rows refilled at different steps (rows of different
  lengths), teacher-forced steps, and a ring smaller than the streams (fixed and ``auto``), the same
  tokens as ``dense`` and text logits within float32 rounding, with one block mask a step for all the
  LM's attentions; only the LM's transformer changes.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("moshi")

from harness.models.moshi import RING_RUNGS, TINY_LM
from tests.fixtures.moshi_attention import (
    LAYER_ROWS,
    OPENS,
    RING,
    ROWS,
    STEPS,
    _compiled_on,
    assert_same,
    cpu_flex_problem,
    layer_difference,
    layers,
    stream_with_refills,
    unfilled_blocks_are_never_read,
)
from tests.fixtures.moshi_forcing import tiny_moshi


@pytest.fixture(autouse=True)
def _no_compile(monkeypatch):
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")


@pytest.fixture
def compiled_flex():
    """Skips a test of the compiled CPU flex kernel where torch's kernel is wrong (``cpu_flex_problem``)."""
    if problem := cpu_flex_problem():
        pytest.skip(problem)


def test_two_layers_over_a_ring_with_resets_and_an_exec_mask_match_dense(compiled_flex):
    assert layer_difference() < 1e-6


def test_dense_with_one_mask_a_step_is_upstreams_attention_bit_for_bit():
    assert layer_difference(kind="dense") == 0.0


def test_compiled_flex_never_reads_the_blocks_past_a_rows_filled_slots(compiled_flex):
    unfilled_blocks_are_never_read()


def test_outside_streaming_a_flex_layer_is_upstreams():
    import torch

    dense, flex = layers(compiled=False)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(flex(x), dense(x), rtol=0, atol=0)


@pytest.fixture(scope="module")
def dense_small() -> tuple[np.ndarray, np.ndarray]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_TORCH_COMPILE", "1")
        return stream_with_refills(tiny_moshi(context_steps=RING))


def test_the_stream_refills_rows_forces_one_and_outlasts_the_ring(dense_small):
    tokens, _ = dense_small
    starts = (tokens == -2).all(axis=2)  # a stream's first step has no tokens
    assert starts.T.tolist() == [[row in OPENS.get(s, ()) for s in range(STEPS)] for row in range(ROWS)]
    assert sorted(map(len, OPENS.values())) == [1, 1, 1, 3]  # rows refilled at three different steps
    assert STEPS > RING and len(np.unique(tokens[:, :, 1:])) > 8  # the tokens vary: a comparison can fail
    # the full ring: the small one changes the tokens once a stream outlasts it
    full = stream_with_refills(tiny_moshi())
    assert (full[0][RING + 1:] != tokens[RING + 1:]).any()
    np.testing.assert_array_equal(full[0][:RING], tokens[:RING])


def test_flex_gives_dense_tokens_with_a_ring_smaller_than_the_streams_one_block_mask_a_step(dense_small, monkeypatch):
    """The LM's first attention makes each step's block mask; the others (the tiny LM has 2) read it and
    only write their keys and values: still dense's tokens, through refills, forcing and the ring's wrap."""
    import harness.models.moshi_attention as attention

    made = []
    real = attention.filled_mask
    monkeypatch.setattr(attention, "filled_mask", lambda *a: made.append(a) or real(*a))
    m = tiny_moshi(context_steps=RING, attention="flex")
    flex = [a for a in m.lm.transformer.modules() if isinstance(a, attention.FlexStreamingAttention)]
    assert [a.leads for a in flex] == [True, False] and flex[0].plan is flex[1].plan
    assert_same(stream_with_refills(m), dense_small, atol=1e-5)
    assert len(made) == STEPS


def test_flex_gives_dense_tokens_with_an_auto_ring():
    """``auto`` with flex sizes the ring to a rung (the smallest multiple of the full ring over
    RING_RUNGS that holds the shard's streams), smaller than the streams here: dense's tokens at that ring."""
    m = tiny_moshi(context_steps="auto", attention="flex")
    rung = -(-TINY_LM["context"] // RING_RUNGS)
    assert RING < rung < STEPS  # RING steps needed, a rung held, and the streams outlast it
    assert m.fit_streams((RING - 1.5) * 0.08) == pytest.approx((rung - 1) * 0.08)
    assert_same(stream_with_refills(m), stream_with_refills(tiny_moshi(context_steps=rung)), atol=1e-5)


def test_flex_meets_at_most_ring_rungs_ring_sizes_and_dense_fits_each_shard_exactly():
    """For the 7B's 3,000-step context: flex's auto ring is a multiple of 500 steps that holds the shard's
    streams (6 sizes whatever the shards), dense's the exact fit."""
    seven_b = {**TINY_LM, "context": 3000}
    flex = tiny_moshi(lm_kwargs=seven_b, context_steps="auto", attention="flex")
    dense = tiny_moshi(lm_kwargs=seven_b, context_steps="auto")
    sizes = set()
    for longest_s in np.linspace(0.5, 300, 97):
        need = int(np.ceil(longest_s / 0.08)) + 1
        held = flex.fit_streams(longest_s)
        sizes.add(flex._ring)
        assert flex._ring == min(3000, -(-need // 500) * 500)
        assert held is None if flex._ring == 3000 else held == pytest.approx((flex._ring - 1) * 0.08)
        dense.fit_streams(longest_s)
        assert dense._ring == min(3000, need)
    assert sizes == {500, 1000, 1500, 2000, 2500, 3000} and len(sizes) == RING_RUNGS


def test_only_the_lms_transformer_attends_with_flex():
    from moshi.modules.transformer import StreamingMultiheadAttention

    from harness.models.moshi_attention import DenseStreamingAttention, FlexStreamingAttention

    def kinds(module) -> set[type]:
        return {type(a) for a in module.modules() if isinstance(a, StreamingMultiheadAttention)}

    m = tiny_moshi(attention="flex")
    assert kinds(m.lm.transformer) == {FlexStreamingAttention}
    assert kinds(m.lm.depformer) == kinds(m.mimi) == {StreamingMultiheadAttention}
    m = tiny_moshi()
    assert kinds(m.lm.transformer) == {DenseStreamingAttention}
    assert kinds(m.lm.depformer) == kinds(m.mimi) == {StreamingMultiheadAttention}


def test_dense_gives_upstreams_tokens_and_logits_bit_for_bit(dense_small, monkeypatch):
    """The default attention with its mask made once a step against upstream's modules (a mask a layer):
    the same tokens and text logits, exactly, through refills, forcing and the ring's wrap."""
    from harness.models import moshi_attention

    monkeypatch.setattr(moshi_attention, "share_step_masks", lambda transformer: 0)  # upstream's modules
    upstream = stream_with_refills(tiny_moshi(context_steps=RING))
    assert_same(dense_small, upstream, atol=0)


def test_flex_refuses_another_moshis_attention_code_and_dense_keeps_upstreams(monkeypatch):
    from harness.models import moshi_attention

    fn, _ = moshi_attention.UPSTREAM["RingKVCache.complete"]
    monkeypatch.setitem(moshi_attention.UPSTREAM, "RingKVCache.complete", (fn, "0" * 16))
    with pytest.raises(RuntimeError, match=r"mirrors moshi 0\.2\.13's RingKVCache\.complete.*installed moshi 0\.2\.13"):
        tiny_moshi(attention="flex")
    # dense keeps upstream's own modules there (a mask a layer: the same output)
    assert {type(a) for a in tiny_moshi().lm.transformer.modules() if hasattr(a, "kv_repeat")} == {
        moshi_attention.StreamingMultiheadAttention}


def test_flex_refuses_an_attention_it_does_not_mirror():
    from harness.models.moshi_attention import use_flex_attention

    m = tiny_moshi()
    with pytest.raises(RuntimeError, match="found 1, 1 of another kind"):  # weights per step
        use_flex_attention(m.lm.depformer, compiled=False)
    dense, _ = layers(compiled=False)
    dense.second.context = 2 * dense.first.context  # one block mask cannot serve both
    with pytest.raises(RuntimeError, match="needs one context for all"):
        use_flex_attention(dense, compiled=False)


def test_flex_steps_a_smaller_batch_at_the_widest_batch_so_far():
    """flex is compiled for fixed shapes: after 3 rows, a shard of 1 row runs in the 3-row state (the other
    rows hear silence, restart empty so their rings cost nothing, and their output is dropped), which gives
    the row what it gets beside silent rows; dense restarts at 1 row."""
    rng = np.random.default_rng(4)
    frames = (rng.standard_normal((6, 3, 1920)) * 0.05).astype(np.float32)
    before, after = range(4), (4, 5)
    outs = {}
    for name, kw in (("flex", {"attention": "flex"}), ("dense", {})):
        m = tiny_moshi(**kw)
        for row in range(3):
            m.open(row, None)
        for k in before:
            m.step(frames[k])
        m.open(0, None)
        outs[name] = [m.step(frames[k][:1]) for k in after]
        assert outs[name][0].shape == (1, 1920)
        assert m._rows == (3 if name == "flex" else 1)
        ring = next(a for a in m.lm.transformer.modules() if hasattr(a, "leads"))._streaming_state.kv_cache
        assert ring.end_offset.tolist() == ([len(after)] * 3 if name == "flex" else [len(after)])
    alone = tiny_moshi(attention="flex")
    for row in range(3):
        alone.open(row, None)
    for k in before:
        alone.step(frames[k])
    alone.open(0, None)
    silent = np.zeros((2, 1920), np.float32)
    expected = [alone.step(np.concatenate([frames[k][:1], silent]))[:1] for k in after]
    np.testing.assert_array_equal(np.stack(outs["flex"]), np.stack(expected))
    assert np.abs(expected[1]).max() > 0  # the row speaks on its second step: a comparison that can fail


def test_dense_makes_one_mask_a_step_and_keeps_upstreams_modules_where_it_cannot(monkeypatch):
    from harness.models import moshi_attention
    from harness.models.moshi_attention import DenseStreamingAttention, share_step_masks

    made = []
    real = DenseStreamingAttention._mask
    monkeypatch.setattr(DenseStreamingAttention, "_mask", lambda self, *a: made.append(self) or real(self, *a))
    m = tiny_moshi()
    shared = [a for a in m.lm.transformer.modules() if isinstance(a, DenseStreamingAttention)]
    assert [a.leads for a in shared] == [True, False] and shared[0].plan is shared[1].plan
    for row in range(2):
        m.open(row, None)
    for _ in range(3):
        m.step(np.zeros((2, 1920), np.float32))
    assert made == [shared[0]] * 3
    assert share_step_masks(m.lm.depformer) == 0  # weights per step: upstream's modules stay
    assert {type(a) for a in m.lm.depformer.modules() if hasattr(a, "kv_repeat")} == {
        moshi_attention.StreamingMultiheadAttention}


@pytest.mark.parametrize("bad", ["sdpa", "", None])
def test_attention_must_be_dense_or_flex(bad):
    from harness.models.moshi import MoshiModel

    with pytest.raises(ValueError, match="attention must be one of"):
        MoshiModel(tiny=True, attention=bad)


def test_paged_layers_take_and_give_back_pages_and_match_dense_compiled(compiled_flex):
    """Two paged layers (a pool of one ring a row) through resets and an exec mask: dense's output to float32
    rounding, compiled (the kernel reads only the pages the block mask lists) with pages of 128 and of 16 (each
    row's blocks in pages scattered through the pool)."""
    assert layer_difference(kind="paged") < 1e-6
    assert layer_difference(kind="paged", page=16) < 1e-6


def test_paged_layers_take_and_give_back_pages_and_match_dense_eager():
    """As above, eager (every pool slot scored, then masked: the CPU's form)."""
    assert layer_difference(kind="paged", page=16, compiled=False) < 1e-6


def test_compiled_paged_attention_never_reads_the_scratch_page_or_pages_a_row_does_not_hold(compiled_flex):
    """NaN in the scratch page (where rows without a stream write) and in the free pages: the rows holding
    streams never read them, and a row without a stream attends to nothing (zeros) instead of NaN."""
    import torch

    from harness.models.moshi_attention import kv_pages

    dense, paged = layers(compiled=True, kind="paged")
    x = torch.randn(5, LAYER_ROWS, 1, 16, generator=torch.Generator().manual_seed(2))
    with _compiled_on("cpu"), torch.no_grad(), dense.streaming(LAYER_ROWS), paged.streaming(LAYER_ROWS):
        pages = kv_pages(paged)
        pages.reset([0, 2])  # row 1 holds no stream
        assert pages.before_step() == {} and pages.held.tolist() == [1, 0, 1]
        for layer in (paged.first, paged.second):
            for kv in (0, 1):
                held = pages.table[[0, 2], 0]
                others = [p for p in range(pages.pages + 1) if p not in held]
                layer._streaming_state.kv_cache.pages_of(kv)[:, others] = float("nan")
        for step in range(5):
            pages.before_step()
            a, b = dense(x[step]), paged(x[step])
            pages.after_step()
        assert torch.isfinite(b).all() and (b[1] == 0).all()
        torch.testing.assert_close(b[[0, 2]], a[[0, 2]], rtol=0, atol=1e-6)


def test_a_page_taken_again_holds_nothing_of_its_last_owner(compiled_flex):
    """Compiled: row 1 writes NaN into its page, then its stream ends and row 2's new stream takes that page:
    the values left in the slots row 2 has not written yet (masked: weight 0, but 0 x NaN is NaN) were zeroed
    when it took the page, so row 2 gets dense's output, and row 0 (its own page) never sees the NaN. (Eager
    flex scores every slot of the pool, so there a NaN anywhere reaches every row: docs/models.md.)"""
    import torch

    from harness.models.moshi_attention import kv_pages

    dense, paged = layers(compiled=True, kind="paged")
    x = torch.randn(8, LAYER_ROWS, 1, 16, generator=torch.Generator().manual_seed(3))
    x[:3, 1] = float("nan")
    with _compiled_on("cpu"), torch.no_grad(), dense.streaming(LAYER_ROWS), paged.streaming(LAYER_ROWS):
        pages = kv_pages(paged)
        pages.reset([0, 1])
        for step in range(8):
            if step == 3:  # row 1's stream ends, row 2's starts (in both stacks)
                pages.release(1)
                pages.reset([2])
                reset = torch.tensor([False, False, True])
                dense.reset_streaming(reset), paged.reset_streaming(reset)
            pages.before_step()
            a, b = dense(x[step]), paged(x[step])
            pages.after_step()
            if step >= 3:
                assert pages.table[2, 0] == 1  # row 1's page
                torch.testing.assert_close(b[2], a[2], rtol=0, atol=1e-6)
            torch.testing.assert_close(b[0], a[0], rtol=0, atol=1e-6)


def _paged(pool: float, monkeypatch, page: int = 4, ring: int = RING, compiled: bool = False):
    """The tiny Moshi with attention="paged" over a ring of ``ring`` steps in pages of ``page``, flex compiled
    or eager (on CPU the adapter runs it eager; compiled, the kernel reads only the pages the tables list)."""
    import harness.models.moshi_attention as attention

    monkeypatch.setattr(attention, "BLOCK", page)
    m = tiny_moshi(context_steps=ring, attention="paged", kv_pool=pool)
    paged = [a for a in m.lm.transformer.modules() if isinstance(a, attention.PagedStreamingAttention)]
    assert [a.leads for a in paged] == [True, False]
    for a in paged:
        a.compiled = compiled
    return m


@pytest.mark.parametrize("page, compiled", [(4, False), (16, True)])
def test_paged_gives_dense_tokens_through_refills_forcing_and_the_rings_wrap(dense_small, monkeypatch, page, compiled,
                                                                            request):
    """Eager with pages of 4 (two a ring); compiled with pages of 16 (one a ring: the kernel reads the page
    the tables list), both on one thread (flex compiled on CPU needs it), so dense is run there too (the
    thread count changes float rounding, and the tiny model's near-tied logits then its tokens); eager at the
    suite's threads."""
    from harness.models.moshi_attention import kv_pages

    if compiled:
        request.getfixturevalue("compiled_flex")
    m = _paged(1.0, monkeypatch, page, compiled=compiled)
    with _compiled_on("cpu") if compiled else contextlib.nullcontext():
        dense = stream_with_refills(tiny_moshi(context_steps=RING)) if compiled else dense_small
        assert_same(stream_with_refills(m), dense, atol=1e-5)
    pages = kv_pages(m.lm.transformer)
    blocks = -(-RING // page)
    assert (pages.pages, pages.blocks) == (ROWS * blocks, blocks) and pages.held.tolist() == [blocks] * ROWS
    ring = next(a for a in m.lm.transformer.modules() if hasattr(a, "leads"))._streaming_state.kv_cache
    assert ring.end_offset.tolist() == pages.written.tolist()  # the host's count is the device's
    for row in range(ROWS):
        m.close(row)
    assert pages.held.tolist() == [0] * ROWS and len(pages.free) == pages.pages


def test_paged_gives_the_youngest_streams_back_when_the_pool_runs_out(monkeypatch):
    """A pool of half a ring a row (3 pages of 4 steps for 3 rows, a ring of 8; row 0 opens at step 0, rows
    1 and 2 at step 2): at step 4 row 0 needs its second page and row 2 (the youngest, the higher of equals)
    gives its page back (RowPreempted, with the step's output of the others); at step 6 row 1 needs one and,
    now the youngest, gives its own back. Row 0 streams on as it does beside rows that keep theirs (to float
    rounding)."""
    from harness.models.base import RowPreempted
    from harness.models.moshi_attention import kv_pages

    rng = np.random.default_rng(6)
    frames = (rng.standard_normal((12, ROWS, 1920)) * 0.05).astype(np.float32)
    opens, given_at = {0: [0], 2: [1, 2]}, {4: [2], 6: [1]}
    full, short = tiny_moshi(context_steps=RING), _paged(0.5, monkeypatch)
    expected = []
    for k, f in enumerate(frames):
        for row in opens.get(k, ()):
            full.open(row, None)
        expected.append(full.step(f))
    for k, f in enumerate(frames):
        for row in opens.get(k, ()):
            assert short.admit() == (row != 2)  # 2 pages free, one for row 1's first: less than a ring left
            short.open(row, None)  # (the runner would wait; opened all the same, to run the pool out)
        if k not in given_at:
            out = short.step(f)
        else:
            with pytest.raises(RowPreempted) as given:
                short.step(f)
            (row, why), = given.value.reasons.items()
            assert [row] == given_at[k] and "K/V pool was full" in why
            out = given.value.output
            pages = kv_pages(short.lm.transformer)
            assert not short.admit()  # fewer than a ring's 2 pages free
            short.close(row)
        live = [0, 1] if 2 <= k < 6 else [0]  # row 1 until it is given back (float rounding: flex against SDPA)
        np.testing.assert_allclose(out[live], expected[k][live], rtol=0, atol=1e-4)
    assert np.abs(expected[-1][0]).max() > 0  # row 0 speaks: a comparison that can fail
    assert pages.open.tolist() == [True, False, False] and pages.held.tolist() == [2, 0, 0]
    short.close(0)
    assert short.admit() and len(pages.free) == pages.pages == 3


def test_a_stream_run_again_takes_its_whole_ring_and_the_others_give_way(monkeypatch):
    """A rerun (``given_back`` 1) takes its whole ring at its first step and admission counts it so; when the
    pool runs out, a first run gives its pages back before the rerun would, though the rerun is the youngest.
    4 pages for 3 rows, 2 a ring: row 1 opens at step 0, row 2 at 1, the rerun in row 0 at 2."""
    from harness.models.base import RowPreempted, StreamContext
    from harness.models.moshi_attention import kv_pages

    m = _paged(4 / 6, monkeypatch)
    frames = np.zeros((5, ROWS, 1920), np.float32)
    assert m.admit()  # before the first step: one stream at a time
    m.open(1, StreamContext("first", 1, ""))
    assert not m.admit()
    m.step(frames[0])
    pages = kv_pages(m.lm.transformer)
    assert m.admit()  # 3 pages free
    m.open(2, StreamContext("second", 2, ""))
    m.step(frames[1])
    assert m.admit()  # 2 free: a ring
    m.open(0, StreamContext("rerun", 0, "", given_back=1))
    assert not m.admit()  # the rerun takes both
    m.step(frames[2])
    assert pages.held.tolist() == [2, 1, 1] and pages.whole.tolist() == [True, False, False]
    m.step(frames[3])
    with pytest.raises(RowPreempted) as given:
        m.step(frames[4])  # row 1 needs its second page, none is free: row 2 gives way, not the younger rerun
    assert list(given.value.reasons) == [2] and pages.held.tolist() == [2, 2, 0]


def test_a_stream_closed_before_its_first_step_holds_no_admission(monkeypatch):
    m = _paged(0.5, monkeypatch)
    m.open(0, None)
    assert not m.admit()  # before the first step: one stream at a time
    m.close(0)
    assert m.admit()


def test_the_runner_reruns_the_streams_a_short_pool_gives_back_and_every_conversation_ends_in_full(monkeypatch):
    """The tiny Moshi with a pool of 4 pages for 3 rows (2 a ring) through the runner: admission fills the
    rows, at their 5th step the youngest gives its pages back and its conversation reruns behind the queue,
    admitted when a ring is free again; every conversation ends ``ok``, as long as with dense attention, and
    with its output to float rounding."""
    from harness.protocol.scheduler import ProtocolSettings
    from harness.runtime.runner import ConversationInput, stream_conversations
    from harness.scenes.schema import Label, Scene, Target, Turn
    from harness.vad.settings import VadSettings

    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    scene = Scene("p0-explicit", "p0", "explicit", ("A", "B", "C"), turns, "yes")
    rng = np.random.default_rng(7)
    convs = [ConversationInput(replace(scene, scene_id=f"s{i}"),
                               [(rng.standard_normal(12_000) * 0.05).astype(np.float32) for _ in turns],
                               np.zeros(0, np.float32), i) for i in range(4)]
    proto = ProtocolSettings(tail_s=0.5)
    runs, stats = {}, {}
    for name, m in (("dense", tiny_moshi(context_steps=RING)), ("paged", _paged(4 / 6, monkeypatch))):
        runs[name] = [None] * len(convs)
        stats[name] = stream_conversations(m, convs, proto, VadSettings(), 3600.0, runs[name].__setitem__, rows=ROWS)
    assert [r.status for r in runs["paged"]] == ["ok"] * 4, [r.reason for r in runs["paged"]]
    assert (stats["dense"].requeued, stats["paged"].requeued) == (0, 1)
    for a, b in zip(runs["dense"], runs["paged"], strict=True):
        assert len(a.output) == len(b.output)
        np.testing.assert_allclose(b.output, a.output, rtol=0, atol=1e-3)
