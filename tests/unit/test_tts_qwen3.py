"""Qwen3-TTS backend against the ``qwen_tts`` API (a fake module; weights never downloaded)."""

from __future__ import annotations

import inspect
import sys
import types

import numpy as np
import pytest

from harness.audio.tts.espeak import SynthesisError
from harness.audio.tts.qwen3 import VOICES, Qwen3Settings, Qwen3TTS

API = ("text", "language", "speaker", "instruct")  # Qwen3TTSModel.generate_custom_voice keywords


class FakeModel:
    """Answers like ``Qwen3TTSModel.generate_custom_voice``: ``(list of float arrays, sample rate)``."""

    def __init__(self, sr: int = 24_000, silent: bool = False):
        self.sr, self.silent, self.calls = sr, silent, []

    def generate_custom_voice(self, text, language, speaker, instruct=None, **kwargs):
        self.calls.append({"text": text, "language": language, "speaker": speaker, "instruct": instruct, **kwargs})
        texts = text if isinstance(text, list) else [text]
        tone = np.sin(np.arange(self.sr // 2) / 5.0).astype(np.float32) * 0.3 * (not self.silent)
        return [np.concatenate([np.zeros(self.sr // 10, np.float32), tone[: 1000 * len(t)],
                                np.zeros(self.sr // 10, np.float32)]) for t in texts], self.sr


def test_batch_call_matches_the_api_and_trims():
    fake = FakeModel()
    tts = Qwen3TTS(model=fake)
    out = tts.synthesize_batch(["Hi there.", "Hello."], [VOICES["A"], VOICES["B"]])
    assert fake.calls == [{"text": ["Hi there.", "Hello."], "language": ["English", "English"],
                           "speaker": ["ryan", "aiden"], "instruct": None}]
    assert set(fake.calls[0]) - {"instruct"} <= set(API)
    assert [x.dtype for x in out] == [np.float32] * 2
    assert abs(len(out[0]) - (9000 + 2 * 240)) < 10  # 0.1 s of digital silence trimmed at each end, 10 ms kept
    assert VOICES == {"A": "ryan", "B": "aiden", "C": "eric", "D": "dylan"}


def test_resamples_and_keys_clips_by_content():
    tts = Qwen3TTS(sample_rate=16_000, model=FakeModel(sr=24_000))
    x = tts.synthesize("Hello there.", "eric")
    assert abs(len(x) - (12_000 + 480) * 2 / 3) < 10
    assert tts.clip_id("eric", "a") != tts.clip_id("dylan", "a")
    assert tts.clip_id("eric", "a") != Qwen3TTS(settings=Qwen3Settings(instruct="calm")).clip_id("eric", "a")


def test_failures_are_synthesis_errors():
    with pytest.raises(SynthesisError, match="silence"):
        Qwen3TTS(model=FakeModel(silent=True)).synthesize("Hello.", "ryan")
    with pytest.raises(SynthesisError, match="empty"):
        Qwen3TTS(model=FakeModel()).synthesize("  ", "ryan")


def test_load_reads_local_weights_only(monkeypatch):
    seen = {}

    class Qwen3TTSModel:
        @classmethod
        def from_pretrained(cls, path, **kwargs):
            seen.update(path=path, **kwargs)
            return FakeModel()

    monkeypatch.setitem(sys.modules, "qwen_tts", types.SimpleNamespace(Qwen3TTSModel=Qwen3TTSModel))
    tts = Qwen3TTS(weights="/models/qwen3-tts", device="cpu")
    assert len(tts.synthesize("Hi.", "ryan")) > 0
    assert seen["path"] == "/models/qwen3-tts" and seen["local_files_only"] is True and seen["device_map"] == "cpu"


def test_missing_package_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "qwen_tts", None)
    with pytest.raises(SynthesisError, match="qwen-tts"):
        Qwen3TTS().load()


def test_real_package_signature_when_installed():
    qwen_tts = pytest.importorskip("qwen_tts")
    params = inspect.signature(qwen_tts.Qwen3TTSModel.generate_custom_voice).parameters
    assert set(API) <= set(params)
