"""The Moshi adapter on a tiny randomly initialised Mimi + LM built from the real ``moshi``
package (no weights): through the real runner at batch 1 and with refills at batch 2, streams
of different lengths, per-row resets, and the upstream quirks (no tokens on a stream's first step);
teacher forcing (``step_forced``, Duplex Cue) per row against Mimi's own encoding of the forced audio,
on CPU (on a CUDA device, float32 and bfloat16, CUDA graphs on: tests/gpu/test_moshi_cuda.py).

Row independence is checked with each conversation in the same row beside different neighbours:
moved to another row index, the same stream's logits differ at float rounding (CPU matrix kernels,
about 1e-6), which greedy decoding of a random model (near-tied logits) can turn into other tokens."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("moshi")


from harness.models.base import TEACHER_FORCING, StreamContext
from harness.models.moshi import TINY_LM
from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings
from tests.fixtures.moshi_forcing import (
    STEPS,
    audio,
    drive,
    forced_rows_text_is_its_own_or_padding,
    forced_steps_hold_the_forced_audios_codes,
    mimi_codes,
    tiny_moshi,
)

SR, FRAME = 24_000, 1_920
# short waits: the random model's noise may read as speech, and the caps bound how long it runs
PROTO = ProtocolSettings(tail_s=0.3, fresh_onset_window_s=0.8, endpoint_silence_s=0.5, response_cap_s=1.5,
                         n4_answer_window_s=0.5, turn_gap_s=0.2)


@pytest.fixture(autouse=True)
def _no_compile(monkeypatch):
    monkeypatch.setenv("NO_TORCH_COMPILE", "1")


def _conv(i: int, clip_s: float) -> ConversationInput:
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    scene = Scene(f"m{i}-explicit", f"m{i}", "explicit", ("A", "B", "C"), turns, "yes")
    rng = np.random.default_rng(i)
    clips = [(rng.standard_normal(round(clip_s * SR)) * 0.05).astype(np.float32) for _ in turns]
    return ConversationInput(scene, clips, np.zeros(0, np.float32), i)


def test_tiny_moshi_streams_at_batch_1_and_says_nothing_on_its_first_step():
    m = tiny_moshi()
    steps = []
    real_step = m.step
    m.step = lambda frames: steps.append(real_step(frames)) or steps[-1]
    (res,) = run_conversations(m, [_conv(0, 0.4)], PROTO, VadSettings())
    assert res.status == "ok", res.reason
    assert steps[0].shape == (1, FRAME) and not steps[0].any()  # LMGen has no tokens for step 0
    assert steps[1].any() and np.abs(res.output).max() <= 1.0  # then Mimi decodes every step
    assert len(res.output) == max(p.end for p in res.placements) + PROTO.s(PROTO.tail_s)


def test_tiny_moshi_refills_rows_and_a_conversation_does_not_depend_on_its_row_or_neighbours():
    """Three streams of different lengths in two rows: the third is opened in the row the
    shortest frees (a masked reset of Mimi and LMGen while the other row streams on); with
    greedy decoding each conversation's output is the same as next to another neighbour."""
    convs = [_conv(0, 0.3), _conv(1, 0.9), _conv(2, 0.5)]
    batch = run_conversations(tiny_moshi(), convs, PROTO, VadSettings(), rows=2)
    assert [r.status for r in batch] == ["ok"] * 3, [r.reason for r in batch]
    assert len({len(r.output) for r in batch}) == 3
    # conversation 2 again, now opened at the start in row 0 (not after conversation 0) beside conversation 1
    again = run_conversations(tiny_moshi(), [convs[2], convs[1]], PROTO, VadSettings(), rows=2)
    np.testing.assert_array_equal(again[0].output, batch[2].output)
    assert again[0].events == batch[2].events
    np.testing.assert_array_equal(again[1].output, batch[1].output)


def test_the_row_count_can_change_between_runs():
    m = tiny_moshi()
    (one,) = run_conversations(m, [_conv(3, 0.3)], PROTO, VadSettings())
    two = run_conversations(m, [_conv(3, 0.3), _conv(4, 0.3)], PROTO, VadSettings(), rows=2)
    assert one.status == two[0].status == two[1].status == "ok"
    assert m.info.weights == "random:tiny"


# ---------------------------------------------------------------------- teacher forcing (Duplex Cue)

# Exact comparisons across separate runs hold on CPU only: on CUDA two runs of the same input
# differ at float rounding (measured on an H200 with cuDNN deterministic: up to 2e-5 in the audio
# of step vs step_forced with no row forced, from non-deterministic GEMM kernels), which greedy
# decoding of a random model (near-tied logits) turns into other tokens. So row independence and
# reopening are checked on CPU; the forced tokens themselves (exact on CUDA too) on every device.
ON_CPU: dict = {}


def test_forced_steps_hold_mimis_encoding_of_the_forced_audio_as_the_lms_own_tokens():
    forced_steps_hold_the_forced_audios_codes(ON_CPU)  # on CUDA: tests/gpu/test_moshi_cuda.py


def test_text_stream_of_a_forced_row_is_the_models_own_or_padding():
    forced_rows_text_is_its_own_or_padding(ON_CPU)


def test_a_forced_row_beside_a_free_row_is_as_alone_and_generates_on_after_its_forcing_ends():
    """Row 0 forced for 4 steps, then free; row 1 free, then forced for its last 2 steps: each
    row's tokens and audio are the same beside an empty row (silence, never forced) and whatever
    the forced audio of its unforced steps (ignored); after the switch row 0's tokens are its
    own, not the forced audio's."""
    switch = 4
    heard, forced = audio(0), audio(1)
    mask = np.zeros((STEPS, 2), bool)
    mask[:switch, 0] = mask[-2:, 1] = True
    both = drive(tiny_moshi(**ON_CPU), heard, forced, mask)
    silent, only = np.zeros_like(heard[:, :1]), np.zeros_like(mask)
    row0 = drive(tiny_moshi(**ON_CPU), np.concatenate([heard[:, :1], silent], 1), forced,
                  np.stack([mask[:, 0], only[:, 1]], 1))
    unheard = np.where(mask[:, :, None], forced, audio(2))  # other audio where not forced
    row1 = drive(tiny_moshi(**ON_CPU), np.concatenate([silent, heard[:, 1:]], 1), unheard,
                  np.stack([only[:, 0], mask[:, 1]], 1))
    for got, alone, row in ((both, row0, 0), (both, row1, 1)):
        np.testing.assert_array_equal(got[1][:, row], alone[1][:, row])
        np.testing.assert_array_equal(got[0][:, row], alone[0][:, row])
    codes = mimi_codes(tiny_moshi(**ON_CPU).mimi, forced)[:, 0]
    tokens = both[1][:, 0, 1:]
    np.testing.assert_array_equal(tokens[1:switch], codes[1:switch])
    assert (tokens[switch:] != codes[switch:]).any(axis=1).all()
    assert np.abs(both[0][switch:, 0]).max() > 0.01


def test_step_forced_with_no_row_forced_is_step():
    heard, junk = audio(0), audio(1)
    free = drive(tiny_moshi(**ON_CPU), heard, junk, np.zeros((STEPS, 2), bool))
    m = tiny_moshi(**ON_CPU)
    unforced = np.stack([m.step_forced(h, f, np.zeros(2, bool)) for h, f in zip(heard, junk, strict=True)])
    np.testing.assert_array_equal(unforced, free[0])


def test_a_row_reopened_after_forcing_starts_afresh_its_forced_stream_too():
    """Row 0 forced with one recording for 4 steps, then reopened and forced with another while
    row 1 streams on: the second stream's tokens are the fresh encoding of its own audio, and
    its tokens and audio are those of the same stream opened at the start."""
    first, second, heard = audio(1), audio(2), audio(0)
    mask = np.ones((STEPS, 2), bool)
    m = tiny_moshi(**ON_CPU)
    mimi = copy.deepcopy(m.mimi)  # before it streams
    drive(m, heard[:4], first[:4], mask[:4])
    m.open(0, StreamContext("again", 0, "", _conv(0, 0.1).scene))
    again = drive(m, heard, second, mask)
    fresh = drive(tiny_moshi(**ON_CPU), heard, second, mask)
    np.testing.assert_array_equal(again[1][1:, 0, 1:], mimi_codes(mimi, second)[1:, 0])
    np.testing.assert_array_equal(again[1][:, 0], fresh[1][:, 0])
    np.testing.assert_array_equal(again[0][:, 0], fresh[0][:, 0])


def test_teacher_forcing_is_declared_and_bad_forcing_input_is_refused():
    m = build_model("moshi", {"tiny": True})
    assert TEACHER_FORCING in m.info.capabilities
    frames = np.zeros((2, FRAME), np.float32)
    with pytest.raises(ValueError, match=r"forced float32\[2, 1920\] and mask bool\[2\], got \(1, 1920\)"):
        m.step_forced(frames, frames[:1], np.ones(2, bool))
    with pytest.raises(ValueError, match=r"got \(2, 1920\) and int64\[2\]"):
        m.step_forced(frames, frames, np.ones(2, np.int64))
    with pytest.raises(ValueError, match="forced_text must be one of"):
        build_model("moshi", {"tiny": True, "forced_text": "silence"})
    delays = [0, 0] + [2] * 7 + [0] + [1] * 7
    with pytest.raises(ValueError, match="acoustic delays of 0 or 1 frame"):
        build_model("moshi", {"lm_kwargs": {**TINY_LM, "delays": delays}, "dtype": "float32"}).load("cpu")


# ---------------------------------------------------------------------- host reads (issue 24, item 4)

class _HostReads(TorchDispatchMode):
    """Records the operations that make the host wait for a device's result (on CUDA: a sync): reading
    a value (``item``, ``bool``), outputs whose shape depends on the data (``nonzero``, masked
    selection, indexing with a boolean mask), and writes through a boolean mask of more than one value
    (one value from the host is a ``masked_fill``, which does not wait)."""

    READS = frozenset({"aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero", "aten::masked_select"})
    supports_higher_order_operators = True  # flex_attention passes through, its inputs counted as any other

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name if hasattr(func, "_schema") else func.name()  # a higher-order operator: its name
        flat = [a for x in args for a in (x if isinstance(x, (list, tuple)) else [x])]
        boolean = any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in flat[1:])
        if name in self.READS or (name == "aten::index" and boolean):
            self.seen.append(name)
        elif name in ("aten::index_put", "aten::index_put_") and boolean:
            value = args[2]
            if not (value.numel() == 1 and value.device.type == "cpu"):
                self.seen.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("attention", ["dense", "flex"])
def test_a_step_reads_nothing_back_from_the_device_but_its_output(attention):
    """On CUDA every read of a device value inside a step stalls the host until the GPU catches up;
    the adapter decides on the device (which rows have tokens, which Mimi decodes) and copies its
    output back once. Counted here on CPU as the operations that would read: none, over a batch's
    first step (no row has tokens), a refill, teacher forcing and the steps after, with either attention
    (flex's block mask is built from the rings' counters on the device)."""
    m = tiny_moshi(**ON_CPU, attention=attention)
    heard, forced = audio(0, rows=3), audio(1, rows=3)
    reads = _HostReads()
    for k in range(STEPS):
        if k == 3:
            m.open(1, StreamContext("again", 1, "", _conv(0, 0.1).scene))
        mask = np.array([k in (4, 5), False, k == 3])
        with reads:
            out = m.step_forced(heard[k], forced[k], mask) if mask.any() else m.step(heard[k])
        assert out.shape == (3, FRAME) and out.dtype == np.float32
    assert reads.seen == []
