"""From raw recordings to a Duplex Cue corpus (issue 23.8): words to VAD intervals, cross-speaker
proposals, the eligibility audit and the selection record; end to end on generated espeak-ng
recordings stripped of their cue lines, with the real Silero VAD."""

from __future__ import annotations

import json

import pytest

from harness.cue.build import Activity, activities, assign_words, main, propose, read_intents
from harness.cue.schema import Recording, Word


def _w(text, a, b):
    return Word(text, a, b)


def test_words_go_to_the_interval_of_their_midpoint_else_the_nearest_ties_to_the_earlier():
    spans = [(0.0, 1.0), (2.0, 3.0)]
    words = [_w("in", 0.2, 0.8), _w("edge", 0.9, 1.3), _w("tie", 1.3, 1.7), _w("near", 1.5, 1.9),
             _w("late", 4.0, 5.0), _w("end", 2.9, 3.1)]
    # midpoints 0.5 (inside 0), 1.1 (0.1 from 0), 1.5 (0.5 from both: the earlier), 1.7 (0.3 from 1),
    # 4.5 (nearest 1), 3.0 (an interval is half open: 3.0 is outside 1, 0 from it)
    assert assign_words(words, spans) == [0, 0, 0, 1, 1, 1]
    assert assign_words(words, []) == [None] * 6
    acts, counts = activities(words, [*spans, (7.0, 8.0)])
    assert [(a.start_s, a.end_s, [w.text for w in a.words]) for a in acts] == [
        (0.0, 1.0, ["in", "edge", "tie"]), (2.0, 3.0, ["near", "late", "end"])]
    assert counts == {"words": 6, "intervals": 3, "by_midpoint": 1, "by_nearest": 5, "ties": 1,
                      "intervals_without_words": 1}


def test_b_proposes_a_cue_during_as_activity_or_within_half_a_second_of_its_last_word():
    rec = Recording("r", 24_000, 24_000 * 30)
    a = [Activity(1.0, 4.0, (_w("we", 1.0, 1.5), _w("went", 1.6, 2.5), _w("home,", 2.9, 4.0))),
         Activity(10.0, 12.0, (_w("then", 10.0, 11.0), _w("more.", 11.1, 12.0)))]
    b = [Activity(2.0, 2.4, (_w("mm", 2.0, 2.4),)),  # during A's activity
         Activity(4.4, 5.0, (_w("yes", 4.4, 5.0),)),  # 0.4 s after A's last word
         Activity(12.6, 13.0, (_w("so", 12.6, 13.0),)),  # 0.6 s after: not proposed
         Activity(20.0, 21.0, (_w("hi", 20.0, 21.0),))]  # A silent long before
    props = propose(rec, a, b)
    assert [(p.item_id, p.rule, p.continuation_start_s, p.continuation_end_s) for p in props] == [
        ("r-p0", "during", 2.0, 4.0), ("r-p1", "after", 4.4, 4.4)]
    assert propose(rec, a, b, gap_s=0.7)[-1].item_id == "r-p2"
    # A's continuation ends at its first pause of turn_pause_s or more (0.5 s from "went" to "home,")
    late = [Activity(1.0, 4.0, (*a[0].words[:2], _w("home,", 3.0, 4.0)))]
    assert propose(rec, late, b[:1])[0].continuation_end_s == 2.5


def test_intents_file_is_checked_line_by_line(tmp_path):
    props = {"r-p0": None, "r-p1": None}
    path = tmp_path / "intents.csv"
    path.write_text("item_id,intent,label\nr-p0,Collaboration,adapted\nr-p1,,\n")
    assert read_intents(path, props) == {"r-p0": ("collaboration", "adapted")}
    path.write_text("item_id,intent,label\nr-p9,backchannel,\nr-p0,praise,\nr-p1,interruption,maybe\n")
    with pytest.raises(ValueError) as e:
        read_intents(path, props)
    assert "3 problem(s)" in str(e.value) and ":2: item_id" in str(e.value) and ":3: intent" in str(e.value)
    assert ":4: label" in str(e.value)


def test_raw_recordings_to_the_evaluated_corpus(tmp_path):
    """Generated conversations (word times known) without their cue lines: every cue is proposed
    at its onset (B starts inside A's word), the labelled ones pass the audit and are selected,
    and the written corpus is a cue manifest that ingests to exactly them."""
    from harness.cue.corpus import ingest, write_manifest
    from harness.cue.generate import generate_cue_corpus

    gen = generate_cue_corpus(3, seed=5)
    raw = write_manifest(gen._replace(items=[]), tmp_path / "raw")
    out = tmp_path / "built"
    assert main([str(raw), "--out", str(out)]) == 0
    proposals = [json.loads(ln) for ln in (out / "proposals.jsonl").read_text().splitlines()]
    onsets = {p["recording_id"]: (p["cue_words"][0]["start_s"], p["rule"]) for p in proposals}
    assert onsets == {it.recording_id: (it.cue_onset_s, "during") for it in gen.items}
    counts = json.loads((out / "counts.json").read_text())
    assert counts["proposals"] == {"during": 3, "total": 3} and counts["recordings"] == 3
    assert counts["words"]["A"]["words"] == sum(len(r.a_words) for r in gen.recordings)
    assert (out / "intents.csv").read_text().splitlines()[0] == "item_id,intent,label"
    by_rec = {p["recording_id"]: p["item_id"] for p in proposals}
    first, second, third = gen.items
    (out / "intents.csv").write_text(f"item_id,intent,label\n{by_rec[first.recording_id]},{first.intent},\n"
                                     f"{by_rec[second.recording_id]},{second.intent},{second.label}\n")
    assert main([str(raw), "--out", str(out), "--intents", str(out / "intents.csv"), "--window-s", "30"]) == 0
    sel = {s["recording_id"]: s for s in json.loads((out / "selection.json").read_text())["proposals"]}
    assert sel[third.recording_id]["status"] == "unlabelled"
    # a 30 s window is longer than the recordings: the audit rejects both labelled cues, with the rule
    assert {sel[it.recording_id]["status"] for it in (first, second)} == {"rejected"}
    assert sel[first.recording_id]["reason"].startswith("window: ")
    assert main([str(raw), "--out", str(out), "--intents", str(out / "intents.csv")]) == 0
    sel = {s["recording_id"]: s for s in json.loads((out / "selection.json").read_text())["proposals"]}
    assert [sel[it.recording_id]["status"] for it in gen.items] == ["selected", "selected", "unlabelled"]
    counts = json.loads((out / "counts.json").read_text())
    assert counts["selection"] == {"selected": 2, "unlabelled": 1} and counts["audit"] == {}
    built = ingest(out / "corpus" / "manifest.jsonl")
    assert built.problems == [] and [it.intent for it in built.items] == [first.intent, second.intent]
    assert [it.label for it in built.items] == [None, second.label]
    assert [it.cue_onset_s for it in built.items] == [first.cue_onset_s, second.cue_onset_s]
