"""Restarting one row of the batched streaming state (continuous batching): the row's output is
exactly a fresh instance's for the new stream, bit for bit, whatever the row held before and
whatever its neighbours carry."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audio.resample import StreamResampler
from harness.vad.settings import VadSettings
from harness.vad.silero import StreamingDetector

SR = 24_000


def _chunks(x: np.ndarray, size: int):
    return [x[..., i:i + size] for i in range(0, x.shape[-1], size)]


@pytest.mark.parametrize(("orig", "new", "frame"), [(24_000, 16_000, 1920), (16_000, 24_000, 1280),
                                                    (24_000, 22_050, 9600)])
def test_a_reset_resampler_row_is_a_fresh_resampler(orig, new, frame):
    rng = np.random.default_rng(0)
    a, old, other = (rng.standard_normal((3, frame * 30)) * 0.3).astype(np.float32)
    fresh = StreamResampler(1, orig, new)
    want = np.concatenate([fresh.push(c[None]) for c in _chunks(a, frame)], axis=1)[0]
    rs = StreamResampler(2, orig, new)
    for c in _chunks(np.stack([old, other])[:, : frame * 7], frame):
        rs.push(c)
    rs.reset([0])
    got = np.concatenate([rs.push(c) for c in _chunks(np.stack([a, other]), frame)], axis=1)[0]
    np.testing.assert_array_equal(got, want)
    assert not got[: fresh.delay].any()  # the delay's zeros, not the filter ringing ahead of the new stream


def test_a_resampler_row_resets_only_on_its_block_grid():
    rs = StreamResampler(1, 24_000, 16_000)  # blocks of 3 input samples
    rs.push(np.zeros((1, 1000), np.float32))
    with pytest.raises(ValueError, match="whole number of 3-sample blocks"):
        rs.reset([0])


def test_a_reset_detector_row_is_a_fresh_detector(tts):
    """The detector is fed output chunks that straddle the new stream's start (the runner trims
    the output resampler's delay), and its Silero state restarts at the new stream's first window."""
    speech = tts.synthesize("Aria, could you tell me when the bus leaves tomorrow?", "en-us+m1")
    noise = (np.random.default_rng(1).standard_normal(len(speech)) * 0.2).astype(np.float32)
    lag, frame = 12, 1920
    fresh = StreamingDetector(2, SR, VadSettings())
    x = np.stack([speech, noise])
    fresh.push(x[:, : frame - lag])
    for c in _chunks(x[:, frame - lag:], frame):
        fresh.push(c)
    fresh.finish()
    det = StreamingDetector(2, SR, VadSettings())
    at = 5 * det.reset_period
    y = np.concatenate([np.stack([noise[:at], noise[:at]]), x], axis=1)
    det.push(y[:, : frame - lag])
    pos = frame - lag
    while pos < y.shape[1]:
        if pos + lag == at:  # the runner opens the row at the step that starts at `at`
            det.reset([0], at=at)
            assert det.view(0).now == 0 and det.view(0).segments == ()
        det.push(y[:, pos:pos + frame])
        pos += frame
    det.finish()
    n = len(speech) // det.probs.frame
    np.testing.assert_array_equal(det.probabilities(0, n), fresh.probabilities(0, n))
    assert det.segments(0) == fresh.segments(0) and len(fresh.segments(0)) >= 1
    with pytest.raises(ValueError, match="can only be reset every 768 timeline samples"):  # one Silero window
        det.reset([1], at=y.shape[1] + 100)
