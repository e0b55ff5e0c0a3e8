"""Vocabulary of the template generator (:mod:`harness.scenes.generator`).

Plain data: settings with their activities and lines, device contexts, relationships,
registers, fact frames (question types whose answers an earlier turn states), implicit
addressing cues, N1 / N2 / N3 lines and N4 events. Placeholders: ``{name}`` (the person
addressed), ``{topic}``, ``{spot}`` (where the assistant's
device stands), ``{asker}`` (who asked an N4 question or T), ``{statement}`` (a fact as a clause),
``{event}`` / ``{item}`` / ``{activity}`` / ``{other}`` (the setting's, the scene's, another person).

Rules the lines keep (checked by tests/unit/test_scenes.py):

* only N1 lines (the keeper, holder, present and relay turns are N1), T turns and N4 turns refer
  to Aria; no other line names it or refers to it by a role noun or device word
  (:data:`harness.scenes.schema.DESIGNATOR`);
* lines to an object (a jar, a printer) are self-talk (N3), not device-directed: N2 to a
  device means another assistant (``DEVICES``);
* human names are distinct from Aria and from the device names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    activities: dict[str, str]  # activity -> a line to the room about it (N2, group)
    spot: str  # where the assistant's device stands, e.g. "the speaker on the counter"
    to_person: tuple[str, ...]  # N2 lines starting with {name},
    to_room: tuple[str, ...]  # N2 lines to everyone
    self_talk: tuple[str, ...]  # N3 lines, including words to an object
    events: tuple[str, ...]  # nouns for time facts ("the plumber's visit")
    items: tuple[str, ...]  # nouns for place facts ("the spare key")


SETTINGS: tuple[Setting, ...] = (
    Setting("kitchen at home",
            {"cooking dinner": "Okay, let's get dinner going before everyone starves.",
             "baking a birthday cake": "Let's get this cake in the oven soon, people.",
             "unpacking groceries": "Everyone grab a bag, the cold stuff goes in first."},
            "the speaker on the counter",
            ("{name}, can you pass me the salt?", "{name}, taste this and tell me if it needs pepper.",
             "{name}, please wash those tomatoes for me.", "{name}, where did you put the big pan?"),
            ("Careful, the pan is really hot.", "Who left the fridge door open again?"),
            ("Hmm, one more pinch of salt, I think.", "Come on, jar, open up already.",
             "Onions first, then the garlic.", "Stop beeping, oven, I heard you the first time."),
            ("the plumber's visit", "the grocery delivery", "Grandma's visit"),
            ("the spare key", "the good scissors", "the birthday candles")),
    Setting("office meeting room",
            {"planning a product launch": "Let's go over the launch plan one more time.",
             "reviewing the quarterly budget": "Right, let's go through the budget line by line.",
             "preparing a client pitch": "Let's run through the pitch from the top."},
            "the conference speaker in the middle of the table",
            ("{name}, can you share your screen?", "{name}, did you update the timeline?",
             "{name}, could you take notes today?", "{name}, send me that file after the meeting."),
            ("Let's keep this meeting short, please.", "Okay everyone, five more minutes on this."),
            ("Where is that spreadsheet?", "Why is this marker always dry?",
             "Come on, projector, wake up.", "Hmm, these numbers don't add up."),
            ("the client call", "the board review", "the design workshop"),
            ("the spare badge", "the projector remote", "the signed contract")),
    Setting("car on a road trip",
            {"driving to the coast": "Only two more hours to the coast, everyone.",
             "looking for a gas station": "We really need to find gas soon, folks.",
             "sharing road trip snacks": "Okay, snack time, pass the bag around."},
            "the dashboard",
            ("{name}, can you turn the music down a bit?", "{name}, keep your eyes on the road, please.",
             "{name}, pass me the water bottle.", "{name}, are you okay to keep driving?"),
            ("Look at that view, everyone.", "Seat belts on, we're going again."),
            ("Left here, then straight for a while.", "Come on, little car, climb that hill.",
             "Stupid seat belt, let go of me.", "I should have packed a sweater."),
            ("the ferry", "the hotel check in", "the boat tour"),
            ("the car charger", "the paper map", "the tent poles")),
    Setting("living room on game night",
            {"playing a board game": "Okay, whose turn is it in this game?",
             "choosing a movie": "We have to pick a movie at some point tonight.",
             "ordering takeout": "Let's sort out the food before we start."},
            "the speaker on the bookshelf",
            ("{name}, it's your turn to roll.", "{name}, stop peeking at my cards.",
             "{name}, grab some napkins from the kitchen.", "{name}, you can't move there, that's cheating."),
            ("No phones at the table tonight, everyone.", "Whoever loses does the dishes."),
            ("If I move here, then he moves there.", "Come on, dice, give me a six.",
             "Hmm, I need one more card.", "Stay on the table, little piece."),
            ("the movie", "the food delivery", "the next tournament"),
            ("the extra dice", "the score sheet", "the remote control")),
    Setting("backyard barbecue",
            {"grilling burgers": "The grill is hot, let's get the burgers on.",
             "setting up the tables": "Let's get the tables set before people arrive.",
             "watering the garden": "The garden looks so dry this week."},
            "the outdoor speaker by the back door",
            ("{name}, hand me the tongs, please.", "{name}, can you bring out more plates?",
             "{name}, flip those burgers before they burn.", "{name}, watch out for the hose."),
            ("Food's almost ready, everyone.", "Grab a drink from the cooler, folks."),
            ("Two more minutes on this side.", "Come on, grill, light already.",
             "Go away, wasp, nobody invited you.", "I should water the roses later."),
            ("the fireworks", "the neighbors' arrival", "the cake delivery"),
            ("the lighter", "the folding chairs", "the bug spray")),
    Setting("clinic waiting room",
            {"waiting for a checkup": "I hope they call us in soon.",
             "filling in forms": "So many forms for one checkup, honestly.",
             "waiting for test results": "The results should be ready any minute now."},
            "the tablet assistant on the side table",
            ("{name}, do you have a pen I can borrow?", "{name}, did you bring the insurance card?",
             "{name}, sit down, you're making me nervous.", "{name}, can you hold my coat?"),
            ("It's so quiet in here today.", "Everyone got their forms?"),
            ("Date of birth, then address.", "Come on, vending machine, take my coin.",
             "Hmm, which box do I tick here?", "Please work, stupid pen."),
            ("the follow up appointment", "the blood test", "the physiotherapy session"),
            ("the insurance card", "the referral letter", "the parking ticket")),
    Setting("study group in the library",
            {"revising for an exam": "Let's go over the hard chapters first.",
             "writing a group report": "We should split the report into sections.",
             "planning a presentation": "Let's decide who presents which part."},
            "the study room speaker on the shelf",
            ("{name}, can I borrow your notes later?", "{name}, did you finish the reading?",
             "{name}, you take the introduction, okay?", "{name}, shh, people are looking at us."),
            ("Let's take a short break, everyone.", "Keep your voices down, all of you."),
            ("Chapter three, then chapter five.", "Come on, laptop, don't die on me now.",
             "Hmm, I don't get this formula.", "Open, you silly zipper."),
            ("the exam", "the lab session", "the presentation rehearsal"),
            ("the library card", "the printed slides", "the calculator")),
    Setting("hotel lobby on vacation",
            {"checking in": "Let's get checked in and drop the bags.",
             "planning a day trip": "So what do we want to see tomorrow?",
             "waiting for a taxi": "The taxi should be here any minute."},
            "the concierge speaker on the coffee table",
            ("{name}, do you have the passports?", "{name}, watch the suitcases for a second.",
             "{name}, go ask at the front desk.", "{name}, did you pack the charger?"),
            ("What a beautiful lobby, everyone.", "Let's meet back here in ten minutes."),
            ("Passport, wallet, phone, okay.", "Come on, suitcase, roll straight.",
             "Which way was the elevator?", "Open, stupid door, I have a key card."),
            ("the city tour", "the airport shuttle", "the dinner reservation"),
            ("the room keys", "the passports", "the travel adapter")),
    Setting("garage workshop",
            {"fixing a bicycle": "Let's get this bike rideable by the weekend.",
             "building a bookshelf": "Okay, let's figure out which board goes where.",
             "sorting old tools": "We have way too many screwdrivers, people."},
            "the speaker on the workbench",
            ("{name}, hold this board steady for me.", "{name}, pass me the small wrench.",
             "{name}, is the glue dry yet?", "{name}, put your goggles on, please."),
            ("Mind your fingers near the saw, everyone.", "Nobody touch the wet paint."),
            ("Left is loose, right is tight.", "Come on, bolt, turn for me.",
             "Where did that little screw go?", "Hmm, this shelf looks crooked."),
            ("the hardware store trip", "the paint delivery", "the bike race"),
            ("the drill bits", "the tape measure", "the spare inner tube")),
    Setting("campsite by the lake",
            {"pitching the tents": "Let's get the tents up before it gets dark.",
             "making a campfire": "We need more dry wood for the fire.",
             "planning a hike": "So which trail are we doing tomorrow?"},
            "the camping speaker hanging in the tent",
            ("{name}, hold the other end of the tent.", "{name}, did you bring the matches?",
             "{name}, can you fill the water jug?", "{name}, zip the tent, the bugs are coming in."),
            ("Everyone stay away from the edge of the lake.", "Lights out by eleven, folks."),
            ("Peg here, peg there, okay.", "Come on, fire, catch already.",
             "I think it's going to rain tonight.", "Hmm, these boots are still wet."),
            ("the canoe rental", "the ranger's talk", "the sunrise hike"),
            ("the flashlight", "the first aid kit", "the bear spray")),
    Setting("wedding planning meeting at a cafe",
            {"choosing the flowers": "Okay, flowers, let's finally decide on the flowers.",
             "planning the seating": "The seating plan is going to take forever.",
             "tasting cake samples": "Let's try all the cake samples before we vote."},
            "the planner's speaker next to the sugar bowl",
            ("{name}, which color did you like best?", "{name}, try this lemon one.",
             "{name}, did your aunt confirm yet?", "{name}, write that down before we forget."),
            ("This place has the best coffee, everyone.", "We only have the table for an hour."),
            ("Roses or tulips, roses or tulips.", "Come on, pen, write.",
             "Hmm, too much frosting on this one.", "I should call the florist later."),
            ("the dress fitting", "the venue visit", "the rehearsal dinner"),
            ("the guest list", "the ring box", "the sample book")),
    Setting("school parents' evening",
            {"waiting to meet the teacher": "I hope we're next, it's getting late.",
             "looking at the art display": "Look at all these paintings on the wall.",
             "planning the school fair": "Let's figure out who runs which stall at the fair."},
            "the classroom speaker on the teacher's desk",
            ("{name}, did you see the science project?", "{name}, save me a seat, please.",
             "{name}, ask about the homework policy.", "{name}, put your phone away, we're next."),
            ("These chairs are so tiny, everyone.", "Let's not stay too long tonight, folks."),
            ("Math first, then reading.", "Come on, zipper, close.",
             "Hmm, which room was it again?", "I should have brought a snack."),
            ("the school trip", "the fair", "the next parents' meeting"),
            ("the permission slip", "the lunch money", "the spare uniform")),
    Setting("community garden",
            {"planting tomatoes": "Let's get the tomatoes in the ground today.",
             "pulling weeds": "These weeds grow faster than anything we plant.",
             "building a compost bin": "The compost bin has to go in the corner."},
            "the garden speaker on the shed",
            ("{name}, pass me the trowel, please.", "{name}, water the beans while you're there.",
             "{name}, don't step on the seedlings.", "{name}, bring the wheelbarrow over here."),
            ("Gloves on, everyone, the nettles are back.", "Lemonade break in five minutes, folks."),
            ("Deep enough, I think.", "Come on, root, let go.",
             "Hmm, the soil is so dry.", "Where did I leave my hat?"),
            ("the seed swap", "the compost delivery", "the harvest party"),
            ("the shed key", "the seed packets", "the garden hose")),
    Setting("band rehearsal room",
            {"rehearsing a new song": "Let's run the new song from the top.",
             "setting up the gear": "Cables first, then the amps, people.",
             "planning the setlist": "We need to fix the setlist for Saturday."},
            "the speaker next to the mixing desk",
            ("{name}, you're rushing the chorus again.", "{name}, tune your guitar, please.",
             "{name}, turn your amp down a little.", "{name}, count us in this time."),
            ("Okay everyone, one more time, with feeling.", "Water break, everyone."),
            ("G, then C, then D.", "Come on, cable, stop crackling.",
             "Hmm, that bridge still sounds wrong.", "My fingers hurt already."),
            ("the gig", "the studio session", "the sound check"),
            ("the spare strings", "the tuner", "the set list")),
    Setting("hospital visiting room",
            {"visiting a grandparent": "Grandpa looks much better today.",
             "waiting for the doctor's round": "The doctor should come by soon.",
             "bringing get-well presents": "Let's put the flowers by the window."},
            "the bedside speaker",
            ("{name}, open the window a little, please.", "{name}, can you find a vase for these?",
             "{name}, talk a bit quieter, people are sleeping.", "{name}, pour Grandpa some water."),
            ("Visiting hours end soon, everyone.", "Let's not tire him out, folks."),
            ("Flowers here, card there.", "Come on, blinds, go up.",
             "Hmm, the food here looks awful.", "I should bring a book next time."),
            ("the discharge", "the x-ray", "the next visit"),
            ("the reading glasses", "the phone charger", "the hospital parking card")),
    Setting("airport gate",
            {"waiting to board": "Boarding should start any minute now.",
             "looking for the gate": "Let's find our gate before anything else.",
             "buying snacks for the flight": "Let's grab some snacks before we board."},
            "the travel speaker clipped to the backpack",
            ("{name}, do you have the boarding passes?", "{name}, watch the bags for a second.",
             "{name}, go check the departures board.", "{name}, did you charge your phone?"),
            ("Everyone stay together at the gate, please.", "Let's not miss this flight, folks."),
            ("Gate twelve, gate twelve.", "Come on, zipper, close already.",
             "Hmm, my ears always pop on these flights.", "I forgot to buy a neck pillow."),
            ("the connecting flight", "the airport pickup", "the return flight"),
            ("the boarding passes", "the headphones", "the luggage tags")),
    Setting("gym locker room",
            {"planning a workout": "Let's decide what we're training today.",
             "signing up for classes": "The spin classes fill up so fast here.",
             "stretching after a run": "Stretch properly this time, everybody."},
            "the fitness speaker on the bench",
            ("{name}, spot me on the last set.", "{name}, lend me your towel.",
             "{name}, you forgot your water bottle.", "{name}, slow down, it's not a race."),
            ("Locker room closes at ten, everyone.", "Nobody leave your shoes in the aisle, please."),
            ("Ten more, just ten more.", "Come on, lock, open.",
             "Hmm, my knee feels strange today.", "I need new running shoes."),
            ("the spin class", "the personal training session", "the swim meet"),
            ("the locker key", "the spare towel", "the membership card")),
    Setting("farmers market stall",
            {"setting up the stall": "Let's get the stall set up before the crowd.",
             "pricing the vegetables": "We need price tags on everything today.",
             "packing up at closing": "Okay, let's pack up, it's nearly closing time."},
            "the little speaker by the cash box",
            ("{name}, put the apples at the front.", "{name}, can you weigh these potatoes?",
             "{name}, grab more paper bags from the van.", "{name}, give that lady her change."),
            ("Fresh strawberries, everyone, get them while they last.", "Busy morning, folks."),
            ("Two for three, three for four.", "Come on, scale, stop jumping.",
             "Hmm, the lettuce is wilting already.", "I should have brought gloves."),
            ("the next market day", "the delivery of pumpkins", "the health inspection"),
            ("the cash box key", "the price board", "the spare tablecloth")),
    Setting("apartment moving day",
            {"packing boxes": "Let's get the kitchen boxes done first.",
             "loading the van": "Heavy stuff goes in the van first, everyone.",
             "cleaning the old place": "Let's leave this place spotless for the deposit."},
            "the speaker sitting on the windowsill",
            ("{name}, tape this box for me.", "{name}, careful, that one has glasses in it.",
             "{name}, lift with your legs, not your back.", "{name}, label this one kitchen."),
            ("Nobody pack the kettle yet, everyone.", "Pizza break at noon, folks."),
            ("Books in the small boxes.", "Come on, tape, stop tearing.",
             "Hmm, where did all this stuff come from?", "I should have started packing last week."),
            ("the van return", "the key handover", "the internet installation"),
            ("the new keys", "the tape gun", "the box of cables")),
    Setting("book club at a friend's house",
            {"discussing the novel": "So, what did everyone think of the ending?",
             "picking the next book": "We need to pick next month's book tonight.",
             "sharing snacks": "Help yourselves to the snacks, everyone."},
            "the speaker on the side table",
            ("{name}, did you finish it this time?", "{name}, read us that part you liked.",
             "{name}, pass the cheese plate.", "{name}, no spoilers, I'm not done."),
            ("Phones off for book club, everyone.", "Let's keep it to one hour tonight, folks."),
            ("Chapter twelve, where was it?", "Come on, bookmark, stay put.",
             "Hmm, I didn't see that twist coming.", "I always fall asleep reading."),
            ("the author talk", "the next meeting", "the book fair"),
            ("the borrowed copy", "the reading list", "the extra chairs")),
    Setting("office kitchen at lunch",
            {"heating up lunch": "The microwave line is so long today.",
             "planning a team lunch": "Let's plan the team lunch for next week.",
             "making coffee": "Who wants coffee, I'm making a pot."},
            "the kitchen speaker above the sink",
            ("{name}, is that your yogurt in the fridge?", "{name}, you're next for the microwave.",
             "{name}, pass me a spoon.", "{name}, did you clean the coffee machine?"),
            ("Label your food, everyone, please.", "Somebody keeps stealing the milk, folks."),
            ("Two minutes, then stir.", "Come on, microwave, hurry up.",
             "Hmm, this soup is still cold.", "I forgot my lunch again."),
            ("the team lunch", "the fire drill", "the all hands meeting"),
            ("the good mugs", "the spare fridge key", "the coffee filters")),
    Setting("ski lodge",
            {"renting skis": "Let's sort out the rentals before the lifts open.",
             "warming up by the fire": "Finally, a fire, let's warm up.",
             "planning the slopes": "Which slopes are we doing this afternoon?"},
            "the lodge speaker on the mantelpiece",
            ("{name}, hand me my gloves.", "{name}, did you wax your board?",
             "{name}, your goggles are on your head.", "{name}, sit closer to the fire."),
            ("Everyone drink some water, the air is dry up here.", "Last lift is at four, folks."),
            ("Boots, gloves, helmet.", "Come on, buckle, close.",
             "Hmm, my toes are frozen.", "I should have rented a helmet."),
            ("the ski lesson", "the lift closing", "the snowshoe tour"),
            ("the lift passes", "the hand warmers", "the ski locker key")),
    Setting("vet clinic",
            {"waiting with the dog": "The dog is shaking, poor thing.",
             "checking in the cat": "Let's get the cat checked in first.",
             "picking up medicine": "We need to pick up the medicine before we go."},
            "the speaker by the reception bell",
            ("{name}, hold the leash tight.", "{name}, keep the carrier closed.",
             "{name}, give him a treat, he's nervous.", "{name}, fill in the weight on the form."),
            ("It smells like a zoo in here, everyone.", "Quiet dogs only in this corner, folks."),
            ("Name, breed, age.", "Come on, carrier door, latch.",
             "Hmm, he hasn't eaten since yesterday.", "I hope it's nothing serious."),
            ("the vaccination", "the surgery", "the dental cleaning"),
            ("the vaccination card", "the spare leash", "the treats")),
    Setting("art class studio",
            {"painting a still life": "Let's start with the big shapes first.",
             "cleaning brushes": "Brushes in the jar when you're done, people.",
             "preparing an exhibition": "We need to choose which pieces to hang."},
            "the studio speaker on the easel shelf",
            ("{name}, pass me the blue paint.", "{name}, your painting looks amazing.",
             "{name}, don't lean on my canvas.", "{name}, hand me a clean rag."),
            ("Windows open, everyone, the paint smells.", "Ten minutes left in class, folks."),
            ("Light from the left, shadow on the right.", "Come on, cap, come off.",
             "Hmm, this green is too bright.", "I ruined the sky again."),
            ("the exhibition opening", "the framing appointment", "the next class"),
            ("the good brushes", "the palette knife", "the studio key")),
)

# device context key -> (description, N2 lines to that device or assistant): commands, not questions
# (a device-directed turn is an N2 silence window; {event}, {item}, {other} as in the module docstring;
# {absent}: someone not in the room, whom a message goes to)
ABSENT: tuple[str, ...] = ("my sister", "Mom", "the neighbors", "my brother", "Dad", "the landlord", "my boss")
DEVICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "none": ("none", ()),
    "nova": ("a phone assistant called Nova", (
        "Nova, set a timer for ten minutes.", "Nova, remind me about {event} tomorrow morning.",
        "Nova, play something relaxing.", "Nova, remind me to call the bank.",
        "Nova, text {absent} that we're running late.", "Nova, add {item} to my packing list.",
        "Nova, set a timer for twenty minutes.", "Nova, turn on do not disturb.",
        "Nova, send {absent} the address for {event}.", "Nova, note that {item} is with {other}.")),
    "milo": ("a smart speaker in the hallway called Milo", (
        "Milo, turn the music down.", "Milo, play the news.", "Milo, stop the music.", "Milo, play some jazz.",
        "Milo, skip this song.", "Milo, volume to four.", "Milo, add milk to the shopping list.",
        "Milo, play {other}'s playlist.", "Milo, remind everyone about {event} at six.")),
    "juno": ("a tablet assistant called Juno", (
        "Juno, show me the photos from Saturday.", "Juno, open the shopping list.", "Juno, show my calendar for today.",
        "Juno, put {event} in the calendar.", "Juno, open my notes about {event}.", "Juno, make the screen brighter.",
        "Juno, show {other} the list for {event}.", "Juno, add {item} to the checklist.")),
    "watch": ("a smart watch that takes voice commands", (
        "Watch, start a walking workout.", "Watch, set an alarm for six.", "Watch, show my steps for today.",
        "Watch, start a five minute timer.", "Watch, stop the workout.", "Watch, remind me about {event} in an hour.",
        "Watch, remind me to bring {item}.", "Watch, message {absent} that I'm on my way.")),
    "orbit": ("a robot vacuum called Orbit", (
        "Orbit, go back to your dock.", "Orbit, clean the hallway later.", "Orbit, stop, you're too loud.",
        "Orbit, clean under the table.", "Orbit, pause for now.", "Orbit, skip the kitchen today.")),
    "tilly": ("a kids' learning tablet called Tilly", (
        "Tilly, start the spelling game.", "Tilly, read the next page.", "Tilly, turn the volume down.",
        "Tilly, pause the story.", "Tilly, go back to the counting game.")),
    "sola": ("a smart thermostat called Sola", (
        "Sola, set the heating to twenty one.", "Sola, turn the heating off.", "Sola, make it a bit warmer.",
        "Sola, lower it by two degrees.", "Sola, switch to eco mode tonight.")),
    "kai": ("a laptop voice assistant called Kai", (
        "Kai, open my email.", "Kai, mute the notifications.", "Kai, show the battery level.",
        "Kai, open the document about {event}.", "Kai, start the slide show.", "Kai, save this file to the desktop.",
        "Kai, email {absent} the plan for {event}.", "Kai, add {item} to my to do list.")),
    "lumen": ("smart lights called Lumen", (
        "Lumen, dim the lights a bit.", "Lumen, turn on the lamp.", "Lumen, make it brighter in here.",
        "Lumen, switch to warm light.", "Lumen, turn off the hallway lights.")),
    "pip": ("a translation earpiece called Pip", (
        "Pip, translate that last sentence.", "Pip, switch to Spanish.", "Pip, repeat that more slowly.",
        "Pip, switch back to English.", "Pip, translate the sign over there.",
        "Pip, translate what {other} just said.", "Pip, save that phrase about {event}.")),
    "rex": ("a navigation app called Rex", (
        "Rex, find the nearest gas station.", "Rex, call home.", "Rex, show the time to arrival.",
        "Rex, avoid the highway.", "Rex, add a stop for coffee.", "Rex, mute the directions for a bit.",
        "Rex, share our arrival time with {absent}.", "Rex, find parking near {event}.")),
}
# devices that belong to a home, and where the others fit (a device context fits its setting)
HOME_DEVICES = frozenset({"milo", "sola", "lumen", "orbit", "tilly"})
HOME_SETTINGS = frozenset({"kitchen at home", "living room on game night", "backyard barbecue", "apartment moving day",
                           "book club at a friend's house"})
ROAD_DEVICES = frozenset({"rex"})  # a navigation app: its commands are for driving
ROAD_SETTINGS = frozenset({"car on a road trip"})

RELATIONSHIP_LINES: dict[str, tuple[str, ...]] = {
    "family": ("{name}, did you call Grandma back?", "{name}, you promised to clean your room this weekend."),
    "coworkers": ("{name}, nice job on the last project.", "{name}, let's grab lunch after this."),
    "roommates": ("{name}, it's your turn to take out the trash.", "{name}, did you pay the internet bill?"),
    "old friends": ("{name}, remember our trip to the lake?", "{name}, we should do this more often."),
    "neighbors": ("{name}, your dog was barking again last night.", "{name}, thanks for watering our plants."),
    "classmates": ("{name}, did you finish the homework for Monday?", "{name}, the lecture was so boring today."),
    "cousins": ("{name}, your mom says hi, by the way.", "{name}, are you coming to the reunion?"),
    "teammates": ("{name}, great pass in the last game.", "{name}, are you coming to practice on Tuesday?"),
    "new acquaintances": ("{name}, so how do you know everyone here?", "{name}, where did you grow up?"),
    "in-laws": ("{name}, thanks again for having us.", "{name}, the kids love your garden."),
    "club members": ("{name}, did you renew your membership?", "{name}, thanks for organising last time."),
    "volunteers": ("{name}, thanks for covering my shift.", "{name}, can you do Saturday morning next week?"),
}

REGISTERS: tuple[str, ...] = ("casual", "formal", "hurried", "playful", "tired", "polite", "excited",
                              "blunt", "gentle", "distracted", "sarcastic", "curious")
# Every question turn of a scene (T, questions to people and to the room, N4_Q) is built from the
# same pools (generator._ask): an opener of the speaker's register (or of wondering aloud), zero or
# more reason clauses, the question, a closer; wondering aloud (N3) takes only the pools that
# address no listener (SELF_OPENERS, SELF_REASONS, NEUTRAL_CLOSERS, TAILS["wonder"]). The explicit
# T says the name where a question to a person says theirs; the implicit T says no name at all: what
# makes it a request to the assistant is the conversation before it (the cue turns below), never
# its own words.
OPENERS: dict[str, tuple[str, ...]] = {
    "casual": ("Hey", "Okay", "So", "Okay so", "Hey, so"),
    "formal": ("Excuse me", "Pardon me", "If I may ask", "One moment"),
    "hurried": ("Quick", "Real quick", "Quickly", "Quick one"),
    "playful": ("Okay, okay", "Ooh, okay", "Hey, hey", "Okay, so"),
    "tired": ("Ugh, okay", "Sorry, long day", "Hmm, okay", "Okay, sorry"),
    "polite": ("Sorry to bother you", "If you don't mind", "Sorry", "Just quickly"),
    "excited": ("Oh, oh", "Wait, wait", "Oh, right", "Ooh, wait"),
    "blunt": ("Right", "Okay, look", "Fine", "Right then"),
    "gentle": ("Hey there", "Sorry", "Um, hi", "Um, sorry"),
    "distracted": ("Hmm, wait", "Oh, um", "Sorry, where was I", "Wait, what was it"),
    "sarcastic": ("Well then", "Right, so", "Great, so", "Oh, so"),
    "curious": ("I wonder", "Hmm, so", "Out of interest", "Just curious"),
}
# openers that fit wondering aloud (self-talk, N3): the registers' that address no listener
SELF_OPENERS: tuple[str, ...] = ("Hmm, wait", "Oh, um", "Wait, what was it", "Hmm, so", "Hmm", "Hmm, okay",
                                 "Ugh, okay", "Okay, okay", "Okay so", "Wait, wait", "Oh, right", "So",
                                 "Hmm, hang on", "Now then", "Oh, hmm", "Let me think", "Uh", "Oh no", "Huh",
                                 "Ah, wait", "Right, um", "Oh, gosh")
# reason clauses said before a question; any question turn may carry them (none names who said the
# fact: that would point at them). Self-talk carries only the first group (no listener in them).
SELF_REASONS: tuple[str, ...] = (
    "we were all talking at once and I lost track",
    "my memory is terrible today",
    "I don't want to mix it up with something else",
    "I was only half listening before",
    "I need it for my notes",
    "I want to put it in the calendar right now",
    "there was so much going on a minute ago",
    "I'd rather not guess and get it wrong",
    "I want to get it right this time",
    "it slipped my mind already",
    "I should have written it down",
    "I was distracted by everything else",
    "before I forget again",
    "since it came up earlier",
    "since I wasn't paying attention",
    "so I don't get it wrong later",
    "so I can plan the rest of the day",
)
ASK_REASONS: tuple[str, ...] = (
    *SELF_REASONS,
    "so we can plan the rest of the day",
    "because I'm about to text the others",
    "so nobody gets it wrong later",
    "because I honestly have no idea",
)
# reasons that fit some fact kinds only (generator._FACT_TEXTS; "trivia": general knowledge); the others fit all
_PLANS = ("time", "place", "count", "duration", "room")
REASON_KINDS: dict[str, tuple[str, ...]] = {
    "I want to put it in the calendar right now": ("time",),
    "so we can plan the rest of the day": _PLANS,
    "so I can plan the rest of the day": _PLANS,
    "because I'm about to text the others": (*_PLANS, "price", "person", "code"),
}
# closers: the neutral ones fit any question, wondering aloud included; the others a question put to
# a listener (T, N4_Q, questions to people or the room)
NEUTRAL_CLOSERS: tuple[str, ...] = ("",) * 6 + (" Hmm.", " I should know this.", " It's on the tip of my tongue.",
                                               " It's driving me crazy.")
CLOSERS: tuple[str, ...] = (*NEUTRAL_CLOSERS * 4, " Thanks.", " Thank you.", " Just the short version.",
                            " Please.", " I'd really appreciate it.", " We need to know before we go on.",
                            " Sorry to interrupt.", " Any idea?", " Do you know?")
# cue turns before T, the same in both versions (so a pair still differs only at T):
#   keeper: an N1 turn gives Aria the job of keeping track of {topic}, by name;
#   holder: the fact itself came from Aria, an N1 turn reports it ({statement}: what it said);
#   unknown: an N1 turn says Aria follows the conversation, and right before T a person says they
#     do not know (answering the asker's question to them);
#   relay: the turn before T tells the asker to ask Aria (implicit: rewritten without the name).
KEEPER_LINES: tuple[str, ...] = (
    "Good thing Aria is here, Aria keeps track of {topic} for us.",
    "Don't bother writing {topic} down, Aria is keeping track of all of it.",
    "Aria is the one in charge of remembering {topic}, not me.",
    "We put Aria on {topic} duty, so that one's covered.",
    "I asked Aria this morning to keep an ear on {topic} for us.",
    "Aria is noting everything about {topic} today, so relax.",
    "We agreed Aria would remember {topic}, since none of us ever do.",
)
HOLDER_LINES: tuple[str, ...] = (
    "Aria told us earlier, {statement}",  # at most four words: a general-knowledge statement has up to 16
    "According to Aria, {statement}",
    "Aria looked it up, {statement}",
)
HOLDER_NEWS_LINES: tuple[str, ...] = (  # news only, not general knowledge
    "Aria just read out the message, {statement}",
    "Aria found the email, {statement}",
)
PRESENT_LINES: tuple[str, ...] = (
    "Aria has been listening to all of this {activity} talk, by the way.",
    "Aria hears everything we say about {event}, you know.",
    "With Aria listening in, at least {event} won't get forgotten.",
    "Aria is listening in, as always, so nothing gets lost.",
    "Good thing Aria is on, it catches everything we say in here.",
    "Aria has been following all of this, by the way.",
    "I love that Aria hears every word in this room.",
    "Aria remembers everything we say, which is a bit scary.",
    "Honestly, Aria follows our conversations better than we do.",
    "Aria has been following everything about {event}, by the way.",
    "Aria catches every word about {activity} in here.",
    "Since we set Aria up for {event}, it listens to all of this.",
    "{other} says Aria hears more of {activity} than we do.",
    "Aria has been listening since we started {activity}, you know.",
    "Don't worry about {event}, Aria hears all of it.",
)
# {asker}: said to the one who asked (human-directed); the others are said to everyone
DONT_KNOW: tuple[str, ...] = (
    "I have no idea either, sorry.", "Don't look at me, I missed that part.",
    "No clue, honestly, it went right past me.", "No idea, I was busy with {activity} the whole time.",
    "Don't ask me, I was thinking about {event}.", "I missed that, I was too busy with {activity}.",
    "No idea, {asker}, I wasn't listening either.", "Don't ask me, I have no clue about {topic}.",
    "Sorry, {asker}, I have no idea about {topic}.", "No clue about {topic}, {asker}, I wasn't listening.",
    "I've forgotten already, sorry, {asker}.", "Sorry, {asker}, I missed that part completely.",
    "No clue, I was busy with something else.", "Honestly, {asker}, I don't remember {topic} at all.",
    "Not a clue, sorry, I wasn't paying attention.", "I really don't know, {asker}, I thought you heard it.",
)
# relay turns before T: (explicit, implicit rewrite); the implicit one refers to the assistant as
# people do without its name
RELAYS: tuple[tuple[str, str], ...] = (
    ("{asker}, you set up Aria, so ask Aria about {topic}.",
     "{asker}, you set up the speaker, so ask it about {topic}."),
    ("Don't look at me, {asker}, ask Aria about {topic}, it was listening.",
     "Don't look at me, {asker}, ask the speaker about {topic}, it was listening."),
    ("{asker}, I have no idea, Aria heard everything about {topic}.",
     "{asker}, I have no idea, the assistant heard everything about {topic}."),
)

N1_LINES: tuple[str, ...] = (
    "Aria helped us with {event} last time.", "I think Aria knows more about {activity} than I do.",
    "{other} set Aria up for {event}, didn't they.", "Aria reminded me about {event} this morning.",
    "Honestly, Aria is the only reason {event} didn't go wrong last time.",
    "Without Aria I'd have lost {item} twice already.", "I keep telling {other} that Aria is great for {activity}.",
    "Aria was really useful yesterday.", "I'm glad we set up Aria last month.",
    "Aria reminded me about the bills last week.", "{name}, Aria helped me plan the whole weekend.",
    "Let's not bother Aria with this one.", "Aria always knows the best recipes.",
    "My sister wants an assistant like Aria now.", "{name}, I told my mom all about Aria.",
    "Honestly, Aria is better at dates than I am.", "Aria's voice is so calm, I like it.",
    "{name}, Aria can tell jokes, you know.", "We should update Aria's settings at some point.",
    "I read that Aria got a new update this week.", "{name}, don't let Aria hear you say that.",
    "Aria woke me up right on time today.", "Last week Aria found us a great restaurant.",
    "I don't think Aria likes my music.", "{name}, remember when Aria mixed up our names.",
    "My kids talk to Aria more than to me.", "Aria saved me when I forgot the anniversary.",
    "{name}, I trust Aria more than my own calendar.", "Funny, Aria sounds a bit like my aunt.",
    "We used Aria for the whole trip planning.", "I keep forgetting Aria is even here.",
    "Don't tell Aria I said that, please.", "Let's keep Aria out of this one, please.",
)
# an N1 turn that almost asked Aria and takes it back ({never_mind}: "never mind, I remember now")
N1_RETRACTIONS: tuple[str, ...] = (
    "I was about to ask Aria about {event}, but {never_mind}.",
    "I nearly asked Aria about {item}, {never_mind}.",
    "I wanted Aria to look up {event}, but {never_mind}.",
)

N2_PERSON: tuple[str, ...] = (
    "{name}, can you grab my jacket?", "{name}, what do you think about this?",
    "{name}, you look tired, are you okay?", "{name}, did you see the message from Chris?",
    "{name}, pass me that, please.", "{name}, are you still coming on Sunday?",
    "{name}, I love your new haircut.", "{name}, stop laughing, it's not funny.",
    "{name}, you said you'd help me with this.", "{name}, do you want anything to drink?",
    "{name}, tell them the story about the goat.", "{name}, can you move a little to the left?",
    "{name}, I owe you one for last time.", "{name}, text me that link later.",
    "{name}, how was your week, by the way?", "{name}, you were right about this.",
)
N2_ROOM: tuple[str, ...] = (
    "Okay everyone, listen up for a second.", "Does anyone have a charger?", "Who wants more tea?",
    "Let's try to finish this before six.", "Everyone, this is going really well.",
    "Can somebody open a window?", "Has anyone seen my phone?", "Quick show of hands, who's hungry?",
)
N3_GENERIC: tuple[str, ...] = (
    "Hmm, let me think.", "Where are my keys?", "Okay, okay, one thing at a time.",
    "Why is this so complicated?", "I really need a vacation.", "Wait, did I lock the door?",
    "Hmm, what was I going to say?", "Note to self, buy batteries.", "Ugh, I'm so sleepy.",
    "Where did I put my glasses?", "Come on, phone, load already.", "Hmm, that's strange.",
    "Come on, zip, close, please.", "Okay, work this time, please.", "Just stay on, please.",
)
# paper profile: turns are longer; a tail follows the line's core (kind -> tails). Slots: {event}
# and {item} (the setting's), {activity} (the scene's), {other} (another person in the scene)
_SETTLED = (
    "And then there's {event} on top of everything.", "I still have to find {item}.",
    "I hope {other} didn't notice.", "Focus, it's just {activity}.", "I always do this to myself.",
    "Okay, deep breath, it'll be fine.",
    "I should really write these things down somewhere.", "This is harder than it looks, honestly.",
    "Maybe I'm just overthinking it again.",
)
_WONDER = (  # after a question, wondering aloud included
    "I should have written it down somewhere.", "It's been bugging me for a while.", "We'll need it later anyway.",
    "It keeps slipping my mind.", "I thought I knew it a minute ago.", "It matters for {event}.",
    "Then we can get back to {activity}.", "I'd rather not get it wrong again.", "It came up earlier and I lost it.",
    "There's so much going on today.", "Otherwise I'll just guess, and that never ends well.",
    "My head is all over the place with {activity}.", "I'm trying to sort out {event} as well.",
    "It's the one thing I keep forgetting.", "We said we'd sort it out before {event}.",
    "I know it was mentioned at some point.", "Sorry, my brain is full today.",
    "I'd look it up, but my hands are full.",
)
TAILS: dict[str, tuple[str, ...]] = {
    "person": (
        "We still have {event} to think about after this.", "{other} said you'd know, anyway.",
        "I'd rather sort it out before {event}.", "Then we can get back to {activity}.",
        "{other} is waiting on it too, so no pressure.", "It's for {event}, if you're wondering.",
        "I'd do it myself, but my hands are full right now.", "We have to get this done before the others get back.",
        "It would really help me out this time.", "No rush, but sometime in the next few minutes would be great.",
        "You're better at this than I am anyway.", "I asked earlier, but I think you missed it.",
        "I've been meaning to ask you all afternoon and I keep forgetting.",
        "I know you're busy, but it will only take a second, I promise.",
        "If we leave it until later, nobody is going to remember to do it.",
        "It's the one thing I really needed from you today, honestly.",
        "I promise I'll return the favor later.", "Otherwise we'll still be here at midnight.",
        "That would save us a lot of trouble later on.", "I don't want to be the one who forgets again.",
        "Last time we did it the other way and it was a mess.", "Just this once, and then I'll stop asking.",
    ),
    "room": (
        "We still have {event} coming up, remember.", "{other} has been asking about it all day.",
        "After that we can get back to {activity}.", "Let's keep {event} in mind while we're at it.",
        "I promised {other} we'd be done soon.",
        "We've been at this for a while and I'd like to wrap up.", "Let's not make the same mistake as last time.",
        "I think we're almost there, honestly.", "Otherwise we'll never get out of here on time.",
        "I know it's a lot, but bear with me.", "We can take a break once this part is done.",
        "Nobody wants a repeat of last weekend.", "It'll be much easier if we do it together.",
        "The sooner we sort this out, the sooner we can all relax a little.",
        "I really don't want to be the only one worrying about this again.",
    ),
    "self": (
        *_SETTLED,
        "Or maybe not, I never remember these things.", "I'll figure it out in a minute.",
        "I always mix this up, every single time.",
        "I swear I had it all figured out five minutes ago.", "Every single time I think I've got it, I lose it again.",
    ),
    "settled": _SETTLED,  # after taking a question back or saying one does not know: no "or maybe not"
    "aria": (
        "It even helped us with {event} last time.", "{other} thought it was a gimmick at first.",
        "We use it for {activity} all the time now.",
        "It's funny how fast we got used to it.", "I didn't think I'd like it this much.",
        "Anyway, that's a story for another time.", "My whole family was surprised by that.",
        "I still can't believe how well that worked.", "It's become part of the furniture, really.",
        "Honestly, I was against it at first, but I've completely changed my mind.",
        "My parents still don't really understand how any of it works.",
    ),
    "wonder": _WONDER,  # after a question wondered aloud (N3): no listener in them
    "ask": (*_WONDER, "It's for {event}, if you're wondering.", "{other} was wondering too."),  # any other question
    "device": ("And keep it down, please.", "Thanks, that's all for now.", "Right away, if you can.",
               "We'll need it in a minute.", "I always forget it otherwise.", "Then we can get back to {activity}.",
               "It'll help with {event}.", "Just for the next hour or so.", "That should do it for now.",
               "I set it up last week and it's been great.", "I don't want to miss {event}.",
               "{other} showed me how to do that.", "It's much easier than doing it by hand.", "Just this once.",
               "I keep forgetting it can do that.", "That's for {event}, by the way.", "Before {activity} gets busy."),
    "fact": ("It matters for {event}, so keep it in mind.", "{other} already knows, I told them before.",
             "I'll remind everyone again before {event}.", "Just so everyone knows.", "I only found out this morning.",
             "Don't forget it this time.",
             "They called me about it earlier.", "I checked it twice.",
             "I wanted to mention it before everyone gets busy again.", "I got the message about it an hour ago.",
             "They confirmed it in writing this time.", "Make a note of it somewhere, please."),
    # general knowledge, never told as news
    "known": ("Everyone gets that wrong.", "I looked it up once.", "I read that somewhere years ago.",
              "Funny how you forget these things.", "We learned that in school.", "It came up in a quiz once.",
              "Most people don't know that.", "Just so everyone knows.", "I had to check it myself once."),
}
# fact tails that say how the speaker learned the news: at most one of them in a turn
NEWS_SOURCES: tuple[str, ...] = ("already knows, I told them before", "I only found out this morning",
                                 "They called me about it earlier", "I got the message about it an hour ago",
                                 "They confirmed it in writing this time")

# Human first names: distinct, easy to synthesise, none close to Aria or to a device name
NAMES: tuple[str, ...] = (
    "Sam", "Maya", "Leo", "Nina", "Omar", "Priya", "Jack", "Ella", "Ben", "Zoe", "Tom", "Lucy", "Raj", "Kate",
    "Dan", "Grace", "Hugo", "Ivy", "Felix", "Chloe", "Jonah", "Elena", "Theo", "Ruth", "Victor", "Hannah",
    "Marcus", "Julia", "Ahmed", "Sofia", "Kenji", "Lena", "Paul", "Rosa", "Oscar", "Mei", "Caleb", "Fatima",
    "Derek", "Tessa", "Simon", "Yusuf", "Beth", "Noah", "Clara", "Ravi", "Molly", "Eric",
)

# Fact frames: (statement, question, topic, gold); slots: {x} the value, {thing} an event or
# item of the setting, {name} the person the teller speaks to (optional)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
TIMES = ("at nine", "at ten thirty", "at seven forty five", "at noon", "at half past two", "at three",
         "at four fifteen", "at six", "at seven thirty", "at eight", "at eleven", "at one o'clock")
PLACES = ("in the top drawer", "under the blue flower pot", "behind the bread box", "in the glove box",
          "in the red backpack", "on the door hook", "in the left coat pocket", "on the top shelf",
          "under the bed", "in the green bag", "next to the fire extinguisher", "inside the big blue folder",
          "on the back seat", "in the kitchen cupboard", "under the front mat", "in the silver suitcase")
COUNTS = ("twelve", "fourteen", "eight", "twenty", "six", "nine", "fifteen", "thirty", "seven", "eleven", "forty")
COUNTABLES = ("chairs", "plates", "tickets", "bottles of water", "name tags", "sandwiches", "blankets",
              "cups", "folders", "batteries")
# a purchase and prices that fit it
PRICED_PRICES: dict[str, tuple[str, ...]] = {
    "the new tent": ("ninety dollars", "two hundred dollars", "one hundred and five dollars"),
    "the concert tickets": ("sixty five dollars", "ninety dollars", "fifty five dollars"),
    "the birthday present": ("thirty dollars", "forty two dollars", "eighteen fifty"),
    "the train tickets": ("forty two dollars", "fifty five dollars", "thirty dollars"),
    "the repair": ("two hundred dollars", "ninety dollars", "one hundred and five dollars"),
    "the flowers": ("twelve dollars", "eighteen fifty", "thirty dollars"),
    "the rental": ("sixty five dollars", "two hundred dollars", "ninety dollars"),
    "the gift card": ("thirty dollars", "fifty five dollars", "twelve dollars"),
    "the new headphones": ("sixty five dollars", "ninety dollars", "forty two dollars"),
    "the cleaning service": ("ninety dollars", "sixty five dollars", "one hundred and five dollars"),
    "the parking": ("seven fifty", "twelve dollars", "eighteen fifty"),
}
PEOPLE_ROLES = ("the new manager", "the electrician", "the tour guide", "the new neighbor", "the coach",
                "the substitute teacher", "the landlord", "the photographer", "the caterer", "the driver")
FULL_NAMES = ("Laura Chen", "Peter Novak", "Diana Ruiz", "Walter Brooks", "Anita Shah", "Martin Kowalski",
              "Helen Park", "George Addo", "Irene Costa", "Frank Dubois", "Nadia Karimi", "Vera Lind")
# a process and durations that fit it (a value is always drawn for what it measures)
PROCESS_DURATIONS: dict[str, tuple[str, ...]] = {
    "the drive to the venue": ("forty minutes", "an hour and a half", "twenty five minutes", "two hours"),
    "the paint to dry": ("two hours", "four hours", "half an hour", "a whole day"),
    "the repair": ("three days", "two weeks", "two hours", "an hour and a half"),
    "the delivery": ("three days", "two hours", "forty minutes", "two weeks"),
    "the walk to the station": ("ten minutes", "twenty five minutes", "half an hour", "fifteen minutes"),
    "the oven to heat up": ("ten minutes", "fifteen minutes", "twenty minutes"),
    "the bus ride": ("forty minutes", "fifty minutes", "an hour and a half", "twenty five minutes"),
    "the ferry crossing": ("fifty minutes", "two hours", "half an hour"),
    "the battery to charge": ("two hours", "forty minutes", "an hour and a half", "four hours"),
    "the check in": ("ten minutes", "half an hour", "twenty minutes"),
}
CODES = ("four one seven nine", "two two eight five", "nine zero three one", "six six one four",
         "five three nine two", "one eight eight seven", "seven four two six", "three one five eight")
CODED = ("the gate code", "the door code", "the locker combination", "the booking number",
         "the bike lock code", "the alarm code")
ROOMS = ("in room twenty", "in room one fourteen", "on the fourth floor", "on level three", "at platform nine",
         "at gate twelve", "at table sixteen", "in row eight", "in room three b", "on the second floor")
ROOMED = ("the meeting", "our table", "the party", "the lecture", "the workshop", "the dinner",
          "the rehearsal", "the reception")
# values and things of the pools above that fit some settings only (the others fit every setting)
_HOMES = frozenset({"kitchen at home", "living room on game night", "backyard barbecue", "apartment moving day",
                    "book club at a friend's house"})
_KITCHENS = frozenset({"kitchen at home", "apartment moving day", "office kitchen at lunch"})
_TRIPS = frozenset({"car on a road trip", "hotel lobby on vacation", "campsite by the lake", "airport gate",
                    "ski lodge"})
_BUILDINGS = frozenset({s.name for s in SETTINGS}) - {"car on a road trip", "campsite by the lake"}
FITS: dict[str, frozenset[str]] = {
    "in the glove box": frozenset({"car on a road trip"}), "on the back seat": frozenset({"car on a road trip"}),
    "behind the bread box": _KITCHENS, "in the kitchen cupboard": _KITCHENS | _HOMES,
    "under the bed": _HOMES - {"backyard barbecue"} | {"hotel lobby on vacation"},
    "under the front mat": _HOMES, "under the blue flower pot": _HOMES | {"community garden", "farmers market stall"},
    "the oven to heat up": (_KITCHENS | _HOMES) - {"book club at a friend's house"},
    "the ferry crossing": _TRIPS, "the check in": _TRIPS | {"clinic waiting room", "vet clinic"},
    "the paint to dry": _HOMES | {"art class studio", "garage workshop", "community garden"},
    "the gate code": _HOMES | {"community garden", "campsite by the lake", "garage workshop", "farmers market stall"},
    "the alarm code": _BUILDINGS - {"airport gate", "hotel lobby on vacation"},
    "the locker combination": frozenset({"gym locker room", "ski lodge", "office meeting room", "band rehearsal room",
                                         "school parents' evening", "study group in the library", "art class studio"}),
    "the door code": _BUILDINGS,
    "at gate twelve": frozenset({"airport gate"}), "at platform nine": frozenset({"car on a road trip"}),
}

# (question, answer of 10-16 words, a human's reply that may name the {asker})
N4_EVENTS: tuple[tuple[str, str, str], ...] = (
    ("how long should I boil an egg?",
     "For a soft boiled egg about six minutes, for a hard boiled one about ten.",
     "{asker}, about six minutes for a soft one."),
    ("what's the capital of Australia?",
     "The capital of Australia is Canberra, not Sydney, which surprises a lot of people.",
     "It's Canberra, {asker}, everyone gets that wrong."),
    ("how many ounces are in a pound?",
     "There are sixteen ounces in one pound, so half a pound is eight ounces.",
     "Sixteen, {asker}, I just used it for a recipe."),
    ("who wrote Pride and Prejudice?",
     "Pride and Prejudice was written by Jane Austen and first published in eighteen thirteen.",
     "That was Jane Austen, {asker}."),
    ("how far away is the moon?",
     "The moon is roughly two hundred forty thousand miles away from Earth on average.",
     "Roughly a quarter million miles, {asker}, I read that yesterday."),
    ("what can I use instead of butter in a cake?",
     "Instead of butter, use the same amount of coconut oil, or applesauce for half.",
     "Use coconut oil, {asker}, it works fine."),
    ("how do you say thank you in Japanese?",
     "In Japanese you say arigato, or arigato gozaimasu if you want to be more polite.",
     "It's arigato, {asker}, I learned it on our trip."),
    ("how many legs does a spider have?",
     "A spider has eight legs, which is one way to tell it apart from insects.",
     "Eight, {asker}, insects have six."),
    ("at what temperature does water boil in Fahrenheit?",
     "At sea level, water boils at two hundred and twelve degrees Fahrenheit.",
     "Two hundred and twelve, {asker}."),
    ("which planet is the largest?",
     "Jupiter is the largest planet in our solar system, more than eleven times wider than Earth.",
     "Jupiter, {asker}, it's not even close."),
    ("how long does it take to walk a mile?",
     "Most people walk a mile in about fifteen to twenty minutes at a relaxed pace.",
     "About twenty minutes, {asker}, if you don't rush."),
    ("what's the tallest mountain in the world?",
     "Mount Everest is the tallest mountain above sea level, at almost twenty nine thousand feet.",
     "Everest, {asker}, obviously."),
    ("what's the chemical symbol for gold?",
     "The chemical symbol for gold is A U, which comes from the Latin word aurum.",
     "It's A U, {asker}, from the Latin word."),
    ("who painted the Mona Lisa?",
     "The Mona Lisa was painted by Leonardo da Vinci in the early fifteen hundreds.",
     "Leonardo da Vinci, {asker}."),
    ("how many minutes are in a day?",
     "There are fourteen hundred and forty minutes in a single day, which adds up fast.",
     "Fourteen hundred and forty, {asker}, I did that in school."),
    ("what's the longest river in the world?",
     "The Nile is usually called the longest river, though some measurements favor the Amazon.",
     "The Nile, {asker}, or maybe the Amazon."),
    ("how many players are on a soccer team?",
     "A soccer team has eleven players on the field, including the goalkeeper.",
     "Eleven, {asker}, counting the goalie."),
    ("what's the freezing point of water in Celsius?",
     "Water freezes at zero degrees Celsius, which is thirty two degrees Fahrenheit.",
     "Zero degrees, {asker}."),
    ("how many continents are there?",
     "Most people count seven continents, from Africa and Asia to Antarctica and Australia.",
     "Seven, {asker}, last time I checked."),
    ("who invented the telephone?",
     "Alexander Graham Bell is usually credited with inventing the telephone in eighteen seventy six.",
     "Alexander Graham Bell, {asker}."),
    ("how many teaspoons are in a tablespoon?",
     "There are three teaspoons in one tablespoon, a handy thing to know when baking.",
     "Three, {asker}, I measure it all the time."),
    ("what's the fastest land animal?",
     "The cheetah is the fastest land animal and can briefly run about seventy miles an hour.",
     "The cheetah, {asker}, easy one."),
    ("how many bones are in the human body?",
     "An adult human body has two hundred and six bones, babies have quite a few more.",
     "Two hundred and six, {asker}."),
    ("what language do they speak in Brazil?",
     "The official language of Brazil is Portuguese, not Spanish like most of its neighbors.",
     "Portuguese, {asker}, not Spanish."),
    ("how long is a marathon?",
     "A marathon is twenty six point two miles, or about forty two kilometers.",
     "About twenty six miles, {asker}."),
    ("what's the smallest planet?",
     "Mercury is the smallest planet in our solar system and the closest one to the sun.",
     "Mercury, {asker}, since Pluto got demoted."),
    ("how many hours of sleep do adults need?",
     "Most adults need somewhere between seven and nine hours of sleep every night.",
     "Seven to nine, {asker}, and I get five."),
    ("which ocean is the biggest?",
     "The Pacific is the biggest ocean, covering about a third of the surface of the Earth.",
     "The Pacific, {asker}."),
    ("how do you say good morning in Spanish?",
     "In Spanish you say buenos dias, and buenas tardes later in the afternoon.",
     "Buenos dias, {asker}."),
    ("what year did people first land on the moon?",
     "People first landed on the moon in nineteen sixty nine with the Apollo eleven mission.",
     "Nineteen sixty nine, {asker}."),
    ("how many cups are in a quart?",
     "There are four cups in one quart, and four quarts make a gallon.",
     "Four cups, {asker}."),
    ("who composed the Four Seasons?",
     "The Four Seasons was composed by Antonio Vivaldi, an Italian composer of the baroque era.",
     "That's Vivaldi, {asker}."),
    ("how deep is the ocean at its deepest point?",
     "The deepest known point of the ocean is almost thirty six thousand feet below the surface.",
     "About seven miles, {asker}, in the Mariana Trench."),
    ("what's the main ingredient in guacamole?",
     "The main ingredient in guacamole is avocado, mashed with lime, onion, salt and chili.",
     "Avocado, {asker}, obviously."),
    ("how many strings does a violin have?",
     "A violin has four strings, tuned to G, D, A and E from low to high.",
     "Four, {asker}, my niece plays one."),
    ("which country has the most people?",
     "India is now the country with the most people, having recently overtaken China.",
     "India, {asker}, it passed China recently."),
    ("how often is a leap year?",
     "A leap year comes every four years, with a few exceptions for some century years.",
     "Every four years, {asker}."),
    ("what gas do plants take in?",
     "Plants take in carbon dioxide from the air and release oxygen during photosynthesis.",
     "Carbon dioxide, {asker}."),
)
# taking a question back: N4_R ("Oh, never mind, Aria, I remember now."), and the same words in
# self-talk and N1 (a retraction is not one label's)
NEVER_MIND_HEADS: tuple[str, ...] = ("Oh", "Actually", "Wait", "No", "Sorry", "Hmm")
N4_NEVER_MIND: tuple[str, ...] = ("never mind", "forget it", "don't worry about it", "scratch that",
                                  "forget I asked", "no need")
N4_NEVER_MIND_WHY: tuple[str, ...] = (
    "I just looked it up", "I remember now", "it doesn't matter", "it came back to me", "I'll check later",
    "it's not important right now", "I found it on my phone", "we can sort it out later",
)
# how news for everyone may start
NEWS_OPENERS: tuple[str, ...] = ("By the way,", "Oh, and", "Just so you all know,", "Okay, news,", "Right,",
                                 "Before I forget,")
# a question put to everyone names them so (where a question to a person may name them)
ROOM_CALLS: tuple[str, ...] = ("everyone", "guys", "folks", "anyone")
# what a person says first when answering a question put to them
REPLIES: tuple[str, ...] = ("Oh,", "Yes,", "Hmm,", "Right,", "Sure,", "Yeah,", "Well,", "Let me think,", "Okay,",
                            "Good question,")
# general knowledge as a fact a person states and T may ask for (as N4 questions and people do):
# question of N4_EVENTS -> (gold answer, said word for word in the N4 answer; topic)
TRIVIA: dict[str, tuple[str, str]] = {
    "how long should I boil an egg?": ("about six minutes", "the eggs"),
    "what's the capital of Australia?": ("Canberra", "the capital of Australia"),
    "how many ounces are in a pound?": ("sixteen ounces", "ounces in a pound"),
    "who wrote Pride and Prejudice?": ("Jane Austen", "Pride and Prejudice"),
    "how far away is the moon?": ("two hundred forty thousand miles", "the moon"),
    "what can I use instead of butter in a cake?": ("coconut oil", "the butter"),
    "how do you say thank you in Japanese?": ("arigato", "thank you in Japanese"),
    "how many legs does a spider have?": ("eight legs", "spiders"),
    "at what temperature does water boil in Fahrenheit?": ("two hundred and twelve degrees", "boiling water"),
    "which planet is the largest?": ("Jupiter", "the planets"),
    "how long does it take to walk a mile?": ("fifteen to twenty minutes", "walking a mile"),
    "what's the tallest mountain in the world?": ("Mount Everest", "the tallest mountain"),
    "what's the chemical symbol for gold?": ("A U", "the symbol for gold"),
    "who painted the Mona Lisa?": ("Leonardo da Vinci", "the Mona Lisa"),
    "how many minutes are in a day?": ("fourteen hundred and forty minutes", "minutes in a day"),
    "what's the longest river in the world?": ("the Nile", "the longest river"),
    "how many players are on a soccer team?": ("eleven players", "soccer teams"),
    "what's the freezing point of water in Celsius?": ("zero degrees Celsius", "freezing water"),
    "how many continents are there?": ("seven continents", "the continents"),
    "who invented the telephone?": ("Alexander Graham Bell", "the telephone"),
    "how many teaspoons are in a tablespoon?": ("three teaspoons", "teaspoons"),
    "what's the fastest land animal?": ("the cheetah", "the fastest animal"),
    "how many bones are in the human body?": ("two hundred and six bones", "bones"),
    "what language do they speak in Brazil?": ("Portuguese", "Brazil"),
    "how long is a marathon?": ("twenty six point two miles", "the marathon"),
    "what's the smallest planet?": ("Mercury", "the smallest planet"),
    "how many hours of sleep do adults need?": ("between seven and nine hours", "sleep"),
    "which ocean is the biggest?": ("the Pacific", "the oceans"),
    "how do you say good morning in Spanish?": ("buenos dias", "good morning in Spanish"),
    "what year did people first land on the moon?": ("nineteen sixty nine", "the moon landing"),
    "how many cups are in a quart?": ("four cups", "quarts"),
    "who composed the Four Seasons?": ("Antonio Vivaldi", "the Four Seasons"),
    "how deep is the ocean at its deepest point?": ("almost thirty six thousand feet", "the deepest ocean"),
    "what's the main ingredient in guacamole?": ("avocado", "guacamole"),
    "how many strings does a violin have?": ("four strings", "violins"),
    "which country has the most people?": ("India", "the world population"),
    "how often is a leap year?": ("every four years", "leap years"),
    "what gas do plants take in?": ("carbon dioxide", "plants"),
}
# first words of N4 answers that are names (kept capitalised after a comma)
TRIVIA_PROPER: frozenset[str] = frozenset({"Pride", "Jupiter", "Mount", "Alexander", "Mercury", "India"})
