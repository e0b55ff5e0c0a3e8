"""Statistics of spec section 6 (harness/metrics/stats.py) against independently computed values.

Expected values are hand-computed (binomial sums with ``math.comb``, hand ranks, hand-counted
windows) or come from a slow per-replicate reference loop over the same bootstrap draws.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.metrics.stats import (
    BREAKDOWN_CATEGORIES,
    bonferroni,
    bootstrap_diff_ci,
    bootstrap_diff_replicates,
    bootstrap_indices,
    failure_breakdown,
    mcnemar_exact,
    paired_counts,
    paired_effect_pp,
    spearman_rankings,
    threshold_sweep,
    timing_tertiles,
    turn_type,
)


def binom_two_sided(b: int, c: int) -> Fraction:
    """Exact two-sided McNemar p at p = 0.5: 2 · P(X <= min(b, c)), capped at 1."""
    n, k = b + c, min(b, c)
    return min(Fraction(1), 2 * Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2**n))


# --------------------------------------------------------------------------- McNemar


@pytest.mark.parametrize(("b", "c", "expected"), [
    (0, 5, 0.0625),  # 2 · 0.5^5
    (1, 9, 22 / 1024),  # 2 · (C(10,0) + C(10,1)) / 2^10 = 2 · 11 / 1024
    (3, 3, 1.0),
    (0, 0, 1.0),  # no discordant pairs
    (0, 1, 1.0),
    (2, 10, 2 * (1 + 12 + 66) / 4096),  # 2 · (C(12,0) + C(12,1) + C(12,2)) / 2^12
])
def test_mcnemar_hand_values(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300))
def test_mcnemar_symmetric_and_matches_binomial_sum(b: int, c: int) -> None:
    p = mcnemar_exact(b, c)
    assert p == mcnemar_exact(c, b)
    assert 0.0 < p <= 1.0
    assert p == pytest.approx(float(binom_two_sided(b, c)), rel=1e-9)


def test_mcnemar_accepts_numpy_ints_and_rejects_bad_counts() -> None:
    assert mcnemar_exact(np.int64(0), np.int32(5)) == pytest.approx(0.0625)
    with pytest.raises(ValueError, match="n_a_only must be >= 0, got -1"):
        mcnemar_exact(-1, 3)
    with pytest.raises(ValueError, match="n_b_only must be >= 0, got -1"):
        mcnemar_exact(3, -1)
    with pytest.raises(TypeError, match="n_a_only must be an integer count, got float"):
        mcnemar_exact(2.5, 3)


# --------------------------------------------------------------------------- effect, Bonferroni, counts


def test_paired_effect_sign_and_scale() -> None:
    assert paired_effect_pp(30, 10, 2000) == pytest.approx(1.0)  # 20 / 2000 · 100
    assert paired_effect_pp(10, 30, 2000) == pytest.approx(-1.0)
    assert paired_effect_pp(0, 0, 2000) == 0.0
    assert paired_effect_pp(2000, 0, 2000) == pytest.approx(100.0)
    assert paired_effect_pp(131, 0, 2000) == pytest.approx(6.55)


@pytest.mark.parametrize(("args", "message"), [
    ((1, 1, 0), "n_pairs must be > 0"),
    ((-1, 0, 10), "n_a_only must be >= 0"),
    ((6, 5, 10), r"6 \+ 5 discordant pairs exceed n_pairs=10"),
])
def test_paired_effect_rejects_bad_counts(args: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_effect_pp(*args)


def test_bonferroni_scalar_array_and_cap() -> None:
    assert bonferroni(0.001) == pytest.approx(0.02)
    assert bonferroni(0.05) == 1.0  # 20 · 0.05 = 1, capped
    assert bonferroni(0.3) == 1.0
    assert bonferroni(0.0) == 0.0
    assert isinstance(bonferroni(0.01), float)
    assert bonferroni(0.2, m=1) == pytest.approx(0.2)
    out = bonferroni(np.array([[0.0, 0.001], [0.04, 0.9]]))
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, [[0.0, 0.02], [0.8, 1.0]])
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"p-values must lie in \[0, 1\]"):
            bonferroni(bad)
    with pytest.raises(ValueError, match="m must be >= 1"):
        bonferroni(0.1, m=0)


def test_paired_counts() -> None:
    a = np.array([True, True, False, False, True, True])
    b = np.array([True, False, True, False, False, True])
    assert paired_counts(a, b) == (2, 1)
    assert paired_counts(b, a) == (1, 2)
    assert paired_counts([1, 0, 1], [0, 0, 1]) == (1, 0)  # 0/1 ints are accepted
    assert paired_counts(np.array([], dtype=bool), np.array([], dtype=bool)) == (0, 0)
    with pytest.raises(ValueError, match="paired outcomes need equal shapes"):
        paired_counts(a, b[:-1])
    with pytest.raises(ValueError, match="a must be boolean"):
        paired_counts([0.5, 1.0], [1, 0])
    with pytest.raises(ValueError, match=r"a must be 1-D, got shape \(2, 3\)"):
        paired_counts(a.reshape(2, 3), b.reshape(2, 3))


# --------------------------------------------------------------------------- bootstrap


def scene_counts(n: int, rate_a: float, rate_b: float, seed: int = 3, scale: int = 1):
    rng = np.random.default_rng(seed)
    total = rng.integers(1, 25, n) * scale
    return rng.binomial(total, rate_a), total, rng.binomial(total, rate_b), total.copy()


def reference_replicates(pa, ta, pb, tb, reps: int, seed: int) -> np.ndarray:
    """Slow reference: one Python iteration per replicate over the same index draws."""
    idx = np.concatenate(list(bootstrap_indices(len(pa), reps, seed, chunk=reps)))
    out = []
    for row in idx:
        ra = sum(int(pa[i]) for i in row) / sum(int(ta[i]) for i in row)
        rb = sum(int(pb[i]) for i in row) / sum(int(tb[i]) for i in row)
        out.append(ra - rb)
    return np.array(out)


@pytest.mark.parametrize("scale", [1, 10**6, 10**12])  # 4, 2 and 1 packed fields per int64 word
def test_bootstrap_vectorised_equals_reference_loop(scale: int) -> None:
    pa, ta, pb, tb = scene_counts(37, 0.9, 0.6, scale=scale)
    ref = reference_replicates(pa, ta, pb, tb, reps=200, seed=11)
    got = bootstrap_diff_replicates(pa, ta, pb, tb, reps=200, seed=11, chunk=64)
    np.testing.assert_array_equal(got, ref)  # bit for bit: exact integer sums, same division


def test_bootstrap_indices_independent_of_chunk() -> None:
    whole = np.concatenate(list(bootstrap_indices(13, 50, seed=5, chunk=50)))
    assert whole.shape == (50, 13) and whole.min() >= 0 and whole.max() <= 12
    for chunk in (1, 3, 7, 49, None):
        np.testing.assert_array_equal(np.concatenate(list(bootstrap_indices(13, 50, seed=5, chunk=chunk))), whole)


def test_bootstrap_deterministic_and_chunk_independent() -> None:
    pa, ta, pb, tb = scene_counts(200, 0.92, 0.84)
    first = bootstrap_diff_ci(pa, ta, pb, tb, reps=1000)
    assert bootstrap_diff_ci(pa, ta, pb, tb, reps=1000) == first
    for chunk in (1, 17, 333, 1000, 5000):
        assert bootstrap_diff_ci(pa, ta, pb, tb, reps=1000, chunk=chunk) == first
    assert bootstrap_diff_ci(pa, ta, pb, tb, reps=1000, seed=1) != first


def test_bootstrap_ci_contains_observed_and_matches_pooled_rates() -> None:
    pa, ta, pb, tb = scene_counts(300, 0.9, 0.8)
    obs, lo, hi = bootstrap_diff_ci(pa, ta, pb, tb, reps=2000)
    assert obs == pytest.approx(pa.sum() / ta.sum() - pb.sum() / tb.sum(), abs=1e-15)
    assert lo < obs < hi
    diffs = bootstrap_diff_replicates(pa, ta, pb, tb, reps=2000)
    assert (lo, hi) == tuple(np.percentile(diffs, [2.5, 97.5]))
    _, lo90, hi90 = bootstrap_diff_ci(pa, ta, pb, tb, reps=2000, alpha=0.10)
    assert lo <= lo90 < hi90 <= hi


def test_bootstrap_spread_matches_delta_method() -> None:
    """Independent check of the scale: the bootstrap SD of a difference of ratio estimators is
    close to its linearised (delta-method) standard error."""
    pa, ta, pb, tb = scene_counts(2000, 0.9, 0.7, seed=8)
    diffs = bootstrap_diff_replicates(pa, ta, pb, tb, reps=4000, seed=20260902)
    ra, rb = pa.sum() / ta.sum(), pb.sum() / tb.sum()
    d = (pa - ra * ta) / ta.mean() - (pb - rb * tb) / tb.mean()
    se = np.sqrt(d.var() / len(d))
    assert diffs.std() == pytest.approx(se, rel=0.1)
    assert diffs.mean() == pytest.approx(ra - rb, abs=se / 5)


def test_bootstrap_identical_models_is_exactly_zero() -> None:
    pa, ta, _, _ = scene_counts(500, 0.9, 0.5)
    assert bootstrap_diff_ci(pa, ta, pa.copy(), ta.copy(), reps=500) == (0.0, 0.0, 0.0)


def test_bootstrap_totals_may_differ_between_models() -> None:
    pa, ta, pb, tb = scene_counts(20, 0.9, 0.5)
    tb[3], pb[3] = 0, 0  # model b's conversation errored: its windows are excluded
    obs, lo, hi = bootstrap_diff_ci(pa, ta, pb, tb, reps=300)
    assert lo <= hi and obs == pytest.approx(pa.sum() / ta.sum() - pb.sum() / tb.sum())


def test_bootstrap_rejects_bad_input() -> None:
    pa, ta, pb, tb = scene_counts(10, 0.9, 0.5)
    with pytest.raises(ValueError, match="models a and b need the same scenes"):
        bootstrap_diff_ci(pa, ta, pb[:-1], tb[:-1])
    with pytest.raises(ValueError, match="need 0 <= pass_a <= total_a"):
        bootstrap_diff_ci(ta + 1, ta, pb, tb)  # passes exceed totals
    with pytest.raises(ValueError, match="need 0 <= pass_a <= total_a"):
        bootstrap_diff_ci(-pa, ta, pb, tb)
    with pytest.raises(TypeError, match="pass_a must hold integer counts"):
        bootstrap_diff_ci(pa.astype(float), ta, pb, tb)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        bootstrap_diff_ci(pa, ta, pb, tb, alpha=1.0)
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        bootstrap_diff_ci(pa, ta, pb, tb, chunk=0)
    with pytest.raises(ValueError, match="drew only scenes without windows"):  # that replicate has no rate
        bootstrap_diff_ci(np.array([0, 3]), np.array([0, 4]), np.array([0, 1]), np.array([0, 4]), reps=100)


# --------------------------------------------------------------------------- Spearman


def test_spearman_identical_and_reversed() -> None:
    x = [0.95, 0.634, 0.538, 0.6465, 0.2525, 0.9435, 0.67, 0.5425, 0.667, 0.258]
    assert spearman_rankings(x, x) == pytest.approx(1.0)
    assert spearman_rankings(x, [-v for v in x]) == pytest.approx(-1.0)
    assert spearman_rankings(x, [2 * v + 1 for v in x]) == pytest.approx(1.0)  # monotone: same ranking


def test_spearman_without_ties_matches_classic_formula() -> None:
    x = [0.9, 0.2, 0.5, 0.7, 0.1]  # ranks 5 2 3 4 1
    y = [0.8, 0.3, 0.9, 0.4, 0.1]  # ranks 4 2 5 3 1; d = 1 0 -2 1 0, Σd² = 6
    assert spearman_rankings(x, y) == pytest.approx(1 - 6 * 6 / (5 * (25 - 1)))  # 0.7


def test_spearman_with_ties_is_pearson_on_mid_ranks() -> None:
    # x ranks 1, 2.5, 2.5, 4; y ranks 1, 2, 3, 4. Deviations (-1.5, 0, 0, 1.5), (-1.5, -.5, .5, 1.5):
    # cov 4.5, var_x 4.5, var_y 5 -> rho = 4.5 / sqrt(22.5) = sqrt(0.9) (the no-tie formula gives 0.95)
    assert spearman_rankings([1.0, 2.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(0.9))


@pytest.mark.parametrize(("x", "y", "message"), [
    ([0.1, float("nan"), 0.3], [0.1, 0.2, 0.3], "scores must be finite"),
    ([0.1, 0.2], [0.1, 0.2, 0.3], "need two 1-D score vectors of equal length"),
    ([0.1], [0.2], "need at least 2 entries to rank"),
    ([0.5, 0.5, 0.5], [0.1, 0.2, 0.3], "a constant score vector has no ranking"),
])
def test_spearman_rejects(x, y, message) -> None:
    with pytest.raises(ValueError, match=message):
        spearman_rankings(x, y)


# --------------------------------------------------------------------------- timing tertiles


def test_tertiles_small_sample_with_ties() -> None:
    # n = 10: boundaries at sorted positions 3 and 6 -> 3.0 and 5.0; the three 3.0s share bin 1
    t = np.array([5.0, 1.0, 3.0, 8.0, 3.0, 2.0, 6.0, 3.0, 4.0, 7.0])
    bounds, bins = timing_tertiles(t)
    np.testing.assert_array_equal(bounds, [3.0, 5.0])
    np.testing.assert_array_equal(bins, [2, 0, 1, 2, 1, 0, 2, 1, 1, 2])
    assert bins.dtype == np.int64


def test_tertiles_interpolated_boundaries() -> None:
    bounds, bins = timing_tertiles(np.arange(8.0))  # positions 7/3 and 14/3
    np.testing.assert_allclose(bounds, [7 / 3, 14 / 3])
    np.testing.assert_array_equal(bins, [0, 0, 0, 1, 1, 2, 2, 2])


def test_tertiles_reproduce_paper_split() -> None:
    """4,000 requests with four ties at 40.224 s (sorted 1,330-1,333) and two at 54.656 s
    (sorted 2,665-2,666) give the paper's boundaries and 1,330 / 1,335 / 1,335 bins."""
    low = np.linspace(14.5, 40.0, 1330)
    mid = np.linspace(40.5, 54.5, 2665 - 1334)
    high = np.linspace(55.0, 263.97, 4000 - 2667)
    t = np.concatenate([low, [40.224] * 4, mid, [54.656] * 2, high])
    assert t.size == 4000
    t = np.random.default_rng(0).permutation(t)
    bounds, bins = timing_tertiles(t)
    np.testing.assert_array_equal(bounds, [40.224, 54.656])
    assert np.bincount(bins).tolist() == [1330, 1335, 1335]
    assert set(bins[t == 40.224]) == {1} and set(bins[t == 54.656]) == {2}  # boundary values go up


def test_tertiles_reject_bad_input() -> None:
    for bad, message in (([1.0, 2.0], "at least 3 request times"), ([1.0, float("nan"), 3.0], "must be finite"),
                         (np.ones((2, 3)), r"got shape \(2, 3\)")):
        with pytest.raises(ValueError, match=message):
            timing_tertiles(bad)


# --------------------------------------------------------------------------- threshold sweep


def test_threshold_sweep_hand_counted() -> None:
    sr = 16_000
    samples = np.array([0, 0, 1, 1600, 1601, 3200, 4800, 8000, 8001])  # 0, 0, 1 sample, 100 ms, ...
    sweep = threshold_sweep(samples / sr)
    assert list(sweep) == [0, 100, 200, 300, 500]
    # 0 ms: any speech fails -> 7 occupied (= the judge calls of the semantic flow)
    assert sweep[0] == {"rate": 2 / 9, "n": 9, "passes": 2, "occupied": 7}
    # 100 ms: exactly 100 ms passes; 1601, 3200, 4800, 8000, 8001 fail
    assert sweep[100] == {"rate": 4 / 9, "n": 9, "passes": 4, "occupied": 5}
    assert sweep[200]["occupied"] == 3  # 3200 (= 200 ms) passes; 4800, 8000, 8001 fail
    assert sweep[300]["occupied"] == 2  # 4800 (= 300 ms) passes; 8000, 8001 fail
    assert sweep[500]["occupied"] == 1  # 8000 = 500 ms passes, 8001 fails


@pytest.mark.parametrize("sr", [8_000, 16_000, 22_050, 24_000, 44_100, 48_000])
def test_threshold_sweep_exact_threshold_passes_at_every_rate(sr: int) -> None:
    ms = (100, 200, 300, 500)
    speech = np.array([sr * m // 1000 for m in ms]) / sr  # windows of exactly 100/200/300/500 ms
    sweep = threshold_sweep(speech, ms)
    assert [sweep[m]["occupied"] for m in ms] == [3, 2, 1, 0]


def test_threshold_sweep_edge_cases() -> None:
    assert threshold_sweep([])[0] == {"rate": None, "n": 0, "passes": 0, "occupied": 0}
    assert threshold_sweep([0.25], thresholds_ms=(250,))[250]["occupied"] == 0
    with pytest.raises(ValueError, match="speech durations must be >= 0 and not NaN"):
        threshold_sweep([-0.1])
    with pytest.raises(ValueError, match="speech durations must be >= 0 and not NaN"):
        threshold_sweep([float("nan")])
    with pytest.raises(ValueError, match="threshold_ms must be >= 0, got -100"):
        threshold_sweep([0.1], thresholds_ms=(-100,))
    with pytest.raises(TypeError, match="threshold_ms must be an integer count, got float"):
        threshold_sweep([0.1], thresholds_ms=(0.1,))


# --------------------------------------------------------------------------- failure breakdown


@pytest.mark.parametrize(("label", "target", "category"), [
    ("N2", "device", "device-directed"),
    ("N2", "human", "human-directed"),
    ("N1", "human", "human-directed"),
    ("N1", "group", "statements"),
    ("N2", "group", "statements"),
    ("N1", "aria", "statements"),
    ("N1", "device", "statements"),  # device-directed is N2 only (spec section 6)
    ("N2", "none", "statements"),
    ("N3", "none", "self-talk"),
    ("N3", "group", "self-talk"),
])
def test_turn_type(label: str, target: str, category: str) -> None:
    assert turn_type(label, target) == category


def test_turn_type_rejects_non_silence_labels_and_unknown_targets() -> None:
    for label in ("T", "N4_Q", "N4_R"):
        with pytest.raises(ValueError, match=rf"'{label}' is not a silence label"):
            turn_type(label, "aria")
    with pytest.raises(ValueError, match="unknown target 'robot'"):
        turn_type("N2", "robot")


def test_failure_breakdown() -> None:
    rows = [
        {"label": "N2", "target": "device", "silent": False},
        {"label": "N2", "target": "device", "silent": True},
        {"label": "N2", "target": "device", "silent": False},
        {"label": "N1", "target": "human", "silent": True},
        {"label": "N2", "target": "human", "silent": False},
        {"label": "N1", "target": "aria", "silent": False},
        {"label": "N2", "target": "group", "silent": True},
        {"label": "N3", "target": "none", "silent": np.bool_(False)},
    ]
    out = failure_breakdown(rows)
    assert list(out) == list(BREAKDOWN_CATEGORIES)
    assert out == {
        "device-directed": {"windows": 3, "failures": 2},
        "human-directed": {"windows": 2, "failures": 1},
        "statements": {"windows": 2, "failures": 1},
        "self-talk": {"windows": 1, "failures": 1},
    }
    assert failure_breakdown([]) == {c: {"windows": 0, "failures": 0} for c in BREAKDOWN_CATEGORIES}
    with pytest.raises(ValueError, match="'silent' must be a bool, got 1"):
        failure_breakdown([{"label": "N1", "target": "group", "silent": 1}])
    with pytest.raises(ValueError, match="'T' is not a silence label"):
        failure_breakdown([{"label": "T", "target": "aria", "silent": True}])
