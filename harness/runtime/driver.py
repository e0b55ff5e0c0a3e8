"""One driver for every stage's bookkeeping (architecture: "one driver owns each stage's bookkeeping").

A stage only computes. It declares its ``name``, its ``version`` (part of its prefix hash, see
:mod:`harness.runtime.plan`), the :class:`Unit`\\ s it writes (one prefix, or one per model), the
units it reads, and :meth:`Stage.compute`, which yields each unit's :class:`Output` (the objects
to write and the marker's counts). :func:`drive` does the rest, the same way for every stage:

1. every input unit must be complete (its marker, or for a sharded stage such as ``infer`` its
   shard plan with every shard's marker), else :class:`StageInputMissing` names the stage to run;
2. a unit whose marker exists is skipped (logged "complete, skipped") and costs nothing;
3. the others go to :meth:`Stage.compute` together (one Ray pool can serve all of them);
4. per unit as it comes: its objects are written, then its marker last, ``{"stage", "version",
   "objects": [names]}`` plus the stage's counts, and one log line (a sharded unit has no marker of
   its own: its shards' markers, written by the executor's attempts, are its commit).

A unit's marker is written only after all its objects, so a unit without a marker does not exist
for any reader (a stage killed half-way leaves nothing that looks complete). What the objects
hold, and how to read them, is :mod:`harness.products`'s business.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.products.infer import read_ledger
from harness.store.base import ObjectStore, json_bytes, put_json
from harness.store.layout import RunLayout

log = logging.getLogger("duplex_mpe")


class StageCannotRun(RuntimeError):
    """A stage cannot do its work with what it was given (jobs: exit 2, the message says why and
    where the details are): nothing of it is marked complete."""


class StageInputMissing(StageCannotRun):
    """An upstream stage has not completed (its marker is missing)."""


class HasLayout(Protocol):
    """A run's plan of prefixes (:class:`~harness.runtime.plan.RunPlan`, :class:`~harness.cue.plan.CuePlan`)."""

    layout: RunLayout


@dataclass(frozen=True)
class Unit:
    """One marker's worth of a stage's output: ``stage``'s outputs under ``prefix`` (``model`` for
    per-model stages). ``sharded``: completion is the shard plan with every shard's marker
    (``infer``, ``cue-infer``), not one marker."""

    stage: str
    prefix: str
    model: str | None = None
    sharded: bool = False

    @property
    def label(self) -> str:
        return self.stage if self.model is None else f"{self.stage} {self.model}"


@dataclass
class Output:
    """What :meth:`Stage.compute` produced for one unit: ``objects`` (name under the unit's prefix
    -> bytes, or a JSON-able value), written in order before the marker; ``marker``: the counts
    the marker carries (the driver adds ``stage``, ``version`` and the object names)."""

    marker: dict[str, Any]
    objects: dict[str, Any] = field(default_factory=dict)


class Stage(ABC):
    """A stage: what it writes, what it reads, and how it computes (see the module docstring)."""

    name: str
    version: str

    @abstractmethod
    def units(self, plan: Any) -> list[Unit]:
        """The units this stage writes, in order."""

    def inputs(self, plan: Any) -> list[Unit]:
        """The units that must be complete before this stage runs (default: none)."""
        return []

    def done(self, store: ObjectStore, plan: Any, unit: Unit) -> bool:
        """Whether one of this stage's own units is complete (default: :func:`unit_done`)."""
        return unit_done(store, plan.layout, unit)

    @abstractmethod
    def compute(self, store: ObjectStore, plan: Any, todo: list[Unit]) -> Iterable[tuple[Unit, Output]]:
        """Compute the units of ``todo`` (those not :meth:`done`); yield each one's output as it is ready.
        Every unit of ``todo`` must be yielded once, or the computation must raise."""


def write_objects(store: ObjectStore, layout: RunLayout, prefix: str, objects: dict[str, Any]) -> None:
    """Write ``objects`` (name under ``prefix`` -> bytes, or a JSON-able value) in order."""
    for name, data in objects.items():
        store.put(layout.file(prefix, name), data if isinstance(data, bytes) else json_bytes(data))


def unit_done(store: ObjectStore, layout: RunLayout, unit: Unit) -> bool:
    """Whether ``unit`` is complete: its marker exists (a sharded unit: its shard plan exists and every
    shard of it has a marker)."""
    if unit.sharded:
        led = read_ledger(store, layout, unit.prefix, unit.model or "", failures=False)
        return bool(led.shards) and not led.missing
    return store.exists(layout.marker(unit.prefix))


def require(store: ObjectStore, layout: RunLayout, units: Iterable[Unit]) -> None:
    """Raise :class:`StageInputMissing` naming the first unit of ``units`` that is not complete."""
    for u in units:
        if not unit_done(store, layout, u):
            raise StageInputMissing(f"stage {u.label!r} has not completed at {u.prefix}: run it first "
                                    "(or run the pipeline)")


def drive(stage: Stage, store: ObjectStore, plan: HasLayout) -> list[Unit]:
    """Run ``stage``'s bookkeeping around its computation (module docstring); returns its units."""
    lay = plan.layout
    require(store, lay, stage.inputs(plan))
    units = stage.units(plan)
    todo = []
    for u in units:
        if stage.done(store, plan, u):
            log.info("%s: complete at %s, skipped", u.label, u.prefix)
        else:
            todo.append(u)
    if todo:
        for unit, out in _checked(stage.compute(store, plan, todo), todo):
            write_objects(store, lay, unit.prefix, out.objects)
            if not unit.sharded:  # a sharded unit's shard markers are its commit
                put_json(store, lay.marker(unit.prefix), {"stage": stage.name, "version": stage.version,
                                                          "objects": list(out.objects), **out.marker})
            log.info("%s: written at %s (%s)", unit.label, unit.prefix,
                     ", ".join(f"{k} {v}" for k, v in out.marker.items() if isinstance(v, int | float | str)))
    return units


def _checked(outputs: Iterable[tuple[Unit, Output]], todo: list[Unit]) -> Iterator[tuple[Unit, Output]]:
    """The stage's outputs, refusing one for a unit it was not asked for, twice, or none for a unit."""
    left = list(todo)
    for unit, out in outputs:
        if unit not in left:
            raise RuntimeError(f"stage {unit.stage!r} produced {unit.label} at {unit.prefix}, which it was not "
                               "asked for (or twice)")
        left.remove(unit)
        yield unit, out
    if left:
        raise RuntimeError(f"stage {left[0].stage!r} returned without producing {', '.join(u.label for u in left)}")
