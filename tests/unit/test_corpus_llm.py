"""LLM script backend (issue 10, section 3): the official SDK path through a fake client, the
content-hash cache, counted and budgeted cost, and the shared validator (rejected scripts are
regenerated or reported, never kept)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.scenes.generator import generate_pairs
from harness.scenes.llm import REWRITE_NOTE, LLMScriptWriter, build_pair, layout_of
from harness.scenes.schema import SceneError, validate_scenes
from harness.scoring.cache import ContentCache
from harness.scoring.judge.llm import AnthropicJudge
from harness.store.base import LocalStore
from tests.fixtures.fake_llm import FakeAnthropic, provider_env
from tests.fixtures.scripts import script


@pytest.fixture
def env(monkeypatch):
    provider_env(monkeypatch)


def _writer(reply, tmp_path=None, **kw) -> tuple[LLMScriptWriter, FakeAnthropic]:
    fake = FakeAnthropic(reply=reply, input_tokens=2000, output_tokens=800)
    backend = AnthropicJudge(client=fake, max_output_tokens=4000)
    cache = ContentCache(LocalStore(tmp_path), "cache/scripts") if tmp_path is not None else None
    return LLMScriptWriter(backend, cache, **kw), fake


def test_scripts_follow_the_layout_and_pass_the_validator(env, tmp_path):
    writer, fake = _writer(script, tmp_path)
    out = writer.write_corpus(6, seed=3)
    assert out.rejected == {} and len(out.scenes) == 12 and len(fake.calls) == 6
    valid, invalid = validate_scenes(out.scenes, strict=True)
    assert invalid == {} and valid == out.scenes
    templates = generate_pairs(6, 3, 0.25, 0.484, "paper")
    for got, tmpl in zip(out.scenes, templates, strict=True):  # the accounting is the template's
        shape = [(t.speaker, t.label, t.target) for t in got.turns]
        assert shape == [(t.speaker, t.label, t.target) for t in tmpl.turns]
        assert got.t_position == tmpl.t_position and got.speaker_names == tmpl.speaker_names
    assert "Aria" in fake.prompt(0) and "<layout>" in fake.prompt(0)
    # cost counted from the usage fields at the model's list price (claude-sonnet-4-5: $3 / $15 per Mtok)
    assert writer.cost.usd == pytest.approx(6 * (2000 * 3 + 800 * 15) / 1e6)


def test_cache_makes_a_rerun_free(env, tmp_path):
    first, _ = _writer(script, tmp_path)
    first.write_corpus(4, seed=1)
    again, fake = _writer(script, tmp_path)
    out = again.write_corpus(4, seed=1)
    assert len(out.scenes) == 8 and fake.calls == [] and again.cost.usd == 0.0
    assert again.saved.usd == pytest.approx(first.cost.usd)


def test_rejected_script_is_regenerated(env, tmp_path):
    """The first reply names Aria in the implicit T; the second attempt is a new cache key."""
    replies = iter([lambda p: script(p, "Aria, when is the dentist now?"), script])
    writer, fake = _writer(lambda p: next(replies)(p), tmp_path)
    out = writer.write_corpus(1, seed=2)
    assert out.rejected == {} and out.attempts == {"p00000": 2} and len(fake.calls) == 2


@pytest.mark.parametrize("bad, rule", [
    (lambda p: script(p, "You were listening. When is the dentist now?", tied=False), "implicit_generic_cue"),
    (lambda p: script(p, "Okay, when is the dentist now?", tied=False), "implicit_no_context"),
    (lambda p: script(p).replace("Thursday at three.", "soon."), "support"),
    (lambda p: script(p).replace("Come on, jar", "Aria, come on, jar"), "label"),
    (lambda p: "I cannot help with that.", "no JSON"),
])
def test_scripts_that_keep_failing_are_reported_never_kept(env, bad, rule):
    writer, fake = _writer(bad, max_attempts=2)
    out = writer.write_corpus(2, seed=4)
    assert out.scenes == [] and set(out.rejected) == {"p00000", "p00001"} and len(fake.calls) == 4
    assert all(rule in why for why in out.rejected.values()), out.rejected


def test_budget_stops_calls_and_reports_the_rest(env):
    writer, fake = _writer(script, budget_usd=0.03)  # one call costs $0.018
    out = writer.write_corpus(5, seed=5)
    assert len(fake.calls) == 2 and len(out.scenes) == 4
    assert [p for p, why in out.rejected.items() if why == "budget"] == ["p00002", "p00003", "p00004"]


def test_only_t_and_a_rewrite_may_differ(env):
    explicit, implicit = generate_pairs(1, 0, 0.0, 0.0, "paper")
    prompt = _writer(script)[0].prompt_text(explicit, implicit)
    d = json.loads(re.search(r"\{.*\}", script(prompt), re.S).group(0))
    d["turns"][0]["implicit_text"] = "Something else entirely."
    with pytest.raises(SceneError, match=r"\[rule layout\]"):
        build_pair(json.dumps(d), explicit, implicit)
    assert sum(bool(r.get("rewrite")) for r in layout_of(explicit, implicit)) <= 1


def test_make_corpus_with_an_llm_backend(env, tmp_path):
    from harness.scenes.corpus import build

    fake = FakeAnthropic(reply=script, input_tokens=2000, output_tokens=800)
    path = build(5, __import__("pathlib").Path("conf/scenes/paper.yaml"), None, tmp_path / "llm",
                 AnthropicJudge(client=fake, max_output_tokens=4000), budget_usd=0.05)
    stats = json.loads(path.read_text())
    assert stats["source"]["llm"]["calls"] == 3 and stats["n_pairs"] == 3 and stats["invalid_scenes"] == 0
    rejected = json.loads((tmp_path / "llm" / "llm_rejected.json").read_text())  # both versions of each pair, with why
    assert sorted(rejected) == [f"p0000{i}-{c}" for i in (3, 4) for c in ("explicit", "implicit")]
    assert all("scenes.llm.budget_usd=$0.05 was spent" in why for why in rejected.values())
    assert list(tmp_path.glob("_cache/scripts/*/*.json"))  # the replies, cached beside the corpus folder


def test_the_default_prompt_teaches_contextual_cues_and_v1_replies_are_not_reused(env, tmp_path):
    writer, fake = _writer(script, tmp_path)
    assert writer.prompt.version.startswith("scene_script_v2@")
    out = writer.write_corpus(3, seed=1)
    assert out.rejected == {} and len(fake.calls) == 3
    prompt = fake.prompt(0)
    assert "a job given to Aria earlier" in prompt and "No surface tells" in prompt
    assert 'speaker turns to it by role ("assistant")' not in prompt  # v1's cue
    # the scripts pass the strict validator without a role noun in any implicit T
    implicit = [s for s in out.scenes if s.condition == "implicit"]
    assert not any(re.search(r"\b(assistant|speaker|device)\b", s.turns[s.t_index].text, re.I) for s in implicit)
    v1, fake_v1 = _writer(script, tmp_path, prompt="scene_script_v1.txt")  # kept for reproducing v1 corpora
    assert v1.prompt.version.startswith("scene_script_v1@") and "v1" not in REWRITE_NOTE
    v1.write_corpus(3, seed=1)
    assert len(fake_v1.calls) == 3  # its cache keys carry the prompt version: v2's replies are not served


def test_a_rewritten_relay_may_call_the_device_what_people_call_it(env):
    pairs = generate_pairs(300, 1, 0.25, 0.484, "paper")
    explicit, implicit = next((e, i) for e, i in zip(pairs[::2], pairs[1::2], strict=True)
                              if any(r.get("rewrite") for r in layout_of(e, i)))
    writer = _writer(script)[0]
    e, i = build_pair(script(writer.prompt_text(explicit, implicit), "When is it now?"), explicit, implicit)
    t = i.t_index
    assert "the speaker" in i.turns[t - 1].text and "Aria" in e.turns[t - 1].text


def test_the_paper_profiles_edited_pairs_are_scripted_on_their_layouts(env):
    """The paper's N4 edits (unequal turn counts: an N4 event in one version only, schema.extra_event;
    and the relay rewritten as an N2 "I don't know"): the model writes every turn once, the event's two
    turns marked ``only`` and the relay's implicit label given, and each version gets exactly its
    template's speakers, labels and targets (so an LLM corpus keeps the paper's per-condition counts)."""
    import yaml

    from harness.scenes.generator import generate_pairs
    from harness.scenes.llm import layout_of

    c = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf" / "scenes" / "paper.yaml").read_text())
    s = generate_pairs(2000, c["seed"], c["four_party_share"], c["n4_share"], "paper")
    pairs = list(zip(s[::2], s[1::2], strict=True))
    unequal = [(e, i) for e, i in pairs if len(e.turns) != len(i.turns)]
    relabelled = [(e, i) for e, i in pairs if len(e.turns) == len(i.turns)
                  and [t.label for t in e.turns] != [t.label for t in i.turns]]
    assert len(unequal) == 16 and {len(e.turns) > len(i.turns) for e, i in unequal} == {True, False}
    assert len(relabelled) == 2
    writer, fake = _writer(script)
    for e, i in unequal + relabelled:
        rows = layout_of(e, i)
        assert len(rows) == max(len(e.turns), len(i.turns))
        only = [r for r in rows if "only" in r]
        if (e, i) in unequal:
            assert [r["label"] for r in only] == ["N4_Q", "N4_R"] and only[1]["turn"] == only[0]["turn"] + 1
            assert {r["only"] for r in only} == {(e if len(e.turns) > len(i.turns) else i).condition}
        else:
            assert not only and [r.get("implicit_label") for r in rows if r.get("rewrite")] == ["N2"]
        pair, error, _ = writer.write_pair(e, i)
        assert pair is not None, error
        for got, tmpl in zip(pair, (e, i), strict=True):
            assert [(t.speaker, t.label, t.target) for t in got.turns] == \
                [(t.speaker, t.label, t.target) for t in tmpl.turns]
    prompts = [fake.prompt(k) for k in range(len(fake.calls))]
    assert any("said in that version only" in p for p in prompts)
    assert any("says the speaker does not know" in p for p in prompts)
