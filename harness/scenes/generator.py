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

Conversation. Most pairs of adjacent N2 slots become a question to a person (or to the room) and
that person's answer, which states another fact of the setting; a question to a person usually
says no name (the one who answers is the addressee); the turn after a question starts as a reply.
N3 turns often wonder aloud. The setting, activity, relationship and register shape the lines
(the register picks the openers of every question of the scene); values fit what they measure,
device contexts fit the setting. An N4 question asks for a fact a person said earlier or a
general-knowledge one.

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

No surface tells (issue 22). Every question turn, T or not, is made of the same pools
(:func:`_question`): an opener, reason clauses, a question frame of the fact kinds, a closer and,
in the paper profile, tail sentences. The explicit T says "Aria" where a question to a person may
say the person's name; the implicit T says no name and may give one more reason.

Implicit addressing. What makes the implicit T a request to the assistant is the conversation
before it (the same in both versions), one of (``implicit_cue``): *keeper*, an N1 turn gave Aria
the job of keeping track of the topic by name; *holder*, the fact itself came from Aria (the
support turn is an N1 turn reporting what Aria said); *unknown*, an N1 turn says Aria follows the
conversation and, right before T, a person says they do not know (often answering the asker's
question to them). In the *relay* pairs (the paper's 42) the previous turn tells the asker "ask
Aria about the ferry"; the implicit version rewrites it without the name ("ask the speaker about
the ferry", as people say it), N1 in both versions. The N4-edited pairs (the paper's 339 with other
differences, less the 42 rewrites) ask their N4 questions in the implicit version as a follow-up
without the name ("while you're at it, ...") and drop the name from a "never mind".
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
from harness.scenes.diagnostic import PAPER_T_ONSET, TURN_GAP_S
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
PAPER_T_CHARS = {"explicit": 111.6, "implicit": 123.3}
PAPER_SPEECH_S = 105.55 * 3600 / 4000  # human speech per conversation (95.0 s; 99.8 s with the 0.4 s gaps)

CUE_FAMILIES: tuple[str, ...] = ("keeper", "holder", "unknown")
CUE_WEIGHTS: tuple[float, ...] = (0.3, 0.3, 0.4)
CUE_BEFORE = {"relay": 2, "keeper": 2, "holder": 2, "unknown": 3}  # turns T needs before it
ASK_P = 0.8  # chance that two adjacent N2 slots become a question to a person and that person's answer
VOCATIVE_P = 0.15  # chance that a question to a person names them (else the one who answers is addressed)
SELF_QUESTION_P = 0.6  # chance that an N3 turn wonders aloud in the words of a question
GENERIC_QUESTION_P = 0.35  # share of the setting's question lines to people kept (fact questions are asked instead)
N4_SCENE_P = 0.7  # chance that an N4 question asks for a fact said earlier (else general knowledge)
ROOM_ASK_P = 0.3  # chance that a question answered by the next speaker was put to everyone


@dataclass(frozen=True)
class Profile:
    name: str
    min_turns: int
    max_turns: int
    exact_silence: bool  # silence windows per pair as in the paper (else: turn count drawn uniformly)
    tails: bool  # lengthen turns towards the paper's speech per conversation


PROFILES: dict[str, Profile] = {
    "compact": Profile("compact", MIN_TURNS, MAX_TURNS, exact_silence=False, tails=False),
    "paper": Profile("paper", 8, 22, exact_silence=True, tails=True),
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


def _fact(rng: random.Random, setting: V.Setting, avoid: str = "", avoid_topic: str = "") -> _Fact:
    """A fact of ``setting`` (kind other than ``avoid``, topic other than ``avoid_topic``): what is
    said, how it is asked for, the value (the gold answer when T asks for it)."""
    kinds = [k for k in ("time", "place", "count", "price", "person", "duration", "code", "room") if k != avoid]
    while True:
        kind = rng.choice(kinds)
        if kind == "time":
            thing, gold = rng.choice(setting.events), f"{rng.choice(V.DAYS)} {rng.choice(V.TIMES)}"
            st = ("{thing} got moved to {x}.", "{thing} is on {x} now, they just confirmed it.",
                  "heads up, {thing} is {x} this week.", "they told me {thing} is {x}.")
            plain = "{thing} is on {x}"
            q = ("when is {thing} now?", "what day and time is {thing}?", "what time is {thing} again?",
                 "when was {thing} moved to?")
        elif kind == "place":
            thing, gold = rng.choice(setting.items), rng.choice(V.PLACES)
            st = ("{thing} is {x}, by the way.", "I put {thing} {x}.", "if anyone needs {thing}, it's {x}.")
            plain = "{thing} is {x}"
            q = ("where is {thing}?", "where can I find {thing}?",
                 "where did {thing} end up?")
        elif kind == "count":
            thing, what = rng.choice(setting.events), rng.choice(V.COUNTABLES)
            gold = f"{rng.choice(V.COUNTS)} {what}"
            st = ("we need {x} for {thing}.", "for {thing} we have to bring {x}.", "count on {x} for {thing}, no more.")
            plain = "we need {x} for {thing}"
            q = (f"how many {what} do we need for {{thing}}?", f"how many {what} was it for {{thing}}?")
        elif kind == "price":
            thing = rng.choice(sorted(V.PRICED_PRICES))
            gold = rng.choice(V.PRICED_PRICES[thing])
            st = ("{thing} cost {x} in the end.", "I paid {x} for {thing}.", "{thing} came to {x}.")
            plain = "{thing} cost {x}"
            q = ("how much did {thing} cost?", "what did {thing} come to?")
        elif kind == "person":
            thing, gold = rng.choice(V.PEOPLE_ROLES), rng.choice(V.FULL_NAMES)
            st = ("{thing} is called {x}.", "{thing}'s name is {x}, remember that.",
                  "oh, and {thing} is {x}, I met them yesterday.")
            plain = "{thing} is called {x}"
            q = ("what's the name of {thing}?", "who is {thing} again?", )
        elif kind == "duration":
            thing = rng.choice(sorted(V.PROCESS_DURATIONS))
            gold = rng.choice(V.PROCESS_DURATIONS[thing])
            st = ("it takes {x} for {thing}.", "plan on {x} for {thing}.", "they said {x} for {thing}.")
            plain = "it takes {x} for {thing}"
            q = ("how long does it take for {thing}?", "how long was it for {thing}?")
        elif kind == "code":
            thing, gold = rng.choice(V.CODED), rng.choice(V.CODES)
            st = ("{thing} is {x}.", "write this down, {thing} is {x}.", "{thing} changed, it's {x} now.")
            plain = "{thing} is {x}"
            q = ("what is {thing}?", "what was {thing} again?")
        else:  # room
            thing, gold = rng.choice(V.ROOMED), rng.choice(V.ROOMS)
            st = ("{thing} is {x}.", "they moved {thing}, it's {x} now.", "{thing} will be {x} this time.")
            plain = "{thing} is {x}"
            q = ("where is {thing}?", "where is {thing} this time?")
        if thing != avoid_topic:
            break
    return _Fact(kind, rng.choice(st).format(thing=thing, x=gold), plain.format(thing=thing, x=gold),
                 tuple(x.replace("{thing}", thing) for x in q), thing, gold)


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
    onset_s: float = 0.0  # paper profile: the seconds from the first turn to T this pair aims at
    n: int = 0
    t: int = 0
    n1: int = 1
    n3: int = 1

    @property
    def before(self) -> int:  # turns T needs before it: the fact and the cue turns (never T as turn 2)
        return CUE_BEFORE[self.cue]


def _plan_corpus(rng: random.Random, n_pairs: int, four_party_share: float, n4_share: float,
                 profile: Profile) -> list[_Plan]:
    four_party = set(rng.sample(range(n_pairs), round(four_party_share * n_pairs)))
    with_n4 = rng.sample(range(n_pairs), round(n4_share * n_pairs))
    n_events = round(len(with_n4) * PAPER_N4_EVENTS / PAPER_N4_SCENES)
    single = set(with_n4[: 2 * len(with_n4) - n_events])  # random order: the first ones get one event
    n4_of = {i: 1 if i in single else 2 for i in with_n4}
    relays = set(rng.sample(range(n_pairs), min(n_pairs, round(PAPER_REWRITES * n_pairs / PAPER_PAIRS))))
    edits = set(rng.sample(sorted(set(with_n4) - relays),
                           min(len(set(with_n4) - relays), round(PAPER_N4_EDITS * n_pairs / PAPER_PAIRS))))
    plans = []
    for i in range(n_pairs):
        relay = i in relays
        cue = "relay" if relay else rng.choices(CUE_FAMILIES, CUE_WEIGHTS)[0]
        p = _Plan(T_POSITIONS[i % 3], 4 if i in four_party else 3, n4_of.get(i, 0), relay, cue, i in edits)
        if not _feasible(profile, p.bucket, p.n4, p.before):
            p.n4 = 1  # compact: a late-middle T leaves room for one event only
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
            else:
                raise ValueError(f"profile {profile.name!r}: turn limits cannot give {target} silence windows")
            plans[k].n += step
            diff -= step
    for p in plans:
        p.t = rng.choice(_t_options(p.n, p.bucket, p.n4, p.before))
    if profile.tails and plans:  # T onsets as the paper's, the later ones to the pairs with more turns before T
        targets = sorted(_paper_onset((k + rng.random()) / n_pairs) for k in range(n_pairs))
        targets[0], targets[-1] = PAPER_T_ONSET["min_s"], max(targets[-1], PAPER_T_ONSET["max_s"])
        for k, target in zip(sorted(range(n_pairs), key=lambda k: plans[k].t + 3 * rng.random()), targets,
                             strict=True):
            plans[k].onset_s = target

    # silence labels: one N1 and one N3 per scene, extras placed over the free slots at random
    silence = sum(p.n - 1 - 2 * p.n4 for p in plans)
    share = sum(PAPER_SILENCE.values())
    extra_n1 = round(silence * PAPER_SILENCE["N1"] / share) - n_pairs
    extra_n3 = round(silence * PAPER_SILENCE["N3"] / share) - n_pairs
    slots = [k for k, p in enumerate(plans) for _ in range(p.n - 1 - 2 * p.n4 - 3 - (p.cue == "unknown"))]
    rng.shuffle(slots)
    for k in slots[:max(0, extra_n1)]:
        plans[k].n1 += 1
    for k in slots[max(0, extra_n1):max(0, extra_n1) + max(0, extra_n3)]:
        plans[k].n3 += 1
    return plans


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
    device_key = rng.choice(_devices_for(setting.name)) if rng.random() < 0.6 else "none"
    register = rng.choice(V.REGISTERS)
    speakers = SPEAKERS[: p.n_speakers]
    names = dict(zip(speakers, rng.sample(V.NAMES, p.n_speakers), strict=True))
    n = p.n
    kinds = _layout(rng, p)

    # -- speakers: nobody speaks twice in a row, except an N4 asker who says never mind ----
    teller, asker = rng.sample(speakers, 2)
    fixed = {"fact": teller, "holder": teller, "T": asker, "ask_t": asker}
    if p.relay:
        fixed["relay"] = rng.choice([s for s in speakers if s not in (teller, asker)])
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
    fact = _fact(rng, setting)
    device_desc, device_lines = V.DEVICES[device_key]
    pools: dict[str, list[str]] = {
        "person": [x for x in setting.to_person + V.RELATIONSHIP_LINES[relationship] + V.N2_PERSON
                   if "?" not in x or rng.random() < GENERIC_QUESTION_P],
        "room": [setting.activities[activity], *setting.to_room, *V.N2_ROOM],
        "device": list(device_lines),
        "N1": list(V.N1_LINES),
        "N3": list(setting.self_talk + V.N3_GENERIC),
    }
    for pool in pools.values():
        rng.shuffle(pool)
    n4_items = rng.sample(V.N4_EVENTS, p.n4)
    openers = V.OPENERS[register]

    def addressee(i: int) -> str:
        nxt = who[i + 1] if i + 1 < n else who[i]
        return nxt if nxt != who[i] else rng.choice([s for s in speakers if s != who[i]])

    def other(i: int, *not_these: str) -> str:
        return names[rng.choice([s for s in speakers if s not in (who[i], *not_these)] or [who[i]])]

    def fill_in(template: str, i: int) -> str:
        """The scene's {event}, {item}, {activity} and another person ({other}) in a line."""
        for key, value in (("{event}", lambda: rng.choice(setting.events)),
                           ("{item}", lambda: rng.choice(setting.items)),
                           ("{activity}", lambda: activity), ("{other}", lambda: other(i, addressee(i)))):
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
        one = [f"{core} {_cap(x)}" for x in pool[:3]]
        two = [f"{c} {_cap(rng.choice([y for y in pool if y not in c]))}" for c in one]
        if i < p.t and p.onset_s:  # before T: the length that keeps this pair on its T onset
            spent = sum(len(x.text) / CHARS_PER_S + TURN_GAP_S for x in turns)
            want = ((p.onset_s - spent) / (p.t - i) - TURN_GAP_S) * CHARS_PER_S
            longer = [*one, *two]
            for _ in range(2):  # up to four tails where the pair needs a long talk before T
                longer += [f"{c} {_cap(rng.choice(rest))}" for c in longer[-3:]
                           if (rest := [y for y in pool if y not in c])]
            short = 3 if i == p.t - 1 else 1  # the last turn before T: rather over than under the onset
            best = min([core, *longer], key=lambda c: max(len(c) - want, short * (want - len(c))))
            steer["turn"].add(len(best))
            return best
        return steer["turn"].pick(rng, [core, *one, *two], k=4 if p.onset_s else 2)  # after T: back to the mean

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

    def ask(f: _Fact, name: str | None, said: bool, closer: bool = True) -> str:
        """A question about ``f`` from the pools T is made of, the reasons drawn as T's are;
        ``said``: the teller has said the fact (a reason may name them)."""
        why = _reasons(rng, rng.choice(REASON_COUNTS), names[teller] if said else None)
        return _question(rng.choice(openers), name, why, rng.choice(f.frames), rng.choice(V.CLOSERS) if closer else "",
                         rng.random() < 0.7)

    fill = {"event": rng.choice(setting.events), "item": rng.choice(setting.items), "activity": activity}
    t_tails = [x.format(**fill, other=names[rng.choice([s for s in speakers if s not in (asker, teller)])])
               for x in V.TAILS["ask"]] if profile.tails else []
    explicit_t, implicit_t = _t_texts(rng, p, fact, openers, names[teller], t_tails, steer)
    relay_pair = rng.choice(V.RELAYS)
    side: _Fact | None = None
    said: list[_Fact] = []  # facts other than T's said so far (an N4 question may ask for one)

    turns: list[Turn] = []
    implicit_turns: list[Turn] = []
    for i, kind in enumerate(kinds):
        alt = None  # implicit-only text
        if kind == "T":
            turn = Turn(who[i], explicit_t, Label.T, Target.ARIA)
            alt = implicit_t
        elif kind == "relay":
            rel_e, rel_i = (_cap(r.format(asker=names[asker], topic=fact.topic)) for r in relay_pair)
            text = tail(rel_e, "aria", i)  # the same tail in both versions: only the reference differs
            turn = Turn(who[i], text, Label.N1, Target.HUMAN)
            alt = rel_i + text[len(rel_e):]
        elif kind == "keeper":
            text = tail(_cap(rng.choice(V.KEEPER_LINES).format(topic=fact.topic)), "aria", i)
            turn = Turn(who[i], text, Label.N1, Target.GROUP)
        elif kind == "holder":
            text = tail(_cap(rng.choice(V.HOLDER_LINES).format(statement=fact.plain + ".")), "aria", i)
            turn = Turn(who[i], text, Label.N1, Target.GROUP)
        elif kind == "present":
            turn = Turn(who[i], tail(fill_in(rng.choice(V.PRESENT_LINES), i), "aria", i), Label.N1, Target.GROUP)
        elif kind == "dunno":
            text = tail(rng.choice(V.DONT_KNOW).format(asker=names[asker], topic=fact.topic), "self", i)
            turn = Turn(who[i], text, Label.N2, Target.HUMAN)
        elif kind in ("ask_t", "ask"):
            if kind == "ask":
                side = _fact(rng, setting, avoid=fact.kind, avoid_topic=fact.topic)
                said.append(side)
            room = kind == "ask" and rng.random() < ROOM_ASK_P  # to everyone; whoever knows answers
            name = (rng.choice(V.ROOM_CALLS) if room else names[addressee(i)]) if rng.random() < VOCATIVE_P else None
            text = tail(ask(fact if kind == "ask_t" else side, name, kind == "ask_t"), "ask", i)
            turn = Turn(who[i], text, Label.N2, Target.GROUP if room else Target.HUMAN)
        elif kind in ("fact", "answer"):
            f = fact if kind == "fact" else side
            answering = i > 0 and kinds[i - 1] in ("ask", "ask_fact")
            if answering:
                st, target = f"{rng.choice(V.REPLIES)} {_decap(f.statement)}", Target.HUMAN
            elif rng.random() < 0.5:
                st, target = f"{names[addressee(i)]}, {f.statement}", Target.HUMAN
            else:
                st, target = _cap(f.statement), Target.GROUP
            turn = Turn(who[i], tail(st, "fact", i), Label.N2, target)
        elif kind == "ask_fact":  # a person asks the teller for the fact, who answers next
            name = names[addressee(i)] if rng.random() < VOCATIVE_P else None
            turn = Turn(who[i], tail(ask(fact, name, False), "ask", i), Label.N2, Target.HUMAN)
        elif kind == "N1":
            text, target = say(pools["N1"].pop(), i, "aria", Target.GROUP)
            turn = Turn(who[i], text, Label.N1, target)
        elif kind == "N3":
            if rng.random() < SELF_QUESTION_P:  # wondering aloud, in the words a question to someone uses
                text = tail(ask(_fact(rng, setting, avoid=fact.kind, avoid_topic=fact.topic), None, False, False),
                            "ask", i)
            else:
                text, _ = say(pools["N3"].pop(), i, "self", Target.NONE)
            turn = Turn(who[i], text, Label.N3, Target.NONE)
        elif kind == "N2":
            weights = {"person": 0.62, "room": 0.2, "device": 0.18}
            group = rng.choices(list(weights), [w if pools[g] else 0.0 for g, w in weights.items()])[0]
            target = {"person": Target.HUMAN, "room": Target.GROUP, "device": Target.DEVICE}[group]
            text, target = say(pools[group].pop(), i, group, target)
            turn = Turn(who[i], text, Label.N2, target)
        elif kind == "N4_Q":
            q_text, answer, reply = n4_items.pop()
            if said and rng.random() < N4_SCENE_P:  # about something a person said earlier, not trivia
                f = said.pop(rng.randrange(len(said)))
                q_text, answer = rng.choice(f.frames), f"As far as I heard earlier, {f.plain}."
                reply = f"{{asker}}, {_decap(f.statement)}"
            opener, closer, first = rng.choice(openers), rng.choice(V.CLOSERS), rng.random() < 0.7
            why = _reasons(rng, rng.choice(REASON_COUNTS), None)
            core = _question(opener, ASSISTANT_NAME, why, q_text, closer, first)
            text = tail(core, "ask", i)
            turn = Turn(who[i], text, Label.N4_Q, Target.ARIA, answer=answer)
            if p.n4_edit:  # a follow-up to the one who just answered, without the name
                follow = [*why, rng.choice(V.FOLLOW_UPS)]
                alt = _question(opener, None, follow, q_text, closer, first) + text[len(core):]
        else:  # N4_R
            if self_resolve[i]:
                head = f"{rng.choice(('Oh', 'Actually', 'Wait', 'No', 'Sorry', 'Hmm'))}, {rng.choice(V.N4_NEVER_MIND)},"
                why = f"{rng.choice(V.N4_NEVER_MIND_WHY)}."
                text = tail(f"{head} {ASSISTANT_NAME}, {why}", "self", i)
                turn = Turn(who[i], text, Label.N4_R, Target.ARIA)
                if p.n4_edit:
                    alt = f"{head} {why}" + text[len(f"{head} {ASSISTANT_NAME}, {why}"):]
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
    explicit, implicit = (
        Scene(f"{pair_id}-{cond}", pair_id, cond, speakers, tuple(ts), fact.gold, dict(attributes), p.bucket,
              speaker_names=dict(names))
        for cond, ts in zip(CONDITIONS, (turns, implicit_turns), strict=True)
    )
    return explicit, implicit


_PROPER = frozenset({"I", ASSISTANT_NAME, *V.NAMES})


def _decap(text: str) -> str:
    """``text`` to follow a comma: its first letter lower-cased, unless it is a name or "I"."""
    first = re.match(r"[A-Za-z']*", text).group(0)
    return text if first in _PROPER or first.startswith("I'") else text[:1].lower() + text[1:]


def _devices_for(setting: str) -> list[str]:
    """Device contexts that fit ``setting``: home devices at home, the navigation app on the road."""
    return [k for k in sorted(V.DEVICES) if k != "none"
            and (k not in V.HOME_DEVICES or setting in V.HOME_SETTINGS)
            and (k not in V.TRAVEL_DEVICES or setting in V.TRAVEL_SETTINGS)]


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
    elif p.cue == "keeper":
        f = put("fact", 0, t - 1)
        put("keeper", f + 1, t)
    elif p.cue == "holder":
        put("holder", 0, t - 1)
    else:  # unknown
        kinds[t - 1] = "dunno"
        put("present", 0, t - 1)
        put("fact", 0, t - 1)
    free = [i for i, k in enumerate(kinds) if k == "o"]
    rng.shuffle(free)
    for _ in range(p.n1 - 1):  # every cue uses one N1 turn (the relay turn, keeper, holder, present)
        kinds[free.pop()] = "N1"
    for _ in range(p.n3):
        kinds[free.pop()] = "N3"
    for i in free:
        kinds[i] = "N2"
    if p.cue == "unknown" and kinds[t - 2] == "N2" and rng.random() < 0.6:
        kinds[t - 2] = "ask_t"  # the asker asks a person first, who does not know either
    for i in range(n - 1):  # questions to a person, answered by that person
        if kinds[i] == "N2" and kinds[i + 1] == "N2" and rng.random() < ASK_P:
            kinds[i], kinds[i + 1] = "ask", "answer"
        elif kinds[i] == "N2" and kinds[i + 1] == "fact" and rng.random() < ASK_P:
            kinds[i] = "ask_fact"
    return kinds


_TRAILING = ("because", "so ", "since", "before")  # reasons said after the question, not before it


REASON_COUNTS = (0, 1, 1, 2)  # reason clauses of a question turn, T or not (drawn from these)
EXTRA_REASON_P = 0.6  # chance that the implicit T gives one more reason (where the explicit one says the name)


def _reasons(rng: random.Random, k: int, teller: str | None, have: list[str] | None = None) -> list[str]:
    """``have`` plus ``k`` more distinct reason clauses, at most one of them said after the question;
    ``teller``: who said the fact asked for (``None``: nobody has, no clause names one)."""
    out = list(have or [])
    for _ in range(k):
        trailing = any(r.startswith(_TRAILING) for r in out)
        pool = [x for x in (r.format(teller=teller) for r in V.ASK_REASONS if teller or "{teller}" not in r)
                if x not in out and not (trailing and x.startswith(_TRAILING))]
        out.append(rng.choice(pool))
    return out


def _question(opener: str, name: str | None, reasons: list[str], question: str, closer: str,
              name_first: bool) -> str:
    """One question turn from the shared pools: ``"Okay, Maya, I lost track. When is the ferry?
    Thanks."``; the name (a person's, or the assistant's) first or last, or none."""
    lead = [f"{r}." for r in reasons if not r.startswith(_TRAILING)]
    trail = "".join(f", {r}" for r in reasons if r.startswith(_TRAILING))  # "..., since I missed it?"
    body = [*lead, f"{question[:-1]}{trail}" + (f", {name}?" if name is not None and not name_first else "?")]
    head = f"{opener}, {name}," if name is not None and name_first else f"{opener},"
    return _join(head, *body) + closer


def _t_texts(rng: random.Random, p: _Plan, fact: _Fact, openers: tuple[str, ...], teller: str,
             tails: list[str], steer: dict[str, _Steer]) -> tuple[str, str]:
    """The explicit and implicit T texts, from the pools every question turn uses: the same opener,
    reasons, question, closer and (paper profile, ``tails``) tail sentences; the explicit one names
    Aria (first or last), the implicit one names no one and may give one more reason (the paper's
    implicit T are 11.7 characters longer)."""
    candidates = []
    for _ in range(12):
        opener, closer = rng.choice(openers), rng.choice(V.CLOSERS)
        q = rng.choice(fact.frames)
        why = _reasons(rng, rng.choice(REASON_COUNTS), teller)
        more = _reasons(rng, 1, teller, why) if rng.random() < EXTRA_REASON_P else why
        first = rng.random() < 0.7
        after = "".join(f" {_cap(x)}" for x in rng.sample(tails, min(len(tails), rng.choice((0, 1, 1, 2)))))
        candidates.append((_question(opener, ASSISTANT_NAME, why, q, closer, first) + after,
                           _question(opener, None, more, q, closer, first) + after))
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
    target_turn = PAPER_SPEECH_S * CHARS_PER_S / 13.09  # chars per turn: 26,182 turns over 2,000 scenes
    steer = {"explicit": _Steer(PAPER_T_CHARS["explicit"]), "implicit": _Steer(PAPER_T_CHARS["implicit"]),
             "turn": _Steer(target_turn)}
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
