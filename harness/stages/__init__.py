"""The pipeline's stages, one module each. Each reads its inputs by key, writes under its own
prefix, and writes its completion marker last; a stage whose marker exists is skipped.

    scenes -> reference (text) -> synth -> infer (Ray actors) -> vad -> score (ASR + judge) -> reduce

Execution (Ray, shards, the ledger) lives in :mod:`harness.runtime`.
"""

from __future__ import annotations

from typing import Any

from harness.runtime.config import RunConfig
from harness.runtime.executor import ray_session
from harness.runtime.manifest import write_run_manifest
from harness.runtime.plan import RunPlan
from harness.stages.infer import infer_stage
from harness.stages.reduce import reduce_stage
from harness.stages.reference import reference_stage
from harness.stages.scenes import scenes_stage
from harness.stages.score import score_stage
from harness.stages.synth import synth_stage
from harness.stages.vad import vad_stage
from harness.store.base import ObjectStore

STAGES = ("scenes", "reference", "synth", "infer", "vad", "score", "reduce")


def run_stage(name: str, cfg: RunConfig, store: ObjectStore) -> Any:
    fn = {"scenes": scenes_stage, "reference": reference_stage, "synth": synth_stage, "infer": infer_stage,
          "vad": vad_stage, "score": score_stage, "reduce": reduce_stage}[name]
    return fn(cfg, store)


def run_pipeline(cfg: RunConfig, store: ObjectStore) -> str:
    """Run every stage in order (one Ray session for all of them); returns the key of the report."""
    write_run_manifest(cfg, store)
    with ray_session(cfg):
        for name in STAGES:
            run_stage(name, cfg, store)
    plan = RunPlan.from_config(cfg)
    return plan.layout.file(plan.reduce, "report.md")
