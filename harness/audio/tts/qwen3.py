"""Qwen3-TTS, the paper's synthesiser (spec section 3): PyPI ``qwen-tts``, model
``Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice``, 24 kHz, preset speakers A->ryan, B->aiden, C->eric,
D->dylan.

Same interface as :class:`~harness.audio.tts.espeak.EspeakTTS` (``sample_rate``,
``clip_id(voice, text)``, ``synthesize(text, voice)``) plus ``synthesize_batch`` for a GPU actor
that speaks many distinct clips per call. The package and the weights are needed only when the
first clip is spoken (``load()``); the weights come from ``weights`` (a local folder or the
mounted Hugging Face cache) and are never downloaded by the harness: ``local_files_only`` is
always passed. Output is trimmed of leading/trailing digital silence like espeak's, so a clip's
ends are the turn's construction-level boundaries, and resampled when the model's rate differs.

Not wired into the synth stage yet (it speaks ``tts.engine=espeak`` only); verified by a contract
test against the ``qwen_tts`` API (tests/unit/test_tts_qwen3.py), no weights involved.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from harness.audio.resample import resample
from harness.audio.tts.espeak import SynthesisError

MODEL_ID = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
VOICES = {"A": "ryan", "B": "aiden", "C": "eric", "D": "dylan"}  # spec section 3


@dataclass(frozen=True)
class Qwen3Settings:
    """Settings that change the audio (part of every clip's content hash)."""

    model: str = MODEL_ID
    language: str = "English"
    instruct: str | None = None
    trim_level: float = 0.003
    trim_margin_s: float = 0.01


class Qwen3TTS:
    """Qwen3-TTS CustomVoice synthesiser producing ``float32[n]`` mono at ``sample_rate`` Hz.

    Args:
        sample_rate: output rate (the timeline rate, 24 kHz by default).
        settings: :class:`Qwen3Settings`.
        weights: local folder of the model (default: ``settings.model`` resolved in the local
            Hugging Face cache only).
        device: ``device_map`` for ``from_pretrained`` (``"cuda:0"``, ``"cpu"``).
        model: an already built model object with ``generate_custom_voice`` (tests pass a fake).
    """

    engine = "qwen3-tts"

    def __init__(self, sample_rate: int = 24_000, settings: Qwen3Settings | None = None, weights: str | None = None,
                 device: str = "cuda:0", model: Any = None):
        self.sample_rate = sample_rate
        self.settings = settings or Qwen3Settings()
        self.weights, self.device, self._model = weights, device, model

    def load(self) -> Any:
        if self._model is None:
            try:
                import torch
                from qwen_tts import Qwen3TTSModel
            except ImportError as e:
                raise SynthesisError(f"Qwen3-TTS needs the `qwen-tts` package ({e}); it is installed in the "
                                     "synthesis image, not in the dev venv") from e
            self._model = Qwen3TTSModel.from_pretrained(self.weights or self.settings.model, device_map=self.device,
                                                        dtype=torch.bfloat16, local_files_only=True)
        return self._model

    def clip_id(self, voice: str, text: str) -> str:
        """Content hash of everything that determines the audio of (voice, text)."""
        blob = json.dumps([self.engine, voice, text, asdict(self.settings), self.sample_rate])
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        """Speak ``text`` with preset speaker ``voice`` (e.g. ``"ryan"``)."""
        return self.synthesize_batch([text], [voice])[0]

    def synthesize_batch(self, texts: Sequence[str], voices: Sequence[str]) -> list[np.ndarray]:
        """Speak several clips in one ``generate_custom_voice`` call (lists of texts, speakers and
        languages). Raises :class:`SynthesisError` for an empty text, a count mismatch in the
        model's reply or a silent clip."""
        if len(texts) != len(voices):
            raise ValueError(f"{len(texts)} texts but {len(voices)} voices")
        if any(not t.strip() for t in texts):
            raise SynthesisError("cannot synthesise empty text")
        s = self.settings
        kwargs: dict[str, Any] = {"text": list(texts), "speaker": list(voices), "language": [s.language] * len(texts)}
        if s.instruct:
            kwargs["instruct"] = [s.instruct] * len(texts)
        wavs, sr = self.load().generate_custom_voice(**kwargs)
        if len(wavs) != len(texts):
            raise SynthesisError(f"Qwen3-TTS returned {len(wavs)} clips for {len(texts)} texts")
        return [self._trim(np.asarray(w, np.float32).reshape(-1), int(sr), t) for w, t in zip(wavs, texts, strict=True)]

    def _trim(self, x: np.ndarray, sr: int, text: str) -> np.ndarray:
        s = self.settings
        loud = np.flatnonzero(np.abs(x) > s.trim_level)
        if loud.size == 0:
            raise SynthesisError(f"Qwen3-TTS produced silence for {text[:40]!r}")
        margin = round(s.trim_margin_s * sr)
        x = x[max(0, loud[0] - margin): loud[-1] + 1 + margin]
        if sr != self.sample_rate:
            x = resample(x, sr, self.sample_rate)
        return np.clip(x, -1.0, 1.0).astype(np.float32)
