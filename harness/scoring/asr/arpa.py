"""A tiny ARPA bigram language-model writer (pure functions, no dependencies).

The offline recogniser is only usable on synthetic speech when its LM is built from the
scene's own text (``docs/asr.md``). This module turns tokenised sentences into an ARPA file:

* every sentence is wrapped in ``<s> ... </s>``;
* unigrams: maximum likelihood over all predicted tokens (every token but ``<s>``), mixed with
  a uniform share ``uniform`` so rare words keep a usable probability; ``<s>`` gets the
  conventional log10 probability -99 (it is never predicted);
* bigrams: absolute discounting, ``p(w | v) = (c(v, w) - D) / c(v)`` for every seen pair,
  and the freed mass ``D * N1+(v) / c(v)`` goes to unseen words through a back-off weight
  ``alpha(v) = freed / (1 - sum of p_uni(w) over w seen after v)`` (Katz-style back-off,
  so every conditional distribution sums to one exactly).

All probabilities and back-off weights are written as log10, as the ARPA format requires.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

BOS, EOS = "<s>", "</s>"
LOG10_ZERO = -99.0


@dataclass(frozen=True)
class BigramLM:
    """A back-off bigram model: log10 unigram probabilities and back-off weights, log10 bigrams."""

    unigrams: dict[str, tuple[float, float | None]]  # word -> (log10 p, log10 back-off weight or None)
    bigrams: dict[tuple[str, str], float]  # (v, w) -> log10 p(w | v)

    def prob(self, word: str, history: str) -> float:
        """``p(word | history)`` (linear), following the back-off rule."""
        if (history, word) in self.bigrams:
            return 10.0 ** self.bigrams[(history, word)]
        bow = self.unigrams[history][1] or 0.0
        return 10.0 ** (bow + self.unigrams[word][0])


def estimate(sentences: Iterable[Sequence[str]], discount: float = 0.1, uniform: float = 0.1) -> BigramLM:
    """Estimate a :class:`BigramLM` from tokenised sentences.

    Args:
        sentences: word sequences (without sentence markers); empty ones are skipped.
        discount: the absolute discount ``D``, ``0 < D < 1``.
        uniform: share of the unigram mass spread evenly over the vocabulary, ``0 <= u < 1``.

    Raises:
        ValueError: bad parameters, no non-empty sentence, or a token that is a marker or
            contains whitespace.
    """
    if not 0.0 < discount < 1.0:
        raise ValueError(f"discount must be in (0, 1), got {discount}")
    if not 0.0 <= uniform < 1.0:
        raise ValueError(f"uniform must be in [0, 1), got {uniform}")
    uni: Counter[str] = Counter()
    bi: dict[str, Counter[str]] = defaultdict(Counter)
    for sent in sentences:
        if not sent:
            continue
        for w in sent:
            if w in (BOS, EOS) or not w or any(c.isspace() for c in w):
                raise ValueError(f"invalid LM token {w!r}")
        toks = [BOS, *sent, EOS]
        uni.update(toks[1:])
        for v, w in itertools.pairwise(toks):
            bi[v][w] += 1
    if not uni:
        raise ValueError("no non-empty sentence to build an LM from")

    total = sum(uni.values())
    p_uni = {w: (1.0 - uniform) * c / total + uniform / len(uni) for w, c in uni.items()}

    unigrams: dict[str, tuple[float, float | None]] = {}
    bigrams: dict[tuple[str, str], float] = {}
    for v in sorted(bi, key=lambda s: (s != BOS, s)):
        followers = bi[v]
        c_v = sum(followers.values())
        seen_mass = sum(p_uni[w] for w in followers)
        rest = 1.0 - seen_mass
        if rest <= 1e-12:  # every word follows v: nothing to back off to, keep the ML estimate
            d, bow = 0.0, 0.0
        else:
            d = discount
            bow = math.log10(d * len(followers) / c_v / rest)
        for w, c in followers.items():
            bigrams[(v, w)] = math.log10((c - d) / c_v)
        unigrams[v] = (LOG10_ZERO if v == BOS else math.log10(p_uni[v]), bow)
    for w, p in p_uni.items():
        if w not in unigrams:
            unigrams[w] = (math.log10(p), None)
    return BigramLM(unigrams=unigrams, bigrams=bigrams)


def format_arpa(lm: BigramLM) -> str:
    """Render ``lm`` in the ARPA text format (header counts, log10 values, ``\\end\\``)."""
    lines = ["\\data\\", f"ngram 1={len(lm.unigrams)}", f"ngram 2={len(lm.bigrams)}", "", "\\1-grams:"]
    for w in sorted(lm.unigrams):
        p, bow = lm.unigrams[w]
        lines.append(f"{p:.6f}\t{w}" + ("" if bow is None else f"\t{bow:.6f}"))
    lines += ["", "\\2-grams:"]
    for (v, w) in sorted(lm.bigrams):
        lines.append(f"{lm.bigrams[(v, w)]:.6f}\t{v} {w}")
    lines += ["", "\\end\\", ""]
    return "\n".join(lines)


def arpa_text(sentences: Iterable[Sequence[str]], discount: float = 0.1, uniform: float = 0.1) -> str:
    """:func:`estimate` then :func:`format_arpa`."""
    return format_arpa(estimate(sentences, discount=discount, uniform=uniform))
