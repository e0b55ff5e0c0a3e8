"""The streaming scheduler (spec section 4) as a pure state machine over a sample clock.

One :class:`Scheduler` per conversation decides *when* each human clip is streamed into the
model. Everything before T and after the T wait is fixed by the script; the only decisions
that depend on the model are made after T, from the model's **decoded speech** as segmented
by the online detector (:class:`harness.vad.segments.SpeechView`), never from its tokens.

Rules (spec section 4; settings in :class:`ProtocolSettings`, config group ``protocol``):

* the duty preamble first, then the turns, ``turn_gap_s`` (0.5 s) of silence between turns;
* after T ends at ``t_end``:
    * model speaking at ``t_end`` (final speech covers ``t_end``): wait for the endpoint,
      capped at ``t_end + response_cap_s`` (60 s). The endpoint is ``e + endpoint_silence_s``
      (2 s), ``e`` the end of the first response segment after which no speech starts for
      2 s (:meth:`SpeechView.endpoint`); speech starting at or after that rule time belongs
      to what follows, never to the response;
    * model silent at ``t_end``: a fresh onset at or before ``t_end + fresh_onset_window_s``
      (5 s, inclusive) opens a response, whose endpoint is capped at ``onset + 60 s``; no such
      onset -> the scene continues;
    * the next turn starts at the moment the decision is made (the wait itself is silence);
* after N4_Q: exactly ``n4_answer_window_s`` (3 s) of silence, then N4_R, whatever the model does;
* after the last turn: ``tail_s`` of silence, then the stream ends.

Decisions are taken when the detector *knows* the answer: an onset is known once it has
lasted ``min_speech``, a pause once it has lasted ``min_silence``, an endpoint once the
detector's clock has reached it with no candidate that may still become speech starting
before it. The decision time is recorded next to the rule time in the event log. The rule
times (T end, onset, endpoint, cap, no-onset deadline) depend only on the final segments,
never on when the scheduler looks: the runner calls :meth:`Scheduler.advance` once per native
model step (80 ms to about 1 s), so the detector has often processed frames past a rule time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from harness.audio.room_tone import check_room_tone
from harness.scenes.schema import Label
from harness.vad.segments import SpeechView

# The timeline rates a run accepts (protocol.sample_rate; docs/protocol-decisions.md): from 8 to 48 kHz
# in multiples of 125 Hz, so a 32 ms Silero window is whole samples, the audio stores as FLAC, and it
# resamples to and from the models' rates and espeak's 22,050 Hz with a small filter. The scheduler
# itself takes any rate (unit tests use 1 kHz: one sample a millisecond).
TIMELINE_RATES = (8_000, 48_000)


def timeline_rate_problem(rate: int) -> str | None:
    """Why ``rate`` (Hz) cannot be a run's timeline rate, or None (:data:`TIMELINE_RATES`)."""
    if isinstance(rate, bool) or not isinstance(rate, int) or not TIMELINE_RATES[0] <= rate <= TIMELINE_RATES[1] \
            or rate % 125:
        return (f"sample_rate must be an integer from {TIMELINE_RATES[0]} to {TIMELINE_RATES[1]} Hz in multiples "
                f"of 125 Hz (whole 32 ms Silero windows: 16000, 24000, 48000, ...), got {rate!r}")
    return None


@dataclass(frozen=True)
class ProtocolSettings:
    """Scheduler settings (conf/protocol). Seconds; converted to samples at ``sample_rate``."""

    sample_rate: int = 24_000
    turn_gap_s: float = 0.5
    fresh_onset_window_s: float = 5.0
    endpoint_silence_s: float = 2.0
    response_cap_s: float = 60.0
    n4_answer_window_s: float = 3.0
    tail_s: float = 2.0
    echo: bool = False  # mix the model's own output back into its input (spec section 4)
    room_tone: str = "pink"  # input silence: "zeros" or a seeded noise floor (harness.audio.room_tone)
    room_tone_dbfs: float = -70.0  # RMS level of that floor under the whole input, dBFS
    # the duty instruction also as text, to every model declaring ``text_prompt`` (after its upstream
    # preset); False: every model hears it only as the spoken preamble (docs/protocol-decisions.md)
    duty_as_text: bool = False

    def __post_init__(self) -> None:
        """Raises ValueError naming a value that cannot be a protocol setting."""
        if isinstance(self.sample_rate, bool) or not isinstance(self.sample_rate, int) or self.sample_rate <= 0:
            raise ValueError(f"sample_rate must be a positive integer (Hz), got {self.sample_rate!r}")
        for name, low in (("turn_gap_s", 0), ("tail_s", 0), ("fresh_onset_window_s", None),
                          ("endpoint_silence_s", None), ("response_cap_s", None), ("n4_answer_window_s", None)):
            v = getattr(self, name)  # low 0: may be 0; None: must be > 0
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or (v == 0 and low is None):
                raise ValueError(f"{name} must be a number of seconds {'>= 0' if low == 0 else '> 0'}, got {v!r}")
        check_room_tone(self.room_tone, self.room_tone_dbfs)
        if not isinstance(self.duty_as_text, bool):
            raise ValueError(f"duty_as_text must be true or false, got {self.duty_as_text!r}")

    def s(self, seconds: float) -> int:
        """Seconds -> samples at the timeline rate."""
        return round(seconds * self.sample_rate)


@dataclass(frozen=True)
class Placement:
    """A clip placed on the stream timeline: ``turn`` is ``None`` for the preamble."""

    turn: int | None
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True)
class Event:
    """One entry of the scheduler's log. ``t`` is the decision's sample time on the timeline."""

    t: int
    kind: str
    turn: int | None = None
    at: int | None = None  # the rule's time, where it differs from the decision time
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


class Phase(StrEnum):
    SCRIPTED = "scripted"  # placements are fixed up to the next T end
    T_DECIDE = "t_decide"  # T ended: is the model speaking?
    T_FRESH = "t_fresh"  # waiting for a fresh onset
    T_RESPONSE = "t_response"  # waiting for the endpoint or the cap
    DONE = "done"


class Scheduler:
    """Schedules one conversation.

    Args:
        turn_samples: clip length of each human turn in samples at ``settings.sample_rate``.
        labels: the turns' labels, same length.
        preamble_samples: length of the spoken duty preamble (0 for none).
        settings: :class:`ProtocolSettings`.

    Use: call :meth:`advance` at every frame boundary with the stream time and the detector's
    view; read :attr:`placements` to render the input; stop at :attr:`end` once :attr:`done`.

    Raises:
        ValueError: when ``turn_samples`` and ``labels`` differ in length, a length is <= 0, or
            T is the last turn (the schema forbids it; the T wait needs a turn after it).
    """

    def __init__(self, turn_samples: Sequence[int], labels: Sequence[Label], preamble_samples: int,
                 settings: ProtocolSettings):
        if len(turn_samples) != len(labels) or not labels:
            raise ValueError("turn_samples and labels must be non-empty and of equal length")
        if any(n <= 0 for n in turn_samples) or preamble_samples < 0:
            raise ValueError("clip lengths must be positive")
        if Label(labels[-1]) is Label.T:
            raise ValueError("T must be followed by more talk (spec section 2)")
        self.cfg = settings
        self.turn_samples = list(turn_samples)
        self.labels = [Label(x) for x in labels]
        self.placements: list[Placement] = []
        self.events: list[Event] = []
        self.phase = Phase.SCRIPTED
        self.end: int | None = None
        self._t_end: int | None = None
        self._anchor: int | None = None
        self._next_turn = 0
        cursor = 0
        if preamble_samples:
            self.placements.append(Placement(None, 0, preamble_samples))
            self.events.append(Event(0, "preamble_start"))
            cursor = preamble_samples + settings.s(settings.turn_gap_s)
        self._place_from(cursor)

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    def turn_placement(self, i: int) -> Placement | None:
        for p in self.placements:
            if p.turn == i:
                return p
        return None

    # -- scripted part -------------------------------------------------------------------
    def _place_from(self, start: int) -> None:
        """Place turns from ``self._next_turn`` at ``start`` until a T is placed or none remain."""
        cfg = self.cfg
        while self._next_turn < len(self.labels):
            i = self._next_turn
            p = Placement(i, start, self.turn_samples[i])
            self.placements.append(p)
            self.events.append(Event(p.start, "turn_start", i, reason=self.labels[i].value))
            self._next_turn += 1
            if self.labels[i] is Label.T:
                self._t_end = p.end
                self.phase = Phase.SCRIPTED
                return
            if self.labels[i] is Label.N4_Q:
                start = p.end + cfg.s(cfg.n4_answer_window_s)
                self.events.append(Event(p.end, "n4_answer_window", i, at=start,
                                         reason=f"N4_Q ended: {cfg.n4_answer_window_s} s of silence, then N4_R"))
            else:
                start = p.end + cfg.s(cfg.turn_gap_s)
        last = self.placements[-1]
        self.end = last.end + cfg.s(cfg.tail_s)
        self.events.append(Event(self.end, "stream_end", reason=f"{cfg.tail_s} s after the last turn"))
        self._t_end = None
        self.phase = Phase.DONE

    def _resume(self, now: int, kind: str, at: int | None, reason: str) -> None:
        self.events.append(Event(now, kind, self._t_turn(), at=at, reason=reason))
        self._anchor = None
        self._place_from(now)

    def _t_turn(self) -> int:
        return next(i for i in range(self._next_turn - 1, -1, -1) if self.labels[i] is Label.T)

    # -- decisions -----------------------------------------------------------------------
    def needs_detector(self, now: int) -> bool:
        """Whether :meth:`advance` at stream time ``now`` (samples) may decide anything: False while
        the scripted part plays before T's end and once :attr:`done`, where it is a no-op whatever the
        detector's view (so a caller may skip building the view)."""
        if self.phase is Phase.SCRIPTED:
            return self._t_end is not None and now >= self._t_end
        return self.phase is not Phase.DONE

    def next_decision(self) -> int | None:
        """The earliest stream time (samples) at which :meth:`advance` may decide anything, whatever
        the detector's view: T's end while the scripted part plays before it, 0 while a decision is
        pending (any step may take it), None once :attr:`done` (never). Until then :meth:`advance` is a
        no-op and :attr:`placements` stay as they are, so a caller may leave the conversation alone;
        ``needs_detector(now)`` is ``next_decision() is not None and now >= next_decision()``."""
        if self.phase is Phase.SCRIPTED:
            return self._t_end
        return None if self.phase is Phase.DONE else 0

    def advance(self, now: int, speech: SpeechView) -> None:
        """Take every decision due at stream time ``now`` (samples) given the detector view.

        The detector may lag the stream (``speech.now <= now``); the scheduler waits, streaming
        silence, until the detector knows enough to decide. It never decides on the stream
        clock alone: a detector that stopped advancing keeps it waiting until the runner's
        duration limit fails the conversation, which is never scored as silence.
        """
        cfg = self.cfg
        if self.phase is Phase.SCRIPTED and self._t_end is not None and now >= self._t_end:
            self.phase = Phase.T_DECIDE
        if self.phase is Phase.T_DECIDE:
            covered = speech.covers(self._t_end)
            if covered is None:
                return
            t = self._t_turn()
            if covered:
                self._anchor = self._t_end
                self.phase = Phase.T_RESPONSE
                self.events.append(Event(now, "t_end_speaking", t, at=self._t_end,
                                         reason="model speech covers the end of T: endpoint and cap from T end"))
            else:
                self.phase = Phase.T_FRESH
                self.events.append(Event(now, "t_end_silent", t, at=self._t_end,
                                         reason=f"model silent at T end: {cfg.fresh_onset_window_s} s onset window"))
        if self.phase is Phase.T_FRESH:
            deadline = self._t_end + cfg.s(cfg.fresh_onset_window_s)
            onset, confirmed = speech.first_onset_from(self._t_end)
            if onset is not None and onset > deadline:
                self._resume(now, "no_onset", deadline, "no speech onset within the window")
                return
            if onset is not None and confirmed:
                self._anchor = onset
                self.phase = Phase.T_RESPONSE
                self.events.append(Event(now, "onset", self._t_turn(), at=onset,
                                         reason=f"fresh onset {(onset - self._t_end) / cfg.sample_rate:.3f} s after T"))
            elif onset is None and speech.now > deadline:
                self._resume(now, "no_onset", deadline, "no speech onset within the window")
                return
        if self.phase is Phase.T_RESPONSE:
            # the rule times, not the detector's latest state, decide: speech that starts at or
            # after the endpoint (or the cap) is never part of the response, however far the
            # detector has run past it by the time it is looked at
            cap = self._anchor + cfg.s(cfg.response_cap_s)
            endpoint, known = speech.endpoint(self._t_end, cfg.s(cfg.endpoint_silence_s))
            if known and endpoint <= cap:
                self._resume(now, "endpoint", endpoint, f"{cfg.endpoint_silence_s} s of silence after the response")
            elif speech.now >= cap and (endpoint is None or endpoint > cap):
                self._resume(now, "cap", cap, f"response cap of {cfg.response_cap_s} s reached")
