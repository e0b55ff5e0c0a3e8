"""Deterministic template generator of Duplex-MPE scene pairs (spec section 2).

No language model and no network: every scene is assembled from the vocabularies of
:mod:`harness.scenes.vocab` with one ``random.Random(seed)``, so the same arguments always
give the same corpus.

A scene draws its five attributes (setting, activity, relationship, device context,
register), gives its speakers first names, states a fact before T (the *support* turn, which
contains the gold answer verbatim, never the turn right before T) and later asks Aria for that fact
(the T turn). Silence turns are N1 (mention Aria, ask nothing), N2 (to a person, to the room, or to
another assistant when the device context has one) and N3 (self-talk, including words to an object:
"Come on, jar, open up" is not device-directed). Some pairs get one or two N4 events (N4_Q then
N4_R) after T.

Conversation. Pairs of adjacent N2 slots become a question (to a person or to the room) and
its answer by the next speaker, which states another fact of the setting, or asks again for one
the next speaker said earlier (who said it answers); a question rarely says a name
(:data:`VOCATIVE_P`: the one who answers is the addressee); the turn after a question starts as a
reply. Other N2 turns are the setting's lines or news (a fact of the setting said to everyone, or
told to a person, until the scene has one for each of its N4 questions). N3 turns often wonder
aloud, to no one: "I wonder when the ferry is now.", "Hmm, what was the gate code again?", with the
openers, reasons, closers and tails that address no listener. The setting, activity, relationship
and register shape the lines (a question's opener is the register's or, a little more often, one of
wondering aloud, which addresses no one: so that muttered questions are no N3 tell); values fit what
they measure and the setting (:data:`~harness.scenes.vocab.FITS`), device contexts fit the setting; a
scene gives a thing one value and a value to one thing. An N4 question asks for a fact another
person said earlier (not in the turn before it) or a general-knowledge one. Nobody asks for what
they said themselves, and no question names who said the fact (asking Aria what a person in the
room said would point at that person).

Who N1 / N2 turns address (spec section 6's breakdown; the profile's ``silence_mix``, the paper's
figures read as windows per condition, docs/corpus.md): exact corpus-wide counts, placed before
any text (:func:`_place_devices`, :func:`_place_humans`). Device-directed turns (2,570 per
20,360 silence windows) are commands to the scene's device or assistant (``device_share`` of the
scenes have one, fitting the setting), spread evenly over those scenes; human-directed turns
(2,134) are the relay turn, questions to a person with their answers, and turns that name a person
(N2 lines to a person, N1 lines said to someone, a fact told to someone, "no idea, Sam"); the rest
of N1 / N2 are statements to the room. The text of each turn is made for its target.

Two profiles (``profile=``):

* ``compact`` (the demo and the tests): 7-13 turns of one sentence each (a question may give its
  reason first). A late-middle T
  leaves room for one N4 event only.
* ``paper`` (``conf/scenes/paper.yaml``): the paper's accounting. Per corpus, exact quotas
  scaled from the paper's 2,000 pairs: the silence windows (20,360 = 3,041 N1 + 14,052 N2 +
  3,267 N3 per condition), the N4 events (1,911 over 968 scenes: 25 scenes with one event,
  the rest with two; scenes are long enough for two events wherever T sits), the pairs whose
  previous turn is rewritten (42). Turns get a tail sentence where the running mean needs it
  so that a conversation holds about 95 s of speech at the paper's speaking rate
  (:data:`CHARS_PER_S`), and T texts are steered to the paper's mean lengths (111.6 explicit,
  123.3 implicit characters).

Both profiles: the 3-party / 4-party split and the N4 scenes are exact quotas
(``round(share * n_pairs)`` pairs) placed at random; T position buckets (thirds of the scene by
turn index: :func:`t_bucket`) cycle over pairs, which gives 667 / 667 / 666 for 2,000 pairs.

No surface tells (issue 22). Every question turn, T or not, is made the same way
(:func:`_ask_candidates`, :func:`_question`): an opener, reason clauses (as many as an implicit T
gives), a question frame of the fact kinds (general knowledge included, :data:`~harness.scenes.vocab.TRIVIA`,
which T may ask too), a closer and, in the paper profile, tail sentences; the length steered to
the implicit T's. The explicit T says "Aria" where a question to a person may say the person's name;
the implicit T says no name and may give one more reason. N4_Q names Aria only sometimes
(:data:`N4_NAME_P`, both versions alike): like T, it is a request to the assistant by context.
Retractions ("oh, never mind, I remember now") are said in N4_R, N3 self-talk and N1 turns; a
general-knowledge question is asked in N4_Q, T, questions to people and wondering aloud; no
phrase of theirs is one label's.

Implicit addressing. What makes the implicit T a request to the assistant is the conversation
before it (the same in both versions), one of (``implicit_cue``): *keeper*, an N1 turn gave Aria
the job of keeping track of the topic by name; *holder*, the fact itself came from Aria (the
support turn is an N1 turn reporting what Aria said); *unknown*, an N1 turn says Aria follows the
conversation and, right before T, the asker asks a person, who says they do not know (never the
one who stated the fact; in a tiny paper-profile corpus whose turn limits leave no room for that,
such a pair takes the *keeper* cue). Who stated the fact never asks T, and nobody asks it for the
asker before T. In the *relay* pairs (the paper's 42) the previous turn tells the asker "ask
Aria about the ferry"; the implicit version rewrites it without the name ("ask the speaker about
the ferry", as people say it), N1 in both versions, except in the profile's ``relabelled_pairs``
(paper: 2), whose implicit rewrite has the person say they do not know (N2 to the asker: the
paper's 3,041 / 3,039 N1 and 14,052 / 14,054 N2 windows; an earlier N1 turn says Aria follows the
talk). The N4-edited pairs (the paper's 339 with other differences, less the 42 rewrites) name Aria
in the explicit version's N4 turns and drop the name in the implicit one; ``unequal_pairs`` of them
(paper: 16) instead lack their last N4 event in one version, the explicit one in half of them, so
that each condition keeps the paper's N4 count (1,911) and 968 scenes with N4 events.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from harness.scenes import vocab as V
from harness.scenes.diagnostic import PAPER_SILENCE_BY_TYPE, PAPER_T_ONSET, TURN_GAP_S
from harness.scenes.schema import (
    ASSISTANT_NAME,
    CONDITIONS,
    SPEAKERS,
    Label,
    Scene,
    SceneError,
    Target,
    Turn,
    validate_pair,
)
from harness.scenes.stats import CHARS_PER_S, corpus_stats

T_POSITIONS: tuple[str, ...] = ("early-middle", "middle", "late-middle")
MIN_TURNS, MAX_TURNS = 7, 13  # the compact profile

# the paper's accounting (spec section 2), per 2,000 pairs and per condition
PAPER_PAIRS = 2000
PAPER_SILENCE = {"N1": 3041, "N2": 14052, "N3": 3267}  # explicit; implicit 3,039 / 14,054 / 3,267
PAPER_N4_SCENES, PAPER_N4_EVENTS = 968, 1911
PAPER_REWRITES = 42
PAPER_N4_EDITS = 339 - 42  # pairs with other differences than T after the N4 edits, less the rewrites
PAPER_UNEQUAL = 16  # of those, pairs with unequal turn counts (an N4 event in one version only)
PAPER_RELABELLED = 2  # relay pairs whose rewritten turn is N2 (N1 3,041 / 3,039 and N2 14,052 / 14,054)
PAPER_T_CHARS = {"explicit": 111.6, "implicit": 123.3}
# the paper's silence breakdown (spec section 6) read as windows per condition (docs/corpus.md):
# device-directed 2,570, human-directed 2,134 (statements 12,389 and self-talk 3,267 are the rest)
PAPER_SILENCE_MIX = (PAPER_SILENCE_BY_TYPE["device_directed"], PAPER_SILENCE_BY_TYPE["human_directed"])
DEVICE_P = 0.8  # share of scenes with another device or assistant present (each fits the setting)
PAPER_SPEECH_S = 105.55 * 3600 / 4000  # human speech per conversation (95.0 s; 99.8 s with the 0.4 s gaps)

CUE_FAMILIES: tuple[str, ...] = ("keeper", "holder", "unknown")
CUE_WEIGHTS: tuple[float, ...] = (0.3, 0.3, 0.4)
CUE_BEFORE = {"relay": 2, "keeper": 2, "holder": 2, "unknown": 4}  # turns T needs before it
ASK_P = 1.0  # chance that two adjacent N2 slots become a question to a person and that person's answer
VOCATIVE_P = 0.05  # chance that a question to a person names them (else the one who answers is addressed)
SELF_QUESTION_P = 0.7  # chance that an N3 turn wonders aloud about a fact
GENERIC_QUESTION_P = 0.1  # share of the setting's question lines to people kept (fact questions are asked instead)
N4_SCENE_P = 0.9  # chance that an N4 question asks for a fact said earlier (else general knowledge)
REASK_P = 0.4  # chance that a question to a person or the room asks again for something said earlier
ROOM_LINE_P = 0.15  # chance that a plain N2 turn to the room is one of the setting's lines (else news)
N4_NAME_P = 0.1  # chance that an N4 turn names Aria (both versions alike; the N4-edited pairs' explicit one always)
TRIVIA_P = 0.05  # chance that a question to a person, or wondering aloud, asks general knowledge (as N4 may)
RETRACT_P = 0.15  # chance that a self-question or an N1 turn is taken back ("oh, never mind"), as N4_R may be


@dataclass(frozen=True)
class Profile:
    name: str
    min_turns: int
    max_turns: int
    exact_silence: bool  # silence windows per pair as in the paper (else: turn count drawn uniformly)
    tails: bool  # lengthen turns towards the paper's speech per conversation
    # N1-N2 windows per 20,360 silence windows (the rest of N1-N2 are statements; N3 is self-talk):
    # device-directed (N2 to another device) and human-directed (N1 / N2 to a person); docs/corpus.md
    silence_mix: tuple[int, int] = (0, 0)
    device_share: float = DEVICE_P  # share of scenes with another device or assistant in the room
    # per 2,000 pairs: pairs whose N4 edit leaves one version with one N4 event fewer (half of them
    # the explicit one, so each condition keeps the paper's N4 count), and relay pairs whose
    # implicit rewrite becomes N2 (the paper's 3,041 / 3,039 N1 windows); docs/corpus.md
    unequal_pairs: int = 0
    relabelled_pairs: int = 0


PROFILES: dict[str, Profile] = {
    "compact": Profile("compact", MIN_TURNS, MAX_TURNS, exact_silence=False, tails=False,
                       silence_mix=PAPER_SILENCE_MIX),
    "paper": Profile("paper", 8, 22, exact_silence=True, tails=True, silence_mix=PAPER_SILENCE_MIX,
                     unequal_pairs=PAPER_UNEQUAL, relabelled_pairs=PAPER_RELABELLED),
}


def t_bucket(t_index: int, n_turns: int) -> str:
    """Return the T position bucket of a T turn at ``t_index`` in a scene of ``n_turns`` turns.

    The buckets of spec section 2 are the thirds of the scene by turn index:
    ``"early-middle"`` when ``3 * t_index // n_turns == 0``, ``"middle"`` for 1 and
    ``"late-middle"`` for 2. Raises ``ValueError`` when ``t_index`` is not in ``[0, n_turns)``.
    """
    if not 0 <= t_index < n_turns:
        raise ValueError(f"t_index {t_index} outside a scene of {n_turns} turns")
    return T_POSITIONS[3 * t_index // n_turns]


def _need_after(n4: int) -> int:
    return max(2, 1 + 2 * n4)  # T is followed by >= 2 turns; an N4_Q never right after T


@cache
def _t_options(n: int, bucket: str, n4: int, before: int) -> tuple[int, ...]:
    """T indices that fit a scene of ``n`` turns: the bucket, ``before`` turns before T (the fact,
    and the keeper or relay turn), the N4 events after it and at least 3 silence turns."""
    if n - 1 - 2 * n4 < 3:
        return ()
    return tuple(t for t in range(max(1, before), n)
                 if t_bucket(t, n) == bucket and n - 1 - t >= _need_after(n4))


def _feasible(profile: Profile, bucket: str, n4: int, before: int) -> list[int]:
    return [n for n in range(profile.min_turns, profile.max_turns + 1) if _t_options(n, bucket, n4, before)]


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _join(*parts: str) -> str:
    """Join parts with spaces, capitalising a part unless it follows a comma or a colon."""
    out = ""
    for part in filter(None, parts):
        if not out.endswith((",", ":")):
            part = _cap(part)
        out = f"{out} {part}" if out else part
    return out


# -- facts: question types whose answer an earlier turn states ---------------------------------
@dataclass(frozen=True)
class _Fact:
    kind: str
    statement: str  # what the teller says (lower-case start, ends with "."); contains the value
    plain: str  # the same fact as a plain clause a report can carry ("the ferry is on Tuesday at nine")
    frames: tuple[str, ...]  # questions asking for it: lower-case start, end with "?"
    topic: str
    gold: str
    wonders: tuple[str, ...] = ()  # wondering about it aloud (self-talk), asking no one: end with "."


# fact kind -> (how the teller says it, the same as a plain clause, how it is asked for); {thing} the
# event or item, {x} the value, {what} what a count counts
_FACT_TEXTS: dict[str, tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    "time": (("{thing} got moved to {x}.", "{thing} is on {x} now, they just confirmed it.",
              "heads up, {thing} is {x} this week.", "they told me {thing} is {x}."),
             "{thing} is on {x}",
             ("when is {thing} now?", "what day and time is {thing}?", "what time is {thing} again?",
              "when was {thing} moved to?")),
    "place": (("{thing} is {x}, by the way.", "I put {thing} {x}.", "if anyone needs {thing}, it's {x}."),
              "{thing} is {x}",
              ("where is {thing}?", "where can I find {thing}?", "where did {thing} end up?")),
    "count": (("we need {x} for {thing}.", "for {thing} we have to bring {x}.", "count on {x} for {thing}, no more."),
              "we need {x} for {thing}",
              ("how many {what} do we need for {thing}?", "how many {what} was it for {thing}?")),
    "price": (("{thing} cost {x} in the end.", "I paid {x} for {thing}.", "{thing} came to {x}."),
              "{thing} cost {x}",
              ("how much did {thing} cost?", "what did {thing} come to?")),
    "person": (("{thing} is called {x}.", "{thing}'s name is {x}, remember that.",
                "oh, and {thing} is {x}, I met them yesterday."),
               "{thing} is called {x}",
               ("what's the name of {thing}?", "who is {thing} again?")),
    "duration": (("it takes {x} for {thing}.", "plan on {x} for {thing}.", "they said {x} for {thing}."),
                 "it takes {x} for {thing}",
                 ("how long does it take for {thing}?", "how long was it for {thing}?")),
    "code": (("{thing} is {x}.", "write this down, {thing} is {x}.", "{thing} changed, it's {x} now."),
             "{thing} is {x}",
             ("what is {thing}?", "what was {thing} again?")),
    "room": (("{thing} is {x}.", "they moved {thing}, it's {x} now.", "{thing} will be {x} this time."),
             "{thing} is {x}",
             ("where is {thing}?", "where is {thing} this time?")),
}

# fact kind -> how a person wonders about it aloud (self-talk: no listener, no question put to anyone)
_WONDERS: dict[str, tuple[str, ...]] = {
    "time": ("I wonder when {thing} is now.", "I can't remember what time {thing} is.",
             "I need to check when {thing} is again."),
    "place": ("I wonder where {thing} ended up.", "I can't remember where {thing} is.",
              "I wonder where {thing} went."),
    "count": ("I can't remember how many {what} we need for {thing}.", "I wonder how many {what} it was for {thing}."),
    "price": ("I can't remember what {thing} cost.", "I wonder how much {thing} came to."),
    "person": ("I keep forgetting the name of {thing}.", "I can't remember who {thing} is."),
    "duration": ("I can't remember how long it takes for {thing}.", "I wonder how long it takes for {thing}."),
    "code": ("I keep forgetting {thing}.", "I can't remember {thing} for the life of me."),
    "room": ("I can't remember where {thing} is this time.", "I wonder where {thing} is now."),
    "trivia": ("I always forget that one about {thing}.", "I can never remember the thing about {thing}."),
}


def _trivia(q: str, statement: str) -> _Fact:
    """The general-knowledge fact that N4 question ``q`` asks for, said as ``statement``."""
    gold, thing = V.TRIVIA[q]
    return _Fact("trivia", statement, statement[:-1], (q,), thing, gold,
                 tuple(x.format(thing=thing) for x in _WONDERS["trivia"]))


def _draw(rng: random.Random, setting: V.Setting, kind: str) -> tuple[str, str, str]:
    """The thing a fact of ``kind`` is about, its value (drawn for what it measures) and, for a
    count, what is counted."""
    if kind == "time":
        return rng.choice(setting.events), f"{rng.choice(V.DAYS)} {rng.choice(V.TIMES)}", ""
    if kind == "count":
        thing, what = rng.choice(setting.events), rng.choice(V.COUNTABLES)
        return thing, f"{rng.choice(V.COUNTS)} {what}", what
    def fit(pool: Iterable[str]) -> list[str]:  # the things or values that fit the setting (vocab.FITS)
        return [x for x in pool if setting.name in V.FITS.get(x, (setting.name,))]

    if kind in ("price", "duration"):  # values that depend on the thing
        values = V.PRICED_PRICES if kind == "price" else V.PROCESS_DURATIONS
        thing = rng.choice(fit(sorted(values)))
        return thing, rng.choice(values[thing]), ""
    things, golds = {"place": (setting.items, V.PLACES), "person": (V.PEOPLE_ROLES, V.FULL_NAMES),
                     "code": (V.CODED, V.CODES), "room": (V.ROOMED, V.ROOMS)}[kind]
    return rng.choice(fit(things)), rng.choice(fit(golds)), ""


def _fact(rng: random.Random, setting: V.Setting, avoid: str = "", taken: set[str] | None = None,
          trivia: bool = True) -> _Fact:
    """A fact of ``setting`` (kind other than ``avoid``; neither its topic nor its value in ``taken``,
    which then holds them too: a scene gives a thing one value, and a value to one thing): what is
    said, how it is asked for, the value (the gold answer when T asks for it). ``trivia``: the kind
    may be general knowledge (:data:`~harness.scenes.vocab.TRIVIA`: what an N4 question may ask)."""
    taken = set() if taken is None else taken
    kinds = [k for k in (*_FACT_TEXTS, "trivia") if k != avoid and (trivia or k != "trivia")]
    while True:
        kind = rng.choice(kinds)
        if kind == "trivia":  # stated as the N4 answer says it; asked as the N4 question asks it
            q, answer, _ = rng.choice(V.N4_EVENTS)
            f = _trivia(q, _decap(answer))
            if not {f.topic, f.gold} & taken:
                taken |= {f.topic, f.gold}
                return f
            continue
        thing, gold, what = _draw(rng, setting, kind)
        if not {thing, gold} & taken:
            taken |= {thing, gold}
            break
    says, plain, asks = _FACT_TEXTS[kind]
    return _Fact(kind, rng.choice(says).format(thing=thing, x=gold), plain.format(thing=thing, x=gold),
                 tuple(x.format(thing=thing, what=what) for x in asks), thing, gold,
                 tuple(x.format(thing=thing, what=what) for x in _WONDERS[kind]))


# -- steering: keep running means on the paper's targets ---------------------------------------
class _Steer:
    """Choose among random candidates the one that moves a running mean towards its target
    (two random candidates, the closer wins: the mean converges, the texts stay varied)."""

    def __init__(self, target: float):
        self.target, self.total, self.count = target, 0.0, 0

    def pick(self, rng: random.Random, candidates: list[Any], k: int = 2) -> Any:
        """The best of ``k`` random ``candidates`` (strings, or tuples whose first item is the text)."""
        def size(c):
            return (len(c[0] if isinstance(c, tuple) else c))
        best = min((rng.choice(candidates) for _ in range(k)),
                   key=lambda c: abs((self.total + size(c)) / (self.count + 1) - self.target))
        self.add(size(best))
        return best

    def add(self, value: float, weight: float = 1.0) -> None:
        self.total += value * weight
        self.count += weight


@dataclass
class _Plan:
    """One pair's layout, decided corpus-wide before any text."""

    bucket: str
    n_speakers: int
    n4: int
    relay: bool
    cue: str  # implicit cue family ("relay" for relay pairs)
    n4_edit: bool = False  # the implicit version's N4 turns follow up without the name (the paper's N4 edits)
    drop: str = ""  # the condition whose version lacks this pair's last N4 event (unequal turn counts)
    relabel: bool = False  # relay pair whose implicit rewrite says the people do not know (N2, no assistant)
    onset_s: float = 0.0  # paper profile: the seconds from the first turn to T this pair aims at
    n: int = 0
    t: int = 0
    n1: int = 1
    n3: int = 1
    device: bool = False  # another device or assistant is present (device-directed N2 turns possible)
    kinds: list[str] = dataclasses.field(default_factory=list)  # every turn's kind (_layout)
    human: frozenset[int] = frozenset()  # turns addressed to a person (the other N1 / N2 turns: the room)

    @property
    def before(self) -> int:  # turns T needs before it: the fact and the cue turns (never T as turn 2)
        return CUE_BEFORE[self.cue] + self.relabel


def _plan_corpus(rng: random.Random, n_pairs: int, four_party_share: float, n4_share: float,
                 profile: Profile) -> list[_Plan]:
    four_party = set(rng.sample(range(n_pairs), round(four_party_share * n_pairs)))
    with_n4 = rng.sample(range(n_pairs), round(n4_share * n_pairs))
    n_events = round(len(with_n4) * PAPER_N4_EVENTS / PAPER_N4_SCENES)
    unequal = 2 * min(round(profile.unequal_pairs * n_pairs / PAPER_PAIRS / 2), (2 * len(with_n4) - n_events) // 3)
    # each condition loses unequal / 2 events: plan that many more, in pairs with two events
    single = set(with_n4[: 2 * len(with_n4) - n_events - unequal // 2])  # random order: the first get one
    n4_of = {i: 1 if i in single else 2 for i in with_n4}
    relays = set(rng.sample(range(n_pairs), min(n_pairs, round(PAPER_REWRITES * n_pairs / PAPER_PAIRS))))
    edits = set(rng.sample(sorted(set(with_n4) - relays),
                           min(len(set(with_n4) - relays), round(PAPER_N4_EDITS * n_pairs / PAPER_PAIRS))))
    drops: dict[int, str] = {}
    if unequal:  # some N4 edits leave one version with an event fewer, the explicit one in half of them
        doubles = [i for i in sorted(edits) if n4_of[i] == 2]
        for k, i in enumerate(rng.sample(doubles, min(unequal, len(doubles)))):
            drops[i] = CONDITIONS[k % 2]
    relabel = set(rng.sample(sorted(relays), min(len(relays), round(profile.relabelled_pairs * n_pairs / PAPER_PAIRS))))
    plans = []
    for i in range(n_pairs):
        relay = i in relays
        cue = "relay" if relay else rng.choices(CUE_FAMILIES, CUE_WEIGHTS)[0]
        p = _Plan(T_POSITIONS[i % 3], 4 if i in four_party else 3, n4_of.get(i, 0), relay, cue,
                  i in edits and i not in drops, drops.get(i, ""), i in relabel)
        if not _feasible(profile, p.bucket, p.n4, p.before):
            p.n4 = 1  # compact: a late-middle T leaves room for one event only
            p.drop = ""
        plans.append(p)

    # turn counts: drawn, then (paper) moved one at a time until the silence total is exact
    options = [_feasible(profile, p.bucket, p.n4, p.before) for p in plans]
    for p, opts in zip(plans, options, strict=True):
        p.n = rng.choice(opts)
    if profile.exact_silence:
        target = round(sum(PAPER_SILENCE.values()) * n_pairs / PAPER_PAIRS)
        diff = target - sum(p.n - 1 - 2 * p.n4 for p in plans)
        while diff:
            step = 1 if diff > 0 else -1
            for _ in range(100 * n_pairs):  # a random pair that can move (most can)
                k = rng.randrange(n_pairs)
                if plans[k].n + step in options[k]:
                    break
            else:  # a tiny corpus: an *unknown* pair (4 turns before T) takes the *keeper* cue (2), if any
                k = next((k for k, p in enumerate(plans) if p.cue == "unknown"), None)
                if k is None:
                    raise ValueError(f"profile {profile.name!r}: turn limits cannot give {target} silence windows")
                plans[k].cue = "keeper"
                options[k] = _feasible(profile, plans[k].bucket, plans[k].n4, plans[k].before)
                continue
            plans[k].n += step
            diff -= step
    for p in plans:
        p.t = rng.choice(_t_options(p.n, p.bucket, p.n4, p.before))
    if profile.tails and plans:  # T onsets as the paper's, the later ones to the pairs with more turns before T
        targets = sorted(_paper_onset((k + rng.random()) / n_pairs) for k in range(n_pairs))
        # the earliest aims a little above the paper's minimum: a turn's length is not exact
        targets[0], targets[-1] = PAPER_T_ONSET["min_s"] + 0.5, max(targets[-1], PAPER_T_ONSET["max_s"])
        for k, target in zip(sorted(range(n_pairs), key=lambda k: plans[k].t + 3 * rng.random()), targets,
                             strict=True):
            plans[k].onset_s = target

    # silence labels: one N1 and one N3 per scene, extras placed over the free slots at random
    silence = sum(p.n - 1 - 2 * p.n4 for p in plans)
    share = sum(PAPER_SILENCE.values())
    extra_n1 = round(silence * PAPER_SILENCE["N1"] / share) - n_pairs
    extra_n3 = round(silence * PAPER_SILENCE["N3"] / share) - n_pairs
    slots = [k for k, p in enumerate(plans)
             for _ in range(p.n - 1 - 2 * p.n4 - 3 - 2 * (p.cue == "unknown") - p.relabel)]
    rng.shuffle(slots)
    for p in plans:  # a relabelled relay pair's second N1 turn (a present turn) counts in the extras
        p.n1 += p.relabel
    extra_n1 -= sum(p.relabel for p in plans)
    for k in slots[:max(0, extra_n1)]:
        plans[k].n1 += 1
    for k in slots[max(0, extra_n1):max(0, extra_n1) + max(0, extra_n3)]:
        plans[k].n3 += 1

    # who the N1 / N2 turns address: exact counts of device- and human-directed windows
    device_n, human_n = (round(silence * x / share) for x in profile.silence_mix)
    for p in plans:
        p.device = rng.random() < profile.device_share
        p.kinds = _layout(rng, p)
    _place_devices(rng, plans, device_n)
    for p in plans:
        _converse(rng, p.kinds)
    _place_humans(rng, plans, human_n)
    return plans


def _place_devices(rng: random.Random, plans: list[_Plan], total: int) -> None:
    """Make ``total`` plain N2 turns device-directed ("dev"), spread evenly over the pairs with a device."""
    free = {k: [i for i, kind in enumerate(p.kinds) if kind == "N2"] for k, p in enumerate(plans) if p.device}
    for f in free.values():
        rng.shuffle(f)
    order = list(free)
    rng.shuffle(order)
    while total and any(free.values()):
        for k in order:
            if total and free[k]:
                plans[k].kinds[free[k].pop()] = "dev"
                total -= 1
    if total:  # a tiny corpus: scenes without a device context get one (it fits any setting)
        spare = [(k, i) for k, p in enumerate(plans) if not p.device for i, kind in enumerate(p.kinds) if kind == "N2"]
        for k, i in rng.sample(spare, min(total, len(spare))):
            plans[k].device, plans[k].kinds[i] = True, "dev"


# turn kinds that may address a person or the room (the others have a fixed target); kinds that go
# together (a question and its answer) take the same one
_UNITS = {"ask": "answer", "ask_fact": "fact", "ask_t": "dunno"}
_FLEXIBLE = frozenset({"N2", "N1", "fact", "dunno"})


def _place_humans(rng: random.Random, plans: list[_Plan], total: int) -> None:
    """Choose the N1 / N2 turns addressed to a person, exactly ``total`` of them: the relay turn
    always, then questions with their answers (two turns) and single turns at random."""
    chosen: list[set[int]] = [{i for i, kind in enumerate(p.kinds) if kind == "relay"} for p in plans]
    total -= sum(map(len, chosen))
    units: list[tuple[int, tuple[int, ...]]] = []
    for k, p in enumerate(plans):
        kinds = p.kinds
        paired = {i + 1 for i, kind in enumerate(kinds) if kind in _UNITS and i + 1 < len(kinds)
                  and kinds[i + 1] == _UNITS[kind]}
        units += [(k, (i - 1, i)) for i in paired]
        units += [(k, (i,)) for i, kind in enumerate(kinds) if kind in _FLEXIBLE and i not in paired]
    rng.shuffle(units)
    pairs = [u for u in units if len(u[1]) == 2]
    singles = [u for u in units if len(u[1]) == 1]
    # about half of them questions with their answers, single turns make the count exact
    for k, idx in [*pairs[:min(len(pairs), total // 4)], *singles]:
        if total >= len(idx):
            chosen[k].update(idx)
            total -= len(idx)
    for p, c in zip(plans, chosen, strict=True):
        p.human = frozenset(c)


ONSET_QUANTILES = ((0.0, 14.50), (1 / 3, 40.224), (2 / 3, 54.656), (0.97, 100.0), (0.999, 200.0), (1.0, 263.97))


def _paper_onset(u: float) -> float:
    """The T onset (s) at quantile ``u`` of a distribution with the paper's range and tertile edges
    (spec section 6), linear between :data:`ONSET_QUANTILES`."""
    for (u0, a), (u1, b) in itertools.pairwise(ONSET_QUANTILES):
        if u <= u1:
            return a + (b - a) * (u - u0) / (u1 - u0)
    return ONSET_QUANTILES[-1][1]


def _make_pair(rng: random.Random, pair_id: str, p: _Plan, profile: Profile,
               steer: dict[str, _Steer]) -> tuple[Scene, Scene]:
    setting = rng.choice(V.SETTINGS)
    activity = rng.choice(sorted(setting.activities))
    relationship = rng.choice(sorted(V.RELATIONSHIP_LINES))
    device_key = rng.choice(_devices_for(setting.name)) if p.device else "none"
    register = rng.choice(V.REGISTERS)
    speakers = SPEAKERS[: p.n_speakers]
    names = dict(zip(speakers, rng.sample(V.NAMES, p.n_speakers), strict=True))
    n = p.n
    kinds = p.kinds

    # -- speakers: nobody speaks twice in a row, except an N4 asker who says never mind ----
    # the one who does not know, who asks the teller for the fact and who relays are never the teller
    # or the asker: T asks what the asker was never told, of someone who does not know it
    teller, asker = rng.sample(speakers, 2)
    fixed = {"fact": teller, "holder": teller, "T": asker, "ask_t": asker}
    for kind in ("dunno", "ask_fact", "relay"):
        fixed[kind] = rng.choice([s for s in speakers if s not in (teller, asker)])
    self_resolve = {i: rng.random() < 0.5 for i, k in enumerate(kinds) if k == "N4_R"}
    who: list[str] = []
    for i, kind in enumerate(kinds):
        if kind in fixed:
            who.append(fixed[kind])
        elif kind == "N4_R" and self_resolve[i]:
            who.append(who[-1])
        else:
            ban = {who[-1]} if who else set()
            if i + 1 < n and kinds[i + 1] in fixed:
                ban.add(fixed[kinds[i + 1]])
            options = [s for s in speakers if s not in ban]
            fresh = [s for s in options if s not in who]
            who.append(rng.choice(fresh or options))

    # -- texts -----------------------------------------------------------------------------------
    taken: set[str] = set()  # the scene's topics and values so far (_fact)
    fact = _fact(rng, setting, taken=taken, trivia=p.cue != "keeper")  # nobody keeps track of general knowledge
    device_desc, device_lines = V.DEVICES[device_key]
    pools: dict[str, list[str]] = {
        "person": [x for x in setting.to_person + V.RELATIONSHIP_LINES[relationship] + V.N2_PERSON
                   if "?" not in x or rng.random() < GENERIC_QUESTION_P],
        "room": [x for x in (setting.activities[activity], *setting.to_room, *V.N2_ROOM)
                 if "?" not in x or rng.random() < GENERIC_QUESTION_P],
        "device": list(device_lines),
        "N1": list(V.N1_LINES),
        "N3": [x for x in setting.self_talk + V.N3_GENERIC if "?" not in x or rng.random() < GENERIC_QUESTION_P],
    }
    for pool in pools.values():  # no line says the gold answer by chance ("set a timer for ten minutes")
        pool[:] = [x for x in pool if fact.gold.lower() not in x.lower()]
        rng.shuffle(pool)
    n4_items = rng.sample([x for x in V.N4_EVENTS if x[0] not in fact.frames], p.n4)
    fill = {"event": rng.choice(setting.events), "item": rng.choice(setting.items), "activity": activity}
    trivia_pool = [x for x in V.N4_EVENTS if x not in n4_items]
    rng.shuffle(trivia_pool)
    # a question's opener: the register's (about 40 %) or one that addresses no one, as wondering aloud has
    openers = (*V.OPENERS[register] * 3, *V.SELF_OPENERS)

    def aim(i: int) -> Target:
        """The target of an N1 / N2 turn other than a device-directed one: as planned (_place_humans)."""
        return Target.HUMAN if i in p.human else Target.GROUP

    def vocative(i: int) -> str | None:
        """Sometimes a question says whom it asks: the person's name, or "everyone" for the room."""
        if rng.random() >= VOCATIVE_P:
            return None
        return names[addressee(i)] if i in p.human else rng.choice(V.ROOM_CALLS)

    def addressee(i: int) -> str:
        nxt = who[i + 1] if i + 1 < n else who[i]
        return nxt if nxt != who[i] else rng.choice([s for s in speakers if s != who[i]])

    def other(i: int, *not_these: str) -> str:
        return names[rng.choice([s for s in speakers if s not in (who[i], *not_these)] or [who[i]])]

    def fill_in(template: str, i: int) -> str:
        """The scene's {event}, {item}, {activity} and another person ({other}) in a line."""
        for key, value in (("{event}", lambda: rng.choice(setting.events)),
                           ("{item}", lambda: rng.choice(setting.items)),
                           ("{activity}", lambda: activity), ("{other}", lambda: other(i, addressee(i))),
                           ("{absent}", lambda: rng.choice(V.ABSENT))):
            if key in template:
                template = template.replace(key, value())
        return template

    def tail(core: str, kind: str, i: int) -> str:
        """Paper profile: add zero, one or two tail sentences, steering the mean turn length."""
        if not profile.tails:
            return core
        fill = {"event": rng.choice(setting.events), "item": rng.choice(setting.items), "activity": activity}
        pool = [x.format(**fill, other=other(i, addressee(i)))
                for x in rng.sample(V.TAILS[kind], min(5, len(V.TAILS[kind])))]

        def more(lines: list[str]) -> list[str]:  # each line with one more tail that fits it, where one does
            return [f"{c} {_cap(rng.choice(rest))}" for c in lines if (rest := [y for y in pool if _fits(c, y)])]

        one = [f"{core} {_cap(x)}" for x in [x for x in pool if _fits(core, x)][:3]]
        two = more(one)
        bare = [core] if len(core) >= BARE_MIN_CHARS else []  # a short line alone would recur word for word
        if i < p.t and p.onset_s:  # before T: the length that keeps this pair on its T onset
            longer = [*one, *two]
            for _ in range(2):  # up to four tails where the pair needs a long talk before T
                longer += more(longer[-3:])
            return onset_pick([*bare, *longer], i)
        return steer["turn"].pick(rng, [*bare, *one, *two], k=4 if p.onset_s else 2)  # after T: back to the mean

    def onset_pick(candidates: list[str], i: int) -> str:
        """Before T (paper profile): the candidate whose length keeps this pair on its T onset."""
        spent = sum(len(x.text) / CHARS_PER_S + TURN_GAP_S for x in turns)
        want = ((p.onset_s - spent) / (p.t - i) - TURN_GAP_S) * CHARS_PER_S
        short = 10 if i == p.t - 1 else 1  # the last turn before T: rather over than under the onset
        best = min(candidates, key=lambda c: max(len(c) - want, short * (want - len(c))))
        steer["turn"].add(len(best))
        return best

    def say(template: str, i: int, kind: str, target: Target) -> tuple[str, Target]:
        template = fill_in(template, i)
        question = "?" in template and kind in ("person", "room")
        if "{name}" in template:
            if question and rng.random() > VOCATIVE_P:  # addressed by who answers, not by name
                template, target = _cap(template.replace("{name}, ", "")), Target.HUMAN
            else:
                template, target = template.format(name=names[addressee(i)]), Target.HUMAN
        if kind in ("person", "room") and i > 0 and kinds[i - 1] in ("N2", "ask") and "?" in turns[-1].text \
                and turns[-1].target is Target.HUMAN:
            template = f"{rng.choice(V.REPLIES)} {_decap(template)}"  # the person asked answers first
        elif question and rng.random() < 0.6:  # the opener and closer any question of the scene may have
            template = f"{rng.choice(openers)}, {_decap(template)}{rng.choice(V.CLOSERS)}"
        return tail(template, "ask" if question else kind, i), target

    def ask(f: _Fact, name: str | None, i: int, aloud: bool = False) -> tuple[str, _Ask]:
        """A question turn asking for ``f`` (one of its frames; its kind picks the reasons) made as T
        is (:func:`_ask_candidates`: the same pools, the same number of reasons as an implicit T, tail
        sentences, the length steered to the implicit T's mean); ``aloud``: wondered aloud (self-talk),
        with the pools that address no listener."""
        tails = V.TAILS["wonder" if aloud else "ask"]
        pool = [x.format(**fill, other=other(i, addressee(i))) for x in tails] if profile.tails else []
        cands = _ask_candidates(rng, V.SELF_OPENERS if aloud else openers, f.wonders + f.frames if aloud else f.frames,
                                name,
                                lambda: _reasons(rng, _reason_count(rng), f.kind, aloud),
                                V.NEUTRAL_CLOSERS if aloud else V.CLOSERS, pool)
        if i < p.t and p.onset_s and not ONSET_STEERED_S[0] <= p.onset_s <= ONSET_STEERED_S[1]:
            # a pair with a very early or very late T: its questions before T get the length it needs
            longer = [(f"{c} {' '.join(_cap(x) for x in rng.sample(pool, k))}", a) for c, a in cands[:4]
                      for k in (2, 3, 4) if len(pool) >= k]
            text = onset_pick([c for c, _ in cands + longer], i)
            return next(c for c in cands + longer if c[0] == text)
        best = steer["question"].pick(rng, cands, k=5)
        steer["turn"].add(len(best[0]))
        return best

    def heard(i: int, by: str | None = None) -> list[int]:
        """Which of the facts ``said`` turn ``i``'s speaker may ask for: said by someone else (``by``:
        by that one), not in the turn just before."""
        return [k for k, (_, teller_id, at) in enumerate(said)
                if teller_id != who[i] and at < i - 1 and by in (None, teller_id)]

    def trivia() -> tuple[_Fact, str]:
        """A general-knowledge question the scene's N4 events do not ask, as a fact, and the reply a
        person gives to it (``{asker}`` to fill): people ask each other such things too."""
        q, _, reply = trivia_pool.pop()
        return _trivia(q, _unname(reply)), reply

    t_tails = [x.format(**fill, other=names[rng.choice([s for s in speakers if s not in (asker, teller)])])
               for x in V.TAILS["ask"]] if profile.tails else []
    explicit_t, implicit_t = _t_texts(rng, fact, openers, t_tails, steer)
    relay_pair = rng.choice(V.RELAYS)
    side: _Fact | None = None
    said: list[tuple[_Fact, str, int]] = []  # facts other than T's said so far, who said them, where (N4 may ask)
    side_reply = ""  # a general-knowledge question's reply, for the answer turn after it

    turns: list[Turn] = []
    implicit_turns: list[Turn] = []
    for i, kind in enumerate(kinds):
        alt = None  # implicit-only text
        if kind == "T":
            turn = Turn(who[i], explicit_t, Label.T, Target.ARIA)
            alt = implicit_t
        elif kind == "relay":
            rel_e, rel_i = (_cap(r.format(asker=names[asker], topic=fact.topic)) for r in relay_pair)
            # one tail in both versions: the reference differs
            text = tail(rel_e, "settled" if p.relabel else "aria", i)
            turn = Turn(who[i], text, Label.N1, Target.HUMAN)
            alt = rel_i + text[len(rel_e):]
            if p.relabel:  # rewritten as the people saying they do not know: N2 to the asker
                line = rng.choice([x for x in V.DONT_KNOW if "{asker}" in x and "{topic}" in x])
                alt = _cap(line.format(asker=names[asker], topic=fact.topic)) + text[len(rel_e):]
                implicit_turns.append(Turn(who[i], alt, Label.N2, Target.HUMAN))
                turns.append(turn)
                continue
        elif kind == "keeper":
            text = tail(_cap(rng.choice(V.KEEPER_LINES).format(topic=fact.topic)), "aria", i)
            turn = Turn(who[i], text, Label.N1, Target.GROUP)
        elif kind == "holder":
            lines = V.HOLDER_LINES + (V.HOLDER_NEWS_LINES if fact.kind != "trivia" else ())
            text = tail(_cap(rng.choice(lines).format(statement=fact.plain + ".")), _tails_of(fact), i)
            turn = Turn(who[i], text, Label.N1, Target.GROUP)
        elif kind == "present":
            turn = Turn(who[i], tail(fill_in(rng.choice(V.PRESENT_LINES), i), "aria", i), Label.N1, Target.GROUP)
        elif kind == "dunno":  # to the asker by name, or to everyone
            line = rng.choice([x for x in V.DONT_KNOW if ("{asker}" in x) == (i in p.human)])
            text = tail(fill_in(line.replace("{asker}", names[asker]).replace("{topic}", fact.topic), i), "settled", i)
            turn = Turn(who[i], text, Label.N2, aim(i))
        elif kind in ("ask_t", "ask"):
            side_reply = ""
            told = heard(i, who[i + 1])
            if kind == "ask" and rng.random() < TRIVIA_P:
                side, side_reply = trivia()
            elif kind == "ask" and told and rng.random() < REASK_P:  # asked again of who said it, who answers
                side = said[rng.choice(told)][0]
            elif kind == "ask":
                side = _fact(rng, setting, avoid=fact.kind, taken=taken)
                said.append((side, who[i + 1], i + 1))
            text = ask(fact if kind == "ask_t" else side, vocative(i), i)[0]
            turn = Turn(who[i], text, Label.N2, aim(i))
        elif kind in ("fact", "answer"):
            f = fact if kind == "fact" else side
            answering = i > 0 and kinds[i - 1] in ("ask", "ask_fact")
            if kind == "answer" and side_reply and i in p.human:  # a general-knowledge answer, to the asker
                st = side_reply.format(asker=names[who[i - 1]])
            elif answering:
                st = f"{rng.choice(V.REPLIES)} {_decap(f.statement)}"
            elif i in p.human:
                st = f"{names[addressee(i)]}, {f.statement}"
            else:
                st = _cap(f.statement)
            turn = Turn(who[i], tail(st, _tails_of(f), i), Label.N2, aim(i))
        elif kind == "ask_fact":  # a person asks the teller for the fact, who answers next
            turn = Turn(who[i], ask(fact, vocative(i), i)[0], Label.N2, aim(i))
        elif kind == "N1":
            if rng.random() < 2 * RETRACT_P:  # almost asked Aria, takes it back (the words N4_R uses)
                line = rng.choice(V.N1_RETRACTIONS).replace(
                    "{never_mind}", f"{rng.choice(V.N4_NEVER_MIND)}, {rng.choice(V.N4_NEVER_MIND_WHY)}")
            else:
                line = next((x for x in pools["N1"] if ("{name}" in x) == (i in p.human)), pools["N1"][-1])
                pools["N1"].remove(line)
            if i in p.human and "{name}" not in line:
                line = f"{{name}}, {_decap(line)}"
            text, _ = say(line, i, "aria", aim(i))
            turn = Turn(who[i], text, Label.N1, aim(i))
        elif kind == "N3":
            if rng.random() < SELF_QUESTION_P:  # wondering aloud about a fact (general knowledge: its question)
                u = rng.random()
                if u < TRIVIA_P:
                    f = trivia()[0]
                elif (earlier := heard(i)) and u < 0.5:  # about something someone else said earlier
                    f = said[rng.choice(earlier)][0]
                else:
                    f = _fact(rng, setting, avoid=fact.kind, taken=taken)
                text = ask(f, None, i, aloud=True)[0]
                if rng.random() < RETRACT_P:  # and thinking better of it, as N4_R may
                    text = f"{text} {_never_mind(rng)}"
            else:
                text, _ = say(pools["N3"].pop(), i, "self", Target.NONE)
            turn = Turn(who[i], text, Label.N3, Target.NONE)
        elif kind == "dev":  # to the device or assistant of the scene's device context
            text, _ = say(pools["device"].pop(), i, "device", Target.DEVICE)
            turn = Turn(who[i], text, Label.N2, Target.DEVICE)
        elif kind == "N2" and len(said) >= p.n4 and (i in p.human or (pools["room"] and rng.random() < ROOM_LINE_P)):
            group = "person" if i in p.human else "room"
            text, _ = say(pools[group].pop(), i, group, aim(i))
            turn = Turn(who[i], text, Label.N2, aim(i))
        elif kind == "N2":  # news: a fact of the setting, for everyone or told to a person until the N4 questions
            news = _fact(rng, setting, avoid=fact.kind, taken=taken)  # have enough to ask for later
            said.append((news, who[i], i))
            plain = len(news.statement.split()) <= 14 and not news.statement.startswith(
                ("heads up", "oh,", "if anyone", "write this"))
            opener = f"{rng.choice(V.NEWS_OPENERS)} " if plain and rng.random() < 0.5 else ""
            opener = f"{names[addressee(i)]}, " if i in p.human else opener
            turn = Turn(who[i], tail(_cap(f"{opener}{news.statement}"), _tails_of(news), i), Label.N2, aim(i))
        elif kind == "N4_Q":  # made as T is: the name only sometimes, the context says who is asked
            q_text, answer, reply = n4_items.pop()
            kind_asked = "trivia"
            if (earlier := heard(i)) and rng.random() < N4_SCENE_P:  # something another person said, not trivia
                f = said.pop(rng.choice(earlier))[0]
                kind_asked, q_text, answer = f.kind, rng.choice(f.frames), (
                    _cap(f.statement) if f.kind == "trivia" else f"{_heard(f.plain)}, {f.plain}.")
                reply = f"{{asker}}, {_decap(f.statement)}"
            named = p.n4_edit or rng.random() < N4_NAME_P
            asked = _Fact(kind_asked, answer, answer, (q_text,), q_text, answer)
            text, parts = ask(asked, ASSISTANT_NAME if named else None, i)
            turn = Turn(who[i], text, Label.N4_Q, Target.ARIA, answer=answer)
            if p.n4_edit:  # the implicit version drops the name, as its T does
                alt = _question(parts.opener, None, parts.why, parts.question, parts.closer, parts.first) + parts.after
        else:  # N4_R
            if self_resolve[i]:
                named = p.n4_edit or rng.random() < N4_NAME_P
                core = _never_mind(rng, ASSISTANT_NAME if named else None)
                text = tail(core, "settled", i)
                turn = Turn(who[i], text, Label.N4_R, Target.ARIA)
                if p.n4_edit:
                    alt = _unnamed(core) + text[len(core):]
            else:
                turn = Turn(who[i], reply.format(asker=names[who[i - 1]]), Label.N4_R, Target.HUMAN)
                steer["turn"].add(len(turn.text))
        turns.append(turn)
        implicit_turns.append(turn if alt is None else dataclasses.replace(turn, text=alt))

    attributes = {
        "setting": setting.name,
        "activity": activity,
        "relationship": relationship,
        "device_context": device_desc,
        "register": register,
        "implicit_cue": p.cue,
    }
    if p.drop:  # the paper's N4 edits with unequal turn counts: one version lacks the last N4 event
        short = turns if p.drop == "explicit" else implicit_turns
        q = max(k for k, x in enumerate(short) if x.label is Label.N4_Q)
        del short[q:q + 2]
    explicit, implicit = (
        Scene(f"{pair_id}-{cond}", pair_id, cond, speakers, tuple(ts), fact.gold, dict(attributes), p.bucket,
              speaker_names=dict(names))
        for cond, ts in zip(CONDITIONS, (turns, implicit_turns), strict=True)
    )
    return explicit, implicit


_PROPER = frozenset({"I", ASSISTANT_NAME, *V.NAMES, *V.TRIVIA_PROPER})


def _fits(text: str, tail: str) -> bool:
    """Whether ``tail`` may follow ``text``: not said yet, and at most one way of learning the news
    (:data:`~harness.scenes.vocab.NEWS_SOURCES`) in a turn."""
    return tail not in text and not (any(x in text for x in V.NEWS_SOURCES) and any(x in tail for x in V.NEWS_SOURCES))


def _tails_of(fact: _Fact) -> str:
    """The tail sentences a statement of ``fact`` takes: news, or general knowledge (never told as news)."""
    return "known" if fact.kind == "trivia" else "fact"


def _unname(reply: str) -> str:
    """A reply that names its ``{asker}`` ("It's Canberra, {asker}, everyone gets that wrong.") without
    the name ("It's Canberra, everyone gets that wrong.")."""
    return _cap(reply.replace("{asker}, ", "").replace(", {asker}", ""))


def _never_mind(rng: random.Random, name: str | None = None) -> str:
    """Taking a question back: "Oh, never mind, Aria, I remember now." (``name`` said after the
    never-mind, or no name)."""
    head = f"{rng.choice(V.NEVER_MIND_HEADS)}, {rng.choice(V.N4_NEVER_MIND)},"
    return f"{head}{f' {name},' if name else ''} {rng.choice(V.N4_NEVER_MIND_WHY)}."


def _heard(plain: str) -> str:
    """How the reference answer to an N4 question about something said earlier starts (10-16 words in all)."""
    n = len(plain.split())
    return "As far as I heard earlier" if n <= 10 else "As far as I heard" if n <= 11 else "I heard that"


def _unnamed(line: str) -> str:
    """A never-mind line (:func:`_never_mind`) without the assistant's name."""
    return line.replace(f" {ASSISTANT_NAME},", "", 1)


def _decap(text: str) -> str:
    """``text`` to follow a comma: its first letter lower-cased, unless it is a name or "I"."""
    first = re.match(r"[A-Za-z']*", text).group(0)
    return text if first in _PROPER or first.startswith("I'") else text[:1].lower() + text[1:]


def _devices_for(setting: str) -> list[str]:
    """Device contexts that fit ``setting``: home devices at home, the navigation app on the road."""
    return [k for k in sorted(V.DEVICES) if k != "none"
            and (k not in V.HOME_DEVICES or setting in V.HOME_SETTINGS)
            and (k not in V.ROAD_DEVICES or setting in V.ROAD_SETTINGS)]


def _layout(rng: random.Random, p: _Plan) -> list[str]:
    """The kind of every turn: T, the N4 events after it, the fact and the cue turns before it
    (module docstring), N1 / N3 as planned, N2 for the rest; some N2 pairs become a question to a
    person and that person's answer."""
    n, t = p.n, p.t
    kinds = ["o"] * n
    kinds[t] = "T"
    after = ["E"] * p.n4 + ["o"] * (n - 1 - t - 1 - 2 * p.n4)
    rng.shuffle(after)
    kinds[t + 1:] = ["o"] + [k for a in after for k in (("N4_Q", "N4_R") if a == "E" else ("o",))]

    def put(kind: str, lo: int, hi: int) -> int:
        free = [i for i in range(lo, hi) if kinds[i] == "o"]
        i = rng.choice(free)
        kinds[i] = kind
        return i

    if p.relay:
        kinds[t - 1] = "relay"
        put("fact", 0, t - 1)
        if p.relabel:  # the implicit version's cue: the assistant follows the talk, the people do not know
            put("present", 0, t - 1)
    elif p.cue == "keeper":
        f = put("fact", 0, t - 1)
        put("keeper", f + 1, t)
    elif p.cue == "holder":
        put("holder", 0, t - 1)
    else:  # unknown: the asker asks a person, who does not know either
        kinds[t - 2], kinds[t - 1] = "ask_t", "dunno"
        put("fact", 0, t - 3)  # not right before the question: the asker would have just heard it
        put("present", 0, t - 2)
    free = [i for i, k in enumerate(kinds) if k == "o"]
    rng.shuffle(free)
    for _ in range(p.n1 - 1 - p.relabel):  # every cue uses one N1 turn (relay, keeper, holder, present)
        kinds[free.pop()] = "N1"
    for _ in range(p.n3):
        kinds[free.pop()] = "N3"
    for i in free:
        kinds[i] = "N2"
    return kinds


def _converse(rng: random.Random, kinds: list[str]) -> None:
    """Make some pairs of adjacent plain N2 turns a question and its answer (in place)."""
    for i in range(len(kinds) - 1):  # questions, answered by the next speaker
        if kinds[i] == "N2" and kinds[i + 1] == "N2" and rng.random() < ASK_P:
            kinds[i], kinds[i + 1] = "ask", "answer"
        elif kinds[i] == "N2" and kinds[i + 1] == "fact" and rng.random() < ASK_P:
            kinds[i] = "ask_fact"


_TRAILING = ("because", "so ", "since", "before")  # reasons said after the question, not before it


REASON_COUNTS = (0, 1, 1, 2)  # reason clauses of a question turn, T or not (drawn from these)
EXTRA_REASON_P = 0.6  # chance that the implicit T gives one more reason (where the explicit one says the name)
TURN_AIM = 0.97  # the mean turn length aimed at, relative to the paper's (see generate_pairs)
QUESTION_CHARS = 116.0  # mean length a question turn other than T is steered to (T: 111.6 explicit, 123.3 implicit)
BARE_MIN_CHARS = 45  # paper profile: a line shorter than this gets at least one tail sentence
ONSET_STEERED_S = (20.0, 100.0)  # pairs whose T onset target is outside: questions before T steered to it too
NAME_FIRST_P = 0.9  # chance that a question saying a name says it after the opener (else at the end)


def _reason_count(rng: random.Random) -> int:
    """Reason clauses of a question other than T: as many as an implicit T gives (the explicit T's
    count, and one more at :data:`EXTRA_REASON_P`), so that the count does not tell T apart."""
    return rng.choice(REASON_COUNTS) + (rng.random() < EXTRA_REASON_P)


def _reasons(rng: random.Random, k: int, kind: str, aloud: bool = False, have: list[str] | None = None) -> list[str]:
    """``have`` plus ``k`` more distinct reason clauses for asking a fact of ``kind``, at most one of them
    said after the question; ``aloud``: wondered aloud, only reasons that address no listener. No
    reason names who said the fact: asking Aria (or oneself) what a person in the room said points
    at that person, and a question to them says "you"."""
    out = list(have or [])
    fit = [r for r in (V.SELF_REASONS if aloud else V.ASK_REASONS) if kind in V.REASON_KINDS.get(r, (kind,))]
    for _ in range(k):
        trailing = any(r.startswith(_TRAILING) for r in out)
        pool = [x for x in fit if x not in out and not (trailing and x.startswith(_TRAILING))]
        out.append(rng.choice(pool))
    return out


def _question(opener: str, name: str | None, reasons: list[str], question: str, closer: str,
              name_first: bool) -> str:
    """One question turn from the shared pools: ``"Okay, Maya, I lost track. When is the ferry?
    Thanks."``; the name (a person's, or the assistant's) first or last (first where a reason follows
    the question), or none; ``question`` may be a wondering aloud ("I wonder when the ferry is now.")."""
    lead = [f"{r}." for r in reasons if not r.startswith(_TRAILING)]
    trail = "".join(f", {r}" for r in reasons if r.startswith(_TRAILING))  # "..., since I missed it?"
    name_first = name_first or bool(trail)
    end = question[-1]  # "?", or "." for wondering aloud
    body = [*lead, f"{question[:-1]}{trail}" + (f", {name}{end}" if name is not None and not name_first else end)]
    head = f"{opener}, {name}," if name is not None and name_first else f"{opener},"
    return _join(head, *body) + closer


@dataclass(frozen=True)
class _Ask:
    """The parts of a question turn (:func:`_question` plus tail sentences ``after``)."""

    opener: str
    why: list[str]
    question: str
    closer: str
    first: bool
    after: str


def _ask_candidates(rng: random.Random, openers: tuple[str, ...], frames: tuple[str, ...], name: str | None,
                    reasons: Any, closers: tuple[str, ...], tails: list[str], n: int = 12) -> list[tuple[str, _Ask]]:
    """``n`` candidate question turns from the shared pools, each ``(text, parts)``: an opener, the
    ``reasons()`` drawn, one of ``frames``, a closer, the name (if any) first or last, and zero to two
    of ``tails`` (already filled in) after it."""
    out = []
    for _ in range(n):
        parts = _Ask(rng.choice(openers), reasons(), rng.choice(frames), rng.choice(closers),
                     rng.random() < NAME_FIRST_P,
                     "".join(f" {_cap(x)}" for x in rng.sample(tails, min(len(tails), rng.choice((0, 1, 1, 2))))))
        out.append((_question(parts.opener, name, parts.why, parts.question, parts.closer, parts.first) + parts.after,
                    parts))
    return out


def _t_texts(rng: random.Random, fact: _Fact, openers: tuple[str, ...], tails: list[str],
             steer: dict[str, _Steer]) -> tuple[str, str]:
    """The explicit and implicit T texts, made as every question turn is (:func:`_ask_candidates`):
    the same opener, reasons, question, closer and (paper profile, ``tails``) tail sentences; the
    explicit one names Aria (first or last), the implicit one names no one and may give one more
    reason (the paper's implicit T are 11.7 characters longer)."""
    def reasons() -> list[str]:
        return _reasons(rng, rng.choice(REASON_COUNTS), fact.kind)

    candidates = []
    for text, a in _ask_candidates(rng, openers, fact.frames, ASSISTANT_NAME, reasons, V.CLOSERS, tails):
        more = _reasons(rng, 1, fact.kind, have=a.why) if rng.random() < EXTRA_REASON_P else a.why
        candidates.append((text, _question(a.opener, None, more, a.question, a.closer, a.first) + a.after))
    se, si = steer["explicit"], steer["implicit"]

    def cost(c: tuple[str, str]) -> float:
        return (abs((se.total + len(c[0])) / (se.count + 1) - se.target)
                + abs((si.total + len(c[1])) / (si.count + 1) - si.target))

    explicit, implicit = min(rng.sample(candidates, 5), key=cost)
    se.add(len(explicit))
    si.add(len(implicit))
    steer["turn"].add(len(explicit))
    return explicit, implicit


def check_share(label: str, share: object) -> None:
    """Raise ValueError unless ``share`` (a fraction of the pairs) is a number in [0, 1]."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
        raise ValueError(f"{label} must be a number in [0, 1], got {share!r}")


def check_profile(profile: object) -> None:
    """Raise ValueError unless ``profile`` names one of :data:`PROFILES`."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")


def generate_pairs(n_pairs: int, seed: int, four_party_share: float = 0.25, n4_share: float = 0.5,
                   profile: str = "compact") -> list[Scene]:
    """Generate ``n_pairs`` explicit/implicit scene pairs from templates (spec section 2).

    Returns ``2 * n_pairs`` scenes ordered pair by pair, explicit before implicit; pair ids
    are ``p00000``, ``p00001``, ...; scene ids ``f"{pair_id}-{condition}"``. The output
    depends only on the arguments (one ``random.Random(seed)``, no global state).
    ``round(four_party_share * n_pairs)`` pairs have four speakers (A-D), the others three;
    ``round(n4_share * n_pairs)`` pairs have N4 events after T (one or two, in the paper's
    proportion). T position buckets cycle over pairs. Every scene and pair is checked with the
    generated-scene rules (:func:`harness.scenes.schema.validate_pair` with ``strict=True``).

    Raises ``ValueError`` when ``n_pairs`` is negative, a share is outside [0, 1] or the profile
    unknown, and :class:`~harness.scenes.schema.SceneError` if a template produced an invalid scene.
    """
    if n_pairs < 0:
        raise ValueError(f"n_pairs must be >= 0, got {n_pairs}")
    check_share("four_party_share", four_party_share)
    check_share("n4_share", n4_share)
    check_profile(profile)
    prof = PROFILES[profile]
    rng = random.Random(seed)
    plans = _plan_corpus(rng, n_pairs, four_party_share, n4_share, prof)
    # chars per turn: 26,182 turns over 2,000 scenes, aimed TURN_AIM low: the turns whose length another
    # target fixes (T, the other questions, the turns before T) run a little over the mean
    target_turn = PAPER_SPEECH_S * CHARS_PER_S / 13.09 * TURN_AIM
    steer = {"explicit": _Steer(PAPER_T_CHARS["explicit"]), "implicit": _Steer(PAPER_T_CHARS["implicit"]),
             "turn": _Steer(target_turn), "question": _Steer(QUESTION_CHARS)}
    scenes: list[Scene] = []
    for idx, p in enumerate(plans):
        explicit, implicit = _make_pair(rng, f"p{idx:05d}", p, prof, steer)
        explicit.validate()
        implicit.validate()
        validate_pair(explicit, implicit, strict=True)
        scenes += (explicit, implicit)
    return scenes


_WORD = re.compile(r"[a-z']+")


def distinct_share(texts: Iterable[str]) -> float:
    """Share of distinct strings among ``texts`` (1.0 when all differ; 0.0 for none)."""
    items = list(texts)
    return len(set(items)) / len(items) if items else 0.0


__all__ = ["PROFILES", "T_POSITIONS", "SceneError", "check_profile", "check_share",
           "corpus_stats", "distinct_share", "generate_pairs", "t_bucket"]
