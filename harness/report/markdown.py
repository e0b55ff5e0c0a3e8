"""The Markdown report of a run: main table, yield funnel, errors, corpus statistics."""

from __future__ import annotations

from typing import Any

from harness.metrics.scores import FUNNEL, SCORES, YIELD_FAILURES
from harness.metrics.stats import BREAKDOWN_CATEGORIES, SWEEP_THRESHOLDS_MS
from harness.scenes.schema import CONDITIONS

TITLES = {
    "fresh_onset_response_rate": "Fresh-onset response rate",
    "conditional_answer_accuracy": "Conditional answer accuracy",
    "silence_preservation": "Silence preservation",
    "answering_window_yield": "Answering-window yield",
    "response_presence": "Response presence (diag.)",
    "window_response": "Window response (diag.)",
}


def fmt(entry: dict[str, Any]) -> str:
    """``0.9500 (n=2000)``, ``n/a (n=12)`` or ``not scored``."""
    if entry["status"] == "not_scored":
        return "not scored"
    if entry["rate"] is None:
        return f"n/a (n={entry['n']})"
    return f"{entry['rate']:.4f} (n={entry['n']})"


def render_report(cfg: Any, metrics: dict, statistics: dict, stats: dict, errors: list[dict], invalid: dict,
                  plan: Any) -> str:
    """The whole report as Markdown."""
    out = [f"# Duplex-MPE report: run `{cfg.run_id}`", ""]
    models = list(metrics)
    out += ["Models: " + ", ".join(f"`{m}`" for m in models) + ".",
            "Each score has its own denominator (n); scores are never averaged. "
            f"A rate with n < {cfg.metrics.min_n} is reported as n/a. "
            "Conversations that failed are excluded from every denominator and counted below.", ""]
    for cond in CONDITIONS:
        out += [f"## {cond.capitalize()} addressing", "",
                "| model | " + " | ".join(TITLES[s] for s in SCORES) + " | errors |",
                "|---|" + "---|" * (len(SCORES) + 1)]
        for m in models:
            e = metrics[m][cond]
            errs = e[SCORES[0]]["errors_excluded"]
            out.append(f"| {m} | " + " | ".join(fmt(e[s]) for s in SCORES) + f" | {errs} |")
        out.append("")
    out += ["Silence preservation here is **acoustic**: a window passes only with no detected speech "
            "(the semantic backchannel exemption needs ASR and a judge, not in this run). "
            "Conditional answer accuracy is not scored for the same reason.", ""]
    out += ["## Answering-window yield funnel", "",
            "| model | condition | " + " | ".join(FUNNEL) + " | yield | " + " | ".join(YIELD_FAILURES) + " |",
            "|---|---|" + "---|" * (len(FUNNEL) + 1 + len(YIELD_FAILURES))]
    for m in models:
        for cond in CONDITIONS:
            y = metrics[m][cond]["answering_window_yield"]
            out.append(f"| {m} | {cond} | " + " | ".join(str(y["funnel"][k]) for k in FUNNEL)
                       + f" | {y['successes']} | " + " | ".join(str(y["failures"][k]) for k in YIELD_FAILURES) + " |")
    out += ["", "`still_speaking_at_r_start` counts the yield-eligible events: silent during the question, "
            "first speech within 3 s after it, still speaking when N4_R starts.", ""]
    out += ["## T responses", "",
            "| model | condition | T turns | speaking at T end | fresh onsets | spoke in window |",
            "|---|---|---|---|---|---|"]
    for m in models:
        for cond in CONDITIONS:
            f, p = metrics[m][cond]["fresh_onset_response_rate"], metrics[m][cond]["response_presence"]
            out.append(f"| {m} | {cond} | {f['n']} | {f['speaking_at_t_end']} | {f['successes']} | {p['successes']} |")
    out += ["", "Response presence minus fresh onset is exactly the share of T turns whose end already "
            "contains model speech.", ""]
    out += _statistics(statistics, models)
    out += ["## Errors", ""]
    if not errors and not invalid:
        out += ["No conversation failed.", ""]
    else:
        out += [f"{len(errors)} conversation(s) failed; {len(invalid)} invalid scene(s) were not run.", "",
                "| model | conversation | reason |", "|---|---|---|"]
        out += [f"| {e['model']} | {e['scene_id']} | {e['reason']} |" for e in errors[:200]]
        out += [f"| (invalid) | {k} | {v} |" for k, v in list(invalid.items())[:50]]
        out.append("")
    out += ["## Corpus", "", "```", _stats_text(stats), "```", "",
            "## Where things are", "",
            f"* scenes: `{plan.scenes}`", f"* synthesised clips: `{plan.synth}`",
            *[f"* {m}: infer `{plan.infer[m]}`, vad `{plan.vad[m]}`" for m in models],
            f"* this report, `metrics.json`, `events.parquet`, `errors.json`: `{plan.reduce}`", ""]
    return "\n".join(out)


def _stats_text(stats: dict) -> str:
    import json

    return json.dumps(stats, indent=1, sort_keys=True)


def _num(x: float | None, spec: str = ".4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _statistics(st: dict, models: list[str]) -> list[str]:
    out = ["## Explicit vs implicit (paired scenes, exact McNemar)", "",
           "| model | metric | pairs | explicit only | implicit only | Δ (pp) | p |", "|---|---|---|---|---|---|---|"]
    for m in models:
        for metric, r in st["explicit_vs_implicit"][m].items():
            out.append(f"| {m} | {metric} | {r['n_pairs']} | {r['explicit_only']} | {r['implicit_only']} | "
                       f"{_num(r['delta_pp'], '+.2f')} | {r['p']:.4g}{' *' if r['significant'] else ''} |")
    out += ["", "Δ = (explicit only − implicit only) / pairs × 100; * = p < 0.05. Pairs differ in more than "
            "the name (spec section 2): the comparison is between whole paired scenes.", ""]
    out += ["## Between models (fresh onset, exact McNemar, Bonferroni)", "",
            "| condition | a | b | n | a only | b only | p | p (Bonferroni, m) |", "|---|---|---|---|---|---|---|---|"]
    for cond, tests in st["between_models"].items():
        out += [f"| {cond} | {t['a']} | {t['b']} | {t['n']} | {t['a_only']} | {t['b_only']} | {t['p']:.4g} | "
                f"{t['p_bonferroni']:.4g} (m={t['m']}){' *' if t['significant'] else ''} |" for t in tests]
    out += ["", "## Silence preservation differences (scene bootstrap, 10,000 replicates, 95 % CI)", "",
            "| condition | a | b | scenes | a − b | 95 % CI |", "|---|---|---|---|---|---|"]
    for cond, rows in st["silence_bootstrap"].items():
        out += [f"| {cond} | {r['a']} | {r['b']} | {r['n_scenes']} | {_num(r['diff'], '+.4f')} | "
                f"[{_num(r['lo'], '+.4f')}, {_num(r['hi'], '+.4f')}] |" for r in rows]
    sp = st["metric_choice_spearman"]
    out += ["", "## Metric choice", "",
            f"Spearman correlation between the rankings by fresh onset and by response presence over "
            f"{len(sp['entries'])} (model, condition) entries: **{_num(sp['rho'], '.3f')}**"
            + (f" ({sp['reason']})" if sp.get("reason") else "") + ".", ""]
    rt = st["request_timing"]
    out += ["## Request timing (tertiles shared by all models; descriptive)", ""]
    if rt["boundaries_s"] is None:
        out += [rt["reason"], ""]
    else:
        b = rt["boundaries_s"]
        out += [f"Time from the first human turn to T start; boundaries {b[0]:.3f} s and {b[1]:.3f} s.", "",
                "| model | bin | n | fresh onset | response presence |", "|---|---|---|---|---|"]
        for m, bins in rt["bins"].items():
            out += [f"| {m} | {k} | {v['n']} | {_num(v['fresh_onset'])} | {_num(v['response_presence'])} |"
                    for k, v in bins.items()]
        out.append("")
    out += ["## Acoustic silence preservation by speech threshold", "",
            "| model | condition | " + " | ".join(f"> {k} ms" for k in SWEEP_THRESHOLDS_MS) + " |",
            "|---|---|" + "---|" * len(SWEEP_THRESHOLDS_MS)]
    for m in models:
        for cond, sw in st["silence"][m].items():
            cells = [f"{_num(v['rate'])} ({v['occupied']} occupied)" for v in sw["threshold_sweep"].values()]
            out.append(f"| {m} | {cond} | " + " | ".join(cells) + " |")
    out += ["", "A window fails when the model's total speech in it exceeds the threshold (no semantic "
            "exemption). At 0 ms the occupied windows are exactly those the judge would see.", "",
            "## Silence failures by turn type (failures / windows)", "",
            "| model | condition | " + " | ".join(BREAKDOWN_CATEGORIES) + " |",
            "|---|---|" + "---|" * len(BREAKDOWN_CATEGORIES)]
    for m in models:
        for cond, sw in st["silence"][m].items():
            out.append(f"| {m} | {cond} | " + " | ".join(f"{v['failures']}/{v['windows']}"
                                                        for v in sw["failure_breakdown"].values()) + " |")
    out.append("")
    return out
