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

* engine-only figures (issue 24): the model's ``step`` alone at that batch, every row open
  (``--engine-steps`` timed steps after ``--warmup-steps``): ms per step and the aggregate and
  per-stream real-time factors the model alone could reach;
* end to end (the runner with refills, the drain counted), ms per step split into the model's
  step and the runner's own work left beside it (on CUDA the runner overlaps the step, as the
  ``infer`` stage does: ``overlap``), the model's share of the wall, and the share of row-steps idle
  (free rows while the queue drains);
* peak GPU memory and memory per row (peak less the memory held after load, over the rows);
* with ``--profile``, a ``torch.profiler`` summary of ``--profile-steps`` engine steps: operations
  (and CUDA kernels) per step, the host's waits for the GPU per step (CUDA ``*Synchronize`` calls:
  item/bool reads, blocking copies), the GPU's busy share of the wall (the union of its kernels'
  times), and the top operations by time.

``--compile on|off`` switches moshi's ``torch.compile`` (moshi skips it for any non-empty
``NO_TORCH_COMPILE``, so ``off`` sets it to 1 and ``on`` removes it; default on, off with
``--smoke``); ``--context STEPS`` sizes the LM's ring KV cache (``MoshiModel(context_steps=...)``,
issue 24 item 2; default the checkpoint's 3,000); ``--attention dense|flex|paged`` is the LM's attention over
it (``MoshiModel(attention=...)``, issue 24 item 1: flex reads only each row's filled slots, its
FlexAttention compiled on CUDA whatever ``--compile`` says; paged is flex over one pool of K/V pages for all
rows, item 3, ``--kv-pool`` full rings a row (``MoshiModel(kv_pool=...)``; the end-to-end figures count the
streams given back and rerun, ``requeued``); default dense); ``--masks per-layer`` keeps
upstream's attention modules for dense (every layer makes its own mask) instead of the adapter's one mask a
step (issue 24 item 4), to measure the difference.

The last line is one JSON object: ``batch`` (the batch size with the highest aggregate whose
per-stream factor stays >= 1), its ``aggregate_rtf`` and ``per_stream_rtf``, ``compile``,
``context``, ``attention``, and every batch size's figures under ``runs``. ``--smoke`` uses a tiny model on CPU
(the test suite runs it). Targets on one H200 (issue 9): aggregate >= 64x with per-stream >= 1x;
under 2.5 GPU-hours (issue 24: 250x end to end at per-stream >= 1.5x).

``--teacher-forcing`` measures instead the cost of Duplex Cue's teacher forcing (spec section 9,
``MoshiModel.step_forced``) per batch size:

* model steps per second (one step = one 80 ms frame for every row) of ``step`` (every row
  free), ``step_forced`` with every row forced and with the first half of the rows forced,
  each from freshly opened rows on synthetic audio, after ``--warmup-steps`` untimed steps
  (CUDA graph capture); the cost of forcing is the ratio of milliseconds per step to ``step``'s;
* the Duplex Cue runner (:func:`harness.cue.continuation.run_continuations`) over twice as many
  synthetic cue items as rows (every row refilled once), each forced for ``--cue-context-s``
  then free for ``--cue-window-s``: aggregate and per-stream real-time factors;
* projected GPU-hours for ``--cue-items`` items at the spec's geometry (``--projected-context-s``
  120 s forced + ``--projected-window-s`` 10 s free) from the measured step rates.

Its last line is one JSON object: ``mode`` ``"teacher_forcing"``, the largest measured batch's
``forced_all_cost``, ``forced_half_cost``, ``cue_aggregate_rtf`` and ``projected_cue_gpu_hours``,
and every batch size's figures under ``runs``. ``--smoke`` runs both modes on the tiny model (the
forcing figures under ``teacher_forcing``); ``--smoke --teacher-forcing`` only the forcing one.
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

from harness.cue.continuation import ContinuationInput, CueStreamContext, run_continuations
from harness.cue.schema import SWITCH_LEAD_S, WINDOW_S, CueItem, Word
from harness.models.base import RowPreempted
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, ModelFailure, stream_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings

SR = 24_000
N_CONVERSATIONS = 4_000


def speechlike(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """``float32[*shape]`` of noise at 24 kHz (last axis: samples) amplitude-modulated by a 4 Hz
    syllable rhythm, peaking at -20 dBFS RMS."""
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * np.arange(shape[-1]) / SR)
    return (0.1 * rng.standard_normal(shape) * envelope).astype(np.float32)


def conversations(n: int, turn_s: float, seed: int = 0) -> list[ConversationInput]:
    """``n`` scripted conversations (five turns, a T in the middle) of :func:`speechlike` noise,
    turn lengths drawn around ``turn_s`` so the streams end at different times (refills)."""
    rng = np.random.default_rng(seed)
    labels = (Label.N2, Label.N1, Label.T, Label.N3, Label.N2)
    out = []
    for i in range(n):
        turns = tuple(Turn("ABC"[k % 3], "x", lab, Target.ARIA if lab is Label.T else Target.HUMAN)
                      for k, lab in enumerate(labels))
        scene = Scene(f"g{i}-explicit", f"g{i}", "explicit", ("A", "B", "C"), turns, "yes")
        clips = [speechlike(rng, (round(turn_s * rng.uniform(0.5, 1.5) * SR),)) for _ in turns]
        out.append(ConversationInput(scene, clips, np.zeros(0, np.float32), i))
    return out


def cue_inputs(n: int, context_s: float, window_s: float, seed: int = 0) -> list[ContinuationInput]:
    """``n`` synthetic Duplex Cue items (on at most 8 shared two-channel recordings of
    :func:`speechlike` noise) whose cue comes after more than ``context_s`` seconds, so every
    stream is forced for the whole context, then free for ``window_s``: all ``context_s +
    window_s`` long."""
    rng = np.random.default_rng(seed)
    recordings = [speechlike(rng, (2, round((context_s + window_s + 1.0) * SR))) for _ in range(min(n, 8))]
    out = []
    for i in range(n):
        onset = context_s + SWITCH_LEAD_S + 0.5 * rng.uniform()  # the switch point lies past the context
        item = CueItem(f"tf{i}", f"rec{i % len(recordings)}", "backchannel", (Word("yeah", onset, onset + 0.4),),
                       onset + 0.4, onset + window_s)
        out.append(ContinuationInput(item, recordings[i % len(recordings)], i))
    return out


def build(smoke: bool, device: str, max_batch: int, context: int | None = None, attention: str = "dense",
          kv_pool: float = 1.0):
    from harness.models.moshi import MoshiModel

    if smoke:
        model = MoshiModel(tiny=True, dtype="float32", max_batch=max_batch, context_steps=context,
                           attention=attention, kv_pool=kv_pool)
    else:
        from moshi.models import loaders

        model = MoshiModel(lm_kwargs=dict(loaders._lm_kwargs), mimi_config=dict(loaders._mimi_config),
                           dtype="bfloat16", max_batch=max_batch, context_steps=context, attention=attention,
                           kv_pool=kv_pool)
    model.load(device)
    return model


def stream_rates(results: list, wall: float) -> dict:
    """Figures of one batch's streams (``ConversationResult`` or ``ContinuationResult``, each
    with ``status``, ``output`` at 24 kHz, ``wall_s`` and ``step_s``) over ``wall`` seconds."""
    ok = [r for r in results if r.status == "ok"]
    audio = [len(r.output) / SR for r in ok]
    per_stream = [a / r.wall_s for a, r in zip(audio, ok, strict=True) if r.wall_s > 0]
    return {
        "conversations": len(results), "errors": len(results) - len(ok),
        "audio_s": round(sum(audio), 1), "wall_s": round(wall, 2),
        "aggregate_rtf": round(sum(audio) / wall, 2),
        "per_stream_rtf": round(statistics.median(per_stream), 2) if per_stream else 0.0,
        "per_stream_rtf_min": round(min(per_stream), 2) if per_stream else 0.0,
        "step_share": round(sum(r.step_s for r in ok) / max(1e-9, sum(r.wall_s for r in ok)), 3),
    }


def _start_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()


def _peak_gib(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None


def _held_gib(device: str) -> float | None:
    """GPU memory held now (after load: the weights and whatever the model keeps between streams)."""
    import torch

    return torch.cuda.memory_allocated() / 2**30 if device == "cuda" else None


def measure(model, batch: int, turn_s: float, protocol: ProtocolSettings, device: str) -> dict:
    """End to end: ``2 * batch`` conversations through the runner with refills, the drain counted."""
    convs = conversations(2 * batch, turn_s, seed=batch)  # twice the rows: every row is refilled once
    _start_peak(device)
    res: list = [None] * len(convs)
    # as the infer stage runs it: on a GPU the runner's detector and rendering work beside the model's step
    stats = stream_conversations(model, convs, protocol, VadSettings(), 3600.0, res.__setitem__, rows=batch,
                                 overlap=device == "cuda")
    split = {"model": round(1000 * stats.model_s / stats.steps, 2),
             "runner": round(1000 * (stats.wall_s - stats.model_s) / stats.steps, 2),
             "idle_row_share": round(stats.idle_row_steps / stats.row_steps, 3),
             "model_share_of_wall": round(stats.model_s / stats.wall_s, 3)}
    return {"batch": batch, **stream_rates(res, stats.wall_s), "steps": stats.steps, "ms_per_step": split,
            "requeued": stats.requeued, "peak_memory_gib": _peak_gib(device)}


def profile_steps(model, batch: int, steps: int, device: str) -> dict:
    """``torch.profiler`` over ``steps`` engine steps at ``batch`` rows (after 2 untimed ones): operations
    and CUDA kernels per step, the host's waits for the GPU per step (the CUDA runtime's ``*Synchronize``
    calls: each ``item``/``bool`` of a device value and each blocking copy makes one), the GPU's busy
    share of the wall (union of its kernels' intervals), and the ten operations with the most self time
    (device time on CUDA, host time on CPU)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    info = model.info
    rng = np.random.default_rng(batch)
    heard = speechlike(rng, (steps + 2, batch, info.frame_in))
    for row in range(batch):
        model.open(row, CueStreamContext(f"profile-{row}", row, "", None))
    for k in range(2):
        model.step(heard[k])
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        for k in range(steps):
            model.step(heard[2 + k])
    wall = time.perf_counter() - t0
    for row in range(batch):  # the streams end (attention=paged: their K/V pages go back to the pool)
        model.close(row)
    events = prof.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us, end = 0.0, -1.0
    for e in sorted(kernels, key=lambda e: e.time_range.start):  # union of the kernels' intervals
        start, stop = e.time_range.start, e.time_range.end
        busy_us += max(0.0, stop - max(start, end))
        end = max(end, stop)
    cuda = device == "cuda"
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    top = sorted(prof.key_averages(), key=lambda a: -getattr(a, key))[:10]
    return {"steps": steps, "ops_per_step": round(sum(e.device_type == torch.autograd.DeviceType.CPU
                                                      for e in events) / steps),
            "kernels_per_step": round(len(kernels) / steps) if cuda else None,
            "host_syncs_per_step": round(sum("Synchronize" in e.name for e in events) / steps, 1) if cuda else None,
            "gpu_busy_share": round(busy_us / 1e6 / wall, 3) if cuda else None,
            "ms_per_step": round(1000 * wall / steps, 2),
            "top": [{"op": a.key, "ms_per_step": round(getattr(a, key) / 1000 / steps, 3), "calls_per_step":
                     round(a.count / steps, 1)} for a in top]}


FORCING_MODES = ("free", "forced_all", "forced_half")


def step_rates(model, batch: int, steps: int, warmup: int, modes: tuple[str, ...] = FORCING_MODES) -> dict:
    """Model steps per second at ``batch`` rows of ``step`` (``free``: the engine alone) and of
    ``step_forced`` with every row (``forced_all``) and the first half of the rows (``forced_half``)
    forced (those of ``modes``), each over ``steps`` timed steps after ``warmup`` untimed ones, from
    freshly opened rows."""
    info = model.info
    n = warmup + steps
    rng = np.random.default_rng(batch)
    heard = speechlike(rng, (batch, n * info.frame_in)).reshape(batch, n, info.frame_in).swapaxes(0, 1)
    forced = speechlike(rng, (batch, n * info.frame_out)).reshape(batch, n, info.frame_out).swapaxes(0, 1)
    masks = {"free": None, "forced_all": np.ones(batch, bool), "forced_half": np.arange(batch) < batch // 2}
    out = {}
    for mode in modes:
        mask = masks[mode]
        for row in range(batch):
            model.open(row, CueStreamContext(f"{mode}-{row}", row, "", None))
        for k in range(n):
            if k == warmup:
                t0 = time.perf_counter()  # every step returns host audio: the device is in sync
            if mask is None:
                model.step(heard[k])
            else:
                model.step_forced(heard[k], forced[k], mask)
        wall = time.perf_counter() - t0
        for row in range(batch):
            model.close(row)
        rate = steps / wall
        out[mode] = {"steps_per_s": round(rate, 2), "ms_per_step": round(1000 * wall / steps, 2),
                     "per_stream_rtf": round(rate * info.frame_s, 2),
                     "aggregate_rtf": round(batch * rate * info.frame_s, 2)}
    return out


def forcing_figures(model, batches: list[int], args, device: str) -> dict:
    """``--teacher-forcing``: per batch size, :func:`step_rates`, the Duplex Cue runner's rates
    and the projected GPU-hours (module docstring); the summary of the largest measured batch."""
    import torch

    frame_s = model.info.frame_s
    runs = []
    for b in batches:
        try:
            _start_peak(device)
            r = {"batch": b, "steps": args.steps, **step_rates(model, b, args.steps, args.warmup_steps)}
            t0 = time.perf_counter()
            res = run_continuations(model, cue_inputs(2 * b, args.cue_context_s, args.cue_window_s, seed=b), SR,
                                    lead_s=SWITCH_LEAD_S, context_s=args.cue_context_s, window_s=args.cue_window_s,
                                    rows=b)
            r["cue"] = {"context_s": args.cue_context_s, "window_s": args.cue_window_s,
                        **stream_rates(res, time.perf_counter() - t0)}
        except (torch.OutOfMemoryError, ModelFailure) as e:
            cause = e if isinstance(e, torch.OutOfMemoryError) else e.__cause__
            if not isinstance(cause, torch.OutOfMemoryError):
                raise
            print(f"batch {b:4d}: out of GPU memory ({cause}); larger batches skipped", flush=True)
            runs.append({"batch": b, "out_of_memory": True})
            break
        r["peak_memory_gib"] = _peak_gib(device)
        for mode in FORCING_MODES[1:]:
            r[f"{mode}_cost"] = round(r[mode]["ms_per_step"] / r["free"]["ms_per_step"], 3)
        item_ms = (args.projected_context_s * r["forced_all"]["ms_per_step"]
                   + args.projected_window_s * r["free"]["ms_per_step"]) / frame_s
        r["projected_cue_gpu_hours"] = round(args.cue_items * item_ms / 1000 / b / 3600, 3)
        runs.append(r)
        for mode in FORCING_MODES:
            m = r[mode]
            print(f"batch {b:4d} {mode:>11}: {m['steps_per_s']:7.2f} steps/s ({m['ms_per_step']:.1f} ms a step), "
                  f"per stream {m['per_stream_rtf']:.2f}x, aggregate {m['aggregate_rtf']:.2f}x real time"
                  + (f"; {r[mode + '_cost']:.3f}x the cost of free steps" if mode != "free" else ""), flush=True)
        c = r["cue"]
        print(f"batch {b:4d} Duplex Cue runner ({c['conversations']} items, {c['context_s']:g} s forced + "
              f"{c['window_s']:g} s free): aggregate {c['aggregate_rtf']:.2f}x, per stream {c['per_stream_rtf']:.2f}x "
              f"(min {c['per_stream_rtf_min']:.2f}x), model steps {100 * c['step_share']:.0f}% of wall, "
              f"{c['errors']} errors; peak memory {r['peak_memory_gib']} GiB; {args.cue_items} items at "
              f"{args.projected_context_s:g} s + {args.projected_window_s:g} s: {r['projected_cue_gpu_hours']} "
              f"GPU-hours", flush=True)
    measured = [r for r in runs if not r.get("out_of_memory")]
    if not measured:
        return {"mode": "teacher_forcing", "device": device, "smoke": args.smoke, "runs": runs}
    top = measured[-1]
    return {"mode": "teacher_forcing", "batch": top["batch"], "forced_all_cost": top["forced_all_cost"],
            "forced_half_cost": top["forced_half_cost"], "cue_aggregate_rtf": top["cue"]["aggregate_rtf"],
            "projected_cue_gpu_hours": top["projected_cue_gpu_hours"], "device": device, "smoke": args.smoke,
            "runs": runs}


def runner_figures(model, batches: list[int], turn_s: float, protocol: ProtocolSettings, args, device: str) -> dict:
    """Conversations through the runner per batch size (module docstring); the best batch's summary."""
    import torch

    from harness.models.moshi_attention import SharedStepAttention

    runs = []
    held = _held_gib(device)
    for b in batches:
        try:
            engine = step_rates(model, b, args.engine_steps, args.warmup_steps, ("free",))["free"]
            r = measure(model, b, turn_s, protocol, device)
            if args.profile:
                r["profile"] = profile_steps(model, b, args.profile_steps, device)
        except RowPreempted as e:  # outside the runner (engine, profile) every row must hold its steps at once
            raise SystemExit(f"batch {b}: the K/V pool (--kv-pool {args.kv_pool:g}) cannot hold every row's engine "
                             f"steps at once ({e}); the engine-only figures need a larger pool") from e
        except (torch.OutOfMemoryError, ModelFailure) as e:
            cause = e if isinstance(e, torch.OutOfMemoryError) else e.__cause__
            if not isinstance(cause, torch.OutOfMemoryError):
                raise
            print(f"batch {b:4d}: out of GPU memory ({cause}); larger batches skipped", flush=True)
            runs.append({"batch": b, "out_of_memory": True})
            break
        r["engine"] = engine
        r["memory_per_row_gib"] = None if held is None else round((r["peak_memory_gib"] - held) / b, 3)
        r["projected_gpu_hours"] = round(N_CONVERSATIONS * args.conversation_s / r["aggregate_rtf"] / 3600, 2)
        runs.append(r)
        ms = r["ms_per_step"]
        print(f"batch {b:4d}: engine alone {engine['ms_per_step']:.1f} ms a step ({engine['aggregate_rtf']:.2f}x "
              f"aggregate, {engine['per_stream_rtf']:.2f}x a stream); end to end aggregate {r['aggregate_rtf']:8.2f}x "
              f"real time, per stream {r['per_stream_rtf']:6.2f}x (min {r['per_stream_rtf_min']:.2f}x), a step "
              f"{ms['model']:.1f} ms model + {ms['runner']:.1f} ms runner (the model "
              f"{100 * ms['model_share_of_wall']:.1f} % of wall), {100 * ms['idle_row_share']:.1f} % of "
              f"row-steps idle; peak memory {r['peak_memory_gib']} GiB ({r['memory_per_row_gib']} a row), "
              f"{r['errors']} errors; 4,000 conversations: {r['projected_gpu_hours']} GPU-hours", flush=True)
        if args.profile:
            p = r["profile"]
            print(f"batch {b:4d} profile: {p['ops_per_step']} operations and {p['kernels_per_step']} kernels a step, "
                  f"{p['host_syncs_per_step']} host syncs a step, GPU busy {p['gpu_busy_share']} of the wall; top: "
                  + ", ".join(f"{t['op']} {t['ms_per_step']} ms" for t in p["top"][:5]), flush=True)
    measured = [r for r in runs if not r.get("out_of_memory")]
    keeping_pace = [r for r in measured if r["per_stream_rtf"] >= 1.0] or measured
    best = max(keeping_pace, key=lambda r: r["aggregate_rtf"])
    return {"batch": best["batch"], "aggregate_rtf": best["aggregate_rtf"], "per_stream_rtf": best["per_stream_rtf"],
            "projected_gpu_hours": best["projected_gpu_hours"], "device": device, "smoke": args.smoke,
            "compile": args.compile, "context": args.context, "attention": model.attention, "kv_pool": model.kv_pool,
            "masks": "per-step" if any(isinstance(a, SharedStepAttention) for a in model.lm.transformer.modules())
            else "per-layer",
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true",
                    help="tiny model on CPU: batch sizes 1 and 2 through the runner, then teacher forcing at 2 rows")
    ap.add_argument("--batches", default="1,8,32,64,128", help="batch sizes (comma-separated)")
    ap.add_argument("--turn-s", type=float, default=4.0, help="mean human turn length in seconds")
    ap.add_argument("--conversation-s", type=float, default=130.0,
                    help="mean streamed length of one benchmark conversation (speech, waits and tail), seconds")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--teacher-forcing", action="store_true",
                    help="measure Duplex Cue's teacher forcing (step vs step_forced, the cue runner) instead")
    ap.add_argument("--steps", type=int, default=100, help="timed model steps per forcing mode")
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before them (CUDA graph capture)")
    ap.add_argument("--cue-context-s", type=float, default=20.0, help="forced seconds of each measured cue item")
    ap.add_argument("--cue-window-s", type=float, default=WINDOW_S, help="free seconds of each measured cue item")
    ap.add_argument("--cue-items", type=int, default=300, help="cue items of the GPU-hours projection")
    ap.add_argument("--projected-context-s", type=float, default=120.0,
                    help="forced seconds per item in the projection (spec section 9: up to 120 s)")
    ap.add_argument("--projected-window-s", type=float, default=WINDOW_S,
                    help="free seconds per item in the projection (spec section 9: 10 s)")
    ap.add_argument("--compile", choices=("on", "off"), default=None,
                    help="moshi's torch.compile (default: on, off with --smoke)")
    ap.add_argument("--context", type=int, default=None,
                    help="steps of the LM's ring KV cache (MoshiModel context_steps; default: the checkpoint's)")
    ap.add_argument("--attention", choices=("dense", "flex", "paged"), default="dense",
                    help="the LM's attention over its ring (MoshiModel attention; flex and paged: compiled on CUDA)")
    ap.add_argument("--kv-pool", type=float, default=1.0,
                    help="with --attention paged: the K/V pool in full rings a row (MoshiModel kv_pool; below 1 "
                         "the youngest streams are given back and rerun when it runs out)")
    ap.add_argument("--masks", choices=("per-step", "per-layer"), default="per-step",
                    help="dense: the attention mask made once a step (the adapter's) or by every layer (upstream's "
                         "modules), to measure the difference")
    ap.add_argument("--engine-steps", type=int, default=50, help="timed engine-only steps per batch size")
    ap.add_argument("--profile", action="store_true", help="a torch.profiler summary of engine steps per batch size")
    ap.add_argument("--profile-steps", type=int, default=10, help="engine steps --profile records")
    args = ap.parse_args(argv)
    args.compile = args.compile or ("off" if args.smoke else "on")
    if args.compile == "off":  # moshi skips torch.compile for any non-empty NO_TORCH_COMPILE (moshi/utils/compile.py)
        os.environ["NO_TORCH_COMPILE"] = "1"
    else:
        os.environ.pop("NO_TORCH_COMPILE", None)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    batches = [1, 2] if args.smoke else [int(b) for b in args.batches.split(",")]
    if args.smoke:
        args.steps, args.warmup_steps, args.cue_context_s, args.cue_window_s = 4, 2, 0.8, 0.4
        args.engine_steps, args.profile_steps = 4, 2
    t0 = time.perf_counter()
    if args.masks == "per-layer":
        from harness.models import moshi_attention

        moshi_attention.share_step_masks = lambda transformer: 0  # dense keeps upstream's modules
    model = build(args.smoke, device, max(batches), args.context, args.attention, args.kv_pool)
    print(f"model built on {device} in {time.perf_counter() - t0:.1f} s ({'tiny' if args.smoke else 'full size'}, "
          f"random weights; torch.compile {args.compile}, context {args.context or 'the checkpoint'}"
          f"{' steps' if args.context else ''}, attention {args.attention}"
          f"{f', kv_pool {args.kv_pool:g}' if args.attention == 'paged' else ''})", flush=True)
    if args.teacher_forcing:
        figures = forcing_figures(model, batches[-1:] if args.smoke else batches, args, device)
    else:
        turn_s = 0.4 if args.smoke else args.turn_s
        protocol = ProtocolSettings(tail_s=0.5, fresh_onset_window_s=1.0, endpoint_silence_s=0.5,
                                    response_cap_s=2.0) if args.smoke else ProtocolSettings()
        figures = runner_figures(model, batches, turn_s, protocol, args, device)
        if args.smoke:
            figures["teacher_forcing"] = forcing_figures(model, batches[-1:], args, device)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
