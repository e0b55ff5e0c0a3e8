"""VAD throughput on this machine: batched Silero (the lever), the streaming 16 kHz resampler
against the per-block resampling it replaced, and the numba post-processor.

Prints figures, asserts nothing. Last line: one JSON object.

* **Resampling fidelity**: SNR (dB) and largest error of 80 ms frame-by-frame resampling (each
  frame on its own, what the runner and the VAD did before) and of the streaming resampler
  fed 80 ms frames (:class:`~harness.audio.resample.StreamResampler`, its delay dropped),
  both against whole-signal :func:`~harness.audio.resample.resample`, for 24 -> 16 kHz (model
  input, VAD) and 16 -> 24 kHz (model output), on a 0.3-amplitude 440 Hz sine, white noise
  and espeak-ng speech (when installed).
* **VAD throughput** (audio-seconds per second): ``detect`` (streaming resampler + Silero) per
  batch size; the 24 -> 16 kHz resampling alone at batch 64, per 80 ms block (before) and
  streaming, and from them the batch-64 VAD throughput before (same Silero time).

    .venv/bin/python bench/vad_throughput.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time

import numpy as np

from harness.audio.resample import StreamResampler, resample
from harness.vad.segments import SegmentRules, segments_from_probs
from harness.vad.silero import VadSettings, detect

SR = 24_000
FRAME_S = 0.08


def per_frame(x: np.ndarray, orig: int, new: int) -> np.ndarray:
    """Before: each 80 ms frame of ``float32[B, n]`` resampled on its own (n whole frames)."""
    b, n = x.shape
    f = round(FRAME_S * orig)
    return resample(x.reshape(b * (n // f), f), orig, new).reshape(b, -1)


def streamed(x: np.ndarray, orig: int, new: int) -> np.ndarray:
    """Now: the streaming resampler fed 80 ms frames, its delay dropped, flushed at the end."""
    rs = StreamResampler(x.shape[0], orig, new)
    f = round(FRAME_S * orig)
    y = np.concatenate([rs.push(x[:, i:i + f]) for i in range(0, x.shape[1], f)] + [rs.flush()], axis=1)
    return y[:, rs.delay:]


def snr_db(y: np.ndarray, ref: np.ndarray) -> float:
    err = float(np.sum((y.astype(np.float64) - ref) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / err)


def test_signals(seconds: float = 4.0) -> dict[str, np.ndarray]:
    """``{name: float32[n]}`` at 24 kHz, n a whole number of 80 ms frames."""
    n = round(seconds * SR)
    sig = {"sine": 0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / SR),
           "noise": np.random.default_rng(0).uniform(-0.3, 0.3, n)}
    if shutil.which("espeak-ng"):
        from harness.audio.tts.espeak import EspeakTTS

        speech = EspeakTTS(SR).synthesize("The dentist moved my appointment to Thursday at three.", "en-us+m1")
        sig["speech"] = np.resize(0.3 * speech / np.abs(speech).max(), n)
    return {k: v.astype(np.float32) for k, v in sig.items()}


def fidelity() -> dict[str, dict[str, float]]:
    out = {}
    for name, x24 in test_signals().items():
        for orig, new in ((SR, 16_000), (16_000, SR)):
            x = x24[None] if orig == SR else resample(x24, SR, 16_000)[None]
            ref = resample(x, orig, new)
            old, now = per_frame(x, orig, new), streamed(x, orig, new)
            key = f"{name} {orig // 1000}->{new // 1000} kHz"
            out[key] = {"per_frame_snr_db": round(snr_db(old, ref), 1),
                        "per_frame_max_err": float(np.abs(old - ref).max()),
                        "streaming_snr_db": round(snr_db(now, ref), 1),
                        "streaming_max_err": float(np.abs(now - ref).max())}
    return out


def silero_rate(batch: int, seconds: float) -> float:
    waves = _waves(batch, seconds)
    detect(waves[:1], SR, VadSettings())  # warm-up (JIT profiling runs)
    t = time.perf_counter()
    detect(waves, SR, VadSettings())
    return batch * seconds / (time.perf_counter() - t)


def _waves(batch: int, seconds: float) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal(int(seconds * SR)) * 0.05).astype(np.float32) for _ in range(batch)]


def resampling_rates(batch: int, seconds: float) -> tuple[float, float]:
    """Audio-seconds per second of 24 -> 16 kHz resampling: per 80 ms block, streaming (one push)."""
    x = np.stack(_waves(batch, seconds))
    x = x[:, : x.shape[1] // 1920 * 1920]
    t = time.perf_counter()
    per_frame(x, SR, 16_000)
    t_block = time.perf_counter() - t
    t = time.perf_counter()
    StreamResampler(batch, SR, 16_000).push(x)
    t_stream = time.perf_counter() - t
    return batch * seconds / t_block, batch * seconds / t_stream


def postprocessor_rate(streams: int = 4000, frames: int = 3000) -> float:
    rng = np.random.default_rng(1)
    probs = (rng.random((streams, frames)) < 0.3).astype(np.float32)
    lengths = np.full(streams, frames)
    segments_from_probs(probs[:2], lengths[:2], 768, SegmentRules(), SR)  # compile
    t = time.perf_counter()
    segments_from_probs(probs, lengths, 768, SegmentRules(), SR)
    return streams * frames / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="audio seconds per stream")
    args = ap.parse_args()
    fid = fidelity()
    for key, f in fid.items():
        print(f"{key:24s} per-frame {f['per_frame_snr_db']:6.1f} dB (max err {f['per_frame_max_err']:.4f})   "
              f"streaming {f['streaming_snr_db']:6.1f} dB (max err {f['streaming_max_err']:.1e})")
    rates = {b: silero_rate(b, args.seconds) for b in (1, 8, 32, 64)}
    for b, r in rates.items():
        print(f"VAD (detect) batch {b:3d}: {r:8.1f} audio-s/s  ({r / rates[1]:.1f}x batch 1)")
    block, stream = resampling_rates(64, args.seconds)
    # detect's time = Silero + streaming resampling; before = the same Silero + per-block resampling
    before = 1 / (1 / rates[64] - 1 / stream + 1 / block)
    print(f"24->16 kHz resampling, batch 64: per 80 ms block {block:8.1f} audio-s/s, streaming {stream:8.1f} audio-s/s")
    print(f"VAD batch 64: before (per-block resampling) {before:8.1f} audio-s/s, "
          f"now (streaming) {rates[64]:8.1f} audio-s/s")
    pp = postprocessor_rate()
    print(f"post-processor: {pp / 1e6:.1f} M frames/s ({pp * 0.032 / 3600:.0f} audio-hours/s at 32 ms frames)")
    print(json.dumps({"resampling_fidelity": fid,
                      "silero_audio_s_per_s": {str(b): round(r, 1) for b, r in rates.items()},
                      "batch64_vs_batch1": round(rates[64] / rates[1], 2),
                      "resample_24_16_batch64_audio_s_per_s": {"per_block": round(block, 1),
                                                               "streaming": round(stream, 1)},
                      "vad_batch64_audio_s_per_s": {"before": round(before, 1), "now": round(rates[64], 1)},
                      "postprocessor_frames_per_s": round(pp)}))


if __name__ == "__main__":
    main()
