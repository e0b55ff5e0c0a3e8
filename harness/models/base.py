"""The adapter contract every full-duplex model implements (architecture: DuplexModel).

The runner owns timing, resampling and rebuffering; an adapter only maps one native frame
of input audio to one native frame of output audio for a batch of streams. Adding a model is
one file in ``harness/models/`` plus one ``conf/model/*.yaml`` (see docs/adding-a-model.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.protocol.scheduler import Placement
from harness.scenes.schema import Scene

# capabilities a model may declare in ModelInfo.capabilities
TEXT_PROMPT = "text_prompt"  # takes the duty instruction as text
AUDIO_PROMPT = "audio_prompt"  # takes a spoken prompt before streaming
TEACHER_FORCING = "teacher_forcing"  # can be forced on its output stream (Duplex Cue)
READS_SCHEDULE = "reads_schedule"  # a self-test that cheats: sees scene and placements


@dataclass(frozen=True)
class ModelInfo:
    """Static facts the runner needs.

    Attributes:
        name: registry name.
        input_rate, output_rate: sample rates in Hz of the model's input and output audio.
        frame_in, frame_out: samples per step at those rates (one native frame; both must
            span the same duration).
        max_batch: most streams one instance runs at once.
        capabilities: subset of the constants above.
        weights: weights id and revision, e.g. ``"kyutai/moshiko-pytorch-bf16@<sha>"``.
    """

    name: str
    input_rate: int
    output_rate: int
    frame_in: int
    frame_out: int
    max_batch: int = 1
    capabilities: frozenset[str] = field(default_factory=frozenset)
    weights: str | None = None

    @property
    def frame_s(self) -> float:
        """Duration of one step in seconds."""
        return self.frame_in / self.input_rate


@dataclass(frozen=True)
class StreamContext:
    """What a model is told when a stream opens.

    Attributes:
        conversation_id: the scene id.
        seed: per-conversation seed derived from (run seed, conversation id).
        duty_text: the duty instruction as text (for models with ``text_prompt``).
        scene: the script; only ``reads_schedule`` self-tests may look at it.
    """

    conversation_id: str
    seed: int
    duty_text: str
    scene: Scene


class DuplexModel(ABC):
    """A full-duplex model: hears a frame, says a frame, every step, for a batch of streams."""

    info: ModelInfo

    @abstractmethod
    def load(self, device: str) -> None:
        """Load weights onto ``device`` (``"cpu"`` or ``"cuda"``); called once per actor."""

    @abstractmethod
    def open(self, streams: Sequence[StreamContext]) -> None:
        """Start ``len(streams)`` fresh streams (<= ``info.max_batch``)."""

    @abstractmethod
    def step(self, frames: np.ndarray) -> np.ndarray:
        """One step: ``float32[B, frame_in]`` at ``input_rate`` -> ``float32[B, frame_out]`` at ``output_rate``."""

    def observe(self, stream: int, placement: Placement) -> None:  # noqa: B027 - optional hook
        """Called with each new clip placement, only for models declaring ``reads_schedule``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release per-stream state (weights stay loaded)."""
