"""Three baselines whose correct scores are known, so the pipeline checks itself.

* ``silent``: never speaks. Fresh onset 0, response presence 0, silence preservation 1,
  no yield-eligible N4 event, window response 0.
* ``babble``: talks continuously from the first sample. Fresh onset 0 (it is already
  speaking when T ends), response presence 1, silence preservation 0, window response 1,
  every N4 event excluded from yield as "already speaking at question start".
* ``oracle``: cheats on purpose (``reads_schedule``): it reads the script and the
  scheduler's placements. It says the gold answer ``answer_delay_s`` after T ends, starts an
  answer ``answer_delay_s`` after each N4_Q ends that lasts until ``stop_delay_s`` after N4_R
  starts, and is silent otherwise. Fresh onset 1, response presence 1, silence preservation 1,
  yield 1, window response 1.

Their speech is synthesised with espeak-ng in the assistant's voice.
"""

from __future__ import annotations

import numpy as np

from harness.audio.assemble import Track
from harness.audio.tts.espeak import EspeakTTS
from harness.models.base import READS_SCHEDULE, DuplexModel, ModelInfo, StreamContext
from harness.protocol.scheduler import Placement
from harness.scenes.schema import Label, Scene

RATE = 24_000
FRAME = 1_920  # 80 ms, the Mimi frame used by Moshi-family models

BABBLE_TEXT = (
    "Let me tell you about the weather this week. It will be sunny on Monday and cloudy on Tuesday. "
    "On Wednesday there may be some rain in the afternoon. Thursday looks bright and warm again. "
    "By the weekend the wind should calm down and the evenings will be pleasant."
)


class _Baseline(DuplexModel):
    """Row bookkeeping of the baselines: each row's stream clock (samples said so far)."""

    capabilities: frozenset[str] = frozenset()

    def __init__(self, voice: str = "en-us+f3", max_batch: int = 64):
        self.voice = voice
        self.info = ModelInfo(type(self).name, RATE, RATE, FRAME, FRAME, max_batch, self.capabilities, weights=None)
        self._t = np.zeros(max_batch, np.int64)  # per row: samples of its stream so far

    def load(self, device: str) -> None:
        self.tts = EspeakTTS(RATE)

    def open(self, row: int, stream: StreamContext) -> None:
        self._t[row] = 0

    def step(self, frames: np.ndarray) -> np.ndarray:
        rows = frames.shape[0]
        out = np.stack([self._render(b, int(self._t[b])) for b in range(rows)])
        self._t[:rows] += FRAME
        return out

    def _render(self, row: int, t: int) -> np.ndarray:
        """``float32[FRAME]``: what row ``row`` says from sample ``t`` of its stream."""
        raise NotImplementedError


class SilentModel(_Baseline):
    name = "silent"

    def _render(self, row: int, t: int) -> np.ndarray:
        return np.zeros(FRAME, np.float32)


class BabbleModel(_Baseline):
    name = "babble"

    def __init__(self, gap_s: float = 0.15, voice: str = "en-us+f3", max_batch: int = 64):
        super().__init__(voice, max_batch)
        self.gap_s = gap_s
        self._phase = np.zeros(self.info.max_batch, np.int64)

    def load(self, device: str) -> None:
        super().load(device)
        gap = np.zeros(round(self.gap_s * RATE), np.float32)
        parts = []
        for sentence in BABBLE_TEXT.split(". "):
            parts += [self.tts.synthesize(sentence, self.voice), gap]
        self._loop = np.concatenate(parts)

    def open(self, row: int, stream: StreamContext) -> None:
        super().open(row, stream)
        # each stream starts at its own seeded phase of the loop
        self._phase[row] = np.random.default_rng(stream.seed).integers(len(self._loop))

    def _render(self, row: int, t: int) -> np.ndarray:
        return self._loop[(self._phase[row] + t + np.arange(FRAME)) % len(self._loop)]


class OracleModel(_Baseline):
    name = "oracle"
    capabilities = frozenset({READS_SCHEDULE})

    def __init__(self, answer_delay_s: float = 0.5, stop_delay_s: float = 0.3, voice: str = "en-us+f3",
                 max_batch: int = 64):
        super().__init__(voice, max_batch)
        self.answer_delay = round(answer_delay_s * RATE)
        self.stop_delay = round(stop_delay_s * RATE)
        self._cache: dict[str, np.ndarray] = {}
        n = self.info.max_batch
        self._scenes: list[Scene | None] = [None] * n
        self._tracks = [Track() for _ in range(n)]
        self._pending_q: list[dict[int, int]] = [{} for _ in range(n)]  # per row: N4_Q turn -> answer start

    def _say(self, text: str) -> np.ndarray:
        if text not in self._cache:
            self._cache[text] = self.tts.synthesize(text, self.voice)
        return self._cache[text]

    def open(self, row: int, stream: StreamContext) -> None:
        super().open(row, stream)
        self._scenes[row], self._tracks[row], self._pending_q[row] = stream.scene, Track(), {}

    def close(self, row: int) -> None:
        self._scenes[row], self._tracks[row], self._pending_q[row] = None, Track(), {}

    def observe(self, row: int, placement: Placement) -> None:
        if placement.turn is None:
            return
        scene = self._scenes[row]
        turn = scene.turns[placement.turn]
        if turn.label is Label.T:
            self._tracks[row].add(placement.end + self.answer_delay, self._say(scene.gold_answer))
        elif turn.label is Label.N4_Q:
            self._pending_q[row][placement.turn] = placement.end + self.answer_delay
        elif turn.label is Label.N4_R:
            start = self._pending_q[row].pop(placement.turn - 1)
            stop = placement.start + self.stop_delay
            q = scene.turns[placement.turn - 1]
            clip = self._say(q.answer or "I think so, and here is a longer answer to keep talking for a while.")
            reps = -(-(stop - start) // len(clip))  # repeat the answer until the stop time
            self._tracks[row].add(start, np.tile(clip, reps)[: stop - start])

    def _render(self, row: int, t: int) -> np.ndarray:
        return self._tracks[row].render(t, FRAME)
