"""``cascade``: a CPU baseline that really listens (VAD endpointing -> ASR -> addressee rule -> TTS).

It decides from the room audio alone, so it shows a real explicit/implicit gap without a GPU:

1. **Endpointing**: causal Silero on its input (the harness's own
   :class:`~harness.vad.silero.StreamingDetector`, one row per stream) closes a human turn after
   ``endpoint_s`` of silence.
2. **ASR**: the offline recogniser of the scoring stage
   (:class:`~harness.scoring.asr.pocketsphinx.PocketsphinxASR`) transcribes the turn's first
   ``head_s`` (and the whole turn and the earlier ones only when it answers). Its
   vocabulary prior is what is said in the room (the turns' texts and the duty instruction,
   never the answer key), exactly as the scoring ASR gets it: a stand-in for a strong
   open-vocabulary recogniser. It declares ``vocabulary`` and gets that text as
   :attr:`StreamContext.vocabulary`; it does not declare ``reads_schedule``, so it never sees
   the script (no labels, targets, order, timing or answers).
3. **Addressee rule**: the turn is for the assistant when it says the assistant's name
   (``name``), or when it is a question (it starts with a question word) that begins within
   ``follow_up_s`` of the end of the assistant's last reply. The spoken duty instruction comes
   first: segments whose words are mostly the instruction's are not requests, until the first
   segment that is not.
4. **Reply**: it answers with the earlier turn (of the last ``context_turns``) that shares the
   most content words with the request ("I heard: ..."), spoken with espeak-ng, and says
   nothing while a reply is playing.

Explicit T turns name the assistant, implicit ones do not, so the cascade answers the first
and mostly misses the second: a known-direction gap, not a known score. It batches (every row
is independent), one stream per row, and a reply is queued with
:class:`~harness.models.base.OutputQueue`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from harness.models.base import VOCABULARY, DuplexModel, ModelInfo, OutputQueue, StreamContext

RATE = 24_000
FRAME = 1_920
QUESTION_START = frozenset(("what", "when", "where", "who", "whom", "whose", "which", "why", "how", "is", "are",
                            "was", "were", "do", "does", "did", "can", "could", "would", "will", "should", "have",
                            "has", "tell"))
STOPWORDS = frozenset(("the", "a", "an", "and", "or", "to", "of", "in", "on", "at", "for", "is", "are", "was", "were",
                       "it", "that", "this", "you", "i", "we", "me", "my", "your", "our", "do", "did", "does", "what",
                       "when", "where", "who", "which", "how", "why", "can", "could", "would", "will", "be", "have",
                       "has", "had", "so", "just", "about", "please", "again", "tell", "us", "know", "they", "he",
                       "she", "them", "his", "her", "with", "from", "there", "here", "oh", "okay", "yes", "no"))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


@dataclass
class _Listener:
    """One row's stream: what it heard and when it last spoke (samples on its own clock)."""

    vocabulary: list[str]
    duty: frozenset[str]
    audio: list[np.ndarray] = field(default_factory=list)
    t: int = 0  # samples heard
    segments_done: int = 0
    instructed: bool = False  # the spoken instruction is over (the first segment that is not part of it)
    turns: list[tuple[int, int]] = field(default_factory=list)  # the human turns so far, [start, end) samples
    transcripts: dict[int, list[str]] = field(default_factory=dict)  # full transcripts, made when needed
    reply_end: int | None = None  # sample at which its last reply ends

    def samples(self) -> np.ndarray:
        """Everything heard so far, ``float32[t]`` (the frames joined once, then kept joined)."""
        if len(self.audio) > 1:
            self.audio = [np.concatenate(self.audio)]
        return self.audio[0]


class CascadeModel(DuplexModel):
    """The listening cascade (see the module docstring).

    Args:
        name: the assistant's name it listens for (the benchmark's is Aria).
        voice: espeak-ng voice of its replies.
        endpoint_s: silence that closes a human turn, seconds.
        follow_up_s: a question starting within this many seconds after its reply ends is for it.
        duty_overlap: share of a segment's content words that must be the duty instruction's for
            it to be taken as part of the instruction (only before the first segment that is not).
        head_s: seconds at the start of a turn that are transcribed to decide whether it is for
            the assistant (the whole turn is transcribed only when it answers).
        context_turns: earlier turns its answer is looked up in.
        max_batch: rows one actor steps together.
        name_phones: pronunciations of ``name`` for the recogniser (ARPAbet).
    """

    def __init__(self, name: str = "Aria", voice: str = "en-us+f3", endpoint_s: float = 0.3,
                 follow_up_s: float = 3.0, duty_overlap: float = 0.6, max_batch: int = 16,
                 name_phones: tuple[str, ...] = ("EH R IY AH", "AA R IY AH"), head_s: float = 2.0,
                 context_turns: int = 6):
        self.name, self.voice, self.name_phones = name.lower(), voice, tuple(name_phones)
        self.head, self.context_turns = round(head_s * RATE), context_turns
        self.endpoint_s, self.follow_up, self.duty_overlap = endpoint_s, round(follow_up_s * RATE), duty_overlap
        self.info = ModelInfo("cascade", RATE, RATE, FRAME, FRAME, max_batch, frozenset({VOCABULARY}), weights=None)
        self._rows: list[_Listener | None] = [None] * max_batch
        self._fresh: set[int] = set()
        self._det = None

    def load(self, device: str) -> None:
        from harness.audio.tts.espeak import EspeakTTS
        from harness.scoring.asr.pocketsphinx import PocketsphinxASR
        from harness.vad.segments import SegmentRules
        from harness.vad.settings import VadSettings

        # espeak-ng says "Aria" as EH R IY AH, which the dictionary lacks (it has AA R IY AH: heard as "early");
        # frame downsampling (ds 2): about two thirds of the decoding time, at a small cost in accuracy
        self.tts = EspeakTTS(RATE)
        self.asr = PocketsphinxASR(pronunciations={self.name: list(self.name_phones)}, decoder_options={"ds": 2},
                                   cache_size=2 * self.info.max_batch)
        self._vad = VadSettings(rules=SegmentRules(min_speech_s=0.2, min_silence_s=self.endpoint_s))

    def open(self, row: int, stream: StreamContext) -> None:
        # the spoken instruction's words: the vocabulary's last text is the preamble's (StreamContext.vocabulary);
        # the cascade takes no text prompt, so StreamContext.duty_text is empty for it
        duty = stream.vocabulary[-1] if stream.vocabulary else ""
        self._rows[row] = _Listener(list(stream.vocabulary), frozenset(_words(duty)) - STOPWORDS)
        self._fresh.add(row)

    def close(self, row: int) -> None:
        self._rows[row] = None
        self._fresh.discard(row)

    def step(self, frames: np.ndarray) -> np.ndarray:
        from harness.vad.silero import StreamingDetector

        rows = frames.shape[0]
        if self._det is None or self._det.probs.n_streams != rows or self._fresh >= {
                b for b in range(rows) if self._rows[b] is not None}:
            # every open row is new (a new run): a fresh detector, input clock at 0
            self._det, self._queue = StreamingDetector(rows, RATE, self._vad), OutputQueue(rows, FRAME)
        elif self._fresh:
            self._det.reset(sorted(self._fresh))
            for b in self._fresh:
                self._queue.clear(b)
        self._fresh.clear()
        self._det.push(frames)
        for b in range(rows):
            lis = self._rows[b]
            if lis is None:
                continue
            lis.audio.append(frames[b].copy())
            lis.t += FRAME
            segs = self._det.segments(b)
            for start, end in segs[lis.segments_done:]:
                self._heard(b, lis, start, end)
            lis.segments_done = len(segs)
        return self._queue.take()

    def _transcribe(self, lis: _Listener, start: int, end: int) -> list[str]:
        return _words(self.asr.transcribe(lis.samples()[start:end], RATE, lis.vocabulary).text)

    def _heard(self, row: int, lis: _Listener, start: int, end: int) -> None:
        """A human turn ended at sample ``end``: decide from its first ``head_s`` whether it is for the
        assistant (the name, or a question right after its reply) and reply if so."""
        head = self._transcribe(lis, start, min(end, start + self.head))
        if not head:
            return
        content = set(head) - STOPWORDS
        if not lis.instructed:
            if lis.duty and len(content & lis.duty) >= self.duty_overlap * max(1, len(content)):
                return  # part of the spoken instruction, which comes first
            lis.instructed = True
        named = self.name in head
        follow_up = (head[0] in QUESTION_START and lis.reply_end is not None
                     and 0 <= start - lis.reply_end <= self.follow_up)
        speaking = lis.reply_end is not None and lis.reply_end > lis.t
        if (named or follow_up) and not speaking:
            request = set(self._transcribe(lis, start, end)) - STOPWORDS
            earlier = []
            for i in range(max(0, len(lis.turns) - self.context_turns), len(lis.turns)):
                if i not in lis.transcripts:
                    lis.transcripts[i] = self._transcribe(lis, *lis.turns[i])
                earlier.append(lis.transcripts[i])
            clip = self.tts.synthesize(self._answer(earlier, request), self.voice)
            self._queue.put(row, clip)
            lis.reply_end = lis.t + len(clip)
        lis.turns.append((start, end))

    def _answer(self, turns: list[list[str]], request: set[str]) -> str:
        """The earlier turn sharing the most content words with the request (ties: the latest)."""
        ask = request - {self.name}
        best, score = None, 0
        for words in turns:
            overlap = len((set(words) - STOPWORDS) & ask)
            if overlap >= score and overlap > 0:
                best, score = words, overlap
        return f"I heard: {' '.join(best)}." if best else "Sorry, I did not catch that."
