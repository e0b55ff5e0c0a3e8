"""The human validation kit (spec section 6): sampling, CSV validation, agreement, results, the
review page, an import into a store. The export and import jobs on a real tiny run:
tests/e2e/test_review_kit.py."""

from __future__ import annotations

import csv
import html
import random

import pytest

from harness.metrics.stats import rater_agreement as agreement
from harness.review.forms import ReviewFormError, read_adjudication, read_review, template_csv
from harness.review.items import page_order, sample_construction, sample_model_items
from harness.review.kit import ITEMS_FILE, ReviewError, import_reviews
from harness.review.page import flac_data_uri, review_page
from harness.review.results import combine, disagreements, load_results, report_section, summary_section
from harness.runtime.plan import RunPlan
from harness.scenes.generator import generate_pairs
from harness.store.base import LocalStore, put_json
from tests.fixtures.reviews import write_csv
from tests.fixtures.runs import tiny_config


# ----------------------------------------------------------------------------- a hand-built table
def _t(model, scene, cond, verdict, transcript="the answer", turn=3):
    return {"model": model, "kind": "T", "scene_id": scene, "pair_id": scene.rsplit("-", 1)[0], "condition": cond,
            "turn": turn, "start": 100, "end": 200, "window_end": 900, "response_presence": verdict is not None,
            "verdict": verdict, "transcript": transcript if verdict else None, "speech_s": 1.5,
            "answer_correct": None if verdict is None else verdict == "CORRECT"}


def _w(model, scene, cond, verdict, turn=1, transcript="okay"):
    return {"model": model, "kind": "silence", "scene_id": scene, "pair_id": scene.rsplit("-", 1)[0],
            "condition": cond, "turn": turn, "start": 10, "end": 50, "window_end": 80, "silent": verdict is None,
            "verdict": verdict, "transcript": transcript if verdict else None, "speech_s": 0.4, "overlap_s": 0.1}


def _table() -> dict[str, list[dict]]:
    """m1: 8 CORRECT / 3 INCORRECT explicit answers (+ empty and unparseable ones that must never be
    sampled), 7 backchannels / 12 intrusions explicit; nothing implicit. m2: silent everywhere."""
    m1 = [_t("m1", f"p{i:03d}-explicit", "explicit", "CORRECT") for i in range(8)]
    m1 += [_t("m1", f"p{i:03d}-explicit", "explicit", "INCORRECT", turn=4) for i in range(3)]
    m1 += [_t("m1", "p100-explicit", "explicit", "INCORRECT", transcript=""),  # empty: scored, not judged
           _t("m1", "p101-explicit", "explicit", "UNPARSEABLE")]
    m1 += [_w("m1", f"p{i:03d}-explicit", "explicit", "BACKCHANNEL", turn=t) for i in range(7) for t in (1,)]
    m1 += [_w("m1", f"p{i:03d}-explicit", "explicit", "SUBSTANTIVE_INTRUSION", turn=2) for i in range(12)]
    m1 += [_w("m1", "p200-implicit", "implicit", "UNPARSEABLE"), _w("m1", "p201-implicit", "implicit", None)]
    m2 = [_t("m2", f"p{i:03d}-explicit", "explicit", None) for i in range(8)]
    m2 += [_w("m2", f"p{i:03d}-implicit", "implicit", None) for i in range(8)]
    return {"m1": m1, "m2": m2}


def test_model_items_take_five_per_stratum_and_report_shortfalls():
    items, strata = sample_model_items(_table())
    by = {}
    for it in items:
        by.setdefault((it["kind"], it["model"], it["condition"], it["judge_label"]), []).append(it)
    assert {k: len(v) for k, v in by.items()} == {
        ("answer", "m1", "explicit", "CORRECT"): 5, ("answer", "m1", "explicit", "INCORRECT"): 3,
        ("window", "m1", "explicit", "BACKCHANNEL"): 5, ("window", "m1", "explicit", "SUBSTANTIVE_INTRUSION"): 5}
    # 2 models x 2 kinds x 2 conditions x 2 labels strata, each reported, full or not
    assert len(strata) == 16
    assert strata["answer/m1/explicit/INCORRECT"] == {"wanted": 5, "available": 3, "taken": 3}
    assert strata["window/m1/explicit/SUBSTANTIVE_INTRUSION"] == {"wanted": 5, "available": 12, "taken": 5}
    assert strata["answer/m2/explicit/CORRECT"] == {"wanted": 5, "available": 0, "taken": 0}
    # empty transcripts and UNPARSEABLE verdicts are not judge decisions: never sampled
    assert all(it["transcript"] for it in items)
    assert not any(it["scene_id"] in ("p100-explicit", "p101-explicit") for it in items)
    a = next(it for it in items if it["kind"] == "answer")
    assert (a["audio_start"], a["audio_end"]) == (200, 900)  # the response window: T end -> window end
    w = next(it for it in items if it["kind"] == "window")
    assert (w["audio_start"], w["audio_end"], w["overlap_s"]) == (10, 80, 0.1)


def test_model_sampling_is_deterministic_and_independent_of_row_order_and_other_models():
    first, _ = sample_model_items(_table())
    shuffled = {m: random.Random(3).sample(rows, len(rows)) for m, rows in _table().items()}
    again, _ = sample_model_items(shuffled)
    assert first == again
    alone, _ = sample_model_items({"m1": _table()["m1"]})
    assert [i for i in first if i["model"] == "m1"] == alone
    ids = {i["item_id"] for i in first}
    assert len(ids) == len(first)


def test_construction_takes_fifty_pairs_both_conditions_or_all_when_fewer():
    scenes = generate_pairs(60, 11, 0.25, 0.6)
    items, info = sample_construction(scenes)
    assert info == {"wanted": 50, "available": 60, "taken": 50}
    assert len(items) == 100
    pairs = {}
    for it in items:
        pairs.setdefault(it["pair_id"], set()).add(it["condition"])
    assert len(pairs) == 50 and all(v == {"explicit", "implicit"} for v in pairs.values())
    assert sample_construction(list(reversed(scenes)))[0] == items  # deterministic, order-free
    # a pair with a conversation that has no audio is not eligible; fewer than 50 -> all of them
    few = scenes[:8]  # 4 pairs
    usable = {s.scene_id for s in few} - {few[0].scene_id}
    items, info = sample_construction(few, usable)
    assert info == {"wanted": 50, "available": 3, "taken": 3}
    assert len(items) == 6 and few[0].pair_id not in {it["pair_id"] for it in items}


def test_page_order_groups_by_kind_and_does_not_follow_the_judge_label():
    items, _ = sample_model_items(_table())
    ordered = page_order(items)
    assert sorted(i["item_id"] for i in ordered) == sorted(i["item_id"] for i in items)
    kinds = [i["kind"] for i in ordered]
    assert kinds == sorted(kinds)  # answer before window
    labels = [i["judge_label"] for i in ordered if i["kind"] == "answer"]
    assert labels != sorted(labels)
    assert page_order(list(reversed(items))) == ordered


# ----------------------------------------------------------------------------- agreement
def test_kappa_against_hand_computed_values():
    # Cohen's textbook table: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no.
    # p_o = 35/50 = 0.7; p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    r = agreement(a, b, ("yes", "no"))
    assert r["n"] == 50 and r["agree"] == 35 and r["percent"] == pytest.approx(70.0)
    assert r["kappa"] == pytest.approx(0.4)
    # p_o = 3/4; p_e = 3/4 * 1/2 + 1/4 * 1/2 = 1/2; kappa = 0.5
    assert agreement(["p", "p", "p", "f"], ["p", "p", "f", "f"], ("p", "f"))["kappa"] == pytest.approx(0.5)
    # three labels, pairs aa ab bb bc cc ca: p_o = 3/6; p_e = (2*2 + 2*2 + 2*2) / 36 = 1/3;
    # kappa = (1/2 - 1/3) / (2/3) = 1/4
    assert agreement(list("aabbcc"), list("abbcca"), "abc")["kappa"] == pytest.approx(0.25)
    # a label set wider than the labels used must not change kappa
    assert agreement(a, b, ("yes", "no", "maybe"))["kappa"] == pytest.approx(0.4)
    # complete disagreement with balanced marginals: p_o = 0, p_e = 0.5 -> -1
    assert agreement(["x", "y"], ["y", "x"], "xy")["kappa"] == pytest.approx(-1.0)


def test_kappa_undefined_and_empty_and_bad_input():
    r = agreement(["yes"] * 4, ["yes"] * 4, ("yes", "no"))
    assert r["percent"] == 100.0 and r["kappa"] is None  # p_e = 1: undefined, not 1 or nan
    assert agreement([], [], ("yes", "no")) == {"n": 0, "agree": 0, "percent": None, "kappa": None}
    with pytest.raises(ValueError, match="different numbers"):
        agreement(["yes"], [], ("yes", "no"))
    with pytest.raises(ValueError, match="maybe"):
        agreement(["maybe"], ["yes"], ("yes", "no"))


# ----------------------------------------------------------------------------- CSV forms
ITEMS = {
    "construction/s1-explicit": {"item_id": "construction/s1-explicit", "kind": "construction"},
    "answer/m1/s1-explicit/3": {"item_id": "answer/m1/s1-explicit/3", "kind": "answer"},
    "window/m1/s1-explicit/1": {"item_id": "window/m1/s1-explicit/1", "kind": "window"},
}


def test_template_csv_lists_every_item_with_empty_reviewer_columns():
    rows = list(csv.reader(template_csv(list(ITEMS.values())).splitlines()))
    assert rows[0] == ["item_id", "kind", "verdict", "transcript_ok", "notes"]
    assert rows[1:] == [[i, it["kind"], "", "", ""] for i, it in ITEMS.items()]


def test_a_valid_review_is_read_case_and_space_insensitively(tmp_path):
    p = write_csv(tmp_path / "ann.csv", [("construction/s1-explicit", "construction", " Pass ", "", "fine"),
                                      ("answer/m1/s1-explicit/3", "answer", "INCORRECT", "yes", ""),
                                      ("", "", "", "", ""),  # a blank line is ignored
                                      ("window/m1/s1-explicit/1", "window", "backchannel", "No", "")])
    problems: list[str] = []
    r = read_review(p, ITEMS, problems)
    assert problems == []
    assert r["construction/s1-explicit"] == {"verdict": "pass", "transcript_ok": "", "notes": "fine"}
    assert r["answer/m1/s1-explicit/3"]["verdict"] == "incorrect"
    assert r["window/m1/s1-explicit/1"]["transcript_ok"] == "no"


def test_every_csv_problem_is_named_by_file_line_and_column(tmp_path):
    p = write_csv(tmp_path / "bob.csv", [
        ("construction/s1-explicit", "construction", "pass", "yes", ""),  # line 2: transcript_ok must be empty
        ("answer/m1/s1-explicit/3", "answer", "maybe", "", ""),  # line 3: invalid verdict, missing transcript_ok
        ("answer/m1/s1-explicit/3", "answer", "correct", "yes", ""),  # line 4: repeated
        ("answer/m9/nope/1", "answer", "correct", "yes", ""),  # line 5: unknown
        ("window/m1/s1-explicit/1", "answer", "backchannel", "yes", ""),  # line 6: wrong kind
    ])
    problems: list[str] = []
    read_review(p, ITEMS, problems)
    assert problems == [
        f"{p}:2: transcript_ok: must be empty for a construction item, got 'yes'",
        f"{p}:3: verdict: 'maybe' is not allowed (one of correct, incorrect)",
        f"{p}:3: transcript_ok: missing (one of yes, no)",
        f"{p}:4: item_id: 'answer/m1/s1-explicit/3' appears more than once",
        f"{p}:5: item_id: unknown item 'answer/m9/nope/1' (not in this export)",
        f"{p}:6: kind: 'answer' but item 'window/m1/s1-explicit/1' is a window item",
    ]
    missing_row = write_csv(tmp_path / "short.csv", [("construction/s1-explicit", "construction", "fail", "", "")])
    problems = []
    read_review(missing_row, ITEMS, problems)
    assert problems == [f"{missing_row}: item_id: no row for item 'answer/m1/s1-explicit/3'",
                        f"{missing_row}: item_id: no row for item 'window/m1/s1-explicit/1'"]
    no_column = write_csv(tmp_path / "cols.csv", [("construction/s1-explicit", "pass")], header=("item_id", "verdict"))
    problems = []
    read_review(no_column, ITEMS, problems)
    assert len(problems) == 1 and problems[0].startswith(f"{no_column}:1: missing column(s) kind, transcript_ok, notes")
    problems = []
    read_review(tmp_path / "absent.csv", ITEMS, problems)
    assert len(problems) == 1 and "absent.csv: cannot read" in problems[0]


def test_adjudication_resolves_only_disagreements(tmp_path):
    disputed = {("answer/m1/s1-explicit/3", "verdict"): ("correct", "incorrect")}
    p = write_csv(tmp_path / "adj.csv", [
        ("answer/m1/s1-explicit/3", "verdict", "correct", "incorrect", "Correct", "gold said in other words"),
        ("window/m1/s1-explicit/1", "verdict", "", "", "intrusion", ""),  # line 3: no disagreement there
        ("answer/m1/s1-explicit/3", "colour", "", "", "red", ""),  # line 4: no such field
    ], header=("item_id", "field", "reviewer_1", "reviewer_2", "value", "notes"))
    problems: list[str] = []
    out = read_adjudication(p, ITEMS, disputed, problems)
    assert out == {("answer/m1/s1-explicit/3", "verdict"): "correct"}
    assert problems == [
        f"{p}:3: item_id: the reviewers agree on verdict of 'window/m1/s1-explicit/1': nothing to adjudicate",
        f"{p}:4: field: 'colour' is not one of verdict, transcript_ok"]


# ----------------------------------------------------------------------------- results
def _items():
    c = [{"item_id": f"construction/s{i}", "kind": "construction", "model": None, "judge_label": None}
         for i in range(4)]
    a = [{"item_id": f"answer/m1/s{i}/3", "kind": "answer", "model": "m1", "judge_label": lab}
         for i, lab in enumerate(["CORRECT", "CORRECT", "INCORRECT", "INCORRECT"])]
    w = [{"item_id": "window/m1/s0/1", "kind": "window", "model": "m1", "judge_label": "BACKCHANNEL"},
         {"item_id": "window/m2/s0/1", "kind": "window", "model": "m2", "judge_label": "SUBSTANTIVE_INTRUSION"}]
    return c + a + w


def _review(verdicts, transcripts):
    return {i["item_id"]: {"verdict": v, "transcript_ok": t, "notes": ""}
            for i, v, t in zip(_items(), verdicts, transcripts, strict=True)}


R1 = _review(["pass", "pass", "pass", "fail", "correct", "correct", "incorrect", "correct", "backchannel", "intrusion"],
             ["", "", "", "", "yes", "yes", "no", "yes", "yes", "yes"])
R2 = _review(["pass", "pass", "fail", "fail", "correct", "incorrect", "incorrect", "correct", "backchannel",
              "intrusion"], ["", "", "", "", "yes", "yes", "yes", "yes", "yes", "no"])


def test_results_against_hand_computed_values():
    items = _items()
    disputed = disagreements(items, [R1, R2])
    assert list(disputed) == [("construction/s2", "verdict"), ("answer/m1/s1/3", "verdict"),
                              ("answer/m1/s2/3", "transcript_ok"), ("window/m2/s0/1", "transcript_ok")]
    res = combine(items, [R1, R2], ["ann", "bob"], {("construction/s2", "verdict"): "pass",
                                                    ("answer/m1/s1/3", "verdict"): "incorrect"})
    assert res["open_disagreements"] == 2
    c, a, w = (res["kinds"][k] for k in ("construction", "answer", "window"))
    # construction: reviewers agree on 3 of 4: p_o = 0.75; marginals ann 3 pass / bob 2 pass:
    # p_e = 3/4 * 2/4 + 1/4 * 2/4 = 0.5 -> kappa 0.5; adjudicated pass -> 3 of 4 pass
    assert c["reviewer_agreement"]["verdict"]["percent"] == 75.0
    assert c["reviewer_agreement"]["verdict"]["kappa"] == pytest.approx(0.5)
    assert "transcript_ok" not in c["reviewer_agreement"] and "judge_agreement" not in c
    assert c["pass_rate"] == {"n": 4, "hits": 3, "rate": 0.75}
    # answers: final verdicts correct, incorrect (adjudicated), incorrect, correct; judge C C I I
    # -> agree on 2 of 4; judge marginals 2/2, human 2/2: p_e = 0.5 -> kappa 0
    assert a["pass_rate"] == {"n": 4, "hits": 2, "rate": 0.5}
    assert a["judge_agreement"]["percent"] == 50.0 and a["judge_agreement"]["kappa"] == pytest.approx(0.0)
    # transcript of answer s2 is disputed and open: left out -> 3 of 3 yes
    assert a["transcript_ok"] == {"n": 3, "hits": 3, "rate": 1.0}
    # reviewer agreement on answer transcripts: 3 of 4; ann yes 3 / bob yes 4: p_e = 3/4 -> kappa 0
    assert a["reviewer_agreement"]["transcript_ok"]["percent"] == 75.0
    assert a["reviewer_agreement"]["transcript_ok"]["kappa"] == pytest.approx(0.0)
    # windows: both verdicts agree with the judge; per model split
    assert w["judge_agreement"]["percent"] == 100.0 and w["judge_agreement"]["kappa"] == pytest.approx(1.0)
    assert w["by_model"]["m2"]["transcript_ok"] == {"n": 0, "hits": 0, "rate": None}
    assert res["final"]["answer/m1/s2/3"] == {"verdict": "incorrect", "transcript_ok": None}
    md = summary_section({**res, "shortfalls": {}}, "r")
    assert md.title == "Human validation" and len(md.blocks) == 2


def test_the_report_section_says_how_to_produce_the_results_and_where_they_are():
    sec = report_section("demo", "demo/review/abc")
    text = sec.blocks[0].text
    assert sec.title == "Human validation"
    assert "make review-export RUN=demo" in text and "review-import" in text and "demo/review/abc/results.md" in text


# ----------------------------------------------------------------------------- page
def test_review_page_has_a_player_per_audio_and_every_item():
    scenes = {s.scene_id: s for s in generate_pairs(2, 5, 0.0, 1.0)}
    s = next(iter(scenes.values()))
    t = s.t_index
    items = [{"item_id": f"construction/{s.scene_id}", "kind": "construction", "scene_id": s.scene_id},
             {"item_id": f"answer/m1/{s.scene_id}/{t}", "kind": "answer", "scene_id": s.scene_id, "turn": t,
              "model": "m1", "condition": s.condition, "judge_label": "CORRECT", "transcript": "it is <nine>"},
             {"item_id": f"window/m1/{s.scene_id}/0", "kind": "window", "scene_id": s.scene_id, "turn": 0,
              "model": "m1", "condition": s.condition, "judge_label": "BACKCHANNEL", "transcript": "okay",
              "speech_s": 0.5, "overlap_s": 0.25}]
    uri = flac_data_uri(b"fLaC-bytes")
    assert uri == "data:audio/flac;base64,ZkxhQy1ieXRlcw=="
    audio = {items[0]["item_id"]: [uri] * len(s.turns), items[1]["item_id"]: [uri], items[2]["item_id"]: [uri]}
    page = review_page("r1", items, scenes, audio, ["a note about the sample"])
    assert page.count(f'<audio controls preload="none" src="{uri}">') == len(s.turns) + 2
    for it in items:
        assert f'id="{it["item_id"]}"' in page
    assert "CSV line 2" in page and "CSV line 4" in page
    for text in (s.gold_answer, s.turns[t].text, "a note about the sample", *(x.text for x in s.turns)):
        assert html.escape(text) in page
    assert "it is &lt;nine&gt;" in page  # transcripts are escaped
    assert "<details><summary>judge's verdict (open after deciding)</summary>CORRECT</details>" in page
    assert "<script" not in page
    one_clip = rf"construction item {s.scene_id}: 1 audio clip\(s\) for {len(s.turns)} turns"
    with pytest.raises(ValueError, match=one_clip):
        review_page("r1", items[:1], scenes, {items[0]["item_id"]: [uri]}, [])


# ----------------------------------------------------------------------------- import into a store
def test_import_writes_nothing_on_bad_input_and_results_on_good(tmp_path):
    cfg = tiny_config(tmp_path / "runs", "kit", {"m1": {"target": "silent"}})
    store = LocalStore(cfg.store.root)
    plan = RunPlan.from_config(cfg)
    with pytest.raises(ReviewError, match="no review export"):
        import_reviews(cfg, store, [tmp_path / "a.csv", tmp_path / "b.csv"])
    items = _items()
    put_json(store, plan.layout.file(plan.review, ITEMS_FILE), {
        "items": items, "sample": {"construction": {"wanted": 50, "available": 4, "taken": 4}, "strata": {}}})
    before = sorted(store.list(""))

    def write(name, review):
        return write_csv(tmp_path / name, [(i, it["kind"], review[i]["verdict"], review[i]["transcript_ok"], "")
                                        for i, it in ((x["item_id"], x) for x in items)])

    a, b = write("ann.csv", R1), write("bob.csv", R2)
    bad = write_csv(tmp_path / "bad.csv", [(items[0]["item_id"], "construction", "perhaps", "", "")])
    with pytest.raises(ReviewFormError) as e:
        import_reviews(cfg, store, [a, bad])
    assert f"{bad}:2: verdict: 'perhaps' is not allowed" in str(e.value)
    assert len(e.value.problems) == 1 + len(items) - 1  # the bad value and every missing row
    with pytest.raises(ReviewError, match="exactly two"):
        import_reviews(cfg, store, [a])
    with pytest.raises(ReviewError, match="same file"):
        import_reviews(cfg, store, [a, a])
    adj = write_csv(tmp_path / "adj.csv", [("construction/s3", "verdict", "", "", "pass", "")],
                 header=("item_id", "field", "reviewer_1", "reviewer_2", "value", "notes"))
    with pytest.raises(ReviewFormError, match="nothing to adjudicate"):
        import_reviews(cfg, store, [a, b], adj)
    assert sorted(store.list("")) == before  # nothing half-written
    assert load_results(store, plan.review) is None

    res = import_reviews(cfg, store, [a, b])
    assert res["open_disagreements"] == 4 and res["reviewers"] == ["ann", "bob"]
    stored = load_results(store, plan.review)
    assert stored["kinds"] == res["kinds"] and stored["reviews"]["bob"]["construction/s2"]["verdict"] == "fail"
    dis = list(csv.DictReader(store.get(res["keys"]["disagreements"]).decode().splitlines()))
    assert [(d["item_id"], d["field"], d["reviewer_1"], d["reviewer_2"], d["value"]) for d in dis] == [
        ("construction/s2", "verdict", "pass", "fail", ""), ("answer/m1/s1/3", "verdict", "correct", "incorrect", ""),
        ("answer/m1/s2/3", "transcript_ok", "no", "yes", ""), ("window/m2/s0/1", "transcript_ok", "yes", "no", "")]
    assert "Human validation" in store.get(res["keys"]["markdown"]).decode()
    # the adjudicator fills the written disagreements.csv in; a second import closes them
    for d in dis:
        d["value"] = "no" if d["field"] == "transcript_ok" else ("pass" if d["item_id"].startswith("c") else "correct")
    filled = write_csv(tmp_path / "adjudicated.csv", [tuple(d.values()) for d in dis], header=tuple(dis[0]))
    res = import_reviews(cfg, store, [a, b], filled)
    assert res["open_disagreements"] == 0
    assert res["kinds"]["answer"]["transcript_ok"] == {"n": 4, "hits": 3, "rate": 0.75}
