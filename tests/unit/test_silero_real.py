"""Real Silero VAD on real espeak-ng speech placed at known times on a 24 kHz timeline."""

from __future__ import annotations

import numpy as np
import pytest

from harness.vad.settings import VadSettings
from harness.vad.silero import SileroProbs, StreamingDetector, detect
from tests.fixtures.vad_checks import assert_probs_agree

SR = 24_000


@pytest.fixture(scope="module")
def utterance(tts) -> np.ndarray:
    return tts.synthesize("The dentist moved my appointment to Thursday at three.", "en-us+m1")


def _place(clip: np.ndarray, at_s: float, total_s: float) -> np.ndarray:
    x = np.zeros(round(total_s * SR), np.float32)
    a = round(at_s * SR)
    x[a:a + len(clip)] = clip
    return x


def test_speech_found_where_it_was_placed(utterance):
    x = _place(utterance, 1.0, 1.0 + len(utterance) / SR + 1.5)
    (segs,) = detect([x], SR, VadSettings())
    assert len(segs) == 1  # espeak's short pauses (< 800 ms) are merged into one segment
    start, end = segs[0] / SR
    clip_end = 1.0 + len(utterance) / SR
    assert abs(start - 1.0) <= 0.1  # one or two 32 ms windows of onset latency
    assert abs(end - clip_end) <= 0.2


def test_silence_and_low_noise_have_no_speech():
    rng = np.random.default_rng(0)
    silence = np.zeros(5 * SR, np.float32)
    noise = (rng.standard_normal(5 * SR) * 1e-3).astype(np.float32)
    assert [len(s) for s in detect([silence, noise], SR, VadSettings())] == [0, 0]


def test_online_chunks_equal_offline(utterance):
    """The scheduler's online detector sees exactly what the vad stage scores."""
    x = _place(utterance, 0.7, 6.0)
    y = _place(utterance[: len(utterance) // 2], 2.0, 6.0)
    batch = np.stack([x, y])
    det = StreamingDetector(2, SR, VadSettings())
    for i in range(0, batch.shape[1], 1920):  # one 80 ms model frame at a time
        det.push(batch[:, i:i + 1920])
    det.finish()
    offline = detect([x, y], SR, VadSettings())
    for b in range(2):
        assert det.segments(b) == [tuple(s) for s in offline[b].tolist()]
        assert len(offline[b]) >= 1


def test_probabilities_do_not_depend_on_chunking(utterance):
    """Streaming resampling: the same 16 kHz samples, hence the same Silero probabilities (within
    PROB_TOLERANCE: other chunks are other kernel shapes) and segments, whether the output arrives
    in 80 ms frames, odd chunks or all at once."""
    x = _place(utterance, 0.7, 5.0)[None]
    runs = []
    for chunk in (x.shape[1], 1920, 1001, 7777):
        sp = SileroProbs(1, SR, VadSettings())
        runs.append(np.concatenate([sp.push(x[:, i:i + chunk]) for i in range(0, x.shape[1], chunk)], axis=1))
    assert runs[0].shape == (1, 156)  # 5 s = 80,000 samples at 16 kHz: (80,000 - 8) // 512 windows
    for r in runs[1:]:
        assert_probs_agree(list(r), list(runs[0]))


def test_complete_frames_leave_out_the_resampler_look_ahead():
    """A window is scored once the resampler's 0.5 ms (12 samples at 24 kHz) after it arrived."""
    sp = SileroProbs(1, SR, VadSettings())
    assert [sp.complete_frames(n) for n in (0, 768 + 11, 768 + 12, 10 * 768, 10 * 768 + 12)] == [0, 0, 1, 9, 10]


def test_24k_audio_is_resampled_not_reinterpreted(utterance):
    """Fed as 16 kHz, a 24 kHz clip would come out 1.5x longer; the segment must match the clip."""
    x = _place(utterance, 0.5, 0.5 + len(utterance) / SR + 1.0)
    (segs,) = detect([x], SR, VadSettings())
    dur = (segs[-1, 1] - segs[0, 0]) / SR
    assert abs(dur - len(utterance) / SR) < 0.25
