"""The paper-scale corpus (issue 10): accounting, implicit cues, labels, pair validation for
generated and imported scenes, `make corpus` and the report's corpus section."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from harness.report.corpus import corpus_markdown, corpus_section
from harness.report.document import Table
from harness.scenes import vocab as V
from harness.scenes.generator import generate_pairs
from harness.scenes.schema import (
    GENERIC_CUE,
    Label,
    Scene,
    SceneError,
    Target,
    Turn,
    addresses_by_name,
    aligned_turns,
    context_singles_out_assistant,
    import_manifest,
    iter_manifest,
    names_assistant,
    names_assistant_or_designates,
    validate_pair,
    validate_scenes,
)
from harness.scenes.stats import PAPER, corpus_stats
from tests.fixtures.runs import SILENT, tiny_config

PAPER_ARGS = (2000, 20260902, 0.25, 0.484)


@pytest.fixture(scope="module")
def paper() -> list[Scene]:
    return generate_pairs(*PAPER_ARGS, profile="paper")


@pytest.fixture(scope="module")
def stats(paper) -> dict:
    return corpus_stats(paper)


def test_every_scene_of_the_paper_corpus_passes_strict_validation(paper):
    # how long generating and validating takes: `make corpus` prints it (a figure, not a test)
    valid, invalid = validate_scenes(paper, strict=True)
    assert invalid == {} and valid == paper


def test_exact_paper_counts(stats):
    assert (stats["n_pairs"], stats["n_three_person"], stats["n_four_person"]) == (2000, 1500, 500)
    assert stats["t_position_buckets"] == {"early-middle": 667, "middle": 667, "late-middle": 666}
    assert (stats["n_scenes_with_n4"], stats["n_n4_events"]) == (968, 1911)
    assert stats["rewritten_previous_turn"] == 42
    for cond in ("explicit", "implicit"):
        w = stats[cond]["windows"]
        assert (w["T"], w["N4_Q"], w["N4_R"]) == (2000, 1911, 1911)
        assert w["N1"] + w["N2"] + w["N3"] == 20360
        assert {k: w[k] for k in ("N1", "N2", "N3")} == {k: PAPER["windows"][cond][k] for k in ("N1", "N2", "N3")}
        assert stats[cond]["scenes_with_n4"] == 968
    # the paper's N4 edits: 1,661 pairs differ only at T, 339 elsewhere too, 16 of them with unequal turn counts
    assert (stats["pairs_differ_only_at_t"], stats["pairs_unequal_turns"]) == (1661, 16)


def test_silence_mix_is_the_papers(stats):
    """Device-directed / human-directed / statements / self-talk windows: the paper's breakdown read
    as windows per condition (docs/corpus.md), exactly, in both conditions."""
    by_type = stats["diagnostic"]["silence_by_type"]
    assert by_type["paper"] == {"device_directed": 2570, "human_directed": 2134, "statements": 12389,
                                "self_talk": 3267}
    assert by_type["explicit"] == by_type["implicit"] == by_type["paper"]


def test_targets_fit_the_text(paper):
    """A device-directed turn addresses the scene's device, which fits the setting; a human-directed
    N2 turn names a person, answers one, or asks the next speaker; a statement names no person."""
    for s in paper[::2]:
        names = set(s.speaker_names.values())
        device = s.attributes["device_context"]
        for turn in s.turns:
            if turn.target is Target.DEVICE:
                assert device != "none" and turn.text.split(",")[0].lower() in device.lower(), (device, turn.text)
            elif turn.label is Label.N2 and turn.target is Target.GROUP:
                assert not any(addresses_by_name(turn.text, n) for n in names), turn.text


def test_within_one_percent_elsewhere(stats):
    for cond in ("explicit", "implicit"):
        for label in ("N1", "N2", "N3"):
            assert stats[cond]["windows"][label] == pytest.approx(PAPER["windows"][cond][label], rel=0.01)
        assert stats[cond]["mean_t_chars"] == pytest.approx(PAPER["mean_t_chars"][cond], rel=0.01)
        assert stats[cond]["mean_conversation_s"] == pytest.approx(PAPER["mean_conversation_s"][cond], rel=0.01)


def test_late_middle_t_scenes_get_two_n4_events(paper):
    late = [s for s in paper[::2] if s.t_position == "late-middle"]
    events = [sum(t.label is Label.N4_Q for t in s.turns) for s in late]
    assert events.count(2) > 250  # the turn limit does not cap the event count


def test_the_conversation_singles_out_the_assistant(paper):
    """Implicit T say no name and no role noun (the relay pairs' rewritten turn may, as people do):
    the cue is in the conversation before T (issue 22)."""
    want = {"relay": {"designator", "unknown", "job"}, "keeper": {"job"}, "holder": {"job"},
            "unknown": {"unknown", "job"}}
    for e, i in zip(paper[::2], paper[1::2], strict=True):
        t = i.turns[i.t_index]
        cue = i.attributes["implicit_cue"]
        assert not names_assistant_or_designates(t.text), t.text
        assert not any(addresses_by_name(t.text, n) for n in i.speaker_names.values()), t.text
        assert context_singles_out_assistant(i, cue == "relay") in want[cue], (cue, t.text)
        before = i.turns[: i.t_index]
        if cue == "relay" and i.turns[i.t_index - 1].label is Label.N2:  # rewritten as "I don't know" (2 pairs)
            prev = i.turns[i.t_index - 1]
            assert context_singles_out_assistant(i, True) in {"unknown", "job"}
            assert not names_assistant_or_designates(prev.text)
            assert e.turns[e.t_index - 1].label is Label.N1 and names_assistant(e.turns[e.t_index - 1].text)
        elif cue == "relay":
            prev = i.turns[i.t_index - 1]
            assert prev != e.turns[e.t_index - 1] and names_assistant_or_designates(prev.text)
            assert prev.label is Label.N1 and e.turns[e.t_index - 1].label is Label.N1
        elif cue == "keeper":  # an earlier N1 turn gave Aria the job, by name
            assert any(turn.label is Label.N1 and names_assistant(turn.text)
                       and re.search(r"track|duty|in charge|remember|noting|an ear", turn.text) for turn in before)
        elif cue == "holder":  # the fact came from Aria: an N1 turn before T says it, with the gold answer
            assert any(turn.label is Label.N1 and names_assistant(turn.text) and e.gold_answer in turn.text
                       for turn in before)
        else:  # a person has just said they do not know, after a turn saying Aria follows the conversation
            assert i.turns[i.t_index - 1].label is Label.N2 and i.turns[i.t_index - 1].speaker != t.speaker


def _support(scene: Scene) -> int:
    """The first turn before T that says the gold answer."""
    return next(k for k in range(scene.t_index) if scene.gold_answer.lower() in scene.turns[k].text.lower())


def test_the_implicit_t_points_at_aria_not_at_a_person(paper):
    """Nobody who could answer T is in the way: who said the fact is never the one who says "I don't know"
    (an answer to the asker's question, right before T), the asker was never told it before T, and
    no T names a person in the room as the source ("I know Mei mentioned it")."""
    for scene in paper:
        turns, t = scene.turns, scene.t_index
        teller, asker = turns[_support(scene)].speaker, turns[t].speaker
        assert teller != asker, scene.scene_id
        if scene.attributes["implicit_cue"] == "unknown":
            ask, dunno = turns[t - 2], turns[t - 1]
            assert dunno.speaker not in (teller, asker), (scene.scene_id, dunno.text)
            assert ask.speaker == asker and "?" in ask.text, (scene.scene_id, ask.text)
        for k in range(t - 1):  # no question of the asker's to people got the gold answer for a reply
            if turns[k].speaker == asker and turns[k].label is turns[k + 1].label is Label.N2 and "?" in turns[k].text:
                assert scene.gold_answer.lower() not in turns[k + 1].text.lower(), (scene.scene_id, k)
        assert not re.search(rf"\b{scene.speaker_names[teller]}\b", turns[t].text), turns[t].text


LISTENER_OPENERS = ("Excuse me", "Pardon me", "If I may ask", "Sorry to bother you", "If you don't mind",
                    "Just quickly", "Quick one", "Hey there", "Um, hi", "Okay, pop quiz", "Here's one",
                    "Right, riddle me this")
LISTENER_WORDS = ("was wondering too", "if you're wondering", "so we can plan", "text the others",
                  "nobody gets it wrong", "Thanks.", "Thank you.", "Any idea?", "Do you know?", "Sorry to interrupt",
                  "before we go on")


def test_self_talk_addresses_no_listener(paper):
    """N3 is said to no one: no opener, reason, closer or tail that speaks to a listener."""
    for scene in paper:
        for turn in scene.turns:
            if turn.label is Label.N3:
                assert not turn.text.startswith(LISTENER_OPENERS), turn.text
                assert not any(w in turn.text for w in LISTENER_WORDS), turn.text


def test_no_turn_contradicts_itself_or_the_scene(paper):
    """No speaker says their own name or asks Aria for a value they stated; no turn takes a question
    back and then says it forgot, or learned the news two ways; a code is one thing's per scene."""
    forgot = ("I never remember these things", "I lose it again", "I swear I had it all figured out")
    remembered = ("I remember now", "it came back to me", "I just looked it up", "I found it on my phone")
    learned = ("I told them before", "I only found out this morning", "They called me about it earlier",
               "I got the message about it an hour ago", "They confirmed it in writing this time")
    values = (*V.CODES, *V.FULL_NAMES, *V.PLACES, *V.ROOMS, *(f"{d} {t}" for d in V.DAYS for t in V.TIMES))
    for scene in paper:
        first: dict[str, str] = {}  # value -> who said it first
        for turn in scene.turns:
            assert not re.search(rf"\b{scene.speaker_names[turn.speaker]}\b", turn.text), turn.text
            assert not (any(r in turn.text for r in remembered) and any(f in turn.text for f in forgot)), turn.text
            assert sum(x in turn.text for x in learned) <= 1, turn.text
            if turn.label is Label.N4_Q and turn.answer.startswith("As far as I heard"):
                assert all(first[v] != turn.speaker for v in values if v in turn.answer), (scene.scene_id, turn.text)
            for v in values:
                if v in turn.text:
                    first.setdefault(v, turn.speaker)
        codes = [m.groups() for turn in scene.turns
                 for m in re.finditer(rf"({'|'.join(V.CODED)})[^.]*? ({'|'.join(V.CODES)})", turn.text.lower())]
        assert len({c for _, c in codes}) == len(set(codes)), (scene.scene_id, codes)


def test_requests_are_sincere_and_their_reasons_fit(paper):
    """No quiz or sarcastic openers on a request for a fact; the calendar reason only for times."""
    for scene in paper:
        for turn in scene.turns:
            quiz = r"pop quiz|riddle me this|^Here's one|^(Brilliant|Fantastic|Well, great|Oh, wonderful),"
            assert not re.search(quiz, turn.text), turn.text
            if "put it in the calendar" in turn.text:
                assert re.search(r"\bwhen\b|what day|what time", turn.text, re.IGNORECASE), turn.text


def test_values_and_devices_fit_the_setting(paper):
    """A value or thing that fits some settings only (vocab.FITS) is said only there; a message goes to
    someone who is not in the room; the navigation app's commands are for the road."""
    for scene in paper:
        setting, names = scene.attributes["setting"], "|".join(scene.speaker_names.values())
        for turn in scene.turns:
            assert all(setting in fits for x, fits in V.FITS.items() if x in turn.text), (setting, turn.text)
            if turn.target is Target.DEVICE:
                assert not re.search(rf"(text|message|send|email|time with) ({names})\b", turn.text), turn.text
                assert not turn.text.startswith("Rex,") or setting == "car on a road trip", (setting, turn.text)


def test_versions_differ_at_t_the_rewritten_turn_or_the_edited_n4_turns(paper, stats):
    unequal = {"explicit": 0, "implicit": 0}
    for e, i in zip(paper[::2], paper[1::2], strict=True):
        if len(e.turns) != len(i.turns):  # one version lacks one N4 event, else they match turn by turn
            longer, shorter = (e, i) if len(e.turns) > len(i.turns) else (i, e)
            unequal[shorter.condition] += 1
            t = e.t_index
            same = [a == b or k == t for k, (a, b) in enumerate(zip(longer.turns, shorter.turns, strict=False))]
            q = same.index(False) if False in same else len(shorter.turns)  # the missing event (or the last two)
            assert len(longer.turns) == len(shorter.turns) + 2 and longer.turns[q].label is Label.N4_Q
            assert longer.turns[q + 2:] == shorter.turns[q:]
            continue
        differ = [k for k, (a, b) in enumerate(zip(e.turns, i.turns, strict=True)) if a != b]
        if i.attributes["implicit_cue"] == "relay":
            assert differ == [e.t_index - 1, e.t_index]
        else:
            assert differ[0] == e.t_index and all(e.turns[k].label in (Label.N4_Q, Label.N4_R) for k in differ[1:])
    # the paper's N4 edits: 1,661 pairs differ only at T, 339 elsewhere too (42 of them rewrite the turn before T,
    # 16 have unequal turn counts: half of them the explicit version shorter, so each condition keeps 1,911 events)
    assert (stats["pairs_differ_only_at_t"], stats["rewritten_previous_turn"]) == (1661, 42)
    assert unequal == {"explicit": 8, "implicit": 8}


def test_labels_as_the_spec_says(paper):
    device_names = {d.split(" called ")[-1] for d, _ in V.DEVICES.values() if " called " in d} | {"Watch"}
    for s in paper:
        for turn in s.turns:
            if turn.label.is_silence:  # only N1 refers to the assistant
                assert names_assistant_or_designates(turn.text) == (turn.label is Label.N1), turn.text
            if turn.target is Target.DEVICE:  # device-directed N2 means another assistant, never an object
                assert turn.label is Label.N2 and turn.text.split(",")[0] in device_names, turn.text
    objects = {line for st in V.SETTINGS for line in st.self_talk if line.startswith("Come on,")}
    assert objects and all(t.label is Label.N3 for s in paper for t in s.turns if t.text in objects)


def test_variety(stats, paper):
    d = stats["distinct"]
    assert d["t_texts"] > 0.99
    assert d["non_t_turn_texts"] > 0.5
    for key in ("setting", "activity", "relationship", "device_context", "register"):
        assert len({s.attributes[key] for s in paper}) >= 12, key
    kinds = {s.attributes["implicit_cue"] for s in paper}
    assert kinds == {"keeper", "holder", "unknown", "relay"}


def test_reuse_is_counted(stats):
    r = stats["reuse"]
    assert r["distinct_clips"] < r["clips"] and 0.3 < r["reuse_ratio"] < 0.7
    assert r["speech_h"] == pytest.approx(PAPER["speech_h"], rel=0.02)


# --- validation, for generated and imported scenes alike ---------------------------------------

def _pair(**implicit_changes) -> tuple[Scene, Scene]:
    turns = (
        Turn("A", "Maya, the bus leaves at nine.", Label.N2, Target.HUMAN),
        Turn("B", "Hey Aria, when does the bus leave?", Label.T, Target.ARIA),
        Turn("C", "Hmm, where is my ticket?", Label.N3, Target.NONE),
    )
    e = Scene("p1-explicit", "p1", "explicit", ("A", "B", "C"), turns, "at nine",
              speaker_names={"A": "Sam", "B": "Maya", "C": "Leo"})
    i_turns = (turns[0], Turn("B", "Question for our assistant: when does the bus leave?", Label.T, Target.ARIA),
               turns[2])
    i = dataclasses.replace(e, scene_id="p1-implicit", condition="implicit", turns=i_turns)
    return e, dataclasses.replace(i, **implicit_changes)


def _with_t(scene: Scene, text: str) -> Scene:
    turns = list(scene.turns)
    turns[scene.t_index] = dataclasses.replace(turns[scene.t_index], text=text)
    return dataclasses.replace(scene, turns=tuple(turns))


def test_name_check_matches_the_whole_word():
    assert names_assistant("Aria, when?") and names_assistant("is that Aria's voice?")
    assert not names_assistant("I'm vegetarian, when is dinner?") and not names_assistant("Maria, when?")
    e, i = _pair()
    validate_pair(e, _with_t(i, "Assistant, is the vegetarian option at nine or ten?"))
    with pytest.raises(SceneError, match=r"\[rule explicit_name\]"):
        validate_pair(_with_t(e, "Hey Maria, when does the bus leave?"), i)
    with pytest.raises(SceneError, match=r"\[rule implicit_name\]"):
        validate_pair(e, _with_t(i, "Question for Aria's speaker: when does the bus leave?"))


@pytest.mark.parametrize("text, rule", [
    ("Sam, question for the assistant: when does the bus leave?", "implicit_addresses_human"),
    ("Hey Leo, when does the bus leave?", "implicit_addresses_human"),
    ("When does the bus leave, Sam?", "implicit_addresses_human"),
    ("You were listening. When does the bus leave?", "implicit_generic_cue"),
    ("You heard Sam say it. When does the bus leave?", "implicit_generic_cue"),
])
def test_implicit_t_that_fits_a_human(text, rule):
    e, i = _pair()
    with pytest.raises(SceneError, match=rf"\[rule {rule}\]$"):
        validate_pair(e, _with_t(i, text))


def test_mentioning_a_person_is_not_addressing_them():
    e, i = _pair()
    validate_pair(e, _with_t(i, "Question for the assistant: when did Sam say the bus leaves?"))
    assert GENERIC_CUE.search("you heard it") and not addresses_by_name("what did Sam say?", "Sam")


def test_strict_rules_need_the_context_to_single_out_the_assistant():
    e, i = _pair()
    bare = _with_t(i, "Okay, when does the bus leave?")
    validate_pair(e, bare)  # an imported scene is not held to the generator's rules
    with pytest.raises(SceneError, match=r"\[rule implicit_no_context\]"):
        validate_pair(e, bare, strict=True)
    # a word is not a context: the assistant mentioned before T, but about something else
    aside = Turn("C", "Aria was really useful yesterday.", Label.N1, Target.GROUP)
    with pytest.raises(SceneError, match=r"\[rule implicit_no_context\]"):
        validate_pair(*(_insert(s, 1, aside) for s in (e, bare)), strict=True)
    # the assistant was given the job of the thing T asks about
    job = Turn("C", "Aria keeps track of the bus for us.", Label.N1, Target.GROUP)
    validate_pair(*(_insert(s, 1, job) for s in (e, bare)), strict=True)
    assert context_singles_out_assistant(_insert(bare, 1, job)) == "job"
    # or the people have just said they do not know, after a turn about the assistant listening in
    dunno = Turn("A", "No idea, Maya, I wasn't listening.", Label.N2, Target.HUMAN)
    both = [_insert(_insert(s, 1, aside), 2, dunno) for s in (e, bare)]
    validate_pair(*both, strict=True)
    assert context_singles_out_assistant(both[1]) == "unknown"


@pytest.mark.parametrize("change, rule", [
    (lambda s: _with_turn(s, 0, "Maya, the bus leaves soon."), "support"),  # nobody says "at nine" before T
    (lambda s: _with_t(s, "Aria, does the bus leave at nine?"), "gold_in_t"),
    (lambda s: _with_turn(s, 3, "Sam, where is my ticket?"), "n3_addressed"),
    (lambda s: _with_turn(s, 0, "Maya, the bus leaves at nine.", label=Label.N1), "n1_no_assistant"),
])
def test_strict_rules_check_the_content(change, rule):
    job = Turn("C", "Aria keeps track of the bus for us.", Label.N1, Target.GROUP)
    e, i = (_insert(s, 1, job) for s in _pair())
    validate_pair(e, i, strict=True)
    bad = [change(s) for s in (e, i)]
    if rule == "gold_in_t":
        bad = [bad[0], i]
    with pytest.raises(SceneError, match=rf"\[rule {rule}\]$"):
        validate_pair(*bad, strict=True)
    validate_pair(*bad)  # the form alone: an import is not held to the content rules


def test_strict_rules_check_where_the_versions_differ():
    job = Turn("C", "Aria keeps track of the bus for us.", Label.N1, Target.GROUP)
    e, i = (_insert(s, 1, job) for s in _pair())
    with pytest.raises(SceneError, match=r"\[rule pair_diff\]$"):
        validate_pair(e, _with_turn(i, 3, "Hmm, where did I put my ticket?"), strict=True)
    with pytest.raises(SceneError, match=r"\[rule pair_layout\]$"):
        validate_pair(e, _insert(i, 4, Turn("A", "Hmm, okay.", Label.N3, Target.NONE)), strict=True)


def test_strict_rules_allow_an_n4_event_in_one_version_only():
    """The paper's N4 edits with unequal turn counts: one version may lack one N4 event after T."""
    job = Turn("C", "Aria keeps track of the bus for us.", Label.N1, Target.GROUP)
    e, i = (_insert(s, 1, job) for s in _pair())
    q = Turn("A", "How far away is the moon?", Label.N4_Q, Target.ARIA, answer="About a quarter million miles.")
    r = Turn("B", "Sam, never mind, I know it.", Label.N4_R, Target.HUMAN)
    longer = _insert(_insert(e, 3, q), 4, r)
    validate_pair(longer, i, strict=True)
    assert [t.label for t in aligned_turns(longer, i)[0]] == [t.label for t in i.turns]
    with pytest.raises(SceneError, match=r"\[rule pair_layout\]$"):  # not an N4 event
        validate_pair(_insert(_insert(e, 3, q), 4, dataclasses.replace(r, label=Label.N2)), i, strict=True)


def _with_turn(scene: Scene, k: int, text: str, **changes) -> Scene:
    turns = list(scene.turns)
    turns[k] = dataclasses.replace(turns[k], text=text, **changes)
    return dataclasses.replace(scene, turns=tuple(turns))


def _insert(scene: Scene, k: int, turn: Turn) -> Scene:
    return dataclasses.replace(scene, turns=(*scene.turns[:k], turn, *scene.turns[k:]))


def test_the_corpus_tests_addressee_inference(stats):
    """Issue 22's targets on the paper-scale corpus."""
    d, on = stats["diagnostic"], stats["diagnostic"]["t_onset"]
    assert d["designator"]["share"] <= 0.25
    for c in ("explicit", "implicit"):
        assert d["exclusive"][c]["T"]["phrases"] == 0 and d["exclusive"][c]["T"]["chars"] == {}
    assert stats["reuse"]["distinct_speech_h"] >= 58 and d["repeats"]["share"] <= 0.10
    dev = on["deviation"]
    assert all(abs(x) <= 0.10 for x in (dev["min"], dev["max"], *dev["tertile_edges"])) and on["before_paper_min"] == 0
    assert d["surface_auc"]["implicit"]["best_auc"] <= 0.65
    assert on["t_second_turn_pairs"] == 0 and on["gold_just_before_t_pairs"] == 0
    # no retraction, politeness or general-knowledge phrase is one label's (issue 22: N4_R "scratch that",
    # N2 ", please .", N4_Q "in the world"); N4_Q no longer says the name as a rule
    for c in ("explicit", "implicit"):
        for label, phrase in (("N4_R", ", scratch that"), ("N4_R", ", forget it"), ("N4_R", ", no need"),
                              ("N2", ", please ."), ("N4_Q", "in the world"), ("N4_Q", "boil")):
            assert phrase not in d["exclusive"][c][label]["top"], (c, label, phrase)
        assert d["exclusive"][c]["N4_Q"]["covered_share"] < 0.05


def _lines(*scenes: Scene | dict) -> list[str]:
    return [json.dumps(s if isinstance(s, dict) else s.to_dict()) for s in scenes]


def test_import_rejects_broken_pairs_whole():
    e, i = _pair()
    e2, i2 = (dataclasses.replace(s, scene_id=s.scene_id.replace("p1", "p2"), pair_id="p2") for s in _pair())
    e3, _ = (dataclasses.replace(s, scene_id=s.scene_id.replace("p1", "p3"), pair_id="p3") for s in _pair())
    i2 = dataclasses.replace(i2, gold_answer="at ten")
    scenes, invalid = import_manifest(_lines(e, i, e2, i2, e3))
    assert scenes == [e, i]
    assert invalid == {
        "p2-explicit": "scene 'p2': paired versions must share the gold answer: explicit 'at nine', implicit "
                       "'at ten' [rule pair_gold]",
        "p2-implicit": "scene 'p2': paired versions must share the gold answer: explicit 'at nine', implicit "
                       "'at ten' [rule pair_gold]",
        "p3-explicit": "scene 'p3-explicit': pair 'p3' has no implicit version [rule pair_incomplete]",
    }


@pytest.mark.parametrize("change, rule, turn", [
    (lambda d: d["turns"][0].update(label="N9"), "bad_value", None),
    (lambda d: d["turns"].append(d["turns"].pop(1)), "t_last", 2),
    (lambda d: d["turns"].insert(0, d["turns"].pop(1)), "t_first", 0),
])
def test_line_errors_name_the_line(change, rule, turn):
    e, i = _pair()
    bad = i.to_dict()
    change(bad)
    items = list(iter_manifest(["", *_lines(e, bad)]))
    err = items[1]
    assert isinstance(err, SceneError) and (err.rule, err.turn, err.line) == (rule, turn, 3)
    assert str(err).startswith("manifest line 3: scene 'p1-implicit'")
    scenes, invalid = import_manifest(["", *_lines(e, bad)])
    assert scenes == [] and set(invalid) == {"p1-explicit", "p1-implicit"}


def test_duplicate_ids_name_their_lines():
    e, i = _pair()
    items = list(iter_manifest(_lines(e, i, e)))
    assert [x.line for x in items if isinstance(x, SceneError)] == [1, 3]
    assert all("manifest lines 1 and 3" in str(x) for x in items if isinstance(x, SceneError))


def test_scenes_stage_validates_an_imported_manifest(tmp_path):
    from harness.runtime.driver import StageCannotRun
    from harness.runtime.plan import RunPlan
    from harness.stages import run_stage
    from harness.store.base import LocalStore, get_json

    e, i = _pair()
    path = tmp_path / "import.jsonl"
    path.write_text("\n".join(_lines(e, dataclasses.replace(i, gold_answer="at ten"))) + "\n", encoding="utf-8")
    cfg = tiny_config(tmp_path / "s", "imp", SILENT, scenes={"manifest": str(path)})
    store = LocalStore(tmp_path / "s")
    plan = RunPlan.from_config(cfg)
    with pytest.raises(StageCannotRun, match="no valid scene"):  # both halves refused: nothing to run
        run_stage("scenes", cfg, store)
    assert set(get_json(store, plan.layout.file(plan.scenes, "invalid.json"))) == {"p1-explicit", "p1-implicit"}
    assert not store.exists(plan.layout.marker(plan.scenes))


def test_scenes_config_profile():
    from harness.runtime.config import ConfigError, RunConfig

    base = {"model": {"silent": {"target": "silent"}}}
    assert RunConfig.from_dict({**base, "scenes": {"profile": "paper"}}).scenes.profile == "paper"
    with pytest.raises(ConfigError, match="profile must be one of"):
        RunConfig.from_dict({**base, "scenes": {"profile": "huge"}})
    with pytest.raises(ValueError, match="profile must be one of"):
        generate_pairs(2, 0, profile="huge")


# --- make corpus and the report section -----------------------------------------------------------

def test_make_corpus_writes_stats_beside_the_manifest(tmp_path, capsys):
    from harness.scenes.corpus import main

    assert main(["--n-pairs", "60", "--out", str(tmp_path / "c")]) == 0
    path = capsys.readouterr().out.strip()
    assert path == str(tmp_path / "c" / "corpus_stats.json")
    stats = json.loads((tmp_path / "c" / "corpus_stats.json").read_text())
    for key in ("n_pairs", "n_three_person", "n_four_person", "t_position_buckets", "n_scenes_with_n4",
                "n_n4_events", "rewritten_previous_turn", "timing_s"):
        assert key in stats
    assert stats["n_pairs"] == 60 and stats["n_four_person"] == 15 and stats["n_scenes_with_n4"] == 29
    assert stats["explicit"]["windows"]["N1"] + stats["explicit"]["windows"]["N2"] + \
        stats["explicit"]["windows"]["N3"] == round(20360 * 60 / 2000)
    assert (tmp_path / "c" / "scenes.jsonl").read_text().count("\n") == 120
    assert "| pairs | 60 | 2,000 | 60 |" in (tmp_path / "c" / "corpus.md").read_text()
    # an imported manifest: counted, invalid scenes reported, not fatal; --strict holds it to the generator's rules
    assert main(["--manifest", str(tmp_path / "c" / "scenes.jsonl"), "--out", str(tmp_path / "d")]) == 0
    assert main(["--manifest", str(tmp_path / "c" / "scenes.jsonl"), "--out", str(tmp_path / "e"), "--strict"]) == 0
    strict = json.loads((tmp_path / "e" / "corpus_stats.json").read_text())
    assert strict["n_pairs"] == 60 and strict["source"]["strict"] is True
    bare = _pair()  # an implicit T with a role noun but nothing before it about the bus: fine unless strict
    (tmp_path / "bare.jsonl").write_text("".join(json.dumps(s.to_dict()) + "\n" for s in
                                                 (bare[0], _with_t(bare[1], "Okay, when does the bus leave?"))))
    assert main(["--manifest", str(tmp_path / "bare.jsonl"), "--out", str(tmp_path / "f")]) == 0
    assert main(["--manifest", str(tmp_path / "bare.jsonl"), "--out", str(tmp_path / "g"), "--strict"]) == 2
    assert "implicit_no_context" in (tmp_path / "g" / "invalid.json").read_text()


def test_report_section(stats):
    sec = corpus_section(stats)
    tables = [b for b in sec.blocks if isinstance(b, Table)]
    counts = {r[0]: r for r in tables[0].rows}
    assert counts["N4 events"][1:3] == ("1,911", "1,911")
    assert counts["explicit: N1+N2+N3 windows"][1:3] == ("20,360", "20,360")
    assert "distinct T texts" in corpus_markdown(stats)
    old = {"explicit": {"scenes": 3}}  # stats of an older run: shown as JSON
    assert "\"scenes\": 3" in corpus_markdown(old)
