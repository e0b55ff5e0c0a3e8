"""Deterministic template generator of Duplex-MPE scene pairs (spec section 2).

No language model and no network: every scene is assembled from the vocabularies of
:mod:`harness.scenes.vocab` with one ``random.Random(seed)``, so the same arguments always
give the same corpus.

A scene draws its five attributes (setting, activity, relationship, device context,
register), gives its speakers first names, states a fact early on (the *support* turn, which
contains the gold answer verbatim) and later asks Aria for that fact (the T turn). Silence
turns are N1 (mention Aria, ask nothing), N2 (to a person by name, to the room, or to another
assistant when the device context has one) and N3 (self-talk, including words to an object:
"Come on, jar, open up" is not device-directed). Some pairs get one or two N4 events
(N4_Q then N4_R) after T.

Two profiles (``profile=``):

* ``compact`` (the demo and the tests): 7-13 turns of one sentence each. A late-middle T
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

Implicit addressing. The explicit T names Aria; the implicit T replaces the name by a cue that
only the assistant fits: its role ("question for our assistant:"), the device it is ("you,
the speaker on the counter"), the contrast with the people ("since you're the only one here
who isn't a person"), or the job an earlier N1 turn gave it by name ("Aria keeps track of the
ferry for us" ... "you're the assistant that's keeping track of the ferry"). A cue that fits
any human ("You were listening.") is never used. In the *relay* pairs (the paper's 42) the
previous turn tells the asker "ask Aria about the ferry" and the T itself is bare ("Okay then,
when is the ferry?"): there the T alone cannot carry the cue, so the previous turn is
rewritten in the implicit version ("ask the assistant about the ferry"); it refers to the
assistant without asking it anything, so it is N1 in both versions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from harness.scenes import vocab as V
from harness.scenes.schema import (
    CONDITIONS,
    SPEAKERS,
    Label,
    Scene,
    SceneError,
    Target,
    Turn,
    validate_pair,
)
from harness.scenes.stats import corpus_stats

T_POSITIONS: tuple[str, ...] = ("early-middle", "middle", "late-middle")
MIN_TURNS, MAX_TURNS = 7, 13  # the compact profile

# the paper's accounting (spec section 2), per 2,000 pairs and per condition
PAPER_PAIRS = 2000
PAPER_SILENCE = {"N1": 3041, "N2": 14052, "N3": 3267}  # explicit; implicit 3,039 / 14,054 / 3,267
PAPER_N4_SCENES, PAPER_N4_EVENTS = 968, 1911
PAPER_REWRITES = 42
PAPER_T_CHARS = {"explicit": 111.6, "implicit": 123.3}
PAPER_SPEECH_S = 105.55 * 3600 / 4000  # human speech per conversation (95.0 s; 99.8 s with the 0.4 s gaps)
CHARS_PER_S = (111.6 + 123.3) / (8.18 + 8.58)  # the paper's speaking rate from its T figures (14.0 chars/s)

CUE_FAMILIES: tuple[str, ...] = ("role", "device", "contrast", "keeper")
CUE_WEIGHTS: tuple[float, ...] = (0.3, 0.25, 0.2, 0.25)
DISTRACTOR_P = 0.5  # chance that one N2 slot states a second, unasked fact


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
    statement: str  # may start with "{name}, "
    question: str  # lower-case start, ends with "?"; may name the {teller}
    topic: str
    gold: str


def _fact(rng: random.Random, setting: V.Setting, avoid: str = "") -> _Fact:
    kinds = [k for k in ("time", "place", "count", "price", "person", "duration", "code", "room") if k != avoid]
    kind = rng.choice(kinds)
    if kind == "time":
        thing, gold = rng.choice(setting.events), f"{rng.choice(V.DAYS)} {rng.choice(V.TIMES)}"
        st = rng.choice(("{thing} got moved to {x}.", "{thing} is on {x} now, they just confirmed it.",
                         "heads up, {thing} is {x} this week.", "they told me {thing} is {x}."))
        q = rng.choice(("when is {thing} now?", "what day and time is {thing}?", "when did {teller} say {thing} is?"))
        topic = thing
    elif kind == "place":
        thing, gold = rng.choice(setting.items), rng.choice(V.PLACES)
        st = rng.choice(("{thing} is {x}, by the way.", "I put {thing} {x}.", "if anyone needs {thing}, it's {x}."))
        q = rng.choice(("where is {thing}?", "where did {teller} put {thing}?", "where can I find {thing}?"))
        topic = thing
    elif kind == "count":
        thing, what = rng.choice(setting.events), rng.choice(V.COUNTABLES)
        gold = f"{rng.choice(V.COUNTS)} {what}"
        st = rng.choice(("we need {x} for {thing}.", "for {thing} we have to bring {x}.",
                         "count on {x} for {thing}, no more."))
        q = rng.choice((f"how many {what} do we need for {{thing}}?", f"how many {what} did {{teller}} say?"))
        topic = thing
    elif kind == "price":
        thing, gold = rng.choice(V.PRICED), rng.choice(V.PRICES)
        st = rng.choice(("{thing} cost {x} in the end.", "I paid {x} for {thing}.", "{thing} came to {x}."))
        q = rng.choice(("how much did {thing} cost?", "what did {teller} pay for {thing}?"))
        topic = thing
    elif kind == "person":
        thing, gold = rng.choice(V.PEOPLE_ROLES), rng.choice(V.FULL_NAMES)
        st = rng.choice(("{thing} is called {x}.", "{thing}'s name is {x}, remember that.",
                         "oh, and {thing} is {x}, I met them yesterday."))
        q = rng.choice(("what's the name of {thing}?", "who is {thing} again?",
                        "what did {teller} say {thing} is called?"))
        topic = thing
    elif kind == "duration":
        thing, gold = rng.choice(V.PROCESSES), rng.choice(V.DURATIONS)
        st = rng.choice(("it takes {x} for {thing}.", "plan on {x} for {thing}.", "they said {x} for {thing}."))
        q = rng.choice(("how long does it take for {thing}?", "how long did {teller} say for {thing}?"))
        topic = thing
    elif kind == "code":
        thing, gold = rng.choice(V.CODED), rng.choice(V.CODES)
        st = rng.choice(("{thing} is {x}.", "write this down, {thing} is {x}.", "{thing} changed, it's {x} now."))
        q = rng.choice(("what is {thing}?", "what did {teller} say {thing} is?"))
        topic = thing
    else:  # room
        thing, gold = rng.choice(V.ROOMED), rng.choice(V.ROOMS)
        st = rng.choice(("{thing} is {x}.", "they moved {thing}, it's {x} now.", "{thing} will be {x} this time."))
        q = rng.choice(("where is {thing}?", "where did {teller} say {thing} is?"))
        topic = thing
    return _Fact(kind, st.format(thing=thing, x=gold), q.replace("{thing}", thing), topic, gold)


# -- steering: keep running means on the paper's targets ---------------------------------------
class _Steer:
    """Choose among random candidates the one that moves a running mean towards its target
    (two random candidates, the closer wins: the mean converges, the texts stay varied)."""

    def __init__(self, target: float):
        self.target, self.total, self.count = target, 0.0, 0

    def pick(self, rng: random.Random, candidates: list[Any]) -> Any:
        """One of two random ``candidates`` (strings, or tuples whose first item is the text)."""
        a, b = rng.choice(candidates), rng.choice(candidates)
        def size(c):
            return (len(c[0] if isinstance(c, tuple) else c))
        best = min((a, b), key=lambda c: abs((self.total + size(c)) / (self.count + 1) - self.target))
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
    n: int = 0
    t: int = 0
    n1: int = 1
    n3: int = 1

    @property
    def before(self) -> int:  # turns T needs before it: the fact (+ keeper or relay turn)
        return 2 if self.relay or self.cue == "keeper" else 1


def _plan_corpus(rng: random.Random, n_pairs: int, four_party_share: float, n4_share: float,
                 profile: Profile) -> list[_Plan]:
    four_party = set(rng.sample(range(n_pairs), round(four_party_share * n_pairs)))
    with_n4 = rng.sample(range(n_pairs), round(n4_share * n_pairs))
    n_events = round(len(with_n4) * PAPER_N4_EVENTS / PAPER_N4_SCENES)
    single = set(with_n4[: 2 * len(with_n4) - n_events])  # random order: the first ones get one event
    n4_of = {i: 1 if i in single else 2 for i in with_n4}
    relays = set(rng.sample(range(n_pairs), min(n_pairs, round(PAPER_REWRITES * n_pairs / PAPER_PAIRS))))
    plans = []
    for i in range(n_pairs):
        relay = i in relays
        cue = "relay" if relay else rng.choices(CUE_FAMILIES, CUE_WEIGHTS)[0]
        p = _Plan(T_POSITIONS[i % 3], 4 if i in four_party else 3, n4_of.get(i, 0), relay, cue)
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

    # silence labels: one N1 and one N3 per scene, extras placed over the free slots at random
    silence = sum(p.n - 1 - 2 * p.n4 for p in plans)
    share = sum(PAPER_SILENCE.values())
    extra_n1 = round(silence * PAPER_SILENCE["N1"] / share) - n_pairs
    extra_n3 = round(silence * PAPER_SILENCE["N3"] / share) - n_pairs
    slots = [k for k, p in enumerate(plans) for _ in range(p.n - 1 - 2 * p.n4 - 3)]
    rng.shuffle(slots)
    for k in slots[:max(0, extra_n1)]:
        plans[k].n1 += 1
    for k in slots[max(0, extra_n1):max(0, extra_n1) + max(0, extra_n3)]:
        plans[k].n3 += 1
    return plans


def _make_pair(rng: random.Random, pair_id: str, p: _Plan, profile: Profile,
               steer: dict[str, _Steer]) -> tuple[Scene, Scene]:
    setting = rng.choice(V.SETTINGS)
    activity = rng.choice(sorted(setting.activities))
    relationship = rng.choice(sorted(V.RELATIONSHIP_LINES))
    device_key = rng.choice(sorted(V.DEVICES)) if rng.random() < 0.6 else "none"
    register = rng.choice(V.REGISTERS)
    speakers = SPEAKERS[: p.n_speakers]
    names = dict(zip(speakers, rng.sample(V.NAMES, p.n_speakers), strict=True))
    n, t = p.n, p.t

    # -- layout --------------------------------------------------------------------------------
    kinds = ["o"] * n
    kinds[t] = "T"
    after = ["E"] * p.n4 + ["o"] * (n - 1 - t - 1 - 2 * p.n4)
    rng.shuffle(after)
    seq = ["o"] + [k for a in after for k in (("N4_Q", "N4_R") if a == "E" else ("o",))]
    kinds[t + 1:] = seq
    if p.relay:
        kinds[t - 1] = "relay"
        kinds[rng.randrange(t - 1)] = "fact"
    elif p.cue == "keeper":
        f = rng.randrange(t - 1)
        kinds[f] = "fact"
        kinds[rng.randrange(f + 1, t)] = "keeper"
    else:
        kinds[rng.randrange(t)] = "fact"
    free = [i for i, k in enumerate(kinds) if k == "o"]
    rng.shuffle(free)
    n1_left = p.n1 - (1 if p.relay or p.cue == "keeper" else 0)
    for _ in range(n1_left):
        kinds[free.pop()] = "N1"
    for _ in range(p.n3):
        kinds[free.pop()] = "N3"
    if free and rng.random() < DISTRACTOR_P:
        kinds[free.pop()] = "distractor"
    for i in free:
        kinds[i] = "N2"

    # -- speakers: nobody speaks twice in a row, except an N4 asker who says never mind ----
    teller, asker = rng.sample(speakers, 2)
    fixed = {"fact": teller, "T": asker}
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
    distractor = _fact(rng, setting, avoid=fact.kind)
    device_desc, device_lines = V.DEVICES[device_key]
    device_name = device_desc.split(" called ")[-1] if " called " in device_desc else None
    pools: dict[str, list[str]] = {
        "person": list(setting.to_person + V.RELATIONSHIP_LINES[relationship] + V.N2_PERSON),
        "room": [setting.activities[activity], *setting.to_room, *V.N2_ROOM],
        "device": list(device_lines),
        "N1": list(V.N1_LINES),
        "N3": list(setting.self_talk + V.N3_GENERIC),
    }
    for pool in pools.values():
        rng.shuffle(pool)
    n4_items = rng.sample(V.N4_EVENTS, p.n4)

    def addressee(i: int) -> str:
        nxt = who[i + 1] if i + 1 < n else who[i]
        return nxt if nxt != who[i] else rng.choice([s for s in speakers if s != who[i]])

    def tail(core: str, kind: str) -> str:
        """Paper profile: add zero, one or two tail sentences, steering the mean turn length."""
        if not profile.tails:
            return core
        pool = V.TAILS[kind]
        one = [f"{core} {x}" for x in rng.sample(pool, min(3, len(pool)))]
        two = [f"{c} {rng.choice([y for y in pool if y not in c])}" for c in one]
        return steer["turn"].pick(rng, [core, *one, *two])

    def say(template: str, i: int, kind: str, target: Target) -> tuple[str, Target]:
        if "{name}" in template:
            template, target = template.format(name=names[addressee(i)]), Target.HUMAN
        return tail(template, kind), target

    teller_name = names[teller]
    q = fact.question.format(teller=teller_name)
    context = rng.choice(V.T_CONTEXTS).format(teller=teller_name)
    explicit_t, implicit_t = _t_texts(rng, p, q, context, setting, register, fact, device_name, steer)
    relay_pair = rng.choice(V.RELAYS)

    turns: list[Turn] = []
    implicit_turns: list[Turn] = []
    for i, kind in enumerate(kinds):
        alt = None  # implicit-only text
        if kind == "T":
            turn = Turn(who[i], explicit_t, Label.T, Target.ARIA)
            alt = implicit_t
        elif kind == "relay":
            rel_e, rel_i = (r.format(asker=names[asker], topic=fact.topic) for r in relay_pair)
            turn = Turn(who[i], _cap(rel_e), Label.N1, Target.HUMAN)
            alt = _cap(rel_i)
        elif kind == "keeper":
            text = _cap(rng.choice(V.KEEPER_LINES).format(topic=fact.topic))
            turn = Turn(who[i], text, Label.N1, Target.GROUP)
        elif kind in ("fact", "distractor"):
            f = fact if kind == "fact" else distractor
            st = f"{{name}}, {f.statement}" if rng.random() < 0.5 else _cap(f.statement)
            text, target = say(st, i, "fact", Target.GROUP)
            turn = Turn(who[i], text, Label.N2, target)
        elif kind == "N1":
            text, target = say(pools["N1"].pop(), i, "aria", Target.GROUP)
            turn = Turn(who[i], text, Label.N1, target)
        elif kind == "N3":
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
            turn = Turn(who[i], rng.choice(V.N4_Q_FORMS).format(q=q_text), Label.N4_Q, Target.ARIA, answer=answer)
        else:  # N4_R
            if self_resolve[i]:
                turn = Turn(who[i], rng.choice(V.N4_NEVER_MIND), Label.N4_R, Target.ARIA)
            else:
                turn = Turn(who[i], reply.format(asker=names[who[i - 1]]), Label.N4_R, Target.HUMAN)
        if kind in ("N4_Q", "N4_R", "keeper", "relay"):
            steer["turn"].add(len(turn.text))
        turns.append(turn)
        implicit_turns.append(turn if alt is None else Turn(turn.speaker, alt, turn.label, turn.target))

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


def _t_texts(rng: random.Random, p: _Plan, q: str, context: str, setting: V.Setting, register: str, fact: _Fact,
             device_name: str | None, steer: dict[str, _Steer]) -> tuple[str, str]:
    """The explicit and implicit T texts: the same context and question; the explicit one names
    Aria (at the start or the end), the implicit one carries the pair's cue instead."""
    opener = rng.choice(V.OPENERS[register])
    if p.relay:
        cues = [r.split("{q}")[0].strip() for r in V.RELAY_T]
    else:
        cues = []
        for cue in V.CUES[p.cue]:
            cue = cue.format(spot=setting.spot, topic=fact.topic)
            if device_name and p.cue != "keeper":  # another assistant is present: set Aria apart from it
                cue = f"{rng.choice(V.NOT_OTHER).format(device=device_name)} {cue}"
            cues.append(cue)
    candidates = []  # (explicit, implicit): the same context, question and closer; name vs cue
    for _ in range(12):
        ctx = rng.choice((context, ""))
        closer = rng.choice(V.T_CLOSERS)
        if rng.random() < 0.7:
            explicit = _join(f"{opener},", rng.choice(V.EXPLICIT_ADDR), ctx, q) + closer
        else:
            explicit = _join(f"{opener},", ctx, q[:-1] + ", Aria?") + closer
        cue = rng.choice(cues)
        implicit = (_join(cue, ctx, q) if p.relay else _join(f"{opener},", cue, ctx, q)) + closer
        candidates.append((explicit, implicit))
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


__all__ = ["CHARS_PER_S", "PROFILES", "T_POSITIONS", "SceneError", "check_profile", "check_share",
           "corpus_stats", "distinct_share", "generate_pairs", "t_bucket"]
