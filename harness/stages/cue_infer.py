"""The ``cue-infer`` stage of Duplex Cue (spec section 9; docs/cue.md): every model declaring
``teacher_forcing`` over every corpus item (:func:`harness.cue.continuation.run_continuations`),
sharded exactly like Duplex-MPE's ``infer`` (the same Ray actors, shard plan, attempts,
checksummed markers, failure records, budget and retries: :func:`harness.runtime.sharded.run_sharded`)
under ``CuePlan.infer[model]``.

Per item the shard marker names two objects: ``json`` (:meth:`ContinuationResult.record`:
item_id, status, reason, sample_rate, start_s, switch_s, end_s, forced_steps,
n_samples, wall_s, step_s, usage) and, when ok, ``flac`` (the model's channel, mono 16-bit at
the timeline rate, from start_s to end_s). A model that does not declare ``teacher_forcing``
is not run: its prefix gets the marker ``{"applicable": false, "reason": ...}`` and the later
stages report it as not applicable. A second invocation skips completed shards.
"""

from __future__ import annotations

import logging

from harness.audio.io import AudioError, encode
from harness.cue.continuation import ContinuationInput, ContinuationResult, run_continuations
from harness.cue.plan import CUE_INFER_VERSION, CuePlan
from harness.models.base import TEACHER_FORCING
from harness.models.registry import build_model
from harness.products.cue import load_items, read_recording
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.runtime.infer_worker import InferWorker
from harness.runtime.shard import ShardAttempt
from harness.runtime.sharded import run_sharded
from harness.store.base import ObjectStore, json_bytes

log = logging.getLogger("duplex_mpe")


class CueInferWorker(InferWorker):
    """Streams cue items through one model (loaded as :class:`~harness.runtime.infer_worker.InferWorker`
    loads it: once per actor, on its model thread, under the watchdog); its shards live under
    the model's ``cue-infer`` prefix."""

    def shard_root(self) -> str:
        return CuePlan.from_config(self.cfg).infer[self.msettings.name]

    def process(self, item_ids: list[str], attempt: ShardAttempt) -> tuple[dict[str, tuple[str, str]], float]:
        plan = CuePlan.from_config(self.cfg)
        sr, c = self.cfg.protocol.sample_rate, self.cfg.cue
        if not hasattr(self, "_items"):
            self._items = {i.item_id: i for i in load_items(self.store, plan.layout, plan.corpus)}
        results: list[ContinuationResult] = []
        ready: list[ContinuationInput] = []
        for iid in item_ids:
            try:
                item = self._items[iid]
                audio = read_recording(self.store, plan.layout, plan.corpus, item.recording_id, sr)
            except (AudioError, KeyError, FileNotFoundError) as e:
                results.append(ContinuationResult(iid, "error", f"cannot load input: {type(e).__name__}: {e}"))
                continue
            ready.append(ContinuationInput(item, audio, self.cfg.conversation_seed(iid)))
        results += run_continuations(self.model, ready, sr, lead_s=c.switch_lead_s, context_s=c.context_s,
                                     window_s=c.window_s, rows=max(1, self.msettings.batch_size),
                                     step_timeout_s=self.msettings.step_timeout_s or self.cfg.infer.step_timeout_s,
                                     first_step_timeout_s=self.cfg.infer.first_step_timeout_s, thread=self.thread)
        audio_s = 0.0
        for r in results:
            if r.status == "ok":
                attempt.put(r.item_id, "flac", encode(r.output, sr))
                audio_s += len(r.output) / sr
            attempt.put(r.item_id, "json", json_bytes(r.record(sr)))
        return {r.item_id: (r.status, r.reason) for r in results}, audio_s


class CueInferStage(Stage):
    """Continue every item with every applicable model (module docstring): one sharded unit per
    model declaring ``teacher_forcing``; a model that does not gets a marker unit saying why.

    Raises:
        StageInputMissing: the corpus has not completed.
        BudgetExceeded, InferIncomplete: as the ``infer`` stage (:mod:`harness.stages.infer`); completed
            shards are kept and the next invocation runs the rest.
    """

    name, version = "cue-infer", CUE_INFER_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        # constructs each model (loads no weights) to read its declared capabilities
        self.applicable = {m.name: TEACHER_FORCING in build_model(m.target, m.params).info.capabilities
                           for m in cfg.models}

    def units(self, plan: CuePlan) -> list[Unit]:
        return [Unit(self.name, plan.infer[m.name], m.name, sharded=self.applicable[m.name]) for m in self.cfg.models]

    def inputs(self, plan: CuePlan) -> list[Unit]:
        return [Unit("cue-corpus", plan.corpus)]

    def compute(self, store: ObjectStore, plan: CuePlan, todo: list[Unit]):
        forced = {u.model: u.prefix for u in todo if u.sharded}
        if forced:
            ids = [i.item_id for i in load_items(store, plan.layout, plan.corpus)]
            run_sharded(self.cfg, store, plan, ids, forced, self.cfg.cue.shard_size, "cue-infer",
                        factory=CueInferWorker)
        for u in todo:
            if u.sharded:
                yield u, Output({})
            else:
                reason = f"model {u.model} does not declare {TEACHER_FORCING!r} (Duplex Cue forces the model's output)"
                log.info("cue-infer %s: not applicable: %s", u.model, reason)
                yield u, Output({"applicable": False, "model": u.model, "reason": reason})
