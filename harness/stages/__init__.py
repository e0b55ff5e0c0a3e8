"""The stages of both protocols, one module each. A stage declares what it writes and reads and
computes it; :func:`harness.runtime.driver.drive` does the bookkeeping (inputs complete, done
units skipped, objects then the marker written last). Stages share only products
(:mod:`harness.products`), never each other's modules.

    Duplex-MPE:  scenes -> reference (text) -> synth -> infer (Ray actors) -> vad -> score -> reduce
    Duplex Cue:  cue-corpus -> cue-infer (Ray actors) -> cue-score -> cue-reduce

Execution (Ray, shards, pools) lives in :mod:`harness.runtime`.
"""

from __future__ import annotations

from harness.cue.plan import CuePlan
from harness.runtime.config import RunConfig
from harness.runtime.driver import Stage, drive
from harness.runtime.executor import ray_scope
from harness.runtime.manifest import write_run_manifest
from harness.runtime.plan import RunPlan
from harness.stages.cue_corpus import CueCorpusStage
from harness.stages.cue_infer import CueInferStage
from harness.stages.cue_reduce import CueReduceStage
from harness.stages.cue_score import CueScoreStage
from harness.stages.infer import InferStage
from harness.stages.reduce import ReduceStage
from harness.stages.reference import ReferenceStage
from harness.stages.scenes import ScenesStage
from harness.stages.score import ScoreStage
from harness.stages.synth import SynthStage
from harness.stages.vad import VadStage
from harness.store.base import ObjectStore

PIPELINE: dict[str, type[Stage]] = {s.name: s for s in (ScenesStage, ReferenceStage, SynthStage, InferStage,
                                                        VadStage, ScoreStage, ReduceStage)}
CUE: dict[str, type[Stage]] = {s.name: s for s in (CueCorpusStage, CueInferStage, CueScoreStage, CueReduceStage)}
STAGES, CUE_STAGES = tuple(PIPELINE), tuple(CUE)


def run_stage(name: str, cfg: RunConfig, store: ObjectStore) -> str | dict[str, str]:
    """Run one stage of either protocol for the run ``cfg`` (its complete units are skipped);
    returns its prefix, or ``{model: prefix}`` for a per-model stage."""
    plan = CuePlan.from_config(cfg) if name in CUE else RunPlan.from_config(cfg)
    units = drive({**PIPELINE, **CUE}[name](cfg), store, plan)
    return {u.model: u.prefix for u in units} if units[0].model is not None else units[0].prefix


def run_pipeline(cfg: RunConfig, store: ObjectStore) -> str:
    """Run every Duplex-MPE stage in order (one Ray session for all of them, started when the first
    stage needs it: a complete run starts none); returns the key of the report."""
    write_run_manifest(cfg, store)
    with ray_scope():
        for name in STAGES:
            run_stage(name, cfg, store)
    plan = RunPlan.from_config(cfg)
    return plan.layout.file(plan.reduce, "report.md")


def run_cue(cfg: RunConfig, store: ObjectStore) -> str:
    """Every Duplex Cue stage in order; returns the key of ``cue_report.md``. One Ray session for all
    of them, started only when a stage has work for it (a resumed, complete run does not start it)."""
    write_run_manifest(cfg, store)
    with ray_scope():
        for name in CUE_STAGES:
            run_stage(name, cfg, store)
    plan = CuePlan.from_config(cfg)
    return plan.layout.file(plan.reduce, "cue_report.md")
