"""Scene and turn records of the Duplex-MPE benchmark (spec section 2).

A :class:`Scene` is one evaluated conversation: a scripted multi-party exchange in
which the assistant *Aria* is present. Each scene exists in two versions that share a
``pair_id`` and a gold answer: ``explicit`` (the request names Aria) and ``implicit``
(contextual cues replace the name). Scenes serialise one per line (JSONL); see
:func:`write_manifest` and :func:`read_manifest`.

Every human turn carries exactly one :class:`Label`. ``validate()`` explains what is
wrong with a scene by naming the scene, the turn index and the rule broken.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import IO, Any

from harness.store.base import InvalidKey
from harness.store.layout import check_id

SPEAKERS: tuple[str, ...] = ("A", "B", "C", "D")
CONDITIONS: tuple[str, ...] = ("explicit", "implicit")
ASSISTANT_NAME = "Aria"


class Label(StrEnum):
    """Turn labels of spec section 2 (the paper's labels)."""

    T = "T"  # direct, still-unresolved request to Aria; exactly one per scene; answer
    N1 = "N1"  # mentions Aria but asks nothing of it; silence
    N2 = "N2"  # addressed to someone/something else; silence
    N3 = "N3"  # no addressee (self-talk); silence
    N4_Q = "N4_Q"  # a human asks Aria a question; answer within 3 s
    N4_R = "N4_R"  # the resolution that follows N4_Q; stop / stay silent

    @property
    def is_silence(self) -> bool:
        """True for the labels scored by silence preservation (N1, N2, N3)."""
        return self in (Label.N1, Label.N2, Label.N3)


class Target(StrEnum):
    """Who a turn is addressed to; drives the silence-failure breakdown (spec section 6)."""

    ARIA = "aria"
    HUMAN = "human"  # another person in the room
    DEVICE = "device"  # a thing or another assistant/device
    GROUP = "group"  # everyone / a statement to the room
    NONE = "none"  # self-talk, thinking aloud


class SceneError(ValueError):
    """A scene breaks a schema rule.

    Attributes:
        scene_id: the offending scene (``"?"`` when unknown).
        turn: index of the offending turn, or ``None`` for scene-level rules.
        rule: short machine-readable rule name, e.g. ``"t_first"``.
    """

    def __init__(self, scene_id: str, turn: int | None, rule: str, message: str, line: int | None = None):
        where = f"scene {scene_id!r}" + (f", turn {turn}" if turn is not None else "")
        if line is not None:
            where = f"manifest line {line}: {where}"
        super().__init__(f"{where}: {message} [rule {rule}]")
        self.scene_id = scene_id
        self.turn = turn
        self.rule = rule
        self.line = line
        self.message = message

    def at_line(self, line: int) -> SceneError:
        """The same error, located at manifest line ``line`` (1-based)."""
        return SceneError(self.scene_id, self.turn, self.rule, self.message, line)


@dataclass(frozen=True)
class Turn:
    """One human turn.

    Attributes:
        speaker: scene-local speaker id, one of ``A``-``D``.
        text: what is said (non-empty).
        label: the turn's :class:`Label`.
        target: who it is addressed to (:class:`Target`).
        answer: for ``N4_Q`` turns, a reply an assistant could give (used by the
            ``oracle`` self-test baseline); ``None`` otherwise.
    """

    speaker: str
    text: str
    label: Label
    target: Target = Target.GROUP
    answer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["label"] = self.label.value
        d["target"] = self.target.value
        if self.answer is None:
            del d["answer"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        return cls(
            speaker=d["speaker"],
            text=d["text"],
            label=Label(d["label"]),
            target=Target(d.get("target", Target.GROUP.value)),
            answer=d.get("answer"),
        )


@dataclass(frozen=True)
class Scene:
    """One evaluated conversation (one version of a scene pair).

    Attributes:
        scene_id: unique id, ``f"{pair_id}-{condition}"``.
        pair_id: shared by the explicit and implicit versions.
        condition: ``"explicit"`` or ``"implicit"``.
        speakers: the scene's speaker ids in order, 3 or 4 of ``A``-``D``.
        turns: the human turns in script order.
        gold_answer: the correct answer to the scene's T request.
        attributes: generator attributes (setting, activity, relationship,
            device_context, register); free-form strings.
        t_position: ``"early-middle"``, ``"middle"`` or ``"late-middle"``.
        speaker_names: optional first name of each speaker id (``{"A": "Sam"}``); lets the
            pair validator check that an implicit T does not address a present human by name.
    """

    scene_id: str
    pair_id: str
    condition: str
    speakers: tuple[str, ...]
    turns: tuple[Turn, ...]
    gold_answer: str
    attributes: dict[str, str] = field(default_factory=dict)
    t_position: str = "middle"
    speaker_names: dict[str, str] = field(default_factory=dict)

    @property
    def t_index(self) -> int:
        """Index of the T turn. Raises :class:`SceneError` when there is not exactly one."""
        idx = [i for i, t in enumerate(self.turns) if t.label is Label.T]
        if len(idx) != 1:
            raise SceneError(self.scene_id, None, "one_t", f"expected exactly one T turn, found {len(idx)}")
        return idx[0]

    def validate(self) -> None:
        """Check every schema rule; raise :class:`SceneError` naming the first broken one."""
        sid = self.scene_id or "?"
        if not self.scene_id:
            raise SceneError(sid, None, "scene_id", "empty scene_id")
        try:  # it names the conversation's objects in the store: it must not escape its prefix
            check_id(self.scene_id, "scene_id")
        except InvalidKey as e:
            raise SceneError(sid, None, "scene_id", str(e)) from None
        if self.condition not in CONDITIONS:
            raise SceneError(sid, None, "condition", f"condition must be one of {CONDITIONS}, got {self.condition!r}")
        if not 3 <= len(self.speakers) <= 4 or len(set(self.speakers)) != len(self.speakers):
            raise SceneError(sid, None, "speakers", f"need 3 or 4 distinct speakers, got {list(self.speakers)}")
        for s in self.speakers:
            if s not in SPEAKERS:
                raise SceneError(sid, None, "unknown_speaker", f"speaker {s!r} is not one of {SPEAKERS}")
        for s, name in self.speaker_names.items():
            if s not in self.speakers:
                raise SceneError(sid, None, "unknown_speaker",
                                 f"speaker_names has {s!r}, not one of {list(self.speakers)}")
            if not isinstance(name, str) or not name.strip() or names_assistant(name):
                raise SceneError(sid, None, "speaker_names", f"bad name {name!r} for speaker {s!r}")
        if not self.gold_answer.strip():
            raise SceneError(sid, None, "gold_answer", "empty gold answer")
        if not self.turns:
            raise SceneError(sid, None, "turns", "scene has no turns")
        t_turns = []
        for i, turn in enumerate(self.turns):
            if turn.speaker not in self.speakers:
                raise SceneError(sid, i, "unknown_speaker", f"speaker {turn.speaker!r} is not in {list(self.speakers)}")
            if not turn.text.strip():
                raise SceneError(sid, i, "empty_text", "turn text is empty")
            if turn.label is Label.T:
                t_turns.append(i)
            if turn.label is Label.N4_Q:
                nxt = self.turns[i + 1] if i + 1 < len(self.turns) else None
                if nxt is None or nxt.label is not Label.N4_R:
                    raise SceneError(sid, i, "n4_q_without_n4_r", "N4_Q must be followed immediately by N4_R")
            if turn.label is Label.N4_R and (i == 0 or self.turns[i - 1].label is not Label.N4_Q):
                raise SceneError(sid, i, "n4_r_without_n4_q", "N4_R must follow an N4_Q turn")
        if not t_turns:
            raise SceneError(sid, None, "t_missing", "scene has no T turn")
        if len(t_turns) > 1:
            raise SceneError(sid, t_turns[1], "two_t", f"second T turn (first at turn {t_turns[0]})")
        if t_turns[0] == 0:
            raise SceneError(sid, 0, "t_first", "T must not be the first turn")
        if t_turns[0] == len(self.turns) - 1:
            raise SceneError(sid, t_turns[0], "t_last", "T must be followed by more talk")

    def to_dict(self) -> dict[str, Any]:
        return {
            "scene_id": self.scene_id,
            "pair_id": self.pair_id,
            "condition": self.condition,
            "speakers": list(self.speakers),
            "gold_answer": self.gold_answer,
            "t_position": self.t_position,
            "attributes": dict(self.attributes),
            "turns": [t.to_dict() for t in self.turns],
        } | ({"speaker_names": dict(self.speaker_names)} if self.speaker_names else {})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scene:
        """Build a scene from its JSON form; raises :class:`SceneError` on missing fields."""
        sid = str(d.get("scene_id", "?"))
        try:
            return cls(
                scene_id=d["scene_id"],
                pair_id=d["pair_id"],
                condition=d["condition"],
                speakers=tuple(d["speakers"]),
                turns=tuple(Turn.from_dict(t) for t in d["turns"]),
                gold_answer=d["gold_answer"],
                attributes=dict(d.get("attributes", {})),
                t_position=d.get("t_position", "middle"),
                speaker_names=dict(d.get("speaker_names") or {}),
            )
        except KeyError as e:
            raise SceneError(sid, None, "missing_field", f"missing field {e.args[0]!r}") from None
        except ValueError as e:  # bad enum value
            raise SceneError(sid, None, "bad_value", str(e)) from None


_ASSISTANT_WORD = re.compile(rf"\b{ASSISTANT_NAME}\b", re.IGNORECASE)
# role nouns and device words by which people may single out the assistant without its name
DESIGNATOR = re.compile(
    r"\b(?<!coffee )(?<!vending )(?<!washing )(assistants?|machines?|devices?|speakers?|dashboard|tablets?|"
    r"computers?|robots?|gadgets?|bots?|AI)\b"
    r"|\bisn't a (person|human)\b|\bnot a (person|human)\b|\b(us|we) (humans|people)\b", re.IGNORECASE)
# second-person memory cues that fit any human in the room as well as the assistant
GENERIC_CUE = re.compile(r"\byou (were|was) (listening|there|here)\b|\byou heard\b|\byou (remember|recall)\b"
                         r"|\byou keep track\b", re.IGNORECASE)
# a person saying the people present do not know (the turn before an implicit T may)
DONT_KNOW = re.compile(r"\b(no idea|no clue|not a clue|don't know|don't remember|have no idea|forgotten|"
                       r"wasn't listening|wasn't paying attention|missed that|don't ask me|don't look at me)\b",
                       re.IGNORECASE)
_CONTENT = re.compile(r"[a-z][a-z'-]{2,}")
_FUNCTION_WORDS = frozenset((
    "about", "actually", "again", "also", "and", "any", "are", "been", "before", "being", "but", "can", "could",
    "day", "did", "does", "doing", "don't", "done", "down", "each", "earlier", "else", "even", "every", "for",
    "from", "get", "got", "had", "has", "have", "having", "her", "here", "him", "his", "honestly", "how", "its",
    "just", "know", "let", "like", "made", "make", "many", "may", "maybe", "more", "most", "much", "must", "need",
    "new", "not", "now", "okay", "old", "one", "only", "other", "our", "out", "over", "please", "really", "right",
    "said", "same", "say", "see", "she", "should", "since", "some", "sorry", "still", "such", "sure", "than",
    "thank", "thanks", "that", "that's", "the", "their", "them", "then", "there", "these", "they", "thing",
    "think", "this", "those", "today", "told", "tonight", "too", "use", "very", "want", "wanted", "wants", "was",
    "way", "were", "what", "what's", "when", "where", "which", "while", "who", "why", "will", "with", "would",
    "you", "you're", "your", "yours",
))


def _content_words(text: str) -> set[str]:
    return {w for w in _CONTENT.findall(text.lower()) if w not in _FUNCTION_WORDS}


def names_assistant_or_designates(text: str) -> bool:
    """True when ``text`` names the assistant or refers to it by a role noun or device word
    (:data:`DESIGNATOR`)."""
    return names_assistant(text) or bool(DESIGNATOR.search(text))


def context_singles_out_assistant(implicit: Scene, rewritten_previous: bool = False) -> str | None:
    """How the conversation makes the implicit T a request to the assistant (spec section 2: the
    name is replaced by contextual cues), or ``None`` when nothing does. In order:

    * ``"designator"``: T, or the turn before it where the pair rewrote it, refers to the
      assistant by role or device ("ask the speaker about the ferry");
    * ``"job"``: an earlier turn refers to the assistant (name or designator) and shares a
      content word with T: the assistant was given the job, or said the fact ("Aria keeps track
      of the ferry for us" ... "when is the ferry now?");
    * ``"unknown"``: the turn right before T, by someone else, says the people do not know
      (:data:`DONT_KNOW`) and an earlier turn refers to the assistant.
    """
    t = implicit.t_index
    text = implicit.turns[t].text
    if DESIGNATOR.search(text) or (rewritten_previous and names_assistant_or_designates(implicit.turns[t - 1].text)):
        return "designator"
    mentions = [k for k, turn in enumerate(implicit.turns[:t]) if names_assistant_or_designates(turn.text)]
    if not mentions:
        return None
    asked = _content_words(text)
    if any(asked & _content_words(implicit.turns[k].text) for k in mentions):
        return "job"
    prev = implicit.turns[t - 1]
    if prev.speaker != implicit.turns[t].speaker and DONT_KNOW.search(prev.text) and mentions[0] < t - 1:
        return "unknown"
    return None


def names_assistant(text: str) -> bool:
    """True when ``text`` contains the assistant's name as a whole word ("Aria", "Aria's"; not
    "Maria", not "vegetarian")."""
    return bool(_ASSISTANT_WORD.search(text))


def addresses_by_name(text: str, name: str) -> bool:
    """True when ``text`` addresses ``name`` as a vocative: at the start or after a greeting or a
    punctuation mark, followed by a punctuation mark ("Omar, when...", "Hey Omar,", "..., Omar?").
    "Omar told us" or "what did Omar say" only mention the person."""
    pat = rf"(^|[,:;.!?]\s*|\b(hey|hi|okay|ok|so|oh|right|well)\s+){re.escape(name)}\s*([,.!?:;]|$)"
    return bool(re.search(pat, text.strip(), re.IGNORECASE))


def validate_pair(explicit: Scene, implicit: Scene, strict: bool = False) -> None:
    """Check that two scenes form a valid explicit/implicit pair (spec section 2).

    Raises :class:`SceneError` when the pair ids or gold answers differ, the conditions are
    wrong, the explicit T does not name Aria (whole word), the implicit T does, the implicit T
    addresses a present human by name (needs ``speaker_names``), or its only addressing cue is a
    generic one that fits any human ("You were listening.") and nothing in the conversation
    singles out the assistant. With ``strict`` (generated and LLM-written scenes, ``make corpus
    --strict`` imports) the conversation must single out the assistant as the addressee
    (:func:`context_singles_out_assistant`: a role or device word in T or its rewritten previous
    turn, an earlier mention of the assistant tied to what T asks, or the people having just said
    they do not know), rule ``implicit_no_context``, and the pair must keep the content rules of
    :func:`check_content`.
    """
    sid = explicit.pair_id
    if explicit.pair_id != implicit.pair_id:
        raise SceneError(sid, None, "pair_id", f"pair ids differ: {explicit.pair_id!r} vs {implicit.pair_id!r}")
    if (explicit.condition, implicit.condition) != CONDITIONS:
        raise SceneError(sid, None, "pair_conditions", "pair must be (explicit, implicit)")
    if explicit.gold_answer != implicit.gold_answer:
        raise SceneError(sid, None, "pair_gold", "paired versions must share the gold answer: explicit "
                         f"{explicit.gold_answer!r}, implicit {implicit.gold_answer!r}")
    e_t, i_t = explicit.t_index, implicit.t_index
    if not names_assistant(explicit.turns[e_t].text):
        raise SceneError(explicit.scene_id, e_t, "explicit_name", f"explicit T must name {ASSISTANT_NAME}")
    text = implicit.turns[i_t].text
    if names_assistant(text):
        raise SceneError(implicit.scene_id, i_t, "implicit_name", f"implicit T must not name {ASSISTANT_NAME}")
    for spk, name in implicit.speaker_names.items():
        if addresses_by_name(text, name):
            raise SceneError(implicit.scene_id, i_t, "implicit_addresses_human",
                             f"implicit T addresses {name!r} (speaker {spk}), a person in the room")
    rewritten = i_t > 0 and i_t == e_t and implicit.turns[i_t - 1] != explicit.turns[e_t - 1]
    cue = context_singles_out_assistant(implicit, rewritten)
    if cue is None and GENERIC_CUE.search(text):
        raise SceneError(implicit.scene_id, i_t, "implicit_generic_cue",
                         "implicit T relies on a cue that fits any human in the room (e.g. 'you heard it')")
    if strict and cue is None:
        raise SceneError(implicit.scene_id, i_t, "implicit_no_context",
                         "nothing in the implicit T or the conversation before it singles out the assistant (a "
                         "role or device word, an earlier mention of the assistant tied to what T asks, or the "
                         "people having just said they do not know)")
    if strict:
        check_content(explicit, implicit)


_WORDS = re.compile(r"[a-z0-9']+")


def check_content(explicit: Scene, implicit: Scene) -> None:
    """The content rules of a pair (``strict`` validation; spec section 2), beyond its form. Raises
    :class:`SceneError` naming the rule:

    * ``support``: the gold answer's words are said in a turn before T (each version);
    * ``gold_in_t``: T does not itself say the gold answer;
    * ``n1_no_assistant``: every N1 turn refers to the assistant (by name, role or device);
    * ``n3_addressed``: no N3 turn addresses a person in the room by name;
    * ``pair_layout``: both versions have the same speakers, labels and targets turn by turn, except
      that one version may lack one N4 event (an N4_Q and its N4_R: the paper's N4 edits with unequal
      turn counts) and the rewritten turn before T may be N1 in one version and N2 in the other;
    * ``pair_diff``: they differ only at T, the turn right before it (a rewrite) and N4 turns (edits).
    """
    gold = set(_WORDS.findall(explicit.gold_answer.lower()))
    for s in (explicit, implicit):
        t = s.t_index
        if not any(gold <= set(_WORDS.findall(turn.text.lower())) for turn in s.turns[:t]):
            raise SceneError(s.scene_id, t, "support", f"the gold answer {s.gold_answer!r} is not said before T")
        if gold <= set(_WORDS.findall(s.turns[t].text.lower())):
            raise SceneError(s.scene_id, t, "gold_in_t", f"T says the gold answer {s.gold_answer!r} itself")
        for k, turn in enumerate(s.turns):
            if turn.label is Label.N1 and not names_assistant_or_designates(turn.text):
                raise SceneError(s.scene_id, k, "n1_no_assistant", "an N1 turn must refer to the assistant")
            if turn.label is Label.N3 and any(addresses_by_name(turn.text, n) for n in s.speaker_names.values()):
                raise SceneError(s.scene_id, k, "n3_addressed", "an N3 turn (no addressee) addresses a person by name")
    t = explicit.t_index
    e_turns, i_turns = aligned_turns(explicit, implicit)

    def layout(turns: Sequence[Turn]) -> list[tuple]:
        return [(x.speaker, Label.N1 if k == t - 1 and x.label is Label.N2 else x.label, x.target)
                for k, x in enumerate(turns)]

    if layout(e_turns) != layout(i_turns) or implicit.t_index != t:
        raise SceneError(explicit.pair_id, None, "pair_layout",
                         "the versions differ in turn count, speakers, labels or targets")
    for k, (a, b) in enumerate(zip(e_turns, i_turns, strict=True)):
        if a != b and k not in (t, t - 1) and a.label not in (Label.N4_Q, Label.N4_R):
            raise SceneError(explicit.pair_id, k, "pair_diff",
                             "the versions may differ only at T, the turn before it and N4 turns")


def extra_event(explicit: Scene, implicit: Scene) -> tuple[str, int] | None:
    """The paper's N4 edit with unequal turn counts: where one version has an N4 event (N4_Q,
    N4_R) after T that the other lacks, ``(condition of the version that has it, index of its
    N4_Q)``, the first such event whose removal lines the speakers and labels up; else None."""
    a, b, t = explicit.turns, implicit.turns, explicit.t_index
    if abs(len(a) - len(b)) != 2:
        return None
    (longer, cond), shorter = ((a, explicit.condition), b) if len(a) > len(b) else ((b, implicit.condition), a)
    for q in range(t + 1, len(longer) - 1):
        if longer[q].label is Label.N4_Q and longer[q + 1].label is Label.N4_R:
            cut = (*longer[:q], *longer[q + 2:])
            if [(x.speaker, x.label) for x in cut] == [(x.speaker, x.label) for x in shorter]:
                return cond, q
    return None


def aligned_turns(explicit: Scene, implicit: Scene) -> tuple[Sequence[Turn], Sequence[Turn]]:
    """The two versions' turns, lined up turn by turn: the event of :func:`extra_event` is taken out
    of the version that has it. Versions of equal length, or that no such event lines up, come back
    as they are."""
    extra = extra_event(explicit, implicit)
    if extra is None:
        return explicit.turns, implicit.turns
    cond, q = extra
    if cond == explicit.condition:
        return (*explicit.turns[:q], *explicit.turns[q + 2:]), implicit.turns
    return explicit.turns, (*implicit.turns[:q], *implicit.turns[q + 2:])


def validate_scenes(items: Iterable[Scene | SceneError], strict: bool = False
                    ) -> tuple[list[Scene], dict[str, str]]:
    """Pair-level validation of parsed scenes, wherever they come from (generated or imported).

    ``items`` are scenes and per-line errors (as :func:`iter_manifest` yields them). Returns the
    scenes that form complete, valid pairs (input order) and ``{scene_id: message}`` for every
    rejected scene: a line's own error, a pair with a missing half (rule ``pair_incomplete``)
    or a pair that fails :func:`validate_pair` (both halves rejected, same message). A valid
    scene is never kept without its partner, so a McNemar test never sees half a pair.
    """
    invalid: dict[str, str] = {}
    scenes: list[Scene] = []
    for x in items:
        if isinstance(x, SceneError):
            invalid[x.scene_id] = str(x)
        else:
            scenes.append(x)
    pairs = by_pair(scenes)
    bad: set[str] = set()
    for pid, versions in pairs.items():
        if set(versions) != set(CONDITIONS):
            for s in versions.values():
                missing = [c for c in CONDITIONS if c not in versions]
                invalid[s.scene_id] = str(SceneError(s.scene_id, None, "pair_incomplete",
                                                     f"pair {pid!r} has no {' or '.join(missing)} version"))
            bad.add(pid)
            continue
        try:
            validate_pair(versions["explicit"], versions["implicit"], strict=strict)
        except SceneError as e:
            for s in versions.values():
                invalid[s.scene_id] = str(e)
            bad.add(pid)
    return [s for s in scenes if s.pair_id not in bad], invalid


def import_manifest(lines: Iterable[str], strict: bool = False) -> tuple[list[Scene], dict[str, str]]:
    """Read an external manifest (docs/formats.md): every line parsed and checked
    (:func:`iter_manifest`, errors located by line number), then the pair rules
    (:func:`validate_scenes`). Returns the valid scenes and ``{scene_id: message}``."""
    return validate_scenes(iter_manifest(lines), strict=strict)


def write_manifest(scenes: Iterable[Scene], fh: IO[str]) -> int:
    """Write scenes as JSONL (one scene per line). Returns the number written."""
    n = 0
    for s in scenes:
        fh.write(json.dumps(s.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
        n += 1
    return n


def iter_manifest(lines: Iterable[str]) -> Iterator[Scene | SceneError]:
    """Parse JSONL lines; yield a validated :class:`Scene` or the :class:`SceneError` for each
    non-blank line, in line order.

    Bad lines never stop the iteration: a broken scene is reported, the rest go on. A scene id
    on more than one line (valid or not) is an error on every one of those lines (rule
    ``duplicate_id``, naming the id and all its line numbers, 1-based): the manifest does not
    say which line is right, so none is guessed. All lines are read before the first is yielded.
    Every error carries its 1-based manifest line (``SceneError.line``, and "manifest line N:" in
    its message). Pair rules (both versions present, same gold answer, naming) are checked by
    :func:`validate_scenes` / :func:`import_manifest`.
    """
    parsed: list[tuple[int, Scene | SceneError, str | None]] = []  # (line number, result, scene id)
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            parsed.append((lineno, *_parse_line(line, lineno)))
    lines_of: dict[str, list[tuple[int, Scene | SceneError]]] = {}
    for lineno, item, sid in parsed:
        if sid is not None:
            lines_of.setdefault(sid, []).append((lineno, item))
    for lineno, item, sid in parsed:
        same = lines_of[sid] if sid is not None else []
        if len(same) < 2:
            yield item.at_line(lineno) if isinstance(item, SceneError) and item.line is None else item
            continue
        numbers = [str(n) for n, _ in same]
        message = (f"scene id on manifest lines {', '.join(numbers[:-1])} and {numbers[-1]}; none of them is "
                   "used (which one is right is unknown)")
        message += "".join(f"; line {n} is also invalid: {other}" for n, other in same if isinstance(other, SceneError))
        yield SceneError(sid, None, "duplicate_id", message, lineno)


def _parse_line(line: str, lineno: int) -> tuple[Scene | SceneError, str | None]:
    """One manifest line as a validated scene or its error, and the line's ``scene_id`` when it
    has a string one (``None`` otherwise)."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        return SceneError(f"line {lineno}", None, "json", f"invalid JSON: {e.msg}", lineno), None
    if not isinstance(d, dict):
        return SceneError(f"line {lineno}", None, "json", "a manifest line must be a JSON object", lineno), None
    sid = d.get("scene_id") if isinstance(d.get("scene_id"), str) else None
    try:
        scene = Scene.from_dict(d)
        scene.validate()
    except SceneError as e:
        return e, sid
    except (TypeError, AttributeError) as e:  # a field of the wrong JSON type, e.g. "turns": 5
        return SceneError(str(d.get("scene_id", "?")), None, "bad_value", f"wrong field type: {e}"), sid
    return scene, sid


def read_manifest(lines: Iterable[str]) -> list[Scene]:
    """Parse and validate a whole manifest strictly; raise the first :class:`SceneError`."""
    out: list[Scene] = []
    for item in iter_manifest(lines):
        if isinstance(item, SceneError):
            raise item
        out.append(item)
    return out


def by_pair(scenes: Sequence[Scene]) -> dict[str, dict[str, Scene]]:
    """Group scenes as ``{pair_id: {condition: scene}}``."""
    out: dict[str, dict[str, Scene]] = {}
    for s in scenes:
        out.setdefault(s.pair_id, {})[s.condition] = s
    return out
