"""The minicpm_o adapter against a stand-in of upstream ``MiniCPMO45.modeling_minicpmo``
(tests/fixtures/standins/minicpm_o): units of one second, causal output through the queue,
the duty instruction and voice in ``prepare``, decoding settings per call. The checks every
adapter shares (no stack on import, params, output contract, alone equals after a refill) are in
tests/contract/. The real upstream code runs in ``make model-smoke MODEL=minicpm_o`` (docs/models.md)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from harness.models.base import RowError, StreamContext
from tests.fixtures.tiny.minicpm_o import upstream as standin
from tests.fixtures.tiny.minicpm_o import voice as reference_voice
from tests.fixtures.tiny.minicpm_o import weights

FRAME_IN, FRAME_OUT = 1600, 2400  # 100 ms at 16 kHz in, 24 kHz out


@pytest.fixture
def upstream(monkeypatch):
    """The stand-in importable as ``MiniCPMO45`` for one test; forgotten afterwards."""
    with standin(monkeypatch):
        yield


@pytest.fixture
def voice(tmp_path) -> Path:
    return reference_voice(tmp_path)


def _model(tmp_path, voice, **params):
    from harness.models.registry import build_model

    m = build_model("minicpm_o", {"weights_path": str(weights(tmp_path / "w")), "revision": "abc123",
                                  "ref_audio": voice and str(voice), **params})
    m.load("cpu")
    return m


def _ctx(seed: int = 0, duty: str = "Answer only when addressed.") -> StreamContext:
    return StreamContext("c0", seed, duty, None)


def _stream(m, audio: np.ndarray) -> np.ndarray:
    """Step ``audio`` (16 kHz, a whole number of frames) through row 0; the output at 24 kHz."""
    out = [m.step(f[None]) for f in audio.reshape(-1, FRAME_IN)]
    assert all(y.shape == (1, FRAME_OUT) and y.dtype == np.float32 for y in out)
    return np.concatenate(out, axis=1)[0]


def _loud(seconds: float) -> np.ndarray:
    return (0.1 * np.sin(np.arange(round(seconds * 16_000)) / 5)).astype(np.float32)


def test_speech_starts_on_the_first_frame_after_the_unit_that_caused_it(upstream, tmp_path, voice):
    m = _model(tmp_path, voice)
    m.open(0, _ctx())
    duplex = m.duplex
    y = _stream(m, np.concatenate([np.zeros(16_000, np.float32), _loud(1.0), np.zeros(32_000, np.float32)]))
    # unit 0 silent (listen), unit 1 loud: its speech is queued when unit 1 ends (2.0 s) and starts there
    assert not y[:48_000].any()
    assert duplex.spoken_units == 1 and np.abs(y[48_000:48_100]).max() > 0.01
    # all of the speech (1-1.5 s) is played at once, then silence: listening queues nothing
    assert len(np.trim_zeros(y[48_000:], "b")) == duplex.spoken_samples
    assert 24_000 <= duplex.spoken_samples <= 36_000 and m._queue.pending(0) == 0


def test_only_whole_units_reach_streaming_prefill(upstream, tmp_path, voice):
    """Upstream feeds <unit> into the cache before checking the audio: a refused call would corrupt it."""
    m = _model(tmp_path, voice)
    m.open(0, _ctx())
    _stream(m, _loud(3.5))
    assert (m.duplex.units_fed, m.duplex.refused, m.duplex.audio_chunk_idx) == (3, 0, 3)


def test_a_speech_surplus_waits_in_the_queue_and_is_never_dropped(upstream, tmp_path, voice):
    m = _model(tmp_path, voice)
    m.open(0, _ctx(seed=3))
    y = _stream(m, _loud(4.0))  # every unit speaks 1-1.5 s: the queue grows
    # units end at 1, 2, 3, 4 s: speech plays without a gap from 1 s, the rest waits in the queue
    assert not y[:24_000].any() and np.abs(y[24_000:]).reshape(-1, 240).max(axis=1).min() > 0.1
    assert m._queue.pending(0) == m.duplex.spoken_samples - 72_000 >= 24_000


def test_duty_text_voice_and_settings_reach_upstream(upstream, tmp_path, voice):
    m = _model(tmp_path, voice, temperature=0.3, top_k=5, top_p=0.5, decode_mode="greedy",
               max_new_speak_tokens_per_chunk=12, sliding_window_mode="basic", force_listen_count=2)
    d = m.duplex
    assert d.name_or_path == str(tmp_path / "w") and d.device == "cpu" and d.generate_audio
    assert d.kwargs["sliding_window_mode"] == "basic" and d.kwargs["force_listen_count"] == 2
    m.open(0, _ctx(duty="Only answer to Aria."))
    p = d.prepared[-1]
    assert p["prefix"].startswith("<|im_start|>system\n") and p["prefix"].endswith(
        "Only answer to Aria.\n<|audio_start|>")
    assert p["suffix"] == "<|audio_end|><|im_end|>" and p["prompt_wav_path"] == str(voice)
    assert len(p["ref_audio"]) == 8_000  # 0.5 s at 16 kHz
    _stream(m, _loud(1.0))
    assert d.generate_kwargs[-1] == dict(prompt_wav_path=str(voice), max_new_speak_tokens_per_chunk=12,
                                         decode_mode="greedy", temperature=0.3, top_k=5, top_p=0.5,
                                         listen_prob_scale=1.0, text_repetition_penalty=1.05,
                                         text_repetition_window_size=512)
    assert m.info.weights == str(tmp_path / "w")  # what was read: a folder (a repo id gives repo@<commit>)


def test_without_audio_generation_the_model_is_silent_and_needs_no_voice(upstream, tmp_path):
    m = _model(tmp_path, None, generate_audio=False)
    m.open(0, _ctx())
    assert _stream(m, _loud(2.0)).max() == 0.0
    assert m.duplex.spoken_units == 2 and m.duplex.prepared[-1]["ref_audio"] is None


def test_a_second_row_is_refused_naming_it(upstream, tmp_path, voice):
    m = _model(tmp_path, voice)
    with pytest.raises(RowError) as e:
        m.open(1, _ctx())
    assert e.value.reasons == {1: "minicpm_o runs one stream per instance (max_batch=1), asked for row 1"}
    assert m.info.max_batch == 1


@pytest.mark.parametrize(("params", "message"), [
    ({"ref_audio": "v.wav"}, "minicpm_o needs weights_path"),
    ({"weights_path": "w", "ref_audio": None}, "generate_audio needs ref_audio"),
    ({"weights_path": "w", "frame_ms": 300}, "frame_ms must divide 1000 ms"),
    ({"weights_path": "w", "system_prompt": "no duty"}, "system_prompt must contain {duty_text}"),
])
def test_bad_settings_are_refused_at_construction(params, message):
    from harness.models.minicpm_o import MiniCPMO

    with pytest.raises(ValueError, match=re.escape(message)):
        MiniCPMO(**params)


def test_missing_weights_or_code_say_what_is_missing(upstream, tmp_path, voice, monkeypatch):
    from harness.models.minicpm_o import MiniCPMO

    with pytest.raises(FileNotFoundError, match="is neither a directory nor a Hugging Face repo id"):
        MiniCPMO(weights_path=str(tmp_path / "absent"), ref_audio=str(voice)).load("cpu")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty cache
    commit = "ab" * 20
    with pytest.raises(FileNotFoundError, match=re.escape(f"openbmb/MiniCPM-o-4_5@{commit} (model.minicpm_o.params."
                                                          "weights_path) are not in the Hugging Face cache")):
        MiniCPMO(weights_path="openbmb/MiniCPM-o-4_5", revision=commit, ref_audio=str(voice)).load("cpu")
    with pytest.raises(FileNotFoundError, match=re.escape("has revision 'main', not a commit")):
        MiniCPMO(weights_path="openbmb/MiniCPM-o-4_5", revision="main", ref_audio=str(voice)).load("cpu")
    folder = weights(tmp_path / "w")
    monkeypatch.setenv("USE_FLAGOS", "1")
    with pytest.raises(RuntimeError, match="USE_FLAGOS=1 would replace transformers' RMSNorm"):
        MiniCPMO(weights_path=str(folder), ref_audio=str(voice)).load("cpu")
    monkeypatch.delenv("USE_FLAGOS")
    with pytest.raises(ImportError, match=re.escape("'NoSuchPackage' is not on sys.path")):
        MiniCPMO(weights_path=str(folder), ref_audio=str(voice), code_package="NoSuchPackage").load("cpu")
    (folder / "assets" / "token2wav" / "flow.pt").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape("lacks assets/token2wav/flow.pt")):
        MiniCPMO(weights_path=str(folder), ref_audio=str(voice)).load("cpu")
    MiniCPMO(weights_path=str(folder), generate_audio=False, ref_audio=None).load("cpu")  # no vocoder read
