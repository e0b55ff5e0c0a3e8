"""A simulated full run on logical GPUs: scheduling overhead, GPU utilisation, rerun cost.

4,000 conversations in shards of 32 go through the real executor (Ray actors, one per
logical GPU, ``ray.init(num_gpus=8)``), the real attempt/marker protocol and a real local
store; the model is :class:`~harness.runtime.simulate.NullWorker`, which sleeps a fixed
time per conversation. A fraction of shards (10 %) fails every attempt in the first run;
the rerun then goes through the same path as ``make rerun-failed`` (the ledger's missing
shards only).

Figures:

* ``gpu_utilisation``: busy shard time / (GPUs x time from the first shard start to the
  last shard end) in the first run (actor start-up, which is model loading on a real
  cluster, is excluded: it is paid once per actor, not per shard);
* ``overhead_ms_per_shard``: mean gap on an actor between one shard's end and its next
  shard's start (dispatch, store reads, result handling);
* ``rerun_shards`` / ``rerun_extra_shards``: shards the rerun ran, and how many of them had
  already completed (target 0).

Prints a line per phase and one JSON object on the last line. Asserts nothing.

    .venv/bin/python bench/cluster_sim.py [--conversations 4000] [--gpus 8] [--shard-size 32]
        [--seconds 0.05] [--fail-share 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from functools import partial
from itertools import pairwise

import ray

from harness.products.infer import read_ledger
from harness.runtime.config import RunConfig
from harness.runtime.executor import run_shards, shard_plan
from harness.runtime.plan import RunPlan
from harness.runtime.simulate import NullWorker
from harness.store.base import LocalStore


class FlakyNullWorker(NullWorker):
    """Fails every attempt of the shards in ``fail`` (defined here, so Ray pickles it by value)."""

    def __init__(self, cfg, model, store, fail: frozenset[str]):
        super().__init__(cfg, model, store)
        self.fail = fail

    def process(self, scene_ids, attempt):
        if attempt.shard_prefix.rsplit("/", 1)[-1] in self.fail:
            raise RuntimeError("simulated preemption")
        return super().process(scene_ids, attempt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=4000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--shard-size", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=0.05, help="null model's seconds per conversation")
    ap.add_argument("--fail-share", type=float, default=0.1, help="share of shards failing in the first run")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="cluster-sim-")
    ids = [f"sim-{i:05d}" for i in range(args.conversations)]
    n_shards = -(-len(ids) // args.shard_size)
    step = max(1, round(1 / args.fail_share)) if args.fail_share else n_shards + 1
    fail = {f"shard-{i:05d}" for i in range(0, n_shards, step)}

    cfg = RunConfig.from_dict({
        "run_id": "sim", "store": {"root": f"{tmp}/store"},
        "model": {"null": {"target": "null", "num_gpus": 1, "num_cpus": 0.01,
                           "params": {"seconds_per_conversation": args.seconds}}},
        "infer": {"shard_size": args.shard_size, "actors_per_model": None},
        "cluster": {"num_gpus": args.gpus, "shard_attempts": 1, "max_task_retries": 0}})

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=os.cpu_count(), num_gpus=args.gpus, include_dashboard=False, _temp_dir=f"{tmp}/ray",
             logging_level="ERROR")
    store = LocalStore(f"{tmp}/store")
    plan = RunPlan.from_config(cfg)
    shards = shard_plan(store, plan.layout.file(plan.infer["null"], "plan.json"), ids, args.shard_size)

    t0 = time.perf_counter()
    first = run_shards(cfg, store, {"null": shards}, factory=partial(FlakyNullWorker, fail=frozenset(fail)))
    first_wall = time.perf_counter() - t0
    runs = [s for s in first.done if not s.skipped]
    span = max(s.started + s.wall_s for s in runs) - min(s.started for s in runs)
    busy = sum(s.wall_s for s in runs)
    gaps = []
    for spans in _by_actor(runs).values():
        spans.sort()
        gaps += [b[0] - (a[0] + a[1]) for a, b in pairwise(spans)]
    print(f"first run: {len(runs)} shards done, {len(first.failed)} failed, {first_wall:.1f} s wall, "
          f"busy {busy:.1f} GPU-s over {span:.1f} s x {args.gpus} GPUs")

    led = read_ledger(store, plan.layout, plan.infer["null"], "null")
    completed_before = set(led.markers)
    t1 = time.perf_counter()
    rerun = run_shards(cfg, store, {"null": {s: shards[s] for s in led.missing}}, led.spent_hours,
                       factory=NullWorker)
    rerun_wall = time.perf_counter() - t1
    ran = [s.shard_id for s in rerun.done if not s.skipped]
    print(f"rerun: {len(ran)} shards run ({len(led.missing)} were missing), {rerun_wall:.1f} s wall")
    ray.shutdown()
    final = read_ledger(store, plan.layout, plan.infer["null"], "null")
    print(json.dumps({
        "conversations": args.conversations, "shards": n_shards, "gpus": args.gpus,
        "seconds_per_conversation": args.seconds,
        "gpu_utilisation": round(busy / (args.gpus * span), 4),
        "overhead_ms_per_shard": round(1000 * sum(gaps) / len(gaps), 2) if gaps else None,
        "first_run_wall_s": round(first_wall, 2), "failed_shards": len(first.failed),
        "rerun_shards": len(ran), "rerun_extra_shards": len(set(ran) & completed_before),
        "rerun_wall_s": round(rerun_wall, 2), "complete_after_rerun": not final.missing,
        "device_hours_spent": round(final.spent_hours, 4),
    }))


def _by_actor(summaries) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in summaries:
        out[s.actor].append((s.started, s.wall_s))
    return out


if __name__ == "__main__":
    main()
