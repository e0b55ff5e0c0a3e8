"""Run Duplex Cue, the companion protocol (spec section 9; docs/cue.md), and print where its report is.

    cue-corpus -> cue-infer (teacher-forced continuation, sharded on Ray actors) -> cue-score -> cue-reduce

    python -m jobs.cue                                   # the generated corpus through the self-checks
    python -m jobs.cue --help                            # the overrides
    python -m jobs.cue run_id=x model=[replay,moshi_tiny]   # a tiny random Moshi on CPU

Config root ``conf/cue.yaml`` (the model/, store/, cluster/, infer/ groups of Duplex-MPE).
Every stage skips work whose marker exists, so the same command resumes a stopped run (only
incomplete cue-infer shards run). Exit status as ``jobs.pipeline`` (docs/cluster.md): 0
complete; 2 configuration error; 3 stopped by the budget; 4 shards failed; 5 finished with
item errors (listed in the cue-infer markers; the first is printed).
"""

from __future__ import annotations

from omegaconf import DictConfig

from harness.cue.plan import CuePlan
from harness.products.infer import read_ledger
from harness.runtime.config import RunConfig
from harness.stages import CUE_STAGES, run_cue
from harness.store.base import ObjectStore
from jobs._entry import FAILED_CONVERSATIONS, check_ready, fail, hydra_job, run_until_stopped, setup


def item_errors(cfg: RunConfig, store: ObjectStore) -> list[tuple[str, str, str]]:
    """``(model, item_id, reason)`` of every item a model's continuation failed, from the
    cue-infer shard markers (a not-applicable model has none)."""
    plan = CuePlan.from_config(cfg)
    out = []
    for m in cfg.models:
        led = read_ledger(store, plan.layout, plan.infer[m.name], m.name, failures=False)  # type: ignore[arg-type]
        out += [(m.name, iid, e["reason"]) for mk in led.markers.values()
                for iid, e in sorted(mk["conversations"].items()) if e["status"] != "ok"]
    return out


def cue_status(cfg: RunConfig, store: ObjectStore) -> str:
    """One line per model: its cue-infer shards complete / missing, failed attempts and spend."""
    plan = CuePlan.from_config(cfg)
    lines = ["cue-infer shards:"]
    for m in cfg.models:
        led = read_ledger(store, plan.layout, plan.infer[m.name], m.name)  # type: ignore[arg-type]
        lines.append(f"  {m.name}: {len(led.markers)}/{len(led.shards)} complete, {len(led.missing)} missing, "
                     f"{sum(map(len, led.failures.values()))} failed attempt(s), {led.spent_hours:.4f} device-hours")
    return "\n".join(lines)


@hydra_job("cue")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    # the store, each model's stack and resources; the cue manifest, labeller and transcriber
    run = check_ready(run, store, ["infer", *CUE_STAGES], project_cost=False)
    key = run_until_stopped(run_cue, run, store, status=cue_status,
                            resume=f"run the same command again (python -m jobs.cue run_id={run.run_id} ...)")
    where = f"{run.store.root}/{key}" if run.store.kind == "local" else f"{store.describe()} {key}"
    print(f"\ncue report: {where}\n            {where.removesuffix('.md')}.html (distributions, timeline pages)")
    errors = item_errors(run, store)
    if errors:
        model, iid, reason = errors[0]
        fail(f"finished with {len(errors)} item error(s); the first: {model} {iid}: {reason}. Each is in its "
             "cue-infer shard marker and the report's funnel.", FAILED_CONVERSATIONS)


if __name__ == "__main__":
    main()
