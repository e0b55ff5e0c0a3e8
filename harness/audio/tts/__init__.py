"""Text-to-speech backends (spec section 3), chosen by ``tts.engine``:

* ``espeak``: Debian espeak-ng, runs anywhere (:mod:`harness.audio.tts.espeak`);
* ``qwen3``: Qwen3-TTS CustomVoice, the paper's synthesiser, on GPU actors
  (:mod:`harness.audio.tts.qwen3`).

Every backend has ``engine``, ``sample_rate``, ``batched`` (whether one call speaks many clips
faster than one call each), ``load()`` (raises :class:`TtsUnavailableError`
when the engine cannot run here), ``clip_id(voice, text)`` (content hash of everything that
determines the audio) and ``synthesize_batch(texts, voices)``, which returns one entry per
clip: ``float32[n]`` mono at ``sample_rate`` Hz, or the :class:`SynthesisError` that clip
failed with. This module imports no backend until :func:`build_tts` is called.
"""

from __future__ import annotations

from typing import Any

from harness.audio.tts.settings import ENGINES, TtsSettings


class SynthesisError(RuntimeError):
    """One utterance could not be synthesised (empty text, unknown voice, silent output)."""


class TtsUnavailableError(SynthesisError):
    """The engine cannot run at all here (package, program or weights missing): no clip can be made."""


def build_tts(settings: TtsSettings, sample_rate: int, device: str | None = None) -> Any:
    """The backend ``settings.engine`` names, producing clips at ``sample_rate`` Hz.

    ``device``: where a model backend runs (``"cuda:0"``, ``"cpu"``; default: ``params.device``,
    else ``"cuda:0"`` with ``tts.num_gpus`` and ``"cpu"`` without). Loads nothing. Raises
    :class:`ValueError` for an unknown engine or a ``tts.params`` key the backend does not take.
    """
    params = dict(settings.params)
    if settings.engine == "espeak":
        from harness.audio.tts.espeak import EspeakSettings, EspeakTTS

        if params:
            raise ValueError(f"tts.params {sorted(params)}: the espeak engine takes none "
                             "(its settings are tts.words_per_minute and tts.voices)")
        return EspeakTTS(sample_rate, EspeakSettings(words_per_minute=settings.words_per_minute))
    if settings.engine == "qwen3":
        from harness.audio.tts.qwen3 import Qwen3Settings, Qwen3TTS

        weights = params.pop("weights", None)
        device = device or params.pop("device", None) or ("cuda:0" if settings.num_gpus else "cpu")
        params.pop("device", None)
        try:
            qs = Qwen3Settings(**params)
        except TypeError:
            known = sorted([*Qwen3Settings.__dataclass_fields__, "device", "weights"])
            raise ValueError(f"tts.params {sorted(params)}: the qwen3 engine takes {known}") from None
        return Qwen3TTS(sample_rate, qs, weights=weights, device=device)
    raise ValueError(f"tts.engine {settings.engine!r} is not one of: {', '.join(ENGINES)}")
