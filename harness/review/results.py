"""Two reviewers' verdicts -> the human validation results (spec section 6), and their report.

For each kind of item (:data:`~harness.review.items.KINDS`):

* **reviewer agreement**: percent agreement and Cohen's kappa of the two reviewers, for
  ``verdict`` and (answer/window items) ``transcript_ok``;
* the **final** value of an item's field is the reviewers' common value, or the adjudicated one
  where they disagree; a disagreement without adjudication stays **open** and the item is left
  out of the rates below for that field (the results say how many);
* **pass rate**: share of items whose final verdict is the kind's pass value (construction
  ``pass``, answer ``correct``, window ``backchannel``);
* **judge agreement** (answer/window): the judge's label vs the final human verdict, percent and
  kappa. The sample is stratified by the judge's label (half each), so this is agreement on a
  balanced sample, not the corpus-wide rate;
* **ASR agreement** (answer/window): share of items whose transcript the reviewers marked right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.metrics.stats import rater_agreement
from harness.report.document import Document, Paragraph, Section, Table
from harness.review.forms import FIELDS, allowed
from harness.review.items import JUDGE_TO_VERDICT, KINDS, PER_STRATUM, TRANSCRIPT_OK, VERDICTS
from harness.store.base import ObjectStore, get_json

RESULTS_FILE = "results.json"  # under the run's review prefix, written last by the import


def load_results(store: ObjectStore, review_prefix: str) -> dict[str, Any] | None:
    """The imported results under ``review_prefix`` (``RunPlan.review``), or ``None`` when none exist."""
    key = f"{review_prefix}/{RESULTS_FILE}"
    return get_json(store, key) if store.exists(key) else None


def disagreements(items: Sequence[Mapping[str, Any]], reviews: Sequence[Mapping[str, Mapping[str, str]]]
                  ) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(item_id, field): (reviewer_1 value, reviewer_2 value)}`` where the two differ, in item order."""
    out = {}
    for it in items:
        for field in FIELDS:
            a, b = (r[it["item_id"]][field] for r in reviews)
            if a != b:
                out[it["item_id"], field] = (a, b)
    return out


def _rate(hits: int, n: int) -> dict[str, Any]:
    return {"n": n, "hits": hits, "rate": hits / n if n else None}


def combine(items: Sequence[Mapping[str, Any]], reviews: Sequence[Mapping[str, Mapping[str, str]]],
            reviewers: Sequence[str], adjudicated: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    """The results of two complete, validated reviews (see the module docstring).

    Args:
        items: the exported items (``item_id``, ``kind``, ``model``, ``judge_label``).
        reviews: two ``{item_id: {"verdict", "transcript_ok", "notes"}}`` covering every item.
        reviewers: their names (the CSV file names).
        adjudicated: ``{(item_id, field): value}`` resolving disagreements.

    Returns:
        a JSON-able dict: ``reviewers``, ``disagreements`` (each with its adjudicated ``value`` or
        ``None``), ``open_disagreements``, ``kinds`` (per kind: ``items``, ``reviewer_agreement``,
        ``pass_rate``, and for answer/window ``judge_agreement``, ``transcript_ok`` and
        ``by_model``), and ``final`` (per item, the final value of each field, ``None`` when open).
    """
    if len(reviews) != 2 or len(reviewers) != 2:
        raise ValueError("exactly two reviews are combined")
    disputed = disagreements(items, reviews)
    final: dict[str, dict[str, str | None]] = {}
    for it in items:
        iid = it["item_id"]
        final[iid] = {f: (adjudicated.get((iid, f)) if (iid, f) in disputed else reviews[0][iid][f])
                      for f in FIELDS}
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        group = [it for it in items if it["kind"] == kind]
        if not group:
            continue
        ids = [it["item_id"] for it in group]
        entry: dict[str, Any] = {"items": len(group), "reviewer_agreement": {
            f: rater_agreement([reviews[0][i][f] for i in ids], [reviews[1][i][f] for i in ids], allowed(kind, f))
            for f in FIELDS if allowed(kind, f)}}
        verdicts = [final[i]["verdict"] for i in ids if final[i]["verdict"] is not None]
        entry["pass_rate"] = _rate(sum(v == VERDICTS[kind][0] for v in verdicts), len(verdicts))
        if kind != "construction":
            entry.update(_judge_and_asr(group, final, kind))
            entry["by_model"] = {m: _judge_and_asr([it for it in group if it["model"] == m], final, kind)
                                 for m in sorted({it["model"] for it in group})}
        kinds[kind] = entry
    return {"reviewers": list(reviewers),
            "disagreements": [{"item_id": i, "field": f, "reviewer_1": a, "reviewer_2": b,
                               "value": adjudicated.get((i, f))} for (i, f), (a, b) in disputed.items()],
            "open_disagreements": sum((k not in adjudicated) for k in disputed),
            "kinds": kinds, "final": final}


def _judge_and_asr(group: Sequence[Mapping[str, Any]], final: Mapping[str, Mapping[str, str | None]],
                   kind: str) -> dict[str, Any]:
    judged = [(JUDGE_TO_VERDICT[it["judge_label"]], final[it["item_id"]]["verdict"]) for it in group
              if final[it["item_id"]]["verdict"] is not None]
    asr = [final[it["item_id"]]["transcript_ok"] for it in group if final[it["item_id"]]["transcript_ok"] is not None]
    return {"judge_agreement": rater_agreement([j for j, _ in judged], [h for _, h in judged], VERDICTS[kind]),
            "transcript_ok": _rate(sum(v == TRANSCRIPT_OK[0] for v in asr), len(asr))}


# ------------------------------------------------------------------------------- report

CONSTRUCTION_SHORTFALL = "construction pairs"  # key of the construction sample in ``shortfalls``
KIND_TITLES = {"construction": "construction checks", "answer": "T answers", "window": "N1-N3 windows",
               "cue": "Duplex Cue responses", "cue_intent": "Duplex Cue intents"}


def _pct(a: Mapping[str, Any] | None) -> str:
    """``85.0 % / κ 0.700 (n=20)``; ``—`` when not applicable."""
    if a is None:
        return "—"
    if not a["n"]:
        return "n/a (n=0)"
    kappa = "undefined" if a["kappa"] is None else f"{a['kappa']:.3f}"
    return f"{a['percent']:.1f} % / κ {kappa} (n={a['n']})"


def _share(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return "—"
    return f"n/a (n={r['n']})" if r["rate"] is None else f"{r['rate']:.3f} ({r['hits']}/{r['n']})"


def report_section(run_id: str, review_prefix: str) -> Section:
    """The run report's "Human validation" section: how to produce the results and where they are
    kept. The report never reads them (reduce does not depend on the review that depends on it):
    the import writes its own pages beside the kit."""
    return Section("Human validation", [Paragraph(
        f"`make review-export RUN={run_id}` writes the review page and the CSV to fill in; after two reviewers "
        f"have filled it, `make review-import RUN={run_id} REVIEWS=a.csv,b.csv` (optionally `ADJUDICATION=c.csv`) "
        f"writes the results beside the kit: `{review_prefix}/results.md` and `results.html` (and "
        "`results.json`). Add the run's other overrides as `ARGS=\"...\"` (docs/review.md).")])


def summary_section(results: Mapping[str, Any], run_id: str) -> Section:
    """The summary of imported results (the first section of ``results.md`` / ``results.html``)."""
    sec = Section("Human validation")
    rows = []
    for kind in (k for k in KINDS if k in results["kinds"]):  # a fixed order: stored JSON sorts keys
        e = results["kinds"][kind]
        ra = e["reviewer_agreement"]
        rows.append((KIND_TITLES[kind], str(e["items"]), _pct(ra["verdict"]), _pct(ra.get("transcript_ok")),
                     _share(e["pass_rate"]), _pct(e.get("judge_agreement")), _share(e.get("transcript_ok"))))
    sec.blocks.append(Table(("items", "n", "reviewers agree (verdict)", "reviewers agree (transcript)",
                             "pass rate", "judge vs humans", "transcript right"), rows))
    n_dis, n_open = len(results["disagreements"]), results["open_disagreements"]
    short = results.get("shortfalls", {})
    pairs = short.get(CONSTRUCTION_SHORTFALL)
    strata = len(short) - (pairs is not None)
    sec.blocks.append(Paragraph(
        f"Reviewers {', '.join(f'`{r}`' for r in results['reviewers'])}; {n_dis} disagreement(s), "
        + (f"{n_open} still open (left out of the rates; adjudicate them in `disagreements.csv`). " if n_open
           else "all adjudicated. ")
        + "Pass rate: construction `pass`, answer `correct`, window `backchannel`. Judge vs humans is measured "
        "on a sample stratified by the judge's label (half each), not corpus-wide. "
        + (f"Construction: {pairs['taken']} scene pairs of {pairs['wanted']} (all the run has). " if pairs else "")
        + (f"{strata} answer/window strata had fewer than {PER_STRATUM} items and were taken whole (`results.md`)."
           if strata else "Every answer/window stratum was full.")))
    return sec


def results_document(results: Mapping[str, Any], run_id: str) -> Document:
    """``results.md`` / ``results.html``: the summary, judge and ASR agreement per model, and every
    disagreement."""
    doc = Document(f"Human validation: run `{run_id}`")
    doc.sections.append(summary_section(results, run_id))
    kinds = results["kinds"]
    rows = [(KIND_TITLES[kind], m, _pct(e["judge_agreement"]), _share(e["transcript_ok"]))
            for kind in KINDS if kind in kinds for m, e in sorted(kinds[kind].get("by_model", {}).items())]
    if rows:
        doc.sections.append(Section("Per model", [Table(("items", "model", "judge vs humans", "transcript right"),
                                                        rows)]))
    short = sorted((k, v) for k, v in results.get("shortfalls", {}).items() if k != CONSTRUCTION_SHORTFALL)
    if short:
        doc.sections.append(Section("Short samples", [Table(
            ("stratum (kind/model/condition/judge label)", "available", "taken", "wanted"),
            [(k, str(v["available"]), str(v["taken"]), str(v["wanted"])) for k, v in short])]))
    dis = [(d["item_id"], d["field"], d["reviewer_1"] or "(empty)", d["reviewer_2"] or "(empty)",
            d["value"] or "open") for d in results["disagreements"]]
    doc.sections.append(Section("Disagreements", [Table(("item", "field", *results["reviewers"], "adjudicated"), dis)]
                                if dis else [Paragraph("The reviewers agreed on every item.")]))
    return doc
