"""The adapter contract every full-duplex model implements (architecture: DuplexModel).

The runner owns timing, resampling and rebuffering; an adapter only maps one native frame
of input audio to one native frame of output audio for a batch of streams. Adding a model is
one file in ``harness/models/`` plus one ``conf/model/*.yaml`` (see docs/adding-a-model.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from harness.protocol.scheduler import Placement
from harness.scenes.schema import Scene
from harness.weights import Requirements

# capabilities a model may declare in ModelInfo.capabilities
TEXT_PROMPT = "text_prompt"  # takes the duty instruction as text
AUDIO_PROMPT = "audio_prompt"  # takes a spoken prompt before streaming
TEACHER_FORCING = "teacher_forcing"  # can be forced on its output stream (Duplex Cue)
READS_SCHEDULE = "reads_schedule"  # a self-test that cheats: sees scene and placements
VOCABULARY = "vocabulary"  # listens with a recogniser biased to what is said in the room (StreamContext.vocabulary)
REALTIME = "realtime"  # a remote service that runs against the wall clock: the runner paces its steps


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
        preset_text: the upstream preset text the adapter sends as the model's text prompt
            whatever the protocol says (MiniCPM-o's duplex preset, Freeze-Omni's role); the duty
            text follows it when the model is given it (:func:`gives_duty_text`). ``""``: none.
        voice_prompt: the voice prompt the adapter gives the model (a released voice's file or
            name), None for none. Both are shown in the report (docs/protocol-decisions.md).
        context_s: seconds of its own stream the model attends over at once (a sliding window:
            Moshi's 3,000 steps of 80 ms, 240 s), counted from the stream's first sample (the
            preamble's); a longer conversation is flagged in the report, since the model no longer
            attends to its start. None: no such window (the model keeps everything, or fails the
            conversation at a hard limit, which is then that conversation's error).
        output_lag_steps: whole steps by which the model's output lags what it wrote: step ``n``
            returns the frame written at step ``n - output_lag_steps`` (PersonaPlex: 1, upstream
            returns the agent's frame one step after writing it). Duplex Cue's runner drops that
            many leading frames of a stream and runs that many steps longer
            (:func:`harness.cue.continuation.run_continuations`), so its stored output is on the
            recording timeline. ``int >= 0``.
    """

    name: str
    input_rate: int
    output_rate: int
    frame_in: int
    frame_out: int
    max_batch: int = 1
    capabilities: frozenset[str] = field(default_factory=frozenset)
    weights: str | None = None
    preset_text: str = ""
    voice_prompt: str | None = None
    context_s: float | None = None
    output_lag_steps: int = 0

    @property
    def frame_s(self) -> float:
        """Duration of one step in seconds."""
        return self.frame_in / self.input_rate


@dataclass(frozen=True)
class StreamContext:
    """What a model is told when a stream opens. What a model may see follows from what it
    declares (``ModelInfo.capabilities``); the runner fills the rest with nothing.

    Attributes:
        conversation_id: the scene id.
        seed: per-conversation seed derived from (run seed, conversation id).
        duty_text: the duty instruction as text, given only to models declaring ``text_prompt``
            and only when ``protocol.duty_as_text`` is on (:func:`gives_duty_text`); ``""`` for
            every other model, which is told its duty by the spoken preamble alone.
        scene: the script, answer key included: given only to ``reads_schedule`` self-tests,
            ``None`` for every other model.
        vocabulary: what is said in the room (each human turn's text, then the duty text; never
            the answer key: :func:`harness.scoring.flow.scene_vocabulary` without
            ``bias_with_gold``), the prior of a model's own recogniser: given only to models
            declaring ``vocabulary``, empty for the others.
        given_back: how many times this conversation's stream was given back in this run before this
            opening (:class:`RowPreempted`): a model that gives streams back can keep a rerun from
            being given back again (Moshi's paged K/V gives it its whole ring at once).
    """

    conversation_id: str
    seed: int
    duty_text: str
    scene: Scene | None = None
    vocabulary: tuple[str, ...] = ()
    given_back: int = 0


def gives_duty_text(capabilities: frozenset[str] | tuple[str, ...], duty_as_text: bool) -> bool:
    """Whether a model with ``capabilities`` is given the duty instruction as text
    (``StreamContext.duty_text``): only when the protocol says so (``protocol.duty_as_text``)
    and the model declares ``text_prompt``. Every model hears the spoken preamble either way
    (docs/protocol-decisions.md, "What each model is told")."""
    return bool(duty_as_text) and TEXT_PROMPT in capabilities


class RowError(Exception):
    """A deterministic fault of single streams, raised by :meth:`DuplexModel.open` or ``step``.

    The runner fails exactly the rows named in ``reasons`` (each conversation is stored as an
    error with the adapter's reason) and streams the others on; a row that had already
    finished keeps its result. Raise it only for faults that would recur on a rerun (an
    input the model cannot take, NaN in one row's logits); rows given up for want of memory
    are :class:`RowPreempted`, run again later. Any other exception from a model
    call fails the whole attempt, which is retried (it may be transient: CUDA out of memory,
    a broken remote stream); see docs/adding-a-model.md.

    Args:
        reasons: ``{row: why}``, rows are indices into the batch (``0 <= row < R``).
        output: from ``step``, the step's output ``float32[R, frame_out]`` for the rows that
            go on (the blamed rows' samples are ignored); required unless every running row
            is blamed. ``None`` from ``open``.

    Raises:
        ValueError: ``reasons`` is empty.
    """

    def __init__(self, reasons: Mapping[int, str], output: np.ndarray | None = None):
        if not reasons:
            raise ValueError(f"{type(self).__name__} needs at least one row")
        self.reasons = {int(b): str(why) for b, why in reasons.items()}
        self.output = output
        super().__init__("; ".join(f"row {b}: {why}" for b, why in sorted(self.reasons.items())))

    def __reduce__(self):  # picklable with its fields (e.g. across a Ray actor boundary)
        return type(self), (self.reasons, self.output)


class RowPreempted(RowError):
    """The model gave up these rows' streams to free what it needs for the others (e.g. K/V memory
    of a pool smaller than every row's worst case): not a fault of the streams, and it would not
    recur, so they are run again rather than failed. Raised by :meth:`DuplexModel.open` or ``step``.

    Shapes and semantics of ``reasons`` and ``output`` are :class:`RowError`'s (``output``: the
    step's output for the rows that go on; the given-up rows' samples are ignored). The runner
    (:class:`harness.runtime.runner.RowBatch`) closes each named row (:meth:`DuplexModel.close`;
    its ``usage`` is not asked), discards its stream's partial output (never delivered) and puts
    its conversation at the back of the queue, to run again from its start when a row frees up;
    a conversation given up more than ``RowBatch.MAX_REQUEUES`` times is an error naming the
    preemptions and the last reason. The conversation is opened again as a fresh stream
    (:meth:`DuplexModel.open`) in whichever row frees up.
    """


class DuplexModel(ABC):
    """A full-duplex model: hears a frame, says a frame, every step, for a batch of rows.

    The runner keeps the batch full (continuous batching): ``R <= info.max_batch`` rows step
    together, and each row holds one conversation at a time, opened with :meth:`open` and
    ended with :meth:`close`; a finished row is refilled with the next conversation while the
    others stream on. A row's output must depend only on its own stream (its input, its
    :class:`StreamContext`), never on its row index or its neighbours.

    Failures (docs/adding-a-model.md): ``open``/``step`` raise :class:`RowError` to blame
    single rows, :class:`RowPreempted` to give rows up to run again later; any other exception
    fails the attempt and is retried. A call that does not return within ``infer.step_timeout_s``
    (``infer.first_step_timeout_s`` for ``open`` and the first step of a run) fails the attempt
    too, and the actor is discarded.
    """

    info: ModelInfo

    def requirements(self) -> Requirements:
        """What this model needs where it runs (:class:`harness.weights.Requirements`): the modules
        of its stack and the weights ``load`` reads. One statement with three readers: the job's
        preflight checks it before anything is spent, ``make weights`` fetches it, ``load`` reads
        it (docs/adding-a-model.md). Default: nothing (a baseline, a hosted model)."""
        return Requirements()

    @abstractmethod
    def load(self, device: str) -> None:
        """Load weights onto ``device`` (``"cpu"`` or ``"cuda"``); called once per actor. A model
        reading released weights sets ``info.weights`` to what it read
        (:func:`harness.weights.loaded`: ``repo@<snapshot commit>`` or the folder)."""

    @abstractmethod
    def open(self, row: int, stream: StreamContext) -> None:
        """Start a fresh stream in ``row`` (``0 <= row < info.max_batch``): whatever the row held
        before is forgotten. The next :meth:`step` is the stream's first.

        Raises :class:`RowError` (naming ``row``) when this stream cannot start.
        """

    @abstractmethod
    def step(self, frames: np.ndarray) -> np.ndarray:
        """One step: ``float32[R, frame_in]`` at ``input_rate`` -> ``float32[R, frame_out]`` at ``output_rate``.

        ``R`` (the rows of this run, at most ``info.max_batch``) is fixed from one call to the
        next until every row has been closed. Rows with no open stream get silence as input and
        their output is ignored.

        The output contract (checked by the runner, :func:`harness.runtime.runner.check_output`):
        a floating-point array of exactly ``[R, frame_out]``, every sample finite and within
        [-1, 1] (up to one step of the 16-bit grid); clip a vocoder that can overshoot. A
        wrong dtype or shape fails every open row; a row with NaN/Inf or a sample out of range
        fails that row. Raises :class:`RowError` to blame single rows.
        """

    def step_forced(self, frames: np.ndarray, forced: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One teacher-forced step, for models declaring ``teacher_forcing`` (Duplex Cue, spec section 9).

        Args:
            frames: ``float32[R, frame_in]`` at ``input_rate``: what the rows hear (as :meth:`step`).
            forced: ``float32[R, frame_out]`` at ``output_rate``: for rows where ``mask`` is True,
                the audio the model is forced to have said in this step (the recorded speaker A);
                the model's own prediction for those rows is replaced by it in its state, so the
                following steps continue from the forced history. Ignored where ``mask`` is False.
            mask: ``bool[R]``: which rows are forced this step; the others generate as in :meth:`step`.

        Returns ``float32[R, frame_out]`` under :meth:`step`'s output contract: for forced rows
        the model's rendering of the forced audio (its codec's reconstruction, or the forced
        audio itself; it may lag the forcing by a step, as PersonaPlex's does), for the others
        what the model generated. Raises :class:`RowError` as
        :meth:`step` does; a model without the capability raises ``NotImplementedError``.
        """
        raise NotImplementedError(f"{self.info.name} does not declare {TEACHER_FORCING!r}")

    def observe(self, row: int, placement: Placement) -> None:  # noqa: B027 - optional hook
        """Called with each new clip placement of ``row``'s stream, only for models declaring ``reads_schedule``."""

    def close(self, row: int) -> None:  # noqa: B027 - optional hook
        """``row``'s stream has ended (finished or failed): release its state (weights stay loaded)."""

    def fit_streams(self, longest_s: float) -> float | None:
        """Size the model's context to the streams about to run, called with no row open before each
        shard (infer) with the longest any of them can last (seconds, whatever the model says:
        :func:`harness.runtime.projection.longest_stream_bound`). A model that sizes its context
        (Moshi with ``context_steps="auto"``: its ring KV cache) returns the seconds of stream its
        context now holds exactly when that is less than ``info.context_s``; the infer worker then
        fails, never scores, a stream that outlasts it (a wrong bound). None: the model's fixed or
        full context, ``info.context_s``, whose overruns reduce flags. Default: None."""
        return None

    def admit(self) -> bool:
        """May a new stream be opened now? The runner leaves free rows empty while this is False
        and asks again at the next refill (a hosted API's rate limit slows admission instead of
        failing conversations). Default: always."""
        return True

    def usage(self, row: int) -> dict | None:
        """Raw usage of ``row``'s stream (e.g. a hosted API's audio and text tokens in and out,
        seconds), asked just before :meth:`close`; stored with the conversation's outputs so cost
        can be computed later from a price table. Default: None (nothing metered)."""
        return None


class OutputQueue:
    """Per-row output FIFO for models whose output per step varies in length (MiniCPM-o's 1 s
    units, Voila's text steps, Freeze-Omni's sentence-level speech; ``models.md``, "Time model").

    The adapter :meth:`put`\\ s whatever its model produced for a row (any length, at the
    model's output rate) and returns :meth:`take` from ``step``: exactly one frame per row,
    the oldest queued samples first, padded with silence when a row has too few. Surplus
    samples wait for later steps, so speech is never dropped or stretched, only delayed.

    Args:
        rows: number of rows ``R``.
        frame: samples per step (``ModelInfo.frame_out``).
    """

    def __init__(self, rows: int, frame: int):
        self.frame = frame
        self._rows: list[list[np.ndarray]] = [[] for _ in range(rows)]
        self._n = np.zeros(rows, np.int64)

    def put(self, row: int, samples: np.ndarray) -> None:
        """Queue ``float32[n]`` samples (any ``n >= 0``) for ``row``."""
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if x.size:
            self._rows[row].append(x)
            self._n[row] += x.size

    def pending(self, row: int) -> int:
        """Samples queued for ``row``."""
        return int(self._n[row])

    def clear(self, row: int) -> None:
        """Drop ``row``'s queue (its stream ended or restarts)."""
        self._rows[row], self._n[row] = [], 0

    def take(self) -> np.ndarray:
        """The next frame of every row: ``float32[R, frame]``, zero-padded where a queue runs short."""
        out = np.zeros((len(self._rows), self.frame), np.float32)
        for b, parts in enumerate(self._rows):
            if not parts:
                continue
            q = np.concatenate(parts)
            n = min(self.frame, q.size)
            out[b, :n] = q[:n]
            self._rows[b] = [q[n:]] if q.size > n else []
            self._n[b] -= n
        return out
