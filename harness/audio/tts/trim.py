"""What every TTS backend does to its raw output: keep the speech, at the timeline rate."""

from __future__ import annotations

import numpy as np

from harness.audio.resample import resample
from harness.audio.tts import SynthesisError


def speech_clip(x: np.ndarray, rate: int, out_rate: int, level: float, margin_s: float, who: str,
                text: str) -> np.ndarray:
    """``x`` (``float32[n]`` at ``rate`` Hz) trimmed of the leading and trailing samples with
    ``|x| <= level`` (keeping ``margin_s`` seconds either side), so a clip's ends are the turn's
    construction-level boundaries (spec section 3), then resampled to ``out_rate`` Hz with
    :func:`harness.audio.resample.resample` and clipped to [-1, 1]: ``float32[m]``.

    Raises :class:`SynthesisError` when no sample exceeds ``level`` (``who`` produced silence).
    """
    loud = np.flatnonzero(np.abs(x) > level)
    if loud.size == 0:
        raise SynthesisError(f"{who} produced silence for {text[:40]!r}")
    margin = round(margin_s * rate)
    x = x[max(0, loud[0] - margin): loud[-1] + 1 + margin]
    return np.clip(resample(x, rate, out_rate), -1.0, 1.0).astype(np.float32, copy=False)
