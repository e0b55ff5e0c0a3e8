"""The Duplex Cue item and recording types (spec section 9; formats in docs/formats.md).

A *recording* is a two-party conversation: speaker A (who holds the floor, and whom a model
replaces) and speaker B (who contributes cues), one channel each, at one sample rate. A *cue
item* is one of B's cues in a recording: its intent, its words with times, and where A's
recorded continuation is. Times are seconds on the recording's own timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INTENTS = ("backchannel", "collaboration", "interruption")  # B's cue intent
RESPONSES = ("continued", "adapted", "yielded")  # A's (or the model's) response to the cue


@dataclass(frozen=True)
class Word:
    """One word with its start and end in seconds."""

    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Recording:
    """A two-party recording.

    Attributes:
        recording_id: unique id.
        sample_rate: Hz of both channels.
        n_samples: length of each channel in samples.
        a_words, b_words: word times of each speaker (optional for imported corpora; the
            generator always fills them).
    """

    recording_id: str
    sample_rate: int
    n_samples: int
    a_words: tuple[Word, ...] = ()
    b_words: tuple[Word, ...] = ()

    @property
    def duration_s(self) -> float:
        return self.n_samples / self.sample_rate


@dataclass(frozen=True)
class CueItem:
    """One cue of B while A holds the floor.

    Attributes:
        item_id: unique id.
        recording_id: the :class:`Recording` it belongs to.
        intent: one of :data:`INTENTS`.
        cue_words: B's cue words (at least one); ``cue_words[0].start_s`` is the cue onset.
        continuation_start_s, continuation_end_s: A's recorded continuation after the cue.
        label: the reference response (one of :data:`RESPONSES`) when known by construction
            (generated corpora), else None (a reviewer labels it).
        meta: free-form provenance (generator template, source corpus).
    """

    item_id: str
    recording_id: str
    intent: str
    cue_words: tuple[Word, ...]
    continuation_start_s: float
    continuation_end_s: float
    label: str | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def cue_onset_s(self) -> float:
        """B's cue onset: the start of its first word, in seconds."""
        return self.cue_words[0].start_s

    def switch_s(self, lead_s: float) -> float:
        """The switch point: ``lead_s`` (spec: 0.08 s) before the cue's first word, clipped at 0."""
        return max(0.0, self.cue_onset_s - lead_s)
