"""The ``cue-reduce`` stage of Duplex Cue (spec section 9; docs/cue.md, "Statistics", "Report"):
``cue_metrics.json``, ``cue_report.md``, ``cue_report.html`` and one timeline page per outcome
kind and model (``items/<model>/<item_id>.html`` + its stereo ``.flac``: B left,
the model right), under ``CuePlan.reduce``; the marker last."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from harness.audio.io import decode
from harness.cue.plan import CuePlan
from harness.cue.stats import model_metrics
from harness.metrics.stats import BOOTSTRAP_SEED
from harness.report.conversation import mix_flac
from harness.report.cue import PAPER_ANCHOR, cue_report, example_items, item_page, stereo_mix
from harness.runtime.config import RunConfig
from harness.runtime.shard import read_output
from harness.stages.common import require_stage, stage_done
from harness.stages.cue_corpus import read_recording
from harness.stages.cue_score import ROWS, continuation_records, load_corpus
from harness.store.base import ObjectStore, get_json, put_json

log = logging.getLogger("duplex_mpe")


def cue_metrics(cfg: RunConfig, rows_by_model: dict[str, list[dict[str, Any]]],
                markers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``cue_metrics.json``: per applicable model :func:`harness.cue.stats.model_metrics` plus its
    score marker (counts, cost); the models not applicable with their reason; the settings and
    the paper anchor."""
    c = cfg.cue
    labeler = next((r["labeler"] for rows in rows_by_model.values() for r in rows), None)
    if labeler is None:
        from harness.cue.scoring import build_labeler

        labeler = getattr(build_labeler(c.labeler, c.labeler_params), "description", c.labeler)
    models: dict[str, Any] = {}
    na: dict[str, str] = {}
    for name, mk in markers.items():
        if mk.get("applicable") is False:
            na[name] = mk.get("reason", "")
            continue
        models[name] = {"applicable": True, "score": mk,
                        **model_metrics(rows_by_model[name], c.bootstrap, BOOTSTRAP_SEED, cfg.metrics.min_n)}
    return {"labeler": labeler, "transcriber": c.transcriber, "window_s": c.window_s, "switch_lead_s": c.switch_lead_s,
            "context_s": c.context_s, "review_context_s": c.review_context_s, "bootstrap": c.bootstrap,
            "seed": BOOTSTRAP_SEED, "models": models, "not_applicable": na, "anchor": PAPER_ANCHOR}


def cue_reduce_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Statistics, report and item pages of every model's ``rows.json``. Returns the reduce prefix.

    Raises:
        StageInputMissing: a model's cue-score has not completed.
    """
    plan = CuePlan.from_config(cfg)
    lay = plan.layout
    if stage_done(store, plan, plan.reduce, "cue-reduce"):  # type: ignore[arg-type]
        return plan.reduce
    rows_by_model, markers = {}, {}
    for m in cfg.models:
        require_stage(store, plan, plan.score[m.name], f"cue-score {m.name}")  # type: ignore[arg-type]
        markers[m.name] = get_json(store, lay.marker(plan.score[m.name]))
        rows_by_model[m.name] = get_json(store, lay.file(plan.score[m.name], ROWS))
    metrics = cue_metrics(cfg, rows_by_model, markers)
    put_json(store, lay.file(plan.reduce, "cue_metrics.json"), metrics)
    examples = {m: example_items(rows_by_model[m]) for m in metrics["models"]}
    pages = _item_pages(cfg, store, plan, rows_by_model, examples)
    md, html = cue_report(metrics, cfg.run_id, examples)
    store.put(lay.file(plan.reduce, "cue_report.md"), md.encode())
    store.put(lay.file(plan.reduce, "cue_report.html"), html.encode())
    put_json(store, lay.marker(plan.reduce), {"models": list(metrics["models"]),
                                              "not_applicable": list(metrics["not_applicable"]), "pages": pages})
    return plan.reduce


def _item_pages(cfg: RunConfig, store: ObjectStore, plan: CuePlan, rows_by_model: dict[str, list[dict[str, Any]]],
                examples: dict[str, dict[str, str]]) -> int:
    """Write each example's page and mix; the span shown is ``review_context_s`` before the switch
    point to the window's end. Returns the number of pages."""
    from harness.cue.scoring import span

    lay = plan.layout
    sr = cfg.protocol.sample_rate
    _, recordings = load_corpus(store, plan)
    n = 0
    for model, ex in examples.items():
        rows = {r["item_id"]: r for r in rows_by_model[model]}
        recs = continuation_records(store, plan, model) if ex else {}
        for iid in ex.values():
            row = rows[iid]
            rec = recordings[row["recording_id"]]
            t0, t1 = max(0.0, row["switch_s"] - cfg.cue.review_context_s), row["end_s"]
            b = span(read_recording(store, plan, rec.recording_id, sr)[1], t0, t1, sr)
            entry = recs.get(iid, {})
            if entry.get("status") == "ok":
                out = decode(read_output(store, entry, "flac"), expected_rate=sr)[0]
                origin = float(json.loads(read_output(store, entry, "json"))["start_s"])
                model_audio = span(out, t0, t1, sr, origin)
            else:
                model_audio = np.zeros_like(b)  # no output (an error row): a silent right channel
            base = f"items/{model}/{iid}"
            store.put(lay.file(plan.reduce, f"{base}.flac"), mix_flac(stereo_mix(b, model_audio), sr))
            page = item_page(model, row, rec, t0, t1, audio=f"{iid}.flac")
            store.put(lay.file(plan.reduce, f"{base}.html"), page.encode())
            n += 1
    return n
