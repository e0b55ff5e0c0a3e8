"""Statistics and analyses of spec section 6, computed from the per-event rows of every model.

Input rows are those of :func:`harness.metrics.outcomes.conversation_outcomes` with a
``model`` key. Scenes with an error for a model are simply absent from that model's rows,
so every paired comparison uses only the pairs/scenes scored on both sides.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from harness.metrics import stats

PAIRED_T_METRICS = ("fresh_onset", "response_presence", "answer_correct")
TIMING_METRICS = ("fresh_onset", "response_presence")  # per request-timing bin (descriptive)
#: the score each per-request field of PAIRED_T_METRICS counts
PAIRED_SCORE = {"fresh_onset": "fresh_onset_response_rate", "response_presence": "response_presence",
                "answer_correct": "conditional_answer_accuracy"}
BETWEEN_MODEL_METRICS = ("fresh_onset_response_rate", "conditional_answer_accuracy")


def _t_outcomes(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, bool]:
    return {r["scene_id"]: bool(r[key]) for r in rows if r["kind"] == "T"}


def explicit_vs_implicit(rows: Sequence[Mapping[str, Any]], alpha: float = 0.05,
                         metrics: Sequence[str] = PAIRED_T_METRICS) -> dict[str, dict[str, Any]]:
    """Per T metric: exact McNemar on paired scenes and Δ in percentage points (spec section 6).

    ``answer_correct`` (conditional answer accuracy) uses only the pairs where the model spoke
    in both versions' response windows, as between models (spec section 6), so Δ is over those.
    """
    out = {}
    for metric in metrics:
        by_pair: dict[str, dict[str, bool]] = defaultdict(dict)
        for r in rows:
            if r["kind"] == "T" and (metric != "answer_correct" or r["response_presence"]):
                by_pair[r["pair_id"]][r["condition"]] = bool(r[metric])
        pairs = [v for v in by_pair.values() if len(v) == 2]
        e = np.array([v["explicit"] for v in pairs], bool)
        i = np.array([v["implicit"] for v in pairs], bool)
        e_only, i_only = stats.paired_counts(e, i) if pairs else (0, 0)
        p = stats.mcnemar_exact(e_only, i_only)
        out[metric] = {"n_pairs": len(pairs), "explicit_only": e_only, "implicit_only": i_only, "p": p,
                       "delta_pp": stats.paired_effect_pp(e_only, i_only, len(pairs)) if pairs else None,
                       "significant": p < alpha}
    return out


def _paired(rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]],
            metric: str) -> tuple[int, int, int]:
    """(n, a_only, b_only) over the T requests scored on both sides; for conditional accuracy
    only the requests where both models spoke (spec section 6)."""
    key = "fresh_onset" if metric == "fresh_onset_response_rate" else "answer_correct"
    ta = {r["scene_id"]: r for r in rows_a if r["kind"] == "T"}
    tb = {r["scene_id"]: r for r in rows_b if r["kind"] == "T"}
    shared = sorted(set(ta) & set(tb))
    if key == "answer_correct":
        shared = [s for s in shared if ta[s]["response_presence"] and tb[s]["response_presence"]]
    if not shared:
        return 0, 0, 0
    a_only, b_only = stats.paired_counts([bool(ta[s][key]) for s in shared], [bool(tb[s][key]) for s in shared])
    return len(shared), a_only, b_only


def between_models(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]], condition: str,
                   alpha: float = 0.05) -> list[dict[str, Any]]:
    """Exact McNemar for every model pair on fresh onset and on conditional answer accuracy,
    Bonferroni over pairs x 2 metrics (spec section 6: m = 20 for 5 models)."""
    models = sorted(rows_by_model)
    pairs = list(combinations(models, 2))
    m = max(1, len(pairs) * len(BETWEEN_MODEL_METRICS))
    out = []
    for a, b in pairs:
        ra = [r for r in rows_by_model[a] if r["condition"] == condition]
        rb = [r for r in rows_by_model[b] if r["condition"] == condition]
        for metric in BETWEEN_MODEL_METRICS:
            n, a_only, b_only = _paired(ra, rb, metric)
            p = stats.mcnemar_exact(a_only, b_only)
            p_corr = float(stats.bonferroni(p, m))
            out.append({"a": a, "b": b, "metric": metric, "n": n, "a_only": a_only, "b_only": b_only, "p": p,
                        "p_bonferroni": p_corr, "m": m, "significant": p_corr < alpha})
    return out


def _silence_counts(rows: Sequence[Mapping[str, Any]], scenes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    passes: dict[str, int] = defaultdict(int)
    totals: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["kind"] == "silence":
            totals[r["scene_id"]] += 1
            passes[r["scene_id"]] += bool(r["silence_preserved"])
    return np.array([passes[s] for s in scenes]), np.array([totals[s] for s in scenes])


def silence_bootstrap(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]], condition: str,
                      reps: int = stats.BOOTSTRAP_REPS, seed: int = stats.BOOTSTRAP_SEED) -> list[dict[str, Any]]:
    """Scene-level bootstrap CI of the silence-preservation difference for every model pair."""
    out = []
    for a, b in combinations(sorted(rows_by_model), 2):
        ra = [r for r in rows_by_model[a] if r["condition"] == condition]
        rb = [r for r in rows_by_model[b] if r["condition"] == condition]
        scenes = sorted({r["scene_id"] for r in ra if r["kind"] == "silence"}
                        & {r["scene_id"] for r in rb if r["kind"] == "silence"})
        if not scenes:
            out.append({"a": a, "b": b, "n_scenes": 0, "diff": None, "lo": None, "hi": None})
            continue
        pa, ta = _silence_counts(ra, scenes)
        pb, tb = _silence_counts(rb, scenes)
        diff, lo, hi = stats.bootstrap_diff_ci(pa, ta, pb, tb, reps=reps, seed=seed)
        out.append({"a": a, "b": b, "n_scenes": len(scenes), "diff": diff, "lo": lo, "hi": hi})
    return out


def metric_choice_spearman(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Spearman correlation of the rankings by fresh onset and by response presence over every
    (model, condition) entry with both rates (spec section 6)."""
    x, y, entries = [], [], []
    for model, conds in metrics.items():
        for cond, scores in conds.items():
            f, p = scores["fresh_onset_response_rate"]["rate"], scores["response_presence"]["rate"]
            if f is not None and p is not None:
                x.append(f)
                y.append(p)
                entries.append(f"{model}/{cond}")
    try:
        rho = stats.spearman_rankings(x, y)
    except ValueError as e:  # fewer than 2 entries, or a constant ranking
        return {"rho": None, "entries": entries, "reason": str(e)}
    return {"rho": rho, "entries": entries}


def request_timing(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]],
                   request_times_s: Mapping[str, float], min_n: int) -> dict[str, Any]:
    """Tertiles of the time from the first human turn to T start, shared by all models, and
    fresh onset / response presence per bin (descriptive only)."""
    ids = sorted(request_times_s)
    if len(ids) < 3:
        return {"boundaries_s": None, "bins": {}, "reason": "fewer than 3 requests"}
    boundaries, _ = stats.timing_tertiles([request_times_s[s] for s in ids])
    out: dict[str, Any] = {"boundaries_s": boundaries.tolist(), "bins": {}}
    for model, rows in rows_by_model.items():
        t = [r for r in rows if r["kind"] == "T" and r["scene_id"] in request_times_s]
        bins = stats.assign_tertiles([request_times_s[r["scene_id"]] for r in t], boundaries) if t else []
        per: dict[str, dict[str, Any]] = {}
        for k in range(3):
            sel = [r for r, b in zip(t, bins, strict=True) if b == k]
            n = len(sel)
            per[str(k)] = {"n": n, **{m: (sum(r[m] for r in sel) / n if n >= min_n else None)
                                       for m in TIMING_METRICS}}
        out["bins"][model] = per
    return out


def silence_sweeps(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Acoustic threshold sweep and the (semantic) failure breakdown by turn type for one (model, condition)."""
    sil = [r for r in rows if r["kind"] == "silence"]
    return {"threshold_sweep": {str(k): v for k, v in stats.threshold_sweep([r["speech_s"] for r in sil]).items()},
            "failure_breakdown": stats.failure_breakdown(sil, "silence_preserved")}


def all_statistics(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Mapping[str, Any],
                   request_times_s: Mapping[str, float], conditions: Sequence[str], min_n: int,
                   bootstrap_reps: int = stats.BOOTSTRAP_REPS) -> dict[str, Any]:
    """Everything of spec section 6 that this run can compute, as one JSON-able dict."""
    return {
        "explicit_vs_implicit": {m: explicit_vs_implicit(rows) for m, rows in rows_by_model.items()},
        "between_models": {c: between_models(rows_by_model, c) for c in conditions},
        "silence_bootstrap": {c: silence_bootstrap(rows_by_model, c, reps=bootstrap_reps) for c in conditions},
        "metric_choice_spearman": metric_choice_spearman(metrics),
        "request_timing": request_timing(rows_by_model, request_times_s, min_n),
        "silence": {m: {c: silence_sweeps([r for r in rows if r["condition"] == c]) for c in conditions}
                    for m, rows in rows_by_model.items()},
    }
