"""Duplex Cue scoring on a generated corpus (issue 13): the labeller against the known labels,
and what scoring costs. Prints figures, asserts nothing. Last line: one JSON object.

The espeak-ng generator writes ``--items`` conversations whose right response is known by
construction. The known-outcome baselines (``harness/models/cue_baselines.py``) continue them
through the real runner (:func:`harness.cue.continuation.run_continuations`, in this process;
outputs written as cue-infer writes them):

* ``replay``: A's recorded channel (its labels must equal the reference's, item by item);
* ``yield_now``: silent from the switch point, before the cue: excluded (not active at the onset);
* ``yield_on_cue``: talks on until it hears B's cue, silent 0.3 s later: eligible, all Yielded;
* ``ignore``: talks on with unrelated speech (Continued).

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--seed", type=int, default=20260913)
    ap.add_argument("--labeler", default="rule")
    args = ap.parse_args()

    from harness.audio.io import encode
    from harness.cue.continuation import ContinuationInput, run_continuations
    from harness.cue.corpus import encode_recording, write_items, write_recordings
    from harness.cue.generate import generate_cue_corpus
    from harness.cue.plan import CuePlan
    from harness.models.registry import build_model
    from harness.runtime.config import CueSettings, ModelSettings, RunConfig, ScoreSettings
    from harness.runtime.shard import ShardAttempt
    from harness.stages import run_stage
    from harness.store.base import get_json, put_json
    from harness.store.settings import StoreSettings, open_store

    t = time.perf_counter()
    corpus = generate_cue_corpus(args.items, args.seed)
    gen_s = time.perf_counter() - t
    tmp = tempfile.mkdtemp(prefix="cue-bench-")
    names = ("replay", "yield_now", "yield_on_cue", "ignore")
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

    for model in names:
        m = build_model(model)
        m.load("cpu")
        results = run_continuations(m, [ContinuationInput(it, corpus.audio[it.recording_id],
                                                           cfg.conversation_seed(it.item_id)) for it in corpus.items],
                                    sr, lead_s=cfg.cue.switch_lead_s, context_s=cfg.cue.context_s,
                                    window_s=cfg.cue.window_s, rows=len(corpus.items))
        prefix = plan.infer[model]
        put_json(store, lay.file(prefix, "plan.json"), {"s0": [it.item_id for it in corpus.items]})
        att = ShardAttempt(store, lay, lay.shard(prefix, "s0"))
        for r in results:
            att.put(r.item_id, "flac", encode(r.output, sr))
            att.put(r.item_id, "json", json.dumps(r.record(sr)).encode())
        att.commit({"shard": "s0", "model": model, "ok": len(results), "error": 0, "conversations": {
            r.item_id: {"status": r.status, "reason": r.reason, "objects": att.objects[r.item_id]} for r in results}})

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
        print(f"{m:12s}: eligible {e['funnel']['eligible']}/{e['funnel']['items']} "
              f"(excluded {', '.join(f'{k} {v}' for k, v in e['funnel']['excluded'].items() if v) or 'none'}); "
              f"model {d['counts']}; same label as the reference on {same}")
        out[m] = {"eligible": e["funnel"]["eligible"], "counts": d["counts"], "same_as_reference": same}
    calls = sum(get_json(store, lay.marker(plan.score[m]))["asr_calls"] for m in names)
    out["asr_calls"] = calls
    print(f"cue-score {score_s:.1f} s wall, {score_cpu:.1f} s CPU, {calls} ASR calls; cue-reduce {reduce_s:.1f} s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
