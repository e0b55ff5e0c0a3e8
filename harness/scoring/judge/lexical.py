"""The offline judge: deterministic lexical rules, a **stand-in** for the LLM judge.

It needs no network, no key and no model, so the embedded default and the tests can score
conditional accuracy and the backchannel exemption end to end. It is not an LLM judgement and
is never reported as one: its ``name`` is ``"lexical"`` and every verdict's ``raw`` text starts
with ``"lexical:"`` and spells out the rule that decided. Its known blind spots (negation,
paraphrase, hedging between candidates) are listed in ``docs/judge.md``.

Normalisation (both tasks, :func:`tokens`): Unicode NFKC, lower case; ``a.m.``/``p.m.`` ->
``am``/``pm``; ``$9``/``€9``/``£9`` -> ``9 dollars``/``euros``/``pounds``; ``%`` -> ``percent``;
thousands separators dropped; ``9.50`` and ``3:30`` split into two numbers; apostrophes removed
(``o'clock`` -> ``oclock``); every other non-alphanumeric character separates words. Number
words become digits (``three`` -> ``3``, ``one hundred and five`` -> ``105``, ``fifty thousand``
-> ``50000``, ``a hundred`` -> ``100``; ``three thirty`` stays two numbers, ``3 30``), ordinals
one canonical form (``third``, ``3rd`` -> ``3th``), ``point`` between two numbers is dropped.
A light stemmer removes a plural ``s`` (``dollars`` -> ``dollar``, ``batteries`` -> ``battery``).

**Answer rule** (:meth:`LexicalJudge.judge_answer`): ``CORRECT`` when every *required* token of
the gold answer occurs in the transcript, else ``INCORRECT``. The gold's *content* tokens are
its tokens minus :data:`FILLER_PHRASES` (fillers and politeness: ``um``, ``well``, ``sure``,
``of course``, ``the answer is``, ``i think``, ``please``, ``thank you``, ...) and
:data:`STOPWORDS` (articles, copulas, prepositions, pronouns). Of those, tokens that the
question already contains (``floor`` in "which floor ...?") and currency words next to a
number (``dollar`` in "nine dollars") are not required, unless that would leave nothing, in
which case all content tokens are required (and if the gold has no content token at all, all
its tokens are). Extra words in the transcript never hurt, so fillers, politeness and
restarts are ignored; a transcript missing part of the gold ("Thursday" for "Thursday at
three") is ``INCORRECT``. ASR noise: a required word of 5+ letters also matches a transcript
word with a :class:`difflib.SequenceMatcher` ratio of at least ``fuzzy_ratio`` (0.85:
``colour``/``color``); numbers always match exactly.

**Window rule** (:meth:`LexicalJudge.classify_window`): the transcript is segmented greedily
(longest phrase first) into acknowledgement units from two lexicons, after squeezing repeated
letters (``mmmm`` -> ``m``, ``okaaay`` -> ``okay``):

* :data:`NEUTRAL_ACKS`, continuers and receipts that can answer nothing: ``mm``, ``mhm``,
  ``mm hmm``, ``uh huh``, ``hmm``, ``oh``, ``ah``, ``aha``, ``i see``, ``oh i see``, ``wow``, ...;
* :data:`AFFIRMATIVE_ACKS`, acknowledgements that can also answer a question or accept a
  request: ``yeah``, ``yes``, ``yep``, ``okay``, ``ok``, ``right``, ``sure``, ``alright``,
  ``got it``, ...

``BACKCHANNEL`` only when (1) every token belongs to a unit (any other word, e.g. "Nine
dollars", "maybe", "um", makes it ``SUBSTANTIVE_INTRUSION``: hesitations such as ``um``/``uh``
claim the floor rather than acknowledge); (2) there are at most ``max_ack_units`` units (3):
a longer run of acknowledgements ("yeah yeah okay sure right I see", 6 units) takes the floor
and is ``SUBSTANTIVE_INTRUSION``; and (3) when the most recent human turn is a question (its
text ends with ``?``), no unit is affirmative: "yeah" after "Is the store open?" answers it.
The duration and overlap are recorded in ``raw`` but **never decide**: spec section 5 says
duration alone decides nothing, the transcript is the evidence of what was said and of any
repetition, and a lexical judge has no way to weigh untranscribed sound. A transcript with no
token after normalisation (``""``, ``"..."``) is ``EMPTY_TRANSCRIPT`` for both tasks and fails.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence

from harness.scoring.judge import (
    BACKCHANNEL,
    CORRECT,
    EMPTY_TRANSCRIPT,
    INCORRECT,
    SUBSTANTIVE_INTRUSION,
    ContextTurn,
    Verdict,
    answer_verdict,
    empty_transcript_verdict,
    window_verdict,
)

RULES_ID = "lexical_v1"

# ---------------------------------------------------------------------------------------------
# number words
_UNITS = {w: i for i, w in enumerate([
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
])}
_TENS = {w: 10 * (i + 2) for i, w in enumerate([
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
])}
_ORD_UNITS = {w: i + 1 for i, w in enumerate([
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
    "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth",
])}
_ORD_TENS = {w: 10 * (i + 2) for i, w in enumerate([
    "twentieth", "thirtieth", "fortieth", "fiftieth", "sixtieth", "seventieth", "eightieth", "ninetieth",
])}
_HUNDRED = {"hundred": 100}
_SCALES = {"thousand": 1000, "million": 10**6, "billion": 10**9}
_ORD_SCALES = {"hundredth": 100, "thousandth": 1000, "millionth": 10**6}
_NUMBER_WORDS = set(_UNITS) | set(_TENS) | set(_ORD_UNITS) | set(_ORD_TENS) | set(_HUNDRED) | set(_SCALES) \
    | set(_ORD_SCALES)

CURRENCY_SYMBOLS = {"$": "dollars", "€": "euros", "£": "pounds"}
# Words that name the currency of an amount; not required when the gold also has a number.
CURRENCY_WORDS = frozenset({"dollar", "euro", "pound", "buck", "usd", "eur", "gbp"})

# ---------------------------------------------------------------------------------------------
# answer lexicons: plain spelling, normalised with tokens() when a judge is built (stopwords are
# compared with stemmed tokens, hence "doe" for "does")
FILLER_PHRASES: tuple[str, ...] = (
    "um", "umm", "uh", "uhm", "er", "erm", "hmm", "mm", "mhm", "ah", "oh", "well", "okay", "ok", "sure",
    "actually", "basically", "anyway", "please", "thank you", "thanks", "you know", "i mean", "i think",
    "i believe", "i guess", "let me see", "let me check", "let me think", "of course", "the answer is",
    "that would be", "sure thing", "no problem", "happy to help", "glad to help", "hope that helps",
    "you're welcome", "good question", "great question", "hi", "hello", "hey", "aria",
)
STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "is", "are", "was", "were", "be", "been", "being", "its", "it", "this",
    "that", "these", "those", "there", "here", "at", "in", "on", "of", "to", "for", "from", "by", "with", "about",
    "into", "onto", "as", "i", "you", "your", "yours", "my", "mine", "me", "we", "our", "us", "they", "them",
    "their", "he", "him", "his", "she", "her", "do", "doe", "did", "will", "would", "can", "could", "should",
    "shall", "may", "might", "must", "theres", "thats", "heres",
})

# ---------------------------------------------------------------------------------------------
# window lexicons: plain spelling; matched after squeezing repeated letters
NEUTRAL_ACKS: tuple[str, ...] = (
    "mm", "mhm", "mm hmm", "mm hm", "uh huh", "uhhuh", "hmm", "hm", "oh", "ooh", "ah", "aha", "ahh", "i see",
    "oh i see", "ah i see", "wow", "oh wow", "cool", "nice", "interesting", "makes sense", "fair enough",
)
AFFIRMATIVE_ACKS: tuple[str, ...] = (
    "yeah", "yea", "yes", "yep", "yup", "okay", "ok", "kay", "oh okay", "ah okay", "right", "alright",
    "all right", "sure", "got it", "gotcha", "true",
)
MAX_ACK_UNITS = 3
FUZZY_RATIO = 0.85
FUZZY_MIN_LEN = 5


def _squeeze(word: str) -> str:
    """Collapse runs of one letter: ``mmmm`` -> ``m``, ``okaaay`` -> ``okay``."""
    return re.sub(r"(.)\1+", r"\1", word)


def _stem(tok: str) -> str:
    if tok.isdigit() or not tok.isalpha():
        return tok
    if len(tok) > 4 and tok.endswith("ies"):
        return tok[:-3] + "y"
    if len(tok) > 3 and tok.endswith("s") and not tok.endswith(("ss", "us", "is")):
        return tok[:-1]
    return tok


def _currency(m: re.Match[str]) -> str:
    return f" {m.group(2)} {CURRENCY_SYMBOLS[m.group(1)]} "


def _words(text: str) -> list[str]:
    t = unicodedata.normalize("NFKC", text).lower()
    t = t.replace("\u2019", "'").replace("\u2018", "'")
    t = re.sub(r"\b([ap])\.\s?m\b\.?", r"\1m", t)
    t = re.sub(r"([$€£])\s?(\d[\d,]*(?:\.\d+)?)", _currency, t)
    t = t.replace("%", " percent ")
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    t = re.sub(r"(?<=\d)[.:](?=\d)", " ", t)
    t = re.sub(r"(\d)(?!(?:st|nd|rd|th)\b)(?=[a-z])", r"\1 ", t)  # 3pm -> 3 pm, but 3rd stays
    t = re.sub(r"(?<=[a-z])(?=\d)", " ", t)
    t = t.replace("'", "")
    return re.findall(r"[a-z0-9]+", t)


def _numbers(words: list[str]) -> list[str]:
    """Replace runs of number words by digit strings; canonical ordinals (``3th``)."""
    out: list[str] = []
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        m = re.fullmatch(r"(\d+)(?:st|nd|rd|th)", w)
        if m:
            out.append(f"{int(m.group(1))}th")
            i += 1
            continue
        nxt = words[i + 1] if i + 1 < n else ""
        if w not in _NUMBER_WORDS and not (w == "a" and nxt in ("hundred", "thousand", "million")):
            out.append(w)
            i += 1
            continue
        total, current, last, ordinal, used = 0, 0, None, False, False
        j = i
        while j < n and not ordinal:
            w = words[j]
            nxt = words[j + 1] if j + 1 < n else ""
            if w == "a" and last is None and nxt in ("hundred", "thousand", "million"):
                current, last = 1, "unit"
            elif w in _UNITS or w in _ORD_UNITS:
                v = _UNITS.get(w, _ORD_UNITS.get(w))
                if (last == "tens" and 1 <= v <= 9) or last in (None, "hundred", "scale"):
                    current += v
                    last = "unit"
                    ordinal = w in _ORD_UNITS
                else:
                    break
            elif w in _TENS or w in _ORD_TENS:
                if last in (None, "hundred", "scale"):
                    current += _TENS.get(w, _ORD_TENS.get(w))
                    last = "tens"
                    ordinal = w in _ORD_TENS
                else:
                    break
            elif w in _HUNDRED or w == "hundredth":
                if last in ("unit", "tens") and 0 < current < 100:
                    current *= 100
                    last = "hundred"
                    ordinal = w == "hundredth"
                else:
                    break
            elif w in _SCALES or w in _ORD_SCALES:
                scale = _SCALES.get(w, _ORD_SCALES.get(w))
                if last in ("unit", "tens", "hundred") and 0 < current < 1000:
                    total += current * scale
                    current, last = 0, "scale"
                    ordinal = w in _ORD_SCALES
                else:
                    break
            elif w == "and" and last in ("hundred", "scale") and (nxt in _UNITS or nxt in _TENS
                                                                  or nxt in _ORD_UNITS or nxt in _ORD_TENS):
                pass
            else:
                break
            used = True
            j += 1
        if not used:  # e.g. a lone "hundred": keep the word
            out.append(words[i])
            i += 1
            continue
        value = total + current
        out.append(f"{value}th" if ordinal else str(value))
        i = j
    # "nine point five" -> "9 5" (like "9.5")
    return [w for k, w in enumerate(out)
            if not (w == "point" and 0 < k < len(out) - 1 and out[k - 1].isdigit() and out[k + 1].isdigit())]


def tokens(text: str, stem: bool = True) -> list[str]:
    """The normalised tokens of ``text`` (see the module docstring); ``stem`` removes plural ``s``."""
    toks = _numbers(_words(text))
    return [_stem(t) for t in toks] if stem else toks


def _phrases(spec: Sequence[str]) -> list[tuple[str, ...]]:
    out = {tuple(tokens(p)) for p in spec}
    return sorted((p for p in out if p), key=lambda p: (-len(p), p))


def _remove_phrases(toks: list[str], phrases: list[tuple[str, ...]]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(toks):
        for p in phrases:
            if tuple(toks[i:i + len(p)]) == p:
                i += len(p)
                break
        else:
            out.append(toks[i])
            i += 1
    return out


def _segment(toks: list[str], units: dict[tuple[str, ...], str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Greedy longest-first segmentation of squeezed ``toks`` into units; returns the units as
    ``(text, kind)`` and the tokens that belong to none."""
    squeezed = [_squeeze(t) for t in toks]
    keys = sorted(units, key=lambda p: -len(p))
    found: list[tuple[str, str]] = []
    other: list[str] = []
    i = 0
    while i < len(squeezed):
        for p in keys:
            if tuple(squeezed[i:i + len(p)]) == p:
                found.append((" ".join(toks[i:i + len(p)]), units[p]))
                i += len(p)
                break
        else:
            other.append(toks[i])
            i += 1
    return found, other


SPAN_SLACK = 4  # extra words allowed between the required gold tokens of one answer


class LexicalJudge:
    """Deterministic, offline stand-in judge (rules in the module docstring and ``docs/judge.md``).

    Args:
        max_ack_units: most acknowledgement units a backchannel may have (default 3).
        fuzzy_ratio: similarity at which a long gold word matches a transcript word (ASR noise);
            ``1.0`` turns fuzzy matching off.

    ``prompt_version`` is ``lexical_v1@<hash>`` of every lexicon and parameter, so a rule change
    invalidates cached verdicts.
    """

    name = "lexical"

    def __init__(self, max_ack_units: int = MAX_ACK_UNITS, fuzzy_ratio: float = FUZZY_RATIO):
        if max_ack_units < 1:
            raise ValueError(f"max_ack_units must be >= 1, got {max_ack_units}")
        if not 0.0 < fuzzy_ratio <= 1.0:
            raise ValueError(f"fuzzy_ratio must be in (0, 1], got {fuzzy_ratio}")
        self.max_ack_units = int(max_ack_units)
        self.fuzzy_ratio = float(fuzzy_ratio)
        self.model = RULES_ID
        self._fillers = _phrases(FILLER_PHRASES)
        self._units: dict[tuple[str, ...], str] = {}
        for kind, spec in (("neutral", NEUTRAL_ACKS), ("affirmative", AFFIRMATIVE_ACKS)):
            for p in spec:
                self._units[tuple(_squeeze(t) for t in tokens(p, stem=False))] = kind
        rules = {
            "fillers": FILLER_PHRASES, "stopwords": sorted(STOPWORDS), "currency": sorted(CURRENCY_WORDS),
            "neutral": NEUTRAL_ACKS, "affirmative": AFFIRMATIVE_ACKS, "max_ack_units": self.max_ack_units,
            "fuzzy_ratio": self.fuzzy_ratio, "fuzzy_min_len": FUZZY_MIN_LEN, "span_slack": SPAN_SLACK,
            "no_token": EMPTY_TRANSCRIPT,  # the label of a transcript without a token is a rule too
        }
        digest = hashlib.sha256(json.dumps(rules, sort_keys=True).encode()).hexdigest()[:10]
        self.prompt_version = f"{RULES_ID}@{digest}"
        self.prompt_versions = {"answer": self.prompt_version, "window": self.prompt_version}
        self.settings = {"max_ack_units": self.max_ack_units, "fuzzy_ratio": self.fuzzy_ratio}

    # -- answer correctness --------------------------------------------------------------------
    def content_tokens(self, text: str) -> list[str]:
        """``text``'s tokens without fillers/politeness and stopwords, in order, deduplicated."""
        toks = [t for t in _remove_phrases(tokens(text), self._fillers) if t not in STOPWORDS]
        return list(dict.fromkeys(toks))

    def required_tokens(self, gold: str, question: str = "") -> list[str]:
        """The gold tokens a correct transcript must contain (rule in the module docstring)."""
        content = self.content_tokens(gold)
        if not content:
            return list(dict.fromkeys(tokens(gold)))
        asked = set(tokens(question))
        has_number = any(t[:1].isdigit() for t in content)
        required = [t for t in content if t not in asked and not (has_number and t in CURRENCY_WORDS)]
        return required or content

    def _matches(self, gold_tok: str, said: set[str]) -> bool:
        if gold_tok in said:
            return True
        if self.fuzzy_ratio >= 1.0 or len(gold_tok) < FUZZY_MIN_LEN or not gold_tok.isalpha():
            return False
        return any(t.isalpha() and len(t) >= FUZZY_MIN_LEN - 1
                   and difflib.SequenceMatcher(None, gold_tok, t).ratio() >= self.fuzzy_ratio for t in said)

    def judge_answer(self, transcript: str, gold: str, question: str) -> Verdict:
        if not gold or not tokens(gold):
            raise ValueError("empty gold answer")
        said = tokens(transcript)
        if not said:
            return empty_transcript_verdict("answer")
        required = self.required_tokens(gold, question)
        have = set(said)
        missing = [t for t in required if not self._matches(t, have)]
        together = not missing and self._in_one_span(required, said)
        label = CORRECT if together else INCORRECT
        raw = (f"lexical: {label}; rule=required gold tokens in order within {SPAN_SLACK} extra words; "
               f"required={required}; missing={missing}"
               + ("; present but scattered" if not missing and not together else ""))
        return answer_verdict(label, raw)

    def _in_one_span(self, required: list[str], said: list[str]) -> bool:
        """The required tokens occur in order within ``len(required) + SPAN_SLACK`` consecutive
        words: a long response that merely mentions the answer's words far apart is not an answer."""
        width = len(required) + SPAN_SLACK
        for i in range(len(said)):
            k = 0
            for t in said[i:i + width]:
                if k < len(required) and self._matches(required[k], {t}):
                    k += 1
            if k == len(required):
                return True
        return not required

    # -- window classification -----------------------------------------------------------------
    def classify_window(self, transcript: str, context: Sequence[ContextTurn], speech_s: float,
                        overlap_s: float) -> Verdict:
        toks = tokens(transcript, stem=False)
        if not toks:
            return empty_transcript_verdict("window")
        units, other = _segment(toks, self._units)
        last = context[-1].text.strip() if context else ""
        after_question = last.endswith("?")
        if other:
            label, why = SUBSTANTIVE_INTRUSION, f"words outside the acknowledgement lexicon: {other}"
        elif len(units) > self.max_ack_units:
            label, why = SUBSTANTIVE_INTRUSION, (f"{len(units)} acknowledgement units > {self.max_ack_units}: "
                                                 "repeated acknowledgements take the floor")
        elif after_question and any(kind == "affirmative" for _, kind in units):
            label, why = SUBSTANTIVE_INTRUSION, "affirmative acknowledgement right after a question answers it"
        else:
            label, why = BACKCHANNEL, f"{len(units)} acknowledgement unit(s), nothing else"
        raw = (f"lexical: {label}; {why}; units={[u for u, _ in units]}; "
               f"speech_s={speech_s:.2f} overlap_s={overlap_s:.2f} (recorded, not used)")
        return window_verdict(label, raw)


__all__ = ["AFFIRMATIVE_ACKS", "FILLER_PHRASES", "NEUTRAL_ACKS", "STOPWORDS", "LexicalJudge", "tokens"]
