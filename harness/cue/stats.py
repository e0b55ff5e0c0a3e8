"""Duplex Cue statistics (spec section 9; docs/cue.md, "Statistics"): per intent, the response
distribution of the model and of the human reference, and their paired difference.

Pure functions over the rows of :func:`harness.cue.scoring.item_row`; only **eligible** rows
count (error rows and excluded items never do). Shares are fractions in ``[0, 1]``.

* **Distribution**: counts and shares of Continued / Adapted / Yielded, each share with an
  item-level percentile bootstrap interval: ``reps`` resamples of the items with replacement
  (:func:`harness.metrics.stats.bootstrap_indices`, seeded), 2.5 / 97.5 percentiles.
* **Paired difference** (model vs reference on the same items): exact two-sided McNemar on
  "adapted vs not" (:func:`harness.metrics.stats.mcnemar_exact`, scipy ``binomtest`` on the
  discordant pairs), the difference of the adapted shares (model − reference) and its paired
  bootstrap interval (the same resampled items for both).
* A share whose denominator is under ``min_n`` is still given, flagged ``small`` (the report
  writes n beside every figure; the paper's anchor has n = 66).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.cue.schema import INTENTS, RESPONSES
from harness.cue.scoring import EXCLUSIONS
from harness.metrics.stats import BOOTSTRAP_SEED, bootstrap_indices, mcnemar_exact

ALPHA = 0.05


def _labels(labels: Sequence[str]) -> np.ndarray:
    bad = sorted({x for x in labels if x not in RESPONSES}, key=str)
    if bad:
        raise ValueError(f"labels {bad} are not among {list(RESPONSES)}")
    return np.array([RESPONSES.index(x) for x in labels], dtype=np.int64)


def _interval(values: np.ndarray) -> list[float]:
    lo, hi = np.percentile(values, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return [float(lo), float(hi)]


def _replicates(codes: np.ndarray, reps: int, seed: int) -> np.ndarray:
    """``float64[reps, 3]``: the share of each response in each bootstrap resample of the items."""
    out = np.empty((reps, len(RESPONSES)))
    row = 0
    for idx in bootstrap_indices(len(codes), reps, seed):
        c = codes[idx]
        out[row:row + len(c)] = np.stack([(c == k).mean(axis=1) for k in range(len(RESPONSES))], axis=1)
        row += len(c)
    return out


def distribution(labels: Sequence[str], reps: int, seed: int = BOOTSTRAP_SEED, min_n: int = 30) -> dict[str, Any]:
    """The response distribution of ``labels`` (one of :data:`RESPONSES` per item).

    Returns:
        ``{"n", "small", "counts": {response: int}, "shares": {response: float | None},
        "ci": {response: [lo, hi] | None}}``; shares and intervals are ``None`` when ``n == 0``.

    Raises:
        ValueError: an unknown label, or ``reps < 1``.
    """
    codes = _labels(labels)
    n = int(codes.size)
    counts = {r: int(np.count_nonzero(codes == k)) for k, r in enumerate(RESPONSES)}
    if n == 0:
        return {"n": 0, "small": True, "counts": counts, "shares": dict.fromkeys(RESPONSES),
                "ci": dict.fromkeys(RESPONSES)}
    reps_ = _replicates(codes, reps, seed)
    return {"n": n, "small": n < min_n, "counts": counts, "shares": {r: counts[r] / n for r in RESPONSES},
            "ci": {r: _interval(reps_[:, k]) for k, r in enumerate(RESPONSES)}}


def paired_adapted(model: Sequence[str], reference: Sequence[str], reps: int,
                   seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Model vs reference on "adapted vs not" over the same items (same order).

    Returns:
        ``{"n", "model_only", "reference_only", "p_mcnemar", "diff", "ci"}``: discordant counts
        (model adapted and the reference not, and the reverse), the exact McNemar p-value, the
        difference of adapted shares model − reference and its paired bootstrap interval
        (``None`` when ``n == 0``).

    Raises:
        ValueError: different lengths or an unknown label.
    """
    if len(model) != len(reference):
        raise ValueError(f"paired labels need equal lengths, got {len(model)} and {len(reference)}")
    a = _labels(model) == RESPONSES.index("adapted")
    b = _labels(reference) == RESPONSES.index("adapted")
    b_only, c_only = int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b))
    out: dict[str, Any] = {"n": int(a.size), "model_only": b_only, "reference_only": c_only,
                           "p_mcnemar": mcnemar_exact(b_only, c_only), "diff": None, "ci": None}
    if a.size:
        d = a.astype(np.int64) - b.astype(np.int64)
        reps_ = np.concatenate([d[idx].mean(axis=1) for idx in bootstrap_indices(a.size, reps, seed)])
        out.update(diff=float(d.mean()), ci=_interval(reps_))
    return out


def funnel(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Items per exclusion reason (:data:`harness.cue.scoring.EXCLUSIONS`), in funnel order.

    Returns ``{"items", "excluded": {reason: count}, "eligible"}``; every reason is present (0 when none).
    """
    excluded = {r: 0 for r in EXCLUSIONS}
    for row in rows:
        if row["exclusion"] is not None:
            excluded[row["exclusion"]] += 1
    return {"items": len(rows), "excluded": excluded, "eligible": sum(bool(r["eligible"]) for r in rows)}


def labeller_check(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The labeller's reference labels against the corpus's known labels (generated corpora):
    ``{"n", "agree", "share", "confusion": {known: {labelled: count}}}`` over rows with both."""
    pairs = [(r["known_label"], r["reference_label"]) for r in rows
             if r.get("known_label") and r.get("reference_label")]
    conf = {k: {lab: 0 for lab in RESPONSES} for k in RESPONSES}
    for k, lab in pairs:
        conf[k][lab] += 1
    agree = sum(k == lab for k, lab in pairs)
    return {"n": len(pairs), "agree": agree, "share": agree / len(pairs) if pairs else None, "confusion": conf}


def model_metrics(rows: Sequence[Mapping[str, Any]], reps: int, seed: int = BOOTSTRAP_SEED,
                  min_n: int = 30) -> dict[str, Any]:
    """One model's statistics: per intent (and ``"all"``) the model's and the reference's
    distributions over the eligible items and the paired difference; the funnel (per intent
    too) and the labeller check."""
    per: dict[str, Any] = {}
    for intent in (*INTENTS, "all"):
        sel = [r for r in rows if intent == "all" or r["intent"] == intent]
        ok = [r for r in sel if r["eligible"]]
        m, ref = [r["model_label"] for r in ok], [r["reference_label"] for r in ok]
        per[intent] = {"model": distribution(m, reps, seed, min_n), "reference": distribution(ref, reps, seed, min_n),
                       "paired": paired_adapted(m, ref, reps, seed), "funnel": funnel(sel)}
    return {"intents": per, "funnel": per["all"]["funnel"], "labeller_check": labeller_check(rows)}


__all__ = ["distribution", "funnel", "labeller_check", "model_metrics", "paired_adapted"]
