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

import json
import logging
from typing import Any

import numpy as np

from harness.audio.io import decode
from harness.cue.corpus import read_recordings
from harness.cue.plan import CuePlan
from harness.cue.schema import CueItem, Recording
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
from harness.products.infer import read_ledger
from harness.runtime.config import RunConfig
from harness.runtime.pool import BatchesFailed, BatchFailure
from harness.runtime.shard import read_output
from harness.stages.common import StageInputMissing, require_stage
from harness.stages.cue_corpus import load_items, read_recording
from harness.store.base import ObjectStore, get_json, put_json
from harness.store.layout import cache_prefix
from harness.store.settings import open_store

log = logging.getLogger("duplex_mpe")

ROWS = "rows.json"


def load_corpus(store: ObjectStore, plan: CuePlan) -> tuple[list[CueItem], dict[str, Recording]]:
    """The corpus's items and recordings (by id)."""
    recs = read_recordings(store.get(plan.layout.file(plan.corpus, "recordings.jsonl")).decode().splitlines())
    return load_items(store, plan), {r.recording_id: r for r in recs}


def applicability(store: ObjectStore, plan: CuePlan, model: str) -> dict[str, Any] | None:
    """The cue-infer marker of a model that was not run (``{"applicable": false, ...}``), else None."""
    key = plan.layout.marker(plan.infer[model])
    if store.exists(key):
        mk = get_json(store, key)
        if mk.get("applicable") is False:
            return mk
    return None


def continuation_records(store: ObjectStore, plan: CuePlan, model: str) -> dict[str, dict[str, Any]]:
    """``{item_id: shard marker entry}`` of a model's cue-infer outputs. Raises
    :class:`StageInputMissing` when the shard plan is missing or a shard has no marker."""
    led = read_ledger(store, plan.layout, plan.infer[model], model, failures=False)  # type: ignore[arg-type]
    if not led.shards:
        raise StageInputMissing(f"stage 'cue-infer' has not run for model {model!r}: run it first")
    if led.missing:
        raise StageInputMissing(f"cue-infer {model}: {len(led.missing)} of {len(led.shards)} shards incomplete: "
                                "rerun the cue job")
    return {iid: entry for mk in led.markers.values() for iid, entry in mk["conversations"].items()}


class CueScorer:
    """Scores one model's items (transcriber, labeller and the reference analysis shared across models)."""

    def __init__(self, cfg: RunConfig, store: ObjectStore, plan: CuePlan, labeler: Labeler,
                 transcriber: WordTranscriber):
        self.cfg, self.store, self.plan = cfg, store, plan
        self.labeler, self.transcriber = labeler, transcriber
        self.sr = cfg.protocol.sample_rate
        self.items, self.recordings = load_corpus(store, plan)
        self._audio: dict[str, np.ndarray] = {}
        self._reference: dict[str, Any] = {}

    def audio(self, rid: str) -> np.ndarray:
        if rid not in self._audio:
            self._audio[rid] = read_recording(self.store, self.plan, rid, self.sr)
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

    def score_items(self, model: str, recs: dict[str, dict[str, Any]], item_ids: list[str]) -> list[dict[str, Any]]:
        """Rows of the corpus items ``item_ids`` (in corpus order); ``recs``: their cue-infer shard
        marker entries (``{item_id: entry}``; an item without one gets an error row)."""
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
            if entry.get("status") != "ok":
                errors[it.item_id] = f"continuation failed: {entry.get('reason') or 'unknown error'}"
                continue
            try:
                rec = json.loads(read_output(self.store, entry, "json"))
                out = decode(read_output(self.store, entry, "flac"), expected_rate=self.sr)[0]
                outputs[it.item_id] = (out, float(rec["start_s"]))
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
                vocab = vocabulary(rec_, it)
                out, t0 = outputs[it.item_id]
                m = analyse_response("model", out, t0, segments_s(model_segs[it.item_id], t0, self.sr), it, switch,
                                     end, self.sr, self.transcriber, vocab)
                a, r0, rsp = refs[it.item_id]
                r = analyse_response("reference", a, r0, rsp, it, switch, end, self.sr, self.transcriber, vocab)
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

    def score(self, model: str, items: list[tuple[str, dict[str, Any] | None]]) -> dict[str, Any]:
        """``items``: (item id, its cue-infer shard marker entry or None). Returns the rows by item
        id and this batch's counts (:func:`_counters`)."""
        before = _counters(self.scorer)
        rows = self.scorer.score_items(model, {iid: e for iid, e in items if e is not None}, [iid for iid, _ in items])
        after = _counters(self.scorer)
        return {"model": model, "rows": {r["item_id"]: r for r in rows}, **{k: after[k] - before[k] for k in after}}


def cue_score_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Score every model's continuations (see the module docstring) on the scoring actors of the
    score stage (:func:`harness.stages.score.on_scoring_actors`: ``score.num_cpus`` /
    ``num_gpus`` / ``actors``, ``score.actors=0`` in this process), batches of ``score.batch``
    items of one model, the longest fed spans first (VAD time grows with them). Returns
    ``{model: prefix}``; ``rows.json`` is in corpus order whatever the batching.

    Raises:
        StageInputMissing: the corpus, or a (applicable) model's cue-infer outputs, are incomplete.
        BatchesFailed: a batch failed (its actor died on every ``cluster.batch_attempts`` attempt,
            or the worker raised); raised once the other models are written, that model is not.
    """
    from harness.stages.score import heaviest_first, on_scoring_actors

    plan = CuePlan.from_config(cfg)
    lay = plan.layout
    require_stage(store, plan, plan.corpus, "cue-corpus")  # type: ignore[arg-type]
    todo = [m.name for m in cfg.models if not store.exists(lay.marker(plan.score[m.name]))]
    for name in sorted(set(m.name for m in cfg.models) - set(todo)):
        log.info("cue-score %s: complete at %s, skipped", name, plan.score[name])
    items = load_items(store, plan)
    work: dict[str, list[tuple[str, dict[str, Any] | None]]] = {}
    for name in todo:
        na = applicability(store, plan, name)
        if na is not None:
            put_json(store, lay.file(plan.score[name], ROWS), [])
            put_json(store, lay.marker(plan.score[name]), {"applicable": False, "reason": na.get("reason", "")})
            log.info("cue-score %s: not applicable (%s)", name, na.get("reason", ""))
        else:
            recs = continuation_records(store, plan, name)
            work[name] = [(it.item_id, recs.get(it.item_id)) for it in items]
    if not work:
        return dict(plan.score)
    c = cfg.cue
    fed = {it.item_id: min(it.switch_s(c.switch_lead_s), c.context_s) + c.window_s for it in items}
    weight = {(name, iid): fed[iid] for name in work for iid, _ in work[name]}
    merged = {name: {"rows": {}, "asr_calls": 0, "label_hits": 0, "label_misses": 0, "usd": 0.0, "usd_saved": 0.0}
              for name in work}
    batches = heaviest_first(work, weight, cfg.score.batch)
    failed: dict[int, BatchFailure] = {}
    for i, part in on_scoring_actors(cfg, "cue-score", CueScoring, batches):
        if isinstance(part, BatchFailure):
            failed[i] = part
            continue
        acc = merged[part.pop("model")]
        acc["rows"].update(part.pop("rows"))
        for k, v in part.items():
            acc[k] += v
    incomplete = {batches[i][0] for i in failed}  # their rows lack a batch: not written
    for name, acc in merged.items():
        if name in incomplete:
            continue
        prefix = plan.score[name]
        by_id = acc.pop("rows")
        rows = [by_id[it.item_id] for it in items]
        put_json(store, lay.file(prefix, ROWS), rows)
        n_err = sum(r["error"] is not None for r in rows)
        marker = {"applicable": True, "items": len(rows), "eligible": sum(r["eligible"] for r in rows),
                  "errors": n_err, "transcriber": cfg.cue.transcriber, "labeler": cfg.cue.labeler, **acc}
        put_json(store, lay.marker(prefix), marker)
        log.info("cue-score %s: %d items, %d eligible, %d errors, %d ASR calls, labeller %d hits / %d misses, $%.4f",
                 name, marker["items"], marker["eligible"], n_err, marker["asr_calls"], marker["label_hits"],
                 marker["label_misses"], marker["usd"])
    if failed:  # the other models are written; ASR and labeller results are cached, so a rerun pays little
        raise BatchesFailed("cue-score", [failed[i] for i in sorted(failed)], len(batches))
    return dict(plan.score)


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


def _counters(s: CueScorer) -> dict[str, Any]:
    lab = s.labeler
    return {"asr_calls": s.transcriber.asr_calls, "label_hits": lab.hits, "label_misses": lab.misses,
            "usd": lab.cost.usd, "usd_saved": lab.saved.usd}
