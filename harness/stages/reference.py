"""The ``reference`` stage: the text-conditioned reference (spec section 7)."""

from __future__ import annotations

import logging

from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.stages.common import load_scenes, require_stage, stage_done
from harness.store.base import ObjectStore, put_json
from harness.store.layout import cache_prefix

log = logging.getLogger("duplex_mpe")


def reference_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """The text-conditioned reference (spec section 7): ``reference.runs`` passes over every turn
    of every scene, its scores and the agreement between passes, in ``reference.json``."""
    from harness.reference import build_reference
    from harness.reference.evaluate import run_reference
    from harness.scoring.cache import CachedJudge
    from harness.scoring.judge import build_judge

    plan = RunPlan.from_config(cfg)
    require_stage(store, plan, plan.scenes, "scenes")
    if stage_done(store, plan, plan.reference, "reference"):
        return plan.reference
    rc = cfg.reference
    reference = build_reference(rc.kind, store=store, cache_prefix=cache_prefix("reference"), **rc.params)
    judge = CachedJudge(build_judge(cfg.judge.kind, **cfg.judge.params), store, cache_prefix("judge"))
    out = run_reference(load_scenes(store, plan), reference, judge, cfg.tts.preamble_text, rc.runs,
                        cfg.metrics.min_n, rc.workers)
    lay = plan.layout
    put_json(store, lay.file(plan.reference, "reference.json"), out)
    put_json(store, lay.marker(plan.reference), {"kind": rc.kind, "turns": len(out["turns"]),
                                                 "errors": len(out["errors"]), "cost": out["cost"]})
    ref_cost = out["cost"]["reference"]
    log.info("reference %s: %d decisions, %d errors, %d calls / %d cache hits, $%.4f", rc.kind, len(out["turns"]),
             len(out["errors"]), ref_cost["misses"], ref_cost["hits"], ref_cost["cost"]["usd"])
    return plan.reference
