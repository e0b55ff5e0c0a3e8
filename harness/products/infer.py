"""The ``infer`` stage's product: what each model did in each conversation (spec section 4).

Under a model's infer prefix (the same layout serves Duplex Cue's ``cue-infer``):

* ``plan.json``: the frozen shard plan, shard id -> conversation ids (written once);
* per shard ``<shard>/_SUCCESS.json``: the marker, written last by the attempt that won; it names
  every conversation's :class:`InferEntry` (status, reason, and the key and SHA-256 of each object
  the attempt wrote: ``json`` = the :class:`InferRecord`, ``flac`` = the output on the timeline,
  ``probs.npy`` = the online Silero probabilities), and the attempt's spend and raw API usage;
* per shard ``<shard>/failures/<attempt>.json``: an attempt that died (reason, spend, usage);
* ``model.json``: the :class:`ModelFacts` of the model that ran (rates, frame, capabilities,
  provider and turn-taking settings of a hosted model, its price key), written by the infer stage.

:func:`read_ledger` reads the books (``make status``, the budget), :func:`read_entries` the
conversations of a complete model (a partial infer is never read as complete).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Any

import numpy as np

from harness.audio.io import decode
from harness.pricing import sum_usage
from harness.products import check_schema
from harness.protocol.scheduler import Event, Placement
from harness.store.base import ObjectStore, get_json, put_json
from harness.store.layout import RunLayout

SHARD_PLAN = "plan.json"
MODEL_FACTS = "model.json"
RECORD_SCHEMA = 1
FACTS_SCHEMA = 1


class CorruptOutput(ValueError):
    """A stored output does not match the checksum its shard marker recorded."""


class InferIncomplete(RuntimeError):
    """Some infer shards have no marker (failed, left by the budget, or still running)."""


@dataclass(frozen=True)
class InferEntry:
    """One conversation in its shard's marker: ``status`` (``ok`` | ``error``), ``reason``, the
    ``objects`` its attempt wrote (kind -> ``{"key", "sha256"}``) and the ``shard``."""

    status: str
    reason: str
    objects: dict[str, dict[str, str]]
    shard: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def read(self, store: ObjectStore, kind: str) -> bytes:
        """The bytes of object ``kind`` (``json``, ``flac``, ``probs.npy``). Raises ``KeyError``
        when the attempt wrote no such object and :class:`CorruptOutput` when the bytes do not
        match the marker's checksum."""
        obj = self.objects[kind]
        data = store.get(obj["key"])
        if hashlib.sha256(data).hexdigest() != obj["sha256"]:
            raise CorruptOutput(f"{obj['key']}: checksum differs from the shard marker's")
        return data

    def record(self, store: ObjectStore) -> InferRecord:
        """The conversation's :class:`InferRecord` (Duplex-MPE's infer; cue-infer's records are
        :func:`json_record`)."""
        return InferRecord.from_dict(self.json(store))

    def json(self, store: ObjectStore) -> dict[str, Any]:
        return json.loads(self.read(store, "json"))

    def audio(self, store: ObjectStore, sample_rate: int) -> np.ndarray:
        """The stored output, ``float32[n]`` at ``sample_rate`` (AudioError otherwise)."""
        return decode(self.read(store, "flac"), expected_rate=sample_rate)[0]

    def probs(self, store: ObjectStore) -> np.ndarray:
        """The online Silero probabilities, ``float32[k]`` (one per 768 timeline samples at 24 kHz)."""
        return np.load(io.BytesIO(self.read(store, "probs.npy")), allow_pickle=False)


@dataclass(frozen=True)
class InferRecord:
    """What the runner recorded of one conversation (the ``json`` object; no audio).

    Attributes:
        scene_id, status, reason: as in the marker.
        sample_rate: the timeline rate (Hz); every time below is in samples at it.
        n_samples: length of the stored output (None when the stream did not complete).
        output_peak: max |sample| of the stored output, full scale 1.0 (None without output).
        placements: where each clip was placed on the timeline (``turn`` None: the preamble).
        events: the scheduler's log (decisions and why).
        wall_s, step_s: seconds from open to the stream's end, and of those inside model steps.
        usage: the model's raw usage of this stream (a hosted API's tokens), or None.
        pacing: a paced stream's lag behind real time (``{"max_lag_s", "behind_s"}``, seconds;
            :class:`harness.runtime.runner.Pacing`), None when not paced (or recorded before it was).
    """

    scene_id: str
    status: str
    reason: str
    sample_rate: int
    n_samples: int | None
    output_peak: float | None
    placements: tuple[Placement, ...]
    events: tuple[Event, ...]
    wall_s: float = 0.0
    step_s: float = 0.0
    usage: dict[str, Any] | None = None
    pacing: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": RECORD_SCHEMA, "scene_id": self.scene_id, "status": self.status, "reason": self.reason,
                "sample_rate": self.sample_rate, "n_samples": self.n_samples, "output_peak": self.output_peak,
                "placements": [asdict(p) for p in self.placements], "events": [e.to_dict() for e in self.events],
                "wall_s": round(self.wall_s, 3), "step_s": round(self.step_s, 3), "usage": self.usage,
                "pacing": self.pacing}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InferRecord:
        check_schema(d, RECORD_SCHEMA, f"the infer record of {d.get('scene_id', '?')}")
        return cls(d["scene_id"], d["status"], d.get("reason", ""), int(d["sample_rate"]), d.get("n_samples"),
                   d.get("output_peak"), tuple(Placement(p["turn"], int(p["start"]), int(p["length"]))
                                               for p in d.get("placements", [])),
                   tuple(Event(**e) for e in d.get("events", [])), float(d.get("wall_s") or 0.0),
                   float(d.get("step_s") or 0.0), d.get("usage"), d.get("pacing"))


@dataclass(frozen=True)
class ModelFacts:
    """What the harness knew of a model when it ran (``model.json``): read by reduce and the report
    instead of importing the adapter again.

    Attributes:
        name, target: the config's name and adapter.
        input_rate, output_rate: Hz; frame_in, frame_out: samples per native step; max_batch.
        capabilities: the adapter's declared capabilities (sorted).
        weights: the weights id and revision the adapter declares (None: none or unknown).
        provider: a hosted model's provider (None for a local model).
        turn_taking: a hosted model's turn-taking settings as sent (None for a local model).
        metered: the price-table key of its API usage (None: meters nothing).
        preset_text, voice_prompt: the upstream preset text the adapter sends as its text prompt
            (``""``: none) and its voice prompt (None: none), as the adapter declares them
            (:class:`~harness.models.base.ModelInfo`); whether the duty text follows the preset is
            the protocol's (``protocol.duty_as_text`` and the ``text_prompt`` capability).
        context_s: seconds of its stream the model attends over (None: no sliding window);
            reduce flags each conversation longer than this.
    """

    name: str
    target: str
    input_rate: int
    output_rate: int
    frame_in: int
    frame_out: int
    max_batch: int
    capabilities: tuple[str, ...]
    weights: str | None = None
    provider: str | None = None
    turn_taking: dict[str, Any] | None = None
    metered: str | None = None
    preset_text: str = ""  # absent from facts written before they were recorded: read as none
    voice_prompt: str | None = None
    context_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": FACTS_SCHEMA, **asdict(self), "capabilities": list(self.capabilities)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelFacts:
        check_schema(d, FACTS_SCHEMA, f"the model facts of {d.get('name', '?')}")
        d = {k: v for k, v in d.items() if k != "schema"}
        return cls(**{**d, "capabilities": tuple(d["capabilities"])})

    def write(self, store: ObjectStore, layout: RunLayout, prefix: str) -> None:
        """Written once per infer prefix (conditional put): the prefix hashes target and params."""
        put_json(store, layout.file(prefix, MODEL_FACTS), self.to_dict(), if_absent=True)

    @classmethod
    def read(cls, store: ObjectStore, layout: RunLayout, prefix: str) -> ModelFacts:
        """Raises FileNotFoundError when the infer stage has not written them."""
        return cls.from_dict(get_json(store, layout.file(prefix, MODEL_FACTS)))


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

    def entries(self) -> dict[str, InferEntry]:
        """``{conversation id: InferEntry}`` of every conversation of the shard plan.

        Raises :class:`InferIncomplete` when a shard has no marker: a partial infer is never read as
        complete."""
        if self.missing:
            raise InferIncomplete(f"infer {self.model}: {len(self.missing)} of {len(self.shards)} shards incomplete "
                                  f"({', '.join(self.missing[:5])}{'...' if len(self.missing) > 5 else ''}): "
                                  "run `make rerun-failed` first")
        return {sid: InferEntry(e["status"], e.get("reason", ""), e.get("objects", {}), shard)
                for shard, mk in self.markers.items() for sid, e in mk["conversations"].items()}


def read_ledger(store: ObjectStore, layout: RunLayout, prefix: str, model: str, failures: bool = True) -> ModelLedger:
    """Read one model's shard plan, markers and (``failures``) failure records under ``prefix`` (its
    infer, or cue-infer, prefix); changes nothing. Without ``failures`` no listing is made (one
    request per shard fewer on S3): enough for readers of the outputs, which need the markers only."""
    led = ModelLedger(model, prefix)
    plan_key = layout.file(prefix, SHARD_PLAN)
    if not store.exists(plan_key):
        return led
    led.shards = get_json(store, plan_key)
    for shard in led.shards:
        mk = layout.marker(layout.shard(prefix, shard))
        if store.exists(mk):
            led.markers[shard] = get_json(store, mk)
        fails = [get_json(store, k) for k in store.list(f"{layout.shard(prefix, shard)}/failures")] if failures else []
        if fails:
            led.failures[shard] = sorted(fails, key=lambda f: f["attempt"])
    return led


def read_entries(store: ObjectStore, layout: RunLayout, prefix: str, model: str) -> dict[str, InferEntry]:
    """:meth:`ModelLedger.entries` of the model's shards (markers only, no failure listing)."""
    return read_ledger(store, layout, prefix, model, failures=False).entries()
