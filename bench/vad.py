"""VAD at full-run scale (issue 11): the offline detector against silero-vad's own pipeline.

Prints figures, asserts nothing. Last line: one JSON object.

Audio: espeak-ng utterances (several voices) placed with random gains between random
silences (with -60 dBFS noise) in ``--streams`` streams of different lengths on the 24 kHz
timeline, at least ``--minutes`` of audio in all.

* **baseline**: what a user of silero-vad would do, once per file: resample to 16 kHz
  (torchaudio, whole file) and call ``silero_vad.get_speech_timestamps`` with the run's rules
  (threshold 0.5, neg_threshold 0.35, min speech 120 ms, min silence 800 ms, no padding), on
  one torch thread (silero-vad's own setting; batch-1 windows are slower on more threads,
  catastrophically so on a busy machine);
* **ours**: :func:`harness.vad.silero.detect`, i.e. the batched detector (streaming resampler,
  Silero features of every window at once, LSTM stepped through all streams) plus the
  segmenter, ``--threads`` worker threads;
* **online**: the runner's detector, a :class:`~harness.vad.silero.StreamingDetector` of
  ``--rows`` rows fed 80 ms chunks, rows refilled as streams end (continuous batching); its
  probabilities over each stream's complete windows are segmented as the ``vad`` stage does.
  ``identical_segments`` / ``identical_probabilities``: ours equals online on every stream;
  ``max_probability_difference``: the largest difference of a window's probability between the
  two (the promise is ``harness.vad.silero.PROB_TOLERANCE``; docs/vad.md).

Also printed: the **resampling fidelity** of the streaming 24 <-> 16 kHz resampler fed 80 ms
frames, and of resampling each 80 ms frame on its own (what it replaced), against whole-signal
resampling (SNR in dB, largest error) on a sine, white noise and speech.

Torch's threads are set after ``import silero_vad`` (which sets them to 1). The machine is
shared: the load average at the start is printed with the figures; ``cpu_seconds`` are the
process's CPU time, a steadier figure than wall time on a busy machine.

    .venv/bin/python bench/vad.py [--minutes 30] [--threads N] [--device cuda --gpu-batches 500,4000]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from harness.audio.resample import StreamResampler, resample
from harness.audio.tts.espeak import EspeakTTS
from harness.vad.settings import VadSettings
from harness.vad.silero import (
    PROB_TOLERANCE,
    SILERO_RATE,
    StreamingDetector,
    _silero_jit,
    segment_probs,
    speech_probs,
)

SR = 24_000
CHUNK = 1920  # 80 ms: one runner step
SENTENCES = [
    "The dentist moved my appointment to Thursday at three.",
    "Could you remind me to buy milk on the way home?",
    "I think the train leaves at half past seven tomorrow morning.",
    "Honestly, I have no idea where I left the car keys.",
    "Let's meet at the corner cafe after the meeting.",
    "Turn the lights off in the kitchen, please.",
    "What is the weather going to be like this weekend?",
    "My sister is flying in from Chicago on Friday night.",
    "We should probably book the tickets before they sell out.",
    "Did anyone feed the cat this morning?",
    "The report is due at the end of the month, so there is still time.",
    "Play something relaxing, maybe some jazz.",
]
VOICES = ["en-us+m1", "en-us+m3", "en-gb", "en+f2"]


def utterances(path: str | None) -> list[np.ndarray]:
    """The espeak-ng utterances (every sentence in every voice, peak-normalised, 24 kHz). With
    ``path`` (an ``.npz``) they are read from it, or synthesized and saved there when it does not
    exist yet: a machine without espeak-ng (a GPU node) runs the benchmark on clips made elsewhere."""
    if path and os.path.exists(path):
        with np.load(path) as z:
            return [z[k] for k in sorted(z.files, key=int)]
    tts = EspeakTTS(SR)
    clips = [tts.synthesize(t, v) for t in SENTENCES for v in VOICES]
    clips = [(c / np.abs(c).max()).astype(np.float32) for c in clips]
    if path:
        np.savez_compressed(path, **{str(i): c for i, c in enumerate(clips)})
    return clips


def make_streams(minutes: float, n_streams: int, seed: int = 0, clips_path: str | None = None) -> list[np.ndarray]:
    """``n_streams`` float32 streams at 24 kHz of 0.5x to 1.5x the mean length, ``minutes`` in all."""
    clips = utterances(clips_path)
    rng = np.random.default_rng(seed)
    lengths = rng.uniform(0.5, 1.5, n_streams)
    lengths = np.ceil(lengths / lengths.sum() * minutes * 60 * SR).astype(int)
    streams = []
    for n in lengths:
        x = (rng.standard_normal(n) * 1e-3).astype(np.float32)
        t = int(rng.uniform(0, 3) * SR)
        while t < n:
            c = clips[rng.integers(len(clips))] * rng.uniform(0.05, 0.8)
            x[t:t + len(c)] += c[: n - t]
            t += len(c) + int(rng.exponential(1.5) * SR)  # pauses from tens of ms to several seconds
        streams.append(x)
    return streams


def baseline(streams: list[np.ndarray], rules) -> tuple[float, list[list[tuple[int, int]]]]:
    import silero_vad

    model = _silero_jit()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # silero-vad's own setting (its import sets it): more threads only slow batch 1
    out = []
    t = time.perf_counter()
    for x in streams:
        wav = torch.from_numpy(resample(x, SR, SILERO_RATE))
        ts = silero_vad.get_speech_timestamps(
            wav, model, threshold=rules.threshold, neg_threshold=rules.neg_threshold, sampling_rate=SILERO_RATE,
            min_speech_duration_ms=round(rules.min_speech_s * 1000),
            min_silence_duration_ms=round(rules.min_silence_s * 1000), speech_pad_ms=0)
        out.append([(d["start"] * SR // SILERO_RATE, d["end"] * SR // SILERO_RATE) for d in ts])
    dt = time.perf_counter() - t
    torch.set_num_threads(threads)
    return dt, out


def online(streams: list[np.ndarray], rows: int, settings: VadSettings) -> tuple[float, list[np.ndarray]]:
    """The runner's detector: ``rows`` rows, 80 ms pushes, a row refilled (reset) at the first step
    on the reset grid after its stream ended; returns each stream's complete-window probabilities."""
    det = StreamingDetector(rows, SR, settings)
    period = np.lcm(CHUNK, det.reset_period)
    queue = list(range(len(streams)))[::-1]
    slot: list[tuple[int, int] | None] = [None] * rows  # (stream, clock at its start)
    probs: list[np.ndarray] = [np.zeros(0, np.float32)] * len(streams)
    clock = 0
    t = time.perf_counter()
    while queue or any(slot):
        if clock % period == 0:
            for b in range(rows):
                if slot[b] is None and queue:
                    slot[b] = (queue.pop(), clock)
                    det.reset([b], at=clock)
        x = np.zeros((rows, CHUNK), np.float32)
        for b, s in enumerate(slot):
            if s is not None:
                seg = streams[s[0]][clock - s[1]:clock - s[1] + CHUNK]
                x[b, :len(seg)] = seg
        det.push(x)
        clock += CHUNK
        for b, s in enumerate(slot):
            if s is not None and clock - s[1] >= len(streams[s[0]]) + CHUNK:  # its last complete window is out
                n = det.probs.complete_frames(len(streams[s[0]]))
                probs[s[0]] = det.probabilities(b, n)
                assert len(probs[s[0]]) == n
                slot[b] = None
    return time.perf_counter() - t, probs


def fidelity(speech: np.ndarray) -> dict[str, dict[str, float]]:
    """Per-frame and streaming resampling against whole-signal :func:`resample` (4 s signals)."""
    n = 4 * SR
    sig = {"sine": 0.3 * np.sin(2 * np.pi * 440 * np.arange(n) / SR),
           "noise": np.random.default_rng(0).uniform(-0.3, 0.3, n), "speech": np.resize(speech, n)}
    out = {}
    for name, x24 in sig.items():
        for orig, new in ((SR, SILERO_RATE), (SILERO_RATE, SR)):
            x = (x24[None] if orig == SR else resample(x24, SR, SILERO_RATE)[None]).astype(np.float32)
            ref = resample(x, orig, new)
            f = round(0.08 * orig)
            x = x[:, : x.shape[1] // f * f]
            per_frame = resample(x.reshape(-1, f), orig, new).reshape(1, -1)
            rs = StreamResampler(1, orig, new)
            streamed = np.concatenate([rs.push(x[:, i:i + f]) for i in range(0, x.shape[1], f)] + [rs.flush()],
                                      axis=1)[:, rs.delay:]
            out[f"{name} {orig // 1000}->{new // 1000} kHz"] = {
                "per_frame_snr_db": _snr_db(per_frame, ref[:, :per_frame.shape[1]]),
                "streaming_snr_db": _snr_db(streamed, ref[:, :streamed.shape[1]]),
                "per_frame_max_err": float(np.abs(per_frame - ref[:, :per_frame.shape[1]]).max()),
                "streaming_max_err": float(np.abs(streamed - ref[:, :streamed.shape[1]]).max())}
    return out


def _snr_db(y: np.ndarray, ref: np.ndarray) -> float:
    err = float(np.sum((y.astype(np.float64) - ref) ** 2))
    return float("inf") if err == 0 else round(10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / err), 1)


def resampling_seconds(streams: list[np.ndarray]) -> float:
    t = time.perf_counter()
    for x in streams:
        StreamResampler(1, SR, SILERO_RATE).push(x[None])
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="audio in all (minutes)")
    ap.add_argument("--streams", type=int, default=60, help="streams of different lengths")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads / detector workers")
    ap.add_argument("--rows", type=int, default=16, help="rows of the online detector")
    ap.add_argument("--device", default="cpu", help="device of 'ours' (cpu, cuda)")
    ap.add_argument("--gpu-batches", default="100,1000,4000", help="streams per call on CUDA (streams repeated)")
    ap.add_argument("--clips", default=None, help="an .npz of the utterances: read when it exists, else written "
                                                  "(run once where espeak-ng is installed)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    _silero_jit()  # imports silero_vad, which sets torch threads to 1
    torch.set_num_threads(args.threads)
    settings = VadSettings()
    streams = make_streams(args.minutes, args.streams, clips_path=args.clips)
    audio_s = sum(len(x) for x in streams) / SR
    print(f"{len(streams)} streams, {audio_s / 60:.1f} min of audio ({min(map(len, streams)) / SR:.0f}-"
          f"{max(map(len, streams)) / SR:.0f} s), {args.threads} threads, load average {load:.1f}")

    speech_probs(streams[:2], SR)  # warm-up: numba and the JIT's profiling runs
    t_base, base_segs = baseline(streams, settings.rules)
    print(f"baseline get_speech_timestamps per file: {audio_s / t_base:8.1f} audio-s/s ({t_base:.1f} s)")

    cpu0, t = time.process_time(), time.perf_counter()
    probs = speech_probs(streams, SR, args.device, workers=args.threads)
    ours_segs = segment_probs(probs, SR, settings.rules)
    t_ours, cpu_ours = time.perf_counter() - t, time.process_time() - cpu0
    t_rs = resampling_seconds(streams)
    print(f"ours (batched detector + segmenter):     {audio_s / t_ours:8.1f} audio-s/s ({t_ours:.2f} s, "
          f"{cpu_ours:.2f} CPU-s; 24->16 kHz resampling alone {t_rs:.2f} s = {t_rs / t_ours:.0%})")
    speedup = t_base / t_ours
    print(f"speedup vs get_speech_timestamps:        {speedup:8.1f}x")

    t_on, on_probs = online(streams, args.rows, settings)
    on_segs = segment_probs(on_probs, SR, settings.rules)
    same_probs = all(np.array_equal(a, b) for a, b in zip(probs, on_probs, strict=True))
    max_diff = max((float(np.abs(a - b).max()) for a, b in zip(probs, on_probs, strict=True) if len(a)), default=0.0)
    same_segs = all(np.array_equal(a, b) for a, b in zip(ours_segs, on_segs, strict=True))
    n_diff = sum(not np.array_equal(a, b) for a, b in zip(ours_segs, on_segs, strict=True))
    print(f"online detector ({args.rows} rows, 80 ms pushes): {audio_s / t_on:8.1f} audio-s/s; "
          f"identical probabilities {same_probs} (largest difference {max_diff:.1e}, promised <= "
          f"{PROB_TOLERANCE:.0e}), identical segments {same_segs} ({n_diff} streams differ)")
    speech = {"baseline": sum(e - s for segs in base_segs for s, e in segs) / SR,
              "ours": sum(int((s[:, 1] - s[:, 0]).sum()) for s in ours_segs) / SR}
    print(f"speech found: baseline {speech['baseline']:.0f} s, ours {speech['ours']:.0f} s "
          f"(get_speech_timestamps scores the whole file and its own resampling; ours the complete windows)")

    fid = fidelity(streams[0][: 4 * SR] / max(1e-9, float(np.abs(streams[0][: 4 * SR]).max())) * 0.3)
    for key, f in fid.items():
        print(f"resampling {key:22s} per 80 ms frame {f['per_frame_snr_db']:6.1f} dB (max err "
              f"{f['per_frame_max_err']:.4f}), streaming {f['streaming_snr_db']:6.1f} dB (max err "
              f"{f['streaming_max_err']:.1e})")

    gpu = {}
    if args.device.startswith("cuda"):
        for n in [int(v) for v in args.gpu_batches.split(",")]:
            batch = [streams[i % len(streams)] for i in range(n)]
            torch.cuda.synchronize()
            t = time.perf_counter()
            p = speech_probs(batch, SR, args.device)
            segment_probs(p, SR, settings.rules)
            dt = time.perf_counter() - t
            gpu[str(n)] = round(sum(len(x) for x in batch) / SR / dt, 1)
            print(f"cuda, {n:5d} streams per call: {gpu[str(n)]:10.1f} audio-s/s")

    print(json.dumps({
        "speedup_vs_get_speech_timestamps": round(speedup, 2),
        "audio_seconds_per_second": round(audio_s / t_ours, 1),
        "identical_segments": same_segs,
        "identical_probabilities": same_probs,
        "max_probability_difference": max_diff,
        "within_tolerance": max_diff <= PROB_TOLERANCE,
        "baseline_audio_seconds_per_second": round(audio_s / t_base, 1),
        "online_audio_seconds_per_second": round(audio_s / t_on, 1),
        "cpu_seconds_ours": round(cpu_ours, 2),
        "resampling_share": round(t_rs / t_ours, 3),
        "audio_seconds": round(audio_s, 1), "streams": len(streams), "threads": args.threads,
        "device": args.device, "load_average": round(load, 2), "cuda_audio_seconds_per_second": gpu,
        "resampling_fidelity": fid,
    }))


if __name__ == "__main__":
    main()
