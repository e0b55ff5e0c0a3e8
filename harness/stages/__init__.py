"""The pipeline's stages, one module each. A stage declares what it writes and reads and computes
it; :func:`harness.runtime.driver.drive` does the bookkeeping (inputs complete, done units
skipped, objects then the marker written last). Stages share only products
(:mod:`harness.products`), never each other's modules.

    scenes -> reference (text) -> synth -> infer (Ray actors) -> vad -> score (ASR + judge) -> reduce

Execution (Ray, shards, pools) lives in :mod:`harness.runtime`.
"""

from __future__ import annotations

from harness.runtime.config import RunConfig
from harness.runtime.driver import drive
from harness.runtime.executor import ray_session
from harness.runtime.manifest import write_run_manifest
from harness.runtime.plan import RunPlan
from harness.stages.infer import InferStage
from harness.stages.reduce import reduce_stage
from harness.stages.reference import ReferenceStage
from harness.stages.scenes import ScenesStage
from harness.stages.score import score_stage
from harness.stages.synth import synth_stage
from harness.stages.vad import vad_stage
from harness.store.base import ObjectStore

STAGES = ("scenes", "reference", "synth", "infer", "vad", "score", "reduce")
_DRIVEN = {"scenes": ScenesStage, "reference": ReferenceStage, "infer": InferStage}


def run_stage(name: str, cfg: RunConfig, store: ObjectStore) -> str | dict[str, str]:
    """Run one stage of the run ``cfg`` (its complete units are skipped); returns its prefix, or
    ``{model: prefix}`` for a per-model stage."""
    if name in _DRIVEN:
        units = drive(_DRIVEN[name](cfg), store, RunPlan.from_config(cfg))
        return {u.model: u.prefix for u in units} if units[0].model is not None else units[0].prefix
    fn = {"synth": synth_stage, "vad": vad_stage, "score": score_stage,
          "reduce": reduce_stage}[name]
    return fn(cfg, store)


def run_pipeline(cfg: RunConfig, store: ObjectStore) -> str:
    """Run every stage in order (one Ray session for all of them); returns the key of the report."""
    write_run_manifest(cfg, store)
    with ray_session(cfg):
        for name in STAGES:
            run_stage(name, cfg, store)
    plan = RunPlan.from_config(cfg)
    return plan.layout.file(plan.reduce, "report.md")
