"""Duplex Cue statistics (spec section 9; docs/cue.md, "Statistics"): per intent, the response
distribution of the model and of the human reference, and their paired comparison.

Pure functions over the rows of :func:`harness.cue.scoring.item_row`; only **eligible** rows
count (error rows and excluded items never do). Shares are fractions in ``[0, 1]``.

* **Distribution**: counts and shares of Continued / Adapted / Yielded, each share with a
  percentile bootstrap interval (2.5 / 97.5 percentiles of ``reps`` resamples,
  :func:`harness.metrics.stats.bootstrap_indices`, seeded). The resampled unit is
  ``bootstrap_unit``: ``"recording"`` (default, a cluster bootstrap: cues of one conversation
  are not independent, and the paper's 300 cues come from 65 conversations; a replicate draws
  recordings with replacement and pools their items, its share the ratio of the pooled counts)
  or ``"item"``.
* **Paired comparison** (model vs reference on the same items): the 3 x 3 table of the
  reference's response (rows) by the model's (columns) on the same cue; the Stuart-Maxwell test
  of marginal homogeneity of that table (does the model's response distribution differ from the
  human's, whatever the shift); the exact two-sided McNemar on "adapted vs not"
  (:func:`harness.metrics.stats.mcnemar_exact`), the difference of the adapted shares (model −
  reference) and its paired bootstrap interval (the same resampled units for both).
* A share whose denominator is under ``min_n`` is still given, flagged ``small`` (the report
  writes n beside every figure; the paper's anchor has n = 66).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from harness.cue.schema import INTENTS, RESPONSES
from harness.cue.scoring import EXCLUSIONS
from harness.metrics.stats import BOOTSTRAP_SEED, bootstrap_indices, mcnemar_exact

ALPHA = 0.05
BOOTSTRAP_UNITS = ("recording", "item")  # what a bootstrap replicate resamples (cue.bootstrap_unit)


def _labels(labels: Sequence[str]) -> np.ndarray:
    bad = sorted({x for x in labels if x not in RESPONSES}, key=str)
    if bad:
        raise ValueError(f"labels {bad} are not among {list(RESPONSES)}")
    return np.array([RESPONSES.index(x) for x in labels], dtype=np.int64)


def _interval(values: np.ndarray) -> list[float]:
    lo, hi = np.percentile(values, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return [float(lo), float(hi)]


def _clusters(n: int, clusters: Sequence[str] | None) -> np.ndarray:
    """``int64[n]``: each item's cluster index (first-seen order); ``None``: every item its own."""
    if clusters is None:
        return np.arange(n, dtype=np.int64)
    if len(clusters) != n:
        raise ValueError(f"clusters must give one id per item: {len(clusters)} ids for {n} items")
    index: dict[str, int] = {}
    return np.array([index.setdefault(c, len(index)) for c in clusters], dtype=np.int64)


def _resampled_means(values: np.ndarray, clusters: np.ndarray, reps: int, seed: int) -> np.ndarray:
    """``float64[reps, k]``: per bootstrap replicate, the mean of each column of ``values``
    (``float64[n, k]``) over the items of ``n_clusters`` clusters drawn with replacement
    (each item its own cluster: the item bootstrap). A cluster drawn twice counts twice."""
    k = int(clusters.max()) + 1
    sums = np.zeros((k, values.shape[1]))
    np.add.at(sums, clusters, values)
    sizes = np.bincount(clusters, minlength=k).astype(np.float64)
    out = np.empty((reps, values.shape[1]))
    row = 0
    for idx in bootstrap_indices(k, reps, seed):
        out[row:row + len(idx)] = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)[:, None]
        row += len(idx)
    return out


def _one_hot(codes: np.ndarray) -> np.ndarray:
    return (codes[:, None] == np.arange(len(RESPONSES))[None, :]).astype(np.float64)


def distribution(labels: Sequence[str], reps: int, seed: int = BOOTSTRAP_SEED, min_n: int = 30,
                 clusters: Sequence[str] | None = None) -> dict[str, Any]:
    """The response distribution of ``labels`` (one of :data:`RESPONSES` per item).

    Args:
        clusters: each item's recording id: the bootstrap resamples recordings (module
            docstring); ``None`` resamples items.

    Returns:
        ``{"n", "small", "counts": {response: int}, "shares": {response: float | None},
        "ci": {response: [lo, hi] | None}}``; shares and intervals are ``None`` when ``n == 0``.

    Raises:
        ValueError: an unknown label, ``reps < 1``, or ``clusters`` of another length.
    """
    codes = _labels(labels)
    n = int(codes.size)
    counts = {r: int(np.count_nonzero(codes == k)) for k, r in enumerate(RESPONSES)}
    groups = _clusters(n, clusters)
    if n == 0:
        return {"n": 0, "small": True, "counts": counts, "shares": dict.fromkeys(RESPONSES),
                "ci": dict.fromkeys(RESPONSES)}
    reps_ = _resampled_means(_one_hot(codes), groups, reps, seed)
    return {"n": n, "small": n < min_n, "counts": counts, "shares": {r: counts[r] / n for r in RESPONSES},
            "ci": {r: _interval(reps_[:, k]) for k, r in enumerate(RESPONSES)}}


def _pair(model: Sequence[str], reference: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    if len(model) != len(reference):
        raise ValueError(f"paired labels need equal lengths, got {len(model)} and {len(reference)}")
    return _labels(model), _labels(reference)


def paired_adapted(model: Sequence[str], reference: Sequence[str], reps: int, seed: int = BOOTSTRAP_SEED,
                   clusters: Sequence[str] | None = None) -> dict[str, Any]:
    """Model vs reference on "adapted vs not" over the same items (same order).

    Args:
        clusters: as :func:`distribution` (the same resampled units for both conditions).

    Returns:
        ``{"n", "model_only", "reference_only", "p_mcnemar", "diff", "ci"}``: discordant counts
        (model adapted and the reference not, and the reverse), the exact McNemar p-value, the
        difference of adapted shares model − reference and its paired bootstrap interval
        (``None`` when ``n == 0``).

    Raises:
        ValueError: different lengths, an unknown label, or ``clusters`` of another length.
    """
    m, r = _pair(model, reference)
    a, b = m == RESPONSES.index("adapted"), r == RESPONSES.index("adapted")
    groups = _clusters(int(a.size), clusters)
    b_only, c_only = int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b))
    out: dict[str, Any] = {"n": int(a.size), "model_only": b_only, "reference_only": c_only,
                           "p_mcnemar": mcnemar_exact(b_only, c_only), "diff": None, "ci": None}
    if a.size:
        d = (a.astype(np.int64) - b.astype(np.int64)).astype(np.float64)[:, None]
        out.update(diff=float(d.mean()), ci=_interval(_resampled_means(d, groups, reps, seed)[:, 0]))
    return out


def paired_table(model: Sequence[str], reference: Sequence[str]) -> list[list[int]]:
    """The 3 x 3 table of paired responses on the same cues: ``table[i][j]`` items whose
    reference (recorded A) response is ``RESPONSES[i]`` and the model's ``RESPONSES[j]``.

    Raises:
        ValueError: different lengths or an unknown label.
    """
    m, r = _pair(model, reference)
    table = np.zeros((len(RESPONSES), len(RESPONSES)), np.int64)
    np.add.at(table, (r, m), 1)
    return table.tolist()


def stuart_maxwell(table: Sequence[Sequence[int]]) -> dict[str, Any]:
    """The Stuart-Maxwell test of marginal homogeneity of a square table of paired responses
    (rows: one condition, columns: the other; Stuart 1955, Maxwell 1970): ``d`` the row minus
    column marginals of the first ``k - 1`` categories, ``S`` their covariance under
    homogeneity (``S_ii = n_i. + n_.i - 2 n_ii``, ``S_ij = -(n_ij + n_ji)``),
    ``chi2 = d' S^-1 d`` on ``k - 1`` degrees of freedom.

    A category no pair left (all its pairs on the diagonal, or none at all) makes ``S``
    singular: the generalised inverse is used and ``df`` is the rank of ``S`` (0 when every
    pair agrees: ``chi2 = 0``, ``p = 1``).

    Returns:
        ``{"chi2", "df", "p"}``.

    Raises:
        ValueError: not a square table of non-negative integers, or smaller than 2 x 2.
    """
    t = np.asarray(table)
    if t.ndim != 2 or t.shape[0] != t.shape[1] or t.shape[0] < 2 or not np.issubdtype(t.dtype, np.integer) \
            or (t < 0).any():
        raise ValueError(f"stuart_maxwell needs a square table of counts >= 0, at least 2 x 2, got {t.tolist()}")
    t = t.astype(np.float64)
    rows, cols = t.sum(axis=1), t.sum(axis=0)
    d = (rows - cols)[:-1]
    s = -(t + t.T)
    np.fill_diagonal(s, rows + cols - 2 * np.diag(t))
    s = s[:-1, :-1]
    df = int(np.linalg.matrix_rank(s))
    if df == 0:
        return {"chi2": 0.0, "df": 0, "p": 1.0}
    chi2 = float(d @ np.linalg.pinv(s) @ d)
    return {"chi2": chi2, "df": df, "p": float(sps.chi2.sf(chi2, df))}


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
                  min_n: int = 30, bootstrap_unit: str = "recording") -> dict[str, Any]:
    """One model's statistics: per intent (and ``"all"``) over the eligible items the model's
    and the reference's distributions, the paired 3 x 3 table (reference rows, model columns,
    :func:`paired_table`) with its Stuart-Maxwell test, and the paired "adapted vs not"
    comparison; the funnel (per intent too) and the labeller check. ``bootstrap_unit``: one of
    :data:`BOOTSTRAP_UNITS` (``cue.bootstrap_unit``).

    Raises:
        ValueError: an unknown ``bootstrap_unit`` or label.
    """
    if bootstrap_unit not in BOOTSTRAP_UNITS:
        raise ValueError(f"bootstrap_unit must be one of {', '.join(BOOTSTRAP_UNITS)}, got {bootstrap_unit!r}")
    per: dict[str, Any] = {}
    for intent in (*INTENTS, "all"):
        sel = [r for r in rows if intent == "all" or r["intent"] == intent]
        ok = [r for r in sel if r["eligible"]]
        m, ref = [r["model_label"] for r in ok], [r["reference_label"] for r in ok]
        groups = [r["recording_id"] for r in ok] if bootstrap_unit == "recording" else None
        table = paired_table(m, ref)
        per[intent] = {"model": distribution(m, reps, seed, min_n, groups),
                       "reference": distribution(ref, reps, seed, min_n, groups),
                       "table": table, "homogeneity": stuart_maxwell(table),
                       "paired": paired_adapted(m, ref, reps, seed, groups), "funnel": funnel(sel)}
    return {"intents": per, "funnel": per["all"]["funnel"], "labeller_check": labeller_check(rows),
            "bootstrap_unit": bootstrap_unit}


__all__ = ["BOOTSTRAP_UNITS", "distribution", "funnel", "labeller_check", "model_metrics", "paired_adapted",
           "paired_table", "stuart_maxwell"]
