"""Text normalisation shared by the ASR backends and the LM builder.

One tokeniser, :func:`words`, turns free text into the lower-case word tokens the recognisers
output and the ARPA LM is built from: curly apostrophes become straight ones, hyphens and
other punctuation separate words, numbers are spelled out (``"3"`` -> ``"three"``,
``"1,250"`` -> ``"one thousand two hundred fifty"``, ``"7th"`` -> ``"seventh"``, ``"$9"`` ->
``"nine dollars"``), so a recogniser that writes digits (Qwen3-ASR) and one that writes words
(pocketsphinx) give comparable text. :func:`sentences` splits text at
sentence punctuation first, so LM bigrams never cross a sentence end.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"))

_SENTENCE_END = re.compile(r"[.!?;:]+(?=\s|$)|\n+")
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*|\d+(?:st|nd|rd|th)?")
_DIGIT_GROUPS = re.compile(r"(?<=\d),(?=\d{3}\b)")  # 1,250 -> 1250
_REWRITES = (  # digit forms an ITN-ing recogniser (Qwen3-ASR) writes, spelled the way they are said
    (re.compile(r"\$(\d+)(?:\.(\d\d))?\b"), lambda m: f" {m[1]} dollars" + (f" {m[2]} cents" if m[2] else "")),
    (re.compile(r"(\d)\s*%"), lambda m: f"{m[1]} percent"),
    (re.compile(r"(\d)\.(\d)"), lambda m: f"{m[1]} point {m[2]}"),
)
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
            "twelve": "twelfth"}


def number_words(n: int) -> list[str]:
    """Spell a non-negative integer in English words (no "and"): 212 -> two hundred twelve."""
    if n < 0:
        raise ValueError(f"negative number {n}")
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    if n < 1000:
        return [_ONES[n // 100], "hundred"] + (number_words(n % 100) if n % 100 else [])
    for scale, name in _SCALES:
        if n >= scale:
            if n // scale >= 1000:  # beyond the largest scale: read digit by digit
                return [_ONES[int(c)] for c in str(n)]
            return number_words(n // scale) + [name] + (number_words(n % scale) if n % scale else [])
    raise AssertionError("unreachable")


def ordinal_words(n: int) -> list[str]:
    """Spell an ordinal: 7 -> seventh, 21 -> twenty first, 40 -> fortieth."""
    *head, last = number_words(n)
    if last in _ORDINAL:
        last = _ORDINAL[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return [*head, last]


def words(text: str) -> list[str]:
    """Lower-case word tokens of ``text``.

    Punctuation is dropped; integers and ordinals are spelled out (``"7th"`` -> ``"seventh"``),
    and so are ``$9`` (``"nine dollars"``), ``50%`` (``"fifty percent"``) and ``2.5``
    (``"two point five"``).
    """
    t = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    t = _DIGIT_GROUPS.sub("", t)
    for pattern, repl in _REWRITES:
        t = pattern.sub(repl, t)
    out: list[str] = []
    for tok in _TOKEN.findall(t):
        digits = tok.rstrip("stndrh")
        if not digits.isdigit():
            out.append(tok)
        elif len(digits) > 12:
            out.extend(_ONES[int(c)] for c in digits)
        elif digits != tok:
            out.extend(ordinal_words(int(digits)))
        else:
            out.extend(number_words(int(digits)))
    return out


def sentences(texts: Iterable[str]) -> list[list[str]]:
    """Split every text at sentence punctuation and tokenise; empty sentences are dropped."""
    out: list[list[str]] = []
    for text in texts:
        for part in _SENTENCE_END.split(text):
            toks = words(part)
            if toks:
                out.append(toks)
    return out


def normalize(text: str) -> str:
    """The canonical transcript form: :func:`words` joined by single spaces."""
    return " ".join(words(text))


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Word-level Levenshtein distance (substitutions + deletions + insertions); WER's numerator."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]
