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
from harness.cue.plan import CuePlan
from harness.models.base import TEACHER_FORCING
from harness.models.registry import build_model
from harness.runtime.config import RunConfig
from harness.runtime.shard import InferWorker, ShardAttempt
from harness.runtime.sharded import run_sharded
from harness.stages.common import require_stage
from harness.stages.cue_corpus import load_items, read_recording
from harness.store.base import ObjectStore, json_bytes, put_json

log = logging.getLogger("duplex_mpe")


class CueInferWorker(InferWorker):
    """Streams cue items through one model (loaded as :class:`~harness.runtime.shard.InferWorker`
    loads it: once per actor, on its model thread, under the watchdog); its shards live under
    the model's ``cue-infer`` prefix."""

    def shard_root(self) -> str:
        return CuePlan.from_config(self.cfg).infer[self.msettings.name]

    def process(self, item_ids: list[str], attempt: ShardAttempt) -> tuple[dict[str, tuple[str, str]], float]:
        plan = CuePlan.from_config(self.cfg)
        sr, c = self.cfg.protocol.sample_rate, self.cfg.cue
        if not hasattr(self, "_items"):
            self._items = {i.item_id: i for i in load_items(self.store, plan)}
        results: list[ContinuationResult] = []
        ready: list[ContinuationInput] = []
        for iid in item_ids:
            try:
                item = self._items[iid]
                audio = read_recording(self.store, plan, item.recording_id, sr)
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


def cue_infer_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Continue every item with every applicable model (module docstring). Returns ``{model: prefix}``.

    Raises:
        StageInputMissing: the corpus has not completed.
        BudgetExceeded, InferIncomplete: as the ``infer`` stage (:mod:`harness.stages.infer`); completed
            shards are kept and the next invocation runs the rest.
    """
    plan = CuePlan.from_config(cfg)
    lay = plan.layout
    require_stage(store, plan, plan.corpus, "cue-corpus")  # type: ignore[arg-type]
    ids = [i.item_id for i in load_items(store, plan)]
    roots = {}
    for m in cfg.models:
        caps = build_model(m.target, m.params).info.capabilities  # constructs, loads no weights
        if TEACHER_FORCING in caps:
            roots[m.name] = plan.infer[m.name]
            continue
        reason = f"model {m.name} does not declare {TEACHER_FORCING!r} (Duplex Cue forces the model's output)"
        put_json(store, lay.marker(plan.infer[m.name]), {"applicable": False, "model": m.name, "reason": reason},
                 if_absent=True)
        log.info("cue-infer %s: not applicable: %s", m.name, reason)
    if roots:
        run_sharded(cfg, store, plan, ids, roots, cfg.cue.shard_size, "cue-infer", factory=CueInferWorker)
    return dict(plan.infer)
