"""Per-window outcomes of one conversation (spec section 5), from construction-level turn
boundaries (the scheduler's placements) and the model's speech segments (the ``vad`` stage).

All times are integer samples on the conversation's timeline. A segment is ``[start, end)``.
Window definitions (our reading where the paper is not explicit; docs/protocol-decisions.md):

* **T** (response window): from T's end to the rule time (the event's ``at``) of the
  scheduler's decision: the endpoint (end of the response's speech + 2 s), the no-onset
  timeout (T end + 5 s) or the cap (60 s). *Fresh onset*:
  no speech covers T's end and a segment starts in ``(T end, T end + 5 s]`` (exactly 5 s
  counts). *Response presence*: any speech in the response window, including speech already
  running at T's end.
* **N1/N2/N3** (silence window): from the turn's start to the next human turn's start (the
  last turn: its end plus the turn gap). Any speech overlapping it fails the window
  acoustically, also speech that began earlier. The turn right after the T wait starts at the
  decision time (the event's ``t``), a little after the rule time ``at`` (the detector's
  latency); its window starts at ``at``, where the T response window ends, so speech during
  that latency is scored as speech after the response, in the silence window.
* **N4** (answering window): question ``[q_start, q_end)``, N4_R starting at ``r_start``.
  *Window response*: any speech in ``[q_start, q_end + 3 s]``. *Yield*: eligible when the
  model was silent during the question, first spoke in ``[q_end, q_end + 3 s]`` and still
  speaks at ``r_start``; it succeeds when silent at the deadline ``r_start + 2 s`` and
  through the observation window up to ``max(deadline, r_end + 0.5 s)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.products.infer import InferRecord
from harness.protocol.scheduler import Event, ProtocolSettings
from harness.scenes.schema import Label, Scene


@dataclass(frozen=True)
class Speech:
    """The model's speech segments of one conversation: ``int64[k, 2]`` sorted ``[start, end)``."""

    segments: np.ndarray

    def covers(self, t: int) -> bool:
        s = self.segments
        return bool(np.any((s[:, 0] <= t) & (t < s[:, 1])))

    def overlap(self, a: int, b: int) -> int:
        """Samples of speech inside ``[a, b)``."""
        s = self.segments
        return int(np.clip(np.minimum(s[:, 1], b) - np.maximum(s[:, 0], a), 0, None).sum())

    def first_onset(self, after: int, until: int) -> int | None:
        """First segment start in ``(after, until]``, or ``None``."""
        s = self.segments[:, 0]
        hit = s[(s > after) & (s <= until)]
        return int(hit.min()) if hit.size else None


def _decision(events: Sequence[Event], turn: int) -> Event:
    for e in events:
        if e.turn == turn and e.kind in ("endpoint", "no_onset", "cap"):
            if e.at is None:
                raise ValueError(f"T decision {e.kind!r} for turn {turn} has no rule time 'at'")
            return e
    raise ValueError(f"no T decision for turn {turn} in the scheduler log")


def conversation_outcomes(scene: Scene, record: InferRecord, segments: np.ndarray,
                          protocol: ProtocolSettings, yield_deadline_s: float = 2.0) -> list[dict[str, Any]]:
    """Rows of the per-event table for one ``ok`` conversation.

    Args:
        scene: the script.
        record: the conversation's infer record (its ``placements`` and scheduler ``events``).
        segments: ``int64[k, 2]`` speech segments in samples.
        protocol: the settings the conversation was streamed with.
        yield_deadline_s: N4_R start + this is the yield stop deadline (spec section 5: 2 s).

    Returns:
        one dict per scored window with ``kind`` in ``{"T", "silence", "N4"}``; times in
        samples plus booleans per score. A T row's window is ``[end, window_end)``; a silence
        row's is ``[start, window_end)`` (``turn_start``/``end`` are its human turn's). Raises
        ValueError when the record is inconsistent with the scene (a missing placement, T
        decision or decision rule time).
    """
    sr = protocol.sample_rate
    speech = Speech(np.asarray(segments, dtype=np.int64).reshape(-1, 2))
    place = {p.turn: (p.start, p.end) for p in record.placements if p.turn is not None}
    if set(place) != set(range(len(scene.turns))):
        raise ValueError(f"{scene.scene_id}: placements do not cover every turn")
    base = {"scene_id": scene.scene_id, "pair_id": scene.pair_id, "condition": scene.condition}
    rows: list[dict[str, Any]] = []
    gap = protocol.s(protocol.turn_gap_s)
    t_window_end = None  # the T response window's end, where the next turn's window starts
    for i, turn in enumerate(scene.turns):
        start, end = place[i]
        if turn.label is Label.T:
            dec = _decision(record.events, i)
            w_end = t_window_end = int(dec.at)
            speaking = speech.covers(end)
            onset = speech.first_onset(end, end + protocol.s(protocol.fresh_onset_window_s))
            rows.append({**base, "kind": "T", "turn": i, "label": "T", "start": start, "end": end,
                         "window_end": w_end, "decision": dec.kind, "speaking_at_end": speaking,
                         "onset": onset, "fresh_onset": (not speaking) and onset is not None,
                         "response_presence": speech.overlap(end, w_end) > 0,
                         "speech_s": speech.overlap(end, w_end) / sr})
        elif turn.label.is_silence:
            w_start = t_window_end if i and scene.turns[i - 1].label is Label.T else start
            w_end = place[i + 1][0] if i + 1 < len(scene.turns) else end + gap
            occupied = speech.overlap(w_start, w_end)
            rows.append({**base, "kind": "silence", "turn": i, "label": turn.label.value,
                         "target": turn.target.value, "start": w_start, "turn_start": start, "end": end,
                         "window_end": w_end,
                         "speech_s": occupied / sr, "silent": occupied == 0,
                         # the window holds one human turn, so overlap with human speech is overlap with it
                         "overlap_s": speech.overlap(start, end) / sr})
        elif turn.label is Label.N4_Q:
            rows.append({**base, **n4_outcome(speech, start, end, *place[i + 1], protocol, yield_deadline_s),
                         "turn": i})
    return rows


def n4_outcome(speech: Speech, q_start: int, q_end: int, r_start: int, r_end: int,
               protocol: ProtocolSettings, yield_deadline_s: float = 2.0) -> dict[str, Any]:
    """Window response and the yield funnel of one N4 event (spec section 5).

    ``yield_outcome`` is ``"yield"`` (success), ``"still_voicing"`` (speaking at the deadline),
    ``"resumed"`` (silent at the deadline, speaks again before the observation window ends),
    or an exclusion: ``"excluded_spoke_during_question"``, ``"excluded_no_answer"``,
    ``"excluded_stopped_before_r"``.
    """
    window = protocol.s(protocol.n4_answer_window_s)
    during_q = speech.overlap(q_start, q_end) > 0
    already = speech.covers(q_start)
    # the question is [q_start, q_end): speech starting at q_end is after it
    answer_onset = None if during_q else speech.first_onset(q_end - 1, q_end + window)
    row: dict[str, Any] = {
        "kind": "N4", "label": "N4_Q", "start": q_start, "end": q_end, "r_start": r_start, "r_end": r_end,
        "already_speaking_at_q_start": already,
        "started_during_q": during_q and not already,
        "first_spoke_after_q": answer_onset is not None,
        "window_response": speech.overlap(q_start, q_end + window + 1) > 0,
    }
    deadline = r_start + protocol.s(yield_deadline_s)
    obs_end = max(deadline, r_end + protocol.s(protocol.turn_gap_s))
    if during_q:
        outcome = "excluded_spoke_during_question"
    elif answer_onset is None:
        outcome = "excluded_no_answer"
    elif not speech.covers(r_start):
        outcome = "excluded_stopped_before_r"
    elif speech.covers(deadline):
        outcome = "still_voicing"
    elif speech.overlap(deadline, obs_end) > 0:
        outcome = "resumed"
    else:
        outcome = "yield"
    row.update({"still_speaking_at_r_start": answer_onset is not None and speech.covers(r_start),
                "deadline": deadline, "observation_end": obs_end, "yield_outcome": outcome,
                "yield_eligible": not outcome.startswith("excluded")})
    return row


def with_verdict(row: dict[str, Any], verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Merge the score stage's ASR/judge result into a row (spec section 5).

    T rows gain ``answer_correct`` (``None`` when the model did not speak in the window);
    silence rows gain ``exempt_backchannel`` and ``silence_preserved`` (no speech, or a judged
    backchannel). Raises KeyError when a row that needs a verdict has none.
    """
    key = f"{row['kind']}:{row['turn']}"
    if row["kind"] == "T":
        if not row["response_presence"]:
            return {**row, "answer_correct": None, "transcript": None, "verdict": None}
        v = verdicts[key]
        return {**row, "answer_correct": bool(v["passed"]), "transcript": v["transcript"], "verdict": v["label"]}
    if row["kind"] == "silence":
        if row["silent"]:
            return {**row, "exempt_backchannel": False, "silence_preserved": True, "transcript": None,
                    "verdict": None}
        v = verdicts[key]
        return {**row, "exempt_backchannel": bool(v["passed"]), "silence_preserved": bool(v["passed"]),
                "transcript": v["transcript"], "verdict": v["label"]}
    return row
