"""The ``score`` stage: every scored window of every conversation, with ASR and judge verdicts for
the windows with model speech (spec section 5).

Reads the scene set, each model's infer entries and segments; writes per model the
:mod:`harness.products.windows` product: every window (its bounds, acoustic outcomes and, where
ASR and the judge ran, the verdict, in the same row), so no later stage builds windows again or
joins verdicts back to them. Its marker counts the calls (``judge_retried``: judge calls for a
cached ``UNPARSEABLE`` verdict, asked again) and, as ``judge_verdicts``, the verdicts per condition
and window kind: items, empty transcripts, judged, unparseable
(:meth:`~harness.products.windows.Windows.judge_verdicts`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from harness.metrics.outcomes import conversation_outcomes, with_verdict
from harness.pricing import add_usage
from harness.products.infer import InferEntry, read_entries
from harness.products.scenes import SceneSet
from harness.products.segments import read_segments
from harness.products.windows import ConversationWindows, Windows
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.runtime.plan import SCORE_VERSION, RunPlan
from harness.runtime.pool import BatchesFailed, on_scoring_pool
from harness.store.base import ObjectStore
from harness.store.layout import cache_prefix
from harness.store.settings import open_store

log = logging.getLogger("duplex_mpe")

COUNTS = ("asr_calls", "judge_hits", "judge_misses", "judge_retried", "usd", "usd_saved")  # summed over batches


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
        self.scenes = SceneSet.read(self.store, self.plan.layout, self.plan.scenes).by_id
        self._segments: dict[str, dict[str, Any]] = {}

    def windows(self, model: str, sid: str, entry: InferEntry) -> ConversationWindows:
        """One ok conversation's windows with their verdicts; an error (with its reason) when its
        record does not fit its scene or ASR / the judge fail on it."""
        cfg, store = self.cfg, self.store
        if model not in self._segments:
            self._segments[model] = read_segments(store, self.plan.layout, self.plan.vad[model])
        segments = self._segments[model][sid].segments
        try:
            rows = conversation_outcomes(self.scenes[sid], entry.record(store), segments, cfg.protocol,
                                         cfg.metrics.yield_deadline_s)
            verdicts: dict[str, dict[str, Any]] = {}
            if any((r["kind"] == "T" and r["response_presence"]) or (r["kind"] == "silence" and not r["silent"])
                   for r in rows):
                output = entry.audio(store, cfg.protocol.sample_rate)
                verdicts = self.scorer.score(self.scenes[sid], rows, output, segments)
            return ConversationWindows("ok", tuple(with_verdict(r, verdicts) for r in rows))
        except Exception as e:
            return ConversationWindows("error", reason=f"scoring failed: {type(e).__name__}: {e}")

    def score(self, model: str, items: list[tuple[str, InferEntry]]) -> dict[str, Any]:
        """``items``: (scene id, infer entry). Returns each conversation's windows and this batch's
        counts (ASR calls, judge hits and misses, cost) and the judge's raw usage."""
        def counters() -> tuple[float, ...]:
            j = self.judge
            return self.scorer.asr_calls, j.hits, j.misses, j.retried, j.cost.usd, j.saved.usd

        before, paid = counters(), self.judge.cost
        windows = {sid: self.windows(model, sid, entry) for sid, entry in items}
        after = counters()
        counts = dict(zip(COUNTS, (a - b for a, b in zip(after, before, strict=True)), strict=True))
        spent = replace(paid, input_tokens=self.judge.cost.input_tokens - paid.input_tokens,
                        output_tokens=self.judge.cost.output_tokens - paid.output_tokens)
        usage = getattr(self.judge.judge, "usage", None)  # the usage ledger's raw usage of this batch's paid calls
        return {"model": model, "windows": windows,
                "usage": usage(spent, counts["judge_misses"]) if usage else None, **counts}


class ScoreStage(Stage):
    """Transcribe and judge every window with model speech (spec section 5) on the scoring pool
    (:func:`~harness.runtime.pool.map_batches` with ``score.*`` resources), batches of
    ``score.batch``, the batches with the most speech first. A model with a failed batch (its
    actor died on every ``cluster.batch_attempts`` attempt, or the worker raised) is not
    written: raises :class:`~harness.runtime.pool.BatchesFailed` once the other models are."""

    name, version = "score", SCORE_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: RunPlan) -> list[Unit]:
        return [Unit(self.name, plan.score[m.name], m.name) for m in self.cfg.models]

    def inputs(self, plan: RunPlan) -> list[Unit]:
        return [Unit("vad", plan.vad[m.name], m.name) for m in self.cfg.models]

    def compute(self, store: ObjectStore, plan: RunPlan, todo: list[Unit]):
        cfg = self.cfg
        work, speech = {}, {}
        for u in todo:
            segs = read_segments(store, plan.layout, plan.vad[u.model])
            entries = read_entries(store, plan.layout, plan.infer[u.model], u.model)
            ok = [s for s, e in segs.items() if e.ok]
            speech.update({(u.model, s): segs[s].speech_samples for s in ok})  # ASR time grows with it
            work[u.model] = [(s, entries[s]) for s in ok]
        results, failed, n_batches = on_scoring_pool(cfg, "score", ConversationScoring, work, speech)
        for u in todo:
            if u.model not in results:  # a batch failed: its windows would be partial, not written
                continue
            acc: dict[str, Any] = {"windows": {}, "usage": {}, **dict.fromkeys(COUNTS, 0)}
            for part in results[u.model]:
                acc["windows"].update(part["windows"])
                add_usage(acc["usage"], part["usage"])
                for k in COUNTS:
                    acc[k] += part[k]
            windows = Windows(acc.pop("windows"))
            errors = sum(not c.ok for c in windows.conversations.values())
            yield u, Output({**acc, "conversations": len(windows.conversations), "errors": errors,
                             "asr": cfg.asr.kind, "judge": cfg.judge.kind,
                             "judge_verdicts": windows.judge_verdicts()}, windows.objects())
        if failed:  # the other models are written; ASR and judge results are cached, so a rerun pays little
            raise BatchesFailed("score", failed, n_batches)
