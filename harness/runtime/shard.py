"""One shard of the ``infer`` stage: the attempt/marker protocol and the worker that streams.

A shard is a fixed list of conversations from the run's shard plan. Each time a shard is run
is an **attempt** with its own id; the attempt writes every object under its own prefix
(``<shard>/attempts/<attempt>/``) and then commits the shard marker (``<shard>/_SUCCESS.json``)
with a conditional put: the marker names the attempt and the SHA-256 of every object it
wrote, and the first attempt to commit wins. So a dead attempt (actor killed half-way) or a
duplicate one (a retry racing the original) can never be read as complete: readers locate
outputs only through the marker, and :meth:`harness.products.infer.InferEntry.read` checks the checksum.

:class:`ShardWorker` holds that protocol; :class:`InferWorker` loads one model and streams
conversations through it. A conversation whose input cannot be loaded or that has a
deterministic fault while streaming (see :mod:`harness.runtime.runner`) is written with
``status: error`` and its reason; the shard still completes. A failure that may be transient
(:class:`~harness.runtime.runner.ModelFailure`: the model raised, or stalled past the
watchdog) propagates out of :meth:`ShardWorker.run`: the attempt commits nothing, and the
executor records it, retries the shard and finally reports it failed (``make rerun-failed``).

Usage ledger (:mod:`harness.pricing`): the marker carries ``usage``, the raw usage of its
conversations summed per ``provider/model`` (empty for a model that meters nothing), so readers
of cost never open the records. A failed attempt's exception carries ``usage``, what the model
had spent in it so far (:meth:`ShardWorker.usage_so_far`), for the executor's failure record;
an attempt whose actor died has no such record (its usage is unknown).
"""

from __future__ import annotations

import hashlib
import io
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.audio.io import AudioError, encode
from harness.models.base import DuplexModel
from harness.models.registry import build_model
from harness.pricing import add_usage, sum_usage
from harness.products.infer import ModelFacts
from harness.products.scenes import SceneSet
from harness.products.timeline import ClipReader, Timeline
from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.runner import ConversationInput, ConversationResult, ModelThread, run_conversations
from harness.scenes.schema import Scene
from harness.store.base import ObjectStore, get_json, json_bytes, put_json
from harness.store.layout import RunLayout


def new_attempt_id() -> str:
    """A unique, time-ordered attempt id (``20261130T021500Z-1a2b3c4d``)."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def device_hours(wall_s: float, num_gpus: float) -> float:
    """Spend of ``wall_s`` seconds on an actor holding ``num_gpus`` GPUs: its share of them (four
    replicas at ``num_gpus=0.25`` on one GPU for an hour book one GPU-hour); a CPU actor
    (``num_gpus=0``) counts as one device."""
    return wall_s / 3600.0 * (num_gpus if num_gpus > 0 else 1.0)


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


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

    def add_usage(self, usage: dict | None) -> None:
        """Count one conversation's raw usage (its record's ``usage``) into the marker's sum."""
        add_usage(self.usage, usage)

    def put(self, scene_id: str, kind: str, data: bytes) -> None:
        key = self.layout.conversation(self.prefix, scene_id, kind)
        self.store.put(key, data)
        self.objects.setdefault(scene_id, {})[kind] = {"key": key, "sha256": hashlib.sha256(data).hexdigest()}

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
        attempt = ShardAttempt(self.store, lay, shard_prefix)
        self.usage_so_far()  # what an earlier attempt left uncounted is not this one's
        try:
            statuses, audio_s = self.process(scene_ids, attempt)
        except Exception as e:  # the executor books what the failed attempt spent
            e.usage = self.usage_so_far()
            raise
        wall = time.perf_counter() - t0
        spend = device_hours(wall, self.msettings.num_gpus)
        entries = {sid: {"status": st, "reason": why, "objects": attempt.objects.get(sid, {})}
                   for sid, (st, why) in statuses.items()}
        n_ok = sum(e["status"] == "ok" for e in entries.values())
        committed = attempt.commit({"shard": shard_id, "model": self.msettings.name, "ok": n_ok,
                                    "error": len(entries) - n_ok, "wall_s": round(wall, 3),
                                    "device_hours": spend, "devices": devices, "audio_s": round(audio_s, 3),
                                    "usage": attempt.usage, "conversations": entries})
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


class ModelLoadStalled(RuntimeError):
    """A model's ``load`` did not return within ``infer.load_timeout_s``: the attempt fails (and is
    retried on a fresh actor, whose thread is not the stuck one)."""


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


class InferWorker(ShardWorker):
    """Streams conversations through one model, loaded once on ``device`` (``"cpu"``, ``"cuda"``;
    default: CUDA when the model asks for GPUs, else CPU). A model given GPUs where torch sees
    no usable CUDA raises :class:`NoUsableCuda` (see :func:`cuda_problem`) unless
    ``infer.allow_cpu_for_gpu_actors`` lets it run on CPU.

    Per conversation it writes ``json`` (status, placements, scheduler events), and when the
    stream completed ``flac`` (16-bit output on the timeline) and ``probs.npy`` (the online
    Silero probabilities, ``float32[k]``, which the ``vad`` stage reuses when its detector is
    the online one). Every call into the model runs on one
    :class:`~harness.runtime.runner.ModelThread` under a watchdog (``load``: ``infer.load_timeout_s``,
    raising :class:`ModelLoadStalled` naming where it waited; steps: ``infer.step_timeout_s``);
    after a stall the worker is unusable (every later shard raises at once).
    """

    def __init__(self, cfg: RunConfig, model: ModelSettings, store: ObjectStore, device: str | None = None):
        import torch

        super().__init__(cfg, model, store)
        torch.set_num_threads(cfg.infer.torch_threads)
        if device is None:
            problem = cuda_problem(model, cfg.infer.allow_cpu_for_gpu_actors)
            if problem:
                raise NoUsableCuda(problem)
            device = "cuda" if model.num_gpus and torch.cuda.is_available() else "cpu"
        self.model = build_model(model.target, model.params)
        self.thread = ModelThread(model.name)
        t0 = time.perf_counter()
        try:
            self.thread.call("load", self.model.load, device, timeout_s=cfg.infer.load_timeout_s)
        except TimeoutError:
            if self.thread.stuck is None:  # the model itself raised TimeoutError
                raise
            elapsed = time.perf_counter() - t0
            raise ModelLoadStalled(f"model {model.name}: load on {device} did not return within "
                                   f"{cfg.infer.load_timeout_s:g} s (infer.load_timeout_s; {elapsed:.0f} s elapsed), "
                                   f"waiting in {self.thread.doing()}") from None
        model_facts(model, self.model).write(store, self.plan.layout, self.shard_root())
        self._scenes: dict[str, Scene] | None = None
        self._timeline: Timeline | None = None
        self._clip = ClipReader(store, self.plan.layout, self.plan.synth, cfg.protocol.sample_rate)

    def usage_so_far(self) -> dict[str, dict[str, Any]]:
        """What the model billed since the last call, sessions of conversations that never returned
        a result included (:meth:`~harness.models.hosted.HostedRealtimeModel.drain_usage`); empty for
        a model that meters nothing."""
        drain = getattr(self.model, "drain_usage", None)
        return sum_usage(drain()) if drain is not None else {}

    def _inputs(self) -> tuple[dict[str, Scene], Timeline]:
        if self._scenes is None:
            lay, plan = self.plan.layout, self.plan
            self._scenes = SceneSet.read(self.store, lay, plan.scenes).by_id
            self._timeline = Timeline.read(self.store, lay, plan.synth)
        return self._scenes, self._timeline

    def _load(self, scene_id: str, scenes: dict[str, Scene], timeline: Timeline) -> ConversationInput:
        turns = timeline.conversations[scene_id]
        clips = [self._clip(t.clip) for t in turns]
        for t, c in zip(turns, clips, strict=True):
            if len(c) != t.n:
                raise AudioError(f"clip {t.clip} has {len(c)} samples, the synth index says {t.n}")
        return ConversationInput(scenes[scene_id], clips, self._clip(timeline.preamble.clip),
                                 self.cfg.conversation_seed(scene_id), self.cfg.tts.preamble_text)

    def process(self, scene_ids: list[str], attempt: ShardAttempt) -> tuple[dict[str, tuple[str, str]], float]:
        scenes, timeline = self._inputs()
        results: list[ConversationResult] = []
        ready: list[ConversationInput] = []
        for sid in scene_ids:
            try:
                ready.append(self._load(sid, scenes, timeline))
            except (AudioError, KeyError, FileNotFoundError) as e:
                results.append(ConversationResult(sid, "error", f"cannot load input: {type(e).__name__}: {e}"))
        results += run_conversations(self.model, ready, self.cfg.protocol, self.cfg.detector,
                                     self.cfg.infer.max_duration_s, rows=max(1, self.msettings.batch_size),
                                     step_timeout_s=self.msettings.step_timeout_s or self.cfg.infer.step_timeout_s,
                                     first_step_timeout_s=self.cfg.infer.first_step_timeout_s, thread=self.thread)
        sr = self.cfg.protocol.sample_rate
        audio_s = 0.0
        for r in results:
            if r.status == "ok":
                attempt.put(r.scene_id, "flac", encode(r.output, sr))
                attempt.put(r.scene_id, "probs.npy", npy_bytes(r.speech_probs))
                audio_s += len(r.output) / sr
            attempt.put(r.scene_id, "json", json_bytes(r.record(sr)))
            attempt.add_usage(r.usage)
        return {r.scene_id: (r.status, r.reason) for r in results}, audio_s
