"""One conversation as an HTML page: timeline, every scored window and why, the scheduler's log,
and a player for what was heard and said.

The page is for debugging a single (model, scene): it answers "why did this window pass or
fail" from the same per-event rows the scores are computed from
(:func:`harness.metrics.outcomes.conversation_outcomes`), the model's speech segments and the
infer record, so it can never disagree with ``metrics.json``.

Listening: :func:`stereo_mix` puts the humans (the turns and the duty preamble, where the
scheduler placed them) on the left channel and the model's output on the right, on the stream
timeline; the reduce stage writes it as ``<scene>.flac`` beside ``<scene>.html``. The page then
has a player (the audio is linked, never inlined), a playhead over the timeline figure, and
clicking a scored window (or a point of the figure) plays from there. Without the file (not
written, deleted, not copied) the player gives way to a note and everything else works as before.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.metrics.outcomes import Speech
from harness.products.infer import InferRecord
from harness.report.document import Document, Figure, Paragraph, Section, Table, to_html
from harness.report.figures import conversation_timeline
from harness.scenes.schema import Scene

WINDOW_HEADER = ("turn", "label", "speaker", "text", "window start (s)", "window end (s)", "model speech (s)",
                 "ASR heard", "judge", "outcome", "why")
EVENT_HEADER = ("t (s)", "rule time (s)", "kind", "turn", "reason")


def _s(samples: int | None, sr: float) -> str:
    return "" if samples is None else f"{samples / sr:.2f}"


def _opt(x: Any) -> int | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return int(x)


def _first_start(speech: Speech, a: int, b: int) -> int | None:
    """Start of the first segment that overlaps ``[a, b)`` (may lie before ``a``)."""
    s = speech.segments
    hit = s[(s[:, 1] > a) & (s[:, 0] < b)]
    return int(hit[:, 0].min()) if hit.size else None


def _silence_why(r: Mapping[str, Any], speech: Speech, sr: float) -> tuple[str, str]:
    if r["silent"]:
        return "passed", "passed: no model speech in the window"
    why = f"failed: {r['speech_s']:.2f} s of model speech in the window"
    first = _first_start(speech, r["start"], r["window_end"])
    if first is not None and first < r["start"]:
        why += f" (speech already running at the turn's start, since {first / sr:.2f} s)"
    elif first is not None:
        why += f" (first from {first / sr:.2f} s, {(first - r['start']) / sr:.2f} s into the window)"
    return "failed", why


def _t_why(r: Mapping[str, Any], sr: float, fresh_onset_window_s: float) -> tuple[str, str]:
    end, onset = r["end"], _opt(r.get("onset"))
    if r["fresh_onset"] and onset is not None:
        parts = [f"fresh onset {(onset - end) / sr:.2f} s after T end"]
    elif r["speaking_at_end"]:
        parts = ["no fresh onset: model speech already covers T's end"]
        if onset is not None:
            parts[0] += f" (the new onset {(onset - end) / sr:.2f} s after T end is not credited)"
    else:
        parts = [f"no fresh onset: no speech starts within {fresh_onset_window_s:g} s after T end"]
    if r["response_presence"]:
        parts.append(f"response presence: {r['speech_s']:.2f} s of speech in the response window")
    else:
        parts.append("response presence: no speech in the response window")
    parts.append(f"window closed by {r['decision']} at {r['window_end'] / sr:.2f} s")
    outcome = (f"fresh onset: {'yes' if r['fresh_onset'] else 'no'}; "
               f"response presence: {'yes' if r['response_presence'] else 'no'}")
    return outcome, "; ".join(parts)


def _window_response_why(r: Mapping[str, Any], speech: Speech, sr: float) -> tuple[str, str]:
    q_start, q_end, r_start = r["start"], r["end"], r["r_start"]
    if not r["window_response"]:
        return "no response", "no model speech from the question's start to N4_R's start"
    first = _first_start(speech, q_start, r_start + 1)
    if first is None:  # the row says speech, the segments do not: report the row
        why = "answered"
    elif first < q_start:
        why = f"answered: speech already running at the question's start (since {first / sr:.2f} s)"
    elif first < q_end:
        why = f"answered: speech starts during the question, {(first - q_start) / sr:.2f} s after it began"
    else:
        why = f"answered: first speech {(first - q_end) / sr:.2f} s after the question ended"
    return "responded", why


def _yield_why(r: Mapping[str, Any], speech: Speech, sr: float) -> tuple[str, str]:
    outcome = r["yield_outcome"]
    q_start, q_end, r_start = r["start"], r["end"], r["r_start"]
    deadline, obs = r["deadline"], r["observation_end"]
    after_r = (deadline - r_start) / sr
    if outcome == "yield":
        return "yield", (f"yield: success, silent at the deadline ({deadline / sr:.2f} s, N4_R start + {after_r:g} s) "
                         f"and through {obs / sr:.2f} s")
    if outcome == "still_voicing":
        return "failed (still voicing)", (f"yield: failed, still speaking at the deadline {deadline / sr:.2f} s "
                                          f"(N4_R start + {after_r:g} s)")
    if outcome == "resumed":
        again = _first_start(speech, deadline, obs)
        at = f" at {again / sr:.2f} s" if again is not None else ""
        return "failed (resumed)", (f"yield: failed, silent at the deadline {deadline / sr:.2f} s but spoke again{at}, "
                                    f"before the observation window ended at {obs / sr:.2f} s")
    if outcome == "excluded_spoke_during_question":
        if r.get("already_speaking_at_q_start"):
            return "excluded", "yield: excluded, already speaking at question start"
        first = _first_start(speech, q_start, q_end)
        at = f", {(first - q_start) / sr:.2f} s after it began" if first is not None else ""
        return "excluded", f"yield: excluded, started speaking during the question{at}"
    if outcome == "excluded_no_answer":
        return "excluded", (f"yield: excluded, no speech onset within {(r_start - q_end) / sr:.1f} s after "
                            "the question")
    if outcome == "excluded_stopped_before_r":
        return "excluded", "yield: excluded, the answer stopped before N4_R started"
    return outcome, outcome


def window_table(scene: Scene, segments: Any, rows: Sequence[Mapping[str, Any]], sample_rate: int,
                 fresh_onset_window_s: float = 5.0) -> list[dict[str, Any]]:
    """Every scored window of one conversation with its outcome and the reason, in time order.

    One entry per silence window (N1/N2/N3), per T response window, and two per N4 event
    (the answering window of window response, and the yield observation after N4_R starts).
    Keys: ``turn``, ``label``, ``speaker``, ``text``, ``start``/``end`` (samples),
    ``speech_s``, ``heard`` (the ASR transcript of the window's speech) and ``judge`` (the
    verdict) where the window was transcribed and judged (else ""), ``outcome`` and ``why``.
    """
    sr = float(sample_rate)
    speech = Speech(np.asarray(segments, dtype=np.int64).reshape(-1, 2))
    out = []
    for r in sorted(rows, key=lambda r: (r["start"], r["turn"])):
        turn = scene.turns[r["turn"]]
        base = {"turn": r["turn"], "label": r["label"], "speaker": turn.speaker, "text": turn.text,
                "heard": r.get("transcript") or "", "judge": r.get("verdict") or ""}
        if r["kind"] == "silence":
            outcome, why = _silence_why(r, speech, sr)
            out.append({**base, "start": r["start"], "end": r["window_end"], "speech_s": r["speech_s"],
                        "outcome": outcome, "why": why})
        elif r["kind"] == "T":
            outcome, why = _t_why(r, sr, fresh_onset_window_s)
            out.append({**base, "label": "T (response window)", "start": r["end"], "end": r["window_end"],
                        "speech_s": r["speech_s"], "outcome": outcome, "why": why})
        elif r["kind"] == "N4":
            outcome, why = _window_response_why(r, speech, sr)
            out.append({**base, "label": "N4_Q (window response)", "start": r["start"], "end": r["r_start"],
                        "speech_s": speech.overlap(r["start"], r["r_start"] + 1) / sr, "outcome": outcome,
                        "why": why})
            outcome, why = _yield_why(r, speech, sr)
            resolution = scene.turns[r["turn"] + 1] if r["turn"] + 1 < len(scene.turns) else turn
            out.append({"turn": r["turn"] + 1, "label": "N4_R (yield)", "speaker": resolution.speaker,
                        "text": resolution.text, "heard": "", "judge": "", "start": r["r_start"],
                        "end": r["observation_end"],
                        "speech_s": speech.overlap(r["deadline"], r["observation_end"]) / sr, "outcome": outcome,
                        "why": why})
    return out


def event_log(scene: Scene, record: InferRecord, sample_rate: int) -> list[tuple[str, ...]]:
    """The scheduler's log as table rows: decision time, rule time, kind, turn, reason."""
    sr = float(sample_rate)
    rows = []
    for e in record.events:
        i = e.turn
        turn = "" if i is None else (f"{i} ({scene.turns[i].label.value}, {scene.turns[i].speaker})"
                                     if 0 <= i < len(scene.turns) else str(i))
        rows.append((_s(e.t, sr), _s(e.at, sr), e.kind, turn, e.reason))
    return rows


EXAMPLE_KINDS = ("silence_failed", "no_fresh_onset", "speaking_at_t_end", "fresh_onset", "yield", "still_voicing",
                 "resumed", "yield_excluded")


def example_conversations(rows: Sequence[Mapping[str, Any]], per_kind: int = 1) -> dict[str, list[str]]:
    """Scene ids worth a :func:`conversation_page`, for one model's per-event rows.

    Returns ``{kind: [scene_id, ...]}`` with at most ``per_kind`` scenes per kind of
    :data:`EXAMPLE_KINDS` (first in scene-id order, so the choice is deterministic); kinds with
    no example are absent.
    """
    found: dict[str, list[str]] = {}

    def add(kind: str, sid: str) -> None:
        ids = found.setdefault(kind, [])
        if sid not in ids and len(ids) < per_kind:
            ids.append(sid)

    for r in sorted(rows, key=lambda r: (r["scene_id"], r["turn"])):
        sid = r["scene_id"]
        if r["kind"] == "silence" and not r["silent"]:
            add("silence_failed", sid)
        elif r["kind"] == "T":
            add("fresh_onset" if r["fresh_onset"] else "speaking_at_t_end" if r["speaking_at_end"]
                else "no_fresh_onset", sid)
        elif r["kind"] == "N4":
            add(r["yield_outcome"] if r["yield_eligible"] else "yield_excluded", sid)
    return {k: found[k] for k in EXAMPLE_KINDS if k in found}


def conversation_document(model: str, scene: Scene, record: InferRecord, segments: Any,
                          rows: Sequence[Mapping[str, Any]], sample_rate: int,
                          fresh_onset_window_s: float = 5.0, figure: bool = True,
                          truncated: bool = False, geometry: dict[str, float] | None = None) -> Document:
    """The blocks of :func:`conversation_page` (``figure=False`` leaves the timeline out;
    ``geometry``, when given, receives the figure's time axis, see :func:`conversation_timeline`)."""
    sr = float(sample_rate)
    segs = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    windows = window_table(scene, segs, rows, sample_rate, fresh_onset_window_s)
    sil = [r for r in rows if r["kind"] == "silence"]
    t = [r for r in rows if r["kind"] == "T"]
    n4 = [r for r in rows if r["kind"] == "N4"]
    eligible = [r for r in n4 if r["yield_eligible"]]
    summary = [f"silence windows passed: **{sum(bool(r['silent']) for r in sil)}/{len(sil)}**"]
    if t:
        summary.append(f"fresh onset: **{'yes' if t[0]['fresh_onset'] else 'no'}**, response presence: "
                       f"**{'yes' if t[0]['response_presence'] else 'no'}**")
    if n4:
        summary.append(f"N4 events: {len(n4)}, window responses: {sum(bool(r['window_response']) for r in n4)}, "
                       f"yield successes: {sum(r['yield_outcome'] == 'yield' for r in eligible)}/{len(eligible)} "
                       "eligible")
    doc = Document(f"Conversation `{scene.scene_id}` × model `{model}`")
    doc.intro += [
        Paragraph(f"Pair `{scene.pair_id}`, {scene.condition} addressing, speakers {', '.join(scene.speakers)}, "
                  f"T position {scene.t_position}; gold answer: “{scene.gold_answer}”. "
                  f"Status `{record.status}`, {(record.n_samples or 0) / sr:.2f} s at "
                  f"{sample_rate} Hz."),
        Paragraph("; ".join(summary) + "."),
    ]
    if figure:
        png = conversation_timeline(scene, record, segs, rows, sample_rate, fresh_onset_window_s, geometry)
        doc.sections.append(Section("Timeline", [Figure(
            png, "Turns per speaker coloured by label, the duty preamble, the model's speech segments (black), "
            "scoring windows (silence windows green when passed, red when failed; T response window blue with "
            "the fresh-onset limit dotted; N4 answering windows orange; yield deadline dashed with the "
            "observation window hatched) and the scheduler's decisions (ticks; a bracket joins a decision to "
            "its rule time).", "timeline")]))
    doc.sections.append(Section("Scored windows", [
        Table(WINDOW_HEADER, [(str(w["turn"]), w["label"], w["speaker"], w["text"], _s(w["start"], sr),
                               _s(w["end"], sr), f"{w['speech_s']:.2f}", w["heard"], w["judge"], w["outcome"],
                               w["why"]) for w in windows]),
        Paragraph("Silence windows run from the turn's start to the next turn's start; any overlapping model "
                  "speech fails them, also speech that began earlier. The T response window runs from T's end "
                  "to the scheduler's decision rule time. Window response counts any speech from N4_Q's start to "
                  "N4_R's start; the yield row's speech is counted from the deadline to the end of the "
                  "observation window.")]))
    last = len(segs) - 1
    speech_blocks: list = [
        Table(("#", "start (s)", "end (s)", "duration (s)", "end kind"),
              [(str(k), _s(int(a), sr), _s(int(b), sr), f"{(b - a) / sr:.2f}",
                "truncated" if truncated and k == last else "pause") for k, (a, b) in enumerate(segs)])
        if len(segs) else Paragraph("No model speech was detected.")]
    if truncated and len(segs):
        speech_blocks.append(Paragraph(
            "**Truncated:** the model was still speaking when the stored output ended (its pause was never "
            "confirmed); the last segment was closed at the end of the stream."))
    doc.sections.append(Section("Model speech", speech_blocks))
    doc.sections.append(Section("Scheduler events", [
        Table(EVENT_HEADER, event_log(scene, record, sample_rate)),
        Paragraph("`t` is when the scheduler decided; the rule time is the time the rule refers to where it "
                  "differs (e.g. the onset itself, known only once its segment lasted 120 ms).")]))
    return doc


def stereo_mix(record: InferRecord, turn_clips: Sequence[np.ndarray], preamble: np.ndarray | None,
               output: np.ndarray | None) -> np.ndarray:
    """What was heard and said, ``float32[n, 2]`` on the stream timeline (``n = record.n_samples``,
    else the end of the last placement or of the output): left the humans (each placed turn clip
    and the preamble at the scheduler's ``placements``), right the model's ``output`` (silence when
    there is none, e.g. a conversation that ended in ``error``). Clipped to [-1, 1]."""
    placements = record.placements
    n = int(record.n_samples or 0)
    n = n or max([p.end for p in placements] + [0 if output is None else len(output)])
    mix = np.zeros((n, 2), np.float32)
    for p in placements:
        clip = preamble if p.turn is None else turn_clips[p.turn]
        if clip is None:
            continue
        a = p.start
        k = max(0, min(len(clip), p.length, n - a))
        mix[a:a + k, 0] += clip[:k]
    if output is not None:
        k = min(n, len(output))
        mix[:k, 1] = output[:k]
    return np.clip(mix, -1.0, 1.0)


def mix_flac(mix: np.ndarray, sample_rate: int) -> bytes:
    """A :func:`stereo_mix` as 16-bit stereo FLAC bytes (browsers play FLAC in ``<audio>``)."""
    import soundfile as sf

    pcm = np.round(np.clip(mix, -1.0, 1.0) * 32767.0).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, sample_rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


PLAYER_CSS = """
.listen { position: sticky; top: 0; z-index: 5; background: #fff; border-bottom: 1px solid var(--line);
  padding: 0.5rem 0; margin-bottom: 0.6rem; display: flex; flex-wrap: wrap; gap: 0.4rem 1rem; align-items: center; }
.listen audio { width: min(34rem, 100%); height: 2.2rem; }
.listen .hint { color: var(--muted); font-size: 0.85rem; }
.listen.missing audio { display: none; }
.timeline-wrap { position: relative; display: inline-block; max-width: 100%; line-height: 0; cursor: crosshair; }
.timeline-wrap img { display: block; }
.playhead { position: absolute; width: 2px; margin-left: -1px; background: #e53e3e; pointer-events: none;
  display: none; box-shadow: 0 0 0 1px rgba(255,255,255,0.7); }
tr.seek { cursor: pointer; }
tr.seek:hover td, tr.seek:focus td { background: #ebf8ff; }
tr.seek.playing td { background: #fefcbf; }
""".strip()

# Wires the player to the page; silent (no console output) when the audio cannot be loaded.
PLAYER_JS = """
(function () {
  var audio = document.getElementById("mix");
  var bar = document.getElementById("listen");
  if (!audio || !bar) return;
  var geo = JSON.parse(document.getElementById("timeline-geometry").textContent || "null");
  var note = bar.querySelector(".hint");
  function missing() {
    bar.classList.add("missing");
    note.textContent = "Audio not available: " + audio.getAttribute("src") +
      " is missing beside this page (the rest of the page does not need it).";
  }
  audio.addEventListener("error", missing);
  if (audio.error) missing();
  var img = document.querySelector("#fig-timeline img");
  var head = null;
  if (img && geo) {
    var wrap = document.createElement("div");
    wrap.className = "timeline-wrap";
    img.parentNode.insertBefore(wrap, img);
    wrap.appendChild(img);
    head = document.createElement("div");
    head.className = "playhead";
    head.style.top = (100 * (1 - geo.y1)) + "%";
    head.style.height = (100 * (geo.y1 - geo.y0)) + "%";
    wrap.appendChild(head);
    wrap.title = "click to play from this time";
    wrap.addEventListener("click", function (ev) {
      var r = wrap.getBoundingClientRect();
      var f = ((ev.clientX - r.left) / r.width - geo.x0) / (geo.x1 - geo.x0);
      if (f >= 0 && f <= 1) seek(geo.t0 + f * (geo.t1 - geo.t0));
    });
  }
  var rows = [];
  document.querySelectorAll("table").forEach(function (t) {
    var cols = Array.prototype.map.call(t.querySelectorAll("thead th"), function (th) { return th.textContent; });
    var a = cols.indexOf("window start (s)"), b = cols.indexOf("window end (s)");
    if (a < 0 || b < 0) return;
    t.querySelectorAll("tbody tr").forEach(function (tr) {
      var start = parseFloat(tr.cells[a].textContent), end = parseFloat(tr.cells[b].textContent);
      if (isNaN(start)) return;
      tr.classList.add("seek");
      tr.tabIndex = 0;
      tr.title = "play from " + start.toFixed(2) + " s";
      tr.dataset.start = start;
      tr.dataset.end = isNaN(end) ? start : end;
      tr.addEventListener("click", function () { seek(start); });
      tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") seek(start); });
      rows.push(tr);
    });
  });
  function seek(t) {
    if (bar.classList.contains("missing")) return;
    audio.currentTime = Math.max(0, t);
    var p = audio.play();
    if (p && p.catch) p.catch(function () {});
    draw();
  }
  function draw() {
    var t = audio.currentTime || 0;
    if (head && geo) {
      var f = (t - geo.t0) / (geo.t1 - geo.t0);
      head.style.left = (100 * (geo.x0 + Math.min(Math.max(f, 0), 1) * (geo.x1 - geo.x0))) + "%";
      head.style.display = "block";
    }
    rows.forEach(function (tr) {
      tr.classList.toggle("playing", t >= +tr.dataset.start && t < +tr.dataset.end);
    });
  }
  function loop() { draw(); if (!audio.paused) window.requestAnimationFrame(loop); }
  audio.addEventListener("play", loop);
  audio.addEventListener("seeked", draw);
  audio.addEventListener("timeupdate", draw);
  audio.addEventListener("loadedmetadata", draw);
})();
""".strip()


def _player(audio: str, geometry: Mapping[str, float] | None) -> tuple[str, str, str]:
    """(CSS, the player bar, the scripts) for a page whose mix is the file ``audio`` beside it."""
    geo = json.dumps(dict(geometry) if geometry else None).replace("</", "<\\/")
    bar = (f'<div class="listen" id="listen"><audio id="mix" controls preload="metadata" '
           f'src="{html.escape(audio)}"></audio><span class="hint">Humans on the left channel, the model on the '
           "right. Click a scored window or a point of the timeline to play from there.</span></div>")
    scripts = (f'<script type="application/json" id="timeline-geometry">{geo}</script>\n'
               f"<script>\n{PLAYER_JS}\n</script>")
    return PLAYER_CSS, bar, scripts


def conversation_page(model: str, scene: Scene, record: InferRecord, segments: Any,
                      rows: Sequence[Mapping[str, Any]], sample_rate: int, fresh_onset_window_s: float = 5.0,
                      truncated: bool = False, audio: str | None = None) -> str:
    """An HTML page for one conversation and model, self-contained but for its audio.

    Args:
        model: the model's name (for the title).
        scene: the script.
        record: the infer record (``placements``, ``events``, ``status``, ``n_samples``).
        segments: the model's speech segments, ``int[k, 2]`` samples (``segments.json``).
        rows: this conversation's rows of :func:`harness.metrics.outcomes.conversation_outcomes`
            (a ``model`` key, as in ``events.parquet``, is ignored).
        sample_rate: samples per second of the timeline (``protocol.sample_rate``).
        fresh_onset_window_s: ``protocol.fresh_onset_window_s``, for the wording and the figure.
        truncated: the last segment was still open when the stream ended (``segments.json``'s
            ``truncated``): it is marked so in the speech table.
        audio: the file name (relative to the page) of this conversation's :func:`stereo_mix`;
            ``None``: no player. A missing file only hides the player.
    """
    geometry: dict[str, float] = {}
    page = to_html(conversation_document(model, scene, record, segments, rows, sample_rate, fresh_onset_window_s,
                                         truncated=truncated, geometry=geometry))
    if audio is None:
        return page
    css, bar, scripts = _player(audio, geometry or None)
    page = page.replace("</style>", f"{css}\n</style>", 1)
    page = page.replace("<main>", f"<main>\n{bar}", 1)
    return page.replace("</main>", f"</main>\n{scripts}", 1)
