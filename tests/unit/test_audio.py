"""Audio I/O, resampling, clip placement and espeak-ng synthesis."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audio.assemble import Track
from harness.audio.io import AudioError, check_waveform, decode, encode, quantize
from harness.audio.resample import resample, resample_blocks
from harness.audio.tts.espeak import SynthesisError


def test_storage_round_trip_is_exact_after_quantize():
    x = quantize(np.random.default_rng(0).uniform(-1.2, 1.2, 5000).astype(np.float32))
    for fmt in ("FLAC", "WAV"):
        y, sr = decode(encode(x, 24_000, fmt))
        assert sr == 24_000 and np.array_equal(x, y)


def test_decode_rejects_wrong_rate_stereo_and_garbage():
    import io

    import soundfile as sf

    data = encode(np.zeros(100, np.float32), 16_000)
    with pytest.raises(AudioError, match="24000 Hz"):
        decode(data, expected_rate=24_000)
    buf = io.BytesIO()
    sf.write(buf, np.zeros((100, 2), np.int16), 24_000, format="WAV")
    with pytest.raises(AudioError, match="mono"):
        decode(buf.getvalue())
    with pytest.raises(AudioError, match="cannot decode"):
        decode(b"not audio at all")


@pytest.mark.parametrize("bad", [np.array([0.0, np.nan]), np.array([np.inf]), np.zeros((2, 3)), np.zeros(3, int)])
def test_check_waveform_rejects(bad):
    with pytest.raises(AudioError):
        check_waveform(bad)


def test_resample_lengths_and_blocks():
    x = np.random.default_rng(1).standard_normal((2, 1920 * 5)).astype(np.float32)
    assert resample(x, 24_000, 16_000).shape == (2, 1280 * 5)
    assert resample_blocks(x, 24_000, 16_000, 0.08).shape == (2, 1280 * 5)
    with pytest.raises(ValueError, match="multiple"):
        resample_blocks(x[:, :1000], 24_000, 16_000, 0.08)
    # a 1 kHz tone keeps its frequency: zero crossings per second stay ~2000
    t = np.arange(24_000) / 24_000
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    y = resample(tone, 24_000, 16_000)
    crossings = np.sum(np.diff(np.signbit(y[100:-100])) != 0) / ((len(y) - 200) / 16_000)
    assert abs(crossings - 2000) < 20


def test_track_sums_overlapping_clips_in_windows():
    tr = Track()
    tr.add(2, np.ones(4, np.float32))
    tr.add(4, np.full(3, 2.0, np.float32))
    out = np.concatenate([tr.render(0, 3), tr.render(3, 3), tr.render(6, 4)])
    np.testing.assert_array_equal(out, [0, 0, 1, 1, 3, 3, 2, 0, 0, 0])
    with pytest.raises(ValueError):
        tr.add(-1, np.ones(2, np.float32))


def test_espeak_clip_is_trimmed_speech_at_24k(tts):
    x = tts.synthesize("Hello Aria, what time is it?", "en-us+m1")
    assert x.dtype == np.float32 and 0.8 * 24_000 < len(x) < 4 * 24_000
    edge = round(0.01 * 24_000)
    assert np.abs(x[:edge]).max() < 0.01 and np.abs(x[edge:edge + 2400]).max() > 0.01  # trimmed to speech
    assert tts.clip_id("en-us+m1", "a") != tts.clip_id("en-us+m3", "a") != tts.clip_id("en-us+m1", "b")
    with pytest.raises(SynthesisError):
        tts.synthesize("   ", "en-us+m1")
    with pytest.raises(SynthesisError):
        tts.synthesize("hello", "nonexistentvoice")


def test_importing_the_harness_imports_no_model_stack_hydra_or_ray():
    import subprocess
    import sys

    code = ("import sys, harness.runtime.stages, harness.models.registry; "
            "print(sorted(m for m in ('hydra', 'ray', 'harness.models.baselines') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_registry_builds_and_checks():
    from harness.models.registry import build_model

    with pytest.raises(ValueError, match="unknown model"):
        build_model("no-such-model")
    with pytest.raises(ValueError, match="not a DuplexModel"):
        build_model("collections:OrderedDict")
    m = build_model("silent")
    assert m.info.input_rate == m.info.output_rate == 24_000 and m.info.frame_s == 0.08
