"""The CSV a reviewer fills in, the adjudication CSV, and their validation.

Review CSV (one row per item, in the review page's order)::

    item_id,kind,verdict,transcript_ok,notes

``verdict``: ``pass``/``fail`` (construction), ``correct``/``incorrect`` (answer),
``backchannel``/``intrusion`` (window); ``transcript_ok``: ``yes``/``no`` for answer and window
items, empty for construction items; ``notes``: free text. Values are matched without regard to
case or surrounding spaces. Other columns are ignored (spreadsheets add some).

Adjudication CSV (one row per disagreement, written by the import as ``disagreements.csv``)::

    item_id,field,reviewer_1,reviewer_2,value,notes

``field`` is ``verdict`` or ``transcript_ok``; ``value`` is the resolved value.

Every problem found is reported at once in one :class:`ReviewFormError` naming the file, the
line and the column; nothing is read half.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.review.items import TRANSCRIPT_OK, VERDICTS

REVIEW_COLUMNS = ("item_id", "kind", "verdict", "transcript_ok", "notes")
FIELDS = ("verdict", "transcript_ok")  # the columns two reviewers must agree on
ADJUDICATION_COLUMNS = ("item_id", "field", "reviewer_1", "reviewer_2", "value", "notes")
MAX_LISTED = 50  # problems listed in one error message


class ReviewFormError(ValueError):
    """A filled CSV is unusable; ``problems`` lists every ``file:line: column: what`` found."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        more = len(self.problems) - MAX_LISTED
        listed = "\n  ".join(self.problems[:MAX_LISTED]) + (f"\n  ... and {more} more" if more > 0 else "")
        super().__init__(f"{len(self.problems)} problem(s) in the review CSVs:\n  {listed}")


def allowed(kind: str, field: str) -> tuple[str, ...]:
    """The values ``field`` may take for an item of ``kind`` (``()``: must be empty)."""
    if field == "verdict":
        return VERDICTS[kind]
    return () if kind in ("construction", "cue_intent") else TRANSCRIPT_OK


def template_csv(items: Sequence[Mapping[str, Any]]) -> str:
    """The empty review CSV for ``items`` (in their order)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(REVIEW_COLUMNS)
    for it in items:
        w.writerow((it["item_id"], it["kind"], "", "", ""))
    return buf.getvalue()


def _rows(path: str | Path, required: Sequence[str],
          problems: list[str]) -> list[tuple[int, dict[str, str]]] | None:
    """``(line, row)`` of a CSV file with ``required`` columns; ``None`` (problem appended) when the
    file cannot be read or lacks a column."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a spreadsheet's BOM is not part of the header
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"{path}: cannot read: {e}")
        return None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in required if c not in header]
    if missing:
        problems.append(f"{path}:1: missing column(s) {', '.join(missing)} (header: {','.join(header) or 'none'}; "
                        f"expected comma-separated {','.join(required)})")
        return None
    reader.fieldnames = header
    out = []
    for row in reader:
        if any(k is None for k in row):  # more cells than header columns
            problems.append(f"{path}:{reader.line_num}: more cells than columns")
            continue
        out.append((reader.line_num, {k: (v or "").strip() for k, v in row.items()}))
    return out


def read_review(path: str | Path, items: Mapping[str, Mapping[str, Any]],
                problems: list[str]) -> dict[str, dict[str, str]]:
    """One reviewer's filled CSV -> ``{item_id: {"verdict", "transcript_ok", "notes"}}``.

    Values are lower-cased. Problems (unknown or repeated item ids, a kind that is not the
    item's, a missing or invalid value, an item with no row) are appended to ``problems``.
    """
    out: dict[str, dict[str, str]] = {}
    rows = _rows(path, REVIEW_COLUMNS, problems)
    if rows is None:
        return out
    seen: set[str] = set()
    for line, row in rows:
        iid = row["item_id"]
        if not iid and not any(row.values()):
            continue  # a blank line
        item = items.get(iid)
        if item is None:
            problems.append(f"{path}:{line}: item_id: unknown item {iid!r} (not in this export)")
            continue
        if iid in seen:
            problems.append(f"{path}:{line}: item_id: {iid!r} appears more than once")
            continue
        seen.add(iid)
        kind = item["kind"]
        if row["kind"].lower() != kind:
            problems.append(f"{path}:{line}: kind: {row['kind']!r} but item {iid!r} is a {kind} item")
        entry = {"notes": row["notes"]}
        for field in FIELDS:
            value, ok = row[field].lower(), allowed(kind, field)
            if not ok and value:
                problems.append(f"{path}:{line}: {field}: must be empty for a {kind} item, got {row[field]!r}")
            elif ok and value not in ok:
                what = "missing" if not value else f"{row[field]!r} is not allowed"
                problems.append(f"{path}:{line}: {field}: {what} (one of {', '.join(ok)})")
            entry[field] = value
        out[iid] = entry
    problems += [f"{path}: item_id: no row for item {i!r}" for i in items if i not in seen]
    return out


def read_adjudication(path: str | Path, items: Mapping[str, Mapping[str, Any]],
                      disputed: Mapping[tuple[str, str], tuple[str, str]],
                      problems: list[str]) -> dict[tuple[str, str], str]:
    """An adjudication CSV -> ``{(item_id, field): value}``.

    Only disagreements (``disputed``: ``{(item_id, field): (reviewer_1, reviewer_2)}``) may be
    adjudicated; a row whose ``value`` is empty leaves its disagreement open. Problems are
    appended to ``problems``.
    """
    out: dict[tuple[str, str], str] = {}
    for line, row in _rows(path, ADJUDICATION_COLUMNS, problems) or []:
        iid, field, value = row["item_id"], row["field"], row["value"].lower()
        if not any(row.values()):
            continue
        if iid not in items:
            problems.append(f"{path}:{line}: item_id: unknown item {iid!r} (not in this export)")
            continue
        if field not in FIELDS:
            problems.append(f"{path}:{line}: field: {field!r} is not one of {', '.join(FIELDS)}")
            continue
        if (iid, field) not in disputed:
            problems.append(f"{path}:{line}: item_id: the reviewers agree on {field} of {iid!r}: nothing to "
                            "adjudicate")
            continue
        if (iid, field) in out:
            problems.append(f"{path}:{line}: item_id: {field} of {iid!r} is adjudicated more than once")
            continue
        ok = allowed(items[iid]["kind"], field)
        if value and value not in ok:
            problems.append(f"{path}:{line}: value: {row['value']!r} is not allowed (one of {', '.join(ok)})")
        elif value:
            out[iid, field] = value
    return out


def adjudication_csv(disputed: Mapping[tuple[str, str], tuple[str, str]],
                     resolved: Mapping[tuple[str, str], str]) -> str:
    """The adjudication CSV of ``disputed`` with any ``resolved`` values filled in."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(ADJUDICATION_COLUMNS)
    for (iid, field), (a, b) in disputed.items():
        w.writerow((iid, field, a, b, resolved.get((iid, field), ""), ""))
    return buf.getvalue()
