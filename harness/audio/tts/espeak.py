"""espeak-ng text-to-speech (the offline default; spec section 3 uses Qwen3-TTS on the cluster).

Each call synthesises one utterance with one voice; the result is trimmed of espeak's
leading/trailing digital silence (so a clip's ends are the turn's construction-level
boundaries), then resampled from espeak's 22,050 Hz to the timeline rate with torchaudio.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache

import numpy as np

from harness.audio.io import AudioError, decode
from harness.audio.tts import SynthesisError, TtsUnavailableError
from harness.audio.tts.trim import speech_clip

__all__ = ["EspeakSettings", "EspeakTTS", "SynthesisError", "espeak_version"]


@dataclass(frozen=True)
class EspeakSettings:
    """Settings that change the audio (part of every clip's content hash)."""

    words_per_minute: int = 175
    pitch: int = 50
    trim_level: float = 0.003  # |x| below this at the ends is trimmed (about -50 dBFS)
    trim_margin_s: float = 0.01


@cache
def espeak_version() -> str:
    """The installed espeak-ng version line; raises :class:`TtsUnavailableError` when it is missing."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise TtsUnavailableError("espeak-ng is not installed (Debian package espeak-ng; `make setup` installs it)")
    return subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.strip()


class EspeakTTS:
    """espeak-ng synthesiser producing ``float32[n]`` mono at ``sample_rate`` Hz.

    Args:
        sample_rate: output rate (the timeline rate, 24 kHz by default).
        settings: :class:`EspeakSettings`.
    """

    engine = "espeak-ng"
    batched = False  # one process per clip: the synth stage stores each clip as it comes

    def __init__(self, sample_rate: int = 24_000, settings: EspeakSettings | None = None):
        self.sample_rate = sample_rate
        self.settings = settings or EspeakSettings()

    def load(self) -> str:
        """Check that espeak-ng runs here (:class:`TtsUnavailableError` otherwise); returns its version."""
        return espeak_version()

    def check(self) -> None:
        """What :meth:`load` needs, for a job's preflight: espeak-ng runs here (:class:`TtsUnavailableError`)."""
        espeak_version()

    def clip_id(self, voice: str, text: str) -> str:
        """Content hash of everything that determines the audio of (voice, text)."""
        blob = json.dumps([self.engine, espeak_version(), voice, text, asdict(self.settings), self.sample_rate])
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        """Speak ``text`` with espeak-ng voice ``voice`` (e.g. ``"en-us+m3"``).

        Returns: float32[n] at :attr:`sample_rate`. Raises :class:`SynthesisError` on failure
        or when the utterance is silent.
        """
        if not text.strip():
            raise SynthesisError("cannot synthesise empty text")
        espeak_version()
        s = self.settings
        cmd = ["espeak-ng", "-v", voice, "-s", str(s.words_per_minute), "-p", str(s.pitch), "--stdout", "--", text]
        proc = subprocess.run(cmd, capture_output=True, check=False)
        if proc.returncode != 0 or not proc.stdout:
            raise SynthesisError(f"espeak-ng failed for voice {voice!r}: {proc.stderr.decode(errors='replace')[:200]}")
        try:
            x, sr = decode(proc.stdout)
        except AudioError as e:
            raise SynthesisError(f"espeak-ng produced unreadable audio: {e}") from None
        return speech_clip(x, sr, self.sample_rate, s.trim_level, s.trim_margin_s, "espeak-ng", text)

    def synthesize_batch(self, texts: Sequence[str], voices: Sequence[str]) -> list[np.ndarray | SynthesisError]:
        """One espeak-ng call per clip; a clip that fails is its :class:`SynthesisError` in the
        list (the others are still made). Raises :class:`TtsUnavailableError` when espeak-ng is missing."""
        if len(texts) != len(voices):
            raise ValueError(f"{len(texts)} texts but {len(voices)} voices")
        self.load()
        out: list[np.ndarray | SynthesisError] = []
        for text, voice in zip(texts, voices, strict=True):
            try:
                out.append(self.synthesize(text, voice))
            except TtsUnavailableError:
                raise
            except SynthesisError as e:
                out.append(e)
        return out
