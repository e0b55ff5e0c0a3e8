"""The Gemini Live adapter's settings, without a server. Streamed end to end against a fake of the
Live API: tests/e2e/test_model_gemini_live.py."""

from __future__ import annotations

import pytest

from harness.models.gemini_live import GeminiLiveModel


def test_manual_activity_signals_are_refused():
    with pytest.raises(ValueError, match="manual activity"):
        GeminiLiveModel(automatic_activity_detection={"disabled": True})
