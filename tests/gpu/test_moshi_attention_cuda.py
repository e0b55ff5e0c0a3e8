"""Moshi's ``attention="flex"`` and ``"paged"`` on a CUDA device (tests/fixtures/moshi_attention.py; on CPU:
tests/unit/test_moshi_attention.py): FlexAttention compiled as the adapter runs it there, in float32;
the tiny Moshi with CUDA graphs on, as Moshi uses them there (the compiled kernel and its block mask
captured in the graph). Every comparison is within the device. Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
pytest.importorskip("moshi")

from tests.fixtures.moshi_attention import (  # noqa: E402  (after the skip: the fixtures import moshi's adapter)
    RING,
    assert_same,
    layer_difference,
    stream_with_refills,
    unfilled_blocks_are_never_read,
)
from tests.fixtures.moshi_forcing import tiny_moshi  # noqa: E402


@pytest.fixture(autouse=True)
def _cuda(monkeypatch):
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")  # moshi's own compile; flex is compiled on CUDA regardless
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)


def test_two_layers_over_a_ring_with_resets_and_an_exec_mask_match_dense():
    assert layer_difference("cuda") < 1e-5


def test_dense_with_one_mask_a_step_is_upstreams_attention_on_cuda():
    assert layer_difference("cuda", kind="dense") == 0.0


def test_flex_never_reads_the_blocks_past_a_rows_filled_slots():
    unfilled_blocks_are_never_read("cuda")


def test_flex_gives_dense_tokens_under_cuda_graphs():
    dense = stream_with_refills(tiny_moshi("cuda", context_steps=RING))
    flex = stream_with_refills(tiny_moshi("cuda", context_steps=RING, attention="flex"))
    assert_same(flex, dense, atol=1e-4)


@pytest.mark.parametrize("page", [128, 16])
def test_paged_layers_match_dense(page):
    assert layer_difference("cuda", kind="paged", page=page) < 1e-5


def test_paged_gives_dense_tokens_under_cuda_graphs(monkeypatch):
    """The page tables reach the graph's static tensors before each replay (pages of 16 steps: the smallest
    block FlexAttention takes compiled; the ring of RING steps in one page a row)."""
    import harness.models.moshi_attention as attention

    dense = stream_with_refills(tiny_moshi("cuda", context_steps=RING))
    monkeypatch.setattr(attention, "BLOCK", 16)
    paged = stream_with_refills(tiny_moshi("cuda", context_steps=RING, attention="paged"))
    assert_same(paged, dense, atol=1e-4)
