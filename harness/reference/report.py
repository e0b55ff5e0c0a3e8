"""The text reference's part of the run report, from ``reference.json``
(:func:`harness.reference.evaluate.run_reference`).

:func:`score_rows` gives the rows that :func:`harness.report.markdown.build_report` puts in
the main score tables beside the speech systems, one per pass, labelled as a text reference
with its backend; :func:`reference_section` is the report's "Text reference" section
(agreement between passes, explicit-vs-implicit McNemar, cost, what is n/a and why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.reference.evaluate import ACCURACY_NOT_SCORED, YIELD_NOT_APPLICABLE
from harness.report.document import Paragraph, Section, Table, num, p_value


def reference_label(reference: Mapping[str, Any]) -> str:
    """How a row names the reference: ``text reference: rule-based stand-in (rule)`` or
    ``text reference: LLM anthropic claude-sonnet-4-5``."""
    info = reference["reference"]
    if info["kind"] == "rule":
        return "text reference: rule-based stand-in (rule)"
    return f"text reference: LLM {info['kind']} {info['model']}"


def score_rows(reference: Mapping[str, Any], condition: str) -> list[tuple[str, Mapping[str, Any]]]:
    """``[(row label, {score name: entry}), ...]`` for ``condition``, one per pass."""
    label = reference_label(reference)
    return [(f"{label}, pass {p['run']}", p["scores"][condition]) for p in reference["passes"]]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} %"


def reference_section(reference: Mapping[str, Any]) -> Section:
    """The report section of the text reference (see the module docstring)."""
    info = reference["reference"]
    sec = Section("Text reference (spec section 7)")
    accuracy = (f"the judge (`{reference['judge']}`) on its T answer" if info["writes_answers"] else
                ACCURACY_NOT_SCORED.format(kind=info["kind"]))
    sec.blocks.append(Paragraph(
        f"Backend: **{info['description']}**. It reads the speaker-attributed script turn by turn: the duty "
        "instruction, the history before the turn (never later turns, never its own earlier answers) and the "
        "current utterance, and decides RESPOND or SILENT. It is not an acoustic system and not an upper bound. "
        f"Its rows in the score tables are labelled `text reference`; {reference['runs']} independent passes. "
        "Fresh onset and response presence = RESPOND on T; silence preservation = SILENT on N1-N3; window "
        f"response = RESPOND on N4_Q; conditional answer accuracy: {accuracy}. Answering-window yield is n/a "
        f"({YIELD_NOT_APPLICABLE}). An unparseable reply is neither RESPOND nor SILENT: it fails every score."))
    rows = []
    for a in reference["agreement"]:
        for cond, e in a["conditions"].items():
            rows.append((f"{a['runs'][0]} vs {a['runs'][1]}", cond, str(e["n"]), str(e["same"]), _pct(e["percent"]),
                         num(e["kappa"], ".3f") + (f" ({e['kappa_reason']})" if e.get("kappa_reason") else "")))
    sec.blocks.append(Table(("passes", "condition", "turns", "same decision", "agreement", "Cohen's kappa"), rows,
                            caption="Decision agreement between passes (RESPOND / SILENT / unparseable)"))
    rows = []
    for p in reference["passes"]:
        r = p["explicit_vs_implicit"]
        unparseable = sum(p["scores"][c]["fresh_onset_response_rate"]["unparseable"]
                          + p["scores"][c]["silence_preservation"]["unparseable"] for c in p["scores"])
        rows.append((str(p["run"]), str(r["n_pairs"]), str(r["explicit_only"]), str(r["implicit_only"]),
                     num(r["delta_pp"], "+.2f"), p_value(r["p"], r["significant"]), str(unparseable)))
    header = ("pass", "pairs", "explicit only", "implicit only", "Δ (pp)", "p", "unparseable (T, N1-N3)")
    sec.blocks.append(Table(header, rows, caption="Fresh onset (RESPOND on T), explicit vs implicit: exact "
                                                  "McNemar on paired scenes; * = p < 0.05"))
    ref, judge = reference["cost"]["reference"], reference["cost"]["judge"]
    sec.blocks.append(Table(
        ("calls of", "paid calls", "cache hits", "cost (USD)", "saved by cache (USD)"),
        [(f"reference ({ref['backend']})", str(ref["misses"]), str(ref["hits"]), f"{ref['cost']['usd']:.4f}",
          f"{ref['saved']['usd']:.4f}"),
         (f"judge ({judge.get('backend', reference['judge'])})", str(judge.get("misses", 0)),
          str(judge.get("hits", 0)), f"{judge.get('cost', {}).get('usd', 0.0):.4f}",
          f"{judge.get('saved', {}).get('usd', 0.0):.4f}")],
        caption="Calls of the reference stage (a rerun of the same pass is a free cache hit)"))
    if reference["errors"]:
        sec.blocks.append(Table(("conversation", "reason"), sorted(reference["errors"].items())[:50],
                                caption=f"{len(reference['errors'])} conversation(s) failed in the reference and "
                                        "are excluded from every pass"))
    return sec


__all__ = ["reference_label", "reference_section", "score_rows"]
