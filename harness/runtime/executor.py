"""Ray execution of the ``infer`` stage: one :class:`ShardRunner` actor per GPU (or CPU slot).

The driver writes the shard plan once, then keeps every actor busy with one shard at a time
until none remain. Each actor loads its model once. Ray-level failures (a dead actor) are
retried by Ray (``max_restarts``/``max_task_retries``); a shard that still fails is reported
with its reason and left without a marker, so a rerun picks it up. Ray is imported only here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tqdm import tqdm

from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.shard import ShardSummary, ShardWorker
from harness.store.base import ObjectStore, get_json, open_store, put_json


@contextmanager
def ray_session(cfg: RunConfig) -> Iterator[None]:
    """Start (or join, with ``cluster.address``) Ray for the duration of a stage."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        yield
        return
    c = cfg.cluster
    if c.address:
        ray.init(address=c.address, logging_level="WARNING")
    else:
        os.makedirs(c.ray_tmp, exist_ok=True)
        ray.init(num_cpus=c.num_cpus or os.cpu_count(), num_gpus=c.num_gpus, include_dashboard=False,
                 _temp_dir=c.ray_tmp, logging_level="WARNING", log_to_driver=True)
    try:
        yield
    finally:
        ray.shutdown()


def _actor_class():
    import ray

    @ray.remote
    class ShardRunner:
        """Ray actor holding one loaded model; ``run`` processes one shard."""

        def __init__(self, cfg: RunConfig, model: ModelSettings):
            import torch

            torch.set_num_threads(cfg.infer.torch_threads)
            device = "cuda" if model.num_gpus and torch.cuda.is_available() else "cpu"
            self.worker = ShardWorker(cfg, model, open_store(cfg.store.kind, cfg.store.root), device)

        def run(self, shard_id: str, scene_ids: list[str]) -> ShardSummary:
            return self.worker.run(shard_id, scene_ids)

    return ShardRunner


def shard_plan(store: ObjectStore, key: str, scene_ids: list[str], shard_size: int) -> dict[str, list[str]]:
    """The shard plan at ``key``; written once (conditional put), then read as frozen."""
    plan = {f"shard-{i // shard_size:05d}": scene_ids[i:i + shard_size] for i in range(0, len(scene_ids), shard_size)}
    put_json(store, key, plan, if_absent=True)
    return get_json(store, key)


@dataclass
class InferReport:
    done: list[ShardSummary]
    failed: dict[tuple[str, str], str]  # (model, shard) -> reason


def run_shards(cfg: RunConfig, work: dict[str, dict[str, list[str]]]) -> InferReport:
    """Run ``{model: {shard_id: scene_ids}}`` on Ray actors; return summaries and failures."""
    import ray

    runner = _actor_class()
    models = {m.name: m for m in cfg.models}
    queue = [(m, s, ids) for m, shards in work.items() for s, ids in shards.items()]
    report = InferReport([], {})
    if not queue:
        return report
    idle: list[tuple[str, object]] = []
    for name in work:
        m = models[name]
        n = min(cfg.infer.actors_per_model, len(work[name]))
        for _ in range(n):
            actor = runner.options(num_gpus=m.num_gpus, num_cpus=m.num_cpus, max_restarts=2,
                                   max_task_retries=2).remote(cfg, m)
            idle.append((name, actor))
    inflight: dict[object, tuple[str, str, object]] = {}
    bar = tqdm(total=len(queue), desc="infer shards", unit="shard")
    while queue or inflight:
        for name, actor in list(idle):
            job = next((q for q in queue if q[0] == name), None)
            if job is None:
                continue
            queue.remove(job)
            idle.remove((name, actor))
            inflight[actor.run.remote(job[1], job[2])] = (name, job[1], actor)
        if not inflight:
            break
        [ref], _ = ray.wait(list(inflight), num_returns=1)
        name, shard, actor = inflight.pop(ref)
        try:
            s = ray.get(ref)
            report.done.append(s)
            bar.set_postfix_str(f"{name} {shard}: {s.ok} ok, {s.error} error")
        except Exception as e:
            report.failed[(name, shard)] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        if any(q[0] == name for q in queue):
            idle.append((name, actor))
        else:  # nothing left for this model: free its CPU/GPU for the actors still waiting
            ray.kill(actor)
        bar.update(1)
    bar.close()
    return report
