"""The Duplex Cue corpus: serialisation, the corpus rules, and ingest of external recordings
(spec section 9; the manifest format and the rules are in docs/formats.md, "Duplex Cue corpus").

In memory a corpus is a :class:`CueCorpus`: the recordings (:class:`Recording`), their audio as
``{recording_id: float32[2, n]}`` (row 0 = speaker A, row 1 = speaker B, at the recording's
``sample_rate``, :data:`SAMPLE_RATE` for every corpus this module or the generator makes), the
cue items (:class:`CueItem`) and the problems ingest found (``[]`` for a generated corpus).

On disk a corpus is a directory: ``manifest.jsonl`` (one recording or cue per line) and each
recording's audio as a 16-bit stereo FLAC, channel 0 = A (``audio/<recording_id>.flac``,
:func:`encode_recording`). :func:`write_manifest` writes it and :func:`ingest` reads it back
(the same validated path as an external corpus), exactly: audio on the 16-bit grid of
:func:`harness.audio.io.quantize` reads back bit for bit.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import soundfile as sf

from harness.audio.io import PCM_SCALE, AudioError
from harness.audio.resample import resample, resample_problem
from harness.cue.schema import (
    SWITCH_LEAD_S,
    WINDOW_S,
    CueError,
    CueItem,
    Recording,
    Word,
    json_repr,
)

SAMPLE_RATE = 24_000  # the timeline rate (spec section 3): every corpus is stored and served at it
MIN_SOURCE_RATE = 16_000  # lower rates are rejected, not resampled (narrowband audio; docs/formats.md)
TURN_PAUSE_S = 0.5  # the paper: pauses under 0.5 s between A's words are inside A's turn (cue.turn_pause_s)
SENTENCE_END = (".", "?", "!")  # a word ending with one of these ends a sentence (the mid-sentence rule)
PUNCTUATION = (*SENTENCE_END, ",", ";", ":")  # a transcript with any of these on A's words is punctuated
TIME_TOL_S = 1e-6  # float slack when comparing times with the audio's length
CHANNELS = ("A", "B")  # row order of a recording's audio
AUDIO_FIELDS = ("audio", "audio_a", "audio_b")  # a recording line's audio paths: one stereo file, or A's and B's
FORCED_FIELD = "audio_a_forced"  # optional: A's track converted to the forcing voice (mono; forced, not the reference)


class CueCorpus(NamedTuple):
    """A loaded or generated corpus (unpacks as ``recordings, audio, items, problems``).

    Attributes:
        recordings: in manifest (or generation) order.
        audio: ``{recording_id: float32[c, n_samples]}``, row 0 = A, row 1 = B and, for a
            recording with ``forced_a``, row 2 = A converted to the forcing voice
            (``c = Recording.channels``), at each recording's ``sample_rate``.
        items: the cue items, each referring to one of ``recordings``.
        problems: what ingest rejected: ``{"line", "recording_id" and/or "item_id", "rule",
            "reason"}`` per rejected line (``[]`` for a generated corpus).
    """

    recordings: list[Recording]
    audio: dict[str, np.ndarray]
    items: list[CueItem]
    problems: list[dict[str, Any]]


# -- JSON lines ------------------------------------------------------------------------------
def write_items(items: Iterable[CueItem], fh: IO[str]) -> int:
    """Write cue items as JSON lines (:meth:`CueItem.to_dict`). Returns the number written."""
    return _write_lines((i.to_dict() for i in items), fh)


def read_items(lines: Iterable[str]) -> list[CueItem]:
    """Parse :func:`write_items`' lines (blank lines skipped); raise :class:`CueError` naming
    the line on the first bad one. Times are not checked against recordings here
    (:func:`check_item` does that)."""
    return [CueItem.from_dict(d) for d in _read_lines(lines)]


def write_recordings(recordings: Iterable[Recording], fh: IO[str]) -> int:
    """Write recordings' metadata (no audio) as JSON lines. Returns the number written."""
    return _write_lines((r.to_dict() for r in recordings), fh)


def read_recordings(lines: Iterable[str]) -> list[Recording]:
    """Parse :func:`write_recordings`' lines; raise :class:`CueError` on the first bad one."""
    return [Recording.from_dict(d) for d in _read_lines(lines)]


def _write_lines(dicts: Iterable[dict[str, Any]], fh: IO[str]) -> int:
    n = 0
    for d in dicts:
        fh.write(json.dumps(d, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n")
        n += 1
    return n


def _read_lines(lines: Iterable[str]) -> Iterable[Any]:
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise CueError("json", f"line {lineno}: invalid JSON: {e.msg}") from None


# -- the rules -------------------------------------------------------------------------------
def check_words(words: tuple[Word, ...], duration_s: float, where: str) -> None:
    """Raise :class:`CueError` unless every word lies inside ``[0, duration_s]`` (rule
    ``time_range``) and the words are in time order without overlapping (``word_order``):
    one speaker says one word at a time."""
    for i, w in enumerate(words):
        if w.start_s < 0 or w.end_s > duration_s + TIME_TOL_S:
            raise CueError("time_range", f"{where}[{i}] {w.text!r} ({w.start_s}-{w.end_s} s) is outside the "
                                         f"audio (0-{duration_s:.3f} s)")
        if i and w.start_s < words[i - 1].end_s - TIME_TOL_S:
            raise CueError("word_order", f"{where}[{i}] {w.text!r} starts at {w.start_s} s, before the previous "
                                         f"word ends ({words[i - 1].end_s} s)")


def check_item(item: CueItem, recording: Recording, lead_s: float = SWITCH_LEAD_S, window_s: float | None = WINDOW_S,
               turn_pause_s: float = TURN_PAUSE_S, mid_sentence: bool = True) -> None:
    """Check a cue item against its recording (docs/formats.md, "Duplex Cue corpus"; the switch
    point and window are spec section 9's). Raises :class:`CueError` with its rule:

    * ``recording``: ``item.recording_id`` is not ``recording``'s id;
    * ``time_range`` / ``word_order``: the cue words are outside the audio or out of order;
    * ``cue_not_in_b_words``: the recording has B's words and a cue word is not one of them
      (same text, times within 1 ms);
    * ``continuation``: not ``switch <= continuation_start_s <= continuation_end_s <= duration``
      (switch = :meth:`CueItem.switch_s` with ``lead_s``);
    * ``window``: the audio ends before ``switch + window_s`` (the reference condition needs
      A's recorded channel over the whole window; ``None`` skips the rule);
    * ``outside_a_turn``: the recording has A's words and the cue onset is not inside A's
      turn: A's latest word starting at or before the onset must end less than
      ``turn_pause_s`` before it (the paper: a pause under 0.5 s is inside the turn);
    * ``not_mid_sentence`` (with ``mid_sentence``): the recording has A's words and A is not
      mid-sentence at the switch point: A's last word beginning before it ends a sentence
      (``.``, ``?`` or ``!``);
    * ``mid_sentence_unknown`` (with ``mid_sentence``): A's words carry no punctuation at all,
      so the mid-sentence rule cannot be checked (give punctuated words, as word-timestamped
      ASR gives them, or turn the rule off: ``cue.require_mid_sentence=false``).

    A recording without A's words is checked by neither A rule (docs/formats.md).
    """
    where = f"cue {item.item_id!r}"
    if item.recording_id != recording.recording_id:
        raise CueError("recording", f"{where} belongs to {item.recording_id!r}, not {recording.recording_id!r}")
    dur = recording.duration_s
    check_words(item.cue_words, dur, f"{where}.cue_words")
    if recording.b_words:
        spoken = {(w.text, round(w.start_s, 3), round(w.end_s, 3)) for w in recording.b_words}
        for i, w in enumerate(item.cue_words):
            if (w.text, round(w.start_s, 3), round(w.end_s, 3)) not in spoken:
                raise CueError("cue_not_in_b_words", f"{where}.cue_words[{i}] {w.text!r} at {w.start_s} s is not "
                                                     f"one of recording {recording.recording_id!r}'s b_words")
    switch = item.switch_s(lead_s)
    c0, c1 = item.continuation_start_s, item.continuation_end_s
    if not (switch - TIME_TOL_S <= c0 <= c1 <= dur + TIME_TOL_S):
        raise CueError("continuation", f"{where}: continuation {c0}-{c1} s must lie between the switch point "
                                       f"({switch:.3f} s) and the end of the audio ({dur:.3f} s)")
    if window_s is not None and switch + window_s > dur + TIME_TOL_S:
        raise CueError("window", f"{where}: the audio ends {dur - switch:.3f} s after the switch point "
                                 f"({switch:.3f} s); the continuation window needs {window_s} s")
    if recording.a_words:
        onset = item.cue_onset_s
        before = [w for w in recording.a_words if w.start_s <= onset]
        if not before or before[-1].end_s < onset - turn_pause_s:
            last = f"A's last word before it ends at {before[-1].end_s} s" if before else "A has not spoken yet"
            raise CueError("outside_a_turn", f"{where}: the cue onset ({onset} s) is not inside A's turn ({last}; "
                                             f"a pause of {turn_pause_s} s or more ends the turn)")
        if mid_sentence:
            if not any(w.text.endswith(PUNCTUATION) for w in recording.a_words):
                raise CueError("mid_sentence_unknown", f"{where}: recording {recording.recording_id!r}'s a_words carry "
                                                       "no punctuation, so whether A is mid-sentence at the switch "
                                                       "point cannot be checked; give punctuated words or set "
                                                       "cue.require_mid_sentence=false")
            at = [w for w in recording.a_words if w.start_s < switch]
            if at and at[-1].text.endswith(SENTENCE_END):
                last = at[-1]
                raise CueError("not_mid_sentence", f"{where}: A is not mid-sentence at the switch point "
                                                   f"({switch:.3f} s): its last word before it, {last.text!r} "
                                                   f"({last.start_s}-{last.end_s} s), ends a sentence")


# -- on disk ---------------------------------------------------------------------------------
def encode_recording(audio: np.ndarray, sample_rate: int) -> bytes:
    """``float32[c, n]`` (row 0 = A, row 1 = B, optional row 2 = A converted for forcing) -> a
    16-bit FLAC of ``c`` channels (channel 0 = A), the stored form of a recording's audio (files
    and store objects; a manifest's ``audio`` file is the stereo ``c = 2`` form). Samples are rounded to the
    16-bit grid of :mod:`harness.audio.io` (``PCM_SCALE``; its ``encode`` is mono-only), so
    :func:`decode_recording` returns :func:`harness.audio.io.quantize` of the input exactly.

    Raises:
        harness.audio.io.AudioError: the audio is not ``[2, n]`` or ``[3, n]`` floats or is not finite.
    """
    x = np.asarray(audio)
    if x.ndim != 2 or x.shape[0] not in (2, 3) or not np.issubdtype(x.dtype, np.floating):
        raise AudioError(f"a recording's audio must be float [2, n] (A, B) or [3, n] (A, B, A forced), "
                         f"got {x.dtype} {x.shape}")
    if not np.all(np.isfinite(x)):
        raise AudioError("a recording's audio contains NaN or Inf samples")
    buf = io.BytesIO()
    sf.write(buf, np.round(np.clip(x, -1.0, 1.0) * PCM_SCALE).astype(np.int16).T, sample_rate, format="FLAC",
             subtype="PCM_16")
    return buf.getvalue()


def decode_recording(data: bytes, sample_rate: int) -> np.ndarray:
    """Invert :func:`encode_recording`: FLAC/WAV bytes -> ``float32[c, n]``, ``c`` 2 or 3.

    Raises:
        harness.audio.io.AudioError: undecodable data, not two or three channels, or a rate other
            than ``sample_rate`` Hz.
    """
    x, rate = _read_audio(io.BytesIO(data))
    if x.shape[0] not in (2, 3) or rate != sample_rate:
        raise AudioError(f"expected 2 channels (A, B) or 3 (A, B, A forced) at {sample_rate} Hz, got "
                         f"{x.shape[0]} at {rate} Hz")
    return x


def write_manifest(corpus: CueCorpus, directory: str | Path) -> Path:
    """Write ``corpus`` as a directory :func:`ingest` reads: ``audio/<id>.flac``
    (:func:`encode_recording`: 16-bit stereo FLAC, channel 0 = A; a recording with ``forced_a``
    also ``audio/<id>.a_forced.flac``, mono, named by ``audio_a_forced``) and ``manifest.jsonl``
    (each recording's line, then its cues' lines). Returns the manifest's path.

    Raises:
        harness.audio.io.AudioError: an audio array that is not ``float32[channels, n_samples]``.
    """
    directory = Path(directory)
    (directory / "audio").mkdir(parents=True, exist_ok=True)
    by_rec: dict[str, list[CueItem]] = {}
    for item in corpus.items:
        by_rec.setdefault(item.recording_id, []).append(item)
    lines: list[dict[str, Any]] = []
    for rec in corpus.recordings:
        x = np.asarray(corpus.audio[rec.recording_id])
        if x.shape != (rec.channels, rec.n_samples):
            raise AudioError(f"recording {rec.recording_id!r}: audio must be [{rec.channels}, {rec.n_samples}], "
                             f"got {x.shape}")
        rel = f"audio/{rec.recording_id}.flac"
        (directory / rel).write_bytes(encode_recording(x[:2], rec.sample_rate))
        line = {"kind": "recording", **rec.to_dict(), "audio": rel}
        del line["forced_a"]  # a manifest says it by naming the file
        if rec.forced_a:
            forced = f"audio/{rec.recording_id}.a_forced.flac"
            with (directory / forced).open("wb") as fh:
                sf.write(fh, np.round(np.clip(x[2], -1.0, 1.0) * PCM_SCALE).astype(np.int16), rec.sample_rate,
                         format="FLAC", subtype="PCM_16")
            line[FORCED_FIELD] = forced
        lines.append(line)
        lines += [{"kind": "cue", **i.to_dict()} for i in by_rec.get(rec.recording_id, [])]
    path = directory / "manifest.jsonl"
    with path.open("w") as fh:
        _write_lines(lines, fh)
    return path


def _read_audio(src: Path | io.BytesIO) -> tuple[np.ndarray, int]:
    """Decode a sound file as ``(float32[channels, n], rate)`` on the 16-bit grid of
    :mod:`harness.audio.io` (so its FLACs read back exactly)."""
    try:
        pcm, rate = sf.read(src if isinstance(src, io.BytesIO) else str(src), dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise AudioError(f"cannot decode: {e}") from None
    return pcm.T.astype(np.float32) / np.float32(PCM_SCALE), int(rate)


def _load_recording(d: dict[str, Any], base: Path, sample_rate: int, min_rate: int,
                    allow_outside: bool = False) -> tuple[Recording, np.ndarray]:
    """One recording line -> (Recording at ``sample_rate``, float32[channels, n]); raise :class:`CueError`
    with the rule and a message naming the field and file. Audio paths resolve inside ``base``
    (the manifest's folder) unless ``allow_outside``."""
    if "forced_a" in d:
        raise CueError("bad_value", f"recording {d.get('recording_id')!r}.forced_a: a manifest names the converted "
                                    f"file instead ({FORCED_FIELD!r})")
    rec = Recording.from_dict({"sample_rate": 1, "n_samples": 0, **d})  # fields and words; rate/length below
    where = f"recording {rec.recording_id!r}"
    layouts = [k for k in AUDIO_FIELDS if k in d]
    if layouts not in (["audio"], ["audio_a", "audio_b"]):
        raise CueError("audio_layout", f"{where}: give either 'audio' (one stereo file: channel 0 = A, 1 = B) or "
                                        f"both 'audio_a' and 'audio_b' (two mono files), got {layouts or 'neither'}")
    files: list[tuple[str, Path]] = []
    # A converted to the forcing voice, when given: a third row, forced instead of A (never the reference)
    for key in [*layouts, *([FORCED_FIELD] if FORCED_FIELD in d else [])]:
        if not isinstance(d[key], str) or not d[key]:
            raise CueError("bad_value", f"{where}.{key}: expected a file path, got {json_repr(d[key])}")
        path = base / d[key]
        if not allow_outside and not path.resolve().is_relative_to(base.resolve()):
            raise CueError("outside_manifest", f"{where}.{key}: {d[key]!r} is outside the manifest's folder "
                                                f"{str(base)!r}; set cue.allow_outside_paths=true to read it")
        files.append((key, path))
    decoded = []
    for key, path in files:
        if not path.is_file():
            raise CueError("missing_file", f"{where}.{key}: file {str(path)!r} does not exist")
        try:
            decoded.append((key, path, *_read_audio(path)))
        except AudioError as e:
            raise CueError("decode", f"{where}.{key}: file {str(path)!r}: {e}") from None
    for key, path, x, _ in decoded:
        want = 2 if key == "audio" else 1
        if x.shape[0] != want:
            raise CueError("channels", f"{where}.{key}: file {str(path)!r} has {x.shape[0]} channel(s); "
                                        f"'{key}' must be {'stereo (A, B)' if want == 2 else 'mono'}")
    rates = {rate for *_, rate in decoded}
    lengths = {x.shape[1] for _, _, x, _ in decoded}
    if len(rates) > 1 or len(lengths) > 1:
        desc = ", ".join(f"{key} {x.shape[1]} samples at {rate} Hz" for key, _, x, rate in decoded)
        raise CueError("mismatch", f"{where}: its audio files differ ({desc}); they must share rate and length")
    rate, n = rates.pop(), lengths.pop()
    for key in ("sample_rate", "n_samples"):  # optional declarations (write_manifest writes them)
        if key in d and d[key] != {"sample_rate": rate, "n_samples": n}[key]:
            raise CueError("mismatch", f"{where}.{key}: declared {d[key]}, but {files[0][1]} has "
                                        f"{rate if key == 'sample_rate' else n}")
    if rate < min_rate:
        raise CueError("sample_rate", f"{where}: {files[0][1]} is at {rate} Hz; rates below {min_rate} Hz are "
                                       f"rejected (narrowband audio, not resampled)")
    if problem := resample_problem(rate, sample_rate):
        raise CueError("sample_rate", f"{where}: {files[0][1]} is at {rate} Hz: {problem}")
    audio = np.concatenate([x for _, _, x, _ in decoded], axis=0)
    sources = [path for _, path, x, _ in decoded for _ in range(x.shape[0])]  # the file of each row
    for i, ch in enumerate((*CHANNELS, "A converted for forcing")[:audio.shape[0]]):
        if not np.any(audio[i]):
            raise CueError("silent_channel", f"{where}: channel {ch} ({sources[i]}) is digital silence")
    audio = resample(audio, rate, sample_rate) if rate != sample_rate else audio
    meta = {**rec.meta, "source": {"files": [d[k] for k, _ in files], "sample_rate": rate}}
    rec = Recording(rec.recording_id, sample_rate, audio.shape[1], rec.a_words, rec.b_words, meta,
                    FORCED_FIELD in d)
    check_words(rec.a_words, rec.duration_s, f"{where}.a_words")
    check_words(rec.b_words, rec.duration_s, f"{where}.b_words")
    return rec, audio


def audio_files(manifest_path: str | Path) -> dict[str, Path]:
    """The audio files the recording lines of the cue manifest ``manifest_path`` name, resolved as
    :func:`ingest` resolves them (relative to the manifest's folder): ``{path as written: path}``.
    Lines that are not JSON recording lines, and values that are not strings, name none (they are
    :func:`ingest`'s problems, as text that is not UTF-8 is); nothing is checked here. Raises OSError when
    the manifest cannot be read."""
    path = Path(manifest_path)
    out: dict[str, Path] = {}
    for line in path.read_text(encoding="utf-8-sig", errors="replace").splitlines():
        try:
            d = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            continue
        if isinstance(d, dict) and d.get("kind") == "recording":
            out.update({d[k]: path.parent / d[k] for k in (*AUDIO_FIELDS, FORCED_FIELD)
                        if isinstance(d.get(k), str) and d[k]})
    return out


def ingest(manifest_path: str | Path, sample_rate: int = SAMPLE_RATE, min_rate: int = MIN_SOURCE_RATE,
           lead_s: float = SWITCH_LEAD_S, window_s: float | None = WINDOW_S,
           turn_pause_s: float = TURN_PAUSE_S, mid_sentence: bool = True, allow_outside: bool = False) -> CueCorpus:
    """Load and validate a cue manifest (docs/formats.md, "Duplex Cue corpus").

    Every line is checked; a bad line is reported in ``problems`` (in manifest order) with its
    rule and a reason naming the manifest line, the field and the file, and the good lines
    still load (nothing is dropped silently). A recording that is rejected rejects its cues (rule
    ``recording_rejected``); an id on several lines rejects all of them (``duplicate_id``:
    which one is right is unknown). Audio paths are relative to the manifest's directory and must
    stay inside it (rule ``outside_manifest``) unless ``allow_outside``. Audio at another rate of
    at least ``min_rate`` Hz is resampled to ``sample_rate`` with
    :func:`harness.audio.resample.resample`, unless that rate pair would need too large a filter
    (rule ``sample_rate``: that recording is rejected); times stay in seconds. The manifest is
    read as UTF-8 with or without a byte-order mark, with any line endings (as editors save it).

    Args:
        manifest_path: the JSONL manifest.
        sample_rate: the rate of the returned audio (Hz; the timeline's 24 kHz by default).
        min_rate: the lowest accepted source rate (Hz).
        lead_s, window_s, turn_pause_s, mid_sentence: as :func:`check_item`.

    Returns:
        :class:`CueCorpus` with audio ``float32[2, n]`` at ``sample_rate``.

    Raises:
        OSError: the manifest itself cannot be read.
    """
    path = Path(manifest_path)
    name = path.name
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    parsed: list[tuple[int, str, dict[str, Any]]] = []  # (line, kind, object)
    problems: list[dict[str, Any]] = []

    def reject(lineno: int, rule: str, reason: str, **ids: Any) -> None:
        problems.append({"line": lineno, **{k: v for k, v in ids.items() if v is not None}, "rule": rule,
                         "reason": f"{name} line {lineno}: {reason}"})

    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            reject(lineno, "json", f"invalid JSON: {e.msg}")
            continue
        kind = d.get("kind") if isinstance(d, dict) else None
        if kind not in ("recording", "cue"):
            reject(lineno, "kind", f"'kind' must be \"recording\" or \"cue\", got {json_repr(kind)}")
            continue
        parsed.append((lineno, kind, d))

    def dup_ids(kind: str, key: str) -> dict[str, list[int]]:
        seen = Counter(d.get(key) for _, k, d in parsed if k == kind and isinstance(d.get(key), str))
        return {i: [n for n, k, d in parsed if k == kind and d.get(key) == i] for i, c in seen.items() if c > 1}

    dup_rec, dup_item = dup_ids("recording", "recording_id"), dup_ids("cue", "item_id")
    recordings: dict[str, Recording] = {}
    audio: dict[str, np.ndarray] = {}
    rejected_rec: dict[str, str] = {}  # recording id -> why
    for lineno, kind, d in parsed:
        if kind != "recording":
            continue
        rid = d.get("recording_id") if isinstance(d.get("recording_id"), str) else None
        if rid in dup_rec:
            why = f"recording id {rid!r} is on lines {dup_rec[rid]}; none of them is used"
            reject(lineno, "duplicate_id", why, recording_id=rid)
            rejected_rec[rid] = why
            continue
        try:
            rec, x = _load_recording({k: v for k, v in d.items() if k != "kind"}, path.parent, sample_rate, min_rate,
                                     allow_outside)
        except CueError as e:
            reject(lineno, e.rule, e.message, recording_id=rid)
            if rid is not None:
                rejected_rec[rid] = e.message
            continue
        recordings[rec.recording_id], audio[rec.recording_id] = rec, x
    items: list[CueItem] = []
    for lineno, kind, d in parsed:
        if kind != "cue":
            continue
        iid = d.get("item_id") if isinstance(d.get("item_id"), str) else None
        rid = d.get("recording_id") if isinstance(d.get("recording_id"), str) else None
        if iid in dup_item:
            reject(lineno, "duplicate_id", f"item id {iid!r} is on lines {dup_item[iid]}; none of them is used",
                   item_id=iid, recording_id=rid)
            continue
        try:
            if rid in rejected_rec:
                raise CueError("recording_rejected", f"cue {iid!r}: its recording {rid!r} was rejected "
                                                     f"({rejected_rec[rid]})")
            item = CueItem.from_dict({k: v for k, v in d.items() if k != "kind"})
            if item.recording_id not in recordings:
                raise CueError("unknown_recording", f"cue {iid!r}.recording_id: no recording {item.recording_id!r} "
                                                    f"in the manifest")
            check_item(item, recordings[item.recording_id], lead_s, window_s, turn_pause_s, mid_sentence)
        except CueError as e:
            reject(lineno, e.rule, e.message, item_id=iid, recording_id=rid)
            continue
        items.append(item)
    problems.sort(key=lambda p: p["line"])  # manifest order
    return CueCorpus(list(recordings.values()), audio, items, problems)



def main(argv: list[str] | None = None) -> int:
    """``python -m harness.cue.corpus MANIFEST``: validate a manifest; print each problem, then one
    JSON line with the counts. Exit status 1 when anything was rejected."""
    ap = argparse.ArgumentParser(prog="python -m harness.cue.corpus", description="Validate a Duplex Cue manifest "
                                 "(docs/formats.md, 'Duplex Cue corpus').")
    ap.add_argument("manifest", type=Path)
    args = ap.parse_args(argv)
    corpus = ingest(args.manifest)
    for p in corpus.problems:
        print(f"{p['reason']} [rule {p['rule']}]", file=sys.stderr)
    print(json.dumps({"recordings": len(corpus.recordings), "items": len(corpus.items),
                      "problems": len(corpus.problems),
                      "audio_s": round(sum(r.duration_s for r in corpus.recordings), 1)}))
    return 1 if corpus.problems else 0


if __name__ == "__main__":
    sys.exit(main())
