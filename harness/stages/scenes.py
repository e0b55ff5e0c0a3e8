"""The ``scenes`` stage: generate (or import) and validate the scene manifest (spec section 2).

Writes the :class:`~harness.products.scenes.SceneSet` (``scenes.jsonl``, ``invalid.json``,
``stats.json``); invalid scenes are recorded with their reasons, never written as scenes.
"""

from __future__ import annotations

import logging

from harness.products.scenes import INVALID, SceneSet
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, StageCannotRun, Unit, write_objects
from harness.runtime.plan import GENERATOR_VERSION, RunPlan
from harness.scenes.generator import corpus_stats
from harness.scenes.settings import make_scenes
from harness.store.base import ObjectStore

log = logging.getLogger("duplex_mpe")


class ScenesStage(Stage):
    name, version = "scenes", GENERATOR_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: RunPlan) -> list[Unit]:
        return [Unit(self.name, plan.scenes)]

    def compute(self, store: ObjectStore, plan: RunPlan, todo: list[Unit]):
        scenes, invalid = make_scenes(self.cfg.scenes)
        if not scenes:  # nothing to run is not a success: the reasons are kept, the stage is not complete
            write_objects(store, plan.layout, plan.scenes, {INVALID: invalid})
            raise StageCannotRun(f"scenes: no valid scene ({len(invalid)} invalid): every scene was refused; the "
                                 f"reasons, one per scene, are in {plan.layout.file(plan.scenes, INVALID)} "
                                 "(the rules: docs/formats.md)")
        if invalid:
            log.warning("scenes: %d of %d scenes are invalid and will not run (reasons in %s)", len(invalid),
                        len(invalid) + len(scenes), plan.layout.file(plan.scenes, INVALID))
        yield todo[0], Output({"scenes": len(scenes), "invalid": len(invalid)},
                              SceneSet(tuple(scenes), invalid, corpus_stats(scenes)).objects())
