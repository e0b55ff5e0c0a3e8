"""The ``cue-score`` stage of Duplex Cue (spec section 9; docs/cue.md, "Scoring"): per model,
transcribe both conditions' windows, label them, decide eligibility, write ``rows.json``.

Inputs (the storage contract of docs/cue.md): the corpus (``recordings.jsonl``, ``items.jsonl``,
``audio/<recording_id>.flac``) and the model's continuation outputs (cue-infer shard markers,
``json`` + ``flac`` per item). Outputs under ``CuePlan.score[model]``: ``rows.json`` (one row per
item, :func:`harness.cue.scoring.item_row`) and the marker (counts, ASR calls, labeller hits,
misses and cost). A model whose cue-infer marker says ``applicable: false`` gets an empty
``rows.json`` and a marker saying so. Runs on the score stage's pool of Ray actors
(:class:`CueScoring`: the transcriber and the labeller load once per actor), batches of one
model's items; a completed model is skipped.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from harness.cue.plan import CUE_SCORE_VERSION, CuePlan
from harness.cue.schema import CueItem
from harness.cue.scoring import (
    Labeler,
    WordTranscriber,
    analyse_response,
    build_labeler,
    cue_view,
    item_row,
    label_pair,
    segments_s,
    span,
    vocabulary,
)
from harness.products.cue import ROWS, continuation_entries, load_corpus, load_items, not_applicable, read_recording
from harness.products.infer import InferEntry
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit, require
from harness.runtime.pool import BatchesFailed, on_scoring_pool
from harness.store.base import ObjectStore
from harness.store.layout import cache_prefix
from harness.store.settings import open_store

log = logging.getLogger("duplex_mpe")


class CueScorer:
    """Scores one model's items (transcriber, labeller and the reference analysis shared across models)."""

    def __init__(self, cfg: RunConfig, store: ObjectStore, plan: CuePlan, labeler: Labeler,
                 transcriber: WordTranscriber):
        self.cfg, self.store, self.plan = cfg, store, plan
        self.labeler, self.transcriber = labeler, transcriber
        self.sr = cfg.protocol.sample_rate
        self.items, self.recordings = load_corpus(store, plan.layout, plan.corpus)
        self._audio: dict[str, np.ndarray] = {}
        self._reference: dict[str, Any] = {}

    def audio(self, rid: str) -> np.ndarray:
        if rid not in self._audio:
            self._audio[rid] = read_recording(self.store, self.plan.layout, self.plan.corpus, rid, self.sr)
        return self._audio[rid]

    def window(self, item: CueItem) -> tuple[float, float, float]:
        """``(start_s, switch_s, end_s)`` of the protocol (the reference's analysed span starts at start_s)."""
        c = self.cfg.cue
        switch = item.switch_s(c.switch_lead_s)
        return max(0.0, switch - c.context_s), switch, switch + c.window_s

    def _vad(self, waves: list[np.ndarray]) -> list[np.ndarray]:
        from harness.vad.silero import detect

        return detect(waves, self.sr, self.cfg.vad, self.cfg.vad.device)

    def references(self, items: list[CueItem]) -> dict[str, tuple[np.ndarray, float, tuple]]:
        """Per item of ``items``: A's channel from start_s to end_s, its origin and its VAD speech
        (computed once per item for all models; the VAD runs on the items not yet seen, batched)."""
        spans = {}
        for it in items:
            if it.item_id not in self._reference and it.item_id not in spans:
                start, _, end = self.window(it)
                spans[it.item_id] = (span(self.audio(it.recording_id)[0], start, end, self.sr), start)
        if spans:
            segs = self._vad([a for a, _ in spans.values()])
            self._reference.update({iid: (a, t0, segments_s(s, t0, self.sr))
                                    for (iid, (a, t0)), s in zip(spans.items(), segs, strict=True)})
        return self._reference

    def score_items(self, model: str, recs: dict[str, InferEntry], item_ids: list[str]) -> list[dict[str, Any]]:
        """Rows of the corpus items ``item_ids`` (in corpus order); ``recs``: their cue-infer entries
        (``{item_id: entry}``; an item without one gets an error row)."""
        wanted = set(item_ids)
        items = [it for it in self.items if it.item_id in wanted]
        refs = self.references(items)
        outputs: dict[str, tuple[np.ndarray, float]] = {}
        errors: dict[str, str] = {}
        for it in items:
            entry = recs.get(it.item_id)
            if entry is None:
                errors[it.item_id] = "no continuation output (the item is not in the cue-infer shard plan)"
                continue
            if not entry.ok:
                errors[it.item_id] = f"continuation failed: {entry.reason or 'unknown error'}"
                continue
            try:
                outputs[it.item_id] = (entry.audio(self.store, self.sr), float(entry.json(self.store)["start_s"]))
            except (KeyError, ValueError, FileNotFoundError) as e:
                errors[it.item_id] = f"cannot read the continuation: {type(e).__name__}: {e}"
        ids = list(outputs)
        model_segs = dict(zip(ids, self._vad([outputs[i][0] for i in ids]), strict=True))
        rows = []
        label = getattr(self.labeler, "description", self.labeler.name)
        for it in items:
            _, switch, end = self.window(it)
            if it.item_id in errors:
                rows.append(item_row(it, switch, end, label, error=errors[it.item_id]))
                continue
            try:
                rec_ = self.recordings[it.recording_id]
                vocab = vocabulary(rec_, it, switch)
                release = self.cfg.cue.vad_release_s
                out, t0 = outputs[it.item_id]
                m = analyse_response("model", out, t0, segments_s(model_segs[it.item_id], t0, self.sr), it, switch,
                                     end, self.sr, self.transcriber, vocab, release)
                a, r0, rsp = refs[it.item_id]
                r = analyse_response("reference", a, r0, rsp, it, switch, end, self.sr, self.transcriber, vocab,
                                     release)
                view = cue_view(it, rec_, switch, end, self.cfg.cue.review_context_s, self._words_of(it, vocab))
                ml, rl = label_pair(self.labeler, view, m, r)
                rows.append(item_row(it, switch, end, label, model=m, reference=r, model_label=ml, reference_label=rl))
            except Exception as e:  # one item's failure (ASR, an LLM API error) is its error row
                rows.append(item_row(it, switch, end, label, error=f"scoring failed: {type(e).__name__}: {e}"))
        return rows

    def _words_of(self, item: CueItem, vocab: list[str]):
        """For recordings without word times: the ASR's words of one channel over a span."""

        def words(spk: str, t0: float, t1: float):
            ch = 0 if spk == "A" else 1
            return self.transcriber.words(span(self.audio(item.recording_id)[ch], t0, t1, self.sr), t0, vocab)

        return words


class CueScoring:
    """A scoring actor of cue-score: the transcriber and labeller build once (per Ray actor, or once
    in the calling process with ``score.actors=0``), then :meth:`score` runs batches of one model's items."""

    def __init__(self, cfg: RunConfig):
        store = open_store(cfg.store)
        self.scorer = _scorer(cfg, store, CuePlan.from_config(cfg))

    def score(self, model: str, items: list[tuple[str, InferEntry | None]]) -> dict[str, Any]:
        """``items``: (item id, its cue-infer entry or None). Returns the rows by item id and this
        batch's counts (:func:`_counters`)."""
        before = _counters(self.scorer)
        rows = self.scorer.score_items(model, {iid: e for iid, e in items if e is not None}, [iid for iid, _ in items])
        after = _counters(self.scorer)
        return {"model": model, "rows": {r["item_id"]: r for r in rows}, **{k: after[k] - before[k] for k in after}}


class CueScoreStage(Stage):
    """Score every model's continuations (see the module docstring) on the scoring pool
    (:func:`~harness.runtime.pool.map_batches` with ``score.*`` resources; ``score.actors=0`` in
    this process), batches of ``score.batch`` items of one model, the longest fed spans first
    (VAD time grows with them); ``rows.json`` is in corpus order whatever the batching. A model
    whose cue-infer says ``applicable: false`` gets empty rows and a marker saying so.

    Raises:
        StageInputMissing: the corpus, or a (applicable) model's cue-infer outputs, are incomplete.
        BatchesFailed: a batch failed (its actor died on every ``cluster.batch_attempts`` attempt,
            or the worker raised); raised once the other models are written, that model is not.
    """

    name, version = "cue-score", CUE_SCORE_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: CuePlan) -> list[Unit]:
        return [Unit(self.name, plan.score[m.name], m.name) for m in self.cfg.models]

    def inputs(self, plan: CuePlan) -> list[Unit]:
        return [Unit("cue-corpus", plan.corpus)]

    def compute(self, store: ObjectStore, plan: CuePlan, todo: list[Unit]):
        cfg, lay = self.cfg, plan.layout
        items = load_items(store, lay, plan.corpus)
        work: dict[str, list[tuple[str, InferEntry | None]]] = {}
        for u in todo:
            na = not_applicable(store, lay, plan.infer[u.model])
            if na is not None:
                log.info("cue-score %s: not applicable (%s)", u.model, na.get("reason", ""))
                yield u, Output({"applicable": False, "reason": na.get("reason", "")}, {ROWS: []})
                continue
            require(store, lay, [Unit("cue-infer", plan.infer[u.model], u.model, sharded=True)])
            recs = continuation_entries(store, lay, plan.infer[u.model], u.model)
            work[u.model] = [(it.item_id, recs.get(it.item_id)) for it in items]
        if not work:
            return
        c = cfg.cue
        fed = {it.item_id: min(it.switch_s(c.switch_lead_s), c.context_s) + c.window_s for it in items}
        weight = {(name, iid): fed[iid] for name in work for iid, _ in work[name]}
        results, failed, n_batches = on_scoring_pool(cfg, "cue-score", CueScoring, work, weight)
        for u in todo:
            if u.model not in results:  # not applicable (written above), or a batch failed: rows would be partial
                continue
            acc = {k: sum(part[k] for part in results[u.model]) for k in COUNTERS}
            by_id = {iid: r for part in results[u.model] for iid, r in part["rows"].items()}
            rows = [by_id[it.item_id] for it in items]
            yield u, Output({"applicable": True, "items": len(rows), "eligible": sum(r["eligible"] for r in rows),
                             "errors": sum(r["error"] is not None for r in rows), "transcriber": c.transcriber,
                             "labeler": c.labeler, **acc}, {ROWS: rows})
        if failed:  # the other models are written; ASR and labeller results are cached, so a rerun pays little
            raise BatchesFailed("cue-score", failed, n_batches)


def transcriber_params(cfg: RunConfig) -> dict[str, Any]:
    """The params of the transcriber ``cue.transcriber``: ``asr.params`` when it is the run's ASR
    kind (``asr.kind``), else the backend's defaults."""
    return dict(cfg.asr.params) if cfg.cue.transcriber == cfg.asr.kind else {}


def _scorer(cfg: RunConfig, store: ObjectStore, plan: CuePlan) -> CueScorer:
    from harness.scoring.asr import build_asr
    from harness.scoring.cache import ContentCache

    transcriber = WordTranscriber(build_asr(cfg.cue.transcriber, **transcriber_params(cfg)),
                                  ContentCache(store, cache_prefix("asr")),
                                  cfg.protocol.sample_rate)
    labeler = build_labeler(cfg.cue.labeler, cfg.cue.labeler_params, store, cache_prefix("cue-label"))
    return CueScorer(cfg, store, plan, labeler, transcriber)


COUNTERS = ("asr_calls", "label_hits", "label_misses", "usd", "usd_saved")  # summed over a model's batches


def _counters(s: CueScorer) -> dict[str, Any]:
    lab = s.labeler
    return dict(zip(COUNTERS, (s.transcriber.asr_calls, lab.hits, lab.misses, lab.cost.usd, lab.saved.usd),
                    strict=True))
