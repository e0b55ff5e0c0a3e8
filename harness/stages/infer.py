"""The ``infer`` stage: every model over every conversation on Ray actors, shard by shard
(:mod:`harness.runtime.executor`, :mod:`harness.runtime.shard`)."""

from __future__ import annotations

import logging
from typing import Any

from harness.runtime.config import RunConfig
from harness.runtime.executor import BudgetExceeded, WorkerFactory, ray_session, run_shards, shard_plan
from harness.runtime.ledger import ModelLedger, read_ledger
from harness.runtime.plan import RunPlan
from harness.runtime.shard import InferWorker
from harness.stages.common import require_stage
from harness.store.base import ObjectStore, get_json

log = logging.getLogger("duplex_mpe")


class InferIncomplete(RuntimeError):
    """Some infer shards have no marker after the stage ran (failed, or left by the budget)."""


def infer_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Stream every conversation through every selected model on Ray actors.

    Completed shards (marker present) are skipped and cost nothing. Raises
    :class:`~harness.runtime.executor.BudgetExceeded` when the budget stopped the stage and
    :class:`InferIncomplete` when shards failed, so that no later stage ever reads a partial
    set of outputs as complete; completed shards stay and ``make rerun-failed`` runs the rest.
    """
    plan = RunPlan.from_config(cfg)
    require_stage(store, plan, plan.synth, "synth")
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    run_sharded(cfg, store, plan, sorted(index["conversations"]), dict(plan.infer),
                {m.name: cfg.infer.shard_size_for(m.batch_size) for m in cfg.models}, "infer")
    return dict(plan.infer)


def run_sharded(cfg: RunConfig, store: ObjectStore, plan: Any, ids: list[str], roots: dict[str, str],
                shard_size: int | dict[str, int], stage: str, factory: WorkerFactory = InferWorker) -> None:
    """Run ``ids`` through every model of ``roots`` (``{model: prefix}``) shard by shard on Ray
    actors (:func:`~harness.runtime.executor.run_shards`): each prefix's frozen shard plan
    (``plan.json``, written once with ``shard_size``: one size, or one per model), its ledger (completed shards skipped,
    spend counted against the budget), ``factory``'s workers (their ``shard_root`` is the
    model's prefix). ``plan``: the run's plan (its ``layout``); ``stage`` names the stage in
    logs. Shared by ``infer`` and Duplex Cue's ``cue-infer``.

    Raises:
        BudgetExceeded: the budget stopped the stage.
        InferIncomplete: shards failed every attempt (completed shards are kept).
    """
    work: dict[str, dict[str, list[str]]] = {}
    spent, estimates = 0.0, {}
    for name, prefix in roots.items():
        size = shard_size if isinstance(shard_size, int) else shard_size[name]
        shards = shard_plan(store, plan.layout.file(prefix, "plan.json"), ids, size)
        led = read_ledger(store, plan, name, prefix=prefix)
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


def infer_records(store: ObjectStore, plan: RunPlan, model: str,
                  led: ModelLedger | None = None) -> dict[str, dict[str, Any]]:
    """``{scene_id: marker entry + shard}`` for every conversation of the model's shard plan.

    An entry has ``status``, ``reason`` and ``objects`` (``kind -> {key, sha256}``, read with
    :func:`~harness.runtime.shard.read_output`). Raises :class:`InferIncomplete` when a shard
    has no marker: a partial ``infer`` is never read as complete. ``led``: the model's ledger
    when the caller has read it already (read here, without failure listings, otherwise).
    """
    led = led or read_ledger(store, plan, model, failures=False)
    if led.missing:
        raise InferIncomplete(f"infer {model}: {len(led.missing)} of {len(led.shards)} shards incomplete "
                              f"({', '.join(led.missing[:5])}{'...' if len(led.missing) > 5 else ''}): "
                              "run `make rerun-failed` first")
    return {sid: {**entry, "shard": shard} for shard, mk in led.markers.items()
            for sid, entry in mk["conversations"].items()}
