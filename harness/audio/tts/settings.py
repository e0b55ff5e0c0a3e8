"""The ``synth`` stage's settings (conf/tts/; spec section 3; docs/configuration.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from harness.audio.preamble import DUTY_TEXT
from harness.checks import require_integer, require_positive

ENGINES = ("espeak", "qwen3")  # harness.audio.tts.build_tts
TTS_EXECUTION_KEYS = ("batch", "num_cpus", "num_gpus", "actors")  # change speed, never the audio


@dataclass(frozen=True)
class TtsSettings:
    """The synth stage's settings (spec section 3; conf/tts/, docs/configuration.md)."""

    engine: str = "espeak"  # ENGINES: espeak | qwen3
    voices: dict[str, str] = field(default_factory=lambda: {
        "A": "en-us+m1", "B": "en-gb+m3", "C": "en-us+f2", "D": "en-gb-scotland+f4"})
    narrator: str = "en-us+m7"
    words_per_minute: int = 175  # espeak only
    preamble_text: str = DUTY_TEXT
    # backend settings (qwen3: model, revision, language, instruct, dtype, seed; weights and
    # device say where it runs and are not part of the audio's identity)
    params: dict[str, Any] = field(default_factory=dict)
    batch: int = 32  # distinct clips per synthesis task (one generate call for qwen3)
    num_cpus: float = 1  # per synthesis actor
    num_gpus: float = 0  # per synthesis actor: 1 for qwen3 on a cluster
    actors: int | None = None  # None: as many as the Ray cluster holds; 0: in the driver process, no Ray

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine {self.engine!r} is not one of: {', '.join(ENGINES)}")
        require_integer(self, "batch")
        require_positive(self, "batch")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError("num_cpus and num_gpus must be >= 0")
        if self.actors is not None and (isinstance(self.actors, bool) or not isinstance(self.actors, int)
                                        or self.actors < 0):
            raise ValueError(f"actors must be null or an integer >= 0, got {self.actors!r}")

    def audio_settings(self) -> dict[str, Any]:
        """The settings that change the audio (the synth stage's hash): not the execution settings
        (:data:`TTS_EXECUTION_KEYS`) nor ``params.weights`` / ``params.device`` (where the model
        is and runs). ``params`` is left out when empty, so the keys of runs made before it existed
        stay the same."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if k not in TTS_EXECUTION_KEYS}
        params = {k: v for k, v in d.pop("params").items() if k not in ("weights", "device")}
        if params:
            d["params"] = params
        return d
