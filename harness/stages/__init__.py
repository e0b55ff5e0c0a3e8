"""The stages of both protocols, one module each. A stage declares what it writes and reads and
computes it; :func:`harness.runtime.driver.drive` does the bookkeeping (inputs complete, done
units skipped, objects then the marker written last). Stages share only products
(:mod:`harness.products`), never each other's modules.

    Duplex-MPE:  scenes -> reference (text) -> synth -> infer (Ray actors) -> vad -> score -> reduce
    Duplex Cue:  cue-corpus -> cue-infer (Ray actors) -> cue-score -> cue-reduce

Execution (Ray, shards, pools) lives in :mod:`harness.runtime`.
"""

from __future__ import annotations

import importlib

from harness.runtime.config import RunConfig
from harness.runtime.driver import Stage, drive
from harness.runtime.executor import ray_scope
from harness.runtime.manifest import write_run_manifest
from harness.runtime.plan import RunPlan
from harness.store.base import ObjectStore

# Each stage's module and class, imported when the stage runs: a process that runs one stage (a job
# of one stage, a Ray actor of one stage's pool) does not import the others' stacks (TTS, Silero,
# the report's figures). The names are the classes' own ``name`` (tests/unit/test_stages.py).
PIPELINE = {"scenes": "scenes:ScenesStage", "reference": "reference:ReferenceStage", "synth": "synth:SynthStage",
            "infer": "infer:InferStage", "vad": "vad:VadStage", "score": "score:ScoreStage",
            "reduce": "reduce:ReduceStage"}
CUE = {"cue-corpus": "cue_corpus:CueCorpusStage", "cue-infer": "cue_infer:CueInferStage",
       "cue-score": "cue_score:CueScoreStage", "cue-reduce": "cue_reduce:CueReduceStage"}
STAGES, CUE_STAGES = tuple(PIPELINE), tuple(CUE)


def stage_class(name: str) -> type[Stage]:
    """The :class:`~harness.runtime.driver.Stage` class of stage ``name`` (of :data:`STAGES` or
    :data:`CUE_STAGES`), its module imported on first use. Raises KeyError for another name."""
    module, cls = {**PIPELINE, **CUE}[name].split(":")
    return getattr(importlib.import_module(f"harness.stages.{module}"), cls)


def run_stage(name: str, cfg: RunConfig, store: ObjectStore) -> str | dict[str, str]:
    """Run one stage of either protocol for the run ``cfg`` (its complete units are skipped);
    returns its prefix, or ``{model: prefix}`` for a per-model stage."""
    if name in CUE:
        from harness.cue.plan import CuePlan  # here: it imports the cue corpus' audio stack

        plan = CuePlan.from_config(cfg)
    else:
        plan = RunPlan.from_config(cfg)
    units = drive(stage_class(name)(cfg), store, plan)
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
    from harness.cue.plan import CuePlan  # here: it imports the cue corpus' audio stack

    write_run_manifest(cfg, store)
    with ray_scope():
        for name in CUE_STAGES:
            run_stage(name, cfg, store)
    plan = CuePlan.from_config(cfg)
    return plan.layout.file(plan.reduce, "cue_report.md")
