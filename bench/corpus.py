"""Time the paper-scale corpus: generate + validate 2,000 pairs, then espeak-ng synthesis of a
random sample of its distinct clips on N worker processes, projected to the whole corpus.

Clips are keyed as the synth stage keys them (voice, text): every distinct clip is synthesised
once and reused across versions and scenes. The deduplication saving is counted both in clips
and in audio seconds (from the sample's measured seconds per character). Figures, not
assertions; the last line is one JSON object.

    .venv/bin/python bench/corpus.py [--pairs 2000] [--sample 120] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from concurrent.futures import ProcessPoolExecutor

from harness.runtime.config import TtsSettings
from harness.scenes.generator import generate_pairs
from harness.scenes.schema import validate_scenes
from harness.scenes.stats import corpus_stats

RATE = 24_000


def _speak(job: tuple[str, str]) -> float:
    from harness.audio.tts.espeak import EspeakTTS

    text, voice = job
    return len(EspeakTTS(RATE).synthesize(text, voice)) / RATE


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--sample", type=int, default=120)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20260902)
    args = ap.parse_args()

    t0 = time.perf_counter()
    scenes = generate_pairs(args.pairs, args.seed, 0.25, 0.484, "paper")
    gen_s = time.perf_counter() - t0
    valid, invalid = validate_scenes(scenes, strict=True)
    gen_val_s = time.perf_counter() - t0
    stats = corpus_stats(valid)
    print(f"generate {gen_s:.2f} s, generate+validate {gen_val_s:.2f} s for {args.pairs} pairs "
          f"({len(invalid)} invalid)")

    voices = TtsSettings().voices
    clips = [(t.text, voices[t.speaker]) for s in valid for t in s.turns]
    distinct = sorted(set(clips))
    sample = random.Random(0).sample(distinct, min(args.sample, len(distinct)))
    t1 = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        seconds = list(pool.map(_speak, sample, chunksize=4))
    synth_s = time.perf_counter() - t1
    clips_per_s = len(sample) / synth_s
    s_per_char = sum(seconds) / sum(len(t) for t, _ in sample)
    all_audio_h = sum(len(t) for t, _ in clips) * s_per_char / 3600
    distinct_audio_h = sum(len(t) for t, _ in distinct) * s_per_char / 3600
    out = {
        "pairs": args.pairs, "generate_s": round(gen_s, 2), "generate_and_validate_s": round(gen_val_s, 2),
        "workers": args.workers, "sample_clips": len(sample), "clips_per_s": round(clips_per_s, 2),
        "audio_s_per_wall_s": round(sum(seconds) / synth_s, 1),
        "clips_all_versions": len(clips), "distinct_clips": len(distinct),
        "clip_saving": round(1 - len(distinct) / len(clips), 4),
        "espeak_audio_h_all_versions": round(all_audio_h, 2), "espeak_audio_h_distinct": round(distinct_audio_h, 2),
        "audio_saving": round(1 - distinct_audio_h / all_audio_h, 4),
        "projected_synth_h_distinct": round(len(distinct) / clips_per_s / 3600, 2),
        "projected_synth_h_without_dedup": round(len(clips) / clips_per_s / 3600, 2),
        "estimated_speech_h_paper_rate": stats["reuse"]["speech_h"],
    }
    print(f"espeak-ng on {args.workers} workers: {clips_per_s:.2f} clips/s "
          f"({out['audio_s_per_wall_s']} s of audio per second); {len(distinct):,} distinct of {len(clips):,} clips "
          f"({out['clip_saving']:.1%} fewer); projected {out['projected_synth_h_distinct']} h "
          f"(without dedup {out['projected_synth_h_without_dedup']} h)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
