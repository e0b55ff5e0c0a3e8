"""The flm_audio adapter against a stand-in of cofe-ai/flm-audio (tests/fixtures/standins/flm_audio),
streamed through the real runner: rates and shapes, the upstream quirks it handles, each stream
starting afresh and following its seed, and the conversations it fails alone. The checks every
adapter shares (no stack on import, params, output contract, alone equals after a refill,
RowError isolation) are in tests/contract/.

The tiny real architecture is exercised by ``make model-smoke MODEL=flm_audio`` (docs/models.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.vad.settings import VadSettings
from tests.fixtures.tiny import noise_conversation
from tests.fixtures.tiny.flm_audio import AUD_PAD, TEXT_WAIT, upstream, weights

SR, FRAME = 24_000, 1_920


@pytest.fixture
def flmaudio(monkeypatch):
    """The stand-in importable as ``flmaudio`` for one test; its modules are gone afterwards."""
    with upstream(monkeypatch):
        yield


def _model(tmp_path: Path, **params):
    m = build_model("flm_audio", {"weights_path": str(tmp_path), **params})
    m.load("cpu")
    return m


def _conv(sid: str, seed: int) -> ConversationInput:
    return noise_conversation(sid, seed, clip_s=0.1, duty="")


def _run(model, convs):
    return run_conversations(model, convs, ProtocolSettings(tail_s=0.5, room_tone="zeros"), VadSettings())


def test_streams_through_the_runner_and_each_stream_starts_afresh(flmaudio, tmp_path):
    """One Mimi frame in and out per step, the first step (LMGen.step's None) silent; the arity
    bug and the CPU-hostile torch.compile of upstream LMGen would fail the first step. Every
    stream starts from the initial token (upstream's reset zeroes it) and is reseeded: the seed
    matters."""
    m = _model(weights(tmp_path), temp_audio=0.7)
    info = m.info
    assert (info.input_rate, info.output_rate, info.frame_in, info.frame_out, info.max_batch) == (SR, SR, FRAME,
                                                                                                   FRAME, 1)
    assert info.weights == str(tmp_path) and not info.capabilities and m.lm_gen.temp_audio == 0.7
    a, b = _conv("a", 0), _conv("b", 1)
    m.lm.calls.clear()
    res = _run(m, [a, b])
    assert [r.status for r in res] == ["ok", "ok"], [r.reason for r in res]
    for r in res:
        assert len(r.output) == max(p.end for p in r.placements) + SR // 2
        assert np.all(r.output[:FRAME] == 0)  # step 0: no tokens yet
        assert np.any(r.output[FRAME:2 * FRAME] != 0)  # step 1 decodes the first tokens
    # the LM's first input of each stream: text_wait, 8 x aud_pad spoken, the heard frame's first
    # code (listen channel 0 has no delay), 7 x aud_pad heard
    calls = [list(c[0].numpy()) for c in m.lm.calls]
    starts = [i for i, c in enumerate(calls) if c[:9] == [TEXT_WAIT] + [AUD_PAD] * 8]
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= len(res[0].output) // FRAME
    for i in starts:
        assert calls[i][10:] == [AUD_PAD] * 7 and calls[i][9] != AUD_PAD
    reseeded = _run(m, [ConversationInput(b.scene, b.turn_clips, b.preamble, 7)])[0]
    assert not np.array_equal(reseeded.output, res[1].output)


def test_an_audio_token_outside_mimi_fails_only_that_conversation(flmaudio, tmp_path):
    """The depth head can sample its pad id (2048), which Mimi cannot decode: that conversation
    is an error naming the token; the next one in the row streams normally."""
    m = _model(weights(tmp_path))
    m.lm.aud_output_layers.bias[AUD_PAD] = 1e6
    bad = _run(m, [_conv("a", 0)])[0]
    assert bad.status == "error" and bad.output is None
    assert bad.reason == ("model flm_audio step 1 at 0.08 s of stream: sampled audio token 2048 in codebook 0, "
                          "outside Mimi's 2048 codes")
    m.lm.aud_output_layers.bias[AUD_PAD] = 0.0
    assert _run(m, [_conv("a", 0)])[0].status == "ok"


@pytest.mark.parametrize("context, max_steps", [(20, None), (4096, 20)])
def test_a_stream_longer_than_the_context_fails_alone(flmaudio, tmp_path, context, max_steps):
    """The KV cache has no window: past max_position_embeddings steps (or max_steps when set)
    the stream is an error."""
    res = _run(_model(weights(tmp_path, context=context), max_steps=max_steps), [_conv("a", 0)])[0]
    assert res.status == "error"
    assert res.reason == ("model flm_audio step 20 at 1.60 s of stream: stream reached the model's context "
                          "of 20 steps (1.6 s; max_steps)")


@pytest.mark.parametrize("bad", [{"temp_audio": -0.1}, {"top_p_text": 1.5}, {"top_k_audio": 0}, {"top_k_text": 2.5},
                                 {"repetition_penalty_text": 0.9}, {"temp_text": "hot"}, {"dtype": "float16"},
                                 {"max_steps": 0}])
def test_bad_settings_are_refused_before_loading(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        build_model("flm_audio", bad)


def test_the_weights_label_names_the_revision_or_the_tiny_instance():
    assert build_model("flm_audio", {"revision": "abc"}).info.weights == "CofeAI/FLM-Audio@abc"
    assert build_model("flm_audio", {"tiny": True}).info.weights == "random:tiny"
