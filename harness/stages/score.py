"""The ``score`` stage: transcribe and judge every window with model speech (spec section 5)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from harness.audio.io import decode
from harness.metrics.outcomes import conversation_outcomes
from harness.pricing import add_usage
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.pool import BatchesFailed, BatchFailure, Resources, map_batches
from harness.runtime.shard import read_output
from harness.scenes.schema import Scene
from harness.stages.common import load_scenes, require_stage, stage_done
from harness.stages.infer import infer_records
from harness.store.base import ObjectStore, get_json, put_json
from harness.store.layout import cache_prefix
from harness.store.settings import open_store

log = logging.getLogger("duplex_mpe")


ERROR_KEY = "error"  # in verdicts.json: the conversation could not be scored, and why


def scored_windows(cfg: RunConfig, scene: Scene, rec: dict[str, Any], segments: list) -> list[dict[str, Any]]:
    """The conversation's scored windows from its infer record and speech segments."""
    return conversation_outcomes(scene, rec, np.asarray(segments), cfg.protocol, cfg.metrics.yield_deadline_s)


class ConversationScoring:
    """ASR + judge for the windows that need them; built once per Ray actor (the ASR and judge
    load once), then :meth:`score` runs batches of one model's conversations."""

    def __init__(self, cfg: RunConfig):
        from harness.scoring.asr import build_asr
        from harness.scoring.cache import CachedJudge, ContentCache
        from harness.scoring.flow import ConversationScorer
        from harness.scoring.judge import build_judge

        self.cfg = cfg
        self.store = open_store(cfg.store)
        self.plan = RunPlan.from_config(cfg)
        self.judge = CachedJudge(build_judge(cfg.judge.kind, **cfg.judge.params), self.store, cache_prefix("judge"))
        self.scorer = ConversationScorer(build_asr(cfg.asr.kind, **cfg.asr.params), self.judge,
                                         ContentCache(self.store, cache_prefix("asr")), cfg.protocol.sample_rate,
                                         cfg.tts.preamble_text, bias_with_gold=cfg.asr.bias_with_gold)
        self.scenes = {s.scene_id: s for s in load_scenes(self.store, self.plan)}
        self._segments: dict[str, dict[str, Any]] = {}

    def score(self, model: str, items: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """``items``: (scene id, infer record). Returns verdicts per scene and this batch's counts."""
        cfg, store = self.cfg, self.store
        if model not in self._segments:
            self._segments[model] = get_json(store, self.plan.layout.file(self.plan.vad[model], "segments.json"))
        segs = self._segments[model]
        before = (self.scorer.asr_calls, self.judge.hits, self.judge.misses, self.judge.cost.usd,
                  self.judge.saved.usd)
        paid = self.judge.cost
        results: dict[str, Any] = {}
        for sid, entry in items:
            try:
                rec = json.loads(read_output(store, entry, "json"))
                rows = scored_windows(cfg, self.scenes[sid], rec, segs[sid]["segments"])
                if not any((r["kind"] == "T" and r["response_presence"]) or
                           (r["kind"] == "silence" and not r["silent"]) for r in rows):
                    results[sid] = {}
                    continue
                output = decode(read_output(store, entry, "flac"), expected_rate=cfg.protocol.sample_rate)[0]
                results[sid] = self.scorer.score(self.scenes[sid], rows, output, np.asarray(segs[sid]["segments"]))
            except Exception as e:
                results[sid] = {ERROR_KEY: f"scoring failed: {type(e).__name__}: {e}"}
        after = (self.scorer.asr_calls, self.judge.hits, self.judge.misses, self.judge.cost.usd, self.judge.saved.usd)
        counts = dict(zip(("asr_calls", "judge_hits", "judge_misses", "usd", "usd_saved"),
                          (a - b for a, b in zip(after, before, strict=True)), strict=True))
        spent = replace(paid, input_tokens=self.judge.cost.input_tokens - paid.input_tokens,
                        output_tokens=self.judge.cost.output_tokens - paid.output_tokens)
        usage = getattr(self.judge.judge, "usage", None)  # the usage ledger's raw usage of this batch's paid calls
        return {"model": model, "results": results, "usage": usage(spent, counts["judge_misses"]) if usage else None,
                **counts}


Batch = tuple[str, list[tuple[str, Any]]]  # (model, [(item id, its infer record), ...])


def heaviest_first(todo: Mapping[str, Sequence[tuple[str, Any]]], weight: Mapping[tuple[str, str], float],
                   size: int) -> list[Batch]:
    """``todo`` (per model, ``(item id, record)`` pairs) cut into batches of at most ``size``
    items: each model's items by ``weight[(model, id)]`` descending (then id), the batches by
    their total weight descending, so that the longest start first (a pool's tail stays short)."""
    out = []
    for name, items in todo.items():
        ordered = sorted(items, key=lambda item, m=name: (-weight[(m, item[0])], item[0]))
        out += [(name, ordered[i:i + size]) for i in range(0, len(ordered), size)]
    return sorted(out, key=lambda b: -sum(weight[(b[0], iid)] for iid, _ in b[1]))


def on_scoring_actors(cfg: RunConfig, stage: str, actor_class: type,
                      batches: Sequence[Batch]) -> Iterator[tuple[int, dict | BatchFailure]]:
    """``actor_class(cfg).score(model, items)`` of every batch on the scoring pool
    (:func:`~harness.runtime.pool.map_batches`: ``(index, result or BatchFailure)`` in completion
    order): Ray actors of ``score.num_cpus`` / ``score.num_gpus`` each, ``score.actors`` of them or
    as many as the cluster holds (at most one a batch); ``score.actors=0``: one instance in the
    calling process, no Ray. A batch whose actor died runs again on a fresh actor
    (``cluster.batch_attempts``). Raises :class:`harness.runtime.executor.UnmetResources` when no
    node can hold an actor."""
    return map_batches(cfg, stage, actor_class, "score", batches,
                       Resources.of(cfg.score, "the scoring actor (score.num_cpus / score.num_gpus)"), args=(cfg,),
                       describe=lambda i: f"model {batches[i][0]!r}, {len(batches[i][1])} item(s) from "
                                          f"{batches[i][1][0][0]}")


def score_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Transcribe and judge every window with model speech (spec section 5) on a pool of Ray
    actors (:func:`on_scoring_actors`), batches of ``score.batch``, the batches with the most
    speech first (:func:`heaviest_first`). A model with a failed batch (its actor died on every
    ``cluster.batch_attempts`` attempt, or the worker raised) is not written: raises
    :class:`~harness.runtime.pool.BatchesFailed` once the other models are."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    todo, speech = {}, {}
    for m in cfg.models:
        require_stage(store, plan, plan.vad[m.name], f"vad {m.name}")
        if not stage_done(store, plan, plan.score[m.name], f"score {m.name}"):
            segs = get_json(store, lay.file(plan.vad[m.name], "segments.json"))
            recs = infer_records(store, plan, m.name)
            speech.update({(m.name, s): sum(e - b for b, e in v["segments"]) for s, v in segs.items()
                           if v["status"] == "ok"})
            # most speech first: ASR time grows with it, so the longest batches start first
            todo[m.name] = [(s, recs[s]) for s, v in segs.items() if v["status"] == "ok"]
    if not todo:
        return dict(plan.score)
    merged = {name: {"results": {}, "usage": {}, "asr_calls": 0, "judge_hits": 0, "judge_misses": 0, "usd": 0.0,
                     "usd_saved": 0.0} for name in todo}
    batches = heaviest_first(todo, speech, cfg.score.batch)
    failed: dict[int, BatchFailure] = {}
    for i, part in on_scoring_actors(cfg, "score", ConversationScoring, batches):
        if isinstance(part, BatchFailure):
            failed[i] = part
            continue
        acc = merged[part.pop("model")]
        acc["results"].update(part.pop("results"))
        add_usage(acc["usage"], part.pop("usage"))
        for k, v in part.items():
            acc[k] += v
    incomplete = {batches[i][0] for i in failed}  # their verdicts lack a batch: not written
    for name, acc in merged.items():
        if name in incomplete:
            continue
        prefix = plan.score[name]
        put_json(store, lay.file(prefix, "verdicts.json"), acc.pop("results"))
        acc.update(asr=cfg.asr.kind, judge=cfg.judge.kind)
        put_json(store, lay.marker(prefix), acc)
        log.info("score %s: %d ASR calls, judge %d hits / %d misses, $%.4f", name, acc["asr_calls"],
                 acc["judge_hits"], acc["judge_misses"], acc["usd"])
    if failed:  # the other models are written; ASR and judge results are cached, so a rerun pays little
        raise BatchesFailed("score", [failed[i] for i in sorted(failed)], len(batches))
    return dict(plan.score)
