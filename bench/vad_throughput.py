"""VAD throughput on this machine: batched Silero (the lever) and the numba post-processor.

Prints figures, asserts nothing. Last line: one JSON object.

    .venv/bin/python bench/vad_throughput.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from harness.vad.segments import SegmentRules, segments_from_probs
from harness.vad.silero import VadSettings, detect

SR = 24_000


def silero_rate(batch: int, seconds: float) -> float:
    rng = np.random.default_rng(0)
    waves = [(rng.standard_normal(int(seconds * SR)) * 0.05).astype(np.float32) for _ in range(batch)]
    detect(waves[:1], SR, VadSettings())  # warm-up (JIT profiling runs)
    t = time.perf_counter()
    detect(waves, SR, VadSettings())
    return batch * seconds / (time.perf_counter() - t)


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
    rates = {b: silero_rate(b, args.seconds) for b in (1, 8, 32, 64)}
    for b, r in rates.items():
        print(f"silero batch {b:3d}: {r:8.1f} audio-s/s  ({r / rates[1]:.1f}x batch 1)")
    pp = postprocessor_rate()
    print(f"post-processor: {pp / 1e6:.1f} M frames/s ({pp * 0.032 / 3600:.0f} audio-hours/s at 32 ms frames)")
    print(json.dumps({"silero_audio_s_per_s": {str(b): round(r, 1) for b, r in rates.items()},
                      "batch64_vs_batch1": round(rates[64] / rates[1], 2),
                      "postprocessor_frames_per_s": round(pp)}))


if __name__ == "__main__":
    main()
