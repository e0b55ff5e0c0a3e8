"""From raw two-channel recordings to a Duplex Cue corpus (issue 23.8; docs/formats.md, "From
raw recordings"): the construction steps of the paper, each with its counts.

Input: a *raw manifest*, the recording lines of a cue manifest (docs/formats.md: ``audio`` or
``audio_a``/``audio_b``, ``a_words`` and ``b_words`` with word times, no cue lines), loaded and
validated by :func:`harness.cue.corpus.ingest`. Then, per recording:

1. **Voice activity** of each channel: speech intervals ``(start_s, end_s)`` from a VAD
   (default: the offline Silero detector with :class:`harness.vad.settings.VadSettings`).
2. **Words to intervals** (:func:`assign_words`): each transcript word goes to the interval
   that holds its midpoint; a word whose midpoint lies in none goes to the nearest interval
   (distance from the midpoint), a tie to the earlier one. A speaker's *activity* is its
   intervals that received a word (an interval without a word is noise or laughter, dropped).
3. **Cross-speaker proposals** (:func:`propose`): every activity of B whose start lies inside
   one of A's activities (``during``) or within ``gap_s`` (0.5 s, the paper) after the end of
   A's last word before it (``after``) proposes a cue: its words are B's words of that activity;
   A's recorded continuation runs from the cue onset to the end of A's turn (A's words from the
   onset on whose pauses are under ``turn_pause_s``).
4. **Intent labels** come from people (or an LLM), per proposal: ``intents.csv``
   (``item_id,intent[,label]``; the tool writes the template); a proposal without one is not
   selected (``unlabelled``).
5. **Eligibility audit**: every labelled proposal as a :class:`~harness.cue.schema.CueItem`
   through :func:`harness.cue.corpus.check_item` with the run's rules (switch lead, window, the
   0.5 s turn pause, the mid-sentence rule); a failing one is not selected, with its rule.
6. **Selection record** (``selection.json``): every proposal, ``selected`` or why not.

Steps 1-3 are :func:`construct`, 4-6 :func:`select`; :func:`main` is the command line.

The selected cues and their recordings are written with :func:`harness.cue.corpus.write_manifest`
(``corpus/manifest.jsonl``), a cue manifest ``cue.manifest=`` reads.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.cue.corpus import SAMPLE_RATE, TURN_PAUSE_S, CueCorpus, check_item, ingest, write_manifest
from harness.cue.schema import INTENTS, RESPONSES, SWITCH_LEAD_S, WINDOW_S, CueError, CueItem, Recording, Word

PROPOSAL_GAP_S = 0.5  # the paper: B starts during A's activity or within 0.5 s of A's last word
INTENT_COLUMNS = ("item_id", "intent", "label")  # intents.csv; label (A's recorded response) is optional
Intervals = Sequence[tuple[float, float]]
#: ``vad(channels, sample_rate) -> per channel its speech intervals in seconds``
Vad = Callable[[list[np.ndarray], int], list[Intervals]]


def assign_words(words: Sequence[Word], intervals: Intervals) -> list[int | None]:
    """The interval of each word: the one holding its midpoint (``start <= mid < end``), else the
    nearest (distance from the midpoint to the interval), a tie to the earlier interval; ``None``
    for every word when there is no interval. Returns one index into ``intervals`` per word."""
    spans = list(intervals)
    if not spans:
        return [None] * len(words)
    out: list[int | None] = []
    for w in words:
        mid = (w.start_s + w.end_s) / 2
        inside = [k for k, (a, b) in enumerate(spans) if a <= mid < b]
        if inside:
            out.append(inside[0])
            continue
        dist = [max(a - mid, mid - b, 0.0) for a, b in spans]
        out.append(min(range(len(spans)), key=lambda k: (dist[k], k)))  # ties: the earlier interval
    return out


@dataclass(frozen=True)
class Activity:
    """A speaker's VAD interval that received at least one word: ``start_s``/``end_s`` (the
    interval) and its ``words`` in time order."""

    start_s: float
    end_s: float
    words: tuple[Word, ...]


def activities(words: Sequence[Word], intervals: Intervals) -> tuple[list[Activity], Counter]:
    """A speaker's activities (:func:`assign_words`, intervals without a word dropped) and the
    counts ``words``, ``by_midpoint``, ``by_nearest``, ``ties`` (nearest at equal distance),
    ``unassigned`` (no interval at all), ``intervals``, ``intervals_without_words``."""
    spans = [(float(a), float(b)) for a, b in intervals]
    where = assign_words(words, spans)
    counts: Counter = Counter(words=len(words), intervals=len(spans))
    by: dict[int, list[Word]] = {}
    for w, k in zip(words, where, strict=True):
        if k is None:
            counts["unassigned"] += 1
            continue
        mid = (w.start_s + w.end_s) / 2
        a, b = spans[k]
        if a <= mid < b:
            counts["by_midpoint"] += 1
        else:
            counts["by_nearest"] += 1
            d = max(a - mid, mid - b)
            counts["ties"] += sum(1 for j, (x, y) in enumerate(spans) if j != k and max(x - mid, mid - y, 0.0) == d)
        by.setdefault(k, []).append(w)
    counts["intervals_without_words"] = len(spans) - len(by)
    return [Activity(spans[k][0], spans[k][1], tuple(ws)) for k, ws in sorted(by.items())], counts


@dataclass(frozen=True)
class Proposal:
    """A proposed cue: B's activity starting ``during`` A's activity or ``after`` A's last word.

    Attributes:
        item_id: ``<recording_id>-p<k>`` (k: B's activity in time order, from 0).
        recording_id: its recording.
        rule: ``"during"`` or ``"after"``.
        cue_words: B's words of the activity (the first one's start is the cue onset).
        continuation_start_s, continuation_end_s: A's recorded continuation (see the module docstring).
    """

    item_id: str
    recording_id: str
    rule: str
    cue_words: tuple[Word, ...]
    continuation_start_s: float
    continuation_end_s: float

    def item(self, intent: str, label: str | None = None) -> CueItem:
        """The cue item of this proposal with its ``intent`` (and A's response ``label``, if known)."""
        return CueItem(self.item_id, self.recording_id, intent, self.cue_words, self.continuation_start_s,
                       self.continuation_end_s, label, {"proposal": self.rule})

    def to_dict(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "recording_id": self.recording_id, "rule": self.rule,
                "cue_words": [w.to_dict() for w in self.cue_words], "continuation_start_s": self.continuation_start_s,
                "continuation_end_s": self.continuation_end_s}


def propose(recording: Recording, a: Sequence[Activity], b: Sequence[Activity], gap_s: float = PROPOSAL_GAP_S,
            turn_pause_s: float = TURN_PAUSE_S) -> list[Proposal]:
    """The cross-speaker proposals of one recording (module docstring, step 3), in time order.

    Args:
        a, b: A's and B's activities (:func:`activities`).
        gap_s: B may start this long after A's last word, at most (seconds).
        turn_pause_s: A's continuation ends at its first pause this long or longer.
    """
    a_words = [w for act in a for w in act.words]
    out = []
    for k, act in enumerate(b):
        onset = act.words[0].start_s
        if any(x.start_s <= onset < x.end_s for x in a):
            rule = "during"
        else:
            before = [w for w in a_words if w.start_s <= onset]
            if not before or onset - before[-1].end_s > gap_s:
                continue
            rule = "after"
        # A's continuation: its word under way at the onset, then words each starting less than
        # turn_pause_s after the previous one (the first after the cue: after the cue's end)
        end, last = onset, act.words[-1].end_s
        for w in (w for w in a_words if w.end_s > onset):
            if w.start_s >= last + turn_pause_s:
                break
            end = last = max(end, w.end_s)
        out.append(Proposal(f"{recording.recording_id}-p{k}", recording.recording_id, rule, act.words, onset, end))
    return out


def silero_vad(channels: list[np.ndarray], sample_rate: int) -> list[Intervals]:
    """The default VAD: offline Silero with the default :class:`~harness.vad.settings.VadSettings`."""
    from harness.vad.settings import VadSettings
    from harness.vad.silero import detect

    segs = detect(channels, sample_rate, VadSettings())
    return [[(int(a) / sample_rate, int(b) / sample_rate) for a, b in s] for s in segs]


def read_intents(path: str | Path, proposals: Mapping[str, Proposal]) -> dict[str, tuple[str, str | None]]:
    """``intents.csv`` -> ``{item_id: (intent, label or None)}``; rows with an empty intent are
    skipped (not labelled yet).

    Raises:
        ValueError: naming the file, line and column: an unknown item id, an intent not in
            :data:`INTENTS`, a label not in :data:`RESPONSES`, or an item on two lines.
    """
    problems, out = [], {}
    with open(path, newline="", encoding="utf-8-sig") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            iid, intent = (row.get("item_id") or "").strip(), (row.get("intent") or "").strip().lower()
            label = (row.get("label") or "").strip().lower() or None
            if not intent:
                continue
            if iid not in proposals:
                problems.append(f"{path}:{line}: item_id: {iid!r} is not a proposal")
            elif iid in out:
                problems.append(f"{path}:{line}: item_id: {iid!r} is labelled twice")
            elif intent not in INTENTS:
                problems.append(f"{path}:{line}: intent: {intent!r} is not one of {', '.join(INTENTS)}")
            elif label is not None and label not in RESPONSES:
                problems.append(f"{path}:{line}: label: {label!r} is not one of {', '.join(RESPONSES)} (or empty)")
            else:
                out[iid] = (intent, label)
    if problems:
        raise ValueError(f"{len(problems)} problem(s) in {path}:\n  " + "\n  ".join(problems))
    return out


def construct(corpus: CueCorpus, vad: Vad = silero_vad, gap_s: float = PROPOSAL_GAP_S,
              turn_pause_s: float = TURN_PAUSE_S) -> dict[str, Any]:
    """Steps 1-3 (module docstring) over a loaded raw corpus (its items are ignored).

    Returns:
        ``{"proposals": [Proposal], "skipped": [{"recording_id", "reason"}], "counts": {"recordings",
        "words": {"A"|"B": activities' counts}, "proposals": {"during", "after", "total"},
        "recordings_without_words"}}``; a recording without both speakers' words is skipped
        (the construction needs them).
    """
    recs = [r for r in corpus.recordings if r.a_words and r.b_words]
    skipped = [{"recording_id": r.recording_id, "reason": "no_words: the construction needs both speakers' word "
                                                          "times (a_words, b_words)"}
               for r in corpus.recordings if not (r.a_words and r.b_words)]
    channels = [corpus.audio[r.recording_id][ch] for r in recs for ch in (0, 1)]
    found = vad(channels, SAMPLE_RATE) if channels else []
    words: dict[str, Counter] = {"A": Counter(), "B": Counter()}
    proposals: list[Proposal] = []
    for i, r in enumerate(recs):
        a, ca = activities(r.a_words, found[2 * i])
        b, cb = activities(r.b_words, found[2 * i + 1])
        words["A"].update(ca)
        words["B"].update(cb)
        proposals += propose(r, a, b, gap_s, turn_pause_s)
    counts = {"recordings": len(corpus.recordings), "recordings_without_words": len(skipped),
              "words": {spk: dict(c) for spk, c in words.items()},
              "proposals": {**Counter(p.rule for p in proposals), "total": len(proposals)}}
    return {"proposals": proposals, "skipped": skipped, "counts": counts}


def select(proposals: Sequence[Proposal], recordings: Mapping[str, Recording],
           intents: Mapping[str, tuple[str, str | None]], lead_s: float = SWITCH_LEAD_S,
           window_s: float = WINDOW_S, turn_pause_s: float = TURN_PAUSE_S, mid_sentence: bool = True) -> dict[str, Any]:
    """Steps 4-6 (module docstring): each proposal with its intent label audited by
    :func:`harness.cue.corpus.check_item` (``lead_s``, ``window_s``, ``turn_pause_s``,
    ``mid_sentence``).

    Returns:
        ``{"selection": [{"item_id", "recording_id", "rule", "status", "reason"}], "items":
        [CueItem] (the selected), "counts": {"selection": {status: n}, "audit": {rule: n},
        "selected_by_intent": {intent: n}}}``; ``status``: ``selected``, ``unlabelled`` or
        ``rejected`` (``reason``: the audit's rule and message).
    """
    selection, items, audit = [], [], Counter()
    for p in proposals:
        entry = {"item_id": p.item_id, "recording_id": p.recording_id, "rule": p.rule}
        if p.item_id not in intents:
            selection.append({**entry, "status": "unlabelled", "reason": "no intent label"})
            continue
        item = p.item(*intents[p.item_id])
        try:
            check_item(item, recordings[p.recording_id], lead_s, window_s, turn_pause_s, mid_sentence)
        except CueError as e:
            audit[e.rule] += 1
            selection.append({**entry, "status": "rejected", "reason": f"{e.rule}: {e.message}"})
            continue
        selection.append({**entry, "status": "selected", "reason": ""})
        items.append(item)
    counts = {"selection": dict(Counter(s["status"] for s in selection)), "audit": dict(audit),
              "selected_by_intent": dict(Counter(it.intent for it in items))}
    return {"selection": selection, "items": items, "counts": counts}


def main(argv: list[str] | None = None, vad: Vad = silero_vad) -> int:
    """``python -m harness.cue.build RAW_MANIFEST --out DIR [--intents intents.csv]``: the
    construction steps (module docstring). Writes ``DIR/proposals.jsonl``, ``DIR/intents.csv``
    (the template to label, when ``--intents`` is not given), ``DIR/counts.json`` and, with
    ``--intents``, ``DIR/selection.json`` and the selected cues' manifest ``DIR/corpus/``.
    Prints the counts as one JSON line. Exit status 1 when the raw manifest has problems (they
    are printed; the good recordings are still used), 2 on a bad intents file."""
    ap = argparse.ArgumentParser(prog="python -m harness.cue.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest", type=Path, help="raw manifest: recording lines with a_words and b_words")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--intents", type=Path, help="intents.csv (item_id,intent[,label]) of the proposals")
    ap.add_argument("--gap-s", type=float, default=PROPOSAL_GAP_S)
    ap.add_argument("--turn-pause-s", type=float, default=TURN_PAUSE_S)
    ap.add_argument("--lead-s", type=float, default=SWITCH_LEAD_S)
    ap.add_argument("--window-s", type=float, default=WINDOW_S)
    ap.add_argument("--no-mid-sentence", action="store_true", help="skip the mid-sentence audit rule")
    args = ap.parse_args(argv)
    corpus = ingest(args.manifest, lead_s=args.lead_s, window_s=args.window_s, turn_pause_s=args.turn_pause_s)
    for p in corpus.problems:
        print(f"{p['reason']} [rule {p['rule']}]", file=sys.stderr)
    settings = {"gap_s": args.gap_s, "lead_s": args.lead_s, "window_s": args.window_s,
                "turn_pause_s": args.turn_pause_s, "mid_sentence": not args.no_mid_sentence}
    out = construct(corpus, vad, args.gap_s, args.turn_pause_s)
    counts = {**out["counts"], "problems": len(corpus.problems), "settings": settings}
    intents = None
    if args.intents:
        try:
            intents = read_intents(args.intents, {p.item_id: p for p in out["proposals"]})
        except (OSError, ValueError) as e:
            print(f"intents: {e}", file=sys.stderr)
            return 2
        chosen = select(out["proposals"], {r.recording_id: r for r in corpus.recordings}, intents, args.lead_s,
                        args.window_s, args.turn_pause_s, not args.no_mid_sentence)
        counts.update(chosen["counts"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "proposals.jsonl").write_text("".join(json.dumps(p.to_dict(), sort_keys=True) + "\n"
                                                      for p in out["proposals"]))
    if intents is None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(INTENT_COLUMNS)
        w.writerows((p.item_id, "", "") for p in out["proposals"])
        (args.out / "intents.csv").write_text(buf.getvalue())
    else:
        (args.out / "selection.json").write_text(json.dumps({"settings": settings, "skipped": out["skipped"],
                                                             "proposals": chosen["selection"]}, indent=1))
        used = {it.recording_id for it in chosen["items"]}
        write_manifest(CueCorpus([r for r in corpus.recordings if r.recording_id in used],
                                 {rid: x for rid, x in corpus.audio.items() if rid in used}, chosen["items"], []),
                       args.out / "corpus")
    (args.out / "counts.json").write_text(json.dumps(counts, indent=1, sort_keys=True))
    print(json.dumps(counts, sort_keys=True))
    return 1 if corpus.problems else 0


if __name__ == "__main__":
    sys.exit(main())
