"""Detector sweeps (issue 11): one segmenter call over every conversation and setting."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from harness.report.figures import report_figures, vad_sweep, vad_sweep_data
from harness.vad.segments import SegmentRules, segments_from_probs
from harness.vad.sweep import sweep_points, sweep_segments
from harness.vad.tables import read_sweep_rows, sweep_table_bytes
from tests.fixtures.report_inputs import METRICS

SR, FRAME = 1000, 10


def test_points_vary_one_setting_at_a_time():
    base = SegmentRules()
    pts = sweep_points(base, {"min_silence_s": [0.3], "threshold": [0.3, 0.7]})
    assert [(p.setting, p.value) for p in pts] == [("threshold", 0.3), ("threshold", 0.7), ("min_silence_s", 0.3)]
    assert [p.rules.neg_threshold for p in pts[:2]] == pytest.approx([0.15, 0.55])  # the 0.15 gap kept
    assert pts[2].rules == SegmentRules(min_silence_s=0.3)
    assert sweep_points(base, {"threshold": [0.1]})[0].rules.neg_threshold == 0.01  # floored


@pytest.mark.parametrize(("sweep", "message"), [({"neg_threshold": [0.2]}, "cannot sweep"),
                                                ({"threshold": [1.0]}, "threshold < 1"),
                                                ({"min_speech_s": [-0.1]}, "min_speech_s must be >= 0")])
def test_bad_sweeps_are_rejected(sweep, message):
    with pytest.raises(ValueError, match=message):
        sweep_points(SegmentRules(), sweep)


def test_one_call_equals_the_segmenter_per_setting():
    rng = np.random.default_rng(4)
    probs = [np.clip(np.cumsum(rng.standard_normal(n)) * 0.1 + 0.4, 0, 1).astype(np.float32)
             for n in rng.integers(0, 600, 25)]
    rules = [p.rules for p in sweep_points(SegmentRules(), {"threshold": [0.3, 0.5, 0.7],
                                                            "min_speech_s": [0.0, 0.5],
                                                            "min_silence_s": [0.01, 0.8, 3.0]})]
    out = sweep_segments(probs, FRAME, SR, rules)
    lengths = np.array([len(p) for p in probs])
    padded = np.zeros((len(probs), lengths.max()), np.float32)
    for i, p in enumerate(probs):
        padded[i, : len(p)] = p
    for r, per_stream in zip(rules, out, strict=True):
        for got, want in zip(per_stream, segments_from_probs(padded, lengths, FRAME, r, SR), strict=True):
            np.testing.assert_array_equal(got, want)
    assert len({sum(len(s) for s in o) for o in out}) > 1  # the settings matter


def test_sweep_figure():
    rows = [{"model": m, "setting": "threshold", "value": v, "condition": c, "score": "response_presence",
             "successes": 1, "n": 2, "rate": r}
            for m in ("a", "b") for c in ("explicit", "implicit") for v, r in ((0.7, 0.25), (0.3, 0.75), (0.5, None))]
    data = vad_sweep_data(rows)
    assert data[("response_presence", "threshold")][("a", "explicit")] == [(0.3, 0.75), (0.5, None), (0.7, 0.25)]
    png = vad_sweep(rows, {"threshold": 0.5})
    assert Image.open(io.BytesIO(png)).size == (1300, 1500)
    assert "vad_sweep" not in report_figures(METRICS)
    assert report_figures(METRICS, rows, {"threshold": 0.5})["vad_sweep"] == png


def test_sweep_rows_round_trip_through_parquet():
    rows = [{"setting": "threshold", "value": 0.5, "condition": "explicit", "score": "window_response",
             "successes": 0, "n": 0, "rate": None}]
    assert read_sweep_rows(sweep_table_bytes(rows), "m") == [{"model": "m", **rows[0]}]


@pytest.mark.parametrize(("vad", "message"), [({"device": "tpu"}, "vad.device must be cpu or cuda"),
                                              ({"sweep": {"threshold": [1.5]}}, "vad.sweep.threshold=1.5"),
                                              ({"batch": 0}, "vad.batch must be >= 1")])
def test_bad_vad_settings_fail_at_config_load(vad, message):
    from harness.runtime.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match=message):
        RunConfig.from_dict({"run_id": "x", "model": {"silent": {"target": "silent"}}, "vad": vad})
