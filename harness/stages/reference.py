"""The ``reference`` stage: the text-conditioned reference (spec section 7; docs/reference.md)."""

from __future__ import annotations

from harness.products.reference import REFERENCE
from harness.products.scenes import SceneSet
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.runtime.plan import REFERENCE_VERSION, RunPlan
from harness.store.base import ObjectStore
from harness.store.layout import cache_prefix


class ReferenceStage(Stage):
    """``reference.runs`` passes over every turn of every scene, its scores and the agreement
    between passes, in ``reference.json``."""

    name, version = "reference", REFERENCE_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: RunPlan) -> list[Unit]:
        return [Unit(self.name, plan.reference)]

    def inputs(self, plan: RunPlan) -> list[Unit]:
        return [Unit("scenes", plan.scenes)]

    def compute(self, store: ObjectStore, plan: RunPlan, todo: list[Unit]):
        from harness.reference import build_reference
        from harness.reference.evaluate import run_reference
        from harness.scoring.cache import CachedJudge
        from harness.scoring.judge import build_judge

        cfg, rc = self.cfg, self.cfg.reference
        reference = build_reference(rc.kind, store=store, cache_prefix=cache_prefix("reference"), **rc.params)
        judge = CachedJudge(build_judge(cfg.judge.kind, **cfg.judge.params), store, cache_prefix("judge"))
        scenes = SceneSet.read(store, plan.layout, plan.scenes).scenes
        out = run_reference(list(scenes), reference, judge, cfg.tts.preamble_text, rc.runs, cfg.metrics.min_n,
                            rc.workers)
        ref_cost = out["cost"]["reference"]
        yield todo[0], Output({"kind": rc.kind, "turns": len(out["turns"]), "errors": len(out["errors"]),
                               "calls": ref_cost["misses"], "cache_hits": ref_cost["hits"], "cost": out["cost"]},
                              {REFERENCE: out})
