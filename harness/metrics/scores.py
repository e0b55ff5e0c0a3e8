"""Benchmark scores from the per-event table (spec section 5): separate denominators, never averaged.

``metrics.json`` layout: ``{model: {condition: {score_name: entry}}}`` where an entry has
``rate`` (float, or ``null`` when not reportable), ``n`` (denominator), ``successes``,
``status`` (``"scored"``, ``"n/a"`` when ``n < min_n``, ``"not_scored"`` when the score needs
a component this run lacks) and ``errors_excluded`` (conversations that failed and are
excluded from every denominator: an error is never scored as silence).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SCORES = (
    "fresh_onset_response_rate",
    "conditional_answer_accuracy",
    "silence_preservation",
    "answering_window_yield",
    "response_presence",
    "window_response",
)
FUNNEL = ("events", "already_speaking_at_q_start", "started_during_q", "first_spoke_after_q",
          "still_speaking_at_r_start")
YIELD_FAILURES = ("still_voicing", "resumed")


def rate_entry(successes: int, n: int, min_n: int, errors: int, **extra: Any) -> dict[str, Any]:
    """One score entry; ``rate`` is ``None`` (n/a) when ``n < min_n``."""
    ok = n >= min_n
    return {"rate": successes / n if ok else None, "n": n, "successes": successes,
            "status": "scored" if ok else "n/a", "errors_excluded": errors, **extra}


def not_scored(n: int, errors: int, reason: str) -> dict[str, Any]:
    return {"rate": None, "n": n, "successes": None, "status": "not_scored", "errors_excluded": errors,
            "reason": reason}


def condition_scores(rows: list[dict[str, Any]], errors: int, min_n: int) -> dict[str, dict[str, Any]]:
    """All scores of one (model, condition) from its event rows."""
    t = [r for r in rows if r["kind"] == "T"]
    sil = [r for r in rows if r["kind"] == "silence"]
    n4 = [r for r in rows if r["kind"] == "N4"]
    spoke = sum(r["response_presence"] for r in t)
    eligible = [r for r in n4 if r["yield_eligible"]]
    funnel = {"events": len(n4), **{k: sum(r[k] for r in n4) for k in FUNNEL[1:]}}
    failures = {k: sum(r["yield_outcome"] == k for r in eligible) for k in YIELD_FAILURES}
    return {
        "fresh_onset_response_rate": rate_entry(sum(r["fresh_onset"] for r in t), len(t), min_n, errors,
                                                speaking_at_t_end=sum(r["speaking_at_end"] for r in t)),
        "conditional_answer_accuracy": not_scored(spoke, errors, "needs ASR and a judge (not in this run)"),
        "silence_preservation": rate_entry(sum(r["silent"] for r in sil), len(sil), min_n, errors,
                                           method="acoustic (no semantic backchannel exemption)"),
        "answering_window_yield": rate_entry(sum(r["yield_outcome"] == "yield" for r in eligible), len(eligible),
                                             min_n, errors, funnel=funnel, failures=failures),
        "response_presence": rate_entry(spoke, len(t), min_n, errors),
        "window_response": rate_entry(sum(r["window_response"] for r in n4), len(n4), min_n, errors),
    }


def compute_metrics(rows_by_model: dict[str, Iterable[dict[str, Any]]],
                    errors_by_model: dict[str, dict[str, int]], conditions: Iterable[str],
                    min_n: int) -> dict[str, dict[str, dict[str, Any]]]:
    """``metrics.json`` content for every model and condition."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for model, rows in rows_by_model.items():
        rows = list(rows)
        out[model] = {}
        for cond in conditions:
            out[model][cond] = condition_scores([r for r in rows if r["condition"] == cond],
                                                errors_by_model.get(model, {}).get(cond, 0), min_n)
    return out
