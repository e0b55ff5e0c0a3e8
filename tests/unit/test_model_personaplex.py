"""The personaplex adapter against a stand-in of NVIDIA/personaplex (tests/fixtures/standins/personaplex),
streamed through the real runner: rates and shapes, the prompt phase (duty text as the text
prompt, the voice prompt), the upstream quirks it handles, the conversations it fails alone and
why, and teacher forcing (Duplex Cue) through upstream's ``LMGen.step(input_tokens, moshi_tokens,
text_token)``. The checks every adapter shares (no stack on import, params, output contract, alone
equals after a refill, RowError isolation) are in tests/contract/.

The tiny real architecture is exercised by ``make model-smoke MODEL=personaplex`` (docs/models.md)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from harness.models.base import StreamContext
from harness.models.personaplex import PersonaPlexModel
from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.vad.settings import VadSettings
from tests.fixtures.tiny import noise_conversation
from tests.fixtures.tiny.personaplex import DUTY, VOICE_FRAMES, text_tokens, upstream, weights
from tests.fixtures.tiny.personaplex import tokenizer as make_tokenizer

SR, FRAME = 24_000, 1_920


@pytest.fixture
def moshi(monkeypatch):
    """The stand-in importable as ``moshi`` for one test (:func:`tests.fixtures.tiny.personaplex.upstream`)."""
    with upstream(monkeypatch):
        yield


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("spm"))


def _model(snapshot: Path, **params) -> PersonaPlexModel:
    # no preset: the text prompt is the duty text alone (the preset: tests/unit/test_protocol_prompts.py)
    m = build_model("personaplex", {"weights_path": str(snapshot), "revision": "abc123", "text_prompt": "", **params})
    m.load("cpu")
    return m


def _conv(sid: str, seed: int, duty: str = DUTY) -> ConversationInput:
    return noise_conversation(sid, seed, clip_s=0.2, duty=duty)


def _run(model, convs):
    protocol = ProtocolSettings(tail_s=0.5, room_tone="zeros", endpoint_silence_s=0.3, response_cap_s=0.5,
                                fresh_onset_window_s=0.5, n4_answer_window_s=0.5, duty_as_text=True)
    return run_conversations(model, convs, protocol, VadSettings())


def test_streams_through_the_runner_and_each_stream_starts_afresh(moshi, tmp_path, tokenizer):
    """One Mimi frame in and out per step at 24 kHz; every stream is reset, reseeded and
    prompted again: the seed matters. The stand-in's Mimi overshoots full scale: the adapter
    clips, else the runner would fail the stream."""
    folder = weights(tmp_path / "w", tokenizer)
    m = _model(folder)
    info = m.info
    assert (info.input_rate, info.output_rate, info.frame_in, info.frame_out, info.max_batch) == (SR, SR, FRAME,
                                                                                                   FRAME, 1)
    assert info.capabilities == {"text_prompt", "audio_prompt", "teacher_forcing"}
    assert info.weights.startswith(f"{folder} ")  # what was read (a folder here), then the decoding settings
    a, b = _conv("a", 0), _conv("b", 1)
    res = _run(m, [a, b])
    assert [r.status for r in res] == ["ok", "ok"], [r.reason for r in res]
    for r in res:
        assert len(r.output) == max(p.end for p in r.placements) + SR // 2
        assert np.abs(r.output).max() == pytest.approx(1.0, abs=1e-4)  # clipped, not failed
    reseeded = _run(m, [_conv("b", 2)])[0]
    assert not np.array_equal(reseeded.output[:FRAME * 5], res[1].output[:FRAME * 5])


def test_the_prompt_phase_feeds_voice_then_duty_text_and_resets_mimi_before_the_stream(moshi, tmp_path, tokenizer):
    """Per stream, as offline.py/server.py do: Mimi and LMGen reset, the voice prompt (one step
    per frame), 6 silent steps (0.5 s at 12.5 Hz), the duty text as ``<system> ... <system>``
    tokens, 6 silent steps, Mimi reset; then steps return tokens from the first frame on."""
    m = _model(weights(tmp_path / "w", tokenizer), temp_audio=0.6, topk_text=7)
    gen, mimi = m._lm_gen, m._mimi
    assert (gen._sample_rate, gen._frame_rate, gen.audio_silence_frame_cnt) == (SR, 12.5, 6)
    assert (gen.temp, gen.top_k_text, gen.use_sampling, m._lm_gen.lm_model.dtype) == (0.6, 7, True, torch.bfloat16)
    gen.events.clear()
    mimi.events.clear()
    res = _run(m, [_conv("a", 0)])
    assert res[0].status == "ok", res[0].reason
    assert gen.prompts == [{"voice": VOICE_FRAMES, "silence": 12, "text": text_tokens(tokenizer, DUTY)}]
    assert gen.events[0] == "reset" and set(gen.events[1:]) == {"step"}
    assert mimi.events[:2] == ["reset", "reset"] and mimi.events[2:4] == ["encode", "decode"]
    assert mimi.events.count("decode") == gen.events.count("step") == -(-len(res[0].output) // FRAME)


def test_a_wav_voice_prompt_is_encoded_by_the_same_mimi_which_is_then_reset(moshi, tmp_path, tokenizer):
    w = weights(tmp_path / "w", tokenizer)
    soundfile.write(w / "voices" / "mine.wav", np.full(FRAME * 3 + 5, 0.1, np.float32), SR)
    m = _model(w, voice_prompt="mine.wav")
    m._mimi.events.clear()
    res = _run(m, [_conv("a", 0)])
    assert res[0].status == "ok", res[0].reason
    assert m._lm_gen.prompts[0]["voice"] == 4  # 3 frames and 5 samples, padded
    assert m._mimi.events[:6] == ["reset", "encode", "encode", "encode", "encode", "reset"]


def test_an_empty_duty_text_gives_no_text_steps(moshi, tmp_path, tokenizer):
    """Upstream sets the text prompt to None when it is empty, and its prompt phase then
    iterates over None (TypeError); the adapter feeds no text tokens instead."""
    m = _model(weights(tmp_path / "w", tokenizer))
    res = _run(m, [_conv("a", 0, duty="  ")])
    assert res[0].status == "ok", res[0].reason
    assert m._lm_gen.prompts == [{"voice": VOICE_FRAMES, "silence": 12, "text": []}]


def test_steps_that_return_none_are_silence(moshi, tmp_path, tokenizer):
    """LMGen.step gives None while its offset is within the delays; with delays longer than the
    prompt phase (the stand-in's setting) the first frames of the stream are silence and the
    stream still has its full length."""
    prompt = VOICE_FRAMES + 12 + len(text_tokens(tokenizer, DUTY))
    silent = 5
    m = _model(weights(tmp_path / "w", tokenizer, delays=[0] * 16 + [prompt + silent - 1]))
    res = _run(m, [_conv("a", 0)])
    assert res[0].status == "ok", res[0].reason
    out = res[0].output
    assert len(out) == max(p.end for p in res[0].placements) + SR // 2
    assert not out[:silent * FRAME].any() and out[silent * FRAME:(silent + 1) * FRAME].any()


def test_a_prompt_longer_than_the_context_fails_that_conversation_alone(moshi, tmp_path, tokenizer):
    context = VOICE_FRAMES + 12 + len(text_tokens(tokenizer, DUTY))  # DUTY just fits
    m = _model(weights(tmp_path / "w", tokenizer, context=context))
    long_duty = DUTY + " Be brief."
    n = VOICE_FRAMES + 12 + len(text_tokens(tokenizer, long_duty))
    res = _run(m, [_conv("a", 0), _conv("b", 1, duty=long_duty), _conv("c", 2)])
    assert [r.status for r in res] == ["ok", "error", "ok"]
    assert res[1].reason == (
        "model personaplex open of b-explicit in row 0: the prompt phase "
        f"({n} steps: voice prompt, silences and {n - VOICE_FRAMES - 12} text tokens) exceeds the LM's "
        f"{context}-step context, so the model would forget the start of its prompt before the conversation begins")


def test_the_voice_comes_out_of_voices_tgz_when_there_is_no_voices_folder(moshi, tmp_path, tokenizer):
    m = _model(weights(tmp_path / "w", tokenizer, voices="tgz"))
    assert len(m._lm_gen.voice_prompt_embeddings) == VOICE_FRAMES


def test_missing_weights_and_voices_are_clear_errors(moshi, tmp_path, tokenizer):
    w = weights(tmp_path / "w", tokenizer, voices="none")
    with pytest.raises(FileNotFoundError, match=r"weights folder .* lacks voices/NATF2.pt \| voices.tgz: give a "
                                                r"folder laid out as the model's repository is"):
        _model(w)
    weights(w, tokenizer, voices="tgz")
    (w / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks model.safetensors: "):
        _model(w)
    weights(w, tokenizer, voices="none")
    with tarfile.open(w / "voices.tgz", "w:gz"):  # an archive without the voice asked for
        pass
    with pytest.raises(FileNotFoundError, match=r"voice prompt 'NATF2.pt' is neither in .*voices nor in "
                                                r".*voices.tgz \(released voices: NATF0-3"):
        _model(w)


def _forced_run(m, mask: list[bool], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Open a stream and step it with ``mask`` (``step_forced`` where any step is forced, as the
    Duplex Cue runner does): ``(heard, forced, outputs)``, each ``float32[steps, FRAME]``."""
    rng = np.random.default_rng(seed)
    heard, forced = (rng.standard_normal((2, len(mask), 1, FRAME)) * rng.uniform(0.01, 0.5, (2, len(mask), 1, 1)))
    heard, forced = heard.astype(np.float32), forced.astype(np.float32)
    m.open(0, StreamContext("cue", 7, DUTY, _conv("cue", 0).scene))
    out = [m.step_forced(h, f, np.array([k])) for h, f, k in zip(heard, forced, mask, strict=True)]
    return heard[:, 0], forced[:, 0], np.concatenate(out)


def test_teacher_forcing_gives_upstream_the_forced_audios_codes_on_exactly_the_forced_steps(moshi, tmp_path,
                                                                                            tokenizer):
    """The forced frames reach ``LMGen.step`` as ``moshi_tokens`` on the masked steps and never
    on the others, encoded by a Mimi of their own (advanced only on forced steps, reset with the
    stream: a second stream forced alike gets the same codes), with the model's own text
    (``text_token`` None), or the text padding token with ``forced_text="pad"``; the agent's
    frame comes back one step later (upstream's lag); no mask set is ``step``."""
    from moshi.models.loaders import get_mimi

    w = weights(tmp_path / "w", tokenizer)
    m = _model(w)
    gen = m._lm_gen
    m._mimi.events.clear()
    decoded, decode = [], m._mimi.decode
    m._mimi.decode = lambda codes: decoded.append(codes.clone()) or decode(codes)
    mask = [True, True, False, True, False, False]
    _, forced, out = _forced_run(m, mask)
    given = gen.forced[-len(mask):]
    assert [g is not None for g in given] == mask
    assert gen.forced_text[-len(mask):] == [None] * len(mask)
    fresh = get_mimi(w / "tokenizer-e351c8d8-checkpoint125.safetensors")
    fresh.streaming_forever(1)
    expected = [fresh.encode(torch.from_numpy(f)[None, None]) for f, k in zip(forced, mask, strict=True) if k]
    assert all(torch.equal(g, e) for g, e in zip([g for g in given if g is not None], expected, strict=True))
    assert m._mimi.events.count("encode") == len(mask)  # what the model hears: its own Mimi, every step
    assert m._forced_mimi.events.count("encode") == sum(mask)
    # the agent's frame written at a forced step is what the next step decodes
    assert [torch.equal(decoded[n + 1], e) for n, e in zip(np.flatnonzero(mask), expected, strict=True)] == [True] * 3
    assert np.abs(out).max() > 0

    _forced_run(m, mask)  # the same stream again: the forced Mimi starts afresh
    assert all(torch.equal(a, b) for a, b in zip(gen.forced[-len(mask):], given, strict=True) if a is not None)

    padded = _model(weights(tmp_path / "p", tokenizer), forced_text="pad")
    _forced_run(padded, mask)
    assert padded._lm_gen.forced_text[-len(mask):] == [3 if k else None for k in mask]

    heard, _, unforced = _forced_run(m, [False] * 4, seed=1)
    m.open(0, StreamContext("cue", 7, DUTY, _conv("cue", 0).scene))
    np.testing.assert_array_equal(unforced, np.concatenate([m.step(h[None]) for h in heard]))


def test_bad_forcing_input_is_refused(moshi, tmp_path, tokenizer):
    m = _model(weights(tmp_path / "w", tokenizer))
    frame = np.zeros((1, FRAME), np.float32)
    with pytest.raises(ValueError, match=r"personaplex steps float32\[1, 1920\], got \(2, 1920\)"):
        m.step_forced(frame, np.zeros((2, FRAME), np.float32), np.array([True]))
    with pytest.raises(ValueError, match=r"mask bool\[1\], got int64\[1\]"):
        m.step_forced(frame, frame, np.array([1]))


@pytest.mark.parametrize(("params", "message"), [
    ({"weights_path": "w", "voice_prompt": "NATF2.mp3"}, "voice_prompt must be a .pt"),
    ({"weights_path": "w", "dtype": "int8"}, "dtype must be bfloat16, float16 or float32"),
    ({"weights_path": "w", "forced_text": "silence"}, "forced_text must be one of"),
])
def test_bad_settings_are_refused_at_construction(params, message):
    with pytest.raises(ValueError, match=message):
        PersonaPlexModel(**params)
