"""The corpus diagnostic (issue 22): does a corpus test addressee inference? Each figure on small
hand-made corpora whose answer is known, then in the report and in `make corpus`'s stats."""

from __future__ import annotations

import dataclasses
import random

import pytest

from harness.protocol.scheduler import ProtocolSettings
from harness.report.corpus import corpus_markdown
from harness.scenes import diagnostic as D
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.scenes.stats import CHARS_PER_S, corpus_stats

WORDS = ("bus", "train", "key", "lunch", "paint", "ticket", "tent", "map", "cake", "party", "door", "shelf")
FRAMES = ("where is the {}?", "did you see the {}?", "is the {} ready?", "so what about the {}?")


def _pair(k: int, rng: random.Random, t_tell: str = "") -> tuple[Scene, Scene]:
    """A pair: a fact, a question to a person, T, a question to a person and self-talk; every question
    drawn from the same frames and words. ``t_tell`` is put in the implicit T only."""
    a, b, c = rng.sample(WORDS, 3)
    t_text = rng.choice(FRAMES).format(b)
    turns = [
        Turn("B", f"The {b} is in the green bag.", Label.N2, Target.GROUP),
        Turn("A", rng.choice(FRAMES).format(a).capitalize(), Label.N2, Target.HUMAN),
        Turn("C", f"Hey Aria, {t_text}", Label.T, Target.ARIA),
        Turn("A", rng.choice(FRAMES).format(c).capitalize(), Label.N2, Target.HUMAN),
        Turn("B", "Hmm, let me think.", Label.N3, Target.NONE),
    ]
    pid = f"p{k:03d}"
    e = Scene(f"{pid}-explicit", pid, "explicit", ("A", "B", "C"), tuple(turns), "in the green bag",
              speaker_names={"A": "Sam", "B": "Maya", "C": "Leo"})
    i_turns = list(turns)
    i_turns[2] = dataclasses.replace(turns[2], text=f"{t_tell}{t_text[:1].upper()}{t_text[1:]}")
    return e, dataclasses.replace(e, scene_id=f"{pid}-implicit", condition="implicit", turns=tuple(i_turns))


def _corpus(n: int, **kw) -> list[Scene]:
    rng = random.Random(0)
    return [s for k in range(n) for s in _pair(k, rng, **kw)]


def test_a_tell_in_t_alone_is_found_and_shared_words_are_not():
    told = D.diagnostic(_corpus(60, t_tell="Question for the assistant: "), CHARS_PER_S)
    assert told["designator"] == {"pairs": 60, "with_designator": 60, "share": 1.0, "words": {"assistant": 60}}
    assert told["surface_auc"]["implicit"]["best_auc"] == 1.0  # the colon and the role noun give T away
    assert told["exclusive"]["implicit"]["T"]["chars"] == {":": 60}
    assert told["exclusive"]["implicit"]["T"]["covered_share"] == 1.0
    assert {":", "assistant"} <= set(told["exclusive"]["implicit"]["T"]["top"])
    # T asks what the other question turns ask, in the same words: no surface separates them
    plain = D.diagnostic(_corpus(60), CHARS_PER_S)
    assert plain["designator"]["share"] == 0.0 and plain["exclusive"]["implicit"]["T"]["chars"] == {}
    assert plain["surface_auc"]["implicit"]["best_auc"] < 0.7
    auc = plain["surface_auc"]["implicit"]
    assert set(auc["auc"]) == {c.name for c in D.CLASSIFIERS} and auc["best"] in auc["auc"]
    assert (auc["t_turns"], auc["other_question_turns"]) == (60, 120)
    assert plain["surface_auc"]["explicit"]["best_auc"] == 1.0  # the name alone gives the explicit T away


def test_too_few_turns_give_no_classifier_figure():
    auc = D.surface_auc(_corpus(3)[1::2])
    assert auc["best_auc"] is None and "too few turns" in auc["why"]


def test_question_turns():
    assert D.is_question("Where is it?", Label.N3) and D.is_question("Aria, tell me.", Label.N4_Q)
    assert not D.is_question("Pass the salt.", Label.N2)
    assert D.tokens("Hey, Aria: it's six?") == ["hey", ",", "aria", ":", "it's", "six", "?"]


def test_repeats_and_clauses():
    scenes = _corpus(10)
    rep = D.repeats(scenes[::2])
    # per pair 4 non-T turns of 12 words and 4 frames: "Hmm, let me think." is in every pair
    assert rep["non_t_turns"] == 40 and rep["most_used_sentences"]["Hmm, let me think."] == 10
    assert rep["repeated_across_pairs"] >= 10 and rep["distinct_first_sentences"]["N3"] == 1
    assert rep["share"] == rep["repeated_across_pairs"] / 40
    cl = D.clause_diversity(scenes[::2])
    assert cl["t"]["clauses"] == 20  # "Hey <name>" and the question
    assert "hey <name>" in {c.strip().lower() for c in D.CLAUSE.split(D._mask("Hey Aria, x", []))}


def test_t_onset_on_the_schedulers_timeline():
    assert ProtocolSettings().turn_gap_s == D.TURN_GAP_S
    e, _ = _pair(0, random.Random(1))
    want = sum(len(t.text) / CHARS_PER_S + 0.5 for t in e.turns[:2])
    assert D.t_onsets([e], CHARS_PER_S) == [pytest.approx(want)]
    on = D.t_onset(_corpus(4), list(zip(_corpus(4)[::2], _corpus(4)[1::2], strict=True)), CHARS_PER_S)
    assert on["conversations"] == 8 and on["min_s"] <= on["tertile_edges_s"][0] <= on["tertile_edges_s"][1]
    assert on["before_paper_min"] == 8 and on["deviation"]["min"] < 0
    assert on["t_second_turn_pairs"] == 0 and on["gold_just_before_t_pairs"] == 0


def test_silence_by_type():
    assert D.silence_by_type(_corpus(2)[::2]) == {"device_directed": 0, "human_directed": 4, "statements": 2,
                                                   "self_talk": 2}


def test_stats_and_report_carry_it():
    stats = corpus_stats(_corpus(30, t_tell="Question for the assistant: "))
    assert set(stats["diagnostic"]) == {"designator", "surface_auc", "exclusive", "repeats", "clauses", "t_onset",
                                        "silence_by_type"}
    md = corpus_markdown(stats)
    assert "| implicit T with a role noun or device word (or in the rewritten turn before it) | 100.0% (30) |" in md
    assert "| implicit: characters found in T only | ':' | none |" in md
    assert "diagnostic" not in corpus_stats(_corpus(3), diagnose=False)
    head = D.headline(stats["diagnostic"])
    assert head["designator_share"] == 1.0 and head["t_only_chars_implicit"] == ":"


# --- the template generator, measured by the diagnostic (issue 22) ---------------------------------

@pytest.fixture(scope="module")
def generated():
    from harness.scenes.generator import generate_pairs

    scenes = generate_pairs(400, 20260902, 0.25, 0.5, profile="paper")
    return {c: [s for s in scenes if s.condition == c] for c in ("explicit", "implicit")}


def test_generated_implicit_requests_have_no_surface_tell(generated):
    """A single-turn classifier barely separates the implicit T from the other question turns (the
    paper-scale corpus: <= 0.65; 400 pairs leave more noise), no phrase or character is T's alone;
    the explicit T still says the name (the classifier finds it)."""
    assert D.surface_auc(generated["implicit"])["best_auc"] <= 0.68
    assert D.surface_auc(generated["explicit"])["best_auc"] >= 0.9
    t = D.exclusive_phrases(generated["implicit"])["T"]
    assert t["phrases"] == 0 and t["chars"] == {}
    pairs = list(zip(generated["explicit"], generated["implicit"], strict=True))
    assert D.designator_share(pairs)["share"] <= 0.25


@pytest.mark.parametrize("profile, n_pairs", [("paper", 150), ("compact", 60), ("compact", 7)])
def test_generated_silence_mix_is_exact(profile, n_pairs):
    """The device-directed and human-directed windows are the paper's shares of the corpus's silence
    windows, exactly (round(total * 2,570 / 20,360) and round(total * 2,134 / 20,360)), in both versions."""
    from harness.scenes.generator import generate_pairs

    scenes = generate_pairs(n_pairs, 5, 0.25, 0.5, profile=profile)
    for cond in ("explicit", "implicit"):
        mix = D.silence_by_type([s for s in scenes if s.condition == cond])
        total = sum(mix.values())
        assert mix["device_directed"] == round(total * D.PAPER_SILENCE_BY_TYPE["device_directed"] / 20360)
        assert mix["human_directed"] == round(total * D.PAPER_SILENCE_BY_TYPE["human_directed"] / 20360)


def test_generated_unequal_pairs_keep_the_n4_count():
    """The N4 edits that drop an event from one version: as many from each condition, so both keep
    the same number of N4 events, and every pair still validates."""
    from harness.scenes.generator import generate_pairs

    scenes = generate_pairs(500, 3, 0.25, 0.5, profile="paper")
    stats = corpus_stats(scenes, diagnose=False)
    assert stats["pairs_unequal_turns"] == 4  # 16 per 2,000 pairs
    assert stats["explicit"]["n4_events"] == stats["implicit"]["n4_events"] == round(round(0.5 * 500) * 1911 / 968)
    assert stats["explicit"]["windows"]["N1"] - stats["implicit"]["windows"]["N1"] == 0  # 2 per 2,000: none here
