"""What a run has done so far: every stage's marker and, per model, infer shards complete /
failed (with reasons) / missing, failed attempts and conversation errors (counted separately),
device-hours spent and the projected cost to finish (at the measured rate), each hosted model's
API cost (its raw usage from the shard markers and failure records, priced with
``budget.price_table``: tokens in and out, or unpriced), the whole run's projected cost from each
model's figure, before any shard too (:mod:`harness.runtime.projection`: device-hours, dollars, the
LLM judge's and reference's calls, a projection over the budget said so), and, once reduce ran,
every model whose output is suspect (no speech anywhere, or a peak below ``metrics.suspect_peak_dbfs``).

It reads the store only and changes nothing (``make status RUN=...``).
"""

from __future__ import annotations

from harness.pricing import describe_row, ledger_cost, load_prices, spend_rows, status_lines
from harness.products.infer import ModelLedger, read_ledger
from harness.review.results import RESULTS_FILE
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.projection import measured_factor, project, projection_lines
from harness.store.base import ObjectStore, get_json


def _money(hours: float, cfg: RunConfig) -> str:
    price = cfg.budget.usd_per_gpu_hour
    return f"{hours:.3f} device-h" + (f" (${hours * price:,.2f})" if price else "")


def _infer_line(led: ModelLedger, cfg: RunConfig) -> list[str]:
    if not led.shards:
        return [f"  infer     {led.model:10} not started"]
    failed = led.failed
    missing = len(led.missing) - len(failed)
    projected = led.projected_hours()
    attempts = sum(map(len, led.failures.values()))
    lines = [f"  infer     {led.model:10} {len(led.markers)}/{len(led.shards)} shards complete, {len(failed)} failed, "
             f"{missing} missing; {attempts} failed attempts; {led.conversation_errors} conversation errors; "
             f"spent {_money(led.spent_hours, cfg)}"
             + ("" if not led.missing else
                f"; to finish ~{_money(projected, cfg)}" if projected is not None
                else "; to finish: no measured rate yet (projected below)")]
    lines += [f"            {led.model:10}   {shard} failed: {reason}" for shard, reason in sorted(failed.items())]
    return lines


def run_status(cfg: RunConfig, store: ObjectStore) -> str:
    """A plain-text table of the run's progress."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout

    def mark(prefix: str) -> str:
        return "complete" if store.exists(lay.marker(prefix)) else "missing"

    lines = [f"run {cfg.run_id} in {store.describe()}",
             f"  scenes    {mark(plan.scenes):9} {plan.scenes}",
             f"  reference {mark(plan.reference):9} {plan.reference}",
             f"  synth     {mark(plan.synth):9} {plan.synth}"]
    ledgers = [read_ledger(store, plan.layout, plan.infer[m.name], m.name) for m in cfg.models]
    for led in ledgers:
        lines += _infer_line(led, cfg)
    table = load_prices(cfg.budget.price_table)
    api = {led.model: ledger_cost([*led.usage.values(), *led.failed_usage.values()], table) for led in ledgers}
    lines += status_lines(ledgers, cfg.models, table)  # hosted models: API cost from the usage ledger
    scoring = {m.name: get_json(store, lay.marker(plan.score[m.name])) for m in cfg.models
               if store.exists(lay.marker(plan.score[m.name]))}
    reference = get_json(store, lay.marker(plan.reference)) if store.exists(lay.marker(plan.reference)) else None
    lines += [f"  api       {r['stage']} of {r['who']}: {describe_row(r)} ({table.label})"  # LLM judge, reference
              for r in spend_rows([], scoring, reference, table, f"reference ({cfg.reference.kind})",
                                  get_json(store, lay.marker(plan.scenes)) if store.exists(lay.marker(plan.scenes))
                                  else None)]
    for stage in ("vad", "score"):
        for m in cfg.models:
            lines.append(f"  {stage:9} {m.name:10} {mark(getattr(plan, stage)[m.name])}")
    lines.append(f"  reduce    {mark(plan.reduce):9} {plan.reduce}")
    results = lay.file(plan.review, RESULTS_FILE)
    if store.exists(results):  # the human validation kit's results (docs/review.md)
        lines.append(f"  review    imported  {results} (results.md, results.html beside it)")
    if store.exists(lay.marker(plan.reduce)):
        checks = get_json(store, lay.file(plan.reduce, "statistics.json")).get("output_checks", {})
        lines += [f"  SUSPECT   {m:10} {'; '.join(c['reasons'])}"
                  + (" (expected for a baseline that never speaks)" if c["role"] == "baseline" else "")
                  for m, c in checks.items() if c["suspect"]]
    spent = sum(led.spent_hours for led in ledgers)
    rates = [led.projected_hours() for led in ledgers if led.missing]
    budget = cfg.budget
    total = f"total spent {_money(spent, cfg)}"
    api_usd = sum(c.usd for c in api.values())
    if any(c.metered for c in api.values()):
        total += f" + API ${api_usd:,.2f}" + ("" if all(c.complete for c in api.values()) else " and unpriced usage")
    if rates and all(r is not None for r in rates):
        total += f"; projected to finish {_money(sum(rates), cfg)}"
    limits = ([f"{budget.gpu_hours:g} device-h"] if budget.gpu_hours is not None else []) + \
             ([f"${budget.usd:,.2f}"] if budget.usd is not None else [])
    if limits:
        total += f"; budget {' and '.join(limits)}"
        caps = ([budget.gpu_hours] if budget.gpu_hours is not None else []) + \
               ([(budget.usd - api_usd) / budget.usd_per_gpu_hour] if budget.usd is not None else [])
        if spent > min(caps):  # docs/cluster.md: the largest possible overshoot
            total += (f" (overshoot {spent - min(caps):.4f} device-h: shards in flight when the budget was "
                      "reached ran to the end)")
    # before any shard (and beside the measured rate after): the projection from each model's figure
    lines += projection_lines(project(cfg, store), budget.gpu_hours, budget.usd,
                              {led.model: measured_factor(led.markers) for led in ledgers})
    lines.append(total)
    return "\n".join(lines)
