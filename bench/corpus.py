"""Time the paper-scale corpus: generate + validate 2,000 pairs, print whether it tests addressee
inference (the corpus diagnostic, harness/scenes/diagnostic.py, beside issue 22's targets), then the synth stage itself
(espeak-ng) on the distinct clips of the first ``--synth-pairs`` paper-profile pairs, once in the
driver process (``tts.actors=0``) and once on ``--workers`` Ray actors, projected to the whole
corpus.

Clips are keyed as the synth stage keys them (voice, text): every distinct clip is synthesised
once and reused across versions and scenes. The deduplication saving is counted both in clips
and in audio seconds (from the measured seconds per character). The parallel figure is given
end to end and steady: less the start-up of its actors (their imports, paid once per stage
invocation), timed by starting as many actors beforehand. The projection uses the steady rate.
The machine is shared: the 1-minute load average is printed with the figures. Figures, not
assertions; the last line is one JSON object.

    .venv/bin/python bench/corpus.py [--pairs 2000] [--synth-pairs 24] [--workers 2] [--no-synth]

``--no-synth`` stops after the corpus figures (the last line is then their JSON object).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace

from harness.audio.tts.settings import TtsSettings
from harness.products.scenes import SceneSet
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.scenes.diagnostic import headline
from harness.scenes.generator import generate_pairs
from harness.scenes.schema import validate_scenes
from harness.scenes.stats import corpus_stats
from harness.stages import run_stage
from harness.store.base import LocalStore, get_json


def _synth(pairs: int, seed: int, actors: int, root: str) -> dict:
    """The synth stage on a fresh store: wall seconds, distinct clips, audio seconds, and (Ray)
    the seconds until Ray and the actors were up."""
    cfg = RunConfig.from_dict({
        "run_id": "bench", "scenes": {"n_pairs": pairs, "seed": seed, "four_party_share": 0.25, "n4_share": 0.484,
                                      "profile": "paper"},
        "model": {"silent": {"target": "silent"}}, "store": {"root": root},
        "cluster": {"num_cpus": max(actors, 1), "ray_tmp": f"/tmp/dmpe-bench-ray-{os.getpid()}"}})
    cfg = replace(cfg, tts=replace(cfg.tts, actors=actors))
    store = LocalStore(root)
    run_stage("scenes", cfg, store)
    startup = 0.0
    if actors:
        import ray

        from harness.runtime.executor import ray_session
        from harness.stages.synth import ClipSynthesizer

        with ray_session(cfg):  # the actors' start-up (imports) alone; the stage's own actors pay it again
            t0 = time.perf_counter()
            warm = [ray.remote(num_cpus=1)(ClipSynthesizer).remote(cfg) for _ in range(actors)]
            ray.get([a.__ray_ready__.remote() for a in warm])
            startup = time.perf_counter() - t0
            for a in warm:
                ray.kill(a)
            t0 = time.perf_counter()
            run_stage("synth", cfg, store)
            wall = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        run_stage("synth", cfg, store)
        wall = time.perf_counter() - t0
    plan = RunPlan.from_config(cfg)
    marker = get_json(store, plan.layout.marker(plan.synth))
    spoken = {(cfg.tts.voices[t.speaker], t.text) for s in SceneSet.read(store, plan.layout, plan.scenes).scenes
              for t in s.turns}
    chars = sum(len(text) for _, text in spoken) + len(cfg.tts.preamble_text)
    return {"wall_s": wall, "startup_s": startup, "clips": marker["clips"], "audio_s": marker["distinct_audio_s"],
            "chars": chars}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--synth-pairs", type=int, default=24, help="paper-profile pairs whose clips are synthesised")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20260902)
    ap.add_argument("--no-synth", action="store_true", help="stop after the corpus figures")
    args = ap.parse_args()

    t0 = time.perf_counter()
    scenes = generate_pairs(args.pairs, args.seed, 0.25, 0.484, "paper")
    gen_s = time.perf_counter() - t0
    valid, invalid = validate_scenes(scenes, strict=True)
    gen_val_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    stats = corpus_stats(valid)
    stats_s = time.perf_counter() - t0
    print(f"generate {gen_s:.2f} s, generate+validate {gen_val_s:.2f} s for {args.pairs} pairs "
          f"({len(invalid)} invalid); corpus stats with the diagnostic {stats_s:.1f} s")
    figures = headline(stats["diagnostic"]) | {"distinct_speech_h": stats["reuse"]["distinct_speech_h"]}
    print("does it test addressee inference (issue 22's targets: designators <= 25 %, implicit AUC <= 0.65, "
          "repeats <= 10 %, distinct speech >= 58 h, T onset 14.50-263.97 s with edges 40.224 / 54.656 s):")
    for key, value in figures.items():
        print(f"  {key}: {value}")
    if args.no_synth:
        print(json.dumps(figures))
        return

    voices = TtsSettings().voices
    clips = [(t.text, voices[t.speaker]) for s in valid for t in s.turns]
    distinct = sorted(set(clips))
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, actors in (("serial", 0), ("parallel", args.workers)):
            r = runs[name] = _synth(args.synth_pairs, args.seed, actors, os.path.join(tmp, name))
            r["steady_s"] = r["wall_s"] - r["startup_s"]
            r["clips_per_s"] = r["clips"] / r["steady_s"]
            startup = f" ({r['startup_s']:.1f} s of it actor start-up)" if actors else ""
            print(f"synth stage, {name} ({actors or 'no'} Ray actors): {r['clips']} clips, {r['audio_s']:.0f} s of "
                  f"audio in {r['wall_s']:.1f} s{startup}: {r['clips_per_s']:.2f} clips/s, "
                  f"{r['audio_s'] / r['steady_s']:.1f} audio s/s")
    par, ser = runs["parallel"], runs["serial"]
    s_per_char = par["audio_s"] / par["chars"]
    all_audio_h = sum(len(t) for t, _ in clips) * s_per_char / 3600
    distinct_audio_h = sum(len(t) for t, _ in distinct) * s_per_char / 3600
    load = os.getloadavg()[0]
    out = {
        "pairs": args.pairs, "generate_s": round(gen_s, 2), "generate_and_validate_s": round(gen_val_s, 2),
        "workers": args.workers, "synth_pairs": args.synth_pairs, "sample_clips": par["clips"],
        "serial_clips_per_s": round(ser["clips_per_s"], 2),
        "serial_audio_s_per_s": round(ser["audio_s"] / ser["steady_s"], 1),
        "parallel_clips_per_s": round(par["clips_per_s"], 2),
        "parallel_audio_s_per_s": round(par["audio_s"] / par["steady_s"], 1),
        "parallel_wall_s": round(par["wall_s"], 1), "parallel_startup_s": round(par["startup_s"], 1),
        "parallel_end_to_end_clips_per_s": round(par["clips"] / par["wall_s"], 2),
        "speedup": round(par["clips_per_s"] / ser["clips_per_s"], 2),
        "clips_all_versions": len(clips), "distinct_clips": len(distinct),
        "clip_saving": round(1 - len(distinct) / len(clips), 4),
        "espeak_audio_h_all_versions": round(all_audio_h, 2), "espeak_audio_h_distinct": round(distinct_audio_h, 2),
        "audio_saving": round(1 - distinct_audio_h / all_audio_h, 4),
        "projected_synth_h_distinct_serial": round(len(distinct) / ser["clips_per_s"] / 3600, 2),
        "projected_synth_h_distinct": round(len(distinct) / par["clips_per_s"] / 3600, 2),
        "projected_synth_h_without_dedup": round(len(clips) / par["clips_per_s"] / 3600, 2),
        "estimated_speech_h_paper_rate": stats["reuse"]["speech_h"], "corpus": figures,
        "load_average_1min": round(load, 2),
    }
    print(f"{len(distinct):,} distinct of {len(clips):,} clips ({out['clip_saving']:.1%} fewer); projected full "
          f"corpus on {args.workers} workers {out['projected_synth_h_distinct']} h (serial "
          f"{out['projected_synth_h_distinct_serial']} h, without dedup {out['projected_synth_h_without_dedup']} h); "
          f"load average {load:.1f} while measured")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
