"""The batched offline detector (issues 11 and 19): what holds on every CPU.

Torch's CPU kernels choose their summation order by shape and instruction set, so a window's
probability computed in another batch, in other chunks, with other worker threads or under
another kernel (``ONEDNN_MAX_CPU_ISA`` / ``ATEN_CPU_CAPABILITY`` caps, i.e. another CPU) moves
by float rounding. The guarantee tested here is the one the docs make: the same calls give the
same numbers bit for bit; anything else agrees within ``PROB_TOLERANCE`` per window, and the
segments are identical whenever no probability lies within that tolerance of a threshold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from harness.audio.resample import StreamResampler
from harness.vad.segments import SegmentRules
from harness.vad.settings import VadSettings
from harness.vad.silero import (
    PROB_TOLERANCE,
    SILERO_RATE,
    SileroNet,
    SileroProbs,
    _silero_jit,
    detect,
    segment_probs,
    speech_probs,
)
from tests.fixtures.vad_checks import assert_probs_agree

SR = 24_000
RULES = SegmentRules()
# kernel caps that make oneDNN / ATen pick other kernels (hence other summation orders) on any x86 CPU
KERNEL_CAPS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"},
}


@pytest.fixture(scope="module")
def streams(tts) -> list[np.ndarray]:
    """Speech at random gains and offsets, noise, silence, and streams shorter than one window."""
    rng = np.random.default_rng(3)
    speech = tts.synthesize("Could you remind me to buy milk on the way home?", "en-us+m3")
    out = []
    for n_s in (4.0, 2.5, 6.1, 1.3, 3.3):
        x = (rng.standard_normal(round(n_s * SR)) * 1e-3).astype(np.float32)
        at = int(rng.integers(0, SR))
        clip = speech[: len(x) - at] * rng.uniform(0.1, 0.8)
        x[at:at + len(clip)] += clip
        out.append(x)
    return [*out, np.zeros(2 * SR, np.float32), np.zeros(700, np.float32), np.zeros(0, np.float32)]


def _online(x: np.ndarray, chunk: int, n_rows: int = 1) -> np.ndarray:
    """Row 0 of an online detector of ``n_rows`` rows (the others fed noise) in ``chunk``-sample pushes."""
    sp = SileroProbs(n_rows, SR, VadSettings())
    rng = np.random.default_rng(0)
    batch = np.concatenate([x[None], rng.standard_normal((n_rows - 1, len(x))).astype(np.float32) * 0.1])
    parts = [sp.push(batch[:, i:i + chunk]) for i in range(0, len(x), chunk)]
    p = np.concatenate(parts, axis=1)[0] if parts else np.zeros(0, np.float32)
    return p[: sp.complete_frames(len(x))]


def test_offline_agrees_with_online(streams):
    online = [_online(x, 1920) for x in streams]
    assert [len(p) for p in online] == [SileroProbs(1, SR, VadSettings()).complete_frames(len(x)) for x in streams]
    for workers in (1, 2):
        assert_probs_agree(speech_probs(streams, SR, workers=workers), online)
    assert max(float(p.max()) for p in online if len(p)) > 0.9  # the speech is found
    assert sum(len(s) for s in segment_probs(online, SR, RULES)) >= 4


def test_probabilities_agree_whatever_the_batch_or_chunks(streams):
    x = streams[0]
    ref = _online(x, 1920)
    for n_rows, chunk in ((2, 1920), (3, 777), (6, 4096), (1, len(x))):
        assert_probs_agree([_online(x, chunk, n_rows)], [ref])
    for others in (0, 1, 2, 5):  # alone, and among streams of other lengths
        assert_probs_agree([speech_probs([x, *streams[1:1 + others]], SR)[0]], [ref])


def test_the_same_calls_give_the_same_numbers(streams):
    """What is bit for bit: the same batch in the same chunks, whatever the torch thread count."""
    threads = torch.get_num_threads()
    runs = []
    try:
        for n in (1, 2, 1):
            torch.set_num_threads(n)
            runs.append((_online(streams[0], 777, 3), speech_probs(streams, SR)))
    finally:
        torch.set_num_threads(threads)
    for online, offline in runs[1:]:
        np.testing.assert_array_equal(online, runs[0][0])
        for a, b in zip(offline, runs[0][1], strict=True):
            np.testing.assert_array_equal(a, b)


def test_feature_chunks_do_not_move_the_probabilities(streams, monkeypatch):
    """Offline features in chunks of 7 windows (odd tails of 1 to 6 rows) agree with one big call."""
    ref = speech_probs(streams, SR)
    monkeypatch.setattr(SileroNet, "FEATURE_CHUNK", (("cpu", 7),))
    assert_probs_agree(speech_probs(streams, SR), ref)


def test_close_to_stock_silero(streams):
    """The split forward is Silero's: per window within the tolerance of the stock JIT at batch 1."""
    x = streams[0]
    rs = StreamResampler(1, SR, SILERO_RATE)
    x16 = rs.push(x[None])[:, rs.delay:]
    model = _silero_jit()
    model.reset_states()
    with torch.inference_mode():
        stock = np.array([model(torch.from_numpy(x16[:, k * 512:(k + 1) * 512].copy()), SILERO_RATE)[0, 0].item()
                          for k in range(x16.shape[1] // 512)])
    ours = speech_probs([x], SR)[0]
    np.testing.assert_allclose(ours, stock[: len(ours)], rtol=0, atol=PROB_TOLERANCE)


def test_features_of_one_row_agree_with_those_in_a_batch():
    net = SileroNet()
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((9, 576)).astype(np.float32) * 0.1)
    batch = net.features(x)
    for i in (0, 4, 8):
        torch.testing.assert_close(net.features(x[i:i + 1])[0], batch[i], rtol=1e-5, atol=1e-5)
    h, c = net.step(batch, torch.zeros(9, 128), torch.zeros(9, 128))
    h1, c1 = net.step(batch[2:3], torch.zeros(1, 128), torch.zeros(1, 128))
    torch.testing.assert_close(h1[0], h[2], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c1[0], c[2], rtol=1e-5, atol=1e-5)


_UNDER_CAPS = textwrap.dedent("""
    import json, sys
    import numpy as np
    from harness.vad.settings import VadSettings
    from harness.vad.silero import SileroProbs, speech_probs
    streams = list(np.load(sys.argv[1]).values())
    sp = SileroProbs(3, 24000, VadSettings())
    batch = np.zeros((3, max(map(len, streams))), np.float32)
    for i, x in enumerate(streams[:3]):
        batch[i, :len(x)] = x
    online = np.concatenate([sp.push(batch[:, i:i + 777]) for i in range(0, batch.shape[1], 777)], axis=1)
    print(json.dumps({"online": [online[i, :sp.complete_frames(len(x))].tolist() for i, x in enumerate(streams[:3])],
                      "offline": [p.tolist() for p in speech_probs(streams, 24000)]}))
""")


@pytest.mark.parametrize("caps", sorted(KERNEL_CAPS))
def test_the_bound_holds_under_other_kernels(streams, caps, tmp_path):
    """Another CPU, simulated by capping oneDNN's and ATen's instruction sets in a fresh process:
    its online (3 rows, 777-sample chunks) and offline probabilities agree with this process's."""
    np.savez(tmp_path / "streams.npz", *streams)
    env = {**os.environ, **KERNEL_CAPS[caps]}
    out = subprocess.run([sys.executable, "-c", _UNDER_CAPS, str(tmp_path / "streams.npz")], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    got = json.loads(out.stdout.splitlines()[-1])
    ref = [_online(x, 1920) for x in streams]
    assert_probs_agree([np.array(p, np.float32) for p in got["offline"]], ref)
    assert_probs_agree([np.array(p, np.float32) for p in got["online"]], ref[:3])


def test_detect_rejects_multichannel_audio():
    with pytest.raises(ValueError, match="mono"):
        detect([np.zeros((2, 100), np.float32)], SR, VadSettings())
