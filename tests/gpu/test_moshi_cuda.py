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

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
pytest.importorskip("moshi")

from tests.fixtures.moshi_forcing import (  # noqa: E402  (after the skip: the fixtures import moshi's adapter)
    forced_rows_text_is_its_own_or_padding,
    forced_steps_hold_the_forced_audios_codes,
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
