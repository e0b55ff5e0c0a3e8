"""The ``infer`` stage's worker: one model loaded once, conversations streamed through it shard by
shard under the attempt/marker protocol of :mod:`harness.runtime.shard`.

A conversation whose input cannot be loaded or that has a deterministic fault while streaming
(see :mod:`harness.runtime.runner`) is written with ``status: error`` and its reason; the shard
still completes. A failure that may be transient (:class:`~harness.runtime.runner.ModelFailure`)
propagates out of :meth:`~harness.runtime.shard.ShardWorker.run` and the attempt commits nothing.
"""

from __future__ import annotations

import dataclasses
import io
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from harness.audio.io import AudioError, encode
from harness.models.registry import build_model
from harness.pricing import sum_usage
from harness.products.scenes import SceneSet
from harness.products.timeline import ClipReader, Timeline
from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.projection import longest_stream_bound
from harness.runtime.runner import (
    ConversationInput,
    ConversationResult,
    InputUnavailable,
    ModelThread,
    model_failure,
    stream_conversations,
)
from harness.runtime.shard import NoUsableCuda, ShardAttempt, ShardWorker, cuda_problem, model_facts
from harness.scenes.schema import Scene
from harness.store.base import ObjectStore, json_bytes


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


class ModelLoadStalled(RuntimeError):
    """A model's ``load`` did not return within ``infer.load_timeout_s``: the attempt fails (and is
    retried on a fresh actor, whose thread is not the stuck one)."""


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
        self.on_gpu = device.startswith("cuda")  # the runner's detector then works while the model steps
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
                    first_step_timeout_s=self.cfg.infer.first_step_timeout_s, thread=self.thread,
                    overlap=self.on_gpu)
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
    :class:`~harness.runtime.runner.InputUnavailable`), never before, and nothing is kept: a
    conversation the model gave up (:class:`~harness.models.base.RowPreempted`) is loaded again
    when it reruns (its clips likely still in the clip cache)."""

    def __init__(self, scene_ids: list[str], load: Callable[[str], ConversationInput]):
        self.scene_ids, self.load = scene_ids, load

    def __len__(self) -> int:
        return len(self.scene_ids)

    def __getitem__(self, i: int) -> ConversationInput:  # type: ignore[override]
        return self.load(self.scene_ids[i])
