"""One shard of a sharded stage (``infer``, ``cue-infer``): the attempt/marker protocol.

A shard is a fixed list of conversations from the run's shard plan. Each time a shard is run
is an **attempt** with its own id; the attempt writes every object under its own prefix
(``<shard>/attempts/<attempt>/``) and then commits the shard marker (``<shard>/_SUCCESS.json``)
with a conditional put: the marker names the attempt and the SHA-256 of every object it
wrote, and the first attempt to commit wins. So a dead attempt (actor killed half-way) or a
duplicate one (a retry racing the original) can never be read as complete: readers locate
outputs only through the marker, and :meth:`harness.products.infer.InferEntry.read` checks the checksum.

:class:`ShardWorker` holds that protocol; the worker that loads a model and streams
conversations through it, :class:`~harness.runtime.infer_worker.InferWorker`, lives in
:mod:`harness.runtime.infer_worker` (torch and the runner), so that the processes that only plan,
dispatch or read shards (the job drivers, ``make status``, a worker that does not stream) do not
import it: :func:`infer_worker` builds one where it runs. A failure that may be transient
(:class:`~harness.runtime.runner.ModelFailure`: the model raised, or stalled past the watchdog)
propagates out of :meth:`ShardWorker.run`: the attempt commits nothing, and the executor records
it, retries the shard and finally reports it failed (``make rerun-failed``).

Usage ledger (:mod:`harness.pricing`): the marker carries ``usage``, the raw usage of its
conversations summed per ``provider/model`` (empty for a model that meters nothing), so readers
of cost never open the records. A failed attempt's exception carries ``usage``, what the model
had spent in it so far (:meth:`ShardWorker.usage_so_far`), for the executor's failure record;
an attempt whose actor died has no such record (its usage is unknown).
"""

from __future__ import annotations

import hashlib
import os
import resource
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.models.base import DuplexModel
from harness.models.registry import build_model
from harness.pricing import add_usage
from harness.products.infer import ModelFacts
from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.plan import RunPlan
from harness.store.base import ObjectStore, get_json, put_json
from harness.store.layout import RunLayout

if TYPE_CHECKING:
    from harness.runtime.infer_worker import InferWorker


def new_attempt_id() -> str:
    """A unique, time-ordered attempt id (``20261130T021500Z-1a2b3c4d``)."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def device_hours(wall_s: float, num_gpus: float) -> float:
    """Spend of ``wall_s`` seconds on an actor holding ``num_gpus`` GPUs: its share of them (four
    replicas at ``num_gpus=0.25`` on one GPU for an hour book one GPU-hour); a CPU actor
    (``num_gpus=0``) counts as one device."""
    return wall_s / 3600.0 * (num_gpus if num_gpus > 0 else 1.0)


def peak_rss_mib() -> float:
    """The peak resident memory of this process (an actor's, in an actor) since it started, in MiB
    (``ru_maxrss``; Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


@dataclass
class ShardSummary:
    """What one attempt did. ``committed`` is False when another attempt had already committed
    the shard (this one's outputs are then never read); ``skipped`` when the marker existed before."""

    model: str
    shard_id: str
    attempt: str
    ok: int
    error: int
    wall_s: float
    audio_s: float
    device_hours: float
    devices: str  # CUDA_VISIBLE_DEVICES the attempt ran with ("" on CPU)
    skipped: bool = False
    committed: bool = True
    actor: str = ""  # the Ray actor that ran it (set by the executor)
    started: float = 0.0  # Unix time the attempt started
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)  # raw usage per provider/model (harness.pricing)


class ShardAttempt:
    """One attempt's writes: every object under the attempt's own prefix, checksummed."""

    def __init__(self, store: ObjectStore, layout: RunLayout, shard_prefix: str):
        self.store, self.layout, self.shard_prefix = store, layout, shard_prefix
        self.id = new_attempt_id()
        self.prefix = layout.attempt(shard_prefix, self.id)
        self.objects: dict[str, dict[str, dict[str, str]]] = {}  # scene -> kind -> {key, sha256}
        self.usage: dict[str, dict[str, Any]] = {}  # raw usage of its conversations, per provider/model
        self.details: dict[str, Any] = {}  # what the worker reports of the attempt, into the marker (e.g. runner)

    def add_usage(self, usage: dict | None) -> None:
        """Count one conversation's raw usage (its record's ``usage``) into the marker's sum."""
        add_usage(self.usage, usage)

    def put(self, scene_id: str, kind: str, data: bytes) -> None:
        """Write one object of ``scene_id`` under the attempt's prefix (the ``json`` record last:
        :attr:`written` counts those). Safe from several threads for different conversations."""
        key = self.layout.conversation(self.prefix, scene_id, kind)
        self.store.put(key, data)
        self.objects.setdefault(scene_id, {})[kind] = {"key": key, "sha256": hashlib.sha256(data).hexdigest()}

    @property
    def written(self) -> int:
        """Conversations whose ``json`` record is written (each worker writes it last): the attempt's progress."""
        return sum("json" in kinds for kinds in list(self.objects.values()))

    def commit(self, marker: dict[str, Any]) -> bool:
        """Write the shard marker unless another attempt already did; True when this one won."""
        return put_json(self.store, self.layout.marker(self.shard_prefix), {**marker, "attempt": self.id},
                        if_absent=True)


class ShardWorker:
    """Runs shards of one model with the attempt/marker protocol; subclasses do the work.

    Args:
        cfg: the run config.
        model: which of ``cfg.models`` this worker runs.
        store: where inputs are read and outputs written.
    """

    def __init__(self, cfg: RunConfig, model: ModelSettings, store: ObjectStore):
        self.cfg, self.msettings, self.store = cfg, model, store
        self.plan = RunPlan.from_config(cfg)
        self._attempt: ShardAttempt | None = None  # the attempt in flight

    @property
    def progress(self) -> int:
        """Conversations the attempt in flight has written (:attr:`ShardAttempt.written`; 0 between
        attempts): the executor polls it from another thread for the progress bar."""
        attempt = self._attempt
        return attempt.written if attempt is not None else 0

    def shard_root(self) -> str:
        """The prefix this worker's shards live under (the model's ``infer`` prefix; a stage with
        its own sharded outputs, such as Duplex Cue's continuation, overrides it and passes the
        same prefix to :func:`~harness.runtime.executor.run_shards` as ``roots``)."""
        return self.plan.infer[self.msettings.name]

    def process(self, scene_ids: list[str], attempt: ShardAttempt) -> tuple[dict[str, tuple[str, str]], float]:
        """Write each conversation's outputs through ``attempt``.

        Returns ``({scene_id: (status, reason)}, seconds of model audio written)``.
        """
        raise NotImplementedError

    def usage_so_far(self) -> dict[str, dict[str, Any]] | None:
        """Raw usage (``{provider/model: sum}``) the worker's model spent since the last call, or
        None when that is unknown; called when an attempt starts and when it fails. Default: None."""
        return None

    def run(self, shard_id: str, scene_ids: list[str]) -> ShardSummary:
        """Process one shard (skipped when its marker exists). Returns its summary.

        Whatever :meth:`process` raises propagates and the attempt commits nothing (no marker);
        the exception gets a ``usage`` attribute, :meth:`usage_so_far` (None: unknown).
        """
        lay = self.plan.layout
        shard_prefix = lay.shard(self.shard_root(), shard_id)
        marker_key = lay.marker(shard_prefix)
        devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if self.store.exists(marker_key):
            m = get_json(self.store, marker_key)
            return ShardSummary(self.msettings.name, shard_id, m["attempt"], m["ok"], m["error"], 0.0, 0.0, 0.0,
                                devices, skipped=True)
        started, t0 = time.time(), time.perf_counter()
        attempt = self._attempt = ShardAttempt(self.store, lay, shard_prefix)
        self.usage_so_far()  # what an earlier attempt left uncounted is not this one's
        try:
            statuses, audio_s = self.process(scene_ids, attempt)
        except Exception as e:  # the executor books what the failed attempt spent
            e.usage = self.usage_so_far()
            raise
        finally:
            self._attempt = None
        wall = time.perf_counter() - t0
        spend = device_hours(wall, self.msettings.num_gpus)
        entries = {sid: {"status": st, "reason": why, "objects": attempt.objects.get(sid, {})}
                   for sid, (st, why) in statuses.items()}
        n_ok = sum(e["status"] == "ok" for e in entries.values())
        committed = attempt.commit({"shard": shard_id, "model": self.msettings.name, "ok": n_ok,
                                    "error": len(entries) - n_ok, "wall_s": round(wall, 3),
                                    "device_hours": spend, "devices": devices, "audio_s": round(audio_s, 3),
                                    "usage": attempt.usage, "peak_rss_mib": peak_rss_mib(), **attempt.details,
                                    "conversations": entries})
        return ShardSummary(self.msettings.name, shard_id, attempt.id, n_ok, len(entries) - n_ok, wall, audio_s,
                            spend, devices, committed=committed, started=started, usage=attempt.usage)


def model_facts(settings: ModelSettings, model: DuplexModel | None = None) -> ModelFacts:
    """What the run knows of a model (:class:`~harness.products.infer.ModelFacts`): its
    :class:`~harness.models.base.ModelInfo` (of ``model``, the loaded instance, whose ``weights``
    say what was loaded; else of a fresh, unloaded one) and, for a hosted model, its provider,
    turn-taking settings and price key. Raises ImportError / ValueError as
    :func:`~harness.models.registry.build_model`."""
    from harness.models.hosted import HostedRealtimeModel
    from harness.pricing import metered_key

    model = model or build_model(settings.target, settings.params)
    info = model.info
    hosted = isinstance(model, HostedRealtimeModel)
    return ModelFacts(settings.name, settings.target, info.input_rate, info.output_rate, info.frame_in,
                      info.frame_out, info.max_batch, tuple(sorted(info.capabilities)), info.weights,
                      provider=type(model).provider if hosted else None,
                      turn_taking=type(model).turn_taking(settings.params) if hosted else None,
                      metered=metered_key(settings.target, settings.params), preset_text=info.preset_text,
                      voice_prompt=info.voice_prompt, context_s=info.context_s)


class NoUsableCuda(RuntimeError):
    """An actor was given GPUs but torch sees no usable CUDA (it would run on CPU and book GPU-hours)."""


def cuda_problem(model: ModelSettings, allow_cpu: bool) -> str | None:
    """Why ``model`` may not run here: it asks for GPUs (``num_gpus > 0``), torch sees no usable
    CUDA and ``allow_cpu`` (``infer.allow_cpu_for_gpu_actors``) is off; else None. The message
    names the model, ``CUDA_VISIBLE_DEVICES`` and torch's CUDA build."""
    import torch

    if not model.num_gpus or allow_cpu or torch.cuda.is_available():
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return (f"model {model.name!r} is given num_gpus={model.num_gpus:g} but torch sees no usable CUDA "
            f"(CUDA_VISIBLE_DEVICES={'unset' if visible is None else repr(visible)}, torch {torch.__version__} "
            f"built for CUDA {torch.version.cuda or 'none'}): it would run on CPU and book GPU-hours. Check the "
            "node's NVIDIA driver and the image's torch build, or set infer.allow_cpu_for_gpu_actors=true to run "
            "it on CPU on purpose")




def infer_worker(cfg: RunConfig, model: ModelSettings, store: ObjectStore) -> InferWorker:
    """:class:`~harness.runtime.infer_worker.InferWorker` ``(cfg, model, store)``, imported here: the
    default worker factory of :func:`~harness.runtime.executor.run_shards`, called inside the actor."""
    from harness.runtime.infer_worker import InferWorker

    return InferWorker(cfg, model, store)
