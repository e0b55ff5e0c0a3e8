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

import numpy as np
import pytest

pytest.importorskip("moshi")

from harness.models.moshi import RING_RUNGS, TINY_LM
from tests.fixtures.moshi_attention import (
    OPENS,
    RING,
    ROWS,
    STEPS,
    assert_same,
    layer_difference,
    layers,
    stream_with_refills,
    unfilled_blocks_are_never_read,
)
from tests.fixtures.moshi_forcing import tiny_moshi


@pytest.fixture(autouse=True)
def _no_compile(monkeypatch):
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")


def test_two_layers_over_a_ring_with_resets_and_an_exec_mask_match_dense():
    assert layer_difference() < 1e-6


def test_dense_with_one_mask_a_step_is_upstreams_attention_bit_for_bit():
    assert layer_difference(kind="dense") == 0.0


def test_compiled_flex_never_reads_the_blocks_past_a_rows_filled_slots():
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
