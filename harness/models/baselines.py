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

from collections.abc import Sequence

import numpy as np

from harness.audio.assemble import Track
from harness.audio.tts.espeak import EspeakTTS
from harness.models.base import READS_SCHEDULE, DuplexModel, ModelInfo, StreamContext
from harness.protocol.scheduler import Placement
from harness.scenes.schema import Label

RATE = 24_000
FRAME = 1_920  # 80 ms, the Mimi frame used by Moshi-family models

BABBLE_TEXT = (
    "Let me tell you about the weather this week. It will be sunny on Monday and cloudy on Tuesday. "
    "On Wednesday there may be some rain in the afternoon. Thursday looks bright and warm again. "
    "By the weekend the wind should calm down and the evenings will be pleasant."
)


class _Baseline(DuplexModel):
    capabilities: frozenset[str] = frozenset()

    def __init__(self, voice: str = "en-us+f3", max_batch: int = 64):
        self.voice = voice
        self.info = ModelInfo(type(self).name, RATE, RATE, FRAME, FRAME, max_batch, self.capabilities, weights=None)
        self._n = 0

    def load(self, device: str) -> None:
        self.tts = EspeakTTS(RATE)

    def open(self, streams: Sequence[StreamContext]) -> None:
        self._n = len(streams)
        self._t = 0

    def step(self, frames: np.ndarray) -> np.ndarray:
        out = self._render(self._t, frames.shape[0])
        self._t += FRAME
        return out

    def _render(self, t: int, batch: int) -> np.ndarray:
        raise NotImplementedError


class SilentModel(_Baseline):
    name = "silent"

    def _render(self, t: int, batch: int) -> np.ndarray:
        return np.zeros((batch, FRAME), np.float32)


class BabbleModel(_Baseline):
    name = "babble"

    def __init__(self, gap_s: float = 0.15, **kw):
        super().__init__(**kw)
        self.gap_s = gap_s

    def load(self, device: str) -> None:
        super().load(device)
        gap = np.zeros(round(self.gap_s * RATE), np.float32)
        parts = []
        for sentence in BABBLE_TEXT.split(". "):
            parts += [self.tts.synthesize(sentence, self.voice), gap]
        self._loop = np.concatenate(parts)

    def open(self, streams: Sequence[StreamContext]) -> None:
        super().open(streams)
        # each stream starts at its own seeded phase of the loop
        self._phase = np.array([np.random.default_rng(s.seed).integers(len(self._loop)) for s in streams])

    def _render(self, t: int, batch: int) -> np.ndarray:
        idx = (self._phase[:batch, None] + t + np.arange(FRAME)[None, :]) % len(self._loop)
        return self._loop[idx]


class OracleModel(_Baseline):
    name = "oracle"
    capabilities = frozenset({READS_SCHEDULE})

    def __init__(self, answer_delay_s: float = 0.5, stop_delay_s: float = 0.3, **kw):
        super().__init__(**kw)
        self.answer_delay = round(answer_delay_s * RATE)
        self.stop_delay = round(stop_delay_s * RATE)
        self._cache: dict[str, np.ndarray] = {}

    def _say(self, text: str) -> np.ndarray:
        if text not in self._cache:
            self._cache[text] = self.tts.synthesize(text, self.voice)
        return self._cache[text]

    def open(self, streams: Sequence[StreamContext]) -> None:
        super().open(streams)
        self._scenes = [s.scene for s in streams]
        self._tracks = [Track() for _ in streams]
        self._pending_q: list[dict[int, int]] = [{} for _ in streams]  # N4_Q turn -> answer start

    def observe(self, stream: int, placement: Placement) -> None:
        if placement.turn is None:
            return
        scene = self._scenes[stream]
        turn = scene.turns[placement.turn]
        if turn.label is Label.T:
            self._tracks[stream].add(placement.end + self.answer_delay, self._say(scene.gold_answer))
        elif turn.label is Label.N4_Q:
            self._pending_q[stream][placement.turn] = placement.end + self.answer_delay
        elif turn.label is Label.N4_R:
            start = self._pending_q[stream].pop(placement.turn - 1)
            stop = placement.start + self.stop_delay
            q = scene.turns[placement.turn - 1]
            clip = self._say(q.answer or "I think so, and here is a longer answer to keep talking for a while.")
            reps = -(-(stop - start) // len(clip))  # repeat the answer until the stop time
            self._tracks[stream].add(start, np.tile(clip, reps)[: stop - start])

    def _render(self, t: int, batch: int) -> np.ndarray:
        out = np.zeros((batch, FRAME), np.float32)
        for b in range(min(batch, self._n)):
            out[b] = self._tracks[b].render(t, FRAME)
        return out
