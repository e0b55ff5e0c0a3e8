"""Running the text reference over scenes, its scores, and the agreement between its passes.

:func:`run_reference` builds ``reference.json`` (layout below). Scores per pass and condition
use the speech systems' names and their min-n rule (:func:`harness.metrics.scores.rate_entry`:
``rate`` is ``None`` and ``status`` ``"n/a"`` when ``n < min_n``):

========================================  ===================================  ==================
score                                     denominator                          success
========================================  ===================================  ==================
``fresh_onset_response_rate``             T turns                              ``RESPOND``
``response_presence``                     T turns (same as fresh onset: text   ``RESPOND``
                                          has no speech running at T's end)
``conditional_answer_accuracy``           T turns with ``RESPOND``             the judge
                                                                               (``cfg.judge``) says
                                                                               the answer is correct
``silence_preservation``                  N1, N2, N3 turns                     ``SILENT``
``window_response``                       N4_Q turns                           ``RESPOND``
``answering_window_yield``                n/a: not applicable to text          --
========================================  ===================================  ==================

An ``UNPARSEABLE`` decision is neither ``RESPOND`` nor ``SILENT``: it fails every score above
and is counted in each entry's ``unparseable``. A backend that writes no answer (``rule``) has
conditional accuracy ``status: "not scored"``. A scene whose backend call failed in any pass
is an error: it is left out of every pass (so passes compare the same turns) and counted in
``errors_excluded``.

``reference.json``::

    {"reference": {"kind", "model", "prompt_version", "description", "writes_answers"},
     "judge": <judge kind>, "duty_sha256": ..., "runs": <number of passes>,
     "passes": [{"run": 1, "scores": {condition: {score: entry}},
                 "explicit_vs_implicit": {fresh-onset McNemar on paired scenes}}, ...],
     "agreement": [{"runs": [1, 2], "conditions": {condition: agreement entry}}, ...],
     "cost": {"reference": stats, "judge": stats},
     "errors": {scene_id: reason},
     "turns": [one row per (pass, scene, turn): scene_id, pair_id, condition, run, turn, label,
               speaker, decision, answer, raw, and on T with an answer: verdict, answer_correct]}
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import combinations
from typing import Any

from harness.metrics.analyses import explicit_vs_implicit
from harness.metrics.scores import rate_entry
from harness.metrics.stats import rater_agreement
from harness.reference import RESPOND, SILENT, UNPARSEABLE, Reference, turn_inputs
from harness.scenes.schema import CONDITIONS, Label, Scene
from harness.scoring.judge import Judge

YIELD_NOT_APPLICABLE = ("not applicable to text: yield scores whether speech already under way when N4_R "
                        "starts stops by the deadline; a text reference has no timeline and no speech to stop")
ACCURACY_NOT_SCORED = "not scored: the {kind} backend writes no answer"


def reference_rows(scene: Scene, reference: Reference, run: int, duty: str, judge: Judge) -> list[dict[str, Any]]:
    """One row per turn of ``scene`` in pass ``run``; a T answer is judged against the gold answer
    (the T turn's text is the question). Backend and judge errors propagate."""
    rows = []
    t_index = scene.t_index
    for i, turn in enumerate(turn_inputs(scene, duty)):
        d = reference.decide(turn, run)
        row = {"scene_id": scene.scene_id, "pair_id": scene.pair_id, "condition": scene.condition, "run": run,
               "turn": i, "label": scene.turns[i].label.value, "speaker": turn.current.speaker,
               "decision": d.decision, "answer": d.answer, "raw": d.raw}
        if i == t_index and d.decision == RESPOND and reference.writes_answers:
            v = judge.judge_answer(d.answer or "", scene.gold_answer, scene.turns[i].text)
            row.update(verdict=v.label, answer_correct=v.passed)
        rows.append(row)
    return rows


def not_applicable(status: str, reason: str, n: int = 0, errors: int = 0) -> dict[str, Any]:
    """A score entry with no rate (``status`` ``"n/a"`` or ``"not scored"``) and the reason."""
    return {"rate": None, "n": n, "successes": None, "status": status, "errors_excluded": errors, "reason": reason}


def reference_scores(rows: Sequence[Mapping[str, Any]], errors: int, min_n: int, judge: str,
                     reference: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The reference's scores for the rows of one (pass, condition) (see the module docstring).
    ``reference`` is the ``reference`` block of ``reference.json`` (``kind``, ``writes_answers``)."""
    def count(rs: Sequence[Mapping[str, Any]], decision: str) -> int:
        return sum(r["decision"] == decision for r in rs)

    t = [r for r in rows if r["label"] == Label.T]
    silence = [r for r in rows if Label(r["label"]).is_silence]
    questions = [r for r in rows if r["label"] == Label.N4_Q]
    responded = [r for r in t if r["decision"] == RESPOND]
    fresh = rate_entry(len(responded), len(t), min_n, errors, unparseable=count(t, UNPARSEABLE))
    if reference["writes_answers"]:
        accuracy = rate_entry(sum(bool(r["answer_correct"]) for r in responded), len(responded), min_n, errors,
                              judge=judge, verdicts={v: sum(r["verdict"] == v for r in responded)
                                                     for v in sorted({r["verdict"] for r in responded})})
    else:
        accuracy = not_applicable("not scored", ACCURACY_NOT_SCORED.format(kind=reference["kind"]),
                                  len(responded), errors)
    return {
        "fresh_onset_response_rate": fresh,
        "conditional_answer_accuracy": accuracy,
        "silence_preservation": rate_entry(count(silence, SILENT), len(silence), min_n, errors,
                                           unparseable=count(silence, UNPARSEABLE)),
        "answering_window_yield": not_applicable("n/a", YIELD_NOT_APPLICABLE, errors=errors),
        "response_presence": dict(fresh),
        "window_response": rate_entry(count(questions, RESPOND), len(questions), min_n, errors,
                                      unparseable=count(questions, UNPARSEABLE)),
    }


def decision_agreement(a: Sequence[str], b: Sequence[str]) -> dict[str, Any]:
    """Agreement of two passes over the same turns (decisions ``RESPOND``/``SILENT``/``UNPARSEABLE``,
    three categories): ``n`` turns, ``same`` (identical decisions), ``percent`` (``100 * same / n``,
    ``None`` without turns), ``kappa`` (:func:`harness.metrics.stats.rater_agreement`) and
    ``kappa_reason`` when it is ``None``."""
    if len(a) != len(b):
        raise ValueError(f"agreement needs paired decisions, got {len(a)} and {len(b)}")
    r = rater_agreement(a, b, (RESPOND, SILENT, UNPARSEABLE))
    kappa = r["kappa"]
    out = {"n": r["n"], "same": r["agree"], "percent": r["percent"], "kappa": kappa}
    if kappa is None:
        out["kappa_reason"] = ("no turns" if not a else
                               "undefined: both passes gave the same single decision to every turn")
    return out


def _by_turn(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], str]:
    return {(r["scene_id"], r["turn"]): r["decision"] for r in rows}


def pass_agreement(rows_by_run: Mapping[int, Sequence[Mapping[str, Any]]],
                   conditions: Sequence[str] = CONDITIONS) -> list[dict[str, Any]]:
    """:func:`decision_agreement` per condition for every pair of passes, over the turns both decided."""
    out = []
    for i, j in combinations(sorted(rows_by_run), 2):
        per_cond = {}
        for cond in conditions:
            a = _by_turn([r for r in rows_by_run[i] if r["condition"] == cond])
            b = _by_turn([r for r in rows_by_run[j] if r["condition"] == cond])
            shared = sorted(set(a) & set(b))
            per_cond[cond] = decision_agreement([a[k] for k in shared], [b[k] for k in shared])
        out.append({"runs": [i, j], "conditions": per_cond})
    return out


def fresh_onset_mcnemar(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Exact McNemar explicit vs implicit on fresh onset (``RESPOND`` on T) over paired scenes,
    with Δ in percentage points: :func:`harness.metrics.analyses.explicit_vs_implicit`."""
    t_rows = [{"kind": "T", "pair_id": r["pair_id"], "condition": r["condition"],
               "fresh_onset": r["decision"] == RESPOND} for r in rows if r["label"] == Label.T]
    return explicit_vs_implicit(t_rows, metrics=("fresh_onset",))["fresh_onset"]


def run_reference(scenes: Sequence[Scene], reference: Reference, judge: Judge, duty: str, runs: int = 2,
                  min_n: int = 30, workers: int = 1) -> dict[str, Any]:
    """Run ``runs`` independent passes of ``reference`` over every turn of ``scenes`` and score them.

    Args:
        scenes: validated scenes (both conditions of each pair for the McNemar test).
        reference: the backend (:func:`harness.reference.build_reference`).
        judge: judges T answers against the gold answer (wrap it in
            :class:`~harness.scoring.cache.CachedJudge` so reruns cost nothing).
        duty: the duty instruction the reference reads.
        runs: number of passes (>= 2: agreement needs two), indexed 1..runs.
        min_n: a rate with a smaller denominator is n/a (``metrics.min_n``).
        workers: concurrent (scene, pass) jobs; threads, for backends that wait on an API.

    Returns:
        the content of ``reference.json`` (see the module docstring).

    Raises:
        ValueError: ``runs < 2``, ``workers < 1`` or an empty ``duty``. Backend and judge errors
        do not raise: the scene is recorded in ``errors`` and excluded.
    """
    if runs < 2:
        raise ValueError(f"the text reference runs at least twice (agreement), got runs={runs}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not (duty or "").strip():
        raise ValueError("the text reference needs the duty instruction (tts.preamble_text is empty)")

    def job(item: tuple[Scene, int]) -> list[dict[str, Any]] | str:
        scene, run = item
        try:
            return reference_rows(scene, reference, run, duty, judge)
        except Exception as e:  # a failed call makes the scene an error, the rest go on
            return f"reference pass {run} failed: {type(e).__name__}: {e}"

    jobs = [(s, run) for run in range(1, runs + 1) for s in scenes]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(job, jobs))
    errors: dict[str, str] = {}
    for (scene, _), res in zip(jobs, results, strict=True):
        if isinstance(res, str):
            errors.setdefault(scene.scene_id, res)
    rows = [r for res in results if not isinstance(res, str) for r in res if r["scene_id"] not in errors]
    errors_by_cond: dict[str, int] = defaultdict(int)
    for s in scenes:
        if s.scene_id in errors:
            errors_by_cond[s.condition] += 1
    info = {"kind": reference.name, "model": reference.model, "prompt_version": reference.prompt_version,
            "description": reference.description, "writes_answers": reference.writes_answers}
    judge_name = getattr(judge, "name", "")
    rows_by_run = {run: [r for r in rows if r["run"] == run] for run in range(1, runs + 1)}
    passes = [{"run": run,
               "scores": {c: reference_scores([r for r in rs if r["condition"] == c], errors_by_cond[c], min_n,
                                              judge_name, info) for c in CONDITIONS},
               "explicit_vs_implicit": fresh_onset_mcnemar(rs)}
              for run, rs in rows_by_run.items()]
    judge_stats = judge.stats() if hasattr(judge, "stats") else {"backend": judge_name}
    return {"reference": info, "judge": judge_name, "duty_sha256": hashlib.sha256(duty.encode()).hexdigest(),
            "runs": runs, "passes": passes, "agreement": pass_agreement(rows_by_run),
            "cost": {"reference": reference.stats(), "judge": judge_stats}, "errors": errors, "turns": rows}


__all__ = [
    "ACCURACY_NOT_SCORED",
    "YIELD_NOT_APPLICABLE",
    "decision_agreement",
    "fresh_onset_mcnemar",
    "pass_agreement",
    "reference_rows",
    "reference_scores",
    "run_reference",
]
