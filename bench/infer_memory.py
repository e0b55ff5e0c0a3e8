"""Resident memory of an infer worker over its shards (issue 24, item 7).

Runs :class:`~harness.runtime.infer_worker.InferWorker` (the object a Ray infer actor holds) in this
process over ``--shards`` consecutive shards of ``--shard-size`` conversations of an existing run
whose ``synth`` stage has completed (``jobs.scenes`` and ``jobs.synth`` with the run's settings),
and samples the process's resident set size (``VmRSS``) every ``--every-s`` seconds. Each shard gets
a fresh id (``bench-mem-<pid>-<k>``) under the model's ``infer`` prefix and is deleted afterwards
(a local store only), so the run's own shards are untouched.

Prints, per shard, its wall time and the RSS at its start, its end and its peak, then the trend
(RSS against conversations done, when the worker reports progress) and the process's peak RSS
(``ru_maxrss``). The last line is one JSON object: ``peak_rss_gib``, ``shard_size``, ``shards``,
``model`` and the samples.

    .venv/bin/python bench/infer_memory.py --run i24mem --model silent --shard-size 512
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.products.timeline import Timeline
from harness.runtime.config import RunConfig
from harness.runtime.infer_worker import InferWorker
from harness.runtime.plan import RunPlan
from harness.store.settings import open_store

GIB = 2**30


def rss_bytes() -> int:
    """This process's resident set size now (``/proc/self/status`` VmRSS), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="run id whose synth stage is complete (runs/<run>/run.json)")
    ap.add_argument("--store-root", default="runs", help="the local store's root")
    ap.add_argument("--model", default="silent", help="a model of the run's config")
    ap.add_argument("--shard-size", type=int, default=512)
    ap.add_argument("--shards", type=int, default=1, help="consecutive shards on the same worker")
    ap.add_argument("--batch-size", type=int, default=None, help="rows (default: the model's batch_size)")
    ap.add_argument("--every-s", type=float, default=0.5, help="RSS sampling period")
    args = ap.parse_args(argv)

    manifest = json.loads((Path(args.store_root) / args.run / "run.json").read_text())
    d = manifest["config"]
    d["store"] = {**d["store"], "root": args.store_root}
    if args.batch_size:
        d["model"][args.model]["batch_size"] = args.batch_size
    cfg = RunConfig.from_dict(d)
    model = next(m for m in cfg.models if m.name == args.model)
    store = open_store(cfg.store)
    plan = RunPlan.from_config(cfg)
    ids = sorted(Timeline.read(store, plan.layout, plan.synth).conversations)
    need = args.shard_size * args.shards
    if len(ids) < need:
        raise SystemExit(f"run {args.run} has {len(ids)} conversations; {need} needed")

    samples: list[tuple[float, int, int]] = []  # (seconds since start, RSS bytes, conversations done)
    done = threading.Event()
    t0 = time.perf_counter()
    worker: InferWorker | None = None

    def sample() -> None:
        while not done.is_set():
            n = worker.progress if worker is not None and hasattr(worker, "progress") else -1
            samples.append((time.perf_counter() - t0, rss_bytes(), n))
            done.wait(args.every_s)

    threading.Thread(target=sample, daemon=True).start()
    worker = InferWorker(cfg, model, store)
    print(f"worker loaded ({model.name}, {model.batch_size} rows): RSS {rss_bytes() / GIB:.2f} GiB", flush=True)
    shards = []
    root = Path(args.store_root)
    try:
        for k in range(args.shards):
            sid = f"bench-mem-{os.getpid()}-{k}"
            start, ts = rss_bytes(), time.perf_counter() - t0
            s = worker.run(sid, ids[k * args.shard_size:(k + 1) * args.shard_size])
            te = time.perf_counter() - t0
            peak = max(r for t, r, _ in samples if ts <= t <= te)
            shards.append({"shard": k, "wall_s": round(s.wall_s, 1), "ok": s.ok, "error": s.error,
                           "rss_start_gib": round(start / GIB, 3), "rss_end_gib": round(rss_bytes() / GIB, 3),
                           "rss_peak_gib": round(peak / GIB, 3)})
            print(f"shard {k}: {s.ok} ok, {s.error} error in {s.wall_s:.1f} s; RSS {start / GIB:.2f} GiB at its "
                  f"start, peak {peak / GIB:.2f}, {rss_bytes() / GIB:.2f} at its end", flush=True)
            if cfg.store.kind == "local":
                shutil.rmtree(root / plan.layout.shard(worker.shard_root(), sid), ignore_errors=True)
    finally:
        done.set()
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    trend = [(round(t, 1), round(r / GIB, 3), n) for t, r, n in samples[:: max(1, len(samples) // 20)]]
    print("trend (s, RSS GiB, conversations done; -1: not reported):", trend)
    print(f"peak RSS (ru_maxrss) {peak_gib:.2f} GiB")
    print(json.dumps({"model": model.name, "rows": model.batch_size, "shard_size": args.shard_size,
                      "shards": shards, "peak_rss_gib": round(peak_gib, 3), "trend": trend}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
