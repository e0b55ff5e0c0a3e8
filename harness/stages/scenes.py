"""The ``scenes`` stage: generate (templates or, ``scenes.source=llm``, a language model's scripts)
or import, and validate the scene manifest (spec section 2; :mod:`harness.scenes.settings`).

Writes the :class:`~harness.products.scenes.SceneSet` (``scenes.jsonl``, ``invalid.json``,
``stats.json``); invalid scenes are recorded with their reasons, never written as scenes: with
``source=llm`` also both versions of a pair whose script failed validation on every attempt, or
that the script budget left unwritten. Its marker then carries ``llm`` (calls, US dollars spent
and saved by the cache, the usage ledger's raw usage).
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
        made = make_scenes(self.cfg.scenes, store)  # source=llm: its replies cached in the store's _cache/scripts
        scenes, invalid = made.scenes, made.refused
        if made.llm is not None:
            log.info("scenes: %s/%s wrote %d of %d pairs: %d calls, $%.4f (cached replies saved $%.4f)",
                     made.llm["backend"], made.llm["model"], len(scenes) // 2, (len(scenes) + len(invalid)) // 2,
                     made.llm["calls"], made.llm["usd"], made.llm["usd_saved"])
        if not scenes:  # nothing to run is not a success: the reasons are kept, the stage is not complete
            write_objects(store, plan.layout, plan.scenes, {INVALID: invalid})
            raise StageCannotRun(f"scenes: no valid scene ({len(invalid)} invalid): every scene was refused; the "
                                 f"reasons, one per scene, are in {plan.layout.file(plan.scenes, INVALID)} "
                                 "(the rules: docs/formats.md)")
        if invalid:
            log.warning("scenes: %d of %d scenes are invalid and will not run (reasons in %s)", len(invalid),
                        len(invalid) + len(scenes), plan.layout.file(plan.scenes, INVALID))
        counts = {"scenes": len(scenes), "invalid": len(invalid)} | ({} if made.llm is None else {"llm": made.llm})
        yield todo[0], Output(counts,
                              SceneSet(tuple(scenes), invalid, corpus_stats(scenes)).objects())
