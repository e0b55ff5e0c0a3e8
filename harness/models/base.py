"""The adapter contract every full-duplex model implements (architecture: DuplexModel).

The runner owns timing, resampling and rebuffering; an adapter only maps one native frame
of input audio to one native frame of output audio for a batch of streams. Adding a model is
one file in ``harness/models/`` plus one ``conf/model/*.yaml`` (see docs/adding-a-model.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
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


class RowError(Exception):
    """A deterministic fault of single streams, raised by :meth:`DuplexModel.open` or ``step``.

    The runner fails exactly the rows named in ``reasons`` (each conversation is stored as an
    error with the adapter's reason) and streams the others on; a row that had already
    finished keeps its result. Raise it only for faults that would recur on a rerun (an
    input the model cannot take, NaN in one row's logits). Any other exception from a model
    call fails the whole attempt, which is retried (it may be transient: CUDA out of memory,
    a broken remote stream); see docs/adding-a-model.md.

    Args:
        reasons: ``{row: why}``, rows are indices into the batch (``0 <= row < B``).
        output: from ``step``, the step's output ``float32[B, frame_out]`` for the rows that
            go on (the blamed rows' samples are ignored); required unless every running row
            is blamed. ``None`` from ``open``: the streams not named are open.

    Raises:
        ValueError: ``reasons`` is empty.
    """

    def __init__(self, reasons: Mapping[int, str], output: np.ndarray | None = None):
        if not reasons:
            raise ValueError("RowError needs at least one row")
        self.reasons = {int(b): str(why) for b, why in reasons.items()}
        self.output = output
        super().__init__("; ".join(f"row {b}: {why}" for b, why in sorted(self.reasons.items())))

    def __reduce__(self):  # picklable with its fields (e.g. across a Ray actor boundary)
        return type(self), (self.reasons, self.output)


class DuplexModel(ABC):
    """A full-duplex model: hears a frame, says a frame, every step, for a batch of streams.

    Failures (docs/adding-a-model.md): ``open``/``step`` raise :class:`RowError` to blame
    single rows; any other exception fails the attempt and is retried. A call that does not
    return within ``infer.step_timeout_s`` (``infer.first_step_timeout_s`` for ``open`` and
    the first step of a batch) fails the attempt too, and the actor is discarded.
    """

    info: ModelInfo

    @abstractmethod
    def load(self, device: str) -> None:
        """Load weights onto ``device`` (``"cpu"`` or ``"cuda"``); called once per actor."""

    @abstractmethod
    def open(self, streams: Sequence[StreamContext]) -> None:
        """Start ``len(streams)`` fresh streams (<= ``info.max_batch``).

        Raises :class:`RowError` for streams that cannot start (the others are open).
        """

    @abstractmethod
    def step(self, frames: np.ndarray) -> np.ndarray:
        """One step: ``float32[B, frame_in]`` at ``input_rate`` -> ``float32[B, frame_out]`` at ``output_rate``.

        The output contract (checked by the runner, :func:`harness.runtime.runner.check_output`):
        a floating-point array of exactly ``[B, frame_out]``, every sample finite and within
        [-1, 1] (up to one step of the 16-bit grid); clip a vocoder that can overshoot. A
        wrong dtype or shape fails every row of the batch; a row with NaN/Inf or a sample out
        of range fails that row. Rows whose stream has ended get silence as input and their
        output is ignored. Raises :class:`RowError` to blame single rows.
        """

    def observe(self, stream: int, placement: Placement) -> None:  # noqa: B027 - optional hook
        """Called with each new clip placement, only for models declaring ``reads_schedule``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release per-stream state (weights stay loaded)."""
