"""A sharded stage's run (``infer``, Duplex Cue's ``cue-infer``): frozen shard plans, the ledger
of what is complete, and the shards still missing on Ray actors (:func:`~harness.runtime.executor.run_shards`)."""

from __future__ import annotations

import logging
from typing import Any

from harness.products.infer import SHARD_PLAN, InferIncomplete, read_ledger
from harness.runtime.config import RunConfig
from harness.runtime.executor import BudgetExceeded, WorkerFactory, ray_session, run_shards, shard_plan
from harness.runtime.shard import infer_worker
from harness.store.base import ObjectStore

log = logging.getLogger("duplex_mpe")


def run_sharded(cfg: RunConfig, store: ObjectStore, plan: Any, ids: list[str], roots: dict[str, str],
                shard_size: int | dict[str, int], stage: str, factory: WorkerFactory = infer_worker) -> None:
    """Run ``ids`` through every model of ``roots`` (``{model: prefix}``) shard by shard on Ray
    actors: each prefix's frozen shard plan (``plan.json``, written once with ``shard_size``: one
    size, or one per model), its ledger (completed shards skipped, spend counted against the
    budget), ``factory``'s workers (their ``shard_root`` is the model's prefix). ``plan``: the
    run's plan (its ``layout``); ``stage`` names the stage in logs.

    Raises:
        BudgetExceeded: the budget stopped the stage.
        InferIncomplete: shards failed every attempt (completed shards are kept).
    """
    work: dict[str, dict[str, list[str]]] = {}
    spent, estimates = 0.0, {}
    for name, prefix in roots.items():
        size = shard_size if isinstance(shard_size, int) else shard_size[name]
        shards = shard_plan(store, plan.layout.file(prefix, SHARD_PLAN), ids, size)
        led = read_ledger(store, plan.layout, prefix, name)
        spent += led.spent_hours
        if led.mean_shard_hours is not None:
            estimates[name] = led.mean_shard_hours
        log.info("%s %s: %d shards, %d complete, %d to run", stage, name, len(shards), len(led.markers),
                 len(led.missing))
        if led.missing:
            work[name] = {s: shards[s] for s in led.missing}
    if not work:
        return
    with ray_session(cfg):
        report = run_shards(cfg, store, work, spent, estimates, factory=factory, roots=roots, stage=stage)
    for (model, shard), reason in sorted(report.failed.items()):
        log.error("%s %s %s failed: %s", stage, model, shard, reason)
    if report.budget_stop:
        raise BudgetExceeded(f"the budget leaves {len(report.not_started)} shard(s) not started: "
                             f"{report.budget_stop}. Completed shards are kept.")
    if report.failed:
        raise InferIncomplete(f"{len(report.failed)} shard(s) failed after {cfg.cluster.shard_attempts} attempts "
                              "(reasons below); completed shards are kept.")
