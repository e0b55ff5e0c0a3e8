"""Time the whole reduce on a synthetic per-event table the size of the full benchmark.

5 models x 2 conditions x 2,000 scenes with the paper's window counts per condition
(T 2,000; N1 3,041; N2 14,052; N3 3,267; N4 1,911), outcomes drawn at the paper's
rates (answers 70 % correct; 30 % of occupied silence windows judged backchannels, 5 % with
an empty transcript), with the fields the scoring flow writes into the per-event table. The
five models are evaluated and the oracle self-test baseline is added outside the comparison
family, as in a real run. Times scores + every statistic (10,000-replicate bootstrap for every
pair of evaluated models and per model explicit vs implicit). Prints figures; the last line is
one JSON object with ``reduce_seconds``.

    .venv/bin/python bench/reduce.py [--scenes 2000]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from harness.metrics.analyses import all_statistics
from harness.metrics.scores import compute_metrics
from harness.scenes.schema import CONDITIONS

SCENES = 2_000
WINDOWS = {"N1": 3_041, "N2": 14_052, "N3": 3_267}
N4_EVENTS = 1_911
MODELS = {"minicpm-o-4.5": (0.95, 0.92), "moshi": (0.63, 0.27), "flm-audio": (0.54, 0.40),
          "voila": (0.65, 0.83), "freeze-omni": (0.25, 0.0002),  # (fresh onset, silence) paper rates
          "oracle": (1.0, 1.0)}  # the self-test baseline: scored, never compared
ROLES = {**dict.fromkeys(MODELS, "evaluated"), "oracle": "baseline"}
TARGETS = ("human", "device", "group", "none")


def synthetic_rows(rng: np.random.Generator, scenes: int = SCENES) -> dict[str, list[dict]]:
    """The per-event table of every model; window counts scale with ``scenes``."""
    windows = {k: round(v * scenes / SCENES) for k, v in WINDOWS.items()}
    n4_events = round(N4_EVENTS * scenes / SCENES)
    out = {}
    for model, (fresh, silence) in MODELS.items():
        rows = []
        for cond in CONDITIONS:
            for s in range(scenes):
                f = rng.random() < fresh
                speaking = (not f) and rng.random() < 0.5
                spoke = f or speaking
                rows.append({"model": model, "kind": "T", "scene_id": f"p{s:05d}-{cond}", "pair_id": f"p{s:05d}",
                             "condition": cond, "fresh_onset": f, "response_presence": spoke,
                             "speaking_at_end": speaking,
                             "answer_correct": bool(rng.random() < 0.7) if spoke else None})
            scene_of = rng.integers(0, scenes, sum(windows.values()))
            labels = np.repeat(list(windows), list(windows.values()))
            silent = rng.random(len(labels)) < silence
            speech = np.where(silent, 0.0, rng.exponential(1.5, len(labels)))
            empty = ~silent & (rng.random(len(labels)) < 0.05)  # no transcript: fails without a judge call
            exempt = ~silent & ~empty & (rng.random(len(labels)) < 0.3)  # judged BACKCHANNEL
            for sc, lab, ok, ex, sp, no_text in zip(scene_of, labels, silent, exempt, speech, empty, strict=True):
                rows.append({"model": model, "kind": "silence", "scene_id": f"p{sc:05d}-{cond}", "condition": cond,
                             "pair_id": f"p{sc:05d}", "label": str(lab),
                             "target": "none" if lab == "N3" else TARGETS[sc % 3], "silent": bool(ok),
                             "exempt_backchannel": bool(ex), "silence_preserved": bool(ok or ex),
                             "speech_s": float(sp), "transcript": None if ok else "" if no_text else "mm-hm"})
            for e in range(n4_events):
                outcome = rng.choice(["yield", "still_voicing", "resumed", "excluded_no_answer"])
                rows.append({"model": model, "kind": "N4", "scene_id": f"p{e % scenes:05d}-{cond}",
                             "condition": cond, "yield_outcome": str(outcome),
                             "yield_eligible": not outcome.startswith("excluded"),
                             "window_response": bool(rng.random() < 0.9),
                             "already_speaking_at_q_start": False, "started_during_q": False,
                             "first_spoke_after_q": outcome != "excluded_no_answer",
                             "still_speaking_at_r_start": outcome != "excluded_no_answer"})
        out[model] = rows
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenes", type=int, default=SCENES, help="scene pairs per model (the benchmark: 2,000)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    rows = synthetic_rows(rng, args.scenes)
    build = time.perf_counter() - t0
    times = {f"p{s:05d}-{c}": float(rng.uniform(14.5, 264.0)) for s in range(args.scenes) for c in CONDITIONS}
    n_rows = sum(len(r) for r in rows.values())
    t1 = time.perf_counter()
    metrics = compute_metrics(rows, {}, CONDITIONS, 30)
    t2 = time.perf_counter()
    statistics = all_statistics(rows, metrics, times, CONDITIONS, 30, ROLES)
    t3 = time.perf_counter()
    family = statistics["comparison_family"]
    boots = len(statistics["silence_bootstrap"]["explicit"]) * 2 + len(statistics["silence_explicit_vs_implicit"])
    print(f"rows: {n_rows:,} (built in {build:.1f} s)")
    print(f"comparison family: {len(family['models'])} evaluated models, m = {family['m']} per condition; "
          f"excluded: {family['excluded']}")
    print(f"scores: {t2 - t1:.2f} s; statistics incl. {boots} bootstraps of 10,000 replicates: {t3 - t2:.2f} s")
    print(json.dumps({"reduce_seconds": round(t3 - t1, 3), "scores_seconds": round(t2 - t1, 3),
                      "statistics_seconds": round(t3 - t2, 3), "rows": n_rows}))


if __name__ == "__main__":
    main()
