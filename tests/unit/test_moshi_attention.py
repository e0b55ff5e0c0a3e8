"""Moshi's LM attending over its ring's filled slots only (issue 24, item 1; ``MoshiModel(attention="flex")``,
``harness.models.moshi_attention``) against upstream's masked dense SDPA, on CPU:

* one attention layer streamed past a ring of two blocks with resets and an exec mask, flex_attention
  compiled (the kernel reads only the listed blocks; eager it scores every slot, as the tiny Moshi's
  tests below run it): the same output to float32 rounding, and slots past a row's filled blocks are
  never read (NaN there changes nothing; dense reads them);
* the tiny Moshi, greedy: over a stream with rows refilled at different steps (rows of different
  lengths), teacher-forced steps, and a ring smaller than the streams (fixed and ``auto``), the same
  tokens as ``dense`` and text logits within float32 rounding; only the LM's transformer changes.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("moshi")

import torch

from harness.models.base import StreamContext
from tests.fixtures.moshi_forcing import FRAME, tiny_moshi


@pytest.fixture(autouse=True)
def _no_compile(monkeypatch):
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")


# --- one attention layer ---------------------------------------------------------------------------------

SLOTS, LAYER_ROWS, LAYER_STEPS = 160, 3, 270  # two blocks of 128 slots, the second partly past the ring
RESETS = {40: [1], 130: [2], 245: [1]}  # step -> rows reset before it
IDLE = range(150, 160)  # steps row 2 sits outside the exec mask (after its reset)


def _layers(compiled: bool):
    """A causal self-attention with RoPE over a ring of SLOTS slots (moshi's), and a copy made flex."""
    from moshi.modules.rope import RotaryEmbedding
    from moshi.modules.transformer import StreamingMultiheadAttention

    from harness.models.moshi_attention import use_flex_attention

    torch.manual_seed(0)
    dense = StreamingMultiheadAttention(16, 2, causal=True, context=SLOTS, rope=RotaryEmbedding(10_000)).eval()
    flex = copy.deepcopy(dense)
    assert use_flex_attention(flex, compiled) == 1
    return dense, flex


def test_one_layer_over_a_ring_with_resets_and_an_exec_mask_matches_dense():
    """Both layers over LAYER_STEPS steps at LAYER_ROWS rows (RESETS, IDLE): row 0 fills the ring and
    runs past twice its blocks' slots, row 1 is reset twice, row 2 once and sits out IDLE."""
    dense, flex = _layers(compiled=True)
    x = torch.randn(LAYER_STEPS, LAYER_ROWS, 1, 16, generator=torch.Generator().manual_seed(1))
    worst = 0.0
    with torch.no_grad(), dense.streaming(LAYER_ROWS), flex.streaming(LAYER_ROWS):
        for step in range(LAYER_STEPS):
            run = torch.ones(LAYER_ROWS, dtype=torch.bool)
            run[2] = step not in IDLE
            reset = torch.zeros(LAYER_ROWS, dtype=torch.bool)
            reset[RESETS.get(step, [])] = True
            for layer in (dense, flex):
                layer.reset_streaming(reset)
                layer.set_exec_mask(run)
            a, b = dense(x[step], x[step], x[step]), flex(x[step], x[step], x[step])
            assert torch.isfinite(a[run]).all()
            worst = max(worst, float((a - b)[run].abs().max()))
        ends = flex._streaming_state.kv_cache.end_offset.tolist()
    assert ends == [LAYER_STEPS, LAYER_STEPS - 245, LAYER_STEPS - 130 - len(IDLE)] and ends[0] > 2 * 128
    assert worst < 1e-6


def test_compiled_flex_never_reads_the_blocks_past_a_rows_filled_slots():
    """NaN in the ring's second block: flex (compiled) ignores it while each row's filled slots fit
    the first block; dense SDPA multiplies it by zero weights and returns NaN."""
    dense, flex = _layers(compiled=True)
    x = torch.randn(5, LAYER_ROWS, 1, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), dense.streaming(LAYER_ROWS), flex.streaming(LAYER_ROWS):
        for layer in (dense, flex):
            layer._streaming_state.kv_cache.cache[:, :, :, 128:] = float("nan")
        for step in range(5):
            a, b = dense(x[step], x[step], x[step]), flex(x[step], x[step], x[step])
            assert torch.isnan(a).all() and torch.isfinite(b).all()
    _, clean = _layers(compiled=False)
    with torch.no_grad(), clean.streaming(LAYER_ROWS):
        expected = [clean(x[step], x[step], x[step]) for step in range(5)][-1]
    torch.testing.assert_close(b, expected, rtol=0, atol=1e-6)


# --- the tiny Moshi ----------------------------------------------------------------------------------------

ROWS, STEPS, RING = 3, 20, 8  # the tiny LM's full ring is 50 steps
OPENS = {0: (0, 1, 2), 6: (1,), 10: (2,), 13: (1,)}  # step -> rows (re)filled before it
FORCED = (2, range(12, 16))  # row 2 is teacher-forced on these steps


def _stream(m) -> tuple[np.ndarray, np.ndarray]:
    """``m`` over STEPS steps of noise at ROWS rows, refilled at OPENS, FORCED forced: its output tokens
    ``int[STEPS, ROWS, 9]`` (-2: none yet) and text logits ``float32[STEPS, ROWS, text_card]``."""
    rng = np.random.default_rng(5)
    level = 10 ** rng.uniform(-2, -0.3, (STEPS, ROWS, 1))
    heard = (rng.standard_normal((STEPS, ROWS, FRAME)) * level).astype(np.float32)
    forced = heard[::-1].copy()
    tokens, logits = [], []
    lm_step = m.lm_gen.step
    m.lm_gen.step = lambda *a, **kw: tokens.append(lm_step(*a, **kw)) or tokens[-1]
    hook = m.lm.text_linear.register_forward_hook(lambda mod, args, out: logits.append(out[:, 0].clone()))
    try:
        for step in range(STEPS):
            for row in OPENS.get(step, ()):
                m.open(row, StreamContext(f"s{step}-{row}", row, ""))
            mask = np.zeros(ROWS, bool)
            mask[FORCED[0]] = step in FORCED[1]
            m.step_forced(heard[step], forced[step], mask)
    finally:
        del m.lm_gen.step
        hook.remove()
    return torch.stack(tokens)[..., 0].numpy(), torch.stack(logits).numpy()


@pytest.fixture(scope="module")
def dense_small() -> tuple[np.ndarray, np.ndarray]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_TORCH_COMPILE", "1")
        return _stream(tiny_moshi(context_steps=RING))


def _assert_same(run, dense) -> None:
    tokens, logits = run
    np.testing.assert_array_equal(tokens, dense[0])
    np.testing.assert_allclose(logits, dense[1], rtol=0, atol=1e-5)


def test_the_stream_refills_rows_forces_one_and_outlasts_the_ring(dense_small):
    tokens, _ = dense_small
    starts = (tokens == -2).all(axis=2)  # a stream's first step has no tokens
    assert starts.T.tolist() == [[s == 0 for s in range(STEPS)], [s in (0, 6, 13) for s in range(STEPS)],
                                 [s in (0, 10) for s in range(STEPS)]]
    assert STEPS > RING and len(np.unique(tokens[:, :, 1:])) > 8  # the tokens vary: a comparison can fail
    full = _stream(tiny_moshi())  # the full ring: the small one changes the tokens once a stream outlasts it
    assert (full[0][RING + 1:] != tokens[RING + 1:]).any()
    np.testing.assert_array_equal(full[0][:RING], tokens[:RING])


def test_flex_gives_dense_tokens_with_a_ring_smaller_than_the_streams(dense_small):
    m = tiny_moshi(context_steps=RING, attention="flex")
    _assert_same(_stream(m), dense_small)


def test_flex_gives_dense_tokens_with_an_auto_ring(dense_small):
    m = tiny_moshi(context_steps="auto", attention="flex")
    assert m.fit_streams((RING - 1.5) * 0.08) == pytest.approx((RING - 1) * 0.08)  # a ring of RING steps
    _assert_same(_stream(m), dense_small)


def test_only_the_lms_transformer_attends_with_flex():
    from moshi.modules.transformer import StreamingMultiheadAttention

    from harness.models.moshi_attention import FlexStreamingAttention

    def kinds(module) -> set[type]:
        return {type(a) for a in module.modules() if isinstance(a, StreamingMultiheadAttention)}

    m = tiny_moshi(attention="flex")
    assert kinds(m.lm.transformer) == {FlexStreamingAttention}
    assert kinds(m.lm.depformer) == kinds(m.mimi) == {StreamingMultiheadAttention}
    assert kinds(tiny_moshi().lm.transformer) == {StreamingMultiheadAttention}


def test_flex_refuses_another_moshis_attention_code(monkeypatch):
    from harness.models import moshi_attention

    fn, _ = moshi_attention.UPSTREAM["RingKVCache.complete"]
    monkeypatch.setitem(moshi_attention.UPSTREAM, "RingKVCache.complete", (fn, "0" * 16))
    with pytest.raises(RuntimeError, match=r"mirrors moshi 0\.2\.13's RingKVCache\.complete.*installed moshi 0\.2\.13"):
        tiny_moshi(attention="flex")


def test_flex_refuses_an_attention_it_does_not_mirror():
    from harness.models.moshi_attention import use_flex_attention

    m = tiny_moshi()
    with pytest.raises(RuntimeError, match="found 1, 1 of another kind"):  # weights per step
        use_flex_attention(m.lm.depformer, compiled=False)


@pytest.mark.parametrize("bad", ["sdpa", "", None])
def test_attention_must_be_dense_or_flex(bad):
    from harness.models.moshi import MoshiModel

    with pytest.raises(ValueError, match="attention must be one of"):
        MoshiModel(tiny=True, attention=bad)
