"""The ``cue-reduce`` stage of Duplex Cue (spec section 9; docs/cue.md, "Statistics", "Report"):
``cue_metrics.json``, ``cue_report.md``, ``cue_report.html`` and one timeline page per outcome
kind and model (``items/<model>/<item_id>.html`` + its stereo ``.flac``: B left,
the model right), under ``CuePlan.reduce``; the marker last."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from harness.cue.plan import CUE_REDUCE_VERSION, CuePlan
from harness.cue.stats import model_metrics
from harness.metrics.stats import BOOTSTRAP_SEED
from harness.models.registry import build_model
from harness.products.cue import continuation_entries, load_corpus, read_recording, read_rows
from harness.report.conversation import mix_flac
from harness.report.cue import PAPER_ANCHOR, cue_report, example_items, item_page, stereo_mix
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.store.base import ObjectStore, get_json

log = logging.getLogger("duplex_mpe")


def cue_metrics(cfg: RunConfig, rows_by_model: dict[str, list[dict[str, Any]]],
                markers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``cue_metrics.json``: per applicable model :func:`harness.cue.stats.model_metrics` plus its
    score marker (counts, cost) and the voice prompt its streams were given (``ModelInfo.voice_prompt``
    of the model as configured; constructing it loads no weights); the models not applicable with
    their reason; the settings and the paper anchor."""
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
        ms = next(m for m in cfg.models if m.name == name)
        voice = build_model(ms.target, ms.params).info.voice_prompt
        models[name] = {"applicable": True, "score": mk, "voice_prompt": voice,
                        **model_metrics(rows_by_model[name], c.bootstrap, BOOTSTRAP_SEED, cfg.metrics.min_n,
                                        c.bootstrap_unit)}
    return {"labeler": labeler, "transcriber": c.transcriber, "window_s": c.window_s, "switch_lead_s": c.switch_lead_s,
            "context_s": c.context_s, "review_context_s": c.review_context_s, "bootstrap": c.bootstrap,
            "bootstrap_unit": c.bootstrap_unit, "seed": BOOTSTRAP_SEED, "models": models, "not_applicable": na,
            "anchor": PAPER_ANCHOR}


class CueReduceStage(Stage):
    """Statistics, report and item pages of every model's ``rows.json`` (module docstring)."""

    name, version = "cue-reduce", CUE_REDUCE_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: CuePlan) -> list[Unit]:
        return [Unit(self.name, plan.reduce)]

    def inputs(self, plan: CuePlan) -> list[Unit]:
        return [Unit("cue-score", plan.score[m.name], m.name) for m in self.cfg.models]

    def compute(self, store: ObjectStore, plan: CuePlan, todo: list[Unit]):
        cfg, lay = self.cfg, plan.layout
        markers = {m.name: get_json(store, lay.marker(plan.score[m.name])) for m in cfg.models}
        rows_by_model = {m.name: read_rows(store, lay, plan.score[m.name]) for m in cfg.models}
        metrics = cue_metrics(cfg, rows_by_model, markers)
        examples = {m: example_items(rows_by_model[m]) for m in metrics["models"]}
        pages = _item_pages(cfg, store, plan, rows_by_model, examples)
        md, html = cue_report(metrics, cfg.run_id, examples)
        yield todo[0], Output({"models": list(metrics["models"]), "not_applicable": list(metrics["not_applicable"]),
                               "pages": len(pages) // 2},
                              {"cue_metrics.json": metrics, **pages, "cue_report.md": md.encode(),
                               "cue_report.html": html.encode()})


def _item_pages(cfg: RunConfig, store: ObjectStore, plan: CuePlan, rows_by_model: dict[str, list[dict[str, Any]]],
                examples: dict[str, dict[str, str]]) -> dict[str, bytes]:
    """Each example's page and mix (``items/<model>/<item_id>.html`` and ``.flac``); the span shown
    is ``review_context_s`` before the switch point to the window's end."""
    from harness.cue.scoring import span

    lay = plan.layout
    sr = cfg.protocol.sample_rate
    _, recordings = load_corpus(store, lay, plan.corpus)
    out: dict[str, bytes] = {}
    for model, ex in examples.items():
        rows = {r["item_id"]: r for r in rows_by_model[model]}
        recs = continuation_entries(store, lay, plan.infer[model], model) if ex else {}
        for iid in ex.values():
            row = rows[iid]
            rec = recordings[row["recording_id"]]
            t0, t1 = max(0.0, row["switch_s"] - cfg.cue.review_context_s), row["end_s"]
            b = span(read_recording(store, lay, plan.corpus, rec.recording_id, sr)[1], t0, t1, sr)
            entry = recs.get(iid)
            if entry is not None and entry.ok:
                origin = float(entry.json(store)["start_s"])
                model_audio = span(entry.audio(store, sr), t0, t1, sr, origin)
            else:
                model_audio = np.zeros_like(b)  # no output (an error row): a silent right channel
            base = f"items/{model}/{iid}"
            out[f"{base}.flac"] = mix_flac(stereo_mix(b, model_audio), sr)
            out[f"{base}.html"] = item_page(model, row, rec, t0, t1, audio=f"{iid}.flac").encode()
    return out
