"""Shared fixtures: espeak-ng speech (real TTS, made here, never downloaded)."""

from __future__ import annotations

import shutil

import pytest

from harness.audio.tts.espeak import EspeakTTS


@pytest.fixture(scope="session")
def tts() -> EspeakTTS:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is not installed: run `make setup`")
    return EspeakTTS(24_000)
