"""Shared by the stages: completion markers, the inputs a stage requires, the scene manifest."""

from __future__ import annotations

import logging

from harness.runtime.plan import RunPlan
from harness.scenes.schema import Scene
from harness.store.base import ObjectStore

log = logging.getLogger("duplex_mpe")


class StageInputMissing(RuntimeError):
    """An upstream stage has not completed (its marker is missing)."""


def require_stage(store: ObjectStore, plan: RunPlan, prefix: str, stage: str) -> None:
    if not store.exists(plan.layout.marker(prefix)):
        raise StageInputMissing(f"stage {stage!r} has not completed at {prefix}: run it first (or run the pipeline)")


def require_infer(store: ObjectStore, plan: RunPlan, model: str) -> None:
    if not store.exists(plan.layout.file(plan.infer[model], "plan.json")):
        raise StageInputMissing(f"stage 'infer' has not run for model {model!r}: run it first (or run the pipeline)")


def stage_done(store: ObjectStore, plan: RunPlan, prefix: str, stage: str) -> bool:
    if store.exists(plan.layout.marker(prefix)):
        log.info("%s: complete at %s, skipped", stage, prefix)
        return True
    return False


def load_scenes(store: ObjectStore, plan: RunPlan) -> list[Scene]:
    from harness.scenes.schema import read_manifest

    return read_manifest(store.get(plan.layout.file(plan.scenes, "scenes.jsonl")).decode().splitlines())
