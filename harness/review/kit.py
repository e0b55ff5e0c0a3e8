"""Export and import of the human validation kit, in the store under the run's review prefix.

::

    <run>/review/<reduce-hash>/items.json         the sampled items (written last by the export)
    <run>/review/<reduce-hash>/review.html        the self-contained review page (audio embedded)
    <run>/review/<reduce-hash>/review.csv         the CSV each reviewer fills in (a copy each)
    <run>/review/<reduce-hash>/disagreements.csv  the reviewers' disagreements, to adjudicate
    <run>/review/<reduce-hash>/results.md         the results (Markdown)
    <run>/review/<reduce-hash>/results.json       the results, every reviewer's entries (written last)

The prefix carries the reduce stage's hash: items refer to one reduce output, and another
reduce (changed settings, new version) gets a kit of its own.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.audio.io import encode
from harness.audio.resample import resample
from harness.products.infer import read_entries
from harness.products.scenes import SceneSet
from harness.products.segments import read_segments
from harness.products.timeline import ClipReader, Timeline
from harness.report.document import to_html, to_markdown
from harness.review.forms import ReviewFormError, adjudication_csv, read_adjudication, read_review, template_csv
from harness.review.items import PER_STRATUM, page_order, sample_construction, sample_model_items
from harness.review.page import flac_data_uri, review_page
from harness.review.results import CONSTRUCTION_SHORTFALL, RESULTS_FILE, combine, disagreements, results_document
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.scoring.flow import window_audio
from harness.store.base import ObjectStore, get_json, put_json

REVIEW_SAMPLE_RATE = 16_000  # embedded audio: speech bandwidth, a third less page than 24 kHz
ITEMS_FILE = "items.json"


class ReviewError(RuntimeError):
    """The kit cannot be exported or imported (missing stage output, conflicting export)."""


def _key(plan: RunPlan, name: str) -> str:
    return plan.layout.file(plan.review, name)


def _flac(x: np.ndarray, sample_rate: int) -> str:
    return flac_data_uri(encode(resample(x, sample_rate, REVIEW_SAMPLE_RATE), REVIEW_SAMPLE_RATE))


def _events(store: ObjectStore, plan: RunPlan) -> dict[str, list[dict[str, Any]]]:
    import pyarrow.parquet as pq

    rows_by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in pq.read_table(io.BytesIO(store.get(plan.layout.file(plan.reduce, "events.parquet")))).to_pylist():
        rows_by_model[r["model"]].append(r)
    return rows_by_model


def sample_notes(sample: dict[str, Any]) -> list[str]:
    """Sentences about the sample's sizes and shortfalls, shown at the top of the review page."""
    c = sample["construction"]
    notes = [f"Construction checks: {c['taken']} scene pairs ({2 * c['taken']} conversations) of {c['available']} "
             f"eligible; the protocol asks for {c['wanted']}."
             + (" The run has fewer: all were taken." if c["taken"] < c["wanted"] else "")]
    short = [f"{k} {v['taken']}/{v['wanted']}" for k, v in sample["strata"].items() if v["taken"] < v["wanted"]]
    notes.append(f"Answers and windows: per model and condition, {PER_STRATUM} judged correct + {PER_STRATUM} "
                 f"judged incorrect T answers and {PER_STRATUM} backchannels + {PER_STRATUM} intrusions. "
                 + (f"Short strata (all available taken): {', '.join(short)}." if short else "Every stratum was full."))
    return notes


def export_review(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Sample the items and write the review page, the CSV template and ``items.json``.

    Idempotent: the sample is a function of the reduce output alone, so a second export writes
    the same items. Returns ``{"page", "csv", "items"}`` keys. Raises :class:`ReviewError` when
    reduce has not completed, or when an earlier export with *different* items exists (filled
    CSVs refer to it; it is never overwritten).
    """
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    if not store.exists(lay.marker(plan.reduce)):
        raise ReviewError(f"reduce has not completed at {plan.reduce}: run the pipeline first (same overrides)")
    sr = cfg.protocol.sample_rate
    scenes = SceneSet.read(store, lay, plan.scenes).by_id
    timeline = Timeline.read(store, lay, plan.synth)
    construction, c_sample = sample_construction(scenes.values(), set(timeline.conversations))
    model_items, strata = sample_model_items(_events(store, plan))
    items = page_order(construction + model_items)
    sample = {"construction": c_sample, "strata": strata}
    manifest = {"run_id": cfg.run_id, "reduce": plan.reduce, "sample_rate": REVIEW_SAMPLE_RATE, "sample": sample,
                "items": items}
    if store.exists(_key(plan, ITEMS_FILE)) and get_json(store, _key(plan, ITEMS_FILE)) != manifest:
        raise ReviewError(f"{_key(plan, ITEMS_FILE)} holds a different sample; filled CSVs refer to it, so it is "
                          "not overwritten (move it away to export anew)")

    audio: dict[str, list[str]] = {}
    clips: dict[str, str] = {}
    clip = ClipReader(store, lay, plan.synth, sr)
    for it in items:
        if it["kind"] == "construction":
            turns = timeline.conversations[it["scene_id"]]
            for t in turns:
                if t.clip not in clips:
                    clips[t.clip] = _flac(clip(t.clip), sr)
            audio[it["item_id"]] = [clips[t.clip] for t in turns]
    outputs = {}
    for model in {it["model"] for it in model_items}:
        entries = read_entries(store, lay, plan.infer[model], model)
        segs = read_segments(store, lay, plan.vad[model])
        for it in (i for i in model_items if i["model"] == model):
            sid = it["scene_id"]
            if (model, sid) not in outputs:
                outputs[model, sid] = entries[sid].audio(store, sr)
            speech = window_audio(outputs[model, sid], segs[sid].segments, it["audio_start"], it["audio_end"], sr)
            audio[it["item_id"]] = [_flac(speech, sr)]
        outputs.clear()

    page = review_page(cfg.run_id, items, scenes, audio, sample_notes(sample))
    store.put(_key(plan, "review.html"), page.encode())
    store.put(_key(plan, "review.csv"), template_csv(items).encode())
    put_json(store, _key(plan, ITEMS_FILE), manifest)
    return {"page": _key(plan, "review.html"), "csv": _key(plan, "review.csv"), "items": _key(plan, ITEMS_FILE)}


def import_reviews(cfg: RunConfig, store: ObjectStore, csvs: Sequence[str | Path],
                   adjudication: str | Path | None = None) -> dict[str, Any]:
    """Validate two reviewers' filled CSVs (and an optional adjudication CSV), compute and store the results.

    Nothing is written unless every file is valid. Writes ``disagreements.csv`` (the open and
    adjudicated disagreements, ready to adjudicate), ``results.md``, ``results.html`` and, last,
    ``results.json``, all beside the kit; the run's report is not touched (it says where these are).

    Returns:
        the results (see :func:`harness.review.results.combine`) plus ``keys``.

    Raises:
        ReviewError: no export, or not exactly two different review files.
        ReviewFormError: every problem in the CSVs, by file, line and column.
    """
    plan = RunPlan.from_config(cfg)
    return import_kit(store, plan.review, cfg.run_id, plan.reduce, csvs, adjudication)


def import_kit(store: ObjectStore, review_prefix: str, run_id: str, reduce_prefix: str, csvs: Sequence[str | Path],
               adjudication: str | Path | None = None) -> dict[str, Any]:
    """:func:`import_reviews` for the kit exported under ``review_prefix`` (Duplex-MPE's or
    Duplex Cue's, :mod:`harness.review.cue`), whose items refer to ``reduce_prefix``."""

    def key(name: str) -> str:
        return f"{review_prefix}/{name}"

    if not store.exists(key(ITEMS_FILE)):
        raise ReviewError(f"no review export at {review_prefix}: run the export first (review.action=export)")
    paths = [Path(p) for p in csvs]
    if len(paths) != 2:
        raise ReviewError(f"review.csv needs exactly two reviewers' CSVs, got {len(paths)}: {[str(p) for p in paths]}")
    if paths[0].resolve() == paths[1].resolve():
        raise ReviewError(f"both review CSVs are the same file {paths[0]}: two reviewers review independently")
    manifest = get_json(store, key(ITEMS_FILE))
    items = {it["item_id"]: it for it in manifest["items"]}
    problems: list[str] = []
    reviews = [read_review(p, items, problems) for p in paths]
    if problems:
        raise ReviewFormError(problems)
    disputed = disagreements(manifest["items"], reviews)
    resolved = read_adjudication(adjudication, items, disputed, problems) if adjudication else {}
    if problems:
        raise ReviewFormError(problems)
    names = [p.stem for p in paths] if paths[0].stem != paths[1].stem else [str(p) for p in paths]
    results = combine(manifest["items"], reviews, names, resolved)
    results.update(run_id=run_id, reduce=reduce_prefix, sample=manifest["sample"],
                   reviews=dict(zip(names, reviews, strict=True)), shortfalls=_shortfalls(manifest["sample"]),
                   adjudication=str(adjudication) if adjudication else None)
    keys = {"disagreements": key("disagreements.csv"), "markdown": key("results.md"), "html": key("results.html"),
            "json": key(RESULTS_FILE)}
    store.put(keys["disagreements"], adjudication_csv(disputed, resolved).encode())
    doc = results_document(results, run_id)
    store.put(keys["markdown"], to_markdown(doc).encode())
    store.put(keys["html"], to_html(doc).encode())
    put_json(store, keys["json"], results)
    return {**results, "keys": keys}


def _shortfalls(sample: dict[str, Any]) -> dict[str, Any]:
    c = sample.get("construction")  # a Duplex Cue kit has none
    out = {CONSTRUCTION_SHORTFALL: c} if c and c["taken"] < c["wanted"] else {}
    out.update({k: v for k, v in sample["strata"].items() if v["taken"] < v["wanted"]})
    return out
