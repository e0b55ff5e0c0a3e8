"""Moshi's ring KV cache sized to the streams (issue 24, item 2; ``MoshiModel(context_steps=...)``) on
the tiny model, greedy, on CPU: a stream shorter than the ring gives the tokens of the full ring; the
ring really is smaller; a stream longer than it attends to its last ``context_steps`` only; ``"auto"``
sizes it per shard (``fit_streams``)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("moshi")

from harness.models.moshi import TINY_LM
from tests.fixtures.moshi_forcing import FRAME, drive, tiny_moshi


@pytest.fixture(autouse=True)
def _no_compile(monkeypatch):
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")


STEPS = 22  # the LM reads positions up to the step count


def _tokens(m) -> np.ndarray:
    """``m`` over STEPS steps of noise at 2 rows: its tokens ``int[STEPS, 2, 9]``."""
    rng = np.random.default_rng(5)
    level = 10 ** rng.uniform(-2, -0.3, (STEPS, 2, 1))
    heard = (rng.standard_normal((STEPS, 2, FRAME)) * level).astype(np.float32)
    return drive(m, heard, np.zeros_like(heard), np.zeros((STEPS, 2), bool))[1]


def _run(**kw):
    """The tiny model (``kw``: its settings) over STEPS steps of noise at 2 rows: (model, tokens int[STEPS, 2, 9])."""
    m = tiny_moshi(**kw)
    return m, _tokens(m)


@pytest.fixture(scope="module")
def full_ring() -> np.ndarray:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_TORCH_COMPILE", "1")
        return _run()[1]


def _ring_slots(m) -> set[int]:
    from moshi.modules.transformer import StreamingMultiheadAttention

    return {mod._streaming_state.kv_cache.capacity for mod in m.lm.transformer.modules()
            if isinstance(mod, StreamingMultiheadAttention)}


def test_a_stream_shorter_than_a_smaller_ring_gets_the_full_rings_tokens(full_ring):
    small = STEPS + 2
    assert small < TINY_LM["context"]
    assert len(np.unique(full_ring[2:, :, 1:])) > 8  # the tokens vary: the comparison can fail
    m, tokens = _run(context_steps=small)
    np.testing.assert_array_equal(tokens, full_ring)
    assert _ring_slots(m) == {small} and m.info.context_s == pytest.approx(small * 0.08)


def test_a_stream_longer_than_the_ring_attends_to_its_last_steps_only(full_ring):
    short = 6
    _, tokens = _run(context_steps=short)
    np.testing.assert_array_equal(tokens[:short - 1], full_ring[:short - 1])  # identical while it fits
    assert (tokens[short + 1:] != full_ring[short + 1:]).any()  # then it forgets the start


def test_auto_sizes_the_ring_per_shard_to_its_longest_stream(full_ring):
    m = tiny_moshi(context_steps="auto")
    full = TINY_LM["context"]
    assert m.info.context_s == pytest.approx(full * 0.08)  # overruns of the checkpoint's context are flagged
    held = m.fit_streams(STEPS * 0.08)  # a shard whose longest stream is STEPS steps: STEPS + 1 slots
    assert held == pytest.approx(STEPS * 0.08)
    np.testing.assert_array_equal(_tokens(m), full_ring)
    assert _ring_slots(m) == {STEPS + 1}
    # the next shard's streams may outlast the checkpoint's context: its full ring, in a fresh state
    assert m.fit_streams(full * 0.08 + 1.0) is None
    np.testing.assert_array_equal(_tokens(m), full_ring)  # a fresh stream: the same tokens again
    assert _ring_slots(m) == {full}


def test_a_fixed_context_is_never_refitted():
    m = tiny_moshi(context_steps=30)
    assert m.fit_streams(1.0) is None
    _tokens(m)
    assert _ring_slots(m) == {30}


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_context_steps_must_be_a_positive_integer(bad):
    from harness.models.moshi import MoshiModel

    with pytest.raises(ValueError, match="context_steps must be a positive integer"):
        MoshiModel(tiny=True, context_steps=bad)
