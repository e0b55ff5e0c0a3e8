"""Statistics and analyses of spec section 6, computed from the per-event rows of every model.

Input rows are those of :func:`harness.metrics.outcomes.conversation_outcomes` with a
``model`` key. Scenes with an error for a model are simply absent from that model's rows,
so every paired comparison uses only the pairs/scenes scored on both sides.

The **comparison family** (between-model McNemar tests with their Bonferroni m, the
between-model silence bootstrap, the metric-choice Spearman ranking) holds only the models
whose role is ``evaluated`` (``model.<name>.role``): self-test baselines (``silent``,
``babble``, ``oracle``, which reads the schedule) and reference systems are scored and shown
but never enter it, so m = 2 x C(k, 2) over the k evaluated models (20 for the paper's five).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from harness.metrics import stats
from harness.metrics.scores import SCORES, condition_scores

PAIRED_T_METRICS = ("fresh_onset", "response_presence", "answer_correct")
#: the score each per-request field of PAIRED_T_METRICS counts
PAIRED_SCORE = {"fresh_onset": "fresh_onset_response_rate", "response_presence": "response_presence",
                "answer_correct": "conditional_answer_accuracy"}
BETWEEN_MODEL_METRICS = ("fresh_onset_response_rate", "conditional_answer_accuracy")
EVALUATED = "evaluated"  # the role of a model that enters the comparison family


def comparison_family(roles: Mapping[str, str]) -> dict[str, Any]:
    """The models compared with each other and the Bonferroni m of each addressing condition.

    Args:
        roles: ``{model: role}`` of every model in the run (``model.<name>.role``: ``evaluated``,
            ``baseline`` or ``reference``).

    Returns:
        ``{"models": sorted evaluated models, "excluded": {model: role} of the others,
        "pairs": C(k, 2), "m": 2 x C(k, 2)}`` (spec section 6: 10 pairs x 2 metrics = 20 for
        five models). ``m`` is 0 when fewer than two models are evaluated (no test is run).
    """
    models = sorted(m for m, role in roles.items() if role == EVALUATED)
    pairs = len(models) * (len(models) - 1) // 2
    return {"models": models, "excluded": {m: r for m, r in sorted(roles.items()) if r != EVALUATED},
            "pairs": pairs, "m": pairs * len(BETWEEN_MODEL_METRICS)}


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


def between_models(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]], family: Mapping[str, Any],
                   condition: str, alpha: float = 0.05) -> list[dict[str, Any]]:
    """Exact McNemar for every pair of the family's models on fresh onset and on conditional
    answer accuracy, Bonferroni with the family's m (spec section 6: m = 20 for 5 models).

    ``family`` is :func:`comparison_family`'s result; models outside it are not compared.
    Returns one entry per (pair, metric) with ``p`` and ``p_bonferroni = min(1, m·p)``.
    """
    m = family["m"]
    out = []
    for a, b in combinations(family["models"], 2):
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


def silence_bootstrap(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]], models: Sequence[str],
                      condition: str, reps: int = stats.BOOTSTRAP_REPS,
                      seed: int = stats.BOOTSTRAP_SEED) -> list[dict[str, Any]]:
    """Scene-level bootstrap CI of the silence-preservation difference for every pair of ``models``
    (the comparison family's), over the scenes with silence windows scored for both."""
    out = []
    for a, b in combinations(sorted(models), 2):
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


def silence_explicit_vs_implicit(rows: Sequence[Mapping[str, Any]], reps: int = stats.BOOTSTRAP_REPS,
                                  seed: int = stats.BOOTSTRAP_SEED) -> dict[str, Any]:
    """Scene-level bootstrap CI of one model's silence-preservation difference explicit − implicit.

    Silence preservation is a rate over several windows per scene, not one binary outcome per
    pair, so McNemar does not apply: the paired scenes (``pair_id``) scored in both versions are
    resampled with replacement, the same pairs for both versions in a replicate, and each
    version's rate is pooled over the resampled pairs (:func:`stats.bootstrap_diff_ci` with the
    pairs as its scenes; spec section 6: 10,000 replicates, seed 20260902, 2.5/97.5 percentiles).

    Returns:
        ``{"n_pairs", "diff", "lo", "hi"}``: fractions (explicit − implicit); ``None`` values
        when no pair has silence windows in both versions.
    """
    passes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if r["kind"] == "silence":
            totals[r["pair_id"]][r["condition"]] += 1
            passes[r["pair_id"]][r["condition"]] += bool(r["silence_preserved"])
    pairs = sorted(p for p, t in totals.items() if t["explicit"] and t["implicit"])
    if not pairs:
        return {"n_pairs": 0, "diff": None, "lo": None, "hi": None}
    e_pass, e_total, i_pass, i_total = (np.array([d[p][c] for p in pairs], np.int64)
                                        for c in ("explicit", "implicit") for d in (passes, totals))
    diff, lo, hi = stats.bootstrap_diff_ci(e_pass, e_total, i_pass, i_total, reps=reps, seed=seed)
    return {"n_pairs": len(pairs), "diff": diff, "lo": lo, "hi": hi}


def metric_choice_spearman(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]],
                           models: Sequence[str]) -> dict[str, Any]:
    """Spearman correlation of the rankings by fresh onset and by response presence over every
    (model, condition) entry of ``models`` (the comparison family's) with both rates (spec section 6)."""
    x, y, entries = [], [], []
    for model in sorted(models):
        for cond, scores in metrics[model].items():
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
    """Tertiles of the time from the first human turn to T start, shared by all models, and every
    score of spec section 5 per bin (descriptive only; spec section 6).

    A conversation (one T request) falls in the bin of its request time; every score of the bin
    is computed over the rows of the bin's conversations, both conditions pooled, by
    :func:`harness.metrics.scores.condition_scores` (its own denominator each, n/a under ``min_n``).

    Returns:
        ``{"boundaries_s": [b0, b1], "bins": {model: {"0"|"1"|"2": {"n": requests,
        score: {"rate", "n", "successes", "status"}}}}}``, or ``boundaries_s`` ``None`` with a
        ``reason`` when there are fewer than 3 requests.
    """
    ids = sorted(request_times_s)
    if len(ids) < 3:
        return {"boundaries_s": None, "bins": {}, "reason": "fewer than 3 requests"}
    boundaries, bins = stats.timing_tertiles([request_times_s[s] for s in ids])
    bin_of = dict(zip(ids, bins.tolist(), strict=True))
    out: dict[str, Any] = {"boundaries_s": boundaries.tolist(), "bins": {}}
    for model, rows in rows_by_model.items():
        by_bin: dict[int, list[Mapping[str, Any]]] = {0: [], 1: [], 2: []}
        for r in rows:
            if r["scene_id"] in bin_of:
                by_bin[bin_of[r["scene_id"]]].append(r)
        per: dict[str, dict[str, Any]] = {}
        for k, sel in by_bin.items():
            entries = condition_scores(sel, 0, min_n)
            per[str(k)] = {"n": sum(r["kind"] == "T" for r in sel),
                           **{s: {f: entries[s][f] for f in ("rate", "n", "successes", "status")} for s in SCORES}}
        out["bins"][model] = per
    return out


def silence_sweeps(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Acoustic threshold sweep, the judge's share of it, and the (semantic) failure breakdown by
    turn type for one (model, condition) (spec section 6).

    The spec's identity "at 0 ms the occupied windows equal the judge calls" holds only for
    windows whose transcript is not empty: every occupied window is transcribed, and one whose
    transcript is empty (e.g. under 100 ms of clipped speech, which no ASR backend recognises)
    fails without a judge call (spec section 5). So ``judge_windows`` reports
    ``occupied_0ms == judged + empty_transcript``: ``judged`` windows went to the judge (a cache
    hit counts: it answers a judge call made once), ``empty_transcript`` failed without one.
    """
    sil = [r for r in rows if r["kind"] == "silence"]
    sweep = stats.threshold_sweep([r["speech_s"] for r in sil])
    occupied = [r for r in sil if not r["silent"]]
    judged = sum(bool(r["transcript"]) for r in occupied)
    return {"threshold_sweep": {str(k): v for k, v in sweep.items()},
            "judge_windows": {"occupied_0ms": sweep[0]["occupied"], "judged": judged,
                              "empty_transcript": len(occupied) - judged},
            "failure_breakdown": stats.failure_breakdown(sil, "silence_preserved")}


def output_checks(conversations: Mapping[str, Sequence[Mapping[str, Any]]], roles: Mapping[str, str],
                  suspect_peak_dbfs: float) -> dict[str, dict[str, Any]]:
    """Whether each model's output can be trusted at all (a broken output path scores exactly
    like perfect silence preservation).

    Args:
        conversations: ``{model: [conversation]}`` over the conversations with a stored output,
            each ``{"speech_s": total detected speech (s), "truncated": bool (speech still
            running when the stream ended), "peak": max |sample| of the stored output (full
            scale 1.0), or None when the infer record does not carry it}``.
        roles: ``{model: role}`` (a ``baseline`` that never speaks, e.g. ``silent``, is flagged
            too: the flag is expected there).
        suspect_peak_dbfs: a model whose output peak over every conversation stays below this
            (``metrics.suspect_peak_dbfs``, -60 dBFS) is suspect.

    Returns:
        per model ``{"role", "conversations", "with_speech", "truncated", "peak_dbfs"`` (``None``
        when no record carries the peak or the output is digital silence: see ``peak``),
        ``"peak"`` (linear, ``None`` when unknown), ``"suspect"`` (bool), ``"reasons"`` (why)``}``.
    """
    out = {}
    for model, convs in conversations.items():
        peaks = [c["peak"] for c in convs if c.get("peak") is not None]
        peak = max(peaks) if peaks else None
        dbfs = 20 * math.log10(peak) if peak else None
        with_speech = sum(c["speech_s"] > 0 for c in convs)
        reasons = []
        if convs and with_speech == 0:
            reasons.append(f"no speech detected in any of its {len(convs)} conversations")
        if peak is not None and (peak == 0 or dbfs < suspect_peak_dbfs):
            level = "digital silence" if peak == 0 else f"{dbfs:.1f} dBFS"
            reasons.append(f"output peak {level} stays below {suspect_peak_dbfs:g} dBFS in every conversation")
        out[model] = {"role": roles.get(model, EVALUATED), "conversations": len(convs), "with_speech": with_speech,
                      "truncated": sum(bool(c["truncated"]) for c in convs), "peak": peak, "peak_dbfs": dbfs,
                      "suspect": bool(reasons), "reasons": reasons}
    return out


def streaming_speed(conversations: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each model's per-stream real-time factor: how fast the harness streamed its conversations.

    Args:
        conversations: ``{model: [conversation]}`` over the conversations with a stored output,
            each with ``audio_s`` (seconds of output on the timeline), ``wall_s`` (seconds from
            the stream's open to its end, in its batch) and ``step_s`` (of which in the model's
            step calls); ``wall_s``/``step_s`` may be None (records from before infer-v4).

    Returns:
        per model ``{"conversations", "audio_h", "per_stream_rtf_median", "per_stream_rtf_min",
        "step_share"}``: the factor is audio seconds over wall seconds (1 = as fast as a peer paced
        in real time; the harness never paces), ``step_share`` the share of wall time inside the
        model's steps (the rest is the runner: scheduler, resampling, speech detection). ``None``
        where no record carries the times.
    """
    out = {}
    for model, convs in conversations.items():
        timed = [c for c in convs if c.get("wall_s")]
        rtf = sorted(c["audio_s"] / c["wall_s"] for c in timed)
        wall = sum(c["wall_s"] for c in timed)
        out[model] = {"conversations": len(convs), "audio_h": sum(c["audio_s"] for c in convs) / 3600,
                      "per_stream_rtf_median": float(np.median(rtf)) if rtf else None,
                      "per_stream_rtf_min": rtf[0] if rtf else None,
                      "step_share": sum(c.get("step_s") or 0.0 for c in timed) / wall if wall else None}
    return out


def stream_pacing(conversations: Mapping[str, Sequence[Mapping[str, Any]]], max_lag_s: float) -> dict[str, Any]:
    """How far each paced model's streams fell behind real time (docs/adding-a-model.md, "Remote
    services"): a stream sent late was heard late by the service, so its timing is not the
    protocol's; such conversations stay scored and are flagged here.

    Args:
        conversations: ``{model: [conversation]}``, each with ``scene_id`` and ``pacing`` (the
            infer record's ``{"max_lag_s", "behind_s"}`` in seconds, None when not paced).
        max_lag_s: the bound (``metrics.max_lag_s``): a conversation whose worst lag exceeds it
            is flagged.

    Returns:
        ``{"max_lag_s": bound, "models": {model: {"conversations" (paced, with a record),
        "worst_lag_s", "median_lag_s" (of the per-conversation worst lags), "behind_s" (summed),
        "over" (flagged scene ids, worst first)}}}``, paced models only.
    """
    models = {}
    for model, convs in conversations.items():
        paced = [c for c in convs if c.get("pacing")]
        if not paced:
            continue
        lags = [c["pacing"]["max_lag_s"] for c in paced]
        over = sorted((c for c in paced if c["pacing"]["max_lag_s"] > max_lag_s),
                      key=lambda c: -c["pacing"]["max_lag_s"])
        models[model] = {"conversations": len(paced), "worst_lag_s": max(lags),
                         "median_lag_s": float(np.median(lags)),
                         "behind_s": round(sum(c["pacing"]["behind_s"] for c in paced), 3),
                         "over": [c["scene_id"] for c in over]}
    return {"max_lag_s": max_lag_s, "models": models}


def settings_acknowledged(conversations: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """What the hosted services acknowledged of the settings asked (issue 19.7): per model whose
    records carry settings (``conversations``: ``{model: [{"settings": usage.settings or None}]}``),
    ``{"as_asked", "differs", "unacknowledged"}`` conversation counts and ``"differences"``:
    ``{difference: conversations}``, most common first."""
    out = {}
    for model, convs in conversations.items():
        settings = [c["settings"] for c in convs if c.get("settings") is not None]
        if not settings:
            continue
        differences = Counter(d for st in settings for d in st.get("mismatch") or [])
        out[model] = {"as_asked": sum(st.get("acknowledged") is not None and not st.get("mismatch")
                                      for st in settings),
                      "differs": sum(bool(st.get("mismatch")) for st in settings),
                      "unacknowledged": sum(st.get("acknowledged") is None for st in settings),
                      "differences": dict(differences.most_common())}
    return out


def all_statistics(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Mapping[str, Any],
                   request_times_s: Mapping[str, float], conditions: Sequence[str], min_n: int,
                   roles: Mapping[str, str], bootstrap_reps: int = stats.BOOTSTRAP_REPS) -> dict[str, Any]:
    """Everything of spec section 6 that this run can compute, as one JSON-able dict.

    ``roles`` (``{model: role}``, every model of ``rows_by_model``) fixes the comparison family
    (:func:`comparison_family`): between-model tests, their Bonferroni m, the between-model
    bootstrap and the Spearman ranking use the evaluated models only.
    """
    missing = set(rows_by_model) - set(roles)
    if missing:
        raise ValueError(f"models without a role: {sorted(missing)}")
    family = comparison_family({m: roles[m] for m in rows_by_model})
    return {
        "comparison_family": family,
        "explicit_vs_implicit": {m: explicit_vs_implicit(rows) for m, rows in rows_by_model.items()},
        "silence_explicit_vs_implicit": {m: silence_explicit_vs_implicit(rows, reps=bootstrap_reps)
                                         for m, rows in rows_by_model.items()},
        "between_models": {c: between_models(rows_by_model, family, c) for c in conditions},
        "silence_bootstrap": {c: silence_bootstrap(rows_by_model, family["models"], c, reps=bootstrap_reps)
                              for c in conditions},
        "metric_choice_spearman": metric_choice_spearman(metrics, family["models"]),
        "request_timing": request_timing(rows_by_model, request_times_s, min_n),
        "silence": {m: {c: silence_sweeps([r for r in rows if r["condition"] == c]) for c in conditions}
                    for m, rows in rows_by_model.items()},
    }
