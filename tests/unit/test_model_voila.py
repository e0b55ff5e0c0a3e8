"""The voila adapter against a stand-in of maitrix-org/Voila (tests/fixtures/standins/voila), through
the real runner: the prompt (duty text, voice), text steps that consume no input, the voila head,
the cap on text steps, per-stream RNG (the stream's seed, not the global RNG), and row errors. The
checks every adapter shares (no stack on import, params, output contract, alone equals after a
refill, RowError isolation) are in tests/contract/.
The real upstream code runs in ``make model-smoke MODEL=voila`` (docs/models.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.models.voila import VoilaModel
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings
from tests.fixtures.tiny.voila import VOICE, upstream
from tests.fixtures.tiny.voila import model as _model

SR = 24_000
PROTOCOL = ProtocolSettings(turn_gap_s=0.2, fresh_onset_window_s=1.0, tail_s=0.5, duty_as_text=True)
SYSTEM = "<SYSTEM><stream_chat><chat_audio_output><au_chat_ref_start><au_chat_ref><au_chat_ref_end>"


@pytest.fixture
def standin(monkeypatch):
    """The stand-in's flat modules on sys.path for this test only; the real ones (if any) restored after."""
    with upstream(monkeypatch):
        yield


@pytest.fixture(scope="module")
def scene() -> Scene:
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    return Scene("v0-explicit", "v0", "explicit", ("A", "B", "C"), turns, "yes")


def _conv(scene: Scene, seed: int = 0, duty: str = "Answer only when addressed.") -> ConversationInput:
    rng = np.random.default_rng(seed)
    clips = [(rng.standard_normal(round(0.3 * SR)) * 0.01).astype(np.float32) for _ in scene.turns]
    return ConversationInput(scene, clips, np.zeros(0, np.float32), seed, duty)


def _run(model, convs):
    # 0.3 s turns 0.2 s apart, a 1 s window after T, 0.5 s tail: about 2.8 s (70 steps of 40 ms)
    return run_conversations(model, convs, PROTOCOL, VadSettings())


def _audio(tokens: torch.Tensor) -> torch.Tensor:
    """Which sequence positions are audio frames (the agent channel holds audio codes)."""
    from transformers import AUDIO_BASE

    return tokens[:, 4] >= AUDIO_BASE


def test_one_frame_each_way_per_step_and_text_steps_consume_no_input(standin, tmp_path, scene):
    from transformers import AUDIO_BASE, SPECIALS, TEXT_BASE, AutoTokenizer

    m = _model(tmp_path, dict(speak_at=5, burst=2, eos_after=3))
    assert (m.info.input_rate, m.info.frame_in, m.info.output_rate, m.info.frame_out, m.info.max_batch) == \
        (16_000, 640, 16_000, 640, 1)
    assert m.llm.loaded_with == {"torch_dtype": torch.float32, "attn_implementation": "sdpa", "use_cache": True}
    steps = []
    step = m.step
    m.step = lambda x: steps.append(x.shape) or step(x)
    (res,) = _run(m, [_conv(scene, duty="Be brief.")])
    assert res.status == "ok", res.reason
    assert set(steps) == {(1, 640)}
    rows = m.llm.caches[0].rows  # every token row the stream appended: [L, 8]

    # the prompt: system text with the duty instruction, then <|HUMAN|>, on all 8 columns; the voice once
    prompt = AutoTokenizer.from_pretrained(".").encode(SYSTEM + "Be brief.</SYSTEM><|HUMAN|>",
                                                       add_special_tokens=False)
    p = len(prompt)
    assert rows[:p, 0].tolist() == prompt and bool((rows[:p] == rows[:p, :1]).all())
    assert len(m.llm.refs) == 1 and m.llm.refs[0].tolist() == VOICE

    body = rows[p:]
    audio = _audio(body)
    # one audio frame per step: each step consumed exactly one input frame (encoded once) and said one
    assert int(audio.sum()) == len(steps) == len(m.codec.calls)
    # the codec window: left context grows to codec_context_frames (3) frames, then slides
    assert m.codec.calls[:5] == [640, 1280, 1920, 2560, 2560]
    # text steps consume no input: the user channel repeats the agent's token on all 8 columns
    text = body[~audio]
    assert len(text) > 0 and bool((text == text[:, :1]).all())
    # audio steps: user codes then agent codes, codebook c of each at min_audio_id + c * codebook_size
    codebook = (body[audio] - AUDIO_BASE) // 16
    assert codebook.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]] * int(audio.sum())

    # the voila head: <|VOILA|> right after audio frame 5, two text tokens, 3 audio frames, eos, and
    # (the head still says "speak", the agent no longer speaks) <|VOILA|> again
    agent = body[:, 4].tolist()
    voila, eos, k = SPECIALS.index("<|VOILA|>"), SPECIALS.index("</s>"), TEXT_BASE + ord("k")
    first = agent.index(voila)
    assert int(audio[:first].sum()) == 5
    a = AUDIO_BASE
    assert [t if t < a else "au" for t in agent[first:first + 8]] == [voila, k, k, "au", "au", "au", eos, voila]


def test_text_steps_are_capped_by_max_text_steps(standin, tmp_path, scene):
    m = _model(tmp_path, dict(text_forever=True), max_text_steps=3)
    (res,) = _run(m, [_conv(scene)])
    assert res.status == "ok", res.reason
    rows = m.llm.caches[0].rows
    p = rows.shape[0] - int(_audio(rows).sum()) * 4  # 3 text rows before each audio row after the prompt
    audio = _audio(rows[p:]).tolist()
    assert audio == [False, False, False, True] * (len(audio) // 4)


def test_output_follows_the_stream_seed_not_the_global_rng(standin, tmp_path, scene):
    """coin: text steps are drawn by the sampler (50/50) at every frame, so the output depends on the
    stream's RNG; the global RNG must not change it."""
    m = _model(tmp_path, dict(coin=0))
    torch.manual_seed(1)
    (alone,) = _run(m, [_conv(scene, 3)])
    torch.manual_seed(2)
    (again,) = _run(m, [_conv(scene, 3)])
    assert alone.status == again.status == "ok"
    np.testing.assert_array_equal(alone.output, again.output)
    assert m.llm.caches[0].rows.tolist() == m.llm.caches[1].rows.tolist()
    same = _conv(scene, 3)
    (other,) = _run(m, [ConversationInput(same.scene, same.turn_clips, same.preamble, 5, same.duty_text)])
    assert not np.array_equal(alone.output, other.output)


def test_row_errors_name_the_context_limit_and_non_finite_logits(standin, tmp_path, scene):
    m = _model(tmp_path, max_tokens=80)
    too_long, overflow = _run(m, [_conv(scene, duty="x" * 200), _conv(scene)])
    assert too_long.status == overflow.status == "error"
    assert too_long.reason.endswith("does not fit the 80-token context") and "prompt (" in too_long.reason
    assert "the sequence reached the 80-token context (max_tokens) after" in overflow.reason

    m = _model(tmp_path, dict(nan_at=7))
    (nan,) = _run(m, [_conv(scene)])
    assert nan.status == "error" and "the LLM's logits are not finite" in nan.reason
    assert "model voila step 6 at 0.24 s of stream" in nan.reason  # the 7th frame is appended at step 6
    m = _model(tmp_path, dict(nan_at=0))  # already in the prompt: the open fails that conversation
    (nan,) = _run(m, [_conv(scene)])
    assert nan.status == "error"
    assert nan.reason.startswith("model voila open of v0-explicit in row 0: the LLM's logits are not finite")


def test_duty_text_only_where_configured_and_bad_settings_fail_clearly(standin, tmp_path, scene):
    m = _model(tmp_path, voice=None)
    m.open(0, _stream_context(scene))  # no duty text (protocol.duty_as_text off): upstream's empty instruction
    rows = m.llm.caches[0].rows
    assert rows[:, 0].tolist() == m.tokenizer.encode(SYSTEM + "</SYSTEM><|HUMAN|>", add_special_tokens=False)
    assert m.llm.refs == []
    with pytest.raises(ValueError, match=r"voice 'Nobody' is not in .*; it has: Other, Samantha"):
        _model(tmp_path, voice="Nobody")
    with pytest.raises(ValueError, match="must be > 0"):
        VoilaModel(temperature=0)
    with pytest.raises(ValueError, match="top_k and audio_top_k must be >= 1"):
        VoilaModel(audio_top_k=0)


def _stream_context(scene: Scene):
    from harness.models.base import StreamContext

    return StreamContext(scene.scene_id, 0, "", scene)
