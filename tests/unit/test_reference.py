"""The text-conditioned reference (spec section 7): what it sees per turn, the rule stand-in with
hand-computed scores, agreement between passes, and the LLM backends with fake SDK clients
(no network, no keys), including the content cache and unparseable replies."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.audio.preamble import DUTY_TEXT
from harness.reference import RESPOND, SILENT, UNPARSEABLE, Decision, build_reference, turn_inputs
from harness.reference.evaluate import (
    YIELD_NOT_APPLICABLE,
    decision_agreement,
    pass_agreement,
    run_reference,
)
from harness.reference.llm import ANTHROPIC_MAX_OUTPUT_TOKENS, LLMReference, parse_decision
from harness.reference.rule import RuleReference
from harness.runtime.config import ReferenceSettings
from harness.runtime.plan import RunPlan
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.scoring.cache import CachedJudge
from harness.scoring.judge import CORRECT, Cost
from harness.scoring.judge.lexical import LexicalJudge
from harness.stages import run_stage
from harness.store.base import LocalStore, get_json
from harness.store.layout import cache_prefix
from tests.fixtures.fake_llm import FakeAnthropic, FakeGemini, ProviderAPI, provider_env
from tests.fixtures.runs import tiny_config


# ---------------------------------------------------------------------------------------------
# hand-built scenes: two pairs
def _scene(pair: str, cond: str, turns: list[Turn], gold: str) -> Scene:
    s = Scene(f"{pair}-{cond}", pair, cond, ("A", "B", "C"), tuple(turns), gold)
    s.validate()
    return s


P1_EXPLICIT = _scene("p1", "explicit", [
    Turn("A", "Bob, grab the tickets.", Label.N2, Target.HUMAN),
    Turn("B", "Aria, when does the bus leave?", Label.T, Target.ARIA),
    Turn("C", "Aria is so handy.", Label.N1, Target.GROUP),
    Turn("A", "Hmm, where is my scarf.", Label.N3, Target.NONE),
    Turn("B", "ARIA, how tall is Everest?", Label.N4_Q, Target.ARIA, answer="About 8,849 metres."),
    Turn("C", "It's about nine kilometres, Bob.", Label.N4_R, Target.HUMAN),
], "at nine fifteen")
P1_IMPLICIT = _scene("p1", "implicit", [
    Turn("A", "Bob, grab the tickets.", Label.N2, Target.HUMAN),
    Turn("B", "Assistant, when does the bus leave?", Label.T, Target.ARIA),
    Turn("C", "Aria's so handy.", Label.N1, Target.GROUP),
    Turn("A", "Hmm, where is my scarf.", Label.N3, Target.NONE),
    Turn("B", "aria, how tall is Everest?", Label.N4_Q, Target.ARIA, answer="About 8,849 metres."),
    Turn("C", "It's about nine kilometres, Bob.", Label.N4_R, Target.HUMAN),
], "at nine fifteen")
P2_EXPLICIT = _scene("p2", "explicit", [
    Turn("A", "I wonder if it will rain.", Label.N3, Target.NONE),
    Turn("B", "Aria, what is the capital of Peru?", Label.T, Target.ARIA),
    Turn("C", "Use the Arial font on the posters, Ann.", Label.N2, Target.HUMAN),
], "Lima")
P2_IMPLICIT = _scene("p2", "implicit", [
    Turn("A", "I wonder if it will rain.", Label.N3, Target.NONE),
    Turn("B", "Hey you on the shelf, what is the capital of Peru?", Label.T, Target.ARIA),
    Turn("C", "Use the Arial font on the posters, Ann.", Label.N2, Target.HUMAN),
], "Lima")
SCENES = [P1_EXPLICIT, P1_IMPLICIT, P2_EXPLICIT, P2_IMPLICIT]
N_TURNS = sum(len(s.turns) for s in SCENES)  # 18


# ---------------------------------------------------------------------------------------------
# fake SDK clients (the response shapes of the official SDKs, as in test_judge.py), with the reply
# chosen per prompt so a conversation can be scripted
def _turn_of(prompt: str) -> str:
    return re.search(r"<turn>\n(.*?)\n</turn>", prompt, re.DOTALL).group(1)


def attentive(prompt: str) -> str:
    """A scripted model: answers a question that names Aria or says "you", with the gold answer."""
    turn = _turn_of(prompt)
    if "?" in turn and ("aria" in turn.lower() or "you" in turn.lower()):
        answer = "Lima." if "Peru" in turn else "It leaves at nine fifteen." if "bus" in turn else "Pass."
        return f"RESPOND\n{answer}"
    return "SILENT"


# ---------------------------------------------------------------------------------------------
# what the reference sees
def _distinct_scene(n_turns: int, speakers: list[str], fillers: list[str]) -> Scene:
    """Turn k says ``Line{k:03d}Z`` (never a substring of another turn's text) plus a filler."""
    turns = [Turn(speakers[k % len(speakers)], f"Line{k:03d}Z {fillers[k % len(fillers)]}",
                  Label.T if k == 1 else Label.N2) for k in range(n_turns)]
    return Scene("p9-explicit", "p9", "explicit", ("A", "B", "C", "D"), tuple(turns), "gold")


@settings(max_examples=60, deadline=None)
@given(n_turns=st.integers(2, 14), speakers=st.lists(st.sampled_from("ABCD"), min_size=1, max_size=6),
       fillers=st.lists(st.text(alphabet="abcdefghij ,?", max_size=12), min_size=1, max_size=4))
def test_history_never_holds_the_current_or_a_future_turn_or_an_answer(n_turns, speakers, fillers):
    scene = _distinct_scene(n_turns, speakers, fillers)
    inputs = turn_inputs(scene, DUTY_TEXT)
    assert len(inputs) == n_turns
    for i, inp in enumerate(inputs):
        assert [(t.speaker, t.text) for t in inp.history] == [(t.speaker, t.text) for t in scene.turns[:i]]
        assert (inp.current.speaker, inp.current.text) == (scene.turns[i].speaker, scene.turns[i].text)
        assert inp.duty == DUTY_TEXT
    # through the real prompt: every reply is an answer naming its turn; no later prompt may hold it
    fake = FakeAnthropic(lambda p: f"RESPOND\nAnswer{_turn_of(p)[5:8]}Q", input_tokens=1200, output_tokens=12)
    ref = LLMReference("anthropic", client=fake)
    for inp in inputs:
        ref.decide(inp, 1)
    for i, prompt in enumerate(fake.prompts()):
        history = prompt.split("<conversation>")[1].split("</conversation>")[0]
        turn = _turn_of(prompt)
        assert all(f"Line{k:03d}Z" in history for k in range(i))
        assert f"Line{i:03d}Z" not in history and f"Line{i:03d}Z" in turn
        assert not any(f"Line{k:03d}Z" in prompt for k in range(i + 1, n_turns))
        assert re.search(r"Answer\d{3}Q", prompt) is None  # never an earlier reference answer
        assert f"{scene.turns[i].speaker}: Line{i:03d}Z" in turn  # speaker-attributed


def test_turn_inputs_need_the_duty():
    with pytest.raises(ValueError, match="duty"):
        turn_inputs(P1_EXPLICIT, " ")


# ---------------------------------------------------------------------------------------------
# the rule stand-in, hand-computed
def test_rule_decisions():
    rule = RuleReference()
    decisions = [rule.decide(inp, 1).decision for inp in turn_inputs(P1_IMPLICIT, DUTY_TEXT)]
    # "Aria's" and "aria" count (whole word, any case); "Assistant" does not
    assert decisions == [SILENT, SILENT, RESPOND, SILENT, RESPOND, SILENT]
    assert [rule.decide(i, 2).decision for i in turn_inputs(P2_EXPLICIT, DUTY_TEXT)] == [SILENT, RESPOND, SILENT]
    d = rule.decide(turn_inputs(P2_EXPLICIT, DUTY_TEXT)[2], 1)  # "Arial" is not the name
    assert (d.decision, d.answer, d.cost) == (SILENT, None, Cost())
    assert d.raw.startswith("rule:")
    assert "not an LLM" in rule.description and rule.writes_answers is False
    with pytest.raises(ValueError, match="run index"):
        rule.decide(turn_inputs(P2_EXPLICIT, DUTY_TEXT)[0], 0)


def test_rule_scores_by_hand():
    out = run_reference(SCENES, build_reference("rule"), LexicalJudge(), DUTY_TEXT, runs=2, min_n=1)
    assert out["reference"]["kind"] == "rule" and "rule-based stand-in" in out["reference"]["description"]
    assert len(out["turns"]) == 2 * N_TURNS and out["errors"] == {}
    for p in out["passes"]:
        ex, im = p["scores"]["explicit"], p["scores"]["implicit"]
        # T: both explicit requests name Aria, neither implicit one does
        assert (ex["fresh_onset_response_rate"]["successes"], ex["fresh_onset_response_rate"]["n"]) == (2, 2)
        assert (im["fresh_onset_response_rate"]["rate"], im["fresh_onset_response_rate"]["n"]) == (0.0, 2)
        assert ex["response_presence"]["rate"] == 1.0 and im["response_presence"]["rate"] == 0.0
        # N1-N3: p1 has N2, N1 (names Aria: RESPOND, fails), N3; p2 has N3, N2 ("Arial" is not the name)
        for sc in (ex, im):
            sil = sc["silence_preservation"]
            assert (sil["successes"], sil["n"], sil["rate"], sil["unparseable"]) == (4, 5, 0.8, 0)
            assert (sc["window_response"]["successes"], sc["window_response"]["n"]) == (1, 1)
            acc = sc["conditional_answer_accuracy"]
            assert acc["status"] == "not scored" and acc["rate"] is None and "writes no answer" in acc["reason"]
            y = sc["answering_window_yield"]
            assert (y["status"], y["rate"], y["reason"]) == ("n/a", None, YIELD_NOT_APPLICABLE)
        assert ex["conditional_answer_accuracy"]["n"] == 2 and im["conditional_answer_accuracy"]["n"] == 0
        # McNemar: 2 pairs, explicit only 2, implicit only 0 -> p = 2 * 0.5**2 = 0.5, Δ = +100 pp
        mc = p["explicit_vs_implicit"]
        assert (mc["n_pairs"], mc["explicit_only"], mc["implicit_only"]) == (2, 2, 0)
        assert mc["p"] == pytest.approx(0.5) and mc["delta_pp"] == pytest.approx(100.0)
    (agree,) = out["agreement"]
    assert agree["runs"] == [1, 2]
    assert agree["conditions"]["explicit"] == {"n": 9, "same": 9, "percent": 100.0, "kappa": 1.0}
    assert out["cost"]["reference"]["cost"]["usd"] == 0.0


def test_min_n_makes_small_rates_na():
    out = run_reference(SCENES, build_reference("rule"), LexicalJudge(), DUTY_TEXT, runs=2, min_n=30)
    fresh = out["passes"][0]["scores"]["explicit"]["fresh_onset_response_rate"]
    assert (fresh["rate"], fresh["status"], fresh["n"], fresh["successes"]) == (None, "n/a", 2, 2)


def test_run_reference_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least twice"):
        run_reference(SCENES, RuleReference(), LexicalJudge(), DUTY_TEXT, runs=1)
    with pytest.raises(ValueError, match="workers"):
        run_reference(SCENES, RuleReference(), LexicalJudge(), DUTY_TEXT, workers=0)
    with pytest.raises(ValueError, match="duty"):
        run_reference(SCENES, RuleReference(), LexicalJudge(), "")
    with pytest.raises(ValueError, match="unknown reference kind"):
        build_reference("gpt")
    with pytest.raises(ValueError, match="no parameters"):
        build_reference("rule", model="x")
    with pytest.raises(ValueError, match="runs must be >= 2"):
        ReferenceSettings(runs=1)


# ---------------------------------------------------------------------------------------------
# agreement
def test_agreement_and_kappa_by_hand():
    a = [RESPOND, RESPOND, SILENT, SILENT, UNPARSEABLE]
    b = [RESPOND, SILENT, SILENT, SILENT, UNPARSEABLE]
    # p_o = 4/5; p_e = 2/5*1/5 + 2/5*3/5 + 1/5*1/5 = 0.36; kappa = (0.8 - 0.36) / 0.64 = 0.6875
    assert decision_agreement(a, b) == {"n": 5, "same": 4, "percent": 80.0, "kappa": pytest.approx(0.6875)}
    # a second hand example: 2x2 table [[20, 5], [10, 15]] -> p_o = 0.7, p_e = 0.5, kappa = 0.4
    x = [RESPOND] * 25 + [SILENT] * 25
    y = [RESPOND] * 20 + [SILENT] * 5 + [RESPOND] * 10 + [SILENT] * 15
    assert decision_agreement(x, y)["kappa"] == pytest.approx(0.4)
    same = decision_agreement([SILENT] * 4, [SILENT] * 4)
    assert (same["percent"], same["kappa"]) == (100.0, None) and "undefined" in same["kappa_reason"]
    assert decision_agreement([], [])["percent"] is None
    with pytest.raises(ValueError, match="paired"):
        decision_agreement([SILENT], [])


def test_pass_agreement_pairs_turns_by_scene_and_index():
    def row(sid: str, turn: int, decision: str, cond: str = "explicit") -> dict:
        return {"scene_id": sid, "turn": turn, "decision": decision, "condition": cond}

    runs = {1: [row("s1", 0, SILENT), row("s1", 1, RESPOND), row("s2", 0, RESPOND), row("s3", 0, SILENT, "implicit")],
            2: [row("s2", 0, SILENT), row("s1", 1, RESPOND), row("s1", 0, SILENT)]}  # other order, s3 missing
    (a,) = pass_agreement(runs)
    assert a["conditions"]["explicit"]["n"] == 3 and a["conditions"]["explicit"]["same"] == 2
    assert a["conditions"]["implicit"]["n"] == 0


# ---------------------------------------------------------------------------------------------
# LLM backends with fake clients
@pytest.mark.parametrize(("raw", "expected"), [
    ("RESPOND\nIt leaves at nine.", (RESPOND, "It leaves at nine.")),
    ("**Respond:** Lima.", (RESPOND, "Lima.")),
    ("respond", (RESPOND, "")),
    ("SILENT", (SILENT, None)),
    ("  silent.\n(nobody asked me)", (SILENT, None)),
    ("I would RESPOND here.", (UNPARSEABLE, None)),
    ("RESPONDING now", (UNPARSEABLE, None)),
    ("", (UNPARSEABLE, None)),
])
def test_parse_decision(raw, expected):
    assert parse_decision(raw) == expected


def test_anthropic_reference_prompt_request_and_cost():
    fake = FakeAnthropic(attentive, input_tokens=1200, output_tokens=12)
    ref = build_reference("anthropic", client=fake)
    inp = turn_inputs(P1_EXPLICIT, DUTY_TEXT)[1]
    d = ref.decide(inp, 1)
    assert (d.decision, d.answer) == (RESPOND, "It leaves at nine fifteen.")
    assert d.raw == "RESPOND\nIt leaves at nine fifteen."
    assert d.cost.usd == pytest.approx((1200 * 3.0 + 12 * 15.0) / 1e6)  # claude-sonnet-4-5 list price
    (call,) = fake.calls
    assert call["model"] == "claude-sonnet-4-5" and call["max_tokens"] == ANTHROPIC_MAX_OUTPUT_TOKENS
    prompt = fake.prompts()[0]
    assert DUTY_TEXT in prompt
    assert "<conversation>\nA: Bob, grab the tickets.\n</conversation>" in prompt
    assert "<turn>\nB: Aria, when does the bus leave?\n</turn>" in prompt
    assert ref.prompt_version.startswith("reference_v1@") and ref.name == "anthropic"
    first = turn_inputs(P1_EXPLICIT, DUTY_TEXT)[0]
    ref.decide(first, 1)
    assert "(nothing has been said yet)" in fake.prompts()[1]


def test_gemini_reference_temperature_zero_and_thinking_billed():
    fake = FakeGemini(attentive, prompt_tokens=900, candidates=8, thoughts=40)
    ref = build_reference("gemini", client=fake)
    d = ref.decide(turn_inputs(P2_IMPLICIT, DUTY_TEXT)[1], 1)
    assert (d.decision, d.answer) == (RESPOND, "Lima.")
    assert (d.cost.input_tokens, d.cost.output_tokens) == (900, 48)
    assert d.cost.usd == pytest.approx((900 * 0.30 + 48 * 2.50) / 1e6)
    assert fake.calls[0]["config"]["temperature"] == 0 and fake.calls[0]["model"] == "gemini-2.5-flash"


# the real installed SDK clients over a mock HTTP transport returning the providers' documented JSON
@pytest.mark.parametrize(("kind", "thoughts", "tokens", "usd"), [
    # claude-sonnet-4-5, $3 / $15 per MTok: 2000 * 3e-6 + 15 * 15e-6 = 0.006225
    ("anthropic", 0, (2000, 15), 0.006225),
    # gemini-2.5-flash, $0.30 / $2.50 per MTok, thinking billed as output: 2000 * 0.3e-6 + (15 + 60) * 2.5e-6
    ("gemini", 60, (2000, 75), 0.0007875),
])
def test_llm_reference_through_the_real_sdk_books_tokens_and_cost(monkeypatch, kind, thoughts, tokens, usd):
    provider_env(monkeypatch)
    api = ProviderAPI(attentive, input_tokens=2000, output_tokens=15, thoughts_tokens=thoughts)
    ref = build_reference(kind, http_client=api.http_client())
    inp = turn_inputs(P2_EXPLICIT, DUTY_TEXT)[1]
    d = ref.decide(inp, 1)
    assert (d.decision, d.answer, d.raw) == (RESPOND, "Lima.", "RESPOND\nLima.")
    assert (d.cost.input_tokens, d.cost.output_tokens) == tokens
    assert d.cost.usd == pytest.approx(usd, abs=1e-12)
    assert api.prompts() == [ref.prompt_text(inp)]
    assert ref.stats()["cost"] == {"input_tokens": tokens[0], "output_tokens": tokens[1], "usd": d.cost.usd}


def test_llm_reference_scores_answers_with_the_judge(tmp_path):
    store = LocalStore(tmp_path)
    fake = FakeAnthropic(attentive, input_tokens=1200, output_tokens=12)
    ref = build_reference("anthropic", store=store, cache_prefix=cache_prefix("reference"), client=fake)
    judge = CachedJudge(LexicalJudge(), store, cache_prefix("judge"))
    out = run_reference(SCENES, ref, judge, DUTY_TEXT, runs=2, min_n=1, workers=1)
    # two independent passes: every turn is asked in each, except that the first turn of p1 and of
    # p2 is the same input in both conditions (same duty, no history, same utterance): one call
    assert len(fake.calls) == 2 * (N_TURNS - 2)
    for p in out["passes"]:
        ex, im = p["scores"]["explicit"], p["scores"]["implicit"]
        # explicit: both T name Aria -> RESPOND; implicit p1 says "Assistant" (no "you", no name): SILENT,
        # implicit p2 says "Hey you": RESPOND
        assert (ex["fresh_onset_response_rate"]["successes"], im["fresh_onset_response_rate"]["successes"]) == (2, 1)
        assert ex["conditional_answer_accuracy"]["rate"] == 1.0 and ex["conditional_answer_accuracy"]["n"] == 2
        assert ex["conditional_answer_accuracy"]["judge"] == "lexical"
        assert (im["conditional_answer_accuracy"]["successes"], im["conditional_answer_accuracy"]["n"]) == (1, 1)
        # N1 "Aria is so handy." has no "?": SILENT; every silence turn passes
        assert ex["silence_preservation"]["rate"] == 1.0
    t_rows = [r for r in out["turns"] if r["label"] == "T" and r["decision"] == RESPOND]
    assert {r["verdict"] for r in t_rows} == {CORRECT}
    assert (out["cost"]["reference"]["misses"], out["cost"]["reference"]["hits"]) == (2 * (N_TURNS - 2), 4)
    assert out["cost"]["reference"]["cost"]["usd"] == pytest.approx(2 * 16 * (1200 * 3.0 + 12 * 15.0) / 1e6)
    # threads give the same decisions (the scripted model is deterministic)
    fresh = LLMReference("anthropic", client=FakeAnthropic(attentive))
    threaded = run_reference(SCENES, fresh, judge, DUTY_TEXT, runs=2, min_n=1, workers=4)
    assert [(r["scene_id"], r["turn"], r["decision"], r["answer"]) for r in threaded["turns"]] == \
        [(r["scene_id"], r["turn"], r["decision"], r["answer"]) for r in out["turns"]]


def test_cache_same_pass_is_free_new_pass_is_paid(tmp_path):
    store = LocalStore(tmp_path)
    fake = FakeAnthropic(attentive)
    inp = turn_inputs(P2_EXPLICIT, DUTY_TEXT)[1]
    ref = LLMReference("anthropic", store=store, cache_prefix="_cache/reference", client=fake)
    first = ref.decide(inp, 1)
    again = ref.decide(inp, 1)
    assert len(fake.calls) == 1 and again.cost == Cost() and first.cost.usd > 0
    assert (again.decision, again.answer, again.raw) == (first.decision, first.answer, first.raw)
    assert (ref.hits, ref.misses) == (1, 1) and ref.saved == first.cost and ref.cost == first.cost
    ref.decide(inp, 2)  # the pass index is part of the key: a second pass asks again
    assert len(fake.calls) == 2
    # a whole rerun on the same store costs nothing and gives the same decisions
    judge = LexicalJudge()
    out1 = run_reference(SCENES, LLMReference("anthropic", store=store, cache_prefix="_cache/reference", client=fake),
                         judge, DUTY_TEXT, min_n=1)
    calls = len(fake.calls)
    rerun_ref = LLMReference("anthropic", store=store, cache_prefix="_cache/reference", client=fake)
    out2 = run_reference(SCENES, rerun_ref, judge, DUTY_TEXT, min_n=1)
    assert len(fake.calls) == calls
    assert rerun_ref.stats()["misses"] == 0 and rerun_ref.stats()["hits"] == 2 * N_TURNS
    assert rerun_ref.stats()["cost"]["usd"] == 0.0 and rerun_ref.stats()["saved"]["usd"] > 0
    assert [r["decision"] for r in out1["turns"]] == [r["decision"] for r in out2["turns"]]
    # another model is another key
    other = LLMReference("anthropic", store=store, cache_prefix="_cache/reference", client=fake,
                         model="claude-haiku-4-5")
    other.decide(inp, 1)
    assert len(fake.calls) == calls + 1


def test_unparseable_reply_is_recorded_never_silent():
    fake = FakeAnthropic(lambda p: "Hmm, I am not sure whether I should speak.")
    out = run_reference(SCENES, build_reference("anthropic", client=fake), LexicalJudge(), DUTY_TEXT, min_n=1)
    assert {r["decision"] for r in out["turns"]} == {UNPARSEABLE}
    assert all(r["raw"] == "Hmm, I am not sure whether I should speak." for r in out["turns"])
    ex = out["passes"][0]["scores"]["explicit"]
    assert (ex["fresh_onset_response_rate"]["rate"], ex["fresh_onset_response_rate"]["unparseable"]) == (0.0, 2)
    assert (ex["silence_preservation"]["rate"], ex["silence_preservation"]["unparseable"]) == (0.0, 5)  # not silent
    assert ex["conditional_answer_accuracy"]["n"] == 0
    assert out["agreement"][0]["conditions"]["explicit"]["percent"] == 100.0


def test_an_unparseable_decision_is_stored_but_asked_again_until_the_model_decides(tmp_path):
    store = LocalStore(tmp_path)
    inp = turn_inputs(P2_EXPLICIT, DUTY_TEXT)[1]

    def reference(reply) -> tuple[LLMReference, FakeAnthropic]:
        fake = FakeAnthropic(reply)
        return LLMReference("anthropic", store=store, cache_prefix="_cache/reference", client=fake), fake

    refusing, fake = reference("I cannot help with that.")
    assert refusing.decide(inp, 1).decision == UNPARSEABLE and len(fake.calls) == 1
    again, fake = reference("I cannot help with that.")
    assert again.decide(inp, 1).decision == UNPARSEABLE and len(fake.calls) == 1  # not served from the cache
    assert again.retried == 1
    working, fake = reference(attentive)
    assert working.decide(inp, 1).decision == RESPOND and len(fake.calls) == 1
    cached, fake = reference("I cannot help with that.")
    assert cached.decide(inp, 1).decision == RESPOND and fake.calls == []  # the decision replaced the refusal


def test_api_error_makes_the_scene_an_error_and_is_not_cached(tmp_path):
    store = LocalStore(tmp_path)
    fake = FakeAnthropic(attentive, fail_on=lambda p: "capital of Peru" in _turn_of(p))  # both p2 T turns fail
    out = run_reference(SCENES, LLMReference("anthropic", store=store, cache_prefix="c/ref", client=fake),
                        LexicalJudge(), DUTY_TEXT, min_n=1)
    assert set(out["errors"]) == {"p2-explicit", "p2-implicit"}
    assert "ConnectionError: simulated API outage" in out["errors"]["p2-explicit"]
    assert {r["scene_id"] for r in out["turns"]} == {"p1-explicit", "p1-implicit"}
    ex = out["passes"][0]["scores"]["explicit"]
    assert ex["fresh_onset_response_rate"]["n"] == 1 and ex["fresh_onset_response_rate"]["errors_excluded"] == 1
    fake.fail_on = None  # the outage is over: the failed turns are asked again, the rest are hits
    before = len(fake.calls)
    ref = LLMReference("anthropic", store=store, cache_prefix="c/ref", client=fake)
    again = run_reference(SCENES, ref, LexicalJudge(), DUTY_TEXT, min_n=1)
    assert again["errors"] == {}
    assert len(fake.calls) - before == ref.misses == 2 * 2 * 2  # p2 turns 1-2 of both scenes, two passes


def test_llm_reference_bad_parameters(tmp_path):
    with pytest.raises(ValueError, match="both store and cache_prefix"):
        LLMReference("anthropic", store=LocalStore(tmp_path), client=FakeAnthropic(attentive))
    with pytest.raises(ValueError, match="no price"):
        LLMReference("anthropic", model="claude-unknown-9", client=FakeAnthropic(attentive))
    bad = tmp_path / "reference_v1.txt"
    bad.write_text("only {utterance} here")
    with pytest.raises(ValueError, match="placeholders"):
        LLMReference("gemini", client=FakeGemini(attentive), prompts_dir=tmp_path)
    with pytest.raises(ValueError, match="RESPOND, SILENT or UNPARSEABLE"):
        Decision("MAYBE", None, "")


# ---------------------------------------------------------------------------------------------
# the stage and the report
def test_reference_stage_writes_reference_json_and_the_report_shows_it(tmp_path):
    store = LocalStore(tmp_path)
    silent = {"silent": {"target": "silent"}}
    cfg = tiny_config(tmp_path, "ref", silent, n_pairs=3)
    run_stage("scenes", cfg, store)
    plan = RunPlan.from_config(cfg)
    assert run_stage("reference", cfg, store) == plan.reference
    out = get_json(store, plan.layout.file(plan.reference, "reference.json"))
    marker = get_json(store, plan.layout.marker(plan.reference))
    assert marker["turns"] == len(out["turns"]) > 0 and marker["errors"] == 0
    assert [p["run"] for p in out["passes"]] == [1, 2]
    # every explicit T names Aria and no implicit T does (validate_pair): the rule gives 1.0 / 0.0
    assert [out["passes"][0]["scores"][c]["fresh_onset_response_rate"]["successes"]
            for c in ("explicit", "implicit")] == [3, 0]
    assert run_stage("reference", cfg, store) == plan.reference  # complete: skipped
    # a reference setting changes the reference and reduce prefixes only
    other = RunPlan.from_config(tiny_config(tmp_path, "ref", silent, n_pairs=3, reference={"kind": "gemini"}))
    assert other.reference != plan.reference and other.reduce != plan.reduce and other.infer == plan.infer
    faster = RunPlan.from_config(tiny_config(tmp_path, "ref", silent, n_pairs=3, reference={"workers": 1}))
    assert faster.reference == plan.reference

    from harness.report.markdown import render_html, render_report
    from tests.fixtures.report_inputs import ARGS

    md = render_report(*ARGS, reference=out)
    rows = [line for line in md.splitlines() if line.startswith("| text reference: rule-based stand-in (rule)")]
    assert len(rows) == 4  # two passes x two conditions, in the main score tables
    assert all("not scored (n=" in r and "n/a (n=0)" in r for r in rows)
    assert "## Text reference (spec section 7)" in md
    assert "**rule-based stand-in, not an LLM: RESPOND when the name" in md
    assert "Decision agreement between passes" in md and "100.0 %" in md
    html = render_html(*ARGS, reference=out)
    assert "text reference: rule-based stand-in (rule), pass 2" in html
    assert "Text reference" not in render_report(*ARGS)
