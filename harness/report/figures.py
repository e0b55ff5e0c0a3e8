"""Report figures as PNG bytes (matplotlib, Agg canvas; no pyplot, no global backend state).

Every function returns the bytes of one PNG of a fixed pixel size for a given input (the
figure size depends only on the number of models, never on the data), rendered with the
object-oriented API so it is safe in worker threads and never opens a window.

* :func:`score_bars`: every score, grouped per model, explicit and implicit side by side,
  with 95 % Wilson intervals; n/a and not-scored entries are an annotated gap, never a 0 bar.
* :func:`yield_funnel`: the N4 yield funnel per model and condition.
* :func:`vad_sweep`: each segment-only score against each swept detector setting (``vad.sweep``).
* :func:`conversation_timeline`: one conversation on a seconds axis: speakers' turns by label,
  the duty preamble, the model's speech, the scoring windows and the scheduler's decisions.

The ``*_data`` helpers return exactly what is plotted, for tests and for other renderers.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.metrics.scores import SCORE_TITLES, SCORES
from harness.products.infer import InferRecord
from harness.scenes.schema import CONDITIONS, Label, Scene

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
CONDITION_COLOURS = {"explicit": "#2b6cb0", "implicit": "#dd8452"}
LABEL_COLOURS = {"T": "#2b6cb0", "N1": "#805ad5", "N2": "#718096", "N3": "#b7791f", "N4_Q": "#dd6b20",
                 "N4_R": "#2c7a7b"}
PREAMBLE_COLOUR = "#a0aec0"
MODEL_COLOUR = "#1a202c"
PASS_COLOUR, FAIL_COLOUR = "#38a169", "#e53e3e"
T_WINDOW_COLOUR, N4_WINDOW_COLOUR = "#90cdf4", "#fbd38d"
EVENT_KINDS = ("t_end_silent", "t_end_speaking", "onset", "endpoint", "no_onset", "cap", "n4_answer_window",
               "stream_end")
YIELD_TEXT = {"yield": "yield", "still_voicing": "still voicing", "resumed": "resumed",
              "excluded_spoke_during_question": "excl.: spoke during Q", "excluded_no_answer": "excl.: no answer",
              "excluded_stopped_before_r": "excl.: stopped before N4_R"}


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _fits(text: str, width_s: float, x_end: float, fig_px: float = 1800 * 0.9, char_px: float = 4.6) -> bool:
    """Whether ``text`` at 7.5 pt fits in ``width_s`` seconds of an axis spanning ``x_end`` seconds."""
    return width_s * fig_px / max(x_end, 1e-9) >= (len(text) + 1) * char_px


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of ``successes / n`` (scipy's ``binomtest(...).proportion_ci``)."""
    from scipy.stats import binomtest

    if n <= 0:
        raise ValueError("n must be > 0")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


# --------------------------------------------------------------------------- score bars


def score_bar_data(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One dict per (score, model, condition) in plotting order.

    ``height`` is the rate (``None`` when the entry is n/a: nothing is drawn),
    ``lo``/``hi`` the 95 % Wilson interval (``None`` without a bar) and ``note`` the text drawn
    in a gap (``"n/a\\nn=12"`` or ``"not\\nscored"``).
    """
    out = []
    for score in SCORES:
        for model in metrics:
            for cond in CONDITIONS:
                e = metrics[model][cond][score]
                item: dict[str, Any] = {"score": score, "model": model, "condition": cond, "n": e["n"],
                                        "successes": e["successes"], "status": e["status"], "height": None,
                                        "lo": None, "hi": None, "note": None}
                if e["rate"] is None or not e["n"]:
                    item["note"] = f"n/a\nn={e['n']}"
                else:
                    item["height"] = float(e["rate"])
                    item["lo"], item["hi"] = wilson_interval(e["successes"], e["n"])
                out.append(item)
    return out


def score_bars(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> bytes:
    """Grouped bars of every score per model (explicit | implicit) with 95 % Wilson intervals."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    data = score_bar_data(metrics)
    models = list(metrics)
    n_m = max(len(models), 1)
    width = 0.38
    fig = Figure(figsize=(max(12.0, 3 * 1.1 * n_m + 1.5), 7.5), layout="constrained")
    axes = fig.subplots(2, 3, sharey=True).ravel()
    for ax, score in zip(axes, SCORES, strict=True):
        x = np.arange(len(models))
        for ci, cond in enumerate(CONDITIONS):
            off = (ci - 0.5) * width
            for mi, model in enumerate(models):
                d = next(d for d in data if (d["score"], d["model"], d["condition"]) == (score, model, cond))
                xc = x[mi] + off
                if d["height"] is None:
                    ax.add_patch(Rectangle((xc - width / 2, 0), width, 1.0, fill=False, hatch="//",
                                           edgecolor="#cbd5e0", linewidth=0.6))
                    ax.text(xc, 0.5, d["note"], ha="center", va="center", fontsize=7.5, color="#4a5568")
                    continue
                h = d["height"]
                ax.bar(xc, h, width, color=CONDITION_COLOURS[cond], edgecolor="white", linewidth=0.5)
                ax.errorbar(xc, h, yerr=[[h - d["lo"]], [d["hi"] - h]], fmt="none", ecolor="#1a202c",
                            elinewidth=1, capsize=3)
                ax.text(xc, min(d["hi"] + 0.02, 1.09), f"{h:.2f}", ha="center", va="bottom", fontsize=7.5)
        ax.set_title(SCORE_TITLES[score], fontsize=10.5)
        ax.set_xticks(x, models, fontsize=9)
        ax.set_xlim(-0.6, len(models) - 0.4)
        ax.set_ylim(0, 1.15)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.grid(axis="y", color="#edf2f7", linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    for ax in axes[::3]:
        ax.set_ylabel("rate")
    fig.legend(handles=[Patch(color=CONDITION_COLOURS[c], label=c) for c in CONDITIONS]
               + [Patch(facecolor="white", edgecolor="#cbd5e0", hatch="//", label="n/a (no bar)")],
               loc="outside upper center", ncol=3, frameon=False, fontsize=9.5)
    return _png(fig)


# --------------------------------------------------------------------------- yield funnel

FUNNEL_STAGES = (
    ("events", "N4 events"),
    ("already_speaking_at_q_start", "already speaking at Q start (excl.)"),
    ("started_during_q", "started during Q (excl.)"),
    ("first_spoke_after_q", "first spoke within 3 s after Q"),
    ("still_speaking_at_r_start", "still speaking at N4_R start (eligible)"),
    ("yield", "yield successes"),
)


def yield_funnel_data(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, list[int]]]:
    """``{model: {condition: [count per FUNNEL_STAGES]}}``: the plotted counts."""
    out: dict[str, dict[str, list[int]]] = {}
    for model, conds in metrics.items():
        out[model] = {}
        for cond in CONDITIONS:
            y = conds[cond]["answering_window_yield"]
            counts = {**y["funnel"], "yield": y["successes"] or 0}
            out[model][cond] = [int(counts[k]) for k, _ in FUNNEL_STAGES]
    return out


def yield_funnel(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> bytes:
    """Horizontal bars of the yield funnel, one panel per model, explicit and implicit per stage."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    data = yield_funnel_data(metrics)
    models = list(metrics)
    n_m = max(len(models), 1)
    fig = Figure(figsize=(2.0 + 3.4 * n_m, 4.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, n_m, sharey=True, squeeze=False).ravel())
    top = max([max(v) for c in data.values() for v in c.values()] + [1])
    y = np.arange(len(FUNNEL_STAGES))
    h = 0.38
    for ax, model in zip(axes, models, strict=False):
        for ci, cond in enumerate(CONDITIONS):
            vals = data[model][cond]
            yc = y + (ci - 0.5) * h
            ax.barh(yc, vals, h, color=CONDITION_COLOURS[cond], label=cond)
            for yy, v in zip(yc, vals, strict=True):
                ax.text(v + top * 0.01, yy, str(v), va="center", fontsize=8)
        ax.set_title(model, fontsize=10.5)
        ax.set_xlim(0, top * 1.15)
        ax.invert_yaxis()
        ax.grid(axis="x", color="#edf2f7", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.set_xlabel("events")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0].set_yticks(y, [t for _, t in FUNNEL_STAGES], fontsize=9)
    fig.legend(handles=[Patch(color=CONDITION_COLOURS[c], label=c) for c in CONDITIONS],
               loc="outside upper center", ncol=2, frameon=False, fontsize=9.5)
    return _png(fig)


SWEEP_SETTINGS = {"threshold": "threshold (probability)", "min_speech_s": "minimum speech (s)",
                  "min_silence_s": "minimum silence (s)"}
SWEEP_SCORE_TITLES = {"fresh_onset_response_rate": SCORE_TITLES["fresh_onset_response_rate"],
                      "response_presence": SCORE_TITLES["response_presence"],
                      "acoustic_silence_preservation": "Silence preservation (acoustic only)",
                      "answering_window_yield": SCORE_TITLES["answering_window_yield"],
                      "window_response": SCORE_TITLES["window_response"]}
SWEEP_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def vad_sweep_data(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[tuple[str, str], list]]:
    """``{(score, setting): {(model, condition): [(value, rate), ...]}}`` sorted by value, rates
    ``None`` where ``n`` was 0: the plotted points of :func:`vad_sweep`."""
    out: dict[tuple[str, str], dict[tuple[str, str], list]] = {}
    for r in rows:
        rate = r.get("rate")
        rate = None if rate is None or (isinstance(rate, float) and math.isnan(rate)) else float(rate)
        out.setdefault((r["score"], r["setting"]), {}).setdefault((r["model"], r["condition"]), []).append(
            (float(r["value"]), rate))
    for series in out.values():
        for pts in series.values():
            pts.sort()
    return out


def vad_sweep(rows: Sequence[Mapping[str, Any]], configured: Mapping[str, float] | None = None) -> bytes:
    """Each segment-only score against each swept detector setting (``sweep.parquet`` rows of
    every model, with a ``model`` column): one panel per (score, setting), a line per model and
    condition (colour: condition, marker: model); ``configured`` values (the run's rules) are
    marked with a dotted line. A fixed grid of 5 scores x 3 settings; an unswept setting's
    column says so."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    data = vad_sweep_data(rows)
    models = sorted({m for series in data.values() for m, _ in series})
    fig = Figure(figsize=(13.0, 15.0), layout="constrained")
    axes = fig.subplots(len(SWEEP_SCORE_TITLES), len(SWEEP_SETTINGS), squeeze=False)
    for i, (score, title) in enumerate(SWEEP_SCORE_TITLES.items()):
        for j, (setting, label) in enumerate(SWEEP_SETTINGS.items()):
            ax = axes[i, j]
            series = data.get((score, setting), {})
            for (model, cond), pts in sorted(series.items()):
                xs = [x for x, y in pts if y is not None]
                ax.plot(xs, [y for _, y in pts if y is not None], color=CONDITION_COLOURS.get(cond, "#4a5568"),
                        marker=SWEEP_MARKERS[models.index(model) % len(SWEEP_MARKERS)], linewidth=1.2,
                        markersize=4)
            if not series:
                ax.text(0.5, 0.5, "not swept", ha="center", va="center", transform=ax.transAxes, color="#718096")
            elif configured and setting in configured:
                ax.axvline(configured[setting], color="#718096", linestyle=":", linewidth=1)
            ax.set_ylim(-0.03, 1.03)
            ax.grid(color="#edf2f7", linewidth=0.8)
            ax.set_axisbelow(True)
            if j == 0:
                ax.set_ylabel(title, fontsize=9)
            if i == len(SWEEP_SCORE_TITLES) - 1:
                ax.set_xlabel(label, fontsize=9)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
    handles = [Line2D([], [], color=CONDITION_COLOURS[c], label=c) for c in CONDITIONS]
    handles += [Line2D([], [], color="#4a5568", marker=SWEEP_MARKERS[k % len(SWEEP_MARKERS)], linestyle="",
                       label=m) for k, m in enumerate(models)]
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    return _png(fig)


def report_figures(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]],
                   sweep: Sequence[Mapping[str, Any]] = (), configured: Mapping[str, float] | None = None,
                   ) -> dict[str, bytes]:
    """The figures :func:`harness.report.markdown.render_html` embeds, by name. ``sweep``: the
    ``sweep.parquet`` rows of every model with a ``model`` column (``vad.sweep``; none: no sweep
    figure), ``configured``: the run's values of the swept settings."""
    figs = {"score_bars": score_bars(metrics), "yield_funnel": yield_funnel(metrics)}
    if sweep:
        figs["vad_sweep"] = vad_sweep(sweep, configured)
    return figs


# --------------------------------------------------------------------------- conversation timeline


def _opt(x: Any) -> int | None:
    """An optional sample time from a row (``None``/NaN, e.g. from parquet, mean absent)."""
    if x is None:
        return None
    if isinstance(x, float) and math.isnan(x):
        return None
    return int(x)


def _yield_text(row: Mapping[str, Any]) -> str:
    if row["yield_outcome"] == "excluded_spoke_during_question" and row.get("already_speaking_at_q_start"):
        return "excl.: already speaking"
    return YIELD_TEXT.get(row["yield_outcome"], row["yield_outcome"])


def timeline_data(scene: Scene, record: InferRecord, segments: Any, rows: Sequence[Mapping[str, Any]],
                  sample_rate: int, fresh_onset_window_s: float = 5.0) -> dict[str, Any]:
    """Everything :func:`conversation_timeline` draws, in seconds.

    Returns a dict with ``lanes`` (top to bottom), ``turns`` (lane, start, end, label, turn),
    ``preamble`` ((start, end) or ``None``), ``speech`` (model segments), ``windows`` (kind,
    start, end, colour, text), ``yield`` (per N4 event), ``events`` (scheduler decisions) and
    ``end`` (the x limit).
    """
    sr = float(sample_rate)
    segs = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    place = {p.turn: (p.start / sr, p.end / sr) for p in record.placements}
    turns = [{"lane": t.speaker, "start": place[i][0], "end": place[i][1], "label": t.label.value, "turn": i}
             for i, t in enumerate(scene.turns) if i in place]
    windows, yields = [], []
    for r in rows:
        if r["kind"] == "silence":
            ok = bool(r["silent"])
            windows.append({"kind": "silence", "start": r["start"] / sr, "end": r["window_end"] / sr,
                            "colour": PASS_COLOUR if ok else FAIL_COLOUR, "passed": ok, "turn": r["turn"],
                            "text": f"{r['label']} ok" if ok else f"{r['label']} {r['speech_s']:.2f} s",
                            "short": "ok" if ok else "fail"})
        elif r["kind"] == "T":
            onset = _opt(r.get("onset"))
            fresh = bool(r["fresh_onset"])
            text = "T: fresh onset" if fresh else ("T: speaking at end" if r["speaking_at_end"] else "T: no onset")
            windows.append({"kind": "T", "start": r["end"] / sr, "end": r["window_end"] / sr,
                            "colour": T_WINDOW_COLOUR, "passed": fresh, "turn": r["turn"],
                            "text": f"{text} ({r['decision']})", "short": text,
                            "onset": None if onset is None else onset / sr,
                            "onset_limit": r["end"] / sr + fresh_onset_window_s})
        elif r["kind"] == "N4":
            windows.append({"kind": "N4", "start": r["start"] / sr, "end": r["r_start"] / sr,
                            "colour": N4_WINDOW_COLOUR, "passed": bool(r["window_response"]), "turn": r["turn"],
                            "text": "N4: answered" if r["window_response"] else "N4: no answer",
                            "short": "N4 ok" if r["window_response"] else "N4 none"})
            yields.append({"answer_window": (r["end"] / sr, r["r_start"] / sr), "r_start": r["r_start"] / sr,
                           "deadline": r["deadline"] / sr, "observation_end": r["observation_end"] / sr,
                           "outcome": r["yield_outcome"], "text": _yield_text(r),
                           "eligible": bool(r["yield_eligible"])})
    events = []
    for e in record.events:
        if e.kind in EVENT_KINDS:
            events.append({"kind": e.kind, "t": e.t / sr, "at": None if e.at is None else e.at / sr,
                           "reason": e.reason, "turn": e.turn})
    ends = [(record.n_samples or 0) / sr, *(p[1] for p in place.values()),
            *(segs[:, 1] / sr if segs.size else []), *(w["end"] for w in windows),
            *(y["observation_end"] for y in yields), *(e["t"] for e in events)]
    return {"lanes": ["scheduler", "windows", "yield", "Aria (model)", *scene.speakers, "preamble"],
            "turns": turns, "preamble": place.get(None), "speech": (segs / sr).tolist(), "windows": windows,
            "yield": yields, "events": events, "end": max(ends)}


def conversation_timeline(scene: Scene, record: InferRecord, segments: Any, rows: Sequence[Mapping[str, Any]],
                          sample_rate: int, fresh_onset_window_s: float = 5.0,
                          geometry: dict[str, float] | None = None) -> bytes:
    """The debugging picture of one conversation (PNG, 1800 x 720 px).

    Args:
        scene: the script.
        record: the infer record (``placements``, ``events``, ``n_samples``).
        segments: the model's speech segments, ``int[k, 2]`` in samples.
        rows: this conversation's per-event rows (:func:`harness.metrics.outcomes.conversation_outcomes`).
        sample_rate: samples per second of the timeline.
        fresh_onset_window_s: drawn as the dotted limit of the fresh-onset window after T.
        geometry: when given, filled with where the time axis lies in the image, as fractions of
            its width and height from the bottom left (``x0``, ``x1``, ``y0``, ``y1``), and the
            seconds at its two ends (``t0``, ``t1``): for a playhead drawn over the picture.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    d = timeline_data(scene, record, segments, rows, sample_rate, fresh_onset_window_s)
    lanes = d["lanes"]
    y = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}  # first lane on top
    fig = Figure(figsize=(18, 7.2), layout="constrained")
    x_end = d["end"] * 1.01 + 0.5
    ax = fig.subplots()
    bar_h = 0.62

    def bar(lane: str, a: float, b: float, colour: str, text: str | tuple[str, ...] = (), edgecolor: str = "white",
            textcolor: str = "white") -> None:
        ax.add_patch(Rectangle((a, y[lane] - bar_h / 2), max(b - a, 1e-3), bar_h, facecolor=colour,
                               edgecolor=edgecolor, linewidth=0.6))
        fitting = next((t for t in ((text,) if isinstance(text, str) else text) if _fits(t, b - a, x_end)), None)
        if fitting:
            ax.text((a + b) / 2, y[lane], fitting, ha="center", va="center", fontsize=7.5, color=textcolor,
                    clip_on=True)

    if d["preamble"] is not None:
        a, b = d["preamble"]
        bar("preamble", a, b, PREAMBLE_COLOUR, "duty preamble (narrator)")
    for t in d["turns"]:
        bar(t["lane"], t["start"], t["end"], LABEL_COLOURS[t["label"]], t["label"])
    for a, b in d["speech"]:
        bar("Aria (model)", a, b, MODEL_COLOUR)
    for w in d["windows"]:
        a, b = w["start"], w["end"]
        ax.axvspan(a, b, color=w["colour"], alpha=0.07 if w["kind"] == "silence" else 0.12, linewidth=0, zorder=0)
        edge = ("#2f855a" if w["passed"] else "#c53030") if w["kind"] == "silence" else "#4a5568"
        ax.add_patch(Rectangle((a, y["windows"] - bar_h / 2), max(b - a, 1e-3), bar_h, facecolor=w["colour"],
                               alpha=0.85, edgecolor=edge, linewidth=0.8))
        text = next((t for t in (w["text"], w["short"]) if _fits(t, b - a, x_end)), None)
        if text:
            colour = "white" if w["kind"] == "silence" else "#1a202c"
            ax.text((a + b) / 2, y["windows"], text, ha="center", va="center", fontsize=7.2, color=colour,
                    clip_on=True)
        if w["kind"] == "T":
            ax.axvline(a, color="#2b6cb0", linewidth=0.9, linestyle="-", alpha=0.8)
            ax.plot([w["onset_limit"]] * 2, [y["windows"] - 0.45, y["windows"] + 0.45], color="#2b6cb0",
                    linestyle=":", linewidth=1.4)
            if w["onset"] is not None:
                ax.plot([w["onset"]], [y["Aria (model)"] + bar_h / 2 + 0.08], marker="v", color="#2b6cb0",
                        markersize=7)
    for yy in d["yield"]:
        a, b = yy["answer_window"]
        if not yy["eligible"]:
            bar("yield", a, b, "#e2e8f0", (yy["text"], "excluded", "excl."), edgecolor="#a0aec0", textcolor="#4a5568")
            continue
        bar("yield", a, b, N4_WINDOW_COLOUR, ("answer window", "answer"), edgecolor="#c05621", textcolor="#1a202c")
        oa, ob = yy["deadline"], yy["observation_end"]
        colour = PASS_COLOUR if yy["outcome"] == "yield" else FAIL_COLOUR
        ax.add_patch(Rectangle((oa, y["yield"] - bar_h / 2), max(ob - oa, 0.05), bar_h, facecolor=colour, alpha=0.35,
                               edgecolor=colour, hatch="///", linewidth=0.8))
        ax.axvline(oa, color="#1a202c", linestyle="--", linewidth=1.0)
        right = oa > 0.85 * x_end
        ax.text(oa - 0.1 if right else oa + 0.1, y["yield"] + bar_h / 2 + 0.02, f"deadline: {yy['text']}",
                fontsize=7.5, va="bottom", ha="right" if right else "left", color="#1a202c", clip_on=True)
    levels = (0.28, -0.02, -0.32)
    for k, e in enumerate(sorted(d["events"], key=lambda e: e["t"])):
        yl = y["scheduler"]
        colour = "#2b6cb0" if e["kind"] in ("t_end_silent", "t_end_speaking", "onset", "endpoint", "no_onset",
                                           "cap") else "#c05621" if e["kind"] == "n4_answer_window" else "#4a5568"
        ax.plot([e["t"]] * 2, [yl - 0.45, yl + 0.45], color=colour, linewidth=1.6)
        if e["at"] is not None and abs(e["at"] - e["t"]) > 1e-6:
            ax.plot([e["at"], e["t"]], [yl - 0.4, yl - 0.4], color=colour, linewidth=1.0, alpha=0.7)
            ax.plot([e["at"]], [yl - 0.4], marker="|", color=colour, markersize=6)
        ax.text(e["t"] + 0.1, yl + levels[k % 3], e["kind"], fontsize=7.5, va="center", ha="left", color=colour)
    end = d["end"]
    ax.set_xlim(0, x_end)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_yticks([y[n] for n in lanes], lanes, fontsize=9)
    ax.set_xlabel("seconds")
    step = 1 if end <= 30 else 2 if end <= 80 else 5 if end <= 200 else 10
    ax.set_xticks(np.arange(0, end + step, step))
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#edf2f7", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{scene.scene_id} ({scene.condition})", fontsize=11, loc="left")
    handles = [Patch(color=LABEL_COLOURS[lab.value], label=lab.value) for lab in Label]
    handles += [Patch(color=PREAMBLE_COLOUR, label="preamble"), Patch(color=MODEL_COLOUR, label="model speech"),
                Patch(color=PASS_COLOUR, label="silence window passed"),
                Patch(color=FAIL_COLOUR, label="silence window failed"),
                Patch(color=T_WINDOW_COLOUR, label="T response window"),
                Patch(color=N4_WINDOW_COLOUR, label="N4 answering window"),
                Patch(facecolor="white", edgecolor="#4a5568", hatch="///", label="yield observation"),
                Line2D([], [], color="#2b6cb0", linestyle=":", label="fresh-onset limit"),
                Line2D([], [], color="#1a202c", linestyle="--", label="yield deadline"),
                Line2D([], [], color="#2b6cb0", marker="v", linestyle="none", label="fresh onset")]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False, fontsize=8,
               handlelength=1.4, columnspacing=1.0)
    png = _png(fig)
    if geometry is not None:  # after drawing: constrained layout has placed the axes
        box = ax.get_position()
        geometry.update(x0=box.x0, x1=box.x1, y0=box.y0, y1=box.y1, t0=0.0, t1=x_end)
    return png
