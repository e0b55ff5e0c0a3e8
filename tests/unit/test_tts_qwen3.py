"""Qwen3-TTS backend against the ``qwen_tts`` API (a fake module; weights never downloaded)."""

from __future__ import annotations

import inspect
import sys
import types

import numpy as np
import pytest

from harness.audio.tts import SynthesisError, TtsUnavailableError
from harness.audio.tts.qwen3 import MODEL_ID, VOICES, Qwen3Settings, Qwen3TTS

API = ("text", "language", "speaker", "instruct")  # Qwen3TTSModel.generate_custom_voice keywords


class FakeModel:
    """Answers like ``Qwen3TTSModel.generate_custom_voice``: ``(list of float arrays, sample rate)``."""

    def __init__(self, sr: int = 24_000, silent: bool = False):
        self.sr, self.silent, self.calls = sr, silent, []

    def generate_custom_voice(self, text, language, speaker, instruct=None, **kwargs):
        self.calls.append({"text": text, "language": language, "speaker": speaker, "instruct": instruct, **kwargs})
        if any(s not in VOICES.values() for s in speaker):  # qwen_tts validates speakers with ValueError
            raise ValueError(f"Unsupported speakers: {speaker}")
        texts = text if isinstance(text, list) else [text]
        tone = np.sin(np.arange(self.sr // 2) / 5.0).astype(np.float32) * 0.3
        return [np.concatenate([np.zeros(self.sr // 10, np.float32),
                                tone[: 1000 * len(t)] * (not (self.silent or t == "(silence)")),
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
    # a silent clip fails alone; a request the model refuses (unknown speaker) fails the call
    out = Qwen3TTS(model=FakeModel()).synthesize_batch(["Hello.", "(silence)"], ["ryan", "eric"])
    assert out[0].dtype == np.float32 and isinstance(out[1], SynthesisError) and "silence" in str(out[1])
    with pytest.raises(SynthesisError, match=r"refused.*Unsupported speakers"):
        Qwen3TTS(model=FakeModel()).synthesize_batch(["Hello.", "Hi."], ["ryan", "nobody"])


def _fake_package(monkeypatch) -> dict:
    seen: dict = {}

    class Qwen3TTSModel:
        @classmethod
        def from_pretrained(cls, path, **kwargs):
            seen.update(path=path, **kwargs)
            return FakeModel()

    monkeypatch.setitem(sys.modules, "qwen_tts", types.SimpleNamespace(Qwen3TTSModel=Qwen3TTSModel))
    return seen


def test_load_reads_local_weights_only(monkeypatch, tmp_path):
    seen = _fake_package(monkeypatch)
    tts = Qwen3TTS(weights=str(tmp_path), device="cpu")
    assert len(tts.synthesize("Hi.", "ryan")) > 0
    assert seen["path"] == str(tmp_path) and seen["local_files_only"] is True and seen["device_map"] == "cpu"
    assert str(seen["dtype"]) == "torch.bfloat16"
    with pytest.raises(TtsUnavailableError, match="does not exist"):
        Qwen3TTS(weights=str(tmp_path / "absent")).load()


def test_weights_come_from_the_local_hf_cache_never_the_hub(monkeypatch, tmp_path):
    """Without a weights folder, the model id at its revision is looked up in the local cache:
    from_pretrained gets the snapshot folder (so the speech tokenizer and processor load from it
    too); a model that is not cached is TtsUnavailableError, with no request to the hub."""
    import huggingface_hub.constants

    seen = _fake_package(monkeypatch)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / ("models--" + MODEL_ID.replace("/", "--"))
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    Qwen3TTS(device="cpu").load()
    assert seen["path"] == str(repo / "snapshots" / "abc123") and seen["local_files_only"] is True
    with pytest.raises(TtsUnavailableError, match="are not in the Hugging Face cache: looked for"):
        Qwen3TTS(settings=Qwen3Settings(model="Qwen/not-cached")).load()
    with pytest.raises(TtsUnavailableError, match="v9"):  # a revision the cache does not have
        Qwen3TTS(settings=Qwen3Settings(revision="v9")).load()


def test_missing_package_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "qwen_tts", None)
    with pytest.raises(TtsUnavailableError, match="qwen-tts"):
        Qwen3TTS().load()


def test_real_package_signature_when_installed():
    qwen_tts = pytest.importorskip("qwen_tts")
    params = inspect.signature(qwen_tts.Qwen3TTSModel.generate_custom_voice).parameters
    assert set(API) <= set(params)
