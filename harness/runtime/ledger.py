"""The ``infer`` stage's books, read from the store alone: which shards are complete, which
failed and why, which are missing, and what was spent: device-hours from measured wall time, and
the raw API usage of hosted models (summed in each shard marker and failure record; priced by
:mod:`harness.pricing`).

``make status`` prints it; the ``infer`` stage reads it before starting so that completed
shards are skipped and cost nothing, and so the budget counts what earlier invocations of
the same run already spent (including attempts that died).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from harness.pricing import sum_usage
from harness.runtime.plan import RunPlan
from harness.store.base import ObjectStore, get_json


@dataclass
class ModelLedger:
    """One model's shards in one run (empty ``shards`` when its plan is not written yet)."""

    model: str
    prefix: str
    shards: dict[str, list[str]] = field(default_factory=dict)
    markers: dict[str, dict[str, Any]] = field(default_factory=dict)  # complete shard -> marker
    failures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # shard -> failed attempts, oldest first

    @property
    def missing(self) -> list[str]:
        """Shards without a marker (never run, failed, or running now)."""
        return [s for s in self.shards if s not in self.markers]

    @property
    def failed(self) -> dict[str, str]:
        """Missing shards with at least one failed attempt -> the last failure's reason."""
        return {s: self.failures[s][-1]["reason"] for s in self.missing if self.failures.get(s)}

    @property
    def spent_hours(self) -> float:
        """Device-hours of every attempt recorded so far: committed ones and failed ones."""
        return (sum(m.get("device_hours", 0.0) for m in self.markers.values())
                + sum(f.get("device_hours", 0.0) for fs in self.failures.values() for f in fs))

    @property
    def mean_shard_hours(self) -> float | None:
        """Mean device-hours of a completed shard (None before the first one completes)."""
        return fmean(m.get("device_hours", 0.0) for m in self.markers.values()) if self.markers else None

    @property
    def usage(self) -> dict[str, dict[str, Any]]:
        """Raw usage of the completed shards, summed per ``provider/model`` (:func:`harness.pricing.sum_usage`;
        from the markers only; empty for a model that meters nothing)."""
        return sum_usage(u for m in self.markers.values() for u in (m.get("usage") or {}).values())

    @property
    def failed_usage(self) -> dict[str, dict[str, Any]]:
        """Raw usage of the failed attempts that recorded it (what they spent before failing)."""
        return sum_usage(u for fs in self.failures.values() for f in fs for u in (f.get("usage") or {}).values())

    @property
    def failed_usage_unknown(self) -> int:
        """Failed attempts whose usage is unknown (the actor died, or the driver was stopped, before it
        could say what it had spent)."""
        return sum("usage" not in f for fs in self.failures.values() for f in fs)

    @property
    def conversation_errors(self) -> int:
        return sum(m["error"] for m in self.markers.values())

    def projected_hours(self) -> float | None:
        """Device-hours to finish the missing shards at the mean rate so far (None: no rate yet)."""
        mean = self.mean_shard_hours
        return None if mean is None else mean * len(self.missing)


def read_ledger(store: ObjectStore, plan: RunPlan, model: str, failures: bool = True,
                prefix: str | None = None) -> ModelLedger:
    """Read one model's shard plan, markers and (``failures``) failure records; changes nothing.

    Without ``failures`` no listing is made (one request per shard fewer on S3): enough for
    readers of the outputs, which need only the markers. ``prefix``: the sharded stage's prefix
    for this model (default: its ``infer`` prefix; Duplex Cue's continuation stage passes its own).
    """
    lay = plan.layout
    prefix = prefix or plan.infer[model]
    led = ModelLedger(model, prefix)
    plan_key = lay.file(prefix, "plan.json")
    if not store.exists(plan_key):
        return led
    led.shards = get_json(store, plan_key)
    for shard in led.shards:
        mk = lay.marker(lay.shard(prefix, shard))
        if store.exists(mk):
            led.markers[shard] = get_json(store, mk)
        fails = [get_json(store, k) for k in store.list(f"{lay.shard(prefix, shard)}/failures")] if failures else []
        if fails:
            led.failures[shard] = sorted(fails, key=lambda f: f["attempt"])
    return led
