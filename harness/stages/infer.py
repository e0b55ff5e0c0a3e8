"""The ``infer`` stage: every model over every conversation on Ray actors, shard by shard
(:mod:`harness.runtime.executor`, :mod:`harness.runtime.shard`; spec section 4).

Writes, per model, the infer product (:mod:`harness.products.infer`): the frozen shard plan, the
shards' outputs and markers (committed by their attempts), and :class:`ModelFacts`
(``model.json``). A model is complete when every shard of its plan has a marker and its facts are
written; completed shards are skipped and cost nothing.
"""

from __future__ import annotations

from harness.products.infer import MODEL_FACTS
from harness.products.timeline import Timeline
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit, unit_done
from harness.runtime.plan import INFER_VERSION, RunPlan
from harness.runtime.shard import model_facts
from harness.runtime.sharded import run_sharded
from harness.store.base import ObjectStore


class InferStage(Stage):
    """Stream every conversation through every selected model on Ray actors.

    Raises :class:`~harness.runtime.executor.BudgetExceeded` when the budget stopped the stage
    and :class:`~harness.products.infer.InferIncomplete` when shards failed, so that no later
    stage ever reads a partial set of outputs as complete; completed shards stay and
    ``make rerun-failed`` runs the rest.
    """

    name, version = "infer", INFER_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: RunPlan) -> list[Unit]:
        return [Unit(self.name, plan.infer[m.name], m.name, sharded=True) for m in self.cfg.models]

    def inputs(self, plan: RunPlan) -> list[Unit]:
        return [Unit("synth", plan.synth)]

    def done(self, store: ObjectStore, plan: RunPlan, unit: Unit) -> bool:
        return unit_done(store, plan.layout, unit) and store.exists(plan.layout.file(unit.prefix, MODEL_FACTS))

    def compute(self, store: ObjectStore, plan: RunPlan, todo: list[Unit]):
        cfg = self.cfg
        models = {m.name: m for m in cfg.models}
        ids = sorted(Timeline.read(store, plan.layout, plan.synth).conversations)
        run_sharded(cfg, store, plan, ids, {u.model: u.prefix for u in todo},
                    {u.model: cfg.infer.shard_size_for(models[u.model].batch_size) for u in todo}, "infer")
        for u in todo:  # the workers write the facts of what they loaded; a run whose shards were all done does here
            facts = {} if store.exists(plan.layout.file(u.prefix, MODEL_FACTS)) else \
                {MODEL_FACTS: model_facts(models[u.model]).to_dict()}
            yield u, Output({}, facts)
