"""What a run has done so far: stage markers and, per model, shards complete / missing."""

from __future__ import annotations

from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.store.base import ObjectStore, get_json


def run_status(cfg: RunConfig, store: ObjectStore) -> str:
    """A plain-text table of the run's progress (reads markers only; changes nothing)."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout

    def mark(prefix: str) -> str:
        return "complete" if store.exists(lay.marker(prefix)) else "missing"

    lines = [f"run {cfg.run_id} in {store.describe()}",
             f"  scenes  {mark(plan.scenes):9} {plan.scenes}",
             f"  synth   {mark(plan.synth):9} {plan.synth}"]
    for m in cfg.models:
        prefix = plan.infer[m.name]
        plan_key = lay.file(prefix, "plan.json")
        if store.exists(plan_key):
            shards = get_json(store, plan_key)
            done = [s for s in shards if store.exists(lay.marker(lay.shard(prefix, s)))]
            errs = sum(get_json(store, lay.marker(lay.shard(prefix, s)))["error"] for s in done)
            infer = f"{len(done)}/{len(shards)} shards, {errs} conversation errors"
        else:
            infer = "not started"
        lines.append(f"  infer   {m.name:9} {infer}")
        lines.append(f"  vad     {m.name:9} {mark(plan.vad[m.name])}")
    lines.append(f"  reduce  {mark(plan.reduce):9} {plan.reduce}")
    return "\n".join(lines)
