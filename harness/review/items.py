"""Review items of the human validation (spec section 6) and how they are sampled.

Three kinds of item, each with the values a reviewer may enter (:data:`VERDICTS`):

* ``construction``: one conversation of a sampled scene pair; the reviewer checks the scene is
  built as labelled (``pass`` / ``fail``). Spec: 50 scene pairs, i.e. 100 conversations.
* ``answer``: a model's response to T that the judge labelled ``CORRECT`` or ``INCORRECT``; the
  reviewer judges it against the gold answer (``correct`` / ``incorrect``) and says whether
  the transcript is right (``transcript_ok``: ``yes`` / ``no``). Spec: per model and
  condition 5 judged correct + 5 judged incorrect.
* ``window``: model speech in an N1-N3 window that the judge labelled ``BACKCHANNEL`` or
  ``SUBSTANTIVE_INTRUSION``; the reviewer classifies it (``backchannel`` / ``intrusion``) and
  checks the transcript. Spec: per model and condition 5 acknowledgements + 5 intrusions.

Only what the judge actually decided is sampled: answers with an empty transcript (scored
incorrect without the judge) and ``UNPARSEABLE`` verdicts are not judge decisions and are left
out (docs/review.md). Sampling is seeded per stratum (a stratum's draw does not depend on the
other strata or on the row order) and a short stratum is taken whole, its shortfall recorded.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from harness.scenes.schema import CONDITIONS, Scene
from harness.scoring.judge import BACKCHANNEL, CORRECT, INCORRECT, SUBSTANTIVE_INTRUSION

SAMPLE_SEED = 20260902  # the spec's seed (section 6); the sample is a function of the run alone
CONSTRUCTION_PAIRS = 50  # spec section 6: 50 scene pairs (100 conversations)
PER_STRATUM = 5  # spec section 6: 5 correct + 5 incorrect, 5 acknowledgement + 5 intrusion

KINDS = ("construction", "answer", "window", "cue", "cue_intent")
# the reviewer's ``verdict`` values per kind; the first one is the kind's "pass" (a Duplex Cue
# item, harness.review.cue, has three and no "pass": its pass rate is the share of "continued")
VERDICTS: dict[str, tuple[str, ...]] = {
    "construction": ("pass", "fail"),
    "answer": ("correct", "incorrect"),
    "window": ("backchannel", "intrusion"),
    "cue": ("continued", "adapted", "yielded"),  # harness.cue.schema.RESPONSES
    "cue_intent": ("backchannel", "collaboration", "interruption"),  # harness.cue.schema.INTENTS (no transcript)
}
TRANSCRIPT_OK = ("yes", "no")  # answer and window items; empty for construction items
# judge label -> the reviewer's verdict value it corresponds to
JUDGE_TO_VERDICT = {CORRECT: "correct", INCORRECT: "incorrect",
                    BACKCHANNEL: "backchannel", SUBSTANTIVE_INTRUSION: "intrusion",
                    **{r: r for r in (*VERDICTS["cue"], *VERDICTS["cue_intent"])}}  # Duplex Cue: the label itself
STRATA = {"answer": (CORRECT, INCORRECT), "window": (BACKCHANNEL, SUBSTANTIVE_INTRUSION)}


def stratum_rng(*parts: object) -> np.random.Generator:
    """A generator seeded by :data:`SAMPLE_SEED` and a stable hash of ``parts`` (the stratum)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return np.random.default_rng([SAMPLE_SEED, int.from_bytes(digest[:8], "little")])


def draw(candidates: Sequence[Any], k: int, *stratum: object) -> list[Any]:
    """``k`` of ``candidates`` without replacement (all of them when fewer), in candidate order."""
    if len(candidates) <= k:
        return list(candidates)
    pick = stratum_rng(*stratum).choice(len(candidates), size=k, replace=False)
    return [candidates[i] for i in sorted(pick)]


def sample_construction(scenes: Iterable[Scene], usable: set[str] | None = None,
                        n_pairs: int = CONSTRUCTION_PAIRS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Construction-check items: both conversations of ``n_pairs`` sampled scene pairs.

    Args:
        scenes: the run's scenes.
        usable: scene ids whose audio exists (``None``: all); a pair is eligible only when both
            of its conversations are usable.
        n_pairs: pairs to sample (spec: 50); all eligible pairs when there are fewer.

    Returns:
        ``(items, shortfall)``: one item per conversation, and ``{"wanted", "available", "taken"}``
        counted in pairs.
    """
    by_pair: dict[str, dict[str, Scene]] = defaultdict(dict)
    for s in scenes:
        by_pair[s.pair_id][s.condition] = s
    eligible = sorted(p for p, v in by_pair.items() if set(v) == set(CONDITIONS)
                      and (usable is None or all(s.scene_id in usable for s in v.values())))
    pairs = draw(eligible, n_pairs, "construction")
    items = []
    for p in pairs:
        for cond in CONDITIONS:
            s = by_pair[p][cond]
            items.append({"item_id": f"construction/{s.scene_id}", "kind": "construction", "model": None,
                          "condition": cond, "scene_id": s.scene_id, "pair_id": p, "turn": None,
                          "judge_label": None, "transcript": None})
    return items, {"wanted": n_pairs, "available": len(eligible), "taken": len(pairs)}


def sample_model_items(rows_by_model: Mapping[str, Sequence[Mapping[str, Any]]],
                       per_stratum: int = PER_STRATUM) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Answer and window items: per model x condition x judge label, ``per_stratum`` rows.

    Args:
        rows_by_model: the per-event rows of the reduce stage (``events.parquet``): T rows with
            ``verdict`` (judge label) and ``transcript``; silence rows likewise.
        per_stratum: items per stratum (spec: 5).

    Returns:
        ``(items, shortfall)`` with ``shortfall["<kind>/<model>/<condition>/<label>"] =
        {"wanted", "available", "taken"}`` for every stratum (also the full ones).
    """
    items: list[dict[str, Any]] = []
    counts: dict[str, Any] = {}
    for model in sorted(rows_by_model):
        pools: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
        for r in rows_by_model[model]:
            kind = {"T": "answer", "silence": "window"}.get(r["kind"])
            if kind and r.get("verdict") in STRATA[kind] and (r.get("transcript") or "").strip():
                pools[kind, r["condition"], r["verdict"]].append(r)
        for kind, labels in STRATA.items():
            for cond in CONDITIONS:
                for label in labels:
                    pool = sorted(pools[kind, cond, label], key=lambda r: (r["scene_id"], r["turn"]))
                    taken = draw(pool, per_stratum, kind, model, cond, label)
                    counts[f"{kind}/{model}/{cond}/{label}"] = {"wanted": per_stratum, "available": len(pool),
                                                                 "taken": len(taken)}
                    items += [model_item(kind, model, r) for r in taken]
    return items, counts


def model_item(kind: str, model: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """The item of one judged row (times in samples, speech and overlap in seconds)."""
    item = {"item_id": f"{kind}/{model}/{row['scene_id']}/{int(row['turn'])}", "kind": kind, "model": model,
            "condition": row["condition"], "scene_id": row["scene_id"], "pair_id": row["pair_id"],
            "turn": int(row["turn"]), "judge_label": row["verdict"], "transcript": row["transcript"],
            "speech_s": float(row["speech_s"]),
            # the audio the ASR heard: the response window after T, or the whole silence window
            "audio_start": int(row["end"] if kind == "answer" else row["start"]),
            "audio_end": int(row["window_end"])}
    if kind == "window":
        item["overlap_s"] = float(row["overlap_s"])
    return item


def page_order(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items grouped by kind, shuffled (seeded) within a kind so that their position does not
    give the judge's verdict away; the review page and the CSV share this order."""
    out = []
    for kind in KINDS:
        group = sorted((i for i in items if i["kind"] == kind), key=lambda i: i["item_id"])
        out += [group[j] for j in stratum_rng("order", kind).permutation(len(group))]
    return out
