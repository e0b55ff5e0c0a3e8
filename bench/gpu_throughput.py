"""GPU throughput of a full run: the full-size Moshi architecture streamed with continuous batching.

Builds Moshi at its real size (7B LM + Mimi, ``moshi`` package configs) with random weights
(compute does not depend on weight values; no weights are downloaded) and streams synthetic
conversations through the real runner (:func:`harness.runtime.runner.run_conversations`:
scheduler, resamplers, online Silero detector, row refills) for each batch size. Per batch
size it prints:

* per-stream real-time factor: each conversation's audio seconds over the wall seconds it
  spent in the batch (median and minimum; >= 1 keeps pace with a real-time peer);
* aggregate audio-seconds per GPU-second (the aggregate real-time factor);
* peak GPU memory;
* projected GPU-hours for the benchmark's 4,000 conversations at ``--conversation-s`` each
  (a peer paced in real time needs about 155 for one model).

The last line is one JSON object: ``batch`` (the batch size with the highest aggregate whose
per-stream factor stays >= 1), its ``aggregate_rtf`` and ``per_stream_rtf``, and every batch
size's figures under ``runs``. ``--smoke`` uses a tiny model on CPU (the test suite runs it).
Targets on one H200 (issue 9): aggregate >= 64x with per-stream >= 1x; under 2.5 GPU-hours.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, ModelFailure, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.silero import VadSettings

SR = 24_000
N_CONVERSATIONS = 4_000


def conversations(n: int, turn_s: float, seed: int = 0) -> list[ConversationInput]:
    """``n`` scripted conversations (five turns, a T in the middle) of amplitude-modulated noise,
    turn lengths drawn around ``turn_s`` so the streams end at different times (refills)."""
    rng = np.random.default_rng(seed)
    labels = (Label.N2, Label.N1, Label.T, Label.N3, Label.N2)
    out = []
    for i in range(n):
        turns = tuple(Turn("ABC"[k % 3], "x", lab, Target.ARIA if lab is Label.T else Target.HUMAN)
                      for k, lab in enumerate(labels))
        scene = Scene(f"g{i}-explicit", f"g{i}", "explicit", ("A", "B", "C"), turns, "yes")
        clips = []
        for _ in turns:
            n_s = round(turn_s * rng.uniform(0.5, 1.5) * SR)
            envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * np.arange(n_s) / SR)  # a 4 Hz syllable rhythm
            clips.append((0.1 * rng.standard_normal(n_s) * envelope).astype(np.float32))
        out.append(ConversationInput(scene, clips, np.zeros(0, np.float32), i))
    return out


def build(smoke: bool, device: str, max_batch: int):
    from harness.models.moshi import MoshiModel

    if smoke:
        model = MoshiModel(tiny=True, dtype="float32", max_batch=max_batch)
    else:
        from moshi.models import loaders

        model = MoshiModel(lm_kwargs=dict(loaders._lm_kwargs), mimi_config=dict(loaders._mimi_config),
                           dtype="bfloat16", max_batch=max_batch)
    model.load(device)
    return model


def measure(model, batch: int, turn_s: float, protocol: ProtocolSettings, device: str) -> dict:
    import torch

    convs = conversations(2 * batch, turn_s, seed=batch)  # twice the rows: every row is refilled once
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = run_conversations(model, convs, protocol, VadSettings(), rows=batch)
    wall = time.perf_counter() - t0
    ok = [r for r in res if r.status == "ok"]
    audio = [len(r.output) / SR for r in ok]
    per_stream = [a / r.wall_s for a, r in zip(audio, ok, strict=True) if r.wall_s > 0]
    return {
        "batch": batch, "conversations": len(res), "errors": len(res) - len(ok),
        "audio_s": round(sum(audio), 1), "wall_s": round(wall, 2),
        "aggregate_rtf": round(sum(audio) / wall, 2),
        "per_stream_rtf": round(statistics.median(per_stream), 2) if per_stream else 0.0,
        "per_stream_rtf_min": round(min(per_stream), 2) if per_stream else 0.0,
        "step_share": round(sum(r.step_s for r in ok) / max(1e-9, sum(r.wall_s for r in ok)), 3),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model on CPU, batch sizes 1 and 2 (a quick check)")
    ap.add_argument("--batches", default="1,8,32,64,128", help="batch sizes (comma-separated)")
    ap.add_argument("--turn-s", type=float, default=4.0, help="mean human turn length in seconds")
    ap.add_argument("--conversation-s", type=float, default=130.0,
                    help="mean streamed length of one benchmark conversation (speech, waits and tail), seconds")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    args = ap.parse_args(argv)
    os.environ.setdefault("NO_TORCH_COMPILE", "1" if args.smoke else "0")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    batches = [1, 2] if args.smoke else [int(b) for b in args.batches.split(",")]
    turn_s = 0.4 if args.smoke else args.turn_s
    protocol = ProtocolSettings(tail_s=0.5, fresh_onset_window_s=1.0, endpoint_silence_s=0.5, response_cap_s=2.0) \
        if args.smoke else ProtocolSettings()
    t0 = time.perf_counter()
    model = build(args.smoke, device, max(batches))
    print(f"model built on {device} in {time.perf_counter() - t0:.1f} s ({'tiny' if args.smoke else 'full size'}, "
          f"random weights)", flush=True)
    runs = []
    for b in batches:
        try:
            r = measure(model, b, turn_s, protocol, device)
        except ModelFailure as e:
            if not isinstance(e.__cause__, torch.OutOfMemoryError):
                raise
            print(f"batch {b:4d}: out of GPU memory ({e.__cause__}); larger batches skipped", flush=True)
            runs.append({"batch": b, "out_of_memory": True})
            break
        r["projected_gpu_hours"] = round(N_CONVERSATIONS * args.conversation_s / r["aggregate_rtf"] / 3600, 2)
        runs.append(r)
        print(f"batch {b:4d}: aggregate {r['aggregate_rtf']:8.2f}x real time, per stream {r['per_stream_rtf']:6.2f}x "
              f"(min {r['per_stream_rtf_min']:.2f}x), model steps {100 * r['step_share']:.0f}% of wall, peak memory "
              f"{r['peak_memory_gib']} GiB, {r['errors']} errors; 4,000 conversations: "
              f"{r['projected_gpu_hours']} GPU-hours", flush=True)
    measured = [r for r in runs if not r.get("out_of_memory")]
    keeping_pace = [r for r in measured if r["per_stream_rtf"] >= 1.0] or measured
    best = max(keeping_pace, key=lambda r: r["aggregate_rtf"])
    print(json.dumps({"batch": best["batch"], "aggregate_rtf": best["aggregate_rtf"],
                      "per_stream_rtf": best["per_stream_rtf"], "projected_gpu_hours": best["projected_gpu_hours"],
                      "device": device, "smoke": args.smoke, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
