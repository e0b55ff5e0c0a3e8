"""Deterministic template generator of Duplex-MPE scene pairs (spec section 2).

No language model and no network: every scene is assembled from the small vocabularies
below with one ``random.Random(seed)``, so the same arguments always give the same corpus.

A scene draws its five attributes (setting, activity, relationship, device context,
register), gives its speakers first names, states a fact early on (the *support* turn,
which contains the gold answer verbatim) and later asks Aria for that fact (the T turn).
Silence turns are N1 (mention Aria, ask nothing), N2 (to a person by name, to the room,
to a thing, or to another assistant when the device context has one) and N3 (self-talk).
About ``n4_share`` of the scenes get one or two N4 events (N4_Q then N4_R) after T.

Project decisions where the paper is silent (spec section 2):

* T position buckets are thirds of the scene: :func:`t_bucket`. Buckets are cycled over
  pairs (``pair index % 3``), which gives the paper's 667 / 667 / 666 for 2,000 pairs.
* Scenes have 7 to 13 turns. Two N4 events need five turns after T (one ordinary turn,
  then two question/resolution pairs), which a late-middle T never leaves in 13 turns, so
  late-middle scenes with N4 get one event; elsewhere one event is drawn with the paper's
  share (25 of 968 N4 scenes, since 1,911 events = 2 x 968 - 25).
* The T turn is opener + optional context + question. The explicit opener names Aria
  ("Hey Aria,"); the implicit one does not ("Hey.") and a short cue follows the context
  ("You were listening."), so the two versions differ by the name and the cue only. In a
  share of pairs (``PREV_REWRITE_SHARE``) the cue is carried by the previous turn instead,
  rewritten in the implicit version only ("... The assistant heard it, let's ask."), and
  the implicit T just asks ("Can you remind us?"). That turn keeps its label N2: it is
  said to the room and refers to "the assistant" without the name; N1 is kept for turns
  that name Aria.
* The 3-party / 4-party split and the set of N4 scenes are exact quotas
  (``round(share * n_pairs)`` pairs), placed at random.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from harness.scenes.schema import CONDITIONS, SPEAKERS, Label, Scene, Target, Turn, validate_pair

T_POSITIONS: tuple[str, ...] = ("early-middle", "middle", "late-middle")
MIN_TURNS, MAX_TURNS = 7, 13
N4_SINGLE_SHARE = 25 / 968  # paper: 968 N4 scenes with 1,911 events -> 25 scenes with a single event
EXTRA_N1_P = 0.057  # chance that a free silence slot becomes an extra N1 (tuned to the paper's ~15 %)
EXTRA_N3_P = 0.074  # same for N3 (paper ~16 %); the rest of the free slots are N2 (~69 %)
PREV_REWRITE_SHARE = 0.2  # pairs whose implicit cue is carried by the rewritten previous turn
DISTRACTOR_P = 0.5  # chance of a second, unasked fact among the N2 turns


@dataclass(frozen=True)
class _Fact:
    statement: str  # said by the teller; contains ``gold`` verbatim; may address {name}
    question: str  # direct question, lower-case start; may name the {teller}
    topic: str  # noun phrase for the bridge turn, e.g. "the dentist appointment"
    gold: str


@dataclass(frozen=True)
class _Setting:
    name: str
    activities: dict[str, str]  # activity -> an N2 line to the room about it
    relationships: tuple[str, ...]
    devices: tuple[str, ...]  # keys of _DEVICES
    facts: tuple[_Fact, ...]
    to_person: tuple[str, ...]  # N2 lines starting with {name}
    to_room: tuple[str, ...]  # N2 lines to everyone
    to_thing: tuple[str, ...]  # N2 lines to an object
    self_talk: tuple[str, ...]  # N3 lines


@dataclass(frozen=True)
class _N4:
    question: str
    answer: str  # 10-16 words: about 3-5 s of speech
    human_reply: str  # another person answers; may name the {asker}


_SETTINGS: tuple[_Setting, ...] = (
    _Setting(
        name="kitchen at home",
        activities={
            "cooking dinner": "Okay, let's get dinner going before everyone starves.",
            "baking a cake": "Let's get this cake in the oven soon, people.",
            "unpacking groceries": "Everyone grab a bag, the cold stuff goes in first.",
        },
        relationships=("family", "roommates", "old friends"),
        devices=("none", "nova", "milo", "watch"),
        facts=(
            _Fact("{name}, the dentist moved my appointment to Thursday at three.",
                  "when is {teller}'s dentist appointment?", "the dentist appointment", "Thursday at three"),
            _Fact("Grandma's recipe says four eggs, not three.",
                  "how many eggs does the recipe need?", "the recipe", "four eggs"),
            _Fact("The plumber is coming on Monday morning, so someone has to be home.",
                  "when is the plumber coming?", "the plumber", "Monday morning"),
            _Fact("{name}, the cake needs forty minutes in the oven.",
                  "how long does the cake need to bake?", "the cake", "forty minutes"),
        ),
        to_person=(
            "{name}, can you pass me the salt?",
            "{name}, taste this and tell me if it needs pepper.",
            "{name}, please wash those tomatoes for me.",
            "{name}, where did you put the big pan?",
        ),
        to_room=("Careful, the pan is really hot.", "Who left the fridge door open again?"),
        to_thing=("Come on, jar, open up already.", "Stop beeping, oven, I heard you the first time."),
        self_talk=(
            "Hmm, one more pinch of salt, I think.",
            "Onions first, then the garlic.",
            "Where did I put the measuring cup?",
            "Okay, that smells about right.",
        ),
    ),
    _Setting(
        name="office meeting room",
        activities={
            "planning a product launch": "Let's go over the launch plan one more time.",
            "reviewing the budget": "Right, let's go through the budget line by line.",
            "preparing a client pitch": "Let's run through the pitch from the top.",
        },
        relationships=("coworkers",),
        devices=("none", "nova", "watch", "juno"),
        facts=(
            _Fact("Heads up, the client call got moved to Friday at ten.",
                  "when is the client call?", "the client call", "Friday at ten"),
            _Fact("{name}, our budget for the launch is fifty thousand dollars.",
                  "what is our budget for the launch?", "the budget", "fifty thousand dollars"),
            _Fact("The new team is moving to the seventh floor next month.",
                  "which floor is the new team moving to?", "the move", "seventh floor"),
            _Fact("{name}, the designer we hired is called Laura Chen.",
                  "who is the designer we hired?", "the designer", "Laura Chen"),
        ),
        to_person=(
            "{name}, can you share your screen?",
            "{name}, did you update the timeline?",
            "{name}, could you take notes today?",
            "{name}, send me that file after the meeting.",
        ),
        to_room=("Let's keep this meeting short, please.", "Okay everyone, five more minutes on this."),
        to_thing=("Come on, projector, wake up.", "Why is this marker always dry?"),
        self_talk=(
            "Where is that spreadsheet?",
            "Hmm, these numbers don't add up.",
            "Okay, slide four, then slide five.",
            "I really need more coffee.",
        ),
    ),
    _Setting(
        name="car on a road trip",
        activities={
            "driving to the coast": "Only two more hours to the coast, everyone.",
            "looking for a gas station": "We really need to find gas soon, folks.",
            "choosing road trip snacks": "Okay, snack time, pass the bag around.",
        },
        relationships=("family", "old friends", "roommates"),
        devices=("none", "nova", "watch"),
        facts=(
            _Fact("The hotel is in a little town called Riverside.",
                  "what town is our hotel in?", "the hotel", "Riverside"),
            _Fact("{name}, I booked the ferry for half past six.",
                  "what time is our ferry?", "the ferry", "half past six"),
            _Fact("The campsite manager's name is Walter, he'll meet us there.",
                  "what is the campsite manager's name?", "the campsite", "Walter"),
            _Fact("We have to leave the hotel by eleven tomorrow.",
                  "when do we have to leave the hotel?", "the hotel", "by eleven tomorrow"),
        ),
        to_person=(
            "{name}, can you turn the music down a bit?",
            "{name}, keep your eyes on the road, please.",
            "{name}, pass me the water bottle.",
            "{name}, are you okay to keep driving?",
        ),
        to_room=("Look at that view, everyone.", "Seat belts on, we're going again."),
        to_thing=("Come on, little car, climb that hill.", "Stupid seat belt, let go of me."),
        self_talk=(
            "Left here, then straight for a while.",
            "I think I left my sunglasses at the hotel.",
            "Hmm, that sign said the coast road.",
            "I should have packed a sweater.",
        ),
    ),
    _Setting(
        name="living room on game night",
        activities={
            "playing a board game": "Okay, whose turn is it in this game?",
            "choosing a movie": "We have to pick a movie at some point tonight.",
            "ordering pizza": "Let's sort out the food before we start.",
        },
        relationships=("family", "old friends", "roommates", "neighbors"),
        devices=("none", "nova", "milo", "juno"),
        facts=(
            _Fact("{name}, I ordered two large mushroom pizzas.",
                  "what pizzas did {teller} order?", "the pizza order", "two large mushroom pizzas"),
            _Fact("The movie starts at a quarter to nine.",
                  "what time does the movie start?", "the movie", "a quarter to nine"),
            _Fact("Last week the winner was Uncle Pete, believe it or not.",
                  "who won last week?", "last week's game", "Uncle Pete"),
            _Fact("{name}, the pizza place said forty minutes.",
                  "how long did the pizza place say?", "the pizza", "forty minutes"),
        ),
        to_person=(
            "{name}, it's your turn to roll.",
            "{name}, stop peeking at my cards.",
            "{name}, grab some napkins from the kitchen.",
            "{name}, you can't move there, that's cheating.",
        ),
        to_room=("No phones at the table tonight, everyone.", "Whoever loses does the dishes."),
        to_thing=("Come on, dice, give me a six.", "Stay on the table, little piece."),
        self_talk=(
            "If I move here, then he moves there.",
            "Hmm, I need one more card.",
            "Wait, where's my drink?",
            "Okay, think, think.",
        ),
    ),
    _Setting(
        name="backyard barbecue",
        activities={
            "grilling burgers": "The grill is hot, let's get the burgers on.",
            "setting up the tables": "Let's get the tables set before people arrive.",
            "watering the garden": "The garden looks so dry this week.",
        },
        relationships=("family", "neighbors", "old friends"),
        devices=("none", "nova", "watch"),
        facts=(
            _Fact("{name}, the neighbors are bringing a lemon cake.",
                  "what are the neighbors bringing?", "the neighbors", "a lemon cake"),
            _Fact("The forecast says rain around five o'clock.",
                  "when is the rain supposed to start?", "the weather", "around five o'clock"),
            _Fact("We need twelve buns for the burgers.",
                  "how many buns do we need?", "the burgers", "twelve buns"),
            _Fact("{name}, the spare key is under the blue flower pot.",
                  "where is the spare key?", "the spare key", "under the blue flower pot"),
        ),
        to_person=(
            "{name}, hand me the tongs, please.",
            "{name}, can you bring out more plates?",
            "{name}, flip those burgers before they burn.",
            "{name}, watch out for the hose.",
        ),
        to_room=("Food's almost ready, everyone.", "Grab a drink from the cooler, folks."),
        to_thing=("Come on, grill, light already.", "Go away, wasp, nobody invited you."),
        self_talk=(
            "Two more minutes on this side.",
            "Where did I leave the lighter?",
            "Hmm, the charcoal looks good now.",
            "I should water the roses later.",
        ),
    ),
    _Setting(
        name="clinic waiting room",
        activities={
            "waiting for a checkup": "I hope they call us in soon.",
            "filling in forms": "So many forms for one checkup, honestly.",
            "waiting for test results": "The results should be ready any minute now.",
        },
        relationships=("family", "old friends"),
        devices=("none", "nova", "watch"),
        facts=(
            _Fact("The nurse said we'll see Doctor Patel today.",
                  "which doctor are we seeing today?", "the doctor", "Doctor Patel"),
            _Fact("{name}, my prescription is for ten days.",
                  "how long is {teller}'s prescription for?", "the prescription", "ten days"),
            _Fact("The pharmacy downstairs closes at seven tonight.",
                  "when does the pharmacy close?", "the pharmacy", "seven tonight"),
            _Fact("{name}, remember we parked on level three.",
                  "which level did we park on?", "the parking", "level three"),
        ),
        to_person=(
            "{name}, do you have a pen I can borrow?",
            "{name}, did you bring the insurance card?",
            "{name}, sit down, you're making me nervous.",
            "{name}, can you hold my coat?",
        ),
        to_room=("It's so quiet in here today.", "Everyone got their forms?"),
        to_thing=("Come on, vending machine, take my coin.", "Please work, stupid pen."),
        self_talk=(
            "Date of birth, then address.",
            "Hmm, which box do I tick here?",
            "I always forget my own phone number.",
            "Okay, breathe, it's just a checkup.",
        ),
    ),
    _Setting(
        name="study group in the library",
        activities={
            "revising for an exam": "Let's go over the hard chapters first.",
            "writing a group report": "We should split the report into sections.",
            "planning a presentation": "Let's decide who presents which part.",
        },
        relationships=("classmates",),
        devices=("none", "nova", "juno", "watch"),
        facts=(
            _Fact("The exam got moved to next Wednesday.",
                  "when is the exam now?", "the exam", "next Wednesday"),
            _Fact("{name}, the report has to be eight pages long.",
                  "how long does the report have to be?", "the report", "eight pages"),
            _Fact("Professor Lewis wants the slides by Sunday night.",
                  "when does Professor Lewis want the slides?", "the slides", "by Sunday night"),
            _Fact("{name}, our study room for next time is room twenty.",
                  "which room do we have next time?", "the study room", "room twenty"),
        ),
        to_person=(
            "{name}, can I borrow your notes later?",
            "{name}, did you finish the reading?",
            "{name}, you take the introduction, okay?",
            "{name}, shh, people are looking at us.",
        ),
        to_room=("Let's take a short break, everyone.", "Keep your voices down, all of you."),
        to_thing=("Come on, laptop, don't die on me now.", "Open, you silly zipper."),
        self_talk=(
            "Chapter three, then chapter five.",
            "Hmm, I don't get this formula.",
            "Where did I put my highlighter?",
            "Okay, focus, just one more page.",
        ),
    ),
    _Setting(
        name="hotel lobby on vacation",
        activities={
            "checking in": "Let's get checked in and drop the bags.",
            "planning a day trip": "So what do we want to see tomorrow?",
            "waiting for a taxi": "The taxi should be here any minute.",
        },
        relationships=("family", "old friends", "coworkers"),
        devices=("none", "nova", "watch", "juno"),
        facts=(
            _Fact("Breakfast is served until half past ten.",
                  "until when is breakfast served?", "breakfast", "half past ten"),
            _Fact("{name}, our rooms are on the fourth floor.",
                  "which floor are our rooms on?", "the rooms", "fourth floor"),
            _Fact("The tour bus leaves from the main square.",
                  "where does the tour bus leave from?", "the tour bus", "the main square"),
            _Fact("{name}, the taxi driver's name is Marco.",
                  "what is the taxi driver's name?", "the taxi", "Marco"),
        ),
        to_person=(
            "{name}, do you have the passports?",
            "{name}, watch the suitcases for a second.",
            "{name}, go ask at the front desk.",
            "{name}, did you pack the charger?",
        ),
        to_room=("What a beautiful lobby, everyone.", "Let's meet back here in ten minutes."),
        to_thing=("Come on, suitcase, roll straight.", "Open, stupid door, I have a key card."),
        self_talk=(
            "Passport, wallet, phone, okay.",
            "Hmm, I thought it was warmer here.",
            "Which way was the elevator?",
            "I need a nap before dinner.",
        ),
    ),
)

_DEVICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "none": ("none", ()),
    "nova": ("a phone assistant called Nova", (
        "Nova, set a timer for ten minutes.",
        "Nova, what's the weather like tomorrow?",
        "Nova, play something relaxing.",
        "Nova, remind me to call the bank.",
    )),
    "milo": ("a smart speaker on the shelf called Milo", (
        "Milo, turn the music down.",
        "Milo, play the news.",
        "Milo, stop the music.",
        "Milo, what song is this?",
    )),
    "watch": ("a smart watch that takes voice commands", (
        "Watch, start a walking workout.",
        "Watch, set an alarm for six.",
        "Watch, how many steps today?",
    )),
    "juno": ("a tablet assistant called Juno", (
        "Juno, show me the photos from Saturday.",
        "Juno, open the shopping list.",
        "Juno, what's on my calendar today?",
    )),
}

_RELATIONSHIP_LINES: dict[str, tuple[str, ...]] = {
    "family": ("{name}, did you call Grandma back?", "{name}, you promised to clean your room this weekend."),
    "coworkers": ("{name}, nice job on the last project.", "{name}, let's grab lunch after this."),
    "roommates": ("{name}, it's your turn to take out the trash.", "{name}, did you pay the internet bill?"),
    "old friends": ("{name}, remember our trip to the lake?", "{name}, we should do this more often."),
    "neighbors": ("{name}, your dog was barking again last night.", "{name}, thanks for watering our plants."),
    "classmates": ("{name}, did you finish the homework for Monday?", "{name}, the lecture was so boring today."),
}

_N1_LINES: tuple[str, ...] = (
    "Aria was really useful yesterday.",
    "I'm glad we set up Aria last month.",
    "Aria reminded me about the bills last week.",
    "{name}, Aria helped me plan the whole weekend.",
    "Let's not bother Aria with this one.",
    "Aria always knows the best recipes.",
    "My sister wants an assistant like Aria now.",
    "{name}, I told my mom all about Aria.",
    "Honestly, Aria is better at dates than I am.",
    "Aria's voice is so calm, I like it.",
)

_GENERIC_SELF_TALK: tuple[str, ...] = ("Hmm, let me think.", "Where are my keys?", "Okay, okay, one thing at a time.")

# The T turn is built from parts: explicit = opener naming Aria + shared context + question;
# implicit = opener without the name + the same context + a cue + the same question.
# register -> (explicit openers, implicit opener)
_REGISTERS: dict[str, tuple[tuple[str, ...], str]] = {
    "casual": (("Hey Aria,", "Aria,"), "Hey."),
    "formal": (("Excuse me, Aria.", "Aria, if you don't mind."), "Excuse me."),
    "hurried": (("Aria, quick.", "Quick, Aria,"), "Quick."),
    "playful": (("Okay Aria, pop quiz.", "Aria, here's one for you."), "Okay, pop quiz."),
}
_T_CONTEXTS: tuple[str, ...] = ("", "", "none of us remembers.", "I forgot already.", "we can't agree here.")
_IMPLICIT_CUES: tuple[str, ...] = (
    "You were listening.",
    "You heard {teller} say it.",
    "You keep track of things.",
    "You heard all of that.",
)
_IMPLICIT_BARE: tuple[str, ...] = ("Can you remind us?", "Can you tell us?")  # the previous turn carries the cue
# (explicit previous turn, its implicit rewrite); said to the room by a third person
_BRIDGES: tuple[tuple[str, str], ...] = (
    ("Wait, what did {teller} say about {topic}? I already forgot.",
     "Wait, what did {teller} say about {topic}? The assistant heard it, let's ask."),
    ("I can't remember what {teller} said about {topic}.",
     "I can't remember what {teller} said about {topic}, but the assistant was listening."),
)

_N4_EVENTS: tuple[_N4, ...] = (
    _N4("how long should I boil an egg?",
        "For a soft boiled egg about six minutes, for a hard boiled one about ten.",
        "{asker}, about six minutes for a soft one."),
    _N4("what's the capital of Australia?",
        "The capital of Australia is Canberra, not Sydney, which surprises a lot of people.",
        "It's Canberra, {asker}, everyone gets that wrong."),
    _N4("how many ounces are in a pound?",
        "There are sixteen ounces in one pound, so half a pound is eight ounces.",
        "Sixteen, {asker}, I just used it for a recipe."),
    _N4("who wrote Pride and Prejudice?",
        "Pride and Prejudice was written by Jane Austen and first published in eighteen thirteen.",
        "That was Jane Austen, {asker}."),
    _N4("how far away is the moon?",
        "The moon is about two hundred and forty thousand miles away from Earth on average.",
        "Roughly a quarter million miles, {asker}, I read that yesterday."),
    _N4("what can I use instead of butter in a cake?",
        "You can use the same amount of coconut oil, or applesauce for about half of it.",
        "Use coconut oil, {asker}, it works fine."),
    _N4("how do you say thank you in Japanese?",
        "In Japanese you say arigato, or arigato gozaimasu if you want to be more polite.",
        "It's arigato, {asker}, I learned it on our trip."),
    _N4("how many legs does a spider have?",
        "A spider has eight legs, which is one way to tell it apart from insects.",
        "Eight, {asker}, insects have six."),
    _N4("at what temperature does water boil in Fahrenheit?",
        "At sea level, water boils at two hundred and twelve degrees Fahrenheit.",
        "Two hundred and twelve, {asker}."),
    _N4("which planet is the largest?",
        "Jupiter is the largest planet in our solar system, more than eleven times wider than Earth.",
        "Jupiter, {asker}, it's not even close."),
    _N4("how long does it take to walk a mile?",
        "Most people walk a mile in about fifteen to twenty minutes at a relaxed pace.",
        "About twenty minutes, {asker}, if you don't rush."),
    _N4("what's the tallest mountain in the world?",
        "Mount Everest is the tallest mountain above sea level, at almost twenty nine thousand feet.",
        "Everest, {asker}, obviously."),
    _N4("what's the chemical symbol for gold?",
        "The chemical symbol for gold is A U, which comes from the Latin word aurum.",
        "It's A U, {asker}, from the Latin word."),
    _N4("who painted the Mona Lisa?",
        "The Mona Lisa was painted by Leonardo da Vinci in the early fifteen hundreds.",
        "Leonardo da Vinci, {asker}."),
)
_N4_Q_FORMS: tuple[str, ...] = ("Aria, {q}", "Hey Aria, quick question, {q}", "Aria, {q} I always forget.")
_N4_NEVER_MIND: tuple[str, ...] = (
    "Never mind, Aria, I just looked it up.",
    "Actually, forget it, Aria.",
    "Oh wait, never mind, Aria, I remember now.",
    "Sorry Aria, never mind, it doesn't matter.",
)

# Human first names: short, distinct, espeak-friendly, none sounding like Aria or a device name.
_NAMES: tuple[str, ...] = (
    "Sam", "Maya", "Leo", "Nina", "Omar", "Priya", "Jack", "Ella",
    "Ben", "Zoe", "Tom", "Lucy", "Raj", "Kate", "Dan", "Grace",
)


def t_bucket(t_index: int, n_turns: int) -> str:
    """Return the T position bucket of a T turn at ``t_index`` in a scene of ``n_turns`` turns.

    The buckets of spec section 2 are the thirds of the scene by turn index:
    ``"early-middle"`` when ``3 * t_index // n_turns == 0``, ``"middle"`` for 1 and
    ``"late-middle"`` for 2. Raises ``ValueError`` when ``t_index`` is not in ``[0, n_turns)``.
    """
    if not 0 <= t_index < n_turns:
        raise ValueError(f"t_index {t_index} outside a scene of {n_turns} turns")
    return T_POSITIONS[3 * t_index // n_turns]


@cache
def _layouts(bucket: str, n4_events: int) -> tuple[tuple[int, int], ...]:
    """All (n_turns, t_index) that fit the bucket, the N4 events and one N1, N2, N3 each."""
    need_after = max(2, 1 + 2 * n4_events)  # T is followed by >= 2 turns, N4_Q never right after T
    return tuple(
        (n, t)
        for n in range(MIN_TURNS, MAX_TURNS + 1)
        for t in range(1, n)
        if t_bucket(t, n) == bucket and n - 1 - t >= need_after and n - 1 - 2 * n4_events >= 3
    )


def _join(*parts: str) -> str:
    """Join sentence parts with spaces, capitalising a part unless it follows a comma.

    Parts other than openers start in lower case so that they can follow a comma.
    """
    out = ""
    for part in filter(None, parts):
        if not out.endswith(","):
            part = part[:1].upper() + part[1:]
        out = f"{out} {part}" if out else part
    return out


def _make_pair(rng: random.Random, pair_id: str, bucket: str, n_speakers: int, has_n4: bool) -> tuple[Scene, Scene]:
    setting = rng.choice(_SETTINGS)
    activity = rng.choice(sorted(setting.activities))
    relationship = rng.choice(setting.relationships)
    device_key = rng.choice(setting.devices)
    register = rng.choice(sorted(_REGISTERS))
    speakers = SPEAKERS[:n_speakers]
    names = dict(zip(speakers, rng.sample(_NAMES, n_speakers), strict=True))

    # -- layout: which kind of turn goes where ------------------------------------------
    n4 = (1 if rng.random() < N4_SINGLE_SHARE else 2) if has_n4 else 0
    if not _layouts(bucket, n4):
        n4 = 1  # late-middle T leaves room for one event only (module docstring)
    n, t = rng.choice(_layouts(bucket, n4))
    after = ["E"] * n4 + ["o"] * (n - 1 - t - 2 * n4 - 1)
    rng.shuffle(after)
    kinds = ["o"] * t + ["T", "o"] + [k for a in after for k in (("N4_Q", "N4_R") if a == "E" else (a,))]
    silence = [i for i, k in enumerate(kinds) if k == "o"]
    bridge = t >= 2 and len(silence) >= 4 and rng.random() < PREV_REWRITE_SHARE
    if bridge:
        kinds[t - 1] = "bridge"
    kinds[rng.randrange(t - 1 if bridge else t)] = "fact"
    free = [i for i, k in enumerate(kinds) if k == "o"]
    rng.shuffle(free)
    kinds[free.pop()] = "N1"
    kinds[free.pop()] = "N3"
    if len(free) >= 2 and rng.random() < DISTRACTOR_P:
        kinds[free.pop()] = "distractor"
    for i in free:
        r = rng.random()
        kinds[i] = "N1" if r < EXTRA_N1_P else "N3" if r < EXTRA_N1_P + EXTRA_N3_P else "N2"

    # -- speakers: nobody speaks twice in a row, except an N4 asker who says never mind --
    teller, asker = rng.sample(speakers, 2)
    bridger = rng.choice([s for s in speakers if s not in (teller, asker)])
    fixed = {"fact": teller, "T": asker, "bridge": bridger}
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

    # -- texts ----------------------------------------------------------------------------
    fact, distractor = rng.sample(setting.facts, 2)
    device_context, device_lines = _DEVICES[device_key]
    pools: dict[Target, list[str]] = {
        Target.HUMAN: list(setting.to_person + _RELATIONSHIP_LINES[relationship]),
        Target.GROUP: [setting.activities[activity], *setting.to_room],
        Target.DEVICE: list(setting.to_thing + device_lines),
    }
    n1_pool = list(_N1_LINES)
    n3_pool = list(setting.self_talk + _GENERIC_SELF_TALK)
    n4_items = rng.sample(_N4_EVENTS, n4)
    for pool in (*pools.values(), n1_pool, n3_pool):
        rng.shuffle(pool)

    def addressee(i: int) -> str:
        nxt = who[i + 1] if i + 1 < n else who[i]
        return nxt if nxt != who[i] else rng.choice([s for s in speakers if s != who[i]])

    def statement(template: str, i: int) -> tuple[str, Target]:
        if "{name}" in template:
            return template.format(name=names[addressee(i)]), Target.HUMAN
        return template, Target.GROUP

    teller_name = names[teller]
    q = fact.question.format(teller=teller_name)
    openers, implicit_opener = _REGISTERS[register]
    context = rng.choice(_T_CONTEXTS)
    cue = rng.choice(_IMPLICIT_BARE if bridge else _IMPLICIT_CUES).format(teller=teller_name)
    explicit_t = _join(rng.choice(openers), context, q)
    implicit_t = _join(implicit_opener, context, cue, q)
    bridge_explicit, bridge_implicit = (b.format(teller=teller_name, topic=fact.topic) for b in rng.choice(_BRIDGES))

    turns: list[Turn] = []
    implicit_turns: list[Turn] = []
    for i, kind in enumerate(kinds):
        alt = None  # implicit-only text
        if kind == "T":
            turn = Turn(who[i], explicit_t, Label.T, Target.ARIA)
            alt = implicit_t
        elif kind == "bridge":
            turn = Turn(who[i], bridge_explicit, Label.N2, Target.GROUP)
            alt = bridge_implicit
        elif kind in ("fact", "distractor"):
            text, target = statement((fact if kind == "fact" else distractor).statement, i)
            turn = Turn(who[i], text, Label.N2, target)
        elif kind == "N1":
            text, target = statement(n1_pool.pop(), i)
            turn = Turn(who[i], text, Label.N1, target)
        elif kind == "N3":
            turn = Turn(who[i], n3_pool.pop(), Label.N3, Target.NONE)
        elif kind == "N2":
            weights = {Target.HUMAN: 0.6, Target.GROUP: 0.15, Target.DEVICE: 0.25}
            target = rng.choices(list(weights), [w if pools[g] else 0.0 for g, w in weights.items()])[0]
            text = pools[target].pop()
            turn = Turn(who[i], text.format(name=names[addressee(i)]), Label.N2, target)
        elif kind == "N4_Q":
            n4_item = n4_items.pop()
            q_text = rng.choice(_N4_Q_FORMS).format(q=n4_item.question)
            turn = Turn(who[i], q_text, Label.N4_Q, Target.ARIA, answer=n4_item.answer)
        else:  # N4_R
            if self_resolve[i]:
                turn = Turn(who[i], rng.choice(_N4_NEVER_MIND), Label.N4_R, Target.ARIA)
            else:
                reply = n4_item.human_reply.format(asker=names[who[i - 1]])
                turn = Turn(who[i], reply, Label.N4_R, Target.HUMAN)
        turns.append(turn)
        implicit_turns.append(turn if alt is None else Turn(turn.speaker, alt, turn.label, turn.target))

    attributes = {
        "setting": setting.name,
        "activity": activity,
        "relationship": relationship,
        "device_context": device_context,
        "register": register,
    }
    explicit, implicit = (
        Scene(f"{pair_id}-{cond}", pair_id, cond, speakers, tuple(ts), fact.gold, dict(attributes), bucket)
        for cond, ts in zip(CONDITIONS, (turns, implicit_turns), strict=True)
    )
    return explicit, implicit


def check_share(label: str, share: object) -> None:
    """Raise ValueError unless ``share`` (a fraction of the pairs) is a number in [0, 1]."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
        raise ValueError(f"{label} must be a number in [0, 1], got {share!r}")


def generate_pairs(n_pairs: int, seed: int, four_party_share: float = 0.25, n4_share: float = 0.5) -> list[Scene]:
    """Generate ``n_pairs`` explicit/implicit scene pairs from templates (spec section 2).

    Returns ``2 * n_pairs`` scenes ordered pair by pair, explicit before implicit; pair ids
    are ``p00000``, ``p00001``, ...; scene ids ``f"{pair_id}-{condition}"``. The output
    depends only on the arguments (one ``random.Random(seed)``, no global state).
    ``round(four_party_share * n_pairs)`` pairs have four speakers (A-D), the others three;
    ``round(n4_share * n_pairs)`` pairs have one or two N4 events after T. T position
    buckets cycle over pairs. Every scene is checked with :meth:`Scene.validate` and every
    pair with :func:`validate_pair`.

    Raises ``ValueError`` when ``n_pairs`` is negative or a share is outside [0, 1], and
    :class:`~harness.scenes.schema.SceneError` if a template produced an invalid scene.
    """
    if n_pairs < 0:
        raise ValueError(f"n_pairs must be >= 0, got {n_pairs}")
    check_share("four_party_share", four_party_share)
    check_share("n4_share", n4_share)
    rng = random.Random(seed)
    four_party = set(rng.sample(range(n_pairs), round(four_party_share * n_pairs)))
    with_n4 = set(rng.sample(range(n_pairs), round(n4_share * n_pairs)))
    scenes: list[Scene] = []
    for idx in range(n_pairs):
        bucket = T_POSITIONS[idx % len(T_POSITIONS)]
        explicit, implicit = _make_pair(rng, f"p{idx:05d}", bucket, 4 if idx in four_party else 3, idx in with_n4)
        explicit.validate()
        implicit.validate()
        validate_pair(explicit, implicit)
        scenes += (explicit, implicit)
    return scenes


def corpus_stats(scenes: Iterable[Scene]) -> dict[str, dict]:
    """Summarise a corpus per condition (for reports; spec section 2 gives the paper's numbers).

    Returns ``{condition: stats}`` for both conditions, where ``stats`` has ``scenes``,
    ``three_party``, ``four_party``, ``labels`` (turn count per label value),
    ``scenes_with_n4``, ``n4_events`` (number of N4_Q turns), ``t_position`` (scenes per
    bucket) and ``mean_t_chars`` (mean characters of the T text; 0.0 without scenes).
    Raises :class:`~harness.scenes.schema.SceneError` for a scene without exactly one T.
    """
    out: dict[str, dict] = {}
    by_cond: dict[str, list[Scene]] = {c: [] for c in CONDITIONS}
    for s in scenes:
        by_cond.setdefault(s.condition, []).append(s)
    for cond, group in by_cond.items():
        labels = Counter(turn.label.value for s in group for turn in s.turns)
        t_chars = [len(s.turns[s.t_index].text) for s in group]
        out[cond] = {
            "scenes": len(group),
            "three_party": sum(len(s.speakers) == 3 for s in group),
            "four_party": sum(len(s.speakers) == 4 for s in group),
            "labels": {label.value: labels.get(label.value, 0) for label in Label},
            "scenes_with_n4": sum(any(turn.label is Label.N4_Q for turn in s.turns) for s in group),
            "n4_events": labels.get(Label.N4_Q.value, 0),
            "t_position": {b: sum(s.t_position == b for s in group) for b in T_POSITIONS},
            "mean_t_chars": sum(t_chars) / len(t_chars) if t_chars else 0.0,
        }
    return out
