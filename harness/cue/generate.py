"""Offline generator of Duplex Cue conversations with known labels (spec section 9; design in
docs/formats.md, "Duplex Cue corpus").

Every conversation is scripted from templates, so the right response of every item is known
by construction. Speaker A tells a story (a topic's opening sentences, at least
``min_context_s`` of speech), and while A is in the middle of a sentence, inside one of A's
words, B comes in with a cue:

* **backchannel**: "mm-hm", "right", "yeah", ...;
* **collaboration**, one of three kinds in turn: *search* (A hesitates, "near the, uh, the",
  and B offers the word, "the lighthouse?"), *correction* (A says "on Friday morning", B says
  "Saturday."), *completion* (A says "took us about", B completes, "four hours?");
* **interruption**: a question or a change of topic that bids for the floor ("sorry, wait,
  did you lock the car?").

A's scripted response is exactly one of:

* **continued**: A goes on with its planned sentence without a break (over B's cue) and then
  its next sentences; for a collaboration A says its own words, never B's;
* **adapted**: A stops at the end of the word it was saying, waits until B's cue has ended,
  then acknowledges or takes it up ("oh right, the lighthouse,", "oh, sorry, Saturday, you're
  right,", "yes, I locked it, anyway,") and finishes its sentence and turn;
* **yielded**: A stops at the end of the word it was saying and stays silent; B goes on
  speaking and holds the floor for at least ``min_floor_s`` after its cue onset.

Each conversation is one recording with one cue. Words are synthesised one at a time (espeak-ng
through :class:`~harness.audio.tts.espeak.EspeakTTS`, which trims each clip's leading and
trailing silence; each distinct (voice, word) once per call) and placed on the timeline, so
every word's times are exact: a word's clip spans ``[start_s, end_s)``. The cue onset is put
at the loudest 20 ms of the middle of A's word, so A is audibly speaking at the onset; the
switch point (``lead_s`` before it) is inside the same word or just before it. The recording
runs at least ``window_s`` past the switch point (the continuation window), padded with
silence; both channels get a seeded room-tone floor (:class:`~harness.audio.room_tone.RoomTone`)
and are quantised to the 16-bit grid (:func:`harness.audio.io.quantize`), so a written corpus
reads back bit for bit. The same arguments give the same corpus.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.audio.io import quantize
from harness.audio.resample import resample
from harness.audio.room_tone import RoomTone, check_room_tone
from harness.audio.tts.espeak import EspeakSettings, EspeakTTS
from harness.cue.corpus import SAMPLE_RATE, CueCorpus, check_item, write_manifest
from harness.cue.schema import INTENTS, RESPONSES, SWITCH_LEAD_S, WINDOW_S, CueItem, Recording, Word

GENERATOR = "cue-templates-v2"  # v2: words keep their punctuation  # recorded in every item's and recording's meta
ESPEAK_RATE = 22_050  # espeak-ng's native rate: clips are placed at it, each channel resampled once
COLLAB_KINDS = ("search", "correction", "completion")

# the default response mix per intent (docs/formats.md): each intent mostly gets its typical
# response, and every response occurs for every intent
DEFAULT_MIX: dict[str, dict[str, float]] = {
    "backchannel": {"continued": 0.6, "adapted": 0.2, "yielded": 0.2},
    "collaboration": {"continued": 0.2, "adapted": 0.6, "yielded": 0.2},
    "interruption": {"continued": 0.2, "adapted": 0.2, "yielded": 0.6},
}


class Synthesizer(Protocol):
    """A TTS: ``synthesize(text, voice) -> float32[n]`` at ``sample_rate`` Hz, its clip trimmed
    of leading and trailing silence (:class:`EspeakTTS` is one)."""

    sample_rate: int

    def synthesize(self, text: str, voice: str) -> np.ndarray: ...


class CachingTTS:
    """Wraps a :class:`Synthesizer` so that each distinct (voice, text) is synthesised once; pass
    one instance to several :func:`generate_cue_corpus` calls to share its clips."""

    def __init__(self, tts: Synthesizer):
        self.tts, self.sample_rate = tts, tts.sample_rate
        self._clips: dict[tuple[str, str], np.ndarray] = {}

    def synthesize(self, text: str, voice: str) -> np.ndarray:
        key = (voice, text)
        if key not in self._clips:
            self._clips[key] = self.tts.synthesize(text, voice)
        return self._clips[key]


@dataclass(frozen=True)
class GeneratorSettings:
    """What shapes a generated corpus (all times in seconds).

    Attributes:
        voices: the espeak-ng voices of A and B (distinct).
        mix: ``{intent: {response: weight}}``; per intent the responses get exact quotas by
            largest remainder, at least one each where the weight is positive and the intent
            has enough items.
        lead_s, window_s: the switch point's lead and the continuation window (spec section 9).
        min_context_s: A's speech before its cue sentence, at least (the context the model is
            teacher-forced on).
        min_continuation_s: for continued and adapted, A's turn goes on at least this long
            after the cue onset.
        min_floor_s: for yielded, B speaks at least this long after its cue onset.
        word_gap_s, comma_pause_s, sentence_pause_s: silence after a word, a comma, a sentence.
        response_gap_s: for adapted, A resumes this long after B's cue ends.
        lead_in_s, tail_s: silence before A's first word and after the last speech or the
            window's end, whichever is later.
        room_tone, room_tone_dbfs: the noise floor under both channels (``zeros``, ``white``,
            ``pink``; :mod:`harness.audio.room_tone`).
        words_per_minute: espeak-ng's rate.
    """

    voices: tuple[str, str] = ("en-us+m1", "en-gb+f3")
    mix: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_MIX.items()})
    lead_s: float = SWITCH_LEAD_S
    window_s: float = WINDOW_S
    min_context_s: float = 4.0
    min_continuation_s: float = 6.0
    min_floor_s: float = 5.0
    word_gap_s: float = 0.03
    comma_pause_s: float = 0.15
    sentence_pause_s: float = 0.4
    response_gap_s: float = 0.2
    lead_in_s: float = 0.5
    tail_s: float = 0.5
    room_tone: str = "pink"
    room_tone_dbfs: float = -70.0
    words_per_minute: int = 175

    def check(self) -> None:
        """Raise ValueError on distinct-voice, mix or room-tone settings that cannot work."""
        if len(self.voices) != 2 or self.voices[0] == self.voices[1]:
            raise ValueError(f"voices must be two distinct voices (A, B), got {self.voices!r}")
        if set(self.mix) != set(INTENTS):
            raise ValueError(f"mix must give every intent ({', '.join(INTENTS)}), got {sorted(self.mix)}")
        for intent, weights in self.mix.items():
            bad = set(weights) - set(RESPONSES)
            if bad or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
                raise ValueError(f"mix[{intent!r}] must weigh responses of {', '.join(RESPONSES)} with non-negative "
                                 f"weights and a positive sum, got {dict(weights)}")
        check_room_tone(self.room_tone, self.room_tone_dbfs)


# -- the templates ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Collab:
    """A collaboration sentence: A says ``lead`` (the cue lands in its last word), B says ``cue``;
    continuing, A says ``own`` (its own words where B's would fit) then ``rest``; adapting, A
    takes up ``cue`` and says ``rest``."""

    lead: str
    cue: str
    own: str
    rest: str


@dataclass(frozen=True)
class Topic:
    """A's story: ``intro`` (before the cue sentence), ``plain`` cue sentences (backchannels and
    interruptions land in a middle word), one :class:`Collab` per kind, ``after`` (A's planned
    sentences after the cue sentence)."""

    name: str
    intro: tuple[str, ...]
    plain: tuple[str, ...]
    collab: dict[str, Collab]
    after: tuple[str, ...]


TOPICS: tuple[Topic, ...] = (
    Topic("lake trip",
          ("So last weekend we finally drove up to the lake.", "We had been planning that trip since the spring.",
           "My brother came along with his two kids."),
          ("We rented a small cabin right next to the water for three nights.",
           "The kids spent the whole first day swimming and catching little fish."),
          {"search": Collab("On the second day we hiked up to the, uh, the", "the waterfall?", "old fire tower",
                            "on top of the hill."),
           "correction": Collab("We left the city on Friday morning", "Saturday.", "",
                                "and got there just before lunch."),
           "completion": Collab("The drive up there took us about", "four hours?", "most of the day",
                                "because of the traffic.")},
          ("In the evening we made a fire and cooked dinner outside.", "It was cold, but nobody wanted to go inside.",
           "I think we will go back again next summer.")),
    Topic("new job",
          ("You know I started the new job on Monday.", "The office is on the other side of town.",
           "So I have to take two buses every morning."),
          ("My manager showed me around and introduced me to the whole team.",
           "They gave me a desk right next to the big window upstairs."),
          {"search": Collab("The woman who sits next to me is the, uh, the", "the designer?", "head of sales",
                            "for the whole region."),
           "correction": Collab("We have a team meeting every Tuesday afternoon", "Thursday.", "",
                                "and everyone has to bring a short report."),
           "completion": Collab("By the end of the first day I was completely", "exhausted?", "worn out",
                                "and went straight to bed.")},
          ("The work itself is not very hard so far.", "I mostly read documents and answer a few emails.",
           "Next week they want me to start on a real project.")),
    Topic("dinner party",
          ("We had some friends over for dinner on Saturday.", "I decided to cook everything myself this time.",
           "I started in the kitchen right after lunch."),
          ("First I made a big pot of soup with carrots and fresh ginger.",
           "Then I baked two loaves of bread from an old family recipe."),
          {"search": Collab("For the main course I made that dish with the, uh, the", "the lentils?",
                            "roasted peppers", "and a lot of garlic."),
           "correction": Collab("Eight people came in the end", "ten.", "", "so we had to borrow two more chairs."),
           "completion": Collab("For dessert we had a big chocolate", "cake?", "tart with cream",
                                "that my sister brought.")},
          ("Everyone stayed until almost midnight talking.", "The kitchen was a complete mess afterwards.",
           "We only finished cleaning it up the next morning.")),
    Topic("car trouble",
          ("My car broke down on the way to work yesterday.", "It just stopped in the middle of the road.",
           "Luckily there was a garage quite close by."),
          ("The mechanic looked at the engine for about ten minutes and shook his head.",
           "He said the part would have to come from a shop in another city."),
          {"search": Collab("He told me the problem was the, uh, the", "the battery?", "water pump",
                            "which had been leaking for weeks."),
           "correction": Collab("The repair is going to cost three hundred dollars", "four hundred.", "",
                                "which is more than I wanted to spend."),
           "completion": Collab("So for the rest of the week I have to take the", "train?", "bus to work",
                                "like everybody else.")},
          ("It takes almost an hour each way.", "But at least I can read a book on the way.",
           "The car should be ready again by Friday.")),
    Topic("garden",
          ("This year I finally started a vegetable garden.", "We cleared a small patch behind the house in March.",
           "My neighbor gave me some good advice about the soil."),
          ("I planted tomatoes and beans along the fence where the sun is strongest.",
           "Every evening I go out with a watering can and check on everything."),
          {"search": Collab("The only thing that keeps eating the leaves is the, uh, the", "the snails?",
                            "rabbits from the field", "next to our house."),
           "correction": Collab("The first tomatoes were ready in early June", "July.", "",
                                "and they tasted much better than the ones from the shop."),
           "completion": Collab("Next year I want to grow my own", "potatoes?", "herbs and onions", "as well.")},
          ("It is a lot of work, but I really enjoy it.", "It is the quietest part of my whole day.",
           "And the kids have started to help me on weekends.")),
    Topic("moving house",
          ("We are finally moving to the new apartment next month.", "We have been looking for almost half a year.",
           "The old place is just too small for the three of us."),
          ("The new one has a second bedroom and a small balcony facing the park.",
           "It is also much closer to the school and to my office."),
          {"search": Collab("The only problem with it is the, uh, the", "the stairs?", "noise from the street",
                            "in the early morning."),
           "correction": Collab("The moving company is coming on the fifth", "the sixth.", "",
                                "so we have to pack everything before then."),
           "completion": Collab("We still have to buy a new", "sofa?", "kitchen table",
                                "because the old one will not fit.")},
          ("I have already started packing the books.", "There are so many more boxes than I expected.",
           "I hope everything fits in one truck.")),
    Topic("football match",
          ("Did I tell you about the game on Sunday?", "Our team was playing against the best club in the league.",
           "Nobody expected us to win anything at all."),
          ("In the first half we were already losing by two goals to nothing.",
           "Then the coach changed three players and everything suddenly looked different."),
          {"search": Collab("The goal that changed everything was scored by the, uh, the", "the goalkeeper?",
                            "youngest player", "in the very last minute."),
           "correction": Collab("The final score was three to two", "three to one.", "",
                                "and the whole stadium was shouting."),
           "completion": Collab("When the final whistle blew we were all", "crying?", "jumping up and down",
                                "in the rain.")},
          ("We stayed in the stadium for another hour.", "Then we went to the cafe on the corner to celebrate.",
           "I lost my voice for two days after that.")),
    Topic("flight home",
          ("Our flight home from the holiday was a disaster.", "We got to the airport three hours early.",
           "And then they told us the plane was delayed."),
          ("We sat at the gate for most of the afternoon with nothing to eat.",
           "Every hour they moved the departure time a little bit later."),
          {"search": Collab("In the end they put us on a plane to the, uh, the", "the capital?", "wrong city",
                            "and we had to take a train."),
           "correction": Collab("We landed at two in the morning", "at four.", "",
                                "and there were no taxis anywhere."),
           "completion": Collab("By the time we got home we had been travelling for almost", "a whole day?",
                                "twenty hours", "without any sleep.")},
          ("The airline promised to pay us back for the tickets.", "We are still waiting for the money.",
           "Next time I think we will just take the train.")),
)

BACKCHANNELS = ("mm-hm", "right", "yeah", "uh-huh", "okay", "I see")
# (kind, B's cue, A's short answer when it adapts)
INTERRUPTIONS: tuple[tuple[str, str, str], ...] = (
    ("question", "Sorry, wait, did you lock the car?", "yes, I locked it"),
    ("question", "Hang on, what time is it now?", "almost six"),
    ("question", "Sorry, is that your phone ringing?", "no, that's not mine"),
    ("question", "Wait, did you call your mother back?", "yes, this morning"),
    ("topic_change", "Oh, before I forget, your sister called.", "oh, thanks"),
    ("topic_change", "Sorry, can we talk about tomorrow first?", "sure, in a minute"),
    ("topic_change", "Oh look, it's starting to rain outside.", "oh no"),
)
# A's acknowledgement when it adapts ({cue}: B's words without end punctuation; {answer})
ACKS: dict[str, tuple[str, ...]] = {
    "backchannel": ("yeah, exactly,", "right, I know,", "yes, yes,"),
    "search": ("oh right, {cue},", "yes, {cue}, that's it,"),
    "correction": ("oh, sorry, {cue}, you're right,", "sorry, I mean {cue},"),
    "completion": ("yes, {cue}, exactly,", "right, {cue},"),
    "interruption": ("{answer}, anyway,", "oh, {answer}, so anyway,"),
}
# B's sentences after its cue when A yields (B holds the floor), by intent or interruption kind
B_FLOOR: dict[str, tuple[str, ...]] = {
    "backchannel": ("I know exactly what you mean.", "The same thing happened to us last year.",
                    "We waited for hours and in the end nobody came.", "I still get angry when I think about it."),
    "collaboration": ("I remember that part really well.", "I was there too, and I told everyone about it afterwards.",
                      "It was the best part of the whole thing, if you ask me.", "We still talk about it at home."),
    "question": ("I really need to know that before we go.",
                 "The shop closes at seven and we still have nothing for dinner.",
                 "And I promised to pick up the kids on the way back.", "So let's sort that out first."),
    "topic_change": ("I think it's quite important, actually.", "She wants us to come over for lunch on Sunday.",
                     "I told her we would call her back tonight.", "So let's decide that now, before we forget."),
}

_END = re.compile(r"[.?!]$")
_PUNCT = ".,?!;:\""


# -- quotas ----------------------------------------------------------------------------------
def response_quotas(n: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split ``n`` items over responses by ``weights`` (largest remainder; ties in
    :data:`RESPONSES` order), then give every response of positive weight at least one item
    while ``n`` allows, taken from the largest quota. Returns ``{response: count}`` summing to ``n``."""
    total = sum(weights.values())
    exact = {r: n * weights.get(r, 0.0) / total for r in RESPONSES}
    out = {r: math.floor(v) for r, v in exact.items()}
    for r in sorted(RESPONSES, key=lambda r: (-(exact[r] - out[r]), RESPONSES.index(r)))[:n - sum(out.values())]:
        out[r] += 1
    for r in RESPONSES:
        if weights.get(r, 0.0) > 0 and out[r] == 0:
            donor = max(RESPONSES, key=lambda d: (out[d], -RESPONSES.index(d)))
            if out[donor] > 1:
                out[donor] -= 1
                out[r] += 1
    return out


def intent_quotas(n: int) -> dict[str, int]:
    """Balanced intents: ``n // 3`` each, the remainder to the first intents of :data:`INTENTS`."""
    return {intent: n // len(INTENTS) + (i < n % len(INTENTS)) for i, intent in enumerate(INTENTS)}


# -- placing words ---------------------------------------------------------------------------
class _Timeline:
    """One speaker's channel under construction at the TTS rate: words placed one after another."""

    def __init__(self, tts: Synthesizer, voice: str, s: GeneratorSettings):
        self.tts, self.voice, self.s = tts, voice, s
        self.rate = tts.sample_rate
        self.words: list[Word] = []
        self.clips: list[tuple[int, np.ndarray]] = []  # (start sample, clip)

    def say(self, text: str, start_s: float) -> float:
        """Place ``text`` word by word from ``start_s``; return where the next word may start (after
        the last word's pause)."""
        pos = round(start_s * self.rate)
        t = start_s
        for token in text.split():
            clip = self.tts.synthesize(token, self.voice)
            self.clips.append((pos, clip))
            # the word keeps its punctuation, as a punctuated transcript has it (the mid-sentence rule reads it)
            self.words.append(Word(token.strip('"'), pos / self.rate, (pos + len(clip)) / self.rate))
            pause = (self.s.sentence_pause_s if _END.search(token) else
                     self.s.comma_pause_s if token[-1] in ",;:" else self.s.word_gap_s)
            pos += len(clip) + round(pause * self.rate)
            t = pos / self.rate
        return t

    @property
    def end_s(self) -> float:
        return self.words[-1].end_s if self.words else 0.0

    def render(self, n: int) -> np.ndarray:
        x = np.zeros(n, np.float32)
        for pos, clip in self.clips:
            x[pos:pos + len(clip)] += clip
        return x


def _onset_in(word: Word, clip: np.ndarray, rate: int) -> float:
    """The cue onset inside A's ``word`` (spoken as ``clip`` at ``rate`` Hz): the start of the
    loudest 20 ms frame within the middle of the word (20-70 % of its length), so that A is
    audibly speaking there. Returns seconds on the timeline."""
    frame, n = round(0.02 * rate), len(clip)
    lo, hi = n // 5, n * 7 // 10 - frame
    if hi <= lo:
        return word.start_s + lo / rate
    starts = np.arange(lo, hi + 1, max(1, frame // 4))
    energy = [float(np.sum(clip[i:i + frame] ** 2)) for i in starts]
    return word.start_s + int(starts[int(np.argmax(energy))]) / rate


# -- the generator ---------------------------------------------------------------------------
def generate_cue_corpus(n_items: int, seed: int, tts: Synthesizer | None = None,
                        settings: GeneratorSettings | None = None, id_prefix: str = "gen") -> CueCorpus:
    """Generate ``n_items`` scripted conversations, one cue each, with known labels.

    Intents are balanced (:func:`intent_quotas`); responses per intent follow ``settings.mix``
    (:func:`response_quotas`); collaborations cycle through :data:`COLLAB_KINDS`; the order of
    the items, topics and cue words are drawn from ``random.Random(seed)``. Every item is
    checked with :func:`harness.cue.corpus.check_item`.

    Args:
        n_items: number of items (and recordings), >= 1.
        seed: the corpus seed; the same arguments give the same corpus, bit for bit.
        tts: the synthesiser (default: :class:`EspeakTTS` at espeak-ng's native
            :data:`ESPEAK_RATE`; each channel is resampled once to :data:`SAMPLE_RATE`), wrapped
            in a :class:`CachingTTS` unless it is one.
        settings: :class:`GeneratorSettings`.
        id_prefix: recording ids are ``<prefix>-<seed>-<index:04d>``, item ids that plus ``-cue``.

    Returns:
        :class:`CueCorpus`: recordings (with ``a_words``/``b_words``), audio ``float32[2, n]`` at
        24 kHz (row 0 = A, row 1 = B), items (``label`` set), ``problems == []``.

    Raises:
        ValueError: ``n_items < 1`` or bad settings.
        harness.audio.tts.espeak.SynthesisError: espeak-ng is missing or fails.
    """
    s = settings or GeneratorSettings()
    s.check()
    if n_items < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items}")
    tts = tts or EspeakTTS(ESPEAK_RATE, EspeakSettings(words_per_minute=s.words_per_minute))
    tts = tts if isinstance(tts, CachingTTS) else CachingTTS(tts)
    rng = random.Random(seed)
    plan: list[tuple[str, str]] = []  # (intent, response)
    for intent, k in intent_quotas(n_items).items():
        for response, m in response_quotas(k, s.mix[intent]).items():
            plan += [(intent, response)] * m
    rng.shuffle(plan)
    topics = list(TOPICS)
    rng.shuffle(topics)
    n_collab = 0
    recordings, audio, items = [], {}, []
    for i, (intent, response) in enumerate(plan):
        kind = None
        if intent == "collaboration":
            kind, n_collab = COLLAB_KINDS[n_collab % len(COLLAB_KINDS)], n_collab + 1
        rid = f"{id_prefix}-{seed}-{i:04d}"
        rec, x, item = _conversation(rid, topics[i % len(topics)], intent, kind, response, rng, tts, s, seed, i)
        check_item(item, rec, s.lead_s, s.window_s)
        recordings.append(rec)
        audio[rid] = x
        items.append(item)
    return CueCorpus(recordings, audio, items, [])


def _conversation(rid: str, topic: Topic, intent: str, kind: str | None, response: str, rng: random.Random,
                  tts: Synthesizer, s: GeneratorSettings, seed: int,
                  index: int) -> tuple[Recording, np.ndarray, CueItem]:
    """One recording and its cue item (see the module docstring for the script)."""
    a, b = (_Timeline(tts, v, s) for v in s.voices)
    t = s.lead_in_s
    for sentence in topic.intro:  # A's context: whole sentences until min_context_s
        t = a.say(sentence, t)
        if a.end_s - s.lead_in_s >= s.min_context_s:
            break
    else:
        raise ValueError(f"topic {topic.name!r}: its intro is shorter than min_context_s={s.min_context_s} s")
    # the cue sentence: A says `lead`, the cue lands in its last word
    answer = None
    if intent == "collaboration":
        c = topic.collab[kind]
        lead, own, rest, cue_text = c.lead, c.own, c.rest, c.cue
    else:
        words = rng.choice(topic.plain).split()
        k = rng.randrange(3, len(words) - 3)  # a middle word: A is mid-sentence
        lead, own, rest = " ".join(words[:k + 1]), "", " ".join(words[k + 1:])
        if intent == "backchannel":
            kind, cue_text = "backchannel", rng.choice(BACKCHANNELS)
        else:
            kind, cue_text, answer = rng.choice(INTERRUPTIONS)
    t = a.say(lead, t)
    onset_word = a.words[-1]
    onset = _onset_in(onset_word, a.clips[-1][1], a.rate)
    after_cue = b.say(cue_text, onset)
    cue_words = tuple(b.words)
    a_stop = onset_word.end_s  # A's speech at the cue onset ends with this word unless it continues
    if response == "yielded":
        for sentence in B_FLOOR[kind if intent == "interruption" else intent]:  # B takes the floor
            if b.end_s - onset >= s.min_floor_s:
                break
            after_cue = b.say(sentence, after_cue)
    else:
        if response == "continued":
            t = a.say(f"{own} {rest}".strip(), t)
        else:
            ack = rng.choice(ACKS[kind if intent == "collaboration" else intent])
            ack = ack.format(cue=cue_text.rstrip(_PUNCT).lower(), answer=answer)
            t = a.say(f"{ack} {rest}", max(a_stop, cue_words[-1].end_s) + s.response_gap_s)
        for sentence in topic.after:
            if a.end_s - onset >= s.min_continuation_s:
                break
            t = a.say(sentence, t)
    if b.end_s - onset < (s.min_floor_s if response == "yielded" else 0) or (
            response != "yielded" and a.end_s - onset < s.min_continuation_s):
        raise ValueError(f"topic {topic.name!r}: its script is too short for the minimum durations in {s}")
    switch = max(0.0, onset - s.lead_s)
    end_s = max(a.end_s, b.end_s, switch + s.window_s) + s.tail_s
    n_tts = math.ceil(end_s * a.rate)
    x = resample(np.stack([a.render(n_tts), b.render(n_tts)]), a.rate, SAMPLE_RATE)
    for ch in range(2):
        seq = np.random.SeedSequence([seed, index, ch]).generate_state(1)[0]
        x[ch] += RoomTone(s.room_tone, s.room_tone_dbfs, int(seq), SAMPLE_RATE).read(x.shape[1])
    x = quantize(x)
    meta = {"generator": GENERATOR, "seed": seed, "index": index}
    rec = Recording(rid, SAMPLE_RATE, x.shape[1], tuple(a.words), tuple(b.words),
                    {**meta, "voices": {"A": s.voices[0], "B": s.voices[1]},
                     "settings": {k: v for k, v in asdict(s).items() if k not in ("voices", "mix")}})
    item = CueItem(f"{rid}-cue", rid, intent, cue_words, onset, a.end_s if response != "yielded" else a_stop,
                   response, {**meta, "topic": topic.name, "kind": kind, "a_stop_s": a_stop})
    return rec, x, item



def main(argv: list[str] | None = None) -> int:
    """``python -m harness.cue.generate --n-items 24 --seed 0 --out DIR``: generate a corpus, write
    it with :func:`harness.cue.corpus.write_manifest` and print one JSON line (the manifest's
    path, the counts per intent and label, the generation time)."""
    ap = argparse.ArgumentParser(prog="python -m harness.cue.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-items", type=int, default=24, help="conversations (one cue each)")
    ap.add_argument("--seed", type=int, default=0, help="corpus seed")
    ap.add_argument("--out", type=Path, required=True, help="output folder (manifest.jsonl, audio/)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    corpus = generate_cue_corpus(args.n_items, args.seed)
    gen_s = time.perf_counter() - t0
    path = write_manifest(corpus, args.out)
    counts: dict[str, dict[str, int]] = {i: dict.fromkeys(RESPONSES, 0) for i in INTENTS}
    for item in corpus.items:
        counts[item.intent][item.label] += 1
    print(json.dumps({"manifest": str(path), "n_items": len(corpus.items), "labels": counts,
                      "audio_s": round(sum(r.duration_s for r in corpus.recordings), 1),
                      "generate_s": round(gen_s, 2), "write_s": round(time.perf_counter() - t0 - gen_s, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
