"""The Duplex Cue report (spec section 9; docs/cue.md, "Report"): the response distributions per
intent, model vs human reference, the paired difference, the eligibility funnel, the models
not applicable, the paper's anchor beside the run's figures, and one timeline page per
outcome kind and model.

Built on the shared document model (:mod:`harness.report.document`), so the Markdown and the
HTML versions hold the same blocks. Everything is rendered from ``cue_metrics.json``
(:func:`harness.stages.cue_reduce.cue_metrics`) and the score rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.cue.schema import INTENTS, RESPONSES, Recording
from harness.cue.scoring import EXCLUSIONS, RULE_LABELER
from harness.report.document import Document, Figure, Paragraph, Section, Table, p_value, to_html, to_markdown

#: The paper's case study (spec section 9): PersonaPlex on 66 collaboration pairs.
PAPER_ANCHOR: dict[str, Any] = {
    "model": "PersonaPlex (nvidia/personaplex-7b-v1)", "intent": "collaboration", "pairs": 66,
    "reference": {"adapted": 0.682},
    "model_shares": {"adapted": 0.348, "continued": 0.424, "yielded": 0.227},
    "scoreable_pairs": 208, "cues": 300,
}
EXCLUSION_TITLES = {"error": "continuation error", "model_inactive_at_onset": "model not speaking at the cue onset",
                    "reference_inactive_at_onset": "A not speaking at the cue onset (recording)",
                    "model_unscoreable": "model response not labelled", "reference_unscoreable":
                    "reference response not labelled"}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _share(dist: Mapping[str, Any], r: str) -> str:
    """``34.8 % [22.1, 47.0] (23/66)``."""
    if not dist["n"]:
        return "n/a (n=0)"
    lo, hi = dist["ci"][r]
    return f"{100 * dist['shares'][r]:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] ({dist['counts'][r]}/{dist['n']})"


def anchor_table(metrics: Mapping[str, Any]) -> Table:
    """The paper's figures beside each applicable model's collaboration figures."""
    a = PAPER_ANCHOR
    models = [m for m, e in metrics["models"].items() if e.get("applicable", True)]
    header = ("figure", f"paper: {a['model']}", *models)
    rows = [("collaboration pairs (eligible)", str(a["pairs"]),
             *(str(metrics["models"][m]["intents"]["collaboration"]["model"]["n"]) for m in models)),
            ("humans (reference) adapted", _pct(a["reference"]["adapted"]),
             *(_pct(metrics["models"][m]["intents"]["collaboration"]["reference"]["shares"]["adapted"])
               for m in models))]
    for r in ("adapted", "continued", "yielded"):
        rows.append((f"model {r}", _pct(a["model_shares"][r]),
                     *(_pct(metrics["models"][m]["intents"]["collaboration"]["model"]["shares"][r]) for m in models)))
    rows.append(("scoreable pairs / cues", f"{a['scoreable_pairs']} / {a['cues']}",
                 *(f"{metrics['models'][m]['funnel']['eligible']} / {metrics['models'][m]['funnel']['items']}"
                   for m in models)))
    return Table(header, rows, caption="Paper anchor (spec section 9): the run's collaboration figures beside the "
                                       "paper's; the run's corpus, labeller and model differ, so they are context, "
                                       "not a replication, unless all three match.")


def cue_sections(metrics: Mapping[str, Any], examples: Mapping[str, Mapping[str, str]] | None = None,
                 link_prefix: str = "") -> list[Section]:
    """The report's sections (see the module docstring).

    Args:
        metrics: ``cue_metrics.json``.
        examples: per model ``{label: item_id}`` of the timeline pages written, linked as
            ``{link_prefix}items/<model>/<item_id>.html``.
    """
    labeler = metrics["labeler"]
    intro = [Paragraph(f"Labeller: **{labeler}**; transcriber `{metrics['transcriber']}`; window "
                       f"{metrics['window_s']:g} s after the switch point ({metrics['switch_lead_s'] * 1000:.0f} ms "
                       f"before the cue), up to {metrics['context_s']:g} s of teacher-forced context. Intervals: "
                       f"{metrics['bootstrap_unit']} bootstrap ({metrics['bootstrap_unit']}s resampled), "
                       f"{metrics['bootstrap']} resamples, seed {metrics['seed']}, 95 % percentile. "
                       "Only eligible items count (funnel below); error rows never count as a response.")]
    spend = [e["score"] for e in metrics["models"].values() if e.get("score")]
    if spend:
        total = {k: sum(sp.get(k, 0) for sp in spend) for k in ("asr_calls", "label_misses", "label_hits", "usd",
                                                                 "usd_saved")}
        intro.append(Paragraph(
            f"Scoring cost: {total['asr_calls']} ASR calls; labeller {total['label_misses']} paid calls, "
            f"{total['label_hits']} cached, ${total['usd']:.4f} spent (${total['usd_saved']:.4f} saved by the cache)."))
    voices = {m: e["voice_prompt"] for m, e in metrics["models"].items() if e.get("voice_prompt")}
    if voices:
        given = "; ".join(f"{m} `{v}`" for m, v in voices.items())
        intro.append(Paragraph(f"Voice prompt given to cue streams: {given}"
                               " (a choice: `model.<name>.params.voice_prompt`; docs/cue.md, \"Forced voice\")."))
    if labeler == RULE_LABELER:
        intro.append(Paragraph("The labels come from the offline **rule stand-in**, not from the paper's reviewer: "
                               "read them as a pipeline check (docs/cue.md, \"The rule labeller\")."))
    secs = [Section("Duplex Cue", intro), Section("Duplex Cue: paper anchor", [anchor_table(metrics)])]
    dist_rows, paired_rows, table_rows, funnel_rows, check_rows = [], [], [], [], []
    for m, e in metrics["models"].items():
        if not e.get("applicable", True):
            continue
        for intent in (*INTENTS, "all"):
            d = e["intents"][intent]
            for cond in ("model", "reference"):
                dist_rows.append((m, intent, cond, str(d[cond]["n"]), *(_share(d[cond], r) for r in RESPONSES)))
            p = d["paired"]
            paired_rows.append((m, intent, str(p["n"]), str(p["model_only"]), str(p["reference_only"]),
                                "n/a" if p["diff"] is None else f"{100 * p['diff']:+.1f} pp [{100 * p['ci'][0]:+.1f}, "
                                                                f"{100 * p['ci'][1]:+.1f}]",
                                p_value(p["p_mcnemar"], p["p_mcnemar"] < 0.05)))
            h = d["homogeneity"]
            test = f"χ² {h['chi2']:.2f}, df {h['df']}, " + p_value(h["p"], h["p"] < 0.05)
            for i, rec in enumerate(RESPONSES):
                table_rows.append((m, intent, rec, *(str(v) for v in d["table"][i]), test if i == 0 else ""))
            f = d["funnel"]
            funnel_rows.append((m, intent, str(f["items"]), *(str(f["excluded"][x]) for x in EXCLUSIONS),
                                str(f["eligible"])))
        c = e["labeller_check"]
        if c["n"]:
            check_rows.append((m, str(c["n"]), str(c["agree"]), _pct(c["share"]),
                               "; ".join(f"{k}: " + ", ".join(f"{v} {lab}" for lab, v in row.items() if v)
                                         for k, row in c["confusion"].items() if any(row.values()))))
    secs.append(Section("Duplex Cue: response distributions", [Table(
        ("model", "intent", "condition", "n", *RESPONSES), dist_rows,
        caption="Share [95 % bootstrap interval] (count/n) of each response among the eligible items; the reference "
                "is A's recorded continuation over the same window, labelled by the same labeller.")]
                            if dist_rows else [Paragraph("No applicable model.")]))
    secs.append(Section("Duplex Cue: paired difference", [Table(
        ("model", "intent", "pairs", "model adapted only", "reference adapted only", "adapted: model − reference",
         "exact McNemar p"), paired_rows,
        caption="Adapted vs not, paired by item; * p < 0.05 (not corrected for the intents tested).")]
                            if paired_rows else [Paragraph("No applicable model.")]))
    secs.append(Section("Duplex Cue: paired responses", [Table(
        ("model", "intent", "recorded A", *(f"model {r}" for r in RESPONSES), "Stuart-Maxwell"), table_rows,
        caption="Per eligible cue, the recorded response (rows) against the model's (columns); Stuart-Maxwell tests "
                "whether the two response distributions differ in any direction (marginal homogeneity of the "
                "table; * p < 0.05, not corrected for the intents tested).")]
                            if table_rows else [Paragraph("No applicable model.")]))
    secs.append(Section("Duplex Cue: eligibility funnel", [Table(
        ("model", "intent", "items", *(EXCLUSION_TITLES[x] for x in EXCLUSIONS), "eligible"), funnel_rows,
        caption="An item is excluded by the first reason that applies, in this order.")]
                            if funnel_rows else [Paragraph("No applicable model.")]))
    if check_rows:
        secs.append(Section("Duplex Cue: labeller check", [Table(
            ("model", "items with a known label", "reference labelled as known", "share", "known: labelled"),
            check_rows, caption="The labeller's reference labels against the labels the generated corpus has by "
                                "construction (the same for every model when the same items are eligible).")]))
    na = metrics["not_applicable"]
    secs.append(Section("Duplex Cue: models not applicable", [
        Table(("model", "why"), [(m, why or "does not declare TEACHER_FORCING") for m, why in na.items()],
              caption="Not run (teacher forcing is a declared capability); never scored as silence.")
        if na else Paragraph("Every model was applicable.")]))
    if examples:
        rows = [(m, lab, f"[{iid}]({link_prefix}items/{m}/{iid}.html)") for m, ex in examples.items()
                for lab, iid in ex.items()]
        secs.append(Section("Duplex Cue: example items", [Table(("model", "outcome", "timeline page"), rows)]))
    return secs


def cue_report(metrics: Mapping[str, Any], run_id: str, examples: Mapping[str, Mapping[str, str]] | None = None
               ) -> tuple[str, str]:
    """``(markdown, html)`` of the Duplex Cue report."""
    doc = Document(f"Duplex Cue: run `{run_id}`", sections=cue_sections(metrics, examples))
    return to_markdown(doc), to_html(doc)


def example_items(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{outcome: item_id}``: the first item (by id) of each outcome kind: each model label among
    the eligible items, then each exclusion reason (``"excluded: <reason>"``; ``"error"`` for
    error rows), so a model with nothing eligible still gets a page that shows why."""
    out: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: r["item_id"]):
        key = r["model_label"] if r["eligible"] else ("error" if r["error"] else f"excluded: {r['exclusion']}")
        out.setdefault(key, r["item_id"])
    return out


# ------------------------------------------------------------------------------- item pages


def item_timeline(row: Mapping[str, Any], recording: Recording, t0: float, t1: float,
                  geometry: dict[str, float] | None = None) -> bytes:
    """PNG of one item over ``[t0, t1)`` seconds of the recording: B's words, A's recorded speech
    and words (the reference), the model's speech and words, the window shaded, the cue onset
    and the switch point marked. ``geometry``: filled as by
    :func:`harness.report.figures.conversation_timeline` (times relative to ``t0``, the mix's start)."""
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.patches import Rectangle

    from harness.report.figures import _png

    lanes = ["model", "A (reference)", "B"]
    y = {n: i for i, n in enumerate(lanes)}
    fig = MplFigure(figsize=(16, 3.6), layout="constrained")
    ax = fig.subplots()
    ax.axvspan(row["switch_s"], row["end_s"], color="#fbd38d", alpha=0.25, linewidth=0, zorder=0)

    def draw(lane: str, segs: Any, words: Any, colour: str) -> None:
        for a, b in segs or []:
            ax.add_patch(Rectangle((a, y[lane] - 0.3), max(b - a, 1e-3), 0.6, facecolor=colour, alpha=0.8,
                                   edgecolor="white"))
        for text, a, _ in words or []:
            if t0 <= a < t1:
                ax.text(a, y[lane] + 0.33, text, fontsize=7, rotation=30, ha="left", va="bottom", clip_on=True)

    b_words = [[w.text, w.start_s, w.end_s] for w in recording.b_words]
    draw("B", [[w[1], w[2]] for w in b_words], b_words, "#2c7a7b")
    draw("A (reference)", row.get("reference_speech"), row.get("reference_words"), "#718096")
    draw("model", row.get("model_speech"), row.get("model_words"), "#1a202c")
    ax.axvline(row["cue_onset_s"], color="#c53030", linewidth=1.2, label="cue onset")
    ax.axvline(row["switch_s"], color="#2b6cb0", linestyle="--", linewidth=1.2, label="switch point")
    ax.set_xlim(t0, t1)
    ax.set_ylim(-0.6, len(lanes) - 0.1)
    ax.set_yticks(list(y.values()), lanes)
    ax.set_xlabel("seconds (recording timeline); shaded: the window")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    png = _png(fig)
    if geometry is not None:
        box = ax.get_position()
        geometry.update(x0=box.x0, x1=box.x1, y0=box.y0, y1=box.y1, t0=0.0, t1=t1 - t0)
    return png


def item_page(model: str, row: Mapping[str, Any], recording: Recording, t0: float, t1: float,
              audio: str | None = None) -> str:
    """An HTML page for one item and model: facts, transcripts, the timeline and (``audio``: the
    file name of a :func:`stereo_mix` beside the page, B left, model right, from ``t0``) a player."""
    from harness.report.conversation import _player

    facts = Table(("field", "value"), [
        ("item", row["item_id"]), ("recording", row["recording_id"]), ("intent", row["intent"]),
        ("known label (corpus)", str(row["known_label"])), ("model label", str(row["model_label"])),
        ("reference label", str(row["reference_label"])), ("labeller", row["labeler"]),
        ("eligible", "yes" if row["eligible"] else f"no: {row['exclusion']}"), ("error", str(row["error"] or "—")),
        ("cue onset / switch / window end (s)", f"{row['cue_onset_s']:.2f} / {row['switch_s']:.2f} / "
                                               f"{row['end_s']:.2f}"),
        ("model transcript", row.get("model_text") or "—"), ("reference transcript", row.get("reference_text") or "—"),
        ("model labeller output", row.get("model_label_raw") or "—"),
        ("reference labeller output", row.get("reference_label_raw") or "—")])
    geometry: dict[str, float] = {}
    png = item_timeline(row, recording, t0, t1, geometry)
    doc = Document(f"Duplex Cue: {model}, item `{row['item_id']}`", sections=[
        Section("Item", [facts]), Section("Timeline", [Figure(png, "B, A's recorded continuation and the model around "
                                                                   "the cue; the shaded span is the window.",
                                                              "timeline")])])
    page = to_html(doc)
    if audio is None:
        return page
    css, bar, scripts = _player(audio, geometry)
    page = page.replace("</style>", f"{css}\n</style>", 1).replace("<main>", f"<main>\n{bar}", 1)
    return page.replace("</main>", f"</main>\n{scripts}", 1)


def stereo_mix(b: np.ndarray, model: np.ndarray) -> np.ndarray:
    """``float32[n, 2]``: B left, the model right (the shorter one zero-padded), clipped to [-1, 1]."""
    n = max(len(b), len(model))
    mix = np.zeros((n, 2), np.float32)
    mix[: len(b), 0] = b
    mix[: len(model), 1] = model
    return np.clip(mix, -1.0, 1.0)


__all__ = ["PAPER_ANCHOR", "anchor_table", "cue_report", "cue_sections", "example_items", "item_page",
           "item_timeline", "stereo_mix"]
