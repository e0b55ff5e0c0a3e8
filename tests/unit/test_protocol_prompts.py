"""What each model is told (docs/protocol-decisions.md, "What each model is told"; issue 21.6): the duty
text goes to a model as text only with ``protocol.duty_as_text`` and only when it declares
``text_prompt``; each adapter sends its upstream preset either way and the duty after it when given;
the model facts record preset, voice prompt and context; reduce flags the conversations longer than a
model's context and the report shows all of it. The adapters run against their stand-ins
(tests/fixtures/standins), streamed through the real runner."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.models.base import TEXT_PROMPT, VOCABULARY
from harness.models.minicpm_o import DEFAULT_SYSTEM_PROMPT
from harness.models.personaplex import ASSISTANT_PRESET
from harness.products.infer import ModelFacts
from harness.protocol.scheduler import ProtocolSettings
from harness.report.document import Document, to_markdown
from harness.report.markdown import _context_warning, _told_section
from harness.runtime.config import ConfigError
from harness.runtime.plan import RunPlan
from harness.runtime.runner import run_conversations
from harness.runtime.shard import model_facts
from harness.stages.reduce import context_overruns, model_prompts
from harness.vad.settings import VadSettings
from tests.fixtures.listener import Listener
from tests.fixtures.runs import tiny_config
from tests.fixtures.tiny import DUTY, PROTOCOL, noise_conversation

CONF = Path(__file__).resolve().parents[2] / "conf"
SR, FRAME = 24_000, 1_920


def _protocol(on: bool, base: ProtocolSettings = PROTOCOL) -> ProtocolSettings:
    return dataclasses.replace(base, duty_as_text=on)


@pytest.mark.parametrize("on", [False, True])
def test_the_duty_text_reaches_only_text_prompt_models_and_only_when_the_protocol_says_so(on):
    told = {}
    for caps in (frozenset(), frozenset({TEXT_PROMPT}), frozenset({VOCABULARY})):
        m = Listener(caps)
        (res,) = run_conversations(m, [noise_conversation("s0", 3)], _protocol(on), VadSettings())
        assert res.status == "ok", res.reason
        (told[caps],) = m.opened
    plain, texted, listening = told.values()
    assert plain.duty_text == "" and listening.duty_text == ""
    assert texted.duty_text == (DUTY if on else "")
    assert listening.vocabulary[-1] == DUTY  # it is said in the room either way: part of what a recogniser hears


def test_the_switch_is_one_protocol_setting_off_by_default_and_part_of_the_infer_hash(tmp_path):
    assert OmegaConf.load(CONF / "protocol" / "duplex_mpe.yaml").duty_as_text is False
    assert ProtocolSettings().duty_as_text is False
    off, on = (RunPlan.from_config(tiny_config(tmp_path, protocol={"duty_as_text": v})) for v in (False, True))
    assert off.synth == on.synth and off.infer["babble"] != on.infer["babble"]  # what a model is told: a new infer
    with pytest.raises(ConfigError, match="duty_as_text must be true or false, got 'yes'"):
        tiny_config(tmp_path, protocol={"duty_as_text": "yes"})


def test_each_adapter_declares_its_preset_voice_prompt_and_context_and_the_facts_record_them(tmp_path):
    models = {"moshi": {"target": "moshi"}, "flm_audio": {"target": "flm_audio"},
              "personaplex": {"target": "personaplex"},
              "minicpm_o": {"target": "minicpm_o", "params": {"weights_path": "openbmb/MiniCPM-o-4_5"}},
              "voila": {"target": "voila"}, "freeze_omni": {"target": "freeze_omni"},
              "tiny_moshi": {"target": "moshi", "params": {"tiny": True}}}
    cfg = tiny_config(tmp_path, models=models)
    facts = {m.name: model_facts(m) for m in cfg.models}  # unloaded: no stack is imported
    told = {n: (f.preset_text, f.voice_prompt, f.context_s) for n, f in facts.items()}
    assert told == {
        "moshi": ("", None, 240.0),  # 3,000 steps of 80 ms
        "flm_audio": ("", None, None),  # no window: a stream past max_position_embeddings is an error
        "personaplex": (ASSISTANT_PRESET, "NATF2.pt", 240.0),
        "minicpm_o": (DEFAULT_SYSTEM_PROMPT.replace("{duty_text}", "").strip(), "assets/ref_audio/ref_en_dlc_1.wav",
                      None),
        "voila": ("", "Samantha (examples/character_ref_emb_demo.pkl)", None),
        "freeze_omni": ("You are a helpful voice assistant.", None, None),
        "tiny_moshi": ("", None, 4.0)}  # the tiny LM's 50-step window
    assert ModelFacts.from_dict(facts["personaplex"].to_dict()) == facts["personaplex"]
    old = {k: v for k, v in facts["moshi"].to_dict().items() if k not in ("preset_text", "voice_prompt", "context_s")}
    assert ModelFacts.from_dict(old).context_s is None  # facts written before they were recorded: none declared


@pytest.mark.parametrize("on", [False, True])
def test_personaplex_sends_its_preset_and_the_duty_after_it_only_when_given(monkeypatch, tmp_path, on):
    from harness.models.registry import build_model
    from tests.fixtures.tiny import personaplex as pp

    with pp.upstream(monkeypatch):
        spm = pp.tokenizer(tmp_path)
        m = build_model("personaplex", {"weights_path": str(pp.weights(tmp_path / "w", spm)), "revision": "abc123"})
        m.load("cpu")
        (res,) = run_conversations(m, [noise_conversation("a", 0, duty=pp.DUTY)], _protocol(on), VadSettings())
    assert res.status == "ok", res.reason
    text = f"{ASSISTANT_PRESET} {pp.DUTY}" if on else ASSISTANT_PRESET
    assert m._lm_gen.prompts[-1]["text"] == pp.text_tokens(spm, text)


@pytest.mark.parametrize("on", [False, True])
def test_minicpm_o_sends_its_duplex_preset_and_the_duty_in_it_only_when_given(monkeypatch, tmp_path, on):
    from tests.fixtures.tiny import minicpm_o

    with minicpm_o.instance(tmp_path, monkeypatch) as tiny:
        (res,) = run_conversations(tiny.model, minicpm_o.conversations(1), _protocol(on, tiny.protocol),
                                   VadSettings())
    assert res.status == "ok", res.reason
    text = DEFAULT_SYSTEM_PROMPT.replace("{duty_text}", "Duty." if on else "").strip()
    assert tiny.model.duplex.prepared[-1]["prefix"] == f"<|im_start|>system\n{text}\n<|audio_start|>"


@pytest.mark.parametrize("on", [False, True])
def test_voila_puts_the_duty_in_its_instruction_only_when_given(monkeypatch, tmp_path, on):
    from tests.fixtures.tiny import voila

    with voila.instance(tmp_path, monkeypatch) as tiny:
        m = tiny.model
        (res,) = run_conversations(m, [noise_conversation("a", 0, clip_s=0.1)], _protocol(on), VadSettings())
        system = ("<SYSTEM><stream_chat><chat_audio_output><au_chat_ref_start><au_chat_ref><au_chat_ref_end>"
                  + (DUTY if on else "") + "</SYSTEM><|HUMAN|>")
        prompt = m.tokenizer.encode(system, add_special_tokens=False)
    assert res.status == "ok", res.reason
    assert m.llm.caches[-1].rows[:len(prompt), 0].tolist() == prompt


@pytest.mark.parametrize("on", [False, True])
def test_freeze_omni_sends_its_role_and_the_duty_after_it_only_when_given(monkeypatch, tmp_path, on):
    from tests.fixtures.tiny import freeze_omni

    with freeze_omni.instance(tmp_path, monkeypatch) as tiny:
        calls = sys.modules["models"].CALLS  # the stand-in's record of upstream calls (models.CALLS)
        (res,) = run_conversations(tiny.model, tiny.conversations[:1], _protocol(on, tiny.protocol), VadSettings())
        roles = list(calls["roles"])
    assert res.status == "ok", res.reason
    assert roles == ["You are a helpful voice assistant." + (f" {DUTY}" if on else "")]


def _facts(name: str, caps: tuple[str, ...], **kw) -> ModelFacts:
    return ModelFacts(name, name, SR, SR, FRAME, FRAME, 1, caps, **kw)


def test_reduce_counts_conversations_longer_than_a_models_context_and_the_report_says_what_each_was_told():
    facts = {"moshi": _facts("moshi", ("teacher_forcing",), context_s=240.0),
             "minicpm_o": _facts("minicpm_o", ("audio_prompt", "text_prompt"), preset_text="Be a helpful assistant.",
                                 voice_prompt="ref.wav"),
             "silent": _facts("silent", ())}
    produced = {"moshi": [{"scene_id": "a", "audio_s": 239.96}, {"scene_id": "c", "audio_s": 301.5},
                          {"scene_id": "b", "audio_s": 240.04}],
                "minicpm_o": [{"scene_id": "a", "audio_s": 400.0}], "silent": []}
    context = context_overruns(facts, produced)
    assert context == {"moshi": {"context_s": 240.0, "conversations": 3, "over": ["b", "c"], "longest_s": 301.5}}
    off, on = model_prompts(facts, False, 32.16), model_prompts(facts, True, 32.16)
    assert [p["duty_text"] for p in off["models"].values()] == [False, False, False]
    assert [p["duty_text"] for p in on["models"].values()] == [False, True, False]  # only a text_prompt model

    md = to_markdown(Document("r", _context_warning(context), [_told_section(off, context)]))
    assert "**Longer than the model's context:** `moshi` 2 of 3 (context 240 s)" in md
    assert "32.16 s as synthesised; the paper's: 31.9 s" in md and "`protocol.duty_as_text` is **false**" in md
    assert "| minicpm_o | no | Be a helpful assistant. | ref.wav |" in md and "| moshi | no | none | none |" in md
    assert "| moshi | 240 | 3 | **2**: `b`, `c` | 301.5 |" in md
    assert "| minicpm_o | yes | Be a helpful assistant. | ref.wav |" in to_markdown(
        Document("r", sections=[_told_section(on, {})]))
    assert _context_warning({"moshi": {**context["moshi"], "over": []}}) == []
