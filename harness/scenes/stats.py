"""Corpus accounting (spec section 2): what ``stats.json`` and ``corpus_stats.json`` hold.

:func:`corpus_stats` counts a corpus the way the paper reports its own, so that the report can
put the two side by side (:data:`PAPER`). Durations are estimates from characters at the
paper's speaking rate (:data:`CHARS_PER_S`, 14.0 characters per second from its T figures)
until the corpus is synthesised; the synth stage measures the real ones.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable

from harness.scenes.diagnostic import diagnostic
from harness.scenes.schema import CONDITIONS, Label, Scene

T_POSITIONS: tuple[str, ...] = ("early-middle", "middle", "late-middle")
CHARS_PER_S = (111.6 + 123.3) / (8.18 + 8.58)
GAP_S = 0.4  # the paper's inter-turn gap in its duration accounting

# the paper's figures (spec section 2), per 2,000 pairs; windows per condition
PAPER: dict[str, object] = {
    "n_pairs": 2000, "n_three_person": 1500, "n_four_person": 500,
    "t_position_buckets": {"early-middle": 667, "middle": 667, "late-middle": 666},
    "n_scenes_with_n4": 968, "n_n4_events": 1911, "rewritten_previous_turn": 42,
    "windows": {"explicit": {"T": 2000, "N1": 3041, "N2": 14052, "N3": 3267, "N4_Q": 1911, "N4_R": 1911},
                "implicit": {"T": 2000, "N1": 3039, "N2": 14054, "N3": 3267, "N4_Q": 1911, "N4_R": 1911}},
    "mean_t_chars": {"explicit": 111.6, "implicit": 123.3},
    "mean_t_s": {"explicit": 8.18, "implicit": 8.58},
    "mean_conversation_s": {"explicit": 99.5, "implicit": 100.2},
    "speech_h": 105.55, "distinct_speech_h": 61.10, "reused_speech_h": 44.45,
}


def _speech_s(text: str) -> float:
    return len(text) / CHARS_PER_S


def _hist(values: Iterable[float], edges: list[float]) -> dict[str, int]:
    """Counts per bin ``[edges[i], edges[i+1])``; the last bin is open-ended."""
    keys = [f"{a:g}-{b:g}" for a, b in itertools.pairwise(edges)] + [f">={edges[-1]:g}"]
    out = dict.fromkeys(keys, 0)
    for v in values:
        i = sum(v >= e for e in edges) - 1
        out[keys[max(0, i)]] += 1
    return out


def corpus_stats(scenes: Iterable[Scene], diagnose: bool = True) -> dict:
    """Summarise a corpus (for ``stats.json`` / ``corpus_stats.json`` and the report's corpus section).

    Top level: ``n_pairs`` (pairs with both versions), ``n_three_person``, ``n_four_person``,
    ``t_position_buckets``, ``n_scenes_with_n4``, ``n_n4_events`` (from the explicit versions),
    ``rewritten_previous_turn`` (pairs whose turn before T differs), ``pairs_differ_only_at_t``,
    ``pairs_unequal_turns``, ``labels_by_size`` (``{"3"|"4": {condition: {label: n}}}``),
    ``t_relative_position`` and ``t_duration_s`` histograms per condition, ``distinct``
    (shares of distinct T texts, turn texts and gold answers), ``reuse`` (estimated speech hours,
    all clips vs distinct (speaker, text) clips, and the saving), ``paper`` (:data:`PAPER`) and, with
    ``diagnose``, ``diagnostic``: whether the corpus tests addressee inference
    (:func:`harness.scenes.diagnostic.diagnostic`: designators, surface classifier AUC, label-only
    phrases, repeats, clause diversity, T onsets, silence windows by type; seconds for 2,000 pairs).

    Per condition (``"explicit"``, ``"implicit"``): ``scenes``, ``three_party``, ``four_party``,
    ``labels`` / ``windows`` (turn count per label), ``scenes_with_n4``, ``n4_events``,
    ``t_position``, ``mean_t_chars`` (0.0 without scenes), ``mean_t_s``, ``mean_turns`` and
    ``mean_conversation_s`` (estimated speech plus 0.4 s gaps). Raises
    :class:`~harness.scenes.schema.SceneError` for a scene without exactly one T.
    """
    scenes = list(scenes)
    by_cond: dict[str, list[Scene]] = {c: [] for c in CONDITIONS}
    for s in scenes:
        by_cond.setdefault(s.condition, []).append(s)
    out: dict = {}
    for cond, group in by_cond.items():
        labels = Counter(turn.label.value for s in group for turn in s.turns)
        t_chars = [len(s.turns[s.t_index].text) for s in group]
        conv_s = [sum(_speech_s(t.text) for t in s.turns) + GAP_S * (len(s.turns) - 1) for s in group]
        n = len(group)
        out[cond] = {
            "scenes": n,
            "three_party": sum(len(s.speakers) == 3 for s in group),
            "four_party": sum(len(s.speakers) == 4 for s in group),
            "labels": {label.value: labels.get(label.value, 0) for label in Label},
            "windows": {label.value: labels.get(label.value, 0) for label in Label},
            "scenes_with_n4": sum(any(turn.label is Label.N4_Q for turn in s.turns) for s in group),
            "n4_events": labels.get(Label.N4_Q.value, 0),
            "t_position": {b: sum(s.t_position == b for s in group) for b in T_POSITIONS},
            "mean_t_chars": sum(t_chars) / n if n else 0.0,
            "mean_t_s": sum(t_chars) / n / CHARS_PER_S if n else 0.0,
            "mean_turns": sum(len(s.turns) for s in group) / n if n else 0.0,
            "mean_conversation_s": sum(conv_s) / n if n else 0.0,
        }
    explicit = {s.pair_id: s for s in by_cond.get("explicit", [])}
    implicit = {s.pair_id: s for s in by_cond.get("implicit", [])}
    both = [(explicit[p], implicit[p]) for p in explicit if p in implicit]
    rewritten = only_t = unequal = 0
    for e, i in both:
        if len(e.turns) != len(i.turns):
            unequal += 1
            continue
        differ = [k for k, (a, b) in enumerate(zip(e.turns, i.turns, strict=True)) if a != b]
        only_t += differ == [e.t_index]
        rewritten += e.t_index > 0 and (e.t_index - 1) in differ
    ex = by_cond.get("explicit", [])
    out.update({
        "n_pairs": len(both),
        "n_three_person": sum(len(e.speakers) == 3 for e, _ in both),
        "n_four_person": sum(len(e.speakers) == 4 for e, _ in both),
        "t_position_buckets": {b: sum(e.t_position == b for e, _ in both) for b in T_POSITIONS},
        "n_scenes_with_n4": out.get("explicit", {}).get("scenes_with_n4", 0),
        "n_n4_events": out.get("explicit", {}).get("n4_events", 0),
        "rewritten_previous_turn": rewritten,
        "pairs_differ_only_at_t": only_t,
        "pairs_unequal_turns": unequal,
        "labels_by_size": {
            str(k): {c: dict(sorted(Counter(t.label.value for s in g if len(s.speakers) == k for t in s.turns).items()))
                     for c, g in by_cond.items()}
            for k in (3, 4)},
        "t_relative_position": {c: _hist((s.t_index / max(1, len(s.turns) - 1) for s in g),
                                         [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
                                for c, g in by_cond.items()},
        "t_duration_s": {c: _hist((_speech_s(s.turns[s.t_index].text) for s in g), [0, 4, 6, 8, 10, 12, 14])
                         for c, g in by_cond.items()},
        "distinct": _distinct(scenes, ex),
        "reuse": _reuse(scenes),
        "paper": PAPER,
    })
    if diagnose:
        out["diagnostic"] = diagnostic(scenes, CHARS_PER_S)
    return out


def _share(items: list) -> float:
    return round(len(set(items)) / len(items), 4) if items else 0.0


def _distinct(scenes: list[Scene], explicit: list[Scene]) -> dict[str, float]:
    return {
        "t_texts": _share([s.turns[s.t_index].text for s in scenes]),
        "turn_texts": _share([t.text for s in scenes for t in s.turns]),
        "non_t_turn_texts": _share([t.text for s in explicit for t in s.turns if t.label is not Label.T]),
        "gold_answers": _share([s.gold_answer for s in explicit]),
    }


def _reuse(scenes: list[Scene]) -> dict[str, float]:
    """Clips are synthesised once per distinct (speaker, text): the estimated saving."""
    clips = [(t.speaker, t.text) for s in scenes for t in s.turns]
    total = sum(_speech_s(text) for _, text in clips)
    distinct = sum(_speech_s(text) for _, text in set(clips))
    return {
        "clips": len(clips), "distinct_clips": len(set(clips)),
        "speech_h": round(total / 3600, 3), "distinct_speech_h": round(distinct / 3600, 3),
        "reused_speech_h": round((total - distinct) / 3600, 3),
        "reuse_ratio": round((total - distinct) / total, 4) if total else 0.0,
    }
