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

import dataclasses
import hashlib
import io
import os
import resource
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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
from harness.runtime.projection import longest_stream_bound
from harness.runtime.runner import (
    ConversationInput,
    ConversationResult,
    InputUnavailable,
    ModelThread,
    model_failure,
    stream_conversations,
)
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


def peak_rss_mib() -> float:
    """The peak resident memory of this process (an actor's, in an actor) since it started, in MiB
    (``ru_maxrss``; Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


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
        self._clip = ClipReader(store, self.plan.layout, self.plan.synth, cfg.protocol.sample_rate,
                                max_bytes=round(cfg.infer.clip_cache_mib * 2**20))

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
        """One conversation's input, read when the runner admits it (:class:`ShardInputs`).

        Raises:
            InputUnavailable: its scene or clips are missing, a clip does not decode, or its length
                differs from the synth index's.
        """
        try:
            turns = timeline.conversations[scene_id]
            clips = [self._clip(t.clip) for t in turns]
            for t, c in zip(turns, clips, strict=True):
                if len(c) != t.n:
                    raise AudioError(f"clip {t.clip} has {len(c)} samples, the synth index says {t.n}")
            return ConversationInput(scenes[scene_id], clips, self._clip(timeline.preamble.clip),
                                     self.cfg.conversation_seed(scene_id), self.cfg.tts.preamble_text)
        except (AudioError, KeyError, FileNotFoundError) as e:
            raise InputUnavailable(scene_id, f"cannot load input: {type(e).__name__}: {e}") from e

    def process(self, scene_ids: list[str], attempt: ShardAttempt) -> tuple[dict[str, tuple[str, str]], float]:
        """Stream the shard, longest script first (:func:`longest_first`), each conversation's input
        read as a row frees up and its objects written under the attempt's prefix as soon as it ends
        (on :data:`WRITERS` threads, at most twice as many results waiting), so the worker's memory
        is bounded by its rows and clip cache, not its shard (issue 24, item 7). The runner's
        :class:`~harness.runtime.runner.RunStats` go into the marker (``runner``)."""
        scenes, timeline = self._inputs()
        order = longest_first(scene_ids, timeline)
        sr = self.cfg.protocol.sample_rate
        longest = self._longest_s(scene_ids, scenes, timeline)
        try:
            held = self.thread.call("fit_streams", self.model.fit_streams, longest,
                                    timeout_s=self.msettings.step_timeout_s or self.cfg.infer.step_timeout_s)
        except Exception as e:  # a stalled thread (an earlier shard's stuck step) or the model's own fault
            raise model_failure(self.thread, self.model.info.name, "fit_streams", e,  # noqa: B904 - chained there
                                "infer.step_timeout_s")
        rows = max(1, self.msettings.batch_size)
        statuses: dict[str, tuple[str, str]] = {}
        audio_s = 0.0
        pending: deque[Future] = deque()

        def write(r: ConversationResult) -> None:
            if r.status == "ok":
                attempt.put(r.scene_id, "flac", encode(r.output, sr))
                attempt.put(r.scene_id, "probs.npy", npy_bytes(r.speech_probs))
            attempt.put(r.scene_id, "json", json_bytes(r.record(sr)))

        def on_result(_: int, r: ConversationResult) -> None:
            nonlocal audio_s
            if held is not None and r.output is not None and len(r.output) / sr > held:
                r = dataclasses.replace(r, status="error", output=None, speech_probs=None, reason=(
                    f"the stream lasted {len(r.output) / sr:.2f} s, past the {held:.2f} s the model's context was "
                    f"sized to for this shard (fit_streams with the longest its scripts allow, {longest:.2f} s): "
                    "a wrong bound, so its output is not scored"))
            statuses[r.scene_id] = (r.status, r.reason)
            attempt.add_usage(r.usage)
            if r.output is not None:
                audio_s += len(r.output) / sr
            pending.append(writers.submit(write, r))
            while pending and (pending[0].done() or len(pending) > 2 * WRITERS):
                pending.popleft().result()  # a failed write fails the attempt

        with ThreadPoolExecutor(WRITERS, thread_name_prefix="infer-write") as writers:
            try:
                stats = stream_conversations(
                    self.model, ShardInputs(order, lambda sid: self._load(sid, scenes, timeline)), self.cfg.protocol,
                    self.cfg.detector, self.cfg.infer.max_duration_s, on_result, rows=rows,
                    step_timeout_s=self.msettings.step_timeout_s or self.cfg.infer.step_timeout_s,
                    first_step_timeout_s=self.cfg.infer.first_step_timeout_s, thread=self.thread)
                while pending:
                    pending.popleft().result()
            finally:
                for f in pending:
                    f.cancel()
        attempt.details["runner"] = stats.to_dict()
        if held is not None:
            attempt.details["context_s"] = round(held, 3)
        return {sid: statuses[sid] for sid in scene_ids}, audio_s  # the marker in the shard's order, not the finish's

    def _longest_s(self, scene_ids: list[str], scenes: dict[str, Scene], timeline: Timeline) -> float:
        """The longest any stream of the shard can last, whatever the model says (seconds;
        :func:`~harness.runtime.projection.longest_stream_bound`): what ``fit_streams`` sizes to.
        Conversations whose inputs are missing are left out (their load fails anyway)."""
        cfg, info = self.cfg, self.model.info
        streams = [([t.n for t in timeline.conversations[sid]], [t.label for t in scenes[sid].turns])
                   for sid in scene_ids if sid in timeline.conversations and sid in scenes]
        return longest_stream_bound(streams, timeline.preamble.n, cfg.protocol, cfg.detector.rules,
                                    info.frame_in / info.input_rate, cfg.infer.max_duration_s)


WRITERS = 4  # threads writing a shard's outputs (a store's latency, e.g. S3's, off the model's loop)


def script_samples(scene_id: str, timeline: Timeline) -> int:
    """The timeline samples of a conversation's speech: the preamble and every turn (0 when the
    synth index lacks it; its load then fails)."""
    turns = timeline.conversations.get(scene_id, ())
    return timeline.preamble.n + sum(t.n for t in turns)


def longest_first(scene_ids: list[str], timeline: Timeline) -> list[str]:
    """``scene_ids`` by :func:`script_samples`, longest first (ties in the given order): the
    longest streams start first, so the shard's tail, where rows idle as the queue drains, holds
    the shortest ones (issue 24, item 6). Row independence makes the order change no output."""
    return sorted(scene_ids, key=lambda sid: -script_samples(sid, timeline))


class ShardInputs(Sequence[ConversationInput]):
    """A shard's queue for :func:`~harness.runtime.runner.stream_conversations`: ``load(scene_id)``
    is called when the runner admits the conversation (it may raise
    :class:`~harness.runtime.runner.InputUnavailable`), never before, and nothing is kept."""

    def __init__(self, scene_ids: list[str], load: Callable[[str], ConversationInput]):
        self.scene_ids, self.load = scene_ids, load

    def __len__(self) -> int:
        return len(self.scene_ids)

    def __getitem__(self, i: int) -> ConversationInput:  # type: ignore[override]
        return self.load(self.scene_ids[i])
