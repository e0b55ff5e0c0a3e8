"""Analyses of spec section 6 over per-event rows (harness/metrics/analyses.py), hand-counted."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from harness.metrics.analyses import (
    all_statistics,
    comparison_family,
    explicit_vs_implicit,
    output_checks,
    request_timing,
    settings_acknowledged,
    silence_explicit_vs_implicit,
    silence_sweeps,
    stream_pacing,
    streaming_speed,
)
from harness.metrics.scores import SCORES, compute_metrics


def _t(pair: str, cond: str, fo: bool, rp: bool, ac: bool | None) -> dict:
    return {"kind": "T", "pair_id": pair, "scene_id": f"{pair}-{cond}", "condition": cond, "fresh_onset": fo,
            "response_presence": rp, "answer_correct": ac}


ROWS = [
    _t("p1", "explicit", True, True, True), _t("p1", "implicit", False, True, False),
    _t("p2", "explicit", True, True, True), _t("p2", "implicit", True, False, None),  # silent in implicit
    _t("p3", "explicit", False, True, False), _t("p3", "implicit", True, True, False),
    _t("p4", "explicit", True, True, True), _t("p4", "implicit", True, True, True),
    _t("p5", "explicit", True, True, True),  # its implicit version errored: unpaired, left out
    {"kind": "silence", "pair_id": "p1", "condition": "explicit"},
]


def test_fresh_onset_and_presence_over_all_pairs():
    out = explicit_vs_implicit(ROWS)
    fo = out["fresh_onset"]
    assert (fo["n_pairs"], fo["explicit_only"], fo["implicit_only"]) == (4, 1, 1)
    assert fo["p"] == 1.0 and fo["delta_pp"] == 0.0 and not fo["significant"]
    rp = out["response_presence"]
    assert (rp["n_pairs"], rp["explicit_only"], rp["implicit_only"]) == (4, 1, 0)
    assert rp["delta_pp"] == pytest.approx(25.0)


def test_conditional_accuracy_only_over_pairs_where_both_versions_spoke():
    ac = explicit_vs_implicit(ROWS)["answer_correct"]
    # p2 is out (no speech in the implicit window); p1 explicit only; p3 neither; p4 both
    assert (ac["n_pairs"], ac["explicit_only"], ac["implicit_only"]) == (3, 1, 0)
    assert ac["delta_pp"] == pytest.approx(100 / 3) and ac["p"] == 1.0


# --------------------------------------------------------------------------- silence: explicit vs implicit


def _silence_rows(pair: str, cond: str, passes: int, total: int) -> list[dict]:
    return [{"kind": "silence", "pair_id": pair, "scene_id": f"{pair}-{cond}", "condition": cond,
             "silence_preserved": j < passes} for j in range(total)]


def test_silence_explicit_vs_implicit_constant_difference_is_a_point():
    # every pair: explicit 3/4 windows pass, implicit 1/4 -> every replicate's pooled difference is exactly 0.5
    rows = [r for k in range(6)
            for r in _silence_rows(f"p{k}", "explicit", 3, 4) + _silence_rows(f"p{k}", "implicit", 1, 4)]
    rows += _silence_rows("p9", "explicit", 2, 2)  # its implicit version has no silence window: not a pair
    assert silence_explicit_vs_implicit(rows, reps=500) == {"n_pairs": 6, "diff": 0.5, "lo": 0.5, "hi": 0.5}


def test_silence_explicit_vs_implicit_equals_scipy_paired_percentile_bootstrap():
    """Independent check: scipy.stats.bootstrap, paired (the pairs are resampled), percentile method,
    the same generator and seed, pooled rates as the statistic."""
    ep, et = np.array([3, 2, 4, 1, 0, 5, 2]), np.array([4, 3, 4, 2, 1, 6, 3])
    ip, it = np.array([2, 2, 1, 1, 1, 3, 3]), np.array([4, 2, 3, 2, 1, 6, 4])
    rows = [r for k in range(7) for r in _silence_rows(f"p{k}", "explicit", ep[k], et[k])
            + _silence_rows(f"p{k}", "implicit", ip[k], it[k])]
    got = silence_explicit_vs_implicit(rows, reps=999, seed=20260902)

    def pooled_diff(a, b, c, d, axis=-1):
        return a.sum(axis) / b.sum(axis) - c.sum(axis) / d.sum(axis)

    ref = scipy_stats.bootstrap((ep, et, ip, it), pooled_diff, paired=True, vectorized=True, n_resamples=999,
                                method="percentile", rng=np.random.default_rng(20260902))
    assert got["n_pairs"] == 7
    assert got["diff"] == pytest.approx(17 / 23 - 13 / 22, abs=1e-15)  # pooled: 17/23 explicit, 13/22 implicit
    assert (got["lo"], got["hi"]) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high),
                                                   rel=1e-12)
    assert got["lo"] < got["diff"] < got["hi"]


def test_silence_explicit_vs_implicit_without_pairs():
    assert silence_explicit_vs_implicit(_silence_rows("p1", "explicit", 1, 2)) == {
        "n_pairs": 0, "diff": None, "lo": None, "hi": None}


# --------------------------------------------------------------------------- the comparison family (reduce path)

EVALUATED_FIVE = ("minicpm", "moshi", "flm", "voila", "freeze")


N_PAIRS = 16


def _model_rows(model: str, fresh: list[bool], correct: list[bool]) -> list[dict]:
    """Per pair and condition one T row and one N2 silence window (silent when the T had a fresh onset)."""
    rows = []
    for k, (f, c) in enumerate(zip(fresh, correct, strict=True)):
        for cond in ("explicit", "implicit"):
            base = {"model": model, "pair_id": f"p{k}", "scene_id": f"p{k}-{cond}", "condition": cond}
            rows.append({**base, "kind": "T", "fresh_onset": f, "response_presence": True, "speaking_at_end": False,
                         "answer_correct": c})
            rows.append({**base, "kind": "silence", "label": "N2", "target": "human", "silent": f,
                         "speech_s": 0.0 if f else 0.4, "exempt_backchannel": False, "silence_preserved": f,
                         "transcript": None if f else "hello there"})
    return rows


def _family_rows() -> dict[str, list[dict]]:
    """Five evaluated models with different fresh onsets over 16 pairs (model i: pairs k < 15 - 3i),
    and the oracle (always right)."""
    out = {m: _model_rows(m, [k < 15 - 3 * i for k in range(N_PAIRS)], [k % (i + 2) == 0 for k in range(N_PAIRS)])
           for i, m in enumerate(EVALUATED_FIVE)}
    out["oracle"] = _model_rows("oracle", [True] * N_PAIRS, [True] * N_PAIRS)
    return out


def test_reduce_statistics_compare_only_the_evaluated_models():
    rows = _family_rows()
    roles = {**dict.fromkeys(EVALUATED_FIVE, "evaluated"), "oracle": "baseline"}
    metrics = compute_metrics(rows, {}, ("explicit", "implicit"), 1)
    times = {f"p{k}-{c}": float(k) for k in range(N_PAIRS) for c in ("explicit", "implicit")}
    st = all_statistics(rows, metrics, times, ("explicit", "implicit"), 1, roles, bootstrap_reps=50)
    fam = st["comparison_family"]
    assert fam == {"models": sorted(EVALUATED_FIVE), "excluded": {"oracle": "baseline"}, "pairs": 10, "m": 20}
    for cond in ("explicit", "implicit"):
        tests = st["between_models"][cond]
        assert len(tests) == 20  # 10 pairs x 2 scores; nothing with the oracle
        assert all("oracle" not in (t["a"], t["b"]) for t in tests)
        for t in tests:
            assert t["m"] == 20
            assert t["p_bonferroni"] == min(1.0, 20 * t["p"])  # exactly, not approximately
        # a test whose p is small enough that the correction does not cap pins m itself: freeze has a
        # fresh onset on pairs 0-2, minicpm on 0-14, so 12 discordant pairs, p = 2 * 0.5^12
        t = next(t for t in tests if (t["a"], t["b"], t["metric"]) == ("freeze", "minicpm",
                                                                       "fresh_onset_response_rate"))
        assert (t["n"], t["a_only"], t["b_only"]) == (16, 0, 12)
        assert t["p"] == 2 * 0.5 ** 12 and t["p_bonferroni"] == 20 * 2 * 0.5 ** 12 == 0.009765625
        assert len(st["silence_bootstrap"][cond]) == 10
        assert all("oracle" not in (r["a"], r["b"]) for r in st["silence_bootstrap"][cond])
    assert st["metric_choice_spearman"]["entries"] == [f"{m}/{c}" for m in sorted(EVALUATED_FIVE)
                                                       for c in ("explicit", "implicit")]
    # per-model statistics still cover the baseline
    assert set(st["explicit_vs_implicit"]) == set(rows) and set(st["silence_explicit_vs_implicit"]) == set(rows)


def test_comparison_family_size():
    assert comparison_family({"a": "evaluated"})["m"] == 0
    assert comparison_family(dict.fromkeys("abc", "evaluated"))["m"] == 6
    fam = comparison_family({**dict.fromkeys(EVALUATED_FIVE, "evaluated"), "silent": "baseline", "text": "reference"})
    assert (fam["pairs"], fam["m"], fam["excluded"]) == (10, 20, {"silent": "baseline", "text": "reference"})
    with pytest.raises(ValueError, match=r"without a role: \['x'\]"):
        all_statistics({"x": []}, {}, {}, ("explicit",), 1, {})


# --------------------------------------------------------------------------- request timing: every score per bin


def _conversation(scene_id: str, fresh: bool, speaking: bool, correct: bool | None, silent: list[bool],
                  n4: list[tuple[str, bool]]) -> list[dict]:
    base = {"scene_id": scene_id, "pair_id": scene_id.split("-")[0], "condition": scene_id.split("-")[1]}
    rows = [{**base, "kind": "T", "fresh_onset": fresh, "speaking_at_end": speaking,
             "response_presence": fresh or speaking, "answer_correct": correct}]
    rows += [{**base, "kind": "silence", "silent": s, "exempt_backchannel": False, "silence_preserved": s}
             for s in silent]
    for outcome, window_response in n4:
        answered = outcome != "excluded_no_answer"
        rows.append({**base, "kind": "N4", "yield_outcome": outcome, "yield_eligible": answered,
                     "window_response": window_response, "already_speaking_at_q_start": False,
                     "started_during_q": False, "first_spoke_after_q": answered, "still_speaking_at_r_start": answered})
    return rows


def test_request_timing_reports_every_score_per_bin():
    # request times 10..60 s: tertile boundaries 26.667 s and 43.333 s (linear quantiles), two requests per bin
    times = {"p0-explicit": 10.0, "p1-explicit": 20.0, "p2-explicit": 30.0, "p0-implicit": 40.0,
             "p1-implicit": 50.0, "p2-implicit": 60.0}
    rows = (_conversation("p0-explicit", True, False, True, [True, False], [("yield", True)])
            + _conversation("p1-explicit", False, True, False, [True], [("excluded_no_answer", False)])
            + _conversation("p2-explicit", False, False, None, [True], [])
            + _conversation("p0-implicit", True, False, False, [], [])
            + _conversation("p1-implicit", False, False, None, [False], [])
            + _conversation("p2-implicit", False, False, None, [], []))
    out = request_timing({"m": rows}, times, min_n=2)
    assert out["boundaries_s"] == pytest.approx([80 / 3, 130 / 3])
    bin0 = out["bins"]["m"]["0"]
    assert set(bin0) == {"n", *SCORES}
    assert bin0["n"] == 2
    expected = {  # (successes, n) over p0-explicit and p1-explicit
        "fresh_onset_response_rate": (1, 2), "conditional_answer_accuracy": (1, 2), "silence_preservation": (2, 3),
        "response_presence": (2, 2), "window_response": (1, 2)}
    for score, (k, n) in expected.items():
        assert bin0[score] == {"rate": k / n, "n": n, "successes": k, "status": "scored"}, score
    # one yield-eligible event: under min_n, so n/a with its n
    assert bin0["answering_window_yield"] == {"rate": None, "n": 1, "successes": 1, "status": "n/a"}
    bin1 = out["bins"]["m"]["1"]  # p2-explicit and p0-implicit
    assert bin1["fresh_onset_response_rate"]["rate"] == 0.5
    assert bin1["conditional_answer_accuracy"] == {"rate": None, "n": 1, "successes": 0, "status": "n/a"}
    assert bin1["silence_preservation"] == {"rate": None, "n": 1, "successes": 1, "status": "n/a"}
    assert out["bins"]["m"]["2"]["silence_preservation"]["successes"] == 0


# --------------------------------------------------------------------------- threshold sweep and judge calls


def test_occupied_windows_at_zero_ms_are_judged_plus_empty_transcripts():
    def window(speech_s: float, transcript: str | None, preserved: bool) -> dict:
        return {"kind": "silence", "label": "N2", "target": "human", "speech_s": speech_s, "silent": speech_s == 0,
                "transcript": transcript, "silence_preserved": preserved}

    rows = [window(0.0, None, True), window(0.05, "", False),  # 50 ms: no transcript, failed without a judge call
            window(0.3, "yeah", True), window(1.2, "nine dollars", False), window(0.0, None, True)]
    out = silence_sweeps(rows)
    assert out["judge_windows"] == {"occupied_0ms": 3, "judged": 2, "empty_transcript": 1}
    sweep = out["threshold_sweep"]
    assert sweep["0"]["occupied"] == out["judge_windows"]["judged"] + out["judge_windows"]["empty_transcript"]
    assert [sweep[k]["occupied"] for k in ("0", "100", "200", "300", "500")] == [3, 2, 2, 1, 1]
    assert out["failure_breakdown"]["human-directed"] == {"windows": 5, "failures": 2}


# --------------------------------------------------------------------------- output checks (suspect models)


def test_output_checks_flag_models_without_speech_or_level():
    def conv(speech_s: float, peak: float | None, truncated: bool = False) -> dict:
        return {"speech_s": speech_s, "peak": peak, "truncated": truncated}

    convs = {
        "silent": [conv(0.0, 0.0), conv(0.0, 0.0)],  # never speaks, digital silence
        "quiet": [conv(0.0, 0.0005), conv(0.0, 0.0002)],  # -66.02 dBFS at most, no speech
        "faint": [conv(1.5, 0.0009, True), conv(0.0, 0.0001)],  # speech found, but -60.9 dBFS at most
        "edge": [conv(2.0, 0.001)],  # exactly -60 dBFS: not below the threshold
        "unknown": [conv(2.0, None), conv(0.5, None, True)],  # records without the peak
    }
    roles = {"silent": "baseline"}
    out = output_checks(convs, roles, -60.0)
    assert out["silent"] == {"role": "baseline", "conversations": 2, "with_speech": 0, "truncated": 0, "peak": 0.0,
                             "peak_dbfs": None, "suspect": True,
                             "reasons": ["no speech detected in any of its 2 conversations",
                                         "output peak digital silence stays below -60 dBFS in every conversation"]}
    assert out["quiet"]["suspect"] and out["quiet"]["role"] == "evaluated"
    assert out["quiet"]["peak_dbfs"] == pytest.approx(20 * np.log10(0.0005))
    assert out["quiet"]["reasons"][1] == "output peak -66.0 dBFS stays below -60 dBFS in every conversation"
    assert out["faint"]["suspect"] and out["faint"]["with_speech"] == 1 and out["faint"]["truncated"] == 1
    assert out["faint"]["reasons"] == ["output peak -60.9 dBFS stays below -60 dBFS in every conversation"]
    assert not out["edge"]["suspect"] and out["edge"]["peak_dbfs"] == -60.0
    assert not out["unknown"]["suspect"] and (out["unknown"]["peak"], out["unknown"]["peak_dbfs"]) == (None, None)
    assert out["unknown"]["truncated"] == 1


def test_the_shipped_baselines_never_enter_the_comparison_family():
    """The roles reduce passes come from ``model.<name>.role``: every baseline in conf/model/ is a
    baseline, a model without a role is evaluated, and an unknown role is refused."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.runtime.config import ConfigError, RunConfig

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = RunConfig.from_dict(OmegaConf.to_container(compose(config_name="config"), resolve=True))
    assert {m.name: m.role for m in cfg.models} == {"silent": "baseline", "babble": "baseline", "oracle": "baseline"}
    assert cfg.metrics.suspect_peak_dbfs == -60.0
    new = RunConfig.from_dict({"model": {"moshi": {"target": "x:Y"}}})
    assert new.models[0].role == "evaluated"
    with pytest.raises(ConfigError, match="role 'judge' is not one of: evaluated, baseline, reference"):
        RunConfig.from_dict({"model": {"moshi": {"target": "x:Y", "role": "judge"}}})


def test_streaming_speed_is_audio_over_wall_per_stream():
    convs = {"m": [{"audio_s": 100.0, "wall_s": 4.0, "step_s": 3.0},   # 25x
                   {"audio_s": 60.0, "wall_s": 6.0, "step_s": 3.0},    # 10x
                   {"audio_s": 80.0, "wall_s": 2.0, "step_s": 1.0},    # 40x
                   {"audio_s": 36.0, "wall_s": None, "step_s": None}],  # an older record: counted, not timed
             "old": [{"audio_s": 36.0, "wall_s": None, "step_s": None}]}
    out = streaming_speed(convs)
    assert out["m"] == {"conversations": 4, "audio_h": 276.0 / 3600, "per_stream_rtf_median": 25.0,
                        "per_stream_rtf_min": 10.0, "step_share": 7.0 / 12.0}
    assert out["old"]["per_stream_rtf_median"] is None and out["old"]["step_share"] is None


def test_stream_pacing_flags_conversations_behind_the_bound_worst_first():
    def conv(sid: str, lag: float, behind: float) -> dict:
        return {"scene_id": sid, "pacing": {"max_lag_s": lag, "behind_s": behind}}

    convs = {"hosted": [conv("a", 0.02, 0.0), conv("b", 2.65, 2.4), conv("c", 0.6, 0.3), conv("d", 0.5, 0.1)],
             "local": [{"scene_id": "a", "pacing": None}]}
    out = stream_pacing(convs, max_lag_s=0.5)
    assert out["max_lag_s"] == 0.5 and list(out["models"]) == ["hosted"]  # an unpaced model has no entry
    p = out["models"]["hosted"]
    assert p["over"] == ["b", "c"]  # 0.5 s exactly is not over the bound
    assert p["conversations"] == 4 and p["worst_lag_s"] == 2.65 and p["median_lag_s"] == pytest.approx(0.55)
    assert p["behind_s"] == pytest.approx(2.8)


def test_settings_acknowledged_counts_as_asked_other_and_unverified():
    differs = "turn_detection.threshold: asked 0.5, acknowledged 0.7"
    ok = {"turn_detection": {}, "acknowledged": {"turn_detection": {}}, "mismatch": []}
    other = {**ok, "mismatch": [differs]}
    silent = {"turn_detection": {}, "acknowledged": None, "mismatch": []}
    out = settings_acknowledged({"openai": [{"settings": ok}, {"settings": other}, {"settings": other}],
                                 "gemini": [{"settings": silent}], "local": [{"settings": None}]})
    assert out["openai"] == {"as_asked": 1, "differs": 2, "unacknowledged": 0, "differences": {differs: 2}}
    assert out["gemini"] == {"as_asked": 0, "differs": 0, "unacknowledged": 1, "differences": {}}
    assert "local" not in out
