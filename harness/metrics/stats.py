"""Statistics and analyses of Duplex-MPE (spec section 6) over the scores of spec section 5.

Pure functions: nothing here reads files or keeps state. Counts are Python ``int`` or integer
numpy arrays, times are seconds (``float64``) unless a name says ``_ms``, rates are fractions in
``[0, 1]`` and effects are percentage points. Every function validates its input and raises
``ValueError`` (bad values or shapes) or ``TypeError`` (wrong kind of value, e.g. a float count).
scipy is imported by the three functions that call it (``scipy.stats`` takes about 0.6 s to
import): a job that only reads a run's constants from here does not load it.

Decisions where the spec is silent (documented per function):

* McNemar uses :func:`scipy.stats.binomtest`; its two-sided p-value is exact and, at p = 0.5,
  equals ``min(1, 2 * P(X <= min(b, c)))``.
* The bootstrap draws scene indices with ``numpy.random.default_rng(seed).integers`` (PCG64),
  replicate by replicate in one stream, so the result does not depend on the chunk size; the
  interval is the percentile interval with numpy's default (linear) percentile.
* Tertile boundaries are ``numpy.quantile(..., [1/3, 2/3])`` (linear method) and a value equal to
  a boundary goes to the **upper** bin; this reproduces the paper's 1,330 / 1,335 / 1,335 split
  (see :func:`timing_tertiles`).
* The threshold sweep passes a window whose speech equals the threshold exactly (fail only when
  speech > threshold).
* The breakdown maps label/target combinations the spec does not name to "statements" (see
  :func:`turn_type`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

BOOTSTRAP_SEED = 20260902  # spec section 6
BOOTSTRAP_REPS = 10_000  # spec section 6
BONFERRONI_M = 20  # spec section 6: 10 model pairs x 2 metrics per addressing condition
SWEEP_THRESHOLDS_MS = (0, 100, 200, 300, 500)  # spec section 6
BREAKDOWN_CATEGORIES = ("device-directed", "human-directed", "statements", "self-talk")

_BOOTSTRAP_CELLS = 500_000  # index entries per chunk when ``chunk`` is None (4 MB of int64)


def _count(x: Any, name: str) -> int:
    """A non-negative integer count (Python or numpy int, not bool or float)."""
    if isinstance(x, bool | np.bool_):
        raise TypeError(f"{name} must be an integer count, got a bool")
    try:
        v = operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an integer count, got {type(x).__name__}") from None
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


# --------------------------------------------------------------------------- paired tests


def mcnemar_exact(n_a_only: int, n_b_only: int) -> float:
    """Exact two-sided McNemar p-value on the discordant pairs (spec section 6).

    The test is the binomial test of ``n_a_only`` successes in ``n_a_only + n_b_only`` trials at
    p = 0.5 (:func:`scipy.stats.binomtest`, two-sided), which equals
    ``min(1, 2 * sum_{i <= min(b, c)} C(b + c, i) / 2**(b + c))``. With no discordant pairs the
    p-value is 1.0. Symmetric in its arguments.

    Args:
        n_a_only: pairs where only A succeeded (``int >= 0``), e.g. explicit-only successes.
        n_b_only: pairs where only B succeeded (``int >= 0``).

    Returns:
        the p-value, a float in ``[0, 1]``: mathematically positive, but it underflows to 0.0
        in double precision beyond about 1,070 discordant pairs all on one side (e.g.
        ``mcnemar_exact(2000, 0)``, whose exact value is 2**-1999); reports print it as < 1e-300.

    Raises:
        ValueError: a negative count. TypeError: a count that is not an integer.
    """
    b, c = _count(n_a_only, "n_a_only"), _count(n_b_only, "n_b_only")
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(min(1.0, binomtest(b, b + c, 0.5, alternative="two-sided").pvalue))


def paired_effect_pp(n_a_only: int, n_b_only: int, n_pairs: int) -> float:
    """Paired effect Δ = (n_a_only − n_b_only) / n_pairs × 100 in percentage points (spec section 6).

    For explicit vs implicit, A = explicit, B = implicit and ``n_pairs`` = 2,000 paired scenes
    on the full benchmark: a positive Δ means A succeeds more often.

    Args:
        n_a_only: pairs where only A succeeded (``int >= 0``).
        n_b_only: pairs where only B succeeded (``int >= 0``).
        n_pairs: all paired scenes (``int > 0``), concordant ones included.

    Returns:
        Δ in percentage points, a float in ``[-100, 100]``.

    Raises:
        ValueError: a negative count, ``n_pairs == 0`` or more discordant pairs than pairs.
        TypeError: a count that is not an integer.
    """
    b, c, n = _count(n_a_only, "n_a_only"), _count(n_b_only, "n_b_only"), _count(n_pairs, "n_pairs")
    if n == 0:
        raise ValueError("n_pairs must be > 0")
    if b + c > n:
        raise ValueError(f"{b} + {c} discordant pairs exceed n_pairs={n}")
    return (b - c) / n * 100.0


def bonferroni(p: float | np.ndarray, m: int = BONFERRONI_M) -> float | np.ndarray:
    """Bonferroni-corrected p-value(s) ``min(1, m · p)`` (spec section 6: m = 20 per condition).

    Args:
        p: a p-value or an array of them (any shape), each in ``[0, 1]``.
        m: the number of tests in the family (``int >= 1``).

    Returns:
        a float for a scalar ``p``; otherwise a ``float64`` array of ``p``'s shape.

    Raises:
        ValueError: a p-value outside ``[0, 1]`` or NaN, or ``m < 1``. TypeError: ``m`` not an int.
    """
    m = _count(m, "m")
    if m < 1:
        raise ValueError("m must be >= 1")
    arr = np.asarray(p, dtype=np.float64)
    if np.isnan(arr).any() or (arr < 0).any() or (arr > 1).any():
        raise ValueError("p-values must lie in [0, 1]")
    out = np.minimum(1.0, m * arr)
    return float(out) if out.ndim == 0 else out


def _bool_vector(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype != np.bool_:
        if arr.size and not (np.issubdtype(arr.dtype, np.integer) and np.isin(arr, (0, 1)).all()):
            raise ValueError(f"{name} must be boolean (or 0/1 integers), got dtype {arr.dtype}")
        arr = arr.astype(np.bool_)
    return arr


def paired_counts(a: Sequence[bool] | np.ndarray, b: Sequence[bool] | np.ndarray) -> tuple[int, int]:
    """Discordant counts of paired binary outcomes (input of :func:`mcnemar_exact`).

    Args:
        a: ``bool[n]`` outcomes of A (e.g. explicit fresh onset per pair, in pair order).
        b: ``bool[n]`` outcomes of B in the same pair order. 0/1 integer arrays are accepted.

    Returns:
        ``(n_a_only, n_b_only)``: pairs where only A, resp. only B, succeeded (Python ints).

    Raises:
        ValueError: shapes differ, an input is not 1-D, or not boolean / 0-1.
    """
    x, y = _bool_vector(a, "a"), _bool_vector(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired outcomes need equal shapes, got {x.shape} and {y.shape}")
    return int(np.count_nonzero(x & ~y)), int(np.count_nonzero(~x & y))


# --------------------------------------------------------------------------- bootstrap


def _scene_counts(passes: Any, totals: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    p, t = np.asarray(passes), np.asarray(totals)
    for arr, what in ((p, "pass"), (t, "total")):
        if arr.ndim != 1:
            raise ValueError(f"{what}_{name} must be 1-D (one entry per scene), got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{what}_{name} must hold integer counts, got dtype {arr.dtype}")
    if p.shape != t.shape:
        raise ValueError(f"pass_{name} and total_{name} differ in shape: {p.shape} vs {t.shape}")
    p, t = p.astype(np.int64), t.astype(np.int64)
    if (p < 0).any() or (p > t).any():
        raise ValueError(f"need 0 <= pass_{name} <= total_{name} for every scene")
    if t.sum() == 0:
        raise ValueError(f"model {name} has no windows at all")
    return p, t


def _chunk_size(n_scenes: int, chunk: int | None) -> int:
    if chunk is None:
        return max(1, _BOOTSTRAP_CELLS // max(n_scenes, 1))
    chunk = _count(chunk, "chunk")
    if chunk < 1:
        raise ValueError("chunk must be >= 1")
    return chunk


def bootstrap_indices(n_scenes: int, reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED,
                      chunk: int | None = None) -> Iterator[np.ndarray]:
    """The resampled scene indices of the scene-level bootstrap, in chunks of replicates.

    Replicate ``r`` is row ``r`` of the concatenated chunks: ``n_scenes`` indices drawn uniformly
    with replacement from ``range(n_scenes)`` by ``numpy.random.default_rng(seed).integers``.
    Draws are consumed from one stream in replicate order, so the concatenation is the same
    for every ``chunk`` (only memory changes). :func:`bootstrap_diff_replicates` uses exactly
    these draws; they are public so that a reference implementation can reuse them.

    Args:
        n_scenes: scenes per replicate (``int >= 1``; 2,000 in the benchmark).
        reps: replicates (``int >= 1``).
        seed: the generator seed (spec section 6: 20260902).
        chunk: replicates per yielded block; ``None`` keeps a block near 5·10^5 indices.

    Yields:
        ``int64[c, n_scenes]`` blocks, ``c <= chunk``, ``reps`` rows in all.

    Raises:
        ValueError: ``n_scenes``, ``reps`` or ``chunk`` below 1.
    """
    n, reps = _count(n_scenes, "n_scenes"), _count(reps, "reps")
    if n < 1 or reps < 1:
        raise ValueError("n_scenes and reps must be >= 1")
    chunk = _chunk_size(n, chunk)
    rng = np.random.default_rng(seed)
    for start in range(0, reps, chunk):
        yield rng.integers(0, n, size=(min(chunk, reps - start), n), dtype=np.int64)


def _pack(values: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Pack the columns of ``int64[n, k]`` non-negative counts into few int64 words.

    Each field gets ``w`` bits, enough for the sum of any ``n`` entries (``n * max``), so sums
    of packed words never carry between fields and unpack exactly. Returns
    ``(words int64[n, n_words], w, fields_per_word)``.
    """
    n, k = values.shape
    w = max(1, (n * int(values.max(initial=0))).bit_length())
    if w > 63:
        raise ValueError("counts too large to sum exactly in int64")
    per = min(k, 63 // w)
    n_words = -(-k // per)
    words = np.zeros((n, n_words), dtype=np.int64)
    for j in range(k):
        words[:, j // per] |= values[:, j] << (w * (j % per))
    return words, w, per


def _resampled_sums(words: np.ndarray, w: int, per: int, k: int, idx: np.ndarray) -> np.ndarray:
    """Column sums of the packed scene counts over each row of ``idx`` (``int64[c, n]``) -> ``int64[c, k]``."""
    sums = np.stack([np.take(words[:, i], idx).sum(axis=1) for i in range(words.shape[1])], axis=1)
    mask = (1 << w) - 1  # w <= 63: fits int64
    return np.stack([(sums[:, j // per] >> (w * (j % per))) & mask for j in range(k)], axis=1)


def bootstrap_diff_replicates(pass_a: np.ndarray, total_a: np.ndarray, pass_b: np.ndarray, total_b: np.ndarray,
                              reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED,
                              chunk: int | None = None) -> np.ndarray:
    """Bootstrap replicates of the silence-preservation difference A − B (spec section 6).

    Replicate ``r`` takes the scene indices ``idx`` of row ``r`` of :func:`bootstrap_indices`
    (the same indices for both models) and computes
    ``sum(pass_a[idx]) / sum(total_a[idx]) - sum(pass_b[idx]) / sum(total_b[idx])``. The sums are
    exact int64 arithmetic (gathered with ``np.take`` on bit-packed counts, no Python loop over
    replicates; the only loop is over memory-bounded chunks), so the result equals a plain
    per-replicate loop over the same indices bit for bit, for every ``chunk``.

    Args:
        pass_a: ``int[n_scenes]`` passed silence windows of model A per scene.
        total_a: ``int[n_scenes]`` silence windows of model A per scene (scored conversations).
        pass_b: ``int[n_scenes]`` as ``pass_a`` for model B, same scene order.
        total_b: ``int[n_scenes]`` as ``total_a`` for model B (may differ from A's when a
            conversation errored for one model only).
        reps: replicates (spec: 10,000).
        seed: generator seed (spec: 20260902).
        chunk: replicates per block (memory only; ``None``: about 5·10^5 indices per block).

    Returns:
        ``float64[reps]`` replicate differences (fractions, not percentage points).

    Raises:
        ValueError: shapes differ or are not 1-D, a count is negative, passes exceed totals,
            a model has no windows, or a replicate draws only scenes without windows (its rate
            is undefined). TypeError: non-integer counts.
    """
    pa, ta = _scene_counts(pass_a, total_a, "a")
    pb, tb = _scene_counts(pass_b, total_b, "b")
    if pa.shape != pb.shape:
        raise ValueError(f"models a and b need the same scenes, got {pa.shape} vs {pb.shape}")
    values = np.stack([pa, ta, pb, tb], axis=1)
    words, w, per = _pack(values)
    out = np.empty(_count(reps, "reps"), dtype=np.float64)
    row = 0
    for idx in bootstrap_indices(pa.shape[0], reps, seed, chunk):
        s = _resampled_sums(words, w, per, 4, idx)
        if (s[:, 1] == 0).any() or (s[:, 3] == 0).any():
            raise ValueError("a bootstrap replicate drew only scenes without windows; its rate is undefined")
        out[row:row + idx.shape[0]] = s[:, 0] / s[:, 1] - s[:, 2] / s[:, 3]
        row += idx.shape[0]
    return out


def bootstrap_diff_ci(pass_a: np.ndarray, total_a: np.ndarray, pass_b: np.ndarray, total_b: np.ndarray,
                      reps: int = BOOTSTRAP_REPS, seed: int = BOOTSTRAP_SEED, alpha: float = 0.05,
                      chunk: int | None = None) -> tuple[float, float, float]:
    """Scene-level bootstrap CI of the silence-preservation difference A − B (spec section 6).

    Scenes (2,000 per condition) are resampled with replacement, the same resampled scenes for
    both models in a replicate (:func:`bootstrap_diff_replicates`); each model's rate is pooled
    over the resampled scenes (``sum(passes) / sum(totals)``), not a mean of per-scene rates.
    The interval is the percentile interval at ``100·alpha/2`` and ``100·(1 − alpha/2)``
    (2.5 / 97.5 for alpha = 0.05) with :func:`numpy.percentile`'s default linear method.
    Deterministic for a given seed and independent of ``chunk``. Identical inputs give exactly
    ``(0.0, 0.0, 0.0)``. About 0.2-0.4 s for 10,000 replicates × 2,000 scenes on two cores (measured).

    Args: as :func:`bootstrap_diff_replicates`, plus ``alpha`` in ``(0, 1)``.

    Returns:
        ``(observed_diff, lo, hi)``: fractions (multiply by 100 for percentage points);
        ``observed_diff`` = pooled rate of A − pooled rate of B over all scenes.

    Raises:
        ValueError: as :func:`bootstrap_diff_replicates`, or ``alpha`` outside ``(0, 1)``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    diffs = bootstrap_diff_replicates(pass_a, total_a, pass_b, total_b, reps, seed, chunk)
    pa, ta = np.asarray(pass_a, dtype=np.int64), np.asarray(total_a, dtype=np.int64)
    pb, tb = np.asarray(pass_b, dtype=np.int64), np.asarray(total_b, dtype=np.int64)
    observed = float(pa.sum() / ta.sum() - pb.sum() / tb.sum())
    lo, hi = np.percentile(diffs, [100.0 * alpha / 2, 100.0 * (1.0 - alpha / 2)])
    return observed, float(lo), float(hi)


# --------------------------------------------------------------------------- rankings, timing


def spearman_rankings(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman correlation of the rankings of the same ``k`` entries by two scores (spec section 6).

    Used for the metric-choice effect: fresh onset vs response presence over the 10
    (model, condition) entries. Computed by :func:`scipy.stats.spearmanr`: the Pearson
    correlation of the two rank vectors, ties given their average rank (so with ties it is not
    ``1 - 6 Σd² / (k(k² - 1))``). Ranking ascending or descending gives the same value.

    Args:
        x: ``float[k]`` scores of the entries by the first metric (e.g. fresh onset rates).
        y: ``float[k]`` scores of the same entries, same order, by the second metric.

    Returns:
        rho in ``[-1, 1]``.

    Raises:
        ValueError: shapes differ, not 1-D, ``k < 2``, a NaN/inf value, or a constant input
            (the correlation is undefined).
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"need two 1-D score vectors of equal length, got {a.shape} and {b.shape}")
    if a.size < 2:
        raise ValueError("need at least 2 entries to rank")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite (no NaN: an n/a rate cannot be ranked)")
    if (a == a[0]).all() or (b == b[0]).all():
        raise ValueError("a constant score vector has no ranking; the correlation is undefined")
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def assign_tertiles(times_s: Sequence[float] | np.ndarray, boundaries: Sequence[float] | np.ndarray) -> np.ndarray:
    """Bin times by shared tertile boundaries: 0 below ``b0``, 1 in ``[b0, b1)``, 2 from ``b1`` on.

    A time equal to a boundary goes to the **upper** bin (``np.searchsorted(..., side="right")``).

    Args:
        times_s: ``float[n]`` seconds.
        boundaries: ``float[2]`` non-decreasing seconds (from :func:`timing_tertiles`).

    Returns:
        ``int64[n]`` bins in ``{0, 1, 2}``.

    Raises:
        ValueError: not 1-D, non-finite values, or boundaries that are not 2 sorted values.
    """
    t = np.asarray(times_s, dtype=np.float64)
    b = np.asarray(boundaries, dtype=np.float64)
    if t.ndim != 1 or not np.isfinite(t).all():
        raise ValueError("times must be a 1-D array of finite seconds")
    if b.shape != (2,) or not np.isfinite(b).all() or b[0] > b[1]:
        raise ValueError(f"boundaries must be 2 sorted finite values, got {b}")
    return np.searchsorted(b, t, side="right").astype(np.int64)


def timing_tertiles(request_times_s: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shared tertiles of the request timing (spec section 6), descriptive only.

    ``request_times_s`` is, per request (4,000: both conditions), the time from the first human
    turn's start to T's start on a **model-independent** timeline (the scene construction,
    without model-dependent waits), so it is computed once and every model gets the same bins.

    Method: ``boundaries = numpy.quantile(t, [1/3, 2/3])`` (default ``"linear"`` method: for
    n = 4,000 the positions are exactly 1,333 and 2,666 of the sorted sample, so each boundary
    is an observed time); bins by :func:`assign_tertiles`: ``bin 0: t < b0``,
    ``bin 1: b0 <= t < b1``, ``bin 2: t >= b1``. A value equal to a boundary goes to the upper
    bin, and equal values always share a bin, so bins are unequal under ties. This matches the
    paper: 1,330 / 1,335 / 1,335 at 40.224 s / 54.656 s means four requests tied at 40.224 s
    (sorted positions 1,330-1,333) moved up, which is impossible with upper-closed bins
    (bin 0 would hold at least 1,334).

    Args:
        request_times_s: ``float[n]`` seconds, ``n >= 3``, finite.

    Returns:
        ``(boundaries float64[2], bins int64[n])`` with bins in ``{0, 1, 2}``, in input order.

    Raises:
        ValueError: not 1-D, fewer than 3 values, or a NaN/inf value.
    """
    t = np.asarray(request_times_s, dtype=np.float64)
    if t.ndim != 1 or t.size < 3:
        raise ValueError(f"need a 1-D array of at least 3 request times, got shape {t.shape}")
    if not np.isfinite(t).all():
        raise ValueError("request times must be finite")
    boundaries = np.quantile(t, [1 / 3, 2 / 3])
    return boundaries, assign_tertiles(t, boundaries)


# --------------------------------------------------------------------------- silence analyses


def threshold_sweep(speech_s: Sequence[float] | np.ndarray,
                    thresholds_ms: Iterable[int] = SWEEP_THRESHOLDS_MS) -> dict[int, dict[str, Any]]:
    """Acoustic-only silence preservation per total-speech threshold (spec section 6, sensitivity).

    No semantic exemption: a window **fails** when its total model speech is strictly greater
    than the threshold and passes otherwise, so exactly 100 ms of speech passes at 100 ms, and
    at 0 ms any speech fails. The comparison is ``speech_s > threshold_ms / 1000`` in float64;
    with ``speech_s = samples / sample_rate`` (as in ``outcomes.py``) a window of exactly the
    threshold compares equal, since both sides are the correctly rounded same rational.

    Args:
        speech_s: ``float[n_windows]`` total model speech per N1/N2/N3 window, seconds
            (the ``speech_s`` of the silence rows).
        thresholds_ms: non-negative integer thresholds in milliseconds (spec: 0/100/200/300/500).

    Returns:
        ``{threshold_ms: {"rate": passes / n (None when n == 0), "n": n, "passes": n - occupied,
        "occupied": windows with speech > threshold}}``. At 0 ms ``occupied`` is the number of
        windows with any speech: every one is transcribed, and goes to the judge unless its
        transcript is empty (under 100 ms of clipped speech, say), when it fails without a judge
        call. So occupied at 0 ms = judged windows + empty-transcript windows, not the judge
        calls alone (:func:`harness.metrics.analyses.silence_sweeps` reports both counts).

    Raises:
        ValueError: not 1-D, a negative or NaN duration, or a negative threshold.
        TypeError: a non-integer threshold.
    """
    s = np.asarray(speech_s, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"speech_s must be 1-D, got shape {s.shape}")
    if np.isnan(s).any() or (s < 0).any():
        raise ValueError("speech durations must be >= 0 and not NaN")
    n = int(s.size)
    out: dict[int, dict[str, Any]] = {}
    for thr in thresholds_ms:
        ms = _count(thr, "threshold_ms")
        occupied = int(np.count_nonzero(s > ms / 1000.0))
        out[ms] = {"rate": (n - occupied) / n if n else None, "n": n, "passes": n - occupied,
                   "occupied": occupied}
    return out


def turn_type(label: str, target: str) -> str:
    """Silence-failure breakdown category of an N1/N2/N3 turn (spec section 6).

    * N3 (no addressee) -> ``"self-talk"``, whatever the target;
    * N2 to ``device`` (a thing or another assistant) -> ``"device-directed"``;
    * N1 or N2 to ``human`` (another person) -> ``"human-directed"``;
    * every other N1/N2 -> ``"statements"``: targets ``group`` and ``aria`` (N1 mentions Aria
      but asks nothing), and the combinations the spec does not name, ``none`` and N1 to
      ``device`` (the spec reserves device-directed for N2).

    Args:
        label: a :class:`harness.scenes.schema.Label` value (str).
        target: a :class:`harness.scenes.schema.Target` value (str): aria, human, device, group, none.

    Returns:
        one of :data:`BREAKDOWN_CATEGORIES`.

    Raises:
        ValueError: a label other than N1/N2/N3 (T and N4 windows are not silence windows) or an
            unknown target.
    """
    label, target = str(label), str(target)
    if target not in ("aria", "human", "device", "group", "none"):
        raise ValueError(f"unknown target {target!r}")
    if label == "N3":
        return "self-talk"
    if label not in ("N1", "N2"):
        raise ValueError(f"{label!r} is not a silence label (N1, N2, N3)")
    if label == "N2" and target == "device":
        return "device-directed"
    if target == "human":
        return "human-directed"
    return "statements"


def failure_breakdown(rows: Iterable[Mapping[str, Any]], passed_key: str = "silent") -> dict[str, dict[str, int]]:
    """Silence windows and failures per turn type (spec section 6).

    Args:
        rows: silence rows (e.g. ``kind == "silence"`` rows of ``outcomes.py``), each with
            ``"label"`` (N1/N2/N3), ``"target"`` and ``passed_key`` (bool: the window passed;
            ``"silent"`` acoustically, ``"silence_preserved"`` after the semantic exemption).
        passed_key: which row field says the window passed.

    Returns:
        ``{category: {"windows": n, "failures": k}}`` for all four categories of
        :data:`BREAKDOWN_CATEGORIES`, in that order (zeros included).

    Raises:
        ValueError: as :func:`turn_type`, or a ``passed_key`` value that is not a bool.
        KeyError: a row without one of the three keys.
    """
    out = {c: {"windows": 0, "failures": 0} for c in BREAKDOWN_CATEGORIES}
    for r in rows:
        silent = r[passed_key]
        if not isinstance(silent, bool | np.bool_):
            raise ValueError(f"{passed_key!r} must be a bool, got {silent!r}")
        entry = out[turn_type(r["label"], r["target"])]
        entry["windows"] += 1
        entry["failures"] += int(not silent)
    return out


def rater_agreement(a: Sequence[str], b: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """Agreement of two raters' labels for the same items: percent agreement and Cohen's kappa.

    Cohen's kappa (Cohen 1960): ``kappa = (p_o - p_e) / (1 - p_e)``, ``p_o`` the observed share of
    agreement, ``p_e = sum_k p_a(k) * p_b(k)`` the agreement expected from the raters' marginal
    label frequencies (the table from :func:`scipy.stats.contingency.crosstab`; scikit-learn's
    ``cohen_kappa_score`` is the same unweighted kappa). Undefined when ``p_e == 1`` (both raters
    gave one and the same label to every item). Used for the human reviewers (spec section 6)
    and for the text reference's two passes (section 7).

    Args:
        a, b: one label per item, same length and order.
        labels: every allowed label (fixes the table's rows and columns).

    Returns:
        ``{"n", "agree", "percent", "kappa"}``: items, agreeing items, ``100 * agree / n``
        (``None`` when ``n == 0``) and Cohen's kappa (``None`` when ``n == 0`` or undefined).

    Raises:
        ValueError: different lengths, or a label not in ``labels``.
    """
    if len(a) != len(b):
        raise ValueError(f"raters labelled different numbers of items: {len(a)} and {len(b)}")
    unknown = (set(a) | set(b)) - set(labels)
    if unknown:
        raise ValueError(f"labels {sorted(unknown)} are not among {list(labels)}")
    n = len(a)
    if n == 0:
        return {"n": 0, "agree": 0, "percent": None, "kappa": None}
    from scipy.stats.contingency import crosstab

    table = crosstab(list(a), list(b), levels=(list(labels), list(labels))).count / n
    p_o = float(np.trace(table))
    p_e = float(table.sum(axis=1) @ table.sum(axis=0))
    kappa = None if np.isclose(p_e, 1.0) else (p_o - p_e) / (1.0 - p_e)
    agree = sum(x == y for x, y in zip(a, b, strict=True))
    return {"n": n, "agree": agree, "percent": 100.0 * agree / n, "kappa": kappa}
