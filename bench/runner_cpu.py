"""The runner's own CPU cost per row-step (issue 24, item 5): the streaming runner
(:func:`harness.runtime.runner.stream_conversations`: scheduler, input rendering and room tone,
resamplers, online Silero detector, output checks, refills) around a trivial model whose step
costs nothing, at each of ``--rows``.

Per batch size it prints the runner's microseconds per row-step (its wall time outside the model's
step calls over rows x steps; the process's CPU time over the row-steps, and the runner's own thread's
CPU time (its serial part, the detector threads left out), which a machine shared with other work
inflates less), milliseconds per step, the idle row-steps, and the share of each
step the runner would take beside a GPU step of ``--gpu-step-ms`` (default: the issue's fit of
full-size Moshi on one H200, 28 ms + 0.39 ms a row), as it runs today: in series with the model
(``runner / (runner + gpu)``). With ``--profile`` it also prints the top functions by own time
(cProfile) at the largest batch. Synthetic conversations of :func:`bench.gpu_throughput.conversations`
(five turns of speech-like noise around ``--turn-s``), twice as many as rows (every row refilled).
Before the first batch size it builds what a process builds once, not per row-step (the room tone's
noise table, Silero's JIT and the runner's numba kernels), so the first size measured is not charged
for it. ``--gpu-sleep`` makes the model's step sleep the GPU step's time (the host waiting on a GPU, the
GIL released) and runs each size with the runner's overlap off and on (``--overlap``), paired: what is
left of the runner beside the step, the wall per step (against the slept step: the honest figure, since a
step slowed by the runner working beside it would raise the model's share too) and the model's share of the
wall (issue 24, item 5's target: above 95 %). ``--detector none`` replaces the online detector by one
that hears silence at no cost (the scheduler
decides as with Silero on the silent model), so what is timed is the runner's serial part alone. The
last line is one JSON object.

    .venv/bin/python bench/runner_cpu.py --rows 64,128,256
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_throughput import conversations
from harness.audio.room_tone import noise_table
from harness.models.base import DuplexModel, ModelInfo, StreamContext
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime import runner
from harness.runtime.runner import stream_conversations
from harness.vad.segments import SpeechView
from harness.vad.settings import VadSettings
from harness.vad.silero import StreamingDetector, frame_samples

SR, FRAME = 24_000, 1_920


class Free(DuplexModel):
    """A 24 kHz model of 80 ms frames whose step costs nothing: silence (the detector still runs). With
    ``sleep_s`` its step sleeps that long: a GPU step as the host sees it (the GIL released while it waits)."""

    def __init__(self, rows: int, sleep_s: float = 0.0):
        self.info = ModelInfo("free", SR, SR, FRAME, FRAME, rows, frozenset())
        self._out: np.ndarray | None = None
        self.sleep_s = sleep_s

    def load(self, device: str) -> None:
        pass

    def open(self, row: int, stream: StreamContext) -> None:
        pass

    def step(self, frames: np.ndarray) -> np.ndarray:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self._out is None or self._out.shape[0] != frames.shape[0]:
            self._out = np.zeros((frames.shape[0], FRAME), np.float32)
        return self._out


class Deaf:
    """An online detector that hears silence and costs nothing (``--detector none``): what is left is the
    runner's serial part (the scheduler takes the same decisions as with Silero on the silent model)."""

    def __init__(self, n_rows: int, sample_rate: int, settings: VadSettings, device: str | None = None):
        self.rules = settings.rules
        self.frame = frame_samples(sample_rate)
        self.reset_period = StreamingDetector(1, sample_rate, settings).reset_period
        self.now = np.zeros(n_rows, np.int64)
        self.probs = self

    def complete_frames(self, n: int) -> int:
        return n // self.frame

    def reset(self, rows, at: int | None = None) -> None:
        self.now[np.atleast_1d(rows)] = 0

    def push(self, y: np.ndarray, rows=None, due=None) -> None:
        self.now += y.shape[1]

    def settle(self) -> None:
        pass

    def view(self, b: int) -> SpeechView:
        return SpeechView(int(self.now[b]), (), None, None, *self.rules.samples(SR))

    def probabilities(self, b: int, n: int) -> np.ndarray:
        return np.zeros(n, np.float32)


def gpu_step_ms(rows: int) -> float:
    """The issue's fit of full-size Moshi's step on one H200 (bf16, CUDA graphs): 28 ms + 0.39 ms a row."""
    return 28.0 + 0.39 * rows


def measure(rows: int, turn_s: float, gpu_ms: float | None, threads: int, detector: str = "silero",
            sleep: bool = False, overlap: bool = False) -> dict:
    convs = conversations(2 * rows, turn_s, seed=rows)
    done = []
    runner.StreamingDetector = Deaf if detector == "none" else StreamingDetector
    gpu = gpu_ms if gpu_ms is not None else gpu_step_ms(rows)
    cpu0, main0 = time.process_time(), time.thread_time()
    stats = stream_conversations(Free(rows, gpu / 1000 if sleep else 0.0), convs, ProtocolSettings(),
                                 VadSettings(threads=threads), 3600.0, lambda i, r: done.append(r.status), rows=rows,
                                 overlap=overlap)
    cpu_s, main_s = time.process_time() - cpu0, time.thread_time() - main0
    runner_s = stats.wall_s - stats.model_s
    ms_step = 1000 * runner_s / stats.steps
    return {"rows": rows, "detector": detector, "detector_threads": threads, "steps": stats.steps,
            "conversations": len(done), "errors": done.count("error"),
            "us_per_row_step": round(1e6 * runner_s / stats.row_steps, 1), "ms_per_step": round(ms_step, 2),
            "cpu_us_per_row_step": round(1e6 * cpu_s / stats.row_steps, 1),
            "main_cpu_us_per_row_step": round(1e6 * main_s / stats.row_steps, 1),
            "idle_row_steps": round(stats.idle_row_steps / stats.row_steps, 3),
            "due_row_steps": round(stats.due_row_steps / stats.row_steps, 3), "gpu_step_ms": round(gpu, 1),
            "serial_share": None if sleep else round(ms_step / (ms_step + gpu), 3), "slept": sleep,
            "overlap": overlap, "model_share_of_wall": round(stats.model_s / stats.wall_s, 4),
            "wall_ms_per_step": round(1000 * stats.wall_s / stats.steps, 2)}


def warm() -> None:
    """What a process builds once (an infer actor once for all its shards): the room tone's noise table
    (a 4 M-point FFT, about 0.5 s), Silero's JIT and the kernels' numba caches, by one short run."""
    protocol = ProtocolSettings()
    noise_table(protocol.room_tone, protocol.sample_rate)
    stream_conversations(Free(2), conversations(2, 1.0, seed=1), protocol, VadSettings(), 3600.0,
                         lambda i, r: None, rows=2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="64,128,256", help="batch sizes (comma-separated)")
    ap.add_argument("--turn-s", type=float, default=4.0, help="mean human turn length in seconds")
    ap.add_argument("--gpu-step-ms", type=float, default=None, help="a GPU step's time (default: the issue's fit)")
    ap.add_argument("--detector-threads", default="2", help="the online detector's threads (vad.threads), "
                    "comma-separated to compare")
    ap.add_argument("--detector", choices=("silero", "none"), default="silero",
                    help="none: a detector that hears silence at no cost, to time the runner's serial part alone")
    ap.add_argument("--gpu-sleep", action="store_true",
                    help="the model's step sleeps the GPU step's time (the host waiting on a GPU, the GIL released): "
                         "the runner's time left beside it, and the model's share of wall, are measured")
    ap.add_argument("--overlap", default=None, help="off, on or off,on (paired): the runner's detector scores the "
                    "rows no decision waits on while the model steps (default: off,on with --gpu-sleep, else off)")
    ap.add_argument("--profile", action="store_true", help="cProfile the largest batch: top functions by own time")
    ap.add_argument("--profile-sort", default="tottime", help="pstats sort key of --profile (tottime, cumulative)")
    ap.add_argument("--profile-lines", type=int, default=25, help="functions --profile prints")
    args = ap.parse_args(argv)
    overlaps = [{"off": False, "on": True}[o] for o in (args.overlap or ("off,on" if args.gpu_sleep else "off"))
                .split(",")]
    import torch

    torch.set_num_threads(1)  # an infer actor's default (infer.torch_threads)
    warm()
    runs = []
    sizes = [int(r) for r in args.rows.split(",")]
    threads = [int(t) for t in args.detector_threads.split(",")]
    for rows, th, overlap in itertools.product(sizes, threads, overlaps):
        t0 = time.perf_counter()
        r = measure(rows, args.turn_s, args.gpu_step_ms, th, args.detector, args.gpu_sleep, overlap)
        runs.append(r)
        deaf = "" if args.detector == "silero" else " (no detector)"
        how = (f"beside a {r['gpu_step_ms']:.1f} ms step slept, overlap {'on' if overlap else 'off'}: the model "
               f"{100 * r['model_share_of_wall']:.1f} % of wall, {r['wall_ms_per_step']:.2f} ms of wall a step"
               if args.gpu_sleep else
               f"beside a {r['gpu_step_ms']:.1f} ms GPU step in series: {100 * r['serial_share']:.1f} % of the step")
        print(f"{rows:4d} rows, {th} detector threads{deaf}: {r['us_per_row_step']:6.1f} us a row-step "
              f"({r['cpu_us_per_row_step']:.1f} us of CPU, {r['main_cpu_us_per_row_step']:.1f} on the runner's "
              "thread), "
              f"{r['ms_per_step']:6.2f} ms a step "
              f"({r['steps']} steps, {100 * r['idle_row_steps']:.1f} % of row-steps idle, "
              f"{100 * r['due_row_steps']:.1f} % due); {how} [{time.perf_counter() - t0:.0f} s]", flush=True)
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        measure(sizes[-1], args.turn_s, args.gpu_step_ms, threads[-1], args.detector, args.gpu_sleep, overlaps[-1])
        prof.disable()
        pstats.Stats(prof).sort_stats(args.profile_sort).print_stats(args.profile_lines)
    print(json.dumps({"runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
