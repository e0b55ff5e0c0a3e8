"""Benchmark scores from the per-event table (spec section 5): separate denominators, never averaged.

``metrics.json`` layout: ``{model: {condition: {score_name: entry}}}`` where an entry has
``rate`` (float, or ``null`` when not reportable), ``n`` (denominator), ``successes``,
``status`` (``"scored"``, or ``"n/a"`` when ``n < min_n``) and ``errors_excluded``
(conversations that failed and are excluded from every denominator: an error is never
scored as silence).
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
SCORE_TITLES = {
    "fresh_onset_response_rate": "Fresh-onset response rate",
    "conditional_answer_accuracy": "Conditional answer accuracy",
    "silence_preservation": "Silence preservation",
    "answering_window_yield": "Answering-window yield",
    "response_presence": "Response presence (diag.)",
    "window_response": "Window response (diag.)",
}
FUNNEL = ("events", "already_speaking_at_q_start", "started_during_q", "first_spoke_after_q",
          "still_speaking_at_r_start")
YIELD_FAILURES = ("still_voicing", "resumed")


def rate_entry(successes: int, n: int, min_n: int, errors: int, **extra: Any) -> dict[str, Any]:
    """One score entry; ``rate`` is ``None`` (n/a) when ``n < min_n``."""
    ok = n >= min_n
    return {"rate": successes / n if ok else None, "n": n, "successes": successes,
            "status": "scored" if ok else "n/a", "errors_excluded": errors, **extra}


def condition_scores(rows: list[dict[str, Any]], errors: int, min_n: int, judge: str = "") -> dict[str, dict[str, Any]]:
    """All scores of one (model, condition) from its event rows (with verdicts merged in:
    :func:`harness.metrics.outcomes.with_verdict`). ``judge`` names the judge for the record."""
    t = [r for r in rows if r["kind"] == "T"]
    sil = [r for r in rows if r["kind"] == "silence"]
    n4 = [r for r in rows if r["kind"] == "N4"]
    spoke = sum(r["response_presence"] for r in t)
    correct = sum(bool(r.get("answer_correct")) for r in t)
    eligible = [r for r in n4 if r["yield_eligible"]]
    funnel = {"events": len(n4), **{k: sum(r[k] for r in n4) for k in FUNNEL[1:]}}
    failures = {k: sum(r["yield_outcome"] == k for r in eligible) for k in YIELD_FAILURES}
    return {
        "fresh_onset_response_rate": rate_entry(sum(r["fresh_onset"] for r in t), len(t), min_n, errors,
                                                speaking_at_t_end=sum(r["speaking_at_end"] for r in t)),
        "conditional_answer_accuracy": rate_entry(correct, spoke, min_n, errors, judge=judge),
        "silence_preservation": rate_entry(sum(r["silence_preserved"] for r in sil), len(sil), min_n, errors,
                                           exempt_backchannels=sum(r["exempt_backchannel"] for r in sil),
                                           acoustic_successes=sum(r["silent"] for r in sil), judge=judge),
        "answering_window_yield": rate_entry(sum(r["yield_outcome"] == "yield" for r in eligible), len(eligible),
                                             min_n, errors, funnel=funnel, failures=failures),
        "response_presence": rate_entry(spoke, len(t), min_n, errors),
        "window_response": rate_entry(sum(r["window_response"] for r in n4), len(n4), min_n, errors),
    }


def compute_metrics(rows_by_model: dict[str, Iterable[dict[str, Any]]],
                    errors_by_model: dict[str, dict[str, int]], conditions: Iterable[str],
                    min_n: int, judge: str = "") -> dict[str, dict[str, dict[str, Any]]]:
    """``metrics.json`` content for every model and condition."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for model, rows in rows_by_model.items():
        rows = list(rows)
        out[model] = {}
        for cond in conditions:
            out[model][cond] = condition_scores([r for r in rows if r["condition"] == cond],
                                                errors_by_model.get(model, {}).get(cond, 0), min_n, judge)
    return out
