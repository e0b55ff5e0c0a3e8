"""ASR for the scoring stage: transcribe the model's speech in a scoring window (spec section 5).

One interface, two backends, chosen by :func:`build_asr`:

* ``"pocketsphinx"``: :class:`~harness.scoring.asr.pocketsphinx.PocketsphinxASR`, the offline
  default (PyPI ``pocketsphinx`` 5.1, CPU, no downloads) with a bigram LM built per call from
  the ``vocabulary`` text;
* ``"qwen3"``: :class:`~harness.scoring.asr.qwen3.Qwen3ASR`, the paper's recogniser
  (Qwen3-ASR-1.7B through PyPI ``qwen-asr``); needs the GPU image and cached weights.

Heavy dependencies are imported only when a backend is built. Every backend takes mono
``float32[n]`` audio in [-1, 1] at any sample rate (the harness timeline is 24 kHz), resamples
it with :func:`harness.audio.resample.resample`, and returns a :class:`Transcript` whose text
is normalised by :func:`harness.scoring.asr.text.normalize` (lower case, no punctuation,
integers spelled out, single spaces). ``docs/asr.md`` has the recipe and measured WER.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

KINDS: tuple[str, ...] = ("pocketsphinx", "qwen3")


@dataclass(frozen=True)
class Transcript:
    """What a recogniser heard.

    Attributes:
        text: lower-case words separated by single spaces (``""`` when nothing was recognised).
        words: ``(word, start_s, end_s)`` relative to the start of the input audio, when the
            backend gives word times (empty otherwise).
    """

    text: str
    words: tuple[tuple[str, float, float], ...] = ()


@runtime_checkable
class ASR(Protocol):
    """A speech recogniser.

    Attributes:
        name: backend name, e.g. ``"pocketsphinx-scene-lm"``.
        version: changes whenever the output may change for the same input (package version,
            implementation, settings); part of cache keys.
    """

    name: str
    version: str

    def transcribe(self, audio: np.ndarray, sample_rate: int, vocabulary: Sequence[str] = ()) -> Transcript:
        """Transcribe mono ``float32[n]`` audio in [-1, 1] at ``sample_rate`` Hz.

        ``vocabulary`` is text the speech may draw on (the scoring flow passes the scene's
        turns and the duty preamble, plus its answer key only with ``asr.bias_with_gold``:
        :func:`harness.scoring.flow.scene_vocabulary`); backends that cannot use it ignore it.
        Raises ``ValueError`` for non-mono or non-finite audio.
        """
        ...


def prepare_input(audio: np.ndarray, sample_rate: int, vocabulary: Sequence[str] | str,
                  rate: int) -> tuple[np.ndarray | None, list[str]]:
    """Validate and resample what every backend gets: ``(float32[n] at rate, vocabulary)``.

    Returns ``None`` for audio under 100 ms (nothing to recognise). Raises ``ValueError`` for
    non-mono / non-finite audio or a non-positive sample rate.
    """
    from harness.audio.io import check_waveform
    from harness.audio.resample import resample

    x = check_waveform(audio, "ASR input")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    vocab = [vocabulary] if isinstance(vocabulary, str) else list(vocabulary)
    if x.size < sample_rate / 10:
        return None, vocab
    return resample(np.clip(x, -1.0, 1.0), sample_rate, rate), vocab


def build_asr(kind: str, **params) -> ASR:
    """Build the ASR backend ``kind`` (one of :data:`KINDS`) with backend ``params``.

    Raises:
        ValueError: unknown ``kind``.
        RuntimeError: the backend's package is not installed (the message says what to install).
    """
    if kind == "pocketsphinx":
        from harness.scoring.asr.pocketsphinx import PocketsphinxASR

        return PocketsphinxASR(**params)
    if kind == "qwen3":
        from harness.scoring.asr.qwen3 import Qwen3ASR

        return Qwen3ASR(**params)
    raise ValueError(f"unknown ASR kind {kind!r}; expected one of {', '.join(KINDS)}")


__all__ = ["ASR", "KINDS", "Transcript", "build_asr"]
