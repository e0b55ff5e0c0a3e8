"""Qwen3-TTS, the paper's synthesiser (spec section 3): PyPI ``qwen-tts``, model
``Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice``, 24 kHz, preset speakers A->ryan, B->aiden, C->eric,
D->dylan (``conf/tts/qwen3.yaml``, ``tts=qwen3``).

Same interface as :class:`~harness.audio.tts.espeak.EspeakTTS` (``load``, ``clip_id``,
``synthesize``, ``synthesize_batch``); ``synthesize_batch`` speaks many distinct clips in one
``generate_custom_voice`` call, which is what a GPU actor of the synth stage does with each of
its batches. The package and the weights are needed only in :meth:`Qwen3TTS.load`. Weights are
never downloaded: ``weights`` (a local folder) or ``model`` at ``revision`` looked up in the
local Hugging Face cache only (``HF_HOME``; ``snapshot_download(local_files_only=True)``), and
``from_pretrained`` is given that folder with ``local_files_only=True``, so neither the model,
its speech tokenizer nor its processor can reach the hub. The output is trimmed of
leading/trailing digital silence like espeak's, so a clip's ends are the turn's
construction-level boundaries, and resampled to the timeline rate with
:func:`harness.audio.resample.resample` when the model's rate differs
(:func:`harness.audio.tts.trim.speech_clip`).

The model samples (``do_sample`` in its generation config): each call seeds torch from
``seed`` and the batch's (voice, text) pairs, so the same batch gives the same audio on the
same hardware and software; the corpus of record is the stored clips (docs/reproducibility.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.audio.tts import SynthesisError, TtsUnavailableError
from harness.audio.tts.trim import speech_clip
from harness.weights import WeightsNotFoundError, local_weights

MODEL_ID = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
VOICES = {"A": "ryan", "B": "aiden", "C": "eric", "D": "dylan"}  # spec section 3


QWEN_TTS_MISSING = ("Qwen3-TTS needs the `qwen-tts` package; it is installed in the synthesis image "
                    "(images/synth-qwen3), not in the dev venv")


@dataclass(frozen=True)
class Qwen3Settings:
    """Settings that change the audio (part of every clip's content hash); ``tts.params``."""

    model: str = MODEL_ID  # hub id (looked up in the local cache only) of the weights
    revision: str | None = None  # hub revision of ``model`` (None: the cache's ``main``)
    language: str = "English"
    instruct: str | None = None  # style instruction for every clip (None: none)
    dtype: str = "bfloat16"
    seed: int = 0
    trim_level: float = 0.003
    trim_margin_s: float = 0.01


class Qwen3TTS:
    """Qwen3-TTS CustomVoice synthesiser producing ``float32[n]`` mono at ``sample_rate`` Hz.

    Args:
        sample_rate: output rate (the timeline rate, 24 kHz by default).
        settings: :class:`Qwen3Settings`.
        weights: local folder holding ``settings.model`` (default: the model looked up in the
            local Hugging Face cache). Where the weights are is not part of a clip's id.
        device: ``device_map`` for ``from_pretrained`` (``"cuda:0"``, ``"cpu"``).
        model: an already built model object with ``generate_custom_voice`` (tests pass a fake).
    """

    engine = "qwen3-tts"
    batched = True  # one generate call speaks a whole batch

    def __init__(self, sample_rate: int = 24_000, settings: Qwen3Settings | None = None, weights: str | None = None,
                 device: str = "cuda:0", model: Any = None):
        self.sample_rate = sample_rate
        self.settings = settings or Qwen3Settings()
        self.weights, self.device, self._model = weights, device, model

    def weights_dir(self) -> str:
        """The local folder of the weights: ``weights``, or ``model`` at ``revision`` in the local
        Hugging Face cache. Raises :class:`TtsUnavailableError` when neither exists (nothing is downloaded)."""
        if self.weights is not None:
            if not Path(self.weights).is_dir():
                raise TtsUnavailableError(f"Qwen3-TTS weights folder {self.weights!r} (tts.params.weights) "
                                          "does not exist")
            return self.weights
        s = self.settings
        try:
            return str(local_weights(s.model, s.revision, what=f"Qwen3-TTS weights {s.model!r}@{s.revision or 'main'}"))
        except ImportError as e:
            raise TtsUnavailableError(f"Qwen3-TTS weights: huggingface_hub is not importable ({e}); it is installed "
                                      "in the synthesis image (images/synth-qwen3)") from None
        except WeightsNotFoundError as e:
            raise TtsUnavailableError(f"{e}; tts.params.weights names no folder either") from None

    def check(self) -> None:
        """What :meth:`load` needs, without loading anything, for a job's preflight: the ``qwen-tts``
        package is importable and the weights are in their folder or the local cache
        (:class:`TtsUnavailableError` naming the missing one)."""
        if self._model is not None:
            return
        if importlib.util.find_spec("qwen_tts") is None:
            raise TtsUnavailableError(QWEN_TTS_MISSING)
        self.weights_dir()

    def load(self) -> Any:
        """Load the model once (idempotent) and return it. Raises :class:`TtsUnavailableError` without
        the ``qwen-tts`` package or the weights."""
        if self._model is None:
            try:
                import torch
                from qwen_tts import Qwen3TTSModel
            except ImportError as e:
                raise TtsUnavailableError(f"{QWEN_TTS_MISSING} ({e})") from e
            self._model = Qwen3TTSModel.from_pretrained(self.weights_dir(), device_map=self.device,
                                                        dtype=getattr(torch, self.settings.dtype),
                                                        local_files_only=True)
        return self._model

    def clip_id(self, voice: str, text: str) -> str:
        """Content hash of everything that determines the audio of (voice, text)."""
        blob = json.dumps([self.engine, voice, text, asdict(self.settings), self.sample_rate])
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        """Speak ``text`` with preset speaker ``voice`` (e.g. ``"ryan"``): ``float32[n]`` at
        :attr:`sample_rate`. Raises :class:`SynthesisError` when the clip cannot be made."""
        out = self.synthesize_batch([text], [voice])[0]
        if isinstance(out, SynthesisError):
            raise out
        return out

    def synthesize_batch(self, texts: Sequence[str], voices: Sequence[str]) -> list[np.ndarray | SynthesisError]:
        """Speak several clips in one ``generate_custom_voice`` call (lists of texts, speakers and
        languages). Returns one entry per clip: ``float32[n]`` at :attr:`sample_rate`, or the
        :class:`SynthesisError` of a clip that came out silent. Raises :class:`SynthesisError`
        when the model refuses the call (an empty text, a speaker or language it does not know,
        a count mismatch in its reply) and :class:`TtsUnavailableError` when it cannot be loaded."""
        if len(texts) != len(voices):
            raise ValueError(f"{len(texts)} texts but {len(voices)} voices")
        if any(not t.strip() for t in texts):
            raise SynthesisError("cannot synthesise empty text")
        model = self.load()
        s = self.settings
        kwargs: dict[str, Any] = {"text": list(texts), "speaker": list(voices), "language": [s.language] * len(texts)}
        if s.instruct:
            kwargs["instruct"] = [s.instruct] * len(texts)
        self._seed(texts, voices)
        try:
            wavs, sr = model.generate_custom_voice(**kwargs)
        except ValueError as e:  # qwen_tts validates speakers, languages and batch sizes with ValueError
            raise SynthesisError(f"Qwen3-TTS refused the request: {e}") from None
        if len(wavs) != len(texts):
            raise SynthesisError(f"Qwen3-TTS returned {len(wavs)} clips for {len(texts)} texts")
        out: list[np.ndarray | SynthesisError] = []
        for w, t in zip(wavs, texts, strict=True):
            try:
                out.append(speech_clip(np.asarray(w, np.float32).reshape(-1), int(sr), self.sample_rate,
                                       s.trim_level, s.trim_margin_s, "Qwen3-TTS", t))
            except SynthesisError as e:
                out.append(e)
        return out

    def _seed(self, texts: Sequence[str], voices: Sequence[str]) -> None:
        import torch

        blob = json.dumps([self.settings.seed, list(voices), list(texts)]).encode()
        torch.manual_seed(int.from_bytes(hashlib.sha256(blob).digest()[:8], "little"))
