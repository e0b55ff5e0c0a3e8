"""A judge that answers without a label (issue 19 item 5; spec section 5; docs/judge.md).

An ``UNPARSEABLE`` verdict (a refusal, a reply cut off, prose) fails its item, is kept in the judge
cache for audit but never served from it, so the next scoring asks the judge again; the score
stage counts such verdicts per condition and window kind, reduce carries the counts to
``statistics.json`` and the report, and a run above ``metrics.max_unparseable_share`` says so at
exit. An empty transcript is none of this: ``EMPTY_TRANSCRIPT``, never sent, never unparseable.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.products.windows import (
    JUDGED_KINDS,
    ConversationWindows,
    Windows,
    judge_verdict_counts,
    unparseable_over,
    unparseable_warning,
)
from harness.runtime.config import ConfigError, RunConfig
from harness.runtime.infer_worker import InferWorker
from harness.runtime.plan import RunPlan
from harness.scoring.asr import Transcript
from harness.scoring.cache import CachedJudge, ContentCache, answer_inputs, window_inputs
from harness.scoring.judge import (
    CORRECT,
    EMPTY_TRANSCRIPT,
    SUBSTANTIVE_INTRUSION,
    UNPARSEABLE,
    ContextTurn,
    Cost,
)
from harness.scoring.judge.llm import AnthropicJudge
from harness.stages import run_stage
from harness.store.base import LocalStore, get_json
from jobs import _entry
from tests.fixtures.fake_llm import FakeAnthropic
from tests.fixtures.runs import planned, tiny_config

CONTEXT = [ContextTurn("A", "Okay, let's get dinner going."), ContextTurn("B", "The pan is really hot.")]
ANSWER = ("friday", "Thursday at three", "Aria, when is the meeting?")
WINDOW = ("you could turn it down", CONTEXT, 1.2, 0.4)


def working(prompt: str) -> str:
    """A judge that answers with a label of the prompt's own task."""
    return SUBSTANTIVE_INTRUSION if "BACKCHANNEL" in prompt else CORRECT


# -- the cache ------------------------------------------------------------------------------------

@pytest.mark.parametrize("reply", [
    "I'm sorry, but I can't help with evaluating this conversation.",  # a refusal
    "The response is",  # cut off by max_tokens before the label
    "",  # an empty reply
])
def test_an_unparseable_verdict_is_kept_for_audit_but_the_next_lookup_asks_again(tmp_path, reply):
    store = LocalStore(tmp_path)
    refusing = FakeAnthropic(reply, input_tokens=300, output_tokens=12)
    first = CachedJudge(AnthropicJudge(client=refusing), store, "judge")
    a, w = first.judge_answer(*ANSWER), first.classify_window(*WINDOW)
    assert (a.label, a.passed, w.label, w.passed) == (UNPARSEABLE, False, UNPARSEABLE, False)
    assert (first.misses, first.hits, first.retried) == (2, 0, 0) and a.cost.input_tokens == 300
    # kept, with the reply verbatim, for audit
    assert first.stored_verdict("answer", answer_inputs(*ANSWER)) == a
    assert first.stored_verdict("window", window_inputs(*WINDOW)) == w

    # a later run whose judge still refuses pays again; the first stored reply stays
    again = FakeAnthropic(reply + " (again)")
    second = CachedJudge(AnthropicJudge(client=again), store, "judge")
    assert second.judge_answer(*ANSWER).raw == reply + " (again)"
    assert (len(again.calls), second.misses, second.hits, second.retried) == (1, 1, 0, 1)
    assert second.stored_verdict("answer", answer_inputs(*ANSWER)).raw == reply

    # a later run with a working judge: asked again for both, the verdicts with labels replace the entries
    fixed = FakeAnthropic(working, input_tokens=500, output_tokens=3)
    third = CachedJudge(AnthropicJudge(client=fixed), store, "judge")
    a3, w3 = third.judge_answer(*ANSWER), third.classify_window(*WINDOW)
    assert (a3.label, w3.label) == (CORRECT, SUBSTANTIVE_INTRUSION)
    assert (len(fixed.calls), third.misses, third.retried, third.hits) == (2, 2, 2, 0)
    assert third.cost == Cost(1000, 6, third.cost.usd) and third.cost.usd > 0  # what the retries really cost
    assert third.stats()["retried"] == 2
    assert third.stored_verdict("answer", answer_inputs(*ANSWER)) == a3

    # and from then on the cache serves them: no call
    fourth = CachedJudge(AnthropicJudge(client=FakeAnthropic("never asked")), store, "judge")
    assert fourth.judge_answer(*ANSWER).label == CORRECT
    assert fourth.classify_window(*WINDOW).label == SUBSTANTIVE_INTRUSION
    assert (fourth.judge.client.calls, fourth.hits, fourth.misses) == ([], 2, 0)
    assert fourth.saved == a3.cost + w3.cost


def test_a_value_the_reuse_test_refuses_is_a_miss_and_never_replaces_an_entry(tmp_path):
    store = LocalStore(tmp_path)
    cache = ContentCache(store, "c")
    good = {"ok": True}

    def reuse(v):
        return v["ok"]

    assert cache.get_or_compute({"k": 1}, lambda: {"ok": False, "n": 1}, reuse) == {"ok": False, "n": 1}
    assert cache.get({"k": 1}) == {"ok": False, "n": 1}  # stored: the first one, for audit
    # refused again: computed again, returned, but the entry keeps the first value
    assert cache.get_or_compute({"k": 1}, lambda: {"ok": False, "n": 2}, reuse) == {"ok": False, "n": 2}
    assert cache.get({"k": 1}) == {"ok": False, "n": 1}
    assert (cache.hits, cache.misses, cache.rejected) == (0, 2, 1)

    # a result another worker stored meanwhile is not overwritten by a refused one
    def meanwhile():
        cache.put({"k": 1}, good, overwrite=True)
        return {"ok": False, "n": 3}

    cache.get_or_compute({"k": 1}, meanwhile, reuse)
    assert cache.get({"k": 1}) == good
    assert cache.get_or_compute({"k": 1}, lambda: pytest.fail("a hit computes nothing"), reuse) == good
    # an accepted value replaces a refused entry; without a reuse test every stored value is served
    cache.put({"k": 2}, {"ok": False}, overwrite=True)
    assert cache.get_or_compute({"k": 2}, lambda: good, reuse) == good and cache.get({"k": 2}) == good
    cache.put({"k": 3}, {"ok": False})
    assert cache.get_or_compute({"k": 3}, lambda: pytest.fail("served")) == {"ok": False}


# -- counting -------------------------------------------------------------------------------------

def _row(kind: str, label: str, condition: str, verdict: str | None) -> dict:
    return {"kind": kind, "label": label, "condition": condition, "verdict": verdict}


def test_verdicts_are_counted_per_condition_and_window_kind_and_empty_transcripts_are_not_unparseable():
    rows = [_row("T", "T", "explicit", UNPARSEABLE), _row("T", "T", "explicit", CORRECT),
            _row("T", "T", "explicit", EMPTY_TRANSCRIPT), _row("T", "T", "explicit", None),  # no speech
            _row("silence", "N2", "implicit", UNPARSEABLE), _row("silence", "N2", "implicit", EMPTY_TRANSCRIPT),
            _row("silence", "N3", "implicit", SUBSTANTIVE_INTRUSION), _row("silence", "N1", "explicit", None),
            {"kind": "N4", "label": "N4_Q", "condition": "explicit"}]  # acoustic only: never judged
    counts = judge_verdict_counts(rows)
    assert set(counts) == {"explicit", "implicit"} and all(set(c) == set(JUDGED_KINDS) for c in counts.values())
    assert counts["explicit"]["T"] == {"items": 3, "empty_transcript": 1, "judged": 2, "unparseable": 1}
    assert counts["implicit"]["N2"] == {"items": 2, "empty_transcript": 1, "judged": 1, "unparseable": 1}
    assert counts["implicit"]["N3"] == {"items": 1, "empty_transcript": 0, "judged": 1, "unparseable": 0}
    assert counts["explicit"]["N1"] == counts["implicit"]["T"] == dict.fromkeys(
        ("items", "empty_transcript", "judged", "unparseable"), 0)
    # the product counts its ok conversations only
    w = Windows({"a": ConversationWindows("ok", tuple(rows)), "b": ConversationWindows("error", reason="x")})
    assert w.judge_verdicts() == counts


def test_cells_above_the_share_are_named_with_their_share():
    cell = {"items": 0, "empty_transcript": 0}
    counts = {"m1": {"explicit": {"T": {**cell, "judged": 50, "unparseable": 1},  # 2 %: not more than 2 %
                                  "N2": {**cell, "judged": 20, "unparseable": 3}},  # 15 %
                     "implicit": {"N1": {**cell, "judged": 0, "unparseable": 0}}},  # nothing judged: no share
              "m2": {"implicit": {"T": {**cell, "judged": 40, "unparseable": 3}}}}
    over = unparseable_over(counts, 0.02)
    assert [(c["model"], c["condition"], c["kind"]) for c in over] == [("m1", "explicit", "N2"),
                                                                      ("m2", "implicit", "T")]
    assert over[0] == {"model": "m1", "condition": "explicit", "kind": "N2", "unparseable": 3, "judged": 20,
                       "share": 0.15, "max_share": 0.02}
    assert unparseable_warning(over[1]) == ("model m2, implicit, T answers: 3 of 40 judged verdicts UNPARSEABLE "
                                            "(7.5 % > metrics.max_unparseable_share 2.0 %)")
    assert unparseable_over(counts, 0.0)[0]["kind"] == "T"  # 0: any unparseable verdict is flagged
    assert unparseable_over(counts, 1.0) == []


@pytest.mark.parametrize("share", [-0.1, 1.5, "a lot", True])
def test_the_share_must_be_a_share(share):
    with pytest.raises(ConfigError, match=r"metrics\.max_unparseable_share must be a share in"):
        RunConfig.from_dict({"model": {"silent": {"target": "silent"}}, "metrics": {"max_unparseable_share": share}})


# -- the stages: score counts, reduce carries, the report shows, the run says so at exit ----------

class HearsWords:
    """An ASR that hears the same words in every window with 100 ms of speech or more."""

    name, version = "hears-words", "1"

    def transcribe(self, audio: np.ndarray, sample_rate: int, vocabulary=()) -> Transcript:
        return Transcript("well it is on thursday i think" if len(audio) >= sample_rate // 10 else "")


def test_a_refusing_judge_is_counted_reported_and_asked_again_for_those_items_alone(tmp_path, monkeypatch, capsys):
    judges: list[AnthropicJudge] = []

    def use(reply):
        def build(kind, **params):
            judges.append(AnthropicJudge(client=FakeAnthropic(reply)))
            return judges[-1]
        monkeypatch.setattr("harness.scoring.judge.build_judge", build)

    monkeypatch.setattr("harness.scoring.asr.build_asr", lambda kind, **params: HearsWords())
    cfg = tiny_config(tmp_path, "refusal", score={"actors": 0})  # babble: speech in every window
    store, plan, ids = planned(cfg)
    InferWorker(cfg, cfg.models[0], store).run("shard-00000", ids)
    for stage in ("vad", "reference"):
        run_stage(stage, cfg, store)

    # the judge refuses every answer (T) and labels every silence window
    use(lambda prompt: working(prompt) if "BACKCHANNEL" in prompt else "I cannot assess this answer.")
    run_stage("score", cfg, store)
    run_stage("reduce", cfg, store)
    marker = get_json(store, plan.layout.marker(plan.score["babble"]))
    counts = marker["judge_verdicts"]
    t = {c: counts[c]["T"] for c in counts}
    assert all(v["judged"] == v["unparseable"] == 1 for v in t.values())  # one T per conversation, refused
    windows = sum(counts[c][k]["judged"] for c in counts for k in ("N1", "N2", "N3"))
    assert windows > 0 and all(counts[c][k]["unparseable"] == 0 for c in counts for k in ("N1", "N2", "N3"))
    # windows with the same inputs share one verdict (a hit); the refused answers have inputs of their own
    assert (marker["judge_misses"] + marker["judge_hits"], marker["judge_retried"]) == (2 + windows, 0)
    stats = get_json(store, plan.layout.file(plan.reduce, "statistics.json"))
    assert stats["judge_verdicts"]["models"]["babble"] == counts and "judge_verdicts" not in stats["scoring_cost"]
    assert [(c["condition"], c["kind"], c["share"]) for c in stats["judge_verdicts"]["over"]] == [
        ("explicit", "T", 1.0), ("implicit", "T", 1.0)]
    errors = get_json(store, plan.layout.file(plan.reduce, "errors.json"))
    assert errors["unparseable_judge_verdicts"] == stats["judge_verdicts"]["over"]
    report = store.get(plan.layout.file(plan.reduce, "report.md")).decode()
    assert "**Unparseable judge verdicts** above `metrics.max_unparseable_share` (2.0 %)" in report
    assert "model babble, explicit, T answers: 1 of 1 judged verdicts UNPARSEABLE (100.0 % > " in report
    assert "| babble | explicit | 1/1 (100.0 %) over |" in report

    _entry.finish(cfg, store)  # a warning, not another exit status
    out = capsys.readouterr().out
    assert "warning: the judge named no single label for too many items" in out
    assert "  model babble, implicit, T answers: 1 of 1 judged verdicts UNPARSEABLE (100.0 % > " in out
    markers = [plan.layout.marker(plan.score["babble"]), plan.layout.marker(plan.reduce)]
    assert out.rstrip().endswith(", ".join(markers))

    # the documented retry: remove those markers, run again with a judge that works
    for key in markers:
        (store.root / key).unlink()
    use(working)
    run_stage("score", cfg, store)
    run_stage("reduce", cfg, store)
    assert len(judges[-1].client.calls) == 2  # the two refused answers alone; every window verdict is a hit
    again = get_json(store, plan.layout.marker(plan.score["babble"]))
    assert (again["judge_misses"], again["judge_retried"], again["judge_hits"]) == (2, 2, windows)
    assert judges[-1].client.calls and all("BACKCHANNEL" not in p for p in judges[-1].client.prompts())
    assert all(again["judge_verdicts"][c]["T"] == {**t[c], "unparseable": 0} for c in t)
    assert get_json(store, plan.layout.file(plan.reduce, "errors.json"))["unparseable_judge_verdicts"] == []
    rows = json.loads(store.get(plan.layout.file(plan.score["babble"], "windows.json")))["conversations"]
    assert {r["verdict"] for c in rows.values() for r in c["windows"] if r["kind"] == "T"} == {CORRECT}
    _entry.finish(cfg, store)
    assert "warning" not in capsys.readouterr().out


def test_the_share_is_a_reduce_setting_not_a_scoring_one(tmp_path):
    """Changing it re-runs reduce alone: the score prefixes (and the cached verdicts' keys) stay."""
    base = tiny_config(tmp_path)
    strict = tiny_config(tmp_path, metrics={"max_unparseable_share": 0.0})
    a, b = RunPlan.from_config(base), RunPlan.from_config(strict)
    assert a.score == b.score and a.reference == b.reference and a.reduce != b.reduce
    assert base.metrics.max_unparseable_share == 0.02
