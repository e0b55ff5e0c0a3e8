"""Explicit vs implicit on paired scenes (spec section 6), hand-counted."""

from __future__ import annotations

import pytest

from harness.metrics.analyses import explicit_vs_implicit


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
