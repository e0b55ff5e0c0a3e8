"""The batched offline detector (issue 11): bit-identical to the online detector whatever the
batch, the chunking, the stream lengths and the worker threads; close to stock Silero."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.audio.resample import StreamResampler
from harness.vad.silero import (
    SILERO_RATE,
    SileroNet,
    SileroProbs,
    VadSettings,
    _silero_jit,
    detect,
    speech_probs,
)

SR = 24_000


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


def test_offline_equals_online_bit_for_bit(streams):
    online = [_online(x, 1920) for x in streams]
    for workers in (1, 2):
        offline = speech_probs(streams, SR, workers=workers)
        assert [len(p) for p in offline] == [SileroProbs(1, SR, VadSettings()).complete_frames(len(x))
                                              for x in streams]
        for a, b in zip(offline, online, strict=True):
            np.testing.assert_array_equal(a, b)
    assert max(float(p.max()) for p in online if len(p)) > 0.9  # the speech is found


def test_probabilities_do_not_depend_on_batch_or_chunks(streams):
    x = streams[0]
    ref = _online(x, 1920)
    for n_rows, chunk in ((2, 1920), (3, 777), (6, 4096), (1, len(x))):
        np.testing.assert_array_equal(_online(x, chunk, n_rows), ref)
    for others in (0, 1, 2, 5):  # alone, and among streams of other lengths
        np.testing.assert_array_equal(speech_probs([x, *streams[1:1 + others]], SR)[0], ref)


def test_feature_chunks_do_not_change_the_probabilities(streams, monkeypatch):
    """Offline features in chunks of 7 windows (tails of 1 to 3 rows padded) equal one big call."""
    ref = speech_probs(streams, SR)
    monkeypatch.setattr(SileroNet, "FEATURE_CHUNK", (("cpu", 7),))
    for a, b in zip(speech_probs(streams, SR), ref, strict=True):
        np.testing.assert_array_equal(a, b)


def test_close_to_stock_silero(streams):
    """The split forward is Silero's: per window within float rounding of the stock JIT at batch 1."""
    x = streams[0]
    rs = StreamResampler(1, SR, SILERO_RATE)
    x16 = rs.push(x[None])[:, rs.delay:]
    model = _silero_jit()
    model.reset_states()
    with torch.inference_mode():
        stock = np.array([model(torch.from_numpy(x16[:, k * 512:(k + 1) * 512].copy()), SILERO_RATE)[0, 0].item()
                          for k in range(x16.shape[1] // 512)])
    ours = speech_probs([x], SR)[0]
    np.testing.assert_allclose(ours, stock[: len(ours)], atol=1e-6)


def test_features_of_one_row_equal_those_in_a_batch():
    net = SileroNet()
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((9, 576)).astype(np.float32) * 0.1)
    batch = net.features(x)
    for i in (0, 4, 8):
        assert torch.equal(net.features(x[i:i + 1])[0], batch[i])
    h, c = net.step(batch, torch.zeros(9, 128), torch.zeros(9, 128))
    h1, c1 = net.step(batch[2:3], torch.zeros(1, 128), torch.zeros(1, 128))
    assert torch.equal(h1[0], h[2]) and torch.equal(c1[0], c[2])


def test_detect_rejects_multichannel_audio():
    with pytest.raises(ValueError, match="mono"):
        detect([np.zeros((2, 100), np.float32)], SR, VadSettings())
