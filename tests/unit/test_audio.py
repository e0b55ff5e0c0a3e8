"""Audio I/O, resampling, clip placement and espeak-ng synthesis."""

from __future__ import annotations

import numpy as np
import pytest

from harness.audio.assemble import Track
from harness.audio.io import AudioError, check_waveform, decode, encode, quantize
from harness.audio.resample import ResampleError, StreamResampler, resample
from harness.audio.tts.espeak import SynthesisError
from harness.models.base import DuplexModel, ModelInfo
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings


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


@pytest.mark.parametrize("bad,why", [(np.array([0.0, np.nan]), "contains NaN or Inf"),
                                     (np.array([np.inf]), "contains NaN or Inf"),
                                     (np.zeros((2, 3)), r"expected a mono 1-D array, got shape \(2, 3\)"),
                                     (np.zeros(3, int), "expected float samples, got int64")])
def test_check_waveform_rejects(bad, why):
    with pytest.raises(AudioError, match=why):
        check_waveform(bad)


@pytest.mark.parametrize("rate", [65_536, 197_368, 655_351])
def test_a_rate_flac_cannot_store_is_refused_not_written(rate):
    with pytest.raises(AudioError, match=f"FLAC cannot store {rate} Hz"):
        encode(np.zeros(100, np.float32), rate)


@pytest.mark.parametrize("rate", [8_000, 65_535, 96_000, 192_000, 655_350])
def test_every_rate_flac_stores_reads_back(rate):
    x = quantize(np.sin(np.arange(1000) / 7).astype(np.float32) * 0.5)
    y, sr = decode(encode(x, rate))
    assert sr == rate and np.array_equal(y, x)


def test_rates_that_would_need_a_huge_filter_are_refused_before_allocating():
    """16,001 -> 24,000 Hz (gcd 1): torchaudio's kernel would be 24,000 x 16,013 float32 (1.5 GB)."""
    with pytest.raises(ResampleError, match="resampling 16001 Hz to 24000 Hz needs a 24000 x"):
        resample(np.zeros(160, np.float32), 16_001, 24_000)
    with pytest.raises(ResampleError, match="24000 Hz to 16001 Hz"):
        StreamResampler(1, 24_000, 16_001)
    assert resample(np.zeros(2205, np.float32), 22_050, 47_875).shape == (4788,)  # the worst allowed pair is fine


def test_resample_lengths_and_tone():
    x = np.random.default_rng(1).standard_normal((2, 1920 * 5)).astype(np.float32)
    assert resample(x, 24_000, 16_000).shape == (2, 1280 * 5)
    assert resample(x[:, :1001], 24_000, 16_000).shape == (2, 668)  # ceil(1001 * 2 / 3)
    # a 1 kHz tone keeps its frequency: zero crossings per second stay ~2000
    t = np.arange(24_000) / 24_000
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    y = resample(tone, 24_000, 16_000)
    crossings = np.sum(np.diff(np.signbit(y[100:-100])) != 0) / ((len(y) - 200) / 16_000)
    assert abs(crossings - 2000) < 20


def _signals(tts, rate: int) -> np.ndarray:
    """``float32[3, n]`` at ``rate``: a 440 Hz sine, white noise and espeak-ng speech (0.3 peak)."""
    speech = tts.synthesize("The dentist moved my appointment to Thursday at three.", "en-us+m1")
    if rate != 24_000:
        speech = resample(speech, 24_000, rate)
    n = len(speech)
    sine = 0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / rate)
    noise = np.random.default_rng(2).uniform(-0.3, 0.3, n)
    return np.stack([sine, noise, 0.3 * speech / np.abs(speech).max()]).astype(np.float32)


def _streamed(x: np.ndarray, orig: int, new: int, chunk: int) -> tuple[np.ndarray, int]:
    """``(pushed in chunks of chunk samples, then flushed; the delay)``, checking the stream's rate."""
    rs = StreamResampler(x.shape[0], orig, new)
    parts, n_in = [], 0
    for i in range(0, x.shape[1], chunk):
        parts.append(rs.push(x[:, i:i + chunk]))
        n_in += x[:, i:i + chunk].shape[1]
        assert sum(p.shape[1] for p in parts) == n_in * new // orig  # a fixed-rate stream
    return np.concatenate([*parts, rs.flush()], axis=1), rs.delay


@pytest.mark.parametrize(("orig", "new", "delay"), [(24_000, 16_000, 8), (16_000, 24_000, 12), (24_000, 24_000, 0)])
def test_stream_resampler_is_whole_signal_resampling_for_any_chunking(tts, orig, new, delay):
    """Streamed in chunks of any size, the output is bit for bit the same as one push of the
    whole signal: the resampled signal behind a fixed delay, hand-computed from torchaudio's
    filter half-width (10 input samples from 24 kHz, 7 from 16 kHz) rounded up to whole blocks
    of 3 -> 2 (2 -> 3) samples: 4 blocks = 0.5 ms either way. Against resample() (torch's
    convolution, another summation order) it is within float32 rounding: > 80 dB SNR (~145)."""
    signals = _signals(tts, orig)
    for x in (signals, signals[:, :601]):  # tiny chunks on a prefix (one call per chunk)
        whole, d = _streamed(x, orig, new, x.shape[1])
        assert d == delay and StreamResampler(1, orig, new).delay_s == (0.0005 if delay else 0.0)
        assert whole.shape == (3, delay + -(-x.shape[1] * new // orig))
        np.testing.assert_array_equal(whole[:, :delay], 0.0)
        ref = resample(x, orig, new)
        snr = 10 * np.log10(np.sum(ref ** 2, axis=1) / np.maximum(np.sum((whole[:, delay:] - ref) ** 2, axis=1), 1e-30))
        assert (snr > 80).all(), snr
        chunks = (1, 7, 1001) if x.shape[1] == 601 else (1920, 1280, round(0.08 * orig), 1001, 4801)
        for chunk in chunks:
            np.testing.assert_array_equal(_streamed(x, orig, new, chunk)[0], whole, err_msg=f"chunks of {chunk}")
        # a stream's output does not depend on the other streams of the batch
        np.testing.assert_array_equal(_streamed(x[2:], orig, new, 1001)[0], whole[2:])


def test_stream_resampler_gives_whole_frames_and_rejects_misuse():
    rs = StreamResampler(2, 24_000, 16_000)
    frame = np.ones((2, 1920), np.float32)
    assert [rs.push(frame).shape for _ in range(3)] == [(2, 1280)] * 3  # the first frame too (delay 8)
    with pytest.raises(ValueError, match=r"expected \[2, n\] samples, got \(3, 1920\)"):
        rs.push(np.ones((3, 1920), np.float32))
    assert rs.flush().shape == (2, 8)  # 3 frames in: 3 * 1280 samples out behind an 8-sample delay
    with pytest.raises(RuntimeError, match="flushed"):
        rs.push(frame)
    with pytest.raises(ValueError, match="positive integers"):
        StreamResampler(1, 22_050.5, 16_000)


def test_track_sums_overlapping_clips_in_windows():
    tr = Track()
    tr.add(2, np.ones(4, np.float32))
    tr.add(4, np.full(3, 2.0, np.float32))
    out = np.concatenate([tr.render(0, 3), tr.render(3, 3), tr.render(6, 4)])
    np.testing.assert_array_equal(out, [0, 0, 1, 1, 3, 3, 2, 0, 0, 0])
    with pytest.raises(ValueError, match="cannot start before the timeline"):
        tr.add(-1, np.ones(2, np.float32))


def test_espeak_clip_is_trimmed_speech_at_24k(tts):
    x = tts.synthesize("Hello Aria, what time is it?", "en-us+m1")
    assert x.dtype == np.float32 and 0.8 * 24_000 < len(x) < 4 * 24_000
    edge = round(0.01 * 24_000)
    assert np.abs(x[:edge]).max() < 0.01 and np.abs(x[edge:edge + 2400]).max() > 0.01  # trimmed to speech
    assert tts.clip_id("en-us+m1", "a") != tts.clip_id("en-us+m3", "a") != tts.clip_id("en-us+m1", "b")
    with pytest.raises(SynthesisError, match="cannot synthesise empty text"):
        tts.synthesize("   ", "en-us+m1")
    with pytest.raises(SynthesisError, match="espeak-ng failed for voice 'nonexistentvoice'"):
        tts.synthesize("hello", "nonexistentvoice")


def test_importing_the_harness_imports_no_model_stack_hydra_or_ray():
    import subprocess
    import sys

    code = ("import sys, harness.stages, harness.models.registry; "
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


class _Loopback16k(DuplexModel):
    """A 16 kHz model with 80 ms frames that says back what it hears (and keeps it)."""

    info = ModelInfo("loopback16k", 16_000, 16_000, 1280, 1280)

    def load(self, device: str) -> None:
        pass

    def open(self, row, stream) -> None:
        self.heard: list[np.ndarray] = []

    def step(self, frames: np.ndarray) -> np.ndarray:
        self.heard.append(frames.copy())
        return frames


def test_runner_resamples_streams_without_frame_edges_and_aligned(tts):
    """A 16 kHz model hears the timeline resampled as one signal, 0.5 ms late (the input
    resampler's delay); what it says is stored as one resampled signal with the output
    resampler's delay trimmed, so a loopback's output is its input 0.5 ms late, with no
    click at the 80 ms frame edges."""
    speech = tts.synthesize("Hello Aria, what time is it?", "en-us+m1")
    n = round(0.7 * 24_000)
    hann_sine = (0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / 24_000) * np.hanning(n)).astype(np.float32)
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    scene = Scene("p0-explicit", "p0", "explicit", ("A", "B", "C"), turns, "yes")
    clips = [hann_sine, 0.3 * speech / np.abs(speech).max(), hann_sine]
    model = _Loopback16k()
    (res,) = run_conversations(model, [ConversationInput(scene, clips, np.zeros(0, np.float32), 0)],
                               ProtocolSettings(room_tone="zeros"), VadSettings())
    assert res.status == "ok", res.reason
    heard = np.concatenate(model.heard, axis=1)
    track = Track()
    for p in res.placements:
        track.add(p.start, clips[p.turn])
    timeline_in = track.render(0, len(model.heard) * 1920)
    # the model hears the timeline input resampled as one signal, behind 8 samples (0.5 ms) at 16 kHz
    as_one, _ = _streamed(timeline_in[None], 24_000, 16_000, len(timeline_in))
    np.testing.assert_array_equal(heard, as_one[:, :heard.shape[1]])
    # stored: what it said, resampled as one signal and aligned (the output delay dropped)
    (end,) = [e.t for e in res.events if e.kind == "stream_end"]
    said, d = _streamed(heard, 16_000, 24_000, heard.shape[1])
    assert len(res.output) == end
    np.testing.assert_array_equal(res.output, quantize(said[0, d:d + end]))
    # end to end: the output is the input (band-limited to 8 kHz) 12 samples (0.5 ms) late
    band_limited = resample(resample(timeline_in, 24_000, 16_000), 16_000, 24_000)

    def snr(lag: int) -> float:
        ref = band_limited[:end - lag]
        return 10 * np.log10(np.sum(ref ** 2) / np.sum((res.output[lag:] - ref) ** 2))

    assert snr(12) > 70 and max(snr(11), snr(13)) < 30  # 80.9 dB (the 16-bit grid) vs 17.5 dB a sample off
