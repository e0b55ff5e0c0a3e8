"""The ``scenes`` stage: generate (or import) and validate the scene manifest (spec section 2)."""

from __future__ import annotations

import io
import logging

from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.scenes.generator import corpus_stats, generate_pairs
from harness.scenes.schema import import_manifest, validate_scenes, write_manifest
from harness.stages.common import stage_done
from harness.store.base import ObjectStore, put_json

log = logging.getLogger("duplex_mpe")


def scenes_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Generate (or import) the scene manifest; invalid scenes are recorded, not written."""
    plan = RunPlan.from_config(cfg)
    if stage_done(store, plan, plan.scenes, "scenes"):
        return plan.scenes
    s = cfg.scenes
    if s.manifest:  # the same line and pair rules as generated scenes (docs/formats.md)
        with open(s.manifest, encoding="utf-8") as fh:
            scenes, invalid = import_manifest(fh)
    else:
        scenes, invalid = validate_scenes(generate_pairs(s.n_pairs, s.seed, s.four_party_share, s.n4_share,
                                                         s.profile), strict=True)
    buf = io.StringIO()
    write_manifest(scenes, buf)
    lay = plan.layout
    store.put(lay.file(plan.scenes, "scenes.jsonl"), buf.getvalue().encode())
    put_json(store, lay.file(plan.scenes, "invalid.json"), invalid)
    put_json(store, lay.file(plan.scenes, "stats.json"), corpus_stats(scenes))
    put_json(store, lay.marker(plan.scenes), {"scenes": len(scenes), "invalid": len(invalid)})
    log.info("scenes: %d scenes (%d invalid) at %s", len(scenes), len(invalid), plan.scenes)
    return plan.scenes
