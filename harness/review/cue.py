"""The human review kit for Duplex Cue items (spec section 9; docs/cue.md, "Human review").

Two reviewers label sampled responses Continued / Adapted / Yielded, independently of the
labeller; the import gives their agreement (percent, Cohen's kappa over three labels) and the
labeller's agreement with the final human labels, per condition ("model" names, and
``reference`` for A's recorded continuation). It reuses the Duplex-MPE kit's machinery: the
stratified seeded draw (:func:`harness.review.items.draw`), the page order, the CSV forms and
their validation (:mod:`harness.review.forms`), adjudication, :func:`~harness.review.results.combine`
and the import (:func:`harness.review.kit.import_kit`). Items are of kind ``cue``.

Sampling: per condition x intent x the labeller's label, :data:`~harness.review.items.PER_STRATUM`
items (all when fewer; the shortfall is recorded): a model's eligible items, and for the
reference every item whose recorded response got a label in any model's rows (the recording
is the same for every model, so each item is a candidate once). Under the run's ``cue-review/<reduce hash>``
prefix the export writes ``review.html`` (audio embedded: B on the left, the response on the
right, from ``review_context_s`` before the switch point to the window's end), ``review.csv``
and, last, ``items.json``; the import writes ``disagreements.csv``, ``results.md``, ``results.json``.
The cue's intent and the labeller's label sit in a closed box on the page, to open after deciding.

The **intent check** (the paper's 60-cue check of the corpus's intent labels; items of kind
``cue_intent``): :data:`INTENT_PER_STRATUM` corpus cues per intent, seeded, judged by two
reviewers as backchannel / collaboration / interruption from the recording alone (both recorded
channels, no model output, no response label); the import gives their agreement and the corpus's
intent labels against the final human labels ("judge vs humans", the paper: 49 of 60). Under
``cue-intent-review/<cue-corpus hash>``: the same files as the response kit.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.cue.plan import CuePlan
from harness.cue.schema import INTENTS, RESPONSES, CueItem, Recording
from harness.products.cue import continuation_entries, load_corpus, read_recording, read_rows
from harness.review.forms import REVIEW_COLUMNS, template_csv
from harness.review.items import PER_STRATUM, draw, page_order
from harness.review.page import CSS, _dl, _esc, flac_data_uri
from harness.runtime.config import RunConfig
from harness.store.base import ObjectStore, get_json, put_json

REFERENCE = "reference"
ITEMS_FILE = "items.json"
REVIEW_SAMPLE_RATE = 16_000
INSTRUCTIONS = (
    "Speaker A holds the floor; B contributes a cue (a backchannel, a collaboration such as a word, a correction "
    "or a completion, or an interruption). Listen to the clip (B on the <b>left</b> channel, A's side on the "
    "<b>right</b>: a model's output or A's recorded speech) and label how A's side responds to B's cue. "
    "<i>verdict</i>: <b>continued</b> (goes on as if nothing happened), <b>adapted</b> (acknowledges or takes up the "
    "cue within its turn: answers it, accepts B's word or correction, says \"oh right\", revises what it was saying) "
    "or <b>yielded</b> (stops and hands the floor to B). <i>transcript_ok</i>: <b>yes</b> when the transcript of A's "
    "side matches what you hear closely enough that the label would not change, else <b>no</b>. The clip starts "
    "before the cue; the window under review starts at the switch point shown. <b>adapted</b> is about uptake of the "
    "cue (rephrasing because of it included), not about whether the response is correct. The cue's intent and the "
    "labeller's label are in the closed box of each item: open it only after deciding.")
INTENT_PER_STRATUM = 20  # the paper's intent check: 60 cues, here 20 per intent
INTENT_INSTRUCTIONS = (
    "Speaker A holds the floor; B contributes a cue. Listen to the clip (B on the <b>left</b> channel, A on the "
    "<b>right</b>, both as recorded) and label the <b>intent of B's cue</b> (the words shown): <b>backchannel</b> "
    "(B signals listening: \"mm-hm\", \"right\", \"yeah\"), <b>collaboration</b> (B helps A's turn along: supplies a "
    "word, a correction, a clarification or a completion) or <b>interruption</b> (B bids for the floor: a question, "
    "an objection, a change of topic). Leave <i>transcript_ok</i> empty. The corpus's label is in the closed box: "
    "open it only after deciding.")


def review_prefix(plan: CuePlan) -> str:
    """``<run>/cue-review/<hash of the cue-reduce output>``: a kit belongs to one reduce output."""
    return plan.layout.stage("cue-review", plan.reduce.rsplit("/", 1)[1])


def cue_review_item(condition: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """The review item of one response (``condition``: a model name or :data:`REFERENCE`)."""
    side = "reference" if condition == REFERENCE else "model"
    return {"item_id": f"cue/{condition}/{row['item_id']}", "kind": "cue", "model": condition,
            "cue_item_id": row["item_id"], "recording_id": row["recording_id"], "intent": row["intent"],
            "judge_label": row[f"{side}_label"], "transcript": row[f"{side}_text"] or "",
            "cue_onset_s": row["cue_onset_s"], "switch_s": row["switch_s"], "end_s": row["end_s"]}


def sample_cue_items(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]],
                     per_stratum: int = PER_STRATUM) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Items per condition x intent x labeller label (see the module docstring).

    Args:
        rows_by_model: each applicable model's ``rows.json`` rows (models with no rows are skipped).

    Returns:
        ``(items, strata)`` with ``strata["cue/<condition>/<intent>/<label>"] = {"wanted",
        "available", "taken"}`` for every stratum.
    """
    pools: dict[str, list[Mapping[str, Any]]] = {m: [r for r in rows if r["eligible"]]
                                                 for m, rows in sorted(rows_by_model.items()) if rows}
    conditions = [(m, "model", rows) for m, rows in pools.items()]
    reference: dict[str, Mapping[str, Any]] = {}  # the same recording for every model: each item once
    for _, rows in sorted(rows_by_model.items()):
        for r in rows:
            if r["reference_label"] is not None:
                reference.setdefault(r["item_id"], r)
    if reference:
        conditions.append((REFERENCE, "reference", list(reference.values())))
    items: list[dict[str, Any]] = []
    strata: dict[str, Any] = {}
    for cond, side, rows in conditions:
        by: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
        for r in rows:
            by[r["intent"], r[f"{side}_label"]].append(r)
        for intent in INTENTS:
            for label in RESPONSES:
                pool = sorted(by[intent, label], key=lambda r: r["item_id"])
                taken = draw(pool, per_stratum, "cue", cond, intent, label)
                strata[f"cue/{cond}/{intent}/{label}"] = {"wanted": per_stratum, "available": len(pool),
                                                          "taken": len(taken)}
                items += [cue_review_item(cond, r) for r in taken]
    return items, strata


def _lines(recording: Recording, t0: float, t1: float) -> str:
    words = sorted([("A", w) for w in recording.a_words if t0 <= w.start_s < t1]
                   + [("B", w) for w in recording.b_words if t0 <= w.start_s < t1], key=lambda e: e[1].start_s)
    out: list[list[Any]] = []
    for spk, w in words:
        if out and out[-1][0] == spk:
            out[-1][2].append(w.text)
        else:
            out.append([spk, w.start_s, [w.text]])
    return "<br>".join(f"{t:.2f} {spk}: {_esc(' '.join(ws))}" for spk, t, ws in out) or "—"


def _page_head(title: str, run_id: str, fill: str, notes: Sequence[str], instructions: str) -> list[str]:
    """The opening of a cue review page: title, heading, what to fill in ``review.csv`` (``fill``,
    HTML), the kit's ``notes`` and the labelling ``instructions``."""
    return ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{title}: {_esc(run_id)}</title><style>{CSS}</style></head><body><main>",
            f"<h1>{title}: run <span class=id>{_esc(run_id)}</span></h1>",
            "<div class=instr><p>Review every item below and fill in <b>your own copy</b> of <code>review.csv</code> "
            f"(columns <code>{','.join(REVIEW_COLUMNS)}</code>; one row per item, in this page's order). Fill "
            f"{fill}</p>" + "".join(f"<p>{_esc(n)}</p>" for n in notes) + f"</div><p class=instr>{instructions}</p>"]


def cue_review_page(run_id: str, items: Sequence[Mapping[str, Any]], recordings: Mapping[str, Recording],
                    audio: Mapping[str, str], notes: Sequence[str], context_s: float) -> str:
    """The review page of cue items (in page and CSV order); ``audio``: a data URI per item id."""
    out = _page_head("Duplex Cue human review", run_id,
                     "<i>verdict</i> (continued / adapted / yielded) and <i>transcript_ok</i> (yes / no), and "
                     "<i>notes</i> for anything odd; do not change <i>item_id</i> or <i>kind</i>. Work independently "
                     "of the other reviewer; the items of a model and of the recorded reference are mixed on purpose.",
                     notes, INSTRUCTIONS)
    for row, it in enumerate(items, start=2):
        rec = recordings[it["recording_id"]]
        t0 = max(0.0, it["switch_s"] - context_s)
        body = _dl([("what was said before the switch point (recording)", _lines(rec, t0, it["switch_s"])),
                    ("B during the window", _lines(Recording(rec.recording_id, rec.sample_rate, rec.n_samples, (),
                                                             rec.b_words), it["switch_s"], it["end_s"])),
                    ("times", f"clip starts at {t0:.2f} s; switch point {it['switch_s']:.2f} s (at "
                              f"{it['switch_s'] - t0:.2f} s into the clip); cue onset {it['cue_onset_s']:.2f} s"),
                    ("clip (B left, A's side right)", f'<audio controls preload="none" src="{audio[it["item_id"]]}">'
                                                      "</audio>"),
                    ("A's side in the window, as transcribed", f"<q>{_esc(it['transcript'])}</q>")])
        body += (f"<details><summary>the cue's intent and the labeller's label (open after deciding)</summary>"
                 f"intent {_esc(it['intent'])}; labeller: {_esc(it['judge_label'])}</details>")
        out.append(f'<section class=item id="{html.escape(it["item_id"])}"><h3>CSV line {row}: '
                   f"<span class=id>{_esc(it['item_id'])}</span></h3>{body}</section>")
    out.append("</main></body></html>")
    return "\n".join(out)


def _clip(store: ObjectStore, plan: CuePlan, it: Mapping[str, Any], b: np.ndarray, sr: int, context_s: float,
          outputs: Mapping[str, Any], a: np.ndarray) -> str:
    """The item's stereo clip (B left, the response right) as a 16 kHz FLAC data URI."""
    from harness.audio.resample import resample
    from harness.cue.scoring import span
    from harness.report.conversation import mix_flac
    from harness.report.cue import stereo_mix

    t0, t1 = max(0.0, it["switch_s"] - context_s), it["end_s"]
    if it["model"] == REFERENCE:
        right = span(a, t0, t1, sr)
    else:
        entry = outputs[it["model"]][it["cue_item_id"]]
        right = span(entry.audio(store, sr), t0, t1, sr, float(entry.json(store)["start_s"]))
    mix = stereo_mix(span(b, t0, t1, sr), right)
    mix16 = np.stack([resample(mix[:, k], sr, REVIEW_SAMPLE_RATE) for k in range(2)], axis=1)
    return flac_data_uri(mix_flac(mix16, REVIEW_SAMPLE_RATE))


def export_cue_review(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Sample the cue items and write the review page, the CSV template and ``items.json``.

    Idempotent (the sample is a function of the score rows). Returns ``{"page", "csv", "items"}``
    keys. Raises :class:`harness.review.kit.ReviewError` when cue-reduce has not completed, or
    when an earlier export with different items exists (it is never overwritten).
    """
    from harness.review.kit import ReviewError

    plan = CuePlan.from_config(cfg)
    lay, sr = plan.layout, cfg.protocol.sample_rate
    prefix = review_prefix(plan)
    if not store.exists(lay.marker(plan.reduce)):
        raise ReviewError(f"cue-reduce has not completed at {plan.reduce}: run the cue job first (same overrides)")
    rows_by_model = {m.name: read_rows(store, lay, plan.score[m.name]) for m in cfg.models}
    items, strata = sample_cue_items(rows_by_model)
    items = page_order(items)
    short = [f"{k} {v['taken']}/{v['wanted']}" for k, v in strata.items() if v["taken"] < v["wanted"]]
    notes = [f"Per condition (each model, and A's recorded reference), intent and labeller label: {PER_STRATUM} "
             "eligible items. " + (f"Short strata (all available taken): {', '.join(short)}." if short
                                   else "Every stratum was full.")]
    manifest = {"run_id": cfg.run_id, "reduce": plan.reduce, "sample_rate": REVIEW_SAMPLE_RATE,
                "sample": {"strata": strata}, "items": items}
    key = {n: lay.file(prefix, n) for n in ("review.html", "review.csv", ITEMS_FILE)}
    if store.exists(key[ITEMS_FILE]) and get_json(store, key[ITEMS_FILE]) != manifest:
        raise ReviewError(f"{key[ITEMS_FILE]} holds a different sample; filled CSVs refer to it, so it is not "
                          "overwritten (move it away to export anew)")
    _, recordings = load_corpus(store, lay, plan.corpus)
    models = {it["model"] for it in items} - {REFERENCE}
    outputs = {m: continuation_entries(store, lay, plan.infer[m], m) for m in models}
    audio, stereo = {}, {}
    for it in items:
        rid = it["recording_id"]
        if rid not in stereo:
            stereo[rid] = read_recording(store, lay, plan.corpus, rid, sr)
        audio[it["item_id"]] = _clip(store, plan, it, stereo[rid][1], sr, cfg.cue.review_context_s, outputs,
                                     stereo[rid][0])
    page = cue_review_page(cfg.run_id, items, recordings, audio, notes, cfg.cue.review_context_s)
    store.put(key["review.html"], page.encode())
    store.put(key["review.csv"], template_csv(items).encode())
    put_json(store, key[ITEMS_FILE], manifest)
    return {"page": key["review.html"], "csv": key["review.csv"], "items": key[ITEMS_FILE]}


def intent_prefix(plan: CuePlan) -> str:
    """``<run>/cue-intent-review/<hash of the cue-corpus output>``: an intent kit belongs to one corpus."""
    return plan.layout.stage("cue-intent-review", plan.corpus.rsplit("/", 1)[1])


def sample_intent_items(items: Sequence[CueItem], lead_s: float, window_s: float,
                        per_stratum: int = INTENT_PER_STRATUM) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The intent check's items: ``per_stratum`` corpus cues per intent (all when fewer), seeded
    per intent; each carries the corpus's intent as its ``judge_label`` and no model output.
    Returns ``(items, strata)`` as :func:`sample_cue_items` (``"cue_intent/corpus/<intent>"``)."""
    out: list[dict[str, Any]] = []
    strata: dict[str, Any] = {}
    for intent in INTENTS:
        pool = sorted((it for it in items if it.intent == intent), key=lambda it: it.item_id)
        taken = draw(pool, per_stratum, "cue_intent", intent)
        strata[f"cue_intent/corpus/{intent}"] = {"wanted": per_stratum, "available": len(pool), "taken": len(taken)}
        for it in taken:
            switch = it.switch_s(lead_s)
            out.append({"item_id": f"cue-intent/{it.item_id}", "kind": "cue_intent", "model": "corpus",
                        "cue_item_id": it.item_id, "recording_id": it.recording_id, "intent": it.intent,
                        "judge_label": it.intent, "transcript": " ".join(w.text for w in it.cue_words),
                        "cue_onset_s": it.cue_onset_s, "switch_s": switch, "end_s": switch + window_s})
    return out, strata


def cue_intent_page(run_id: str, items: Sequence[Mapping[str, Any]], recordings: Mapping[str, Recording],
                    audio: Mapping[str, str], notes: Sequence[str], context_s: float) -> str:
    """The intent check's page (in page and CSV order): per cue the words before it, B's cue, the
    clip; the corpus's intent in a closed box. No model output and no response label."""
    out = _page_head("Duplex Cue intent check", run_id,
                     "<i>verdict</i> (backchannel / collaboration / interruption) and <i>notes</i> for anything odd; "
                     "do not change <i>item_id</i> or <i>kind</i>. Work independently of the other reviewer.",
                     notes, INTENT_INSTRUCTIONS)
    for row, it in enumerate(items, start=2):
        rec = recordings[it["recording_id"]]
        t0 = max(0.0, it["switch_s"] - context_s)
        body = _dl([("what was said before the cue (recording)", _lines(rec, t0, it["cue_onset_s"])),
                    ("B's cue", f"<q>{_esc(it['transcript'])}</q> (from {it['cue_onset_s']:.2f} s, "
                                f"{it['cue_onset_s'] - t0:.2f} s into the clip)"),
                    ("clip (B left, A right, as recorded)", f'<audio controls preload="none" '
                                                            f'src="{audio[it["item_id"]]}"></audio>')])
        body += (f"<details><summary>the corpus's intent (open after deciding)</summary>{_esc(it['judge_label'])}"
                 "</details>")
        out.append(f'<section class=item id="{html.escape(it["item_id"])}"><h3>CSV line {row}: '
                   f"<span class=id>{_esc(it['item_id'])}</span></h3>{body}</section>")
    out.append("</main></body></html>")
    return "\n".join(out)


def export_cue_intent_review(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """The intent check (module docstring): sample the corpus's cues and write the page, the CSV
    template and ``items.json`` under :func:`intent_prefix`. Idempotent; returns ``{"page", "csv",
    "items"}`` keys. Raises :class:`harness.review.kit.ReviewError` when cue-corpus has not
    completed, or when an earlier export with different items exists (never overwritten)."""
    from harness.audio.resample import resample
    from harness.cue.scoring import span
    from harness.report.conversation import mix_flac
    from harness.report.cue import stereo_mix
    from harness.review.kit import ReviewError

    plan = CuePlan.from_config(cfg)
    lay, sr, c = plan.layout, cfg.protocol.sample_rate, cfg.cue
    if not store.exists(lay.marker(plan.corpus)):
        raise ReviewError(f"cue-corpus has not completed at {plan.corpus}: run the cue job first (same overrides)")
    corpus_items, recordings = load_corpus(store, lay, plan.corpus)
    items, strata = sample_intent_items(corpus_items, c.switch_lead_s, c.window_s)
    items = page_order(items)
    short = [f"{k} {v['taken']}/{v['wanted']}" for k, v in strata.items() if v["taken"] < v["wanted"]]
    notes = [f"Per intent: {INTENT_PER_STRATUM} of the corpus's cues (the paper checked 60). "
             + (f"Short strata (all available taken): {', '.join(short)}." if short else "Every stratum was full.")]
    manifest = {"run_id": cfg.run_id, "reduce": plan.corpus, "sample_rate": REVIEW_SAMPLE_RATE,
                "sample": {"strata": strata}, "items": items}
    prefix = intent_prefix(plan)
    key = {n: lay.file(prefix, n) for n in ("review.html", "review.csv", ITEMS_FILE)}
    if store.exists(key[ITEMS_FILE]) and get_json(store, key[ITEMS_FILE]) != manifest:
        raise ReviewError(f"{key[ITEMS_FILE]} holds a different sample; filled CSVs refer to it, so it is not "
                          "overwritten (move it away to export anew)")
    audio: dict[str, str] = {}
    for it in items:
        x = read_recording(store, lay, plan.corpus, it["recording_id"], sr)
        t0, t1 = max(0.0, it["switch_s"] - c.review_context_s), it["end_s"]
        mix = stereo_mix(span(x[1], t0, t1, sr), span(x[0], t0, t1, sr))
        mix16 = np.stack([resample(mix[:, k], sr, REVIEW_SAMPLE_RATE) for k in range(2)], axis=1)
        audio[it["item_id"]] = flac_data_uri(mix_flac(mix16, REVIEW_SAMPLE_RATE))
    page = cue_intent_page(cfg.run_id, items, recordings, audio, notes, c.review_context_s)
    store.put(key["review.html"], page.encode())
    store.put(key["review.csv"], template_csv(items).encode())
    put_json(store, key[ITEMS_FILE], manifest)
    return {"page": key["review.html"], "csv": key["review.csv"], "items": key[ITEMS_FILE]}


def import_cue_intent_reviews(cfg: RunConfig, store: ObjectStore, csvs: Sequence[str | Path],
                              adjudication: str | Path | None = None) -> dict[str, Any]:
    """Two reviewers' CSVs of the intent check -> results (as :func:`import_cue_reviews`): their
    agreement and the corpus's intent labels against the final human labels."""
    from harness.review.kit import import_kit

    plan = CuePlan.from_config(cfg)
    return import_kit(store, intent_prefix(plan), cfg.run_id, plan.corpus, csvs, adjudication)


def import_cue_reviews(cfg: RunConfig, store: ObjectStore, csvs: Sequence[str | Path],
                       adjudication: str | Path | None = None) -> dict[str, Any]:
    """Two reviewers' CSVs of the cue kit -> results (as :func:`harness.review.kit.import_reviews`):
    reviewer agreement, and the labeller ("judge") against the final human labels per condition."""
    from harness.review.kit import import_kit

    plan = CuePlan.from_config(cfg)
    return import_kit(store, review_prefix(plan), cfg.run_id, plan.reduce, csvs, adjudication)


__all__ = ["INTENT_PER_STRATUM", "REFERENCE", "cue_intent_page", "cue_review_item", "cue_review_page",
           "export_cue_intent_review", "export_cue_review", "import_cue_intent_reviews", "import_cue_reviews",
           "intent_prefix", "review_prefix", "sample_cue_items", "sample_intent_items"]

