"""The tiny Moshi's teacher forcing on a CUDA device, in float32 and in bfloat16 (the released
weights' dtype), with CUDA graphs as Moshi uses them there: the checks of
tests/unit/test_model_moshi.py that hold on every device (tests/fixtures/moshi_forcing.py).
Skipped without CUDA.

CUDA is not bit-identical to the CPU: every comparison is within one device (the model against
itself or a fresh Mimi on the same device), with cuDNN's deterministic algorithms (Mimi's
transposed convolutions may otherwise sum in another order from one call to the next), so equal
inputs of a row still give equal outputs. Row independence and reopening are checked on CPU only
(tests/unit/test_model_moshi.py says why)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
pytest.importorskip("moshi")

from tests.fixtures.moshi_forcing import (  # noqa: E402  (after the skip: the fixtures import moshi's adapter)
    forced_rows_text_is_its_own_or_padding,
    forced_steps_hold_the_forced_audios_codes,
    tiny_moshi,
)


@pytest.fixture(params=[pytest.param({"device": "cuda"}, id="cuda"),
                        pytest.param({"device": "cuda", "dtype": "bfloat16"}, id="cuda-bf16")])
def on(request, monkeypatch) -> dict:
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    return request.param


def test_forced_steps_hold_mimis_encoding_of_the_forced_audio_as_the_lms_own_tokens(on):
    forced_steps_hold_the_forced_audios_codes(on)


def test_text_stream_of_a_forced_row_is_the_models_own_or_padding(on):
    forced_rows_text_is_its_own_or_padding(on)


def test_a_step_waits_on_the_gpu_once(on):
    """Issue 24, item 4: past moshi's CUDA graph warm-up (one call) and capture, a step synchronises
    with the GPU once, in its output copy (torch's sync debug mode warns at every synchronising call;
    the CPU test tests/unit/test_model_moshi.py counts the device reads only). Written without a GPU at
    hand (2026-12-07): its first GPU run is its first check."""
    m = tiny_moshi(**on)
    frames = (np.random.default_rng(0).standard_normal((2, 1920)) * 0.05).astype(np.float32)
    for row in range(2):
        m.open(row, None)
    for _ in range(4):  # warm-up, capture, and a replay of each graph
        m.step(frames)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(3):
                m.step(frames)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) == 3, syncs
