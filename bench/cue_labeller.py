"""Duplex Cue scoring on a generated corpus (issue 13): the labeller against the known labels,
and what scoring costs. Prints figures, asserts nothing. Last line: one JSON object.

The espeak-ng generator writes ``--items`` conversations whose right response is known by
construction. Three hand-made "models" continue them (outputs written as cue-infer would):

* ``replay``: A's recorded channel (its labels must equal the reference's, item by item);
* ``yield_now``: A's channel up to the switch point, then silence (all Yielded);
* ``ignore``: A's channel up to the switch point, then A's own speech from the start of the
  recording (unrelated to the cue: Continued).

Then the real ``cue-score`` (pocketsphinx word times, offline Silero, ``--labeler``, default the
rule stand-in) and ``cue-reduce`` stages run in a temporary store. Printed: the labeller's
reference labels against the known labels (agreement, confusion), each model's distribution
and funnel, scoring wall and CPU time, ASR calls.

    .venv/bin/python bench/cue_labeller.py [--items 24] [--seed 20260913]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import tempfile
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--seed", type=int, default=20260913)
    ap.add_argument("--labeler", default="rule")
    args = ap.parse_args()

    from harness.audio.io import encode
    from harness.cue.corpus import encode_recording, write_items, write_recordings
    from harness.cue.generate import generate_cue_corpus
    from harness.cue.plan import CuePlan
    from harness.runtime.config import CueSettings, ModelSettings, RunConfig, ScoreSettings
    from harness.runtime.shard import ShardAttempt
    from harness.stages import run_stage
    from harness.store.base import get_json, put_json
    from harness.store.settings import StoreSettings, open_store

    t = time.perf_counter()
    corpus = generate_cue_corpus(args.items, args.seed)
    gen_s = time.perf_counter() - t
    tmp = tempfile.mkdtemp(prefix="cue-bench-")
    names = ("replay", "yield_now", "ignore")
    cfg = RunConfig(run_id="cue-bench", models=tuple(ModelSettings(n, n) for n in names),
                    cue=CueSettings(n_items=args.items, seed=args.seed, labeler=args.labeler),
                    store=StoreSettings(root=tmp), score=ScoreSettings(actors=0))  # in this process: CPU-s count
    store, plan = open_store(cfg.store), CuePlan.from_config(cfg)
    lay, sr = plan.layout, cfg.protocol.sample_rate
    for name, fn, xs in (("items.jsonl", write_items, corpus.items),
                         ("recordings.jsonl", write_recordings, corpus.recordings)):
        buf = io.StringIO()
        fn(xs, buf)
        store.put(lay.file(plan.corpus, name), buf.getvalue().encode())
    for rid, x in corpus.audio.items():
        store.put(lay.file(plan.corpus, f"audio/{rid}.flac"), encode_recording(x, sr))
    put_json(store, lay.marker(plan.corpus), {})

    def output(model: str, a: np.ndarray, start: float, switch: float, end: float) -> np.ndarray:
        i0, i1, k = round(start * sr), round(end * sr), round((switch - start) * sr)
        out = np.zeros(i1 - i0, np.float32)
        seg = a[i0:i1]
        out[: len(seg)] = seg
        if model == "yield_now":
            out[k:] = 0
        elif model == "ignore":
            tail = a[: len(out) - k]
            out[k:] = 0
            out[k: k + len(tail)] = tail
        return out

    for model in names:
        prefix = plan.infer[model]
        put_json(store, lay.file(prefix, "plan.json"), {"s0": [it.item_id for it in corpus.items]})
        att = ShardAttempt(store, lay, lay.shard(prefix, "s0"))
        for it in corpus.items:
            switch = it.switch_s(cfg.cue.switch_lead_s)
            start, end = max(0.0, switch - cfg.cue.context_s), switch + cfg.cue.window_s
            att.put(it.item_id, "flac", encode(output(model, corpus.audio[it.recording_id][0], start, switch, end), sr))
            att.put(it.item_id, "json", json.dumps({"item_id": it.item_id, "status": "ok", "start_s": start,
                                                    "switch_s": switch, "end_s": end}).encode())
        att.commit({"shard": "s0", "model": model, "ok": len(corpus.items), "error": 0, "conversations": {
            it.item_id: {"status": "ok", "reason": "", "objects": att.objects[it.item_id]} for it in corpus.items}})

    t, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    run_stage("cue-score", cfg, store)
    score_s = time.perf_counter() - t
    score_cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu
    t = time.perf_counter()
    run_stage("cue-reduce", cfg, store)
    reduce_s = time.perf_counter() - t
    metrics = get_json(store, lay.file(plan.reduce, "cue_metrics.json"))
    rows = {m: get_json(store, lay.file(plan.score[m], "rows.json")) for m in names}
    check = metrics["models"]["replay"]["labeller_check"]
    print(f"corpus: {args.items} items generated in {gen_s:.1f} s; store {tmp}")
    print(f"labeller {metrics['labeler']}: reference labels = known labels on {check['agree']}/{check['n']} "
          f"({100 * (check['share'] or 0):.1f} %)")
    for known, row in check["confusion"].items():
        print(f"  known {known:9s} -> " + ", ".join(f"{lab} {v}" for lab, v in row.items()))
    out = {"items": args.items, "labeler": args.labeler, "labeller_agreement": check["share"],
           "labeller_n": check["n"], "score_wall_s": round(score_s, 2), "score_cpu_s": round(score_cpu, 2),
           "reduce_wall_s": round(reduce_s, 2), "load_avg": os.getloadavg()[0]}
    for m in names:
        e = metrics["models"][m]
        d = e["intents"]["all"]["model"]
        same = sum(r["model_label"] == r["reference_label"] for r in rows[m] if r["eligible"])
        print(f"{m:9s}: eligible {e['funnel']['eligible']}/{e['funnel']['items']} "
              f"(excluded {', '.join(f'{k} {v}' for k, v in e['funnel']['excluded'].items() if v) or 'none'}); "
              f"model {d['counts']}; same label as the reference on {same}")
        out[m] = {"eligible": e["funnel"]["eligible"], "counts": d["counts"], "same_as_reference": same}
    calls = sum(get_json(store, lay.marker(plan.score[m]))["asr_calls"] for m in names)
    out["asr_calls"] = calls
    print(f"cue-score {score_s:.1f} s wall, {score_cpu:.1f} s CPU, {calls} ASR calls; cue-reduce {reduce_s:.1f} s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
