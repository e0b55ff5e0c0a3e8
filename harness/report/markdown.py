"""The report of a run (main table, yield funnel, statistics, errors, corpus) as Markdown or HTML.

:func:`build_report` builds one :class:`~harness.report.document.Document`; :func:`render_report`
lays it out as Markdown (``report.md``) and :func:`render_html` as a single self-contained HTML
page with the figures of :mod:`harness.report.figures` embedded.
"""

from __future__ import annotations

from typing import Any

from harness.audio.preamble import PAPER_PREAMBLE_S
from harness.metrics.analyses import PAIRED_SCORE
from harness.metrics.scores import FUNNEL, SCORE_TITLES, SCORES, YIELD_FAILURES
from harness.metrics.stats import BREAKDOWN_CATEGORIES, SWEEP_THRESHOLDS_MS
from harness.products.windows import JUDGED_KINDS, KIND_NAMES, unparseable_warning
from harness.reference.report import reference_section, score_rows
from harness.report.corpus import corpus_section
from harness.report.document import (
    Bullets,
    Document,
    Figure,
    Paragraph,
    Section,
    Table,
    num,
    p_value,
    to_html,
    to_markdown,
)
from harness.review.results import report_section
from harness.scenes.schema import CONDITIONS

NO_COMPARISON = ("No comparison: fewer than two evaluated models in this run (self-test baselines and reference "
                 "systems are never compared).")
FIGURE_CAPTIONS = {
    "score_bars": "Every score per model, explicit and implicit side by side, with 95 % Wilson intervals "
                  "(successes / n). An n/a or not-scored entry is a labelled gap, never a bar at 0.",
    "vad_sweep": "Each score that depends on the speech segments alone against each swept detector setting "
                 "(one at a time, the others as configured; dotted: the configured value). The segmenter reran "
                 "over the stored Silero probabilities; judged scores (answer accuracy, semantic silence "
                 "preservation) are not swept (docs/vad.md).",
    "yield_funnel": "Answering-window yield funnel per model and condition: N4 events, the two exclusions "
                    "(already speaking at question start, started during the question), first spoke within "
                    "the answering window, still speaking at N4_R start (eligible), and yield successes.",
}


def fmt(entry: dict[str, Any]) -> str:
    """``0.9500 (n=2000)``, ``n/a (n=12)`` or, for an entry with another status, ``not scored (n=40)``."""
    if entry["rate"] is None:
        return f"{entry.get('status', 'n/a')} (n={entry['n']})"
    return f"{entry['rate']:.4f} (n={entry['n']})"


def render_report(cfg: Any, metrics: dict, statistics: dict, stats: dict, errors: list[dict], invalid: dict,
                  plan: Any, reference: dict | None = None, examples: dict | None = None) -> str:
    """The whole report as Markdown (``reference``: the content of ``reference.json``, if any;
    ``examples``: ``{model: {kind: [scene_id]}}`` of the conversation pages, linked)."""
    return to_markdown(build_report(cfg, metrics, statistics, stats, errors, invalid, plan, reference=reference,
                                    examples=examples))


def render_html(cfg: Any, metrics: dict, statistics: dict, stats: dict, errors: list[dict], invalid: dict,
                plan: Any, figures: dict[str, bytes] | None = None, reference: dict | None = None,
                examples: dict | None = None) -> str:
    """The same report as one self-contained HTML page.

    ``figures`` maps ``"score_bars"`` / ``"yield_funnel"`` to PNG bytes (see
    :func:`harness.report.figures.report_figures`); missing ones are simply left out.
    """
    return to_html(build_report(cfg, metrics, statistics, stats, errors, invalid, plan, figures, reference, examples))


def _figure(figures: dict[str, bytes] | None, name: str) -> list[Figure]:
    if figures and figures.get(name):
        return [Figure(figures[name], FIGURE_CAPTIONS.get(name, name), name)]
    return []


def build_report(cfg: Any, metrics: dict, statistics: dict, stats: dict, errors: list[dict], invalid: dict,
                 plan: Any, figures: dict[str, bytes] | None = None, reference: dict | None = None,
                 examples: dict | None = None) -> Document:
    """The report's document (both renderers lay out exactly these blocks). ``reference`` (the
    content of ``reference.json``) adds the text reference's rows and section."""
    models = list(metrics)
    family = statistics["comparison_family"]
    doc = Document(f"Duplex-MPE report: run `{cfg.run_id}`")
    doc.intro.append(Paragraph(
        "Models: " + ", ".join(f"`{m}`" + (f" ({family['excluded'][m]})" if m in family["excluded"] else "")
                               for m in models) + ".\n"
        "Each score has its own denominator (n); scores are never averaged. "
        f"A rate with n < {cfg.metrics.min_n} is reported as n/a. "
        "Conversations that failed are excluded from every denominator and counted below."))
    doc.intro += _suspects(statistics["output_checks"])
    doc.intro += _context_warning(statistics.get("context") or {})
    verdicts = statistics.get("judge_verdicts")
    if verdicts and verdicts["over"]:
        doc.intro += [Paragraph(
            f"**Unparseable judge verdicts** above `metrics.max_unparseable_share` "
            f"({100 * verdicts['max_unparseable_share']:.1f} %): the judge named no single label (a refusal, a "
            "reply cut off) for these items, which count as incorrect answers or failed windows (spec section "
            "5), so these scores are biased low. The judge cache does not serve such verdicts: scoring again "
            "asks the judge again (docs/judge.md)."),
            Bullets(tuple(unparseable_warning(c) for c in verdicts["over"]))]
    for cond in CONDITIONS:
        rows = []
        for m, e in [(m, metrics[m][cond]) for m in models] + (score_rows(reference, cond) if reference else []):
            rows.append((m, *(fmt(e[s]) for s in SCORES), str(e[SCORES[0]]["errors_excluded"])))
        doc.sections.append(Section(f"{cond.capitalize()} addressing",
                                    [Table(("model", *(SCORE_TITLES[s] for s in SCORES), "errors"), rows)]))
    doc.sections[-1].blocks.append(Paragraph(
        f"Silence preservation: a window without model speech passes (VAD pass-through); a window with "
        f"speech is transcribed (ASR `{cfg.asr.kind}`) and passes only when the judge (`{cfg.judge.kind}`) "
        f"labels it a backchannel. Conditional answer accuracy: the response transcript judged against the "
        f"gold answer, over the T requests with speech in the response window."
        + (" The `lexical` judge is a deterministic stand-in (token rules, docs/judge.md), not an LLM "
           "judgement." if cfg.judge.kind == "lexical" else "")))
    cost = statistics.get("scoring_cost", {})
    if cost:
        doc.sections[-1].blocks.append(Table(
            ("model", "ASR calls", "judge calls", "of which unparseable asked again", "judge cache hits",
             "judge cost (USD)", "saved by cache (USD)"),
            [(m, str(c["asr_calls"]), str(c["judge_misses"]), str(c["judge_retried"]), str(c["judge_hits"]),
              f"{c['usd']:.4f}", f"{c['usd_saved']:.4f}") for m, c in cost.items()],
            caption="Scoring calls of this run"))
    if verdicts:
        doc.sections[-1].blocks.append(_unparseable_table(verdicts))
    if fig := _figure(figures, "score_bars"):
        doc.sections.append(Section("Scores with 95 % intervals", list(fig)))

    funnel_rows = []
    for m in models:
        for cond in CONDITIONS:
            y = metrics[m][cond]["answering_window_yield"]
            funnel_rows.append((m, cond, *(str(y["funnel"][k]) for k in FUNNEL), str(y["successes"]),
                                *(str(y["failures"][k]) for k in YIELD_FAILURES)))
    doc.sections.append(Section("Answering-window yield funnel", [
        Table(("model", "condition", *FUNNEL, "yield", *YIELD_FAILURES), funnel_rows),
        Paragraph("`still_speaking_at_r_start` counts the yield-eligible events: silent during the question, "
                  "first speech within 3 s after it, still speaking when N4_R starts."),
        *_figure(figures, "yield_funnel")]))

    t_rows = []
    for m in models:
        for cond in CONDITIONS:
            f, p = metrics[m][cond]["fresh_onset_response_rate"], metrics[m][cond]["response_presence"]
            t_rows.append((m, cond, str(f["n"]), str(f["speaking_at_t_end"]), str(f["successes"]),
                           str(p["successes"])))
    doc.sections.append(Section("T responses", [
        Table(("model", "condition", "T turns", "speaking at T end", "fresh onsets", "spoke in window"), t_rows),
        Paragraph("Response presence minus fresh onset is exactly the share of T turns whose end already "
                  "contains model speech.")]))

    if prompts := statistics.get("prompts"):
        doc.sections.append(_told_section(prompts, statistics.get("context") or {}))
    if reference:
        doc.sections.append(reference_section(reference))
    doc.sections += _statistics(statistics, models)
    doc.sections.append(report_section(cfg.run_id, plan.review))  # harness/review: the results live beside the kit

    if fig := _figure(figures, "vad_sweep"):
        doc.sections.append(Section("Detector sweep (vad.sweep)", list(fig)))
    if not errors and not invalid:
        err_blocks: list = [Paragraph("No conversation failed.")]
    else:
        err_rows = [(e["model"], e["scene_id"], str(e["reason"])) for e in errors[:200]]
        err_rows += [("(invalid)", k, str(v)) for k, v in list(invalid.items())[:50]]
        err_blocks = [Paragraph(f"{len(errors)} conversation(s) failed; {len(invalid)} invalid scene(s) were not run."),
                      Table(("model", "conversation", "reason"), err_rows)]
    err_blocks += _failure_counts(statistics["failures"])
    doc.sections.append(Section("Errors", err_blocks))
    if speed := statistics.get("streaming_speed"):
        doc.sections.append(Section("Streaming speed", [_speed_table(speed)]))
    if (pacing := statistics.get("pacing")) and pacing["models"]:
        doc.sections.append(_pacing_section(pacing))
    if statistics.get("turn_taking"):
        doc.sections.append(_turn_taking_section(statistics["turn_taking"]))
    if (api := statistics.get("api_cost")) and api["rows"]:
        doc.sections.append(Section("API spend", [_api_table(api)]))
    if examples:
        doc.sections.append(Section("Example conversations", [
            Paragraph("One debugging page per kind of outcome: the speech timeline (human turns by label, model "
                      "speech, scoring windows) and why each window passed or failed."),
            Table(("model", "outcome", "conversation"),
                  [(m, kind.replace("_", " "), ", ".join(f"[{sid}](conversations/{m}/{sid}.html)" for sid in sids))
                   for m, kinds in examples.items() for kind, sids in kinds.items()])]))
    doc.sections.append(corpus_section(stats))  # harness/report/corpus
    doc.sections.append(Section("Where things are", [Bullets((
        f"scenes: `{plan.scenes}`", f"synthesised clips: `{plan.synth}`",
        *[f"{m}: infer `{plan.infer[m]}`, vad `{plan.vad[m]}`" for m in models],
        f"this report, `metrics.json`, `events.parquet`, `errors.json`: `{plan.reduce}`"))]))
    return doc


def _statistics(st: dict, models: list[str]) -> list[Section]:
    out = []
    rows = []
    for m in models:
        for metric, r in st["explicit_vs_implicit"][m].items():
            rows.append((m, SCORE_TITLES[PAIRED_SCORE[metric]], str(r["n_pairs"]), str(r["explicit_only"]),
                         str(r["implicit_only"]),
                         num(r["delta_pp"], "+.2f"), p_value(r["p"], r["significant"])))
    boot_rows = [(m, str(r["n_pairs"]), num(r["diff"], "+.4f"), f"[{num(r['lo'], '+.4f')}, {num(r['hi'], '+.4f')}]")
                 for m, r in st["silence_explicit_vs_implicit"].items()]
    out.append(Section("Explicit vs implicit (paired scenes, exact McNemar)", [
        Table(("model", "metric", "pairs", "explicit only", "implicit only", "Δ (pp)", "p"), rows),
        Paragraph("Δ = (explicit only − implicit only) / pairs × 100; * = p < 0.05. Pairs differ in more than "
                  "the name (spec section 2): the comparison is between whole paired scenes. Conditional answer "
                  "accuracy counts only the pairs where the model spoke in both versions."),
        Table(("model", "pairs", "explicit − implicit", "95 % CI"), boot_rows,
              caption="Silence preservation, explicit − implicit: a rate over several windows per scene, not one "
                      "binary outcome per pair, so not McNemar but the scene-level bootstrap (paired scenes "
                      "resampled, 10,000 replicates, seed 20260902), pooled rates.")]))

    rows = [(cond, SCORE_TITLES[t["metric"]], t["a"], t["b"], str(t["n"]), str(t["a_only"]), str(t["b_only"]),
             *(("refused", f"refused: {t['refused']}") if t.get("refused") else
               (p_value(t["p"]) if t["n"] else "n/a",
                f"{p_value(t['p_bonferroni'])} (m={t['m']}){' *' if t['significant'] else ''}" if t["n"] else "n/a")))
            for cond, tests in st["between_models"].items() for t in tests]
    family = st["comparison_family"]
    excluded = ", ".join(f"`{m}` ({r})" for m, r in family["excluded"].items()) or "none"
    out.append(Section("Between models (exact McNemar, Bonferroni)", [
        Paragraph(f"Comparison family: {len(family['models'])} evaluated model(s) "
                  f"({', '.join(f'`{m}`' for m in family['models']) or 'none'}), {family['pairs']} pair(s) × 2 "
                  f"scores: **m = {family['m']}** per addressing condition. Not compared (self-test baselines "
                  f"and reference systems): {excluded}. The silence bootstrap and the metric-choice ranking below "
                  "use the same models."),
        Table(("condition", "score", "a", "b", "n", "a only", "b only", "p", "p (Bonferroni, m)"), rows)
        if rows else Paragraph(NO_COMPARISON),
        Paragraph("Fresh onset over every shared T request; conditional answer accuracy over the T requests "
                  "where both models spoke (spec section 6). n = 0: no shared request, no test. A pair of hosted "
                  "models of one provider whose turn-taking settings differ is refused (no test; its pair still "
                  "counts in m), since the difference would be the settings' as much as the models'.")]))

    rows = [(cond, r["a"], r["b"], str(r["n_scenes"]),
             *(("refused", f"refused: {r['refused']}") if r.get("refused") else
               (num(r["diff"], "+.4f"), f"[{num(r['lo'], '+.4f')}, {num(r['hi'], '+.4f')}]")))
            for cond, rs in st["silence_bootstrap"].items() for r in rs]
    out.append(Section("Silence preservation differences (scene bootstrap, 10,000 replicates, 95 % CI)", [
        Table(("condition", "a", "b", "scenes", "a − b", "95 % CI"), rows) if rows else Paragraph(NO_COMPARISON)]))

    sp = st["metric_choice_spearman"]
    out.append(Section("Metric choice", [Paragraph(
        f"Spearman correlation between the rankings by fresh onset and by response presence over "
        f"{len(sp['entries'])} (model, condition) entries: **{num(sp['rho'], '.3f')}**"
        + (f" ({sp['reason']})" if sp.get("reason") else "") + ".")]))

    rt = st["request_timing"]
    sec = Section("Request timing (tertiles shared by all models; descriptive)")
    if rt["boundaries_s"] is None:
        sec.blocks.append(Paragraph(rt["reason"]))
    else:
        b = rt["boundaries_s"]
        rows = [(m, k, str(v["n"]), *(fmt(v[s]) for s in SCORES))
                for m, bins in rt["bins"].items() for k, v in bins.items()]
        sec.blocks += [Paragraph(f"Time from the first human turn to T start; boundaries {b[0]:.3f} s and "
                                 f"{b[1]:.3f} s. Every score over the conversations of the bin (both conditions), "
                                 "each with its own n; n/a under the minimum n."),
                       Table(("model", "bin", "requests", *(SCORE_TITLES[s] for s in SCORES)), rows)]
    out.append(sec)

    rows = []
    for m in models:
        for cond, sw in st["silence"][m].items():
            sweep, judged = sw["threshold_sweep"], sw["judge_windows"]
            rows.append((m, cond, *(f"{num(sweep[str(k)]['rate'])} ({sweep[str(k)]['occupied']} occupied)"
                                    for k in SWEEP_THRESHOLDS_MS), str(judged["judged"]),
                         str(judged["empty_transcript"])))
    out.append(Section("Acoustic silence preservation by speech threshold", [
        Table(("model", "condition", *(f"> {k} ms" for k in SWEEP_THRESHOLDS_MS), "judged", "empty transcript"),
              rows),
        Paragraph("A window fails when the model's total speech in it exceeds the threshold (no semantic "
                  "exemption). Every window occupied at 0 ms is transcribed: it goes to the judge (judged) "
                  "unless its transcript is empty (e.g. under 100 ms of speech), when it fails without a judge "
                  "call. So occupied at 0 ms = judged + empty transcript.")]))

    rows = []
    for m in models:
        for cond, sw in st["silence"][m].items():
            fb = sw["failure_breakdown"]
            rows.append((m, cond, *(f"{fb[k]['failures']}/{fb[k]['windows']}" for k in BREAKDOWN_CATEGORIES)))
    out.append(Section("Silence failures by turn type (failures / windows)", [
        Table(("model", "condition", *BREAKDOWN_CATEGORIES), rows)]))
    return out


def _suspects(checks: dict) -> list[Paragraph | Table]:
    """The output checks (``statistics["output_checks"]``): a table, and a warning naming every
    suspect model first, since a broken output path scores exactly like perfect silence preservation."""
    rows = [(m, c["role"], str(c["conversations"]), str(c["with_speech"]), str(c["truncated"]),
             "digital silence" if c["peak"] == 0 else num(c["peak_dbfs"], ".1f") if c["peak"] is not None
             else "unknown", "SUSPECT: " + "; ".join(c["reasons"]) if c["suspect"] else "ok")
            for m, c in checks.items()]
    out: list[Paragraph | Table] = []
    suspects = [m for m, c in checks.items() if c["suspect"]]
    if suspects:
        out.append(Paragraph(
            "**Suspect output:** " + ", ".join(f"`{m}`" for m in suspects) + ". A model whose output never "
            "contains speech, or whose peak stays below the threshold, scores like perfect silence "
            "preservation: check its output path before reading its scores. The flag is expected for a "
            "self-test baseline that never speaks (`silent`)."))
    out.append(Table(("model", "role", "conversations", "with speech", "truncated", "peak (dBFS)", "check"), rows,
                     caption="Output checks over every stored output. Truncated: still speaking when the output "
                             "ended (the last segment was closed at the end)."))
    return out


def _told_section(prompts: dict, context: dict) -> Section:
    """What each model heard and was told (``statistics["prompts"]``) and, for each model with a
    context, its conversations longer than it (``statistics["context"]``)."""
    on = prompts["duty_as_text"]
    rows = [(m, "yes" if p["duty_text"] else "no", p["preset_text"] or "none", p["voice_prompt"] or "none")
            for m, p in prompts["models"].items()]
    blocks: list = [
        Paragraph(f"Every model hears the spoken duty preamble ({prompts['preamble_s']:.2f} s as synthesised; the "
                  f"paper's: {PAPER_PREAMBLE_S} s) before the scene. `protocol.duty_as_text` is "
                  f"**{'true' if on else 'false'}**: " + (
                      "the duty text also goes, as text after the preset, to every model that takes a text "
                      "prompt." if on else "no model gets the duty as text; models that need a text prompt to "
                      "run get only their upstream preset.") + " (docs/protocol-decisions.md)"),
        Table(("model", "duty also as text", "preset text sent (every conversation)", "voice prompt"), rows)]
    if context:
        blocks.append(Table(
            ("model", "context (s)", "conversations", "longer than the context", "longest stream (s)"),
            [(m, f"{c['context_s']:g}", str(c["conversations"]),
              (f"**{len(c['over'])}**: " + ", ".join(f"`{sid}`" for sid in c["over"][:10])
               + (" ..." if len(c["over"]) > 10 else "")) if c["over"] else "0", f"{c['longest_s']:.1f}")
             for m, c in context.items()],
            caption="A model with a context attends over its last that many seconds of stream (preamble, turns "
                    "and waits); a conversation longer than that was streamed and scored, but by its end the "
                    "model no longer attended to the preamble's start (docs/models.md). statistics.json "
                    "(context) lists every one of them."))
    return Section("What each model heard and was told", blocks)


def _context_warning(context: dict) -> list[Paragraph]:
    """A line in the introduction naming the models with conversations longer than their context."""
    over = [f"`{m}` {len(c['over'])} of {c['conversations']} (context {c['context_s']:g} s)"
            for m, c in context.items() if c["over"]]
    if not over:
        return []
    return [Paragraph("**Longer than the model's context:** " + "; ".join(over) + ". These conversations are "
                      "scored; see \"What each model heard and was told\".")]


def _unparseable_table(verdicts: dict) -> Table:
    """Unparseable judge verdicts per model, condition and judged window kind
    (``statistics["judge_verdicts"]``, counted by :func:`harness.products.windows.judge_verdict_counts`)."""
    limit = verdicts["max_unparseable_share"]

    def cell(v: dict) -> str:
        if not v["judged"]:
            return "0/0"
        share = v["unparseable"] / v["judged"]
        return f"{v['unparseable']}/{v['judged']} ({100 * share:.1f} %)" + (" over" if share > limit else "")

    rows = [(m, cond, *(cell(by_kind[k]) for k in JUDGED_KINDS),
             str(sum(by_kind[k]["empty_transcript"] for k in JUDGED_KINDS)))
            for m, by_cond in verdicts["models"].items() for cond, by_kind in by_cond.items()]
    return Table(("model", "condition", *(KIND_NAMES[k] for k in JUDGED_KINDS), "empty transcripts (not judged)"),
                 rows, caption=f"Unparseable judge verdicts: UNPARSEABLE / judged items (the judge named no single "
                               f"label). They are scored as failures and never served from the judge cache; "
                               f"'over': above metrics.max_unparseable_share ({100 * limit:.1f} %). N4 windows "
                               f"are not judged. Empty transcripts fail without the judge and are not unparseable.")


def _speed_table(speed: dict) -> Table:
    """Per-stream real-time factors (``statistics["streaming_speed"]``)."""
    rows = [(m, str(v["conversations"]), num(v["audio_h"], ".2f"),
             "n/a" if v["per_stream_rtf_median"] is None else f"{v['per_stream_rtf_median']:.2f}x",
             "n/a" if v["per_stream_rtf_min"] is None else f"{v['per_stream_rtf_min']:.2f}x",
             "n/a" if v["step_share"] is None else f"{100 * v['step_share']:.0f} %") for m, v in speed.items()]
    return Table(("model", "conversations", "output audio (h)", "per-stream real-time factor (median)", "slowest",
                  "in model steps"), rows,
                 caption="Audio seconds streamed per wall second of each conversation, in its batch (the harness "
                         "never paces to real time; 1x keeps pace with a real-time peer). The rest of the wall "
                         "time is the runner: scheduling, resampling and speech detection.")


def _turn_taking_section(hosted: dict) -> Section:
    """Each hosted model's turn-taking settings (``statistics["turn_taking"]``): part of the protocol,
    as asked and as the service acknowledged them."""
    rows = [(m, h["model"] or h["provider"], "; ".join(f"{k}: {_setting(v)}" for k, v in h["settings"].items()),
             _acknowledged(h["acknowledged"])) for m, h in hosted.items()]
    return Section("Hosted models: turn-taking settings", [
        Table(("model", "provider/model", "turn-taking settings (asked)", "acknowledged by the service"), rows,
              caption="Part of the protocol (docs/models.md): they decide when the service speaks (e.g. OpenAI "
                      "server_vad with create_response answers every speaker's end of speech, addressed or not). "
                      "Every conversation of a model asked for its settings; what ran is what the service "
                      "acknowledged (a difference fails the conversation unless the model's on_settings_mismatch "
                      "is record). Two models of one provider whose asked settings differ are never compared "
                      "(Between models).")])


def _acknowledged(ack: dict | None) -> str:
    """What the service acknowledged over a model's conversations (``turn_taking[m]["acknowledged"]``)."""
    if ack is None:
        return "no records"
    parts = [f"as asked: {ack['as_asked']}"] if ack["as_asked"] else []
    if ack["differs"]:
        parts.append(f"**other settings: {ack['differs']}** (" + "; ".join(
            f"{d} ×{n}" for d, n in list(ack["differences"].items())[:3]) + ")")
    if ack["unacknowledged"]:
        parts.append(f"not acknowledged (ran unverified): {ack['unacknowledged']}")
    return "; ".join(parts) or "no conversations"


def _pacing_section(pacing: dict) -> Section:
    """How far each paced model's streams fell behind real time (``statistics["pacing"]``)."""
    bound = pacing["max_lag_s"]
    rows = [(m, str(p["conversations"]), f"{p['median_lag_s']:.3f}", f"{p['worst_lag_s']:.3f}",
             f"{p['behind_s']:.1f}",
             (f"**{len(p['over'])}**: " + ", ".join(f"`{sid}`" for sid in p["over"][:10])
              + (" ..." if len(p["over"]) > 10 else "")) if p["over"] else "0")
            for m, p in pacing["models"].items()]
    return Section("Pacing", [
        Table(("model", "paced conversations", "median worst lag (s)", "worst lag (s)", "seconds sent late",
               f"over {bound:g} s (metrics.max_lag_s)"), rows,
              caption="A hosted service hears the stream in real time. A late step (a stalled service, a loaded "
                      "machine) delays the frames after it until the stream catches up in a burst, so the service "
                      "heard that stretch late and its timing is not the protocol's. Worst lag: the latest any "
                      "frame of a conversation went after its due time; seconds sent late: stream seconds sent "
                      "80 ms or more late. Conversations over the bound stay scored and are listed here.")])


def _setting(value: Any) -> str:
    """A turn-taking setting in one line: ``null`` (manual), or ``key=value`` pairs of a mapping."""
    if value is None:
        return "null (manual)"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_setting(v)}" for k, v in value.items()) or "{}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _api_table(api: dict) -> Table:
    """The run's API spend from the usage ledger (``statistics["api_cost"]``)."""
    rows = [(r["stage"], r["who"], r["priced_as"], f"{r['count']} {r['unit']}", f"{r['tokens_in']:,}",
             f"{r['tokens_out']:,}",
             (f"{r['usd']:.4f}" if r["usd"] is not None else f"unpriced: {r['unpriced']}")
             + (f" (a lower bound: {r['lower_bound']} ended with usage still owed)" if r["lower_bound"] else "")
             + (f" (an upper bound: {r['upper_bound']} with tokens of no stated modality at the dearest rate)"
                if r["upper_bound"] else ""))
            for r in api["rows"]]
    total = sum(r["usd"] for r in api["rows"] if r["usd"] is not None)
    unpriced = any(r["usd"] is None for r in api["rows"])
    rows.append(("total", "", "", "", "", "", f"{total:.4f}" + (" + unpriced" if unpriced else "")))
    return Table(("stage", "spender", "provider/model", "billed", "tokens in", "tokens out", "USD"), rows,
                 caption=f"Raw usage from the usage ledger (the scenes marker's script calls, infer shard markers and "
                         f"failed attempts, the score and reference markers) priced with {api['table']}. "
                         "Unpriced usage is never counted as $0. "
                         "Re-pricing needs no rerun: `make status ARGS=budget.price_table=N` re-prices the infer "
                         "usage at once, and rerunning reduce the whole table.")


def _failure_counts(failures: dict) -> list[Paragraph | Table]:
    """Both kinds of failure, counted separately: failed infer attempts (the shard was retried) and
    conversations in error (excluded from every denominator)."""
    rows = [(m, str(f["shards"]), str(f["failed_attempts"]), str(f["infer_conversation_errors"]),
             str(f["conversations_in_error"])) for m, f in failures.items()]
    return [Table(("model", "infer shards", "failed attempts (retried)", "conversation errors in infer",
                   "conversations in error (all stages)"), rows,
                  caption="A failed attempt (e.g. a transient device error) failed a whole shard attempt, which "
                          "was retried; a conversation in error failed on its own (infer, speech detection or "
                          "scoring) and is excluded from every denominator.")]
