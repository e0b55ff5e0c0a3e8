"""Does the corpus test addressee inference? The corpus diagnostic (issue 22), in ``corpus_stats.json``
(key ``diagnostic``), the report's corpus section and ``bench/corpus.py``.

The paper's contrast is explicit vs implicit addressing of the same request: an implicit T is
recognisable as a request to the assistant only from the conversation (spec section 2). A corpus
whose T turns give themselves away by their own words measures something else. The figures:

* ``designator``: share of implicit T (or, where the pair rewrites it, the turn before T) that name
  the assistant by a role noun or a device word (:data:`DESIGNATOR`).
* ``surface_auc``: per condition, the best of a few single-turn classifiers (word and punctuation
  n-grams of the turn alone: logistic regression and naive Bayes, :data:`CLASSIFIERS`) separating T
  from the other *question turns* (:func:`is_question`), as the 5-fold cross-validated ROC AUC
  (folds grouped by pair, so a pair's words never sit on both sides). 0.5 is chance. The best of
  several is a slightly optimistic figure (no nested selection): an upper reading of the tell.
* ``exclusive``: per condition and label, the n-grams (1-3 tokens) that occur in at least
  ``min_support`` turns of that label and in no turn of any other label, and the share of the
  label's turns that contain one (for T: how many requests a phrase rule alone finds); the
  characters other than letters that occur in one label only.
* ``repeats``: share of non-T turns (explicit versions) whose whole text occurs in another pair,
  the most used sentences, and the distinct first sentences per silence label.
* ``clauses``: clause-level diversity (turns split at , . ; : ? !, speaker names and the
  assistant's name masked): distinct / total clauses of T and of the other turns.
* ``t_onset``: seconds from the first human turn's start to T's start on the scheduler's
  model-independent timeline (turn lengths estimated at the paper's speaking rate until synthesis,
  ``chars_per_s``: :data:`harness.scenes.stats.CHARS_PER_S`, and the scheduler's 0.5 s gaps), over all
  conversations: range, tertile edges (:func:`harness.metrics.stats.timing_tertiles`' method) and
  their deviation from the paper's (:data:`PAPER_T_ONSET`, spec section 6); how many start before
  the paper's minimum, T as the second turn, and the gold answer said in the turn just before T.
* ``silence_by_type``: N1-N3 windows per condition by the spec's breakdown (device-directed,
  human-directed, statements, self-talk; spec section 6), and under ``paper`` the paper's figures
  read as windows per condition (:data:`PAPER_SILENCE_BY_TYPE`; the reading is a decision of
  docs/corpus.md).
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.scenes.schema import ASSISTANT_NAME, CONDITIONS, DESIGNATOR, Label, Scene, Target

TURN_GAP_S = 0.5  # the scheduler's silence between turns (spec section 4; ProtocolSettings.turn_gap_s, tested equal)
PAPER_T_ONSET = {"min_s": 14.50, "max_s": 263.97, "tertile_edges_s": [40.224, 54.656]}
# the paper's silence breakdown (spec section 6: 2,570 device-directed, 2,134 human-directed) read as
# windows per condition, not as one model's failures (MiniCPM-o fails about 1,543 of 20,360 windows);
# statements are the rest: 20,360 - 3,267 - 2,570 - 2,134 (docs/corpus.md)
PAPER_SILENCE_BY_TYPE = {"device_directed": 2570, "human_directed": 2134, "statements": 12389, "self_talk": 3267}
TOKEN = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")
CLAUSE = re.compile(r"[,.;:?!]+")
N_FOLDS = 5
MIN_CLASS = 10  # fewer T (or other question) turns than this: no classifier figure


@dataclass(frozen=True)
class Classifier:
    """One candidate surface classifier: ``kind`` ``"logreg"`` (inverse regularisation ``c``) or
    ``"nb"`` (multinomial naive Bayes) on binary n-gram counts up to ``max_n`` tokens."""

    kind: str
    max_n: int
    c: float = 1.0

    @property
    def name(self) -> str:
        return f"{self.kind}(1-{self.max_n}-grams" + (f", C={self.c:g})" if self.kind == "logreg" else ")")


CLASSIFIERS: tuple[Classifier, ...] = (Classifier("logreg", 2, 1.0), Classifier("logreg", 3, 10.0),
                                       Classifier("nb", 3))


def tokens(text: str) -> list[str]:
    """Lower-case word and punctuation tokens of ``text`` ("Hey, Aria?" -> hey , aria ?)."""
    return TOKEN.findall(text.lower())


def ngrams(text: str, max_n: int = 3) -> set[str]:
    """The distinct 1..``max_n``-token n-grams of ``text``, tokens joined by spaces."""
    tok = tokens(text)
    return {" ".join(tok[i:i + n]) for n in range(1, max_n + 1) for i in range(len(tok) - n + 1)}


def is_question(turn_text: str, label: Label) -> bool:
    """A *question turn*: an N4_Q, or any turn that asks something (holds a question mark)."""
    return label is Label.N4_Q or "?" in turn_text


def _mask(text: str, names: Sequence[str]) -> str:
    for name in (*names, ASSISTANT_NAME):
        text = re.sub(rf"\b{re.escape(name)}\b", "<name>", text, flags=re.IGNORECASE)
    return text


def _pct(a: float, b: float) -> float:
    return round((a - b) / b, 4) if b else 0.0


# -- the figures -------------------------------------------------------------------------------
def _designator_texts(e: Scene, i: Scene) -> list[str]:
    """The implicit T, and the turn before it where the pair rewrites that turn."""
    t = i.t_index
    texts = [i.turns[t].text]
    if t > 0 and len(e.turns) == len(i.turns) and e.turns[t - 1] != i.turns[t - 1]:
        texts.append(i.turns[t - 1].text)
    return texts


def designator_share(pairs: Sequence[tuple[Scene, Scene]]) -> dict:
    """Implicit T with a designator (:data:`DESIGNATOR`) in T or in its rewritten previous turn:
    ``pairs``, ``with_designator``, ``share`` and the designator words found (pairs per word)."""
    words: Counter = Counter()
    hit = 0
    for e, i in pairs:
        found = {m.group(0).lower() for x in _designator_texts(e, i) for m in DESIGNATOR.finditer(x)}
        hit += bool(found)
        words.update(found)
    return {"pairs": len(pairs), "with_designator": hit, "share": round(hit / len(pairs), 4) if pairs else 0.0,
            "words": dict(words.most_common(12))}


def _analysed(features: list[str]) -> list[str]:
    """CountVectorizer's analyzer for texts already analysed (:func:`surface_auc`)."""
    return features


def surface_auc(scenes: Sequence[Scene], classifiers: Sequence[Classifier] = CLASSIFIERS) -> dict:
    """The best cross-validated AUC of ``classifiers`` separating T from the other question turns of
    ``scenes`` (one condition). ``None`` figures (with ``why``) when a class has fewer than
    :data:`MIN_CLASS` turns or fewer than :data:`N_FOLDS` pairs."""
    texts, y, groups = [], [], []
    for s in scenes:
        for turn in s.turns:
            if turn.label is Label.T or is_question(turn.text, turn.label):
                texts.append(turn.text)
                y.append(int(turn.label is Label.T))
                groups.append(s.pair_id)
    n_t, n_other = sum(y), len(y) - sum(y)
    out: dict = {"t_turns": n_t, "other_question_turns": n_other, "best_auc": None, "best": None, "auc": {}}
    if min(n_t, n_other) < MIN_CLASS or len(set(groups)) < N_FOLDS:
        out["why"] = f"too few turns to cross-validate ({n_t} T, {n_other} other question turns)"
        return out
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold, cross_val_score
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline

    # the same folds for every classifier: split once (each cross_val_score would search them again)
    folds = list(StratifiedGroupKFold(n_splits=N_FOLDS, shuffle=True, random_state=0).split(texts, y, groups))
    analysed: dict[int, list[list[str]]] = {}  # max_n -> each text's n-grams, as CountVectorizer's analyzer gives them
    for clf in classifiers:
        if clf.max_n not in analysed:  # once, not in every fold's fit and transform: the same features, faster
            analyse = CountVectorizer(lowercase=True, token_pattern=TOKEN.pattern,
                                      ngram_range=(1, clf.max_n)).build_analyzer()
            analysed[clf.max_n] = [analyse(t) for t in texts]
        # the vocabulary (min_df=2) is still learnt from each training fold alone
        vec = CountVectorizer(analyzer=_analysed, binary=True, min_df=2)
        model = (LogisticRegression(C=clf.c, solver="liblinear", max_iter=1000) if clf.kind == "logreg"
                 else MultinomialNB())
        with warnings.catch_warnings():  # a fold whose classes are unbalanced by the grouping: still scored
            warnings.simplefilter("ignore")
            scores = cross_val_score(make_pipeline(vec, model), analysed[clf.max_n], np.array(y), cv=folds,
                                     scoring="roc_auc")
        out["auc"][clf.name] = round(float(np.mean(scores)), 4)
    out["best"] = max(out["auc"], key=out["auc"].get)
    out["best_auc"] = out["auc"][out["best"]]
    return out


def exclusive_phrases(scenes: Sequence[Scene], max_n: int = 3, top: int = 8) -> dict:
    """Per label, the n-grams found in at least ``min_support`` of its turns and in no other label's
    turn (``min_support`` = max(5, 0.5 % of the label's turns)); ``covered``: share of the label's
    turns holding one. ``chars``: per label, the characters other than letters (punctuation, digits,
    symbols: what changes how a turn is spoken or read) found in its turns only, with counts."""
    per_label: dict[str, Counter] = {}
    owners: dict[str, set[str]] = {}
    char_owners: dict[str, set[str]] = {}
    char_count: dict[str, Counter] = {}
    turn_grams: list[tuple[str, set[str]]] = []
    for s in scenes:
        for turn in s.turns:
            lab = turn.label.value
            grams = ngrams(turn.text, max_n)
            turn_grams.append((lab, grams))
            per_label.setdefault(lab, Counter()).update(grams)
            for g in grams:
                owners.setdefault(g, set()).add(lab)
            for ch in {c for c in turn.text if not c.isalpha()}:
                char_owners.setdefault(ch, set()).add(lab)
                char_count.setdefault(lab, Counter())[ch] += 1
    n_turns = Counter(lab for lab, _ in turn_grams)
    out: dict = {}
    for lab, counts in per_label.items():
        support = max(5, int(np.ceil(0.005 * n_turns[lab])))
        only = {g: c for g, c in counts.items() if c >= support and owners[g] == {lab}}
        covered = sum(bool(grams & only.keys()) for lb, grams in turn_grams if lb == lab)
        chars = {ch: char_count[lab][ch] for ch, labs in char_owners.items() if labs == {lab}}
        out[lab] = {"turns": n_turns[lab], "min_support": support, "phrases": len(only),
                    "covered": covered, "covered_share": round(covered / n_turns[lab], 4),
                    "top": dict(sorted(only.items(), key=lambda kv: (-kv[1], kv[0]))[:top]),
                    "chars": dict(sorted(chars.items()))}
    return out


def _sentences(text: str) -> list[str]:
    return [x.strip() for x in re.split(r"(?<=[.?!])\s+", text) if x.strip()]


def repeats(explicit: Sequence[Scene], top: int = 5) -> dict:
    """Whole-turn repeats across pairs and sentence reuse, over the explicit versions' non-T turns."""
    pairs_of: dict[str, set[str]] = {}
    non_t = [(s.pair_id, t) for s in explicit for t in s.turns if t.label is not Label.T]
    for pid, t in non_t:
        pairs_of.setdefault(t.text, set()).add(pid)
    repeated = sum(len(pairs_of[t.text]) > 1 for _, t in non_t)
    sentences = Counter(x for _, t in non_t for x in _sentences(t.text))
    first = {lab.value: len({_sentences(t.text)[0] for _, t in non_t if t.label is lab})
             for lab in (Label.N1, Label.N2, Label.N3)}
    return {"non_t_turns": len(non_t), "repeated_across_pairs": repeated,
            "share": round(repeated / len(non_t), 4) if non_t else 0.0,
            "distinct_sentences": len(sentences), "sentence_uses": sum(sentences.values()),
            "most_used_sentences": dict(sentences.most_common(top)),
            "distinct_first_sentences": first,
            "distinct_gold_answers": len({s.gold_answer for s in explicit})}


def clause_diversity(group: Sequence[Scene]) -> dict:
    """Distinct clauses (names masked) of T turns and of the other turns of one condition."""
    out = {}
    for key, want in (("t", True), ("other", False)):
        clauses = [c.strip().lower() for s in group for t in s.turns if (t.label is Label.T) == want
                   for c in CLAUSE.split(_mask(t.text, list(s.speaker_names.values()))) if c.strip()]
        out[key] = {"clauses": len(clauses), "distinct": len(set(clauses)),
                    "distinct_share": round(len(set(clauses)) / len(clauses), 4) if clauses else 0.0}
    return out


def t_onsets(scenes: Sequence[Scene], chars_per_s: float) -> list[float]:
    """Seconds from the first turn's start to T's start per scene, on the estimated timeline: each
    turn ``len(text) / chars_per_s`` seconds, :data:`TURN_GAP_S` after it."""
    return [sum(len(t.text) / chars_per_s + TURN_GAP_S for t in s.turns[: s.t_index]) for s in scenes]


def t_onset(scenes: Sequence[Scene], pairs: Sequence[tuple[Scene, Scene]], chars_per_s: float) -> dict:
    """The T-onset distribution over all conversations beside the paper's (see the module docstring)."""
    times = t_onsets(scenes, chars_per_s)
    out: dict = {"conversations": len(times), "paper": PAPER_T_ONSET}
    if len(times) >= 3:
        edges = [round(float(x), 3) for x in np.quantile(np.asarray(times), [1 / 3, 2 / 3])]
        lo, hi = round(min(times), 2), round(max(times), 2)
        out.update({
            "min_s": lo, "max_s": hi, "tertile_edges_s": edges,
            "deviation": {"min": _pct(lo, PAPER_T_ONSET["min_s"]), "max": _pct(hi, PAPER_T_ONSET["max_s"]),
                          "tertile_edges": [_pct(a, b) for a, b in zip(edges, PAPER_T_ONSET["tertile_edges_s"],
                                                                       strict=True)]},
            "before_paper_min": sum(x < PAPER_T_ONSET["min_s"] for x in times)})
    gold_words = re.compile(r"[a-z0-9']+")
    out["t_second_turn_pairs"] = sum(e.t_index == 1 for e, _ in pairs)
    out["gold_just_before_t_pairs"] = sum(
        set(gold_words.findall(e.gold_answer.lower())) <= set(gold_words.findall(e.turns[e.t_index - 1].text.lower()))
        for e, _ in pairs)
    return out


def silence_by_type(group: Sequence[Scene]) -> dict[str, int]:
    """N1-N3 windows of one condition by the breakdown of spec section 6."""
    out = dict.fromkeys(("device_directed", "human_directed", "statements", "self_talk"), 0)
    for s in group:
        for t in s.turns:
            if not t.label.is_silence:
                continue
            if t.label is Label.N3:
                out["self_talk"] += 1
            elif t.target is Target.DEVICE:
                out["device_directed"] += 1
            elif t.target is Target.HUMAN:
                out["human_directed"] += 1
            else:
                out["statements"] += 1
    return out


def diagnostic(scenes: Sequence[Scene], chars_per_s: float) -> dict:
    """Every figure of the module docstring for ``scenes`` (both conditions; pairs where both exist);
    ``chars_per_s``: the speaking rate of the estimated timeline (characters per second)."""
    by_cond = {c: [s for s in scenes if s.condition == c] for c in CONDITIONS}
    implicit = {s.pair_id: s for s in by_cond["implicit"]}
    pairs = [(e, implicit[e.pair_id]) for e in by_cond["explicit"] if e.pair_id in implicit]
    return {
        "designator": designator_share(pairs),
        "surface_auc": {c: surface_auc(g) for c, g in by_cond.items()},
        "exclusive": {c: exclusive_phrases(g) for c, g in by_cond.items()},
        "repeats": repeats(by_cond["explicit"]),
        "clauses": {c: clause_diversity(g) for c, g in by_cond.items()},
        "t_onset": t_onset(scenes, pairs, chars_per_s),
        "silence_by_type": {**{c: silence_by_type(g) for c, g in by_cond.items()}, "paper": PAPER_SILENCE_BY_TYPE},
    }


def headline(d: dict) -> dict:
    """The diagnostic's headline figures, flat (``bench/corpus.py`` prints them): designator share,
    best surface AUC and T-only phrase coverage per condition, T-only characters, non-T repeat
    share, T-onset range and tertile edges."""
    on = d["t_onset"]
    out = {"designator_share": d["designator"]["share"]}
    for c in CONDITIONS:
        out[f"surface_auc_{c}"] = d["surface_auc"][c]["best_auc"]
        t = d["exclusive"][c].get("T", {})
        out[f"t_only_phrase_share_{c}"] = t.get("covered_share")
        out[f"t_only_chars_{c}"] = "".join(t.get("chars", {}))
    out["non_t_repeat_share"] = d["repeats"]["share"]
    out.update({k: on.get(k) for k in ("min_s", "max_s", "tertile_edges_s", "before_paper_min")})
    return out
