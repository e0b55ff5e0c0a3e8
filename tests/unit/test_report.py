"""The report: one document model rendered as Markdown and single-file HTML, the figures, and
the per-conversation debugging page. Hand-made inputs only (nothing read from runs/).

The conversation fixture uses ProtocolSettings(sample_rate=1000): one sample is one millisecond.
"""

from __future__ import annotations

import base64
import re
import struct
from html.parser import HTMLParser

import numpy as np
import pytest

from harness.metrics.outcomes import conversation_outcomes
from harness.metrics.scores import SCORE_TITLES, SCORES
from harness.products.infer import InferRecord
from harness.protocol.scheduler import ProtocolSettings
from harness.report.conversation import (
    conversation_document,
    conversation_page,
    example_conversations,
    window_table,
)
from harness.report.document import Document, Paragraph, Section, Table, is_numeric, to_html, to_markdown
from harness.report.figures import (
    conversation_timeline,
    score_bar_data,
    score_bars,
    timeline_data,
    wilson_interval,
    yield_funnel,
    yield_funnel_data,
)
from harness.report.markdown import NO_COMPARISON, build_report, fmt, render_html, render_report
from harness.scenes.schema import Label, Scene, Target, Turn
from tests.fixtures.report_inputs import ARGS, CFG, ERRORS, INVALID, METRICS, PLAN, STATISTICS, STATS, entry
from tests.fixtures.runs import tiny_config

# -- one conversation ---------------------------------------------------------------------------
# preamble [0, 2000); N2 (B) [2500, 4000) window [2500, 4500); T (A) [4500, 6500);
# model answer [7070, 8000): fresh onset 0.57 s after T end, endpoint at 10000 (decided 10010);
# N1 (C) [10010, 11510) window to 12010; N4_Q (B) [12010, 14010), N4_R (B) [17010, 18510);
# N3 (C) [19010, 20010) window to 20510 (last turn: + turn gap).

PROTO = ProtocolSettings(sample_rate=1000)
SCENE = Scene("p7-explicit", "p7", "explicit", ("A", "B", "C"), (
    Turn("B", "The exam got moved to Wednesday.", Label.N2, Target.GROUP),
    Turn("A", "Aria, when is the exam?", Label.T, Target.ARIA),
    Turn("C", "Aria helped me yesterday.", Label.N1, Target.GROUP),
    Turn("B", "Aria, how far is the moon?", Label.N4_Q, Target.ARIA, answer="Far."),
    Turn("B", "Never mind, Aria.", Label.N4_R, Target.ARIA),
    Turn("C", "Hmm, where are my keys?", Label.N3, Target.NONE),
), gold_answer="Wednesday")
PLACEMENTS = [(None, 0, 2000), (0, 2500, 1500), (1, 4500, 2000), (2, 10010, 1500), (3, 12010, 2000),
              (4, 17010, 1500), (5, 19010, 1000)]
RECORD_JSON = {
    "status": "ok", "n_samples": 22010, "sample_rate": 1000, "scene_id": SCENE.scene_id,
    "placements": [{"turn": t, "start": s, "length": n} for t, s, n in PLACEMENTS],
    "events": [
        {"kind": "preamble_start", "t": 0},
        {"kind": "turn_start", "reason": "N2", "t": 2500, "turn": 0},
        {"kind": "turn_start", "reason": "T", "t": 4500, "turn": 1},
        {"at": 6500, "kind": "t_end_silent", "reason": "model silent at T end: 5.0 s onset window", "t": 6520,
         "turn": 1},
        {"at": 7070, "kind": "onset", "reason": "fresh onset 0.570 s after T", "t": 7190, "turn": 1},
        {"at": 10000, "kind": "endpoint", "reason": "2.0 s of silence after the response", "t": 10010, "turn": 1},
        {"kind": "turn_start", "reason": "N1", "t": 10010, "turn": 2},
        {"kind": "turn_start", "reason": "N4_Q", "t": 12010, "turn": 3},
        {"at": 17010, "kind": "n4_answer_window", "reason": "N4_Q ended: 3.0 s of silence, then N4_R", "t": 14010,
         "turn": 3},
        {"kind": "turn_start", "reason": "N4_R", "t": 17010, "turn": 4},
        {"kind": "turn_start", "reason": "N3", "t": 19010, "turn": 5},
        {"kind": "stream_end", "reason": "2.0 s after the last turn", "t": 22010},
    ],
}
RECORD = InferRecord.from_dict(RECORD_JSON)
# 1.24 s of speech inside the N2 window; the T answer; an N4 answer that stops before the deadline
SEGMENTS = np.array([[2800, 4040], [7070, 8000], [14500, 17500]], dtype=np.int64)


def rows_for(segments: np.ndarray) -> list[dict]:
    return [{"model": "alpha", **r} for r in conversation_outcomes(SCENE, RECORD, segments, PROTO)]


# -- helpers ------------------------------------------------------------------------------------


class _Cells(HTMLParser):
    """Text of every <th>/<td> in document order, and every src/href attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.links: list[tuple[str, str]] = []
        self.ids: set[str] = set()
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href"):
                self.links.append((k, v or ""))
            if k == "id":
                self.ids.add(v or "")
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse_html(text: str) -> _Cells:
    p = _Cells()
    p.feed(text)
    return p


def markdown_cells(md: str) -> list[str]:
    cells = []
    for line in md.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(?:---\|)+", line):
            parts = re.split(r"(?<!\\)\|", line)[1:-1]
            cells += [c.strip().replace("\\|", "|") for c in parts]
    return cells


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


# -- report: Markdown and HTML from one document -------------------------------------------------


@pytest.fixture(scope="module")
def figures() -> dict[str, bytes]:
    return {"score_bars": score_bars(METRICS), "yield_funnel": yield_funnel(METRICS)}


@pytest.fixture(scope="module")
def report_html(figures) -> str:
    return render_html(*ARGS, figures)


def test_markdown_report_tables_and_formats():
    md = render_report(*ARGS)
    assert md.startswith("# Duplex-MPE report: run `unit`\n\nModels: `alpha`, `beta`.\nEach score")
    assert ("| alpha | 0.8438 (n=32) | n/a (n=20) | 0.9237 (n=249) | 0.9118 (n=34) | 0.9375 (n=32) | n/a (n=12) "
            "| 1 |") in md
    assert "| beta | explicit | 40 | 3 | 2 | 35 | 34 | 6 | 2 | 1 |" in md
    # the breakdown follows the header's category order even when the JSON keys come sorted
    assert "| model | condition | device-directed | human-directed | statements | self-talk |" in md
    assert "| alpha | explicit | 1/28 | 2/99 | 3/80 | 4/42 |" in md
    # a '|' inside a cell is escaped, so the errors table keeps its three columns
    assert "| beta | p00001-explicit | model raised: shape (2, 3) \\| not (n,) |" in md
    assert "![" not in md  # no figure links in report.md
    assert md.endswith("`unit/reduce/ee`\n")


def test_hosted_settings_refused_pairs_and_api_spend_are_reported():
    from harness.stages.reduce import refuse_mixed_turn_taking, turn_taking_refusal

    differs = "turn_detection.silence_duration_ms: asked 500, acknowledged 800"
    manual = {"provider": "openai", "model": "openai/gpt-realtime", "settings": {"turn_detection": None},
              "acknowledged": {"as_asked": 60, "differs": 4, "unacknowledged": 0, "differences": {differs: 4}}}
    vad = {"provider": "openai", "model": "openai/gpt-realtime-mini",
           "settings": {"turn_detection": {"type": "server_vad", "create_response": True}}, "acknowledged": None}
    gemini = {"provider": "google", "model": "google/x", "settings": {"proactive_audio": False}}
    hosted = {"alpha": manual, "beta": vad, "gamma": gemini}
    assert turn_taking_refusal("alpha", "beta", hosted) == ("turn-taking settings differ (turn_detection) between "
                                                            "two openai models")
    assert turn_taking_refusal("alpha", "gamma", hosted) is None  # other providers: each its own protocol
    assert turn_taking_refusal("alpha", "oracle", hosted) is None
    assert turn_taking_refusal("alpha", "beta", {"alpha": manual, "beta": {**vad, "settings": manual["settings"]}}) \
        is None
    st = {**STATISTICS, "between_models": {c: [dict(t) for t in ts] for c, ts in STATISTICS["between_models"].items()},
          "silence_bootstrap": {c: [dict(r) for r in rs] for c, rs in STATISTICS["silence_bootstrap"].items()},
          "turn_taking": {"alpha": manual, "beta": vad},
          "pacing": {"max_lag_s": 0.5, "models": {
              "alpha": {"conversations": 64, "worst_lag_s": 2.65, "median_lag_s": 0.02, "behind_s": 3.2,
                        "over": ["p00003-implicit"]},
              "beta": {"conversations": 63, "worst_lag_s": 0.1, "median_lag_s": 0.01, "behind_s": 0.2, "over": []}}},
          "api_cost": {"table": "prices v9 as of 2030-01-01", "rows": [
              {"stage": "infer", "who": "alpha", "priced_as": "openai/gpt-realtime", "count": 64,
               "unit": "conversations", "tokens_in": 1_000_000, "tokens_out": 20_000, "usd": 1.5, "priced_usd": 1.5,
               "unpriced": None, "lower_bound": 2, "upper_bound": 0},
              {"stage": "infer", "who": "beta", "priced_as": "openai/gpt-realtime-mini", "count": 63,
               "unit": "conversations", "tokens_in": 10, "tokens_out": 2, "usd": None, "priced_usd": 0.0,
               "unpriced": "openai/gpt-realtime-mini is not in prices v9", "lower_bound": 0, "upper_bound": 3}]}}
    refuse_mixed_turn_taking(st, st["turn_taking"])
    t = st["between_models"]["explicit"][0]
    assert t["refused"] and t["p"] is None and not t["significant"]
    md = render_report(CFG, METRICS, st, STATS, ERRORS, INVALID, PLAN)
    assert ("| explicit | Fresh-onset response rate | alpha | beta | 32 | 22 | 0 | refused | refused: turn-taking "
            "settings differ (turn_detection) between two openai models |") in md
    assert "| explicit | alpha | beta | 32 | refused | refused: turn-taking settings differ" in md
    assert (f"| alpha | openai/gpt-realtime | turn_detection: null (manual) | as asked: 60; **other settings: 4** "
            f"({differs} ×4) |") in md
    assert "| beta | openai/gpt-realtime-mini | turn_detection: type=server_vad, create_response=true | no records |" \
        in md
    assert "| alpha | 64 | 0.020 | 2.650 | 3.2 | **1**: `p00003-implicit` |" in md
    assert "| beta | 63 | 0.010 | 0.100 | 0.2 | 0 |" in md and "over 0.5 s (metrics.max_lag_s)" in md
    assert ("| infer | alpha | openai/gpt-realtime | 64 conversations | 1,000,000 | 20,000 | 1.5000 (a lower bound: "
            "2 ended with usage still owed) |") in md
    assert ("| infer | beta | openai/gpt-realtime-mini | 63 conversations | 10 | 2 | unpriced: "
            "openai/gpt-realtime-mini") in md
    assert "(an upper bound: 3 with tokens of no stated modality at the dearest rate) |" in md
    assert "| total |  |  |  |  |  | 1.5000 + unpriced |" in md and "priced with prices v9 as of 2030-01-01" in md


def test_fmt():
    assert fmt(entry(19, 20, "scored")) == "0.9500 (n=20)"
    assert fmt(entry(7, 12, "n/a")) == "n/a (n=12)"


def test_markdown_and_html_have_the_same_table_cells(report_html):
    md_cells = markdown_cells(render_report(*ARGS))
    html_cells = parse_html(report_html).cells
    assert md_cells == html_cells
    rates = set(re.findall(r"\d\.\d{4} \(n=\d+\)|n/a \(n=\d+\)", render_report(*ARGS)))
    assert {"0.8438 (n=32)", "n/a (n=12)", "n/a (n=20)"} <= rates
    for r in rates:
        assert r in report_html


def test_html_is_a_single_file(report_html, figures):
    p = parse_html(report_html)
    assert "<script" not in report_html and "<link" not in report_html and "@import" not in report_html
    srcs = [v for k, v in p.links if k == "src"]
    hrefs = [v for k, v in p.links if k == "href"]
    assert len(srcs) == 2 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert {base64.b64decode(s.split(",", 1)[1]) for s in srcs} == set(figures.values())
    assert hrefs and all(h.startswith("#") and h[1:] in p.ids for h in hrefs)  # a table of contents
    assert re.search(r'<td class="num">0\.8438 \(n=32\)</td>', report_html)  # numbers right-aligned
    assert "<td>alpha</td>" in report_html


def test_html_without_figures_has_no_images():
    text = render_html(*ARGS)
    assert "<img" not in text and "<figure" not in text


def test_document_renderers_agree_on_blocks():
    doc = Document("T `x`", [Paragraph("a **b** <c>")],
                   [Section("One", [Table(("k", "v"), [("a|b", "1.5")], caption="cap")]), Section("One", [])])
    md, text = to_markdown(doc), to_html(doc)
    assert md == "# T `x`\n\na **b** <c>\n\n## One\n\n| k | v |\n|---|---|\n| a\\|b | 1.5 |\n\ncap\n\n## One\n"
    assert "<strong>b</strong> &lt;c&gt;" in text and "<code>x</code>" in text
    assert 'href="#one"' in text and 'href="#one-2"' in text and '<td class="num">1.5</td>' in text
    with pytest.raises(ValueError, match="cells"):
        Table(("a", "b"), [("1",)])
    assert is_numeric("2.794e-09 (m=6) *") and is_numeric("[-1.0000, +0.5000]") and not is_numeric("0 (N2, C)")


def test_build_report_places_figures(figures):
    doc = build_report(*ARGS, figures)
    names = [b.name for s in doc.sections for b in s.blocks if hasattr(b, "png")]
    assert names == ["score_bars", "yield_funnel"]
    assert "![" in to_markdown(doc, figure_prefix="figures/")


# -- figures --------------------------------------------------------------------------------------


def test_report_figures_are_pngs_of_fixed_size(figures):
    assert png_size(figures["score_bars"]) == (1200, 750)
    assert png_size(figures["yield_funnel"]) == (880, 420)
    assert all(len(p) > 20_000 for p in figures.values())


def test_na_entries_are_gaps_not_zero_bars():
    data = score_bar_data(METRICS)
    assert len(data) == 6 * 2 * 2
    by = {(d["score"], d["model"], d["condition"]): d for d in data}
    gap = by[("window_response", "alpha", "explicit")]
    assert (gap["height"], gap["lo"], gap["note"]) == (None, None, "n/a\nn=12")
    assert by[("conditional_answer_accuracy", "beta", "implicit")]["note"] == "n/a\nn=20"
    assert by[("answering_window_yield", "beta", "explicit")]["height"] is None
    drawn = [d for d in data if d["height"] is not None]
    assert all(d["status"] == "scored" and d["lo"] <= d["height"] <= d["hi"] for d in drawn)
    gaps = [d for d in data if d["height"] is None]
    assert all(d["status"] == "n/a" and d["note"] for d in gaps)
    fo = by[("fresh_onset_response_rate", "alpha", "explicit")]
    assert fo["height"] == pytest.approx(27 / 32)
    # Wilson's closed form for 27/32 at z = 1.959964: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    assert (fo["lo"], fo["hi"]) == pytest.approx((0.6824585, 0.9313558), abs=1e-7)
    lo, hi = wilson_interval(32, 32)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(0.8928, abs=1e-4)


def test_yield_funnel_data():
    d = yield_funnel_data(METRICS)
    assert d["alpha"]["explicit"] == [40, 3, 2, 35, 34, 31]
    assert d["beta"]["implicit"][-1] == 6


def test_timeline_png_and_data():
    rows = rows_for(SEGMENTS)
    png = conversation_timeline(SCENE, RECORD, SEGMENTS, rows, 1000)
    assert png_size(png) == (1800, 720) and len(png) > 30_000
    d = timeline_data(SCENE, RECORD, SEGMENTS, rows, 1000)
    assert d["lanes"] == ["scheduler", "windows", "yield", "Aria (model)", "A", "B", "C", "preamble"]
    assert d["preamble"] == (0.0, 2.0)
    sil = [w for w in d["windows"] if w["kind"] == "silence"]
    # the N1 window right after T starts at the T decision's rule time (10.00 s), where the T window ends
    assert [(w["start"], w["end"], w["passed"]) for w in sil] == [(2.5, 4.5, False), (10.0, 12.01, True),
                                                                     (19.01, 20.51, True)]
    (t,) = [w for w in d["windows"] if w["kind"] == "T"]
    assert (t["start"], t["end"], t["onset"], t["onset_limit"]) == (6.5, 10.0, 7.07, 11.5)
    (y,) = d["yield"]
    assert (y["deadline"], y["outcome"]) == (19.01, "yield")
    assert [e["kind"] for e in d["events"]] == ["t_end_silent", "onset", "endpoint", "n4_answer_window",
                                                "stream_end"]


# -- the conversation page ------------------------------------------------------------------------


def test_conversation_page_explains_every_window():
    rows = rows_for(SEGMENTS)
    page = conversation_page("alpha", SCENE, RECORD, SEGMENTS, rows, 1000)
    p = parse_html(page)
    assert all(v.startswith(("data:image/png;base64,", "#")) for _, v in p.links)
    assert "failed: 1.24 s of model speech in the window" in page
    assert "fresh onset 0.57 s after T end" in page
    assert "window closed by endpoint at 10.00 s" in page
    assert "yield: success, silent at the deadline (19.01 s, N4_R start + 2 s)" in page
    assert "passed: no model speech in the window" in page
    assert "answered: first speech 0.49 s after the question ended" in page
    # the event log, in seconds with reasons
    assert "fresh onset 0.570 s after T" in page and "<td>n4_answer_window</td>" in page
    assert '<td class="num">7.19</td><td class="num">7.07</td><td>onset</td>' in page


def test_conversation_windows_for_a_model_that_never_stops():
    segments = np.array([[1000, 21000]], dtype=np.int64)
    rec = InferRecord.from_dict({**RECORD_JSON, "events": [
        e if e["kind"] != "t_end_silent" else
        {**e, "kind": "t_end_speaking", "reason": "model speech covers the end of T"}
        for e in RECORD_JSON["events"] if e["kind"] != "onset"]})
    rows = conversation_outcomes(SCENE, rec, segments, PROTO)
    table = window_table(SCENE, segments, rows, 1000)
    why = {w["label"]: w["why"] for w in table}
    assert why["N2"] == "failed: 2.00 s of model speech in the window (speech already running at the turn's start, " \
                        "since 1.00 s)"
    assert why["T (response window)"].startswith("no fresh onset: model speech already covers T's end")
    assert why["N4_R (yield)"] == "yield: excluded, already speaking at question start"
    assert [w["outcome"] for w in table if w["label"] == "N1"] == ["failed"]
    doc = conversation_document("babble", SCENE, rec, segments, rows, 1000, figure=False)
    assert "silence windows passed: **0/3**" in to_markdown(doc)


def test_conversation_page_without_speech():
    segments = np.zeros((0, 2), dtype=np.int64)
    rec = InferRecord.from_dict({**RECORD_JSON, "events": [
        e if e["kind"] != "endpoint" else {**e, "kind": "no_onset", "at": 11500, "t": 11510}
        for e in RECORD_JSON["events"] if e["kind"] != "onset"]})
    rows = conversation_outcomes(SCENE, rec, segments, PROTO)
    md = to_markdown(conversation_document("silent", SCENE, rec, segments, rows, 1000, figure=False))
    assert "no fresh onset: no speech starts within 5 s after T end" in md
    assert "yield: excluded, no speech onset within 3.0 s after the question" in md
    assert "No model speech was detected." in md


def test_example_conversations():
    good = rows_for(SEGMENTS)
    bad = [{**r, "scene_id": "p0-explicit"} for r in
           conversation_outcomes(SCENE, RECORD, np.array([[1000, 21000]], dtype=np.int64), PROTO)]
    ex = example_conversations(good + bad)
    assert ex == {"silence_failed": ["p0-explicit"], "speaking_at_t_end": ["p0-explicit"],
                  "fresh_onset": ["p7-explicit"], "yield": ["p7-explicit"], "yield_excluded": ["p0-explicit"]}


def test_report_links_its_example_conversation_pages():
    examples = {"alpha": {"silence_failed": ["p00001-explicit"]}, "beta": {"yield": ["p00002-implicit"]}}
    md = render_report(*ARGS, examples=examples)
    assert "| alpha | silence failed | [p00001-explicit](conversations/alpha/p00001-explicit.html) |" in md
    html_page = render_html(*ARGS, examples=examples)
    assert '<a href="conversations/beta/p00002-implicit.html">p00002-implicit</a>' in html_page
    assert "Example conversations" not in render_report(*ARGS)


def test_inline_links_are_relative_only():
    from harness.report.document import inline_html

    assert inline_html("[a](x/y.html)") == '<a href="x/y.html">a</a>'
    assert "<a" not in inline_html("[a](javascript:alert(1))")  # nothing with a scheme becomes a link
    assert inline_html("`[a](b.html)`") == "<code>[a](b.html)</code>"


# -- what a reader must be able to trust ------------------------------------------------------------


def test_report_flags_suspect_models_and_counts_both_kinds_of_failure():
    md = render_report(*ARGS)
    assert "**Suspect output:** `beta`." in md
    assert ("| beta | evaluated | 63 | 0 | 0 | -66.0 | SUSPECT: no speech detected in any of its 63 conversations; "
            "output peak -66.0 dBFS stays below -60 dBFS in every conversation |") in md
    assert "| alpha | evaluated | 64 | 60 | 3 | -6.0 | ok |" in md
    # failed attempts (retried) and conversations in error are separate columns
    assert ("| model | infer shards | failed attempts (retried) | conversation errors in infer | "
            "conversations in error (all stages) |") in md
    assert "| beta | 1 | 2 | 1 | 1 |" in md and "| alpha | 1 | 0 | 0 | 0 |" in md


def test_report_states_the_comparison_family():
    md = render_report(*ARGS)
    assert ("Comparison family: 2 evaluated model(s) (`alpha`, `beta`), 1 pair(s) × 2 scores: **m = 2** per "
            "addressing condition. Not compared (self-test baselines and reference systems): `oracle` "
            "(baseline).") in md
    assert "Models: `alpha`, `beta`." in md  # oracle has no metrics here, so it is not listed as a model
    assert NO_COMPARISON not in md


def test_a_run_without_two_evaluated_models_says_so_instead_of_empty_tables():
    """The demo runs only self-test baselines: m = 0, and both comparison sections say why."""
    cfg, metrics, stats, *rest = ARGS
    stats = {**stats, "comparison_family": {"excluded": {"alpha": "baseline", "beta": "baseline"}, "m": 0,
                                            "models": [], "pairs": 0},
             "between_models": {c: [] for c in stats["between_models"]},
             "silence_bootstrap": {c: [] for c in stats["silence_bootstrap"]}}
    md = render_report(cfg, metrics, stats, *rest)
    assert "**m = 0**" in md and md.count(NO_COMPARISON) == 2
    assert "| condition | score | a | b |" not in md and "| condition | a | b | scenes |" not in md


def test_report_silence_explicit_vs_implicit_timing_bins_and_judge_counts():
    md = render_report(*ARGS)
    assert "| model | pairs | explicit − implicit | 95 % CI |" in md
    assert "| alpha | 32 | +0.0125 | [-0.0150, +0.0400] |" in md and "| beta | 0 | n/a | [n/a, n/a] |" in md
    titles = " | ".join(SCORE_TITLES[s] for s in SCORES)
    assert f"| model | bin | requests | {titles} |" in md
    # bin 0: every score n/a (n=10) except silence preservation 30/40
    assert ("| alpha | 0 | 10 | n/a (n=10) | n/a (n=10) | 0.7500 (n=40) | n/a (n=10) | n/a (n=10) | n/a (n=10) |"
            in md)
    assert "judged | empty transcript |" in md
    assert "| alpha | explicit | 0.9237 (19 occupied) | 0.9277 (18 occupied) |" in md
    assert md.count("(14 occupied) | 16 | 3 |") == 4  # 2 models x 2 conditions: 19 occupied at 0 ms = 16 + 3


def test_truncated_segment_is_marked_on_the_conversation_page():
    rows = rows_for(SEGMENTS)
    md = to_markdown(conversation_document("alpha", SCENE, RECORD, SEGMENTS, rows, 1000, figure=False,
                                           truncated=True))
    assert "| 2 | 14.50 | 17.50 | 3.00 | truncated |" in md and "| 0 | 2.80 | 4.04 | 1.24 | pause |" in md
    assert "**Truncated:** the model was still speaking when the stored output ended" in md
    plain = to_markdown(conversation_document("alpha", SCENE, RECORD, SEGMENTS, rows, 1000, figure=False))
    assert "| 2 | 14.50 | 17.50 | 3.00 | pause |" in plain and "**Truncated:**" not in plain


@pytest.mark.parametrize(("active", "n_frames"), [
    ((10, 40), 100),  # closed by a confirmed pause long before the end
    ((10, 75), 100),  # the pause is 25 frames (800 ms = 25 x 32 ms at 24 kHz): exactly confirmed at the end
    ((10, 76), 100),  # 24 frames of pause before the end: never confirmed
    ((10, 100), 100),  # speaking through the last frame
    ((3, 5), 100),  # too short to be a segment (64 ms < 120 ms)
])
def test_segment_entry_truncated_iff_the_pause_was_never_confirmed(active, n_frames):
    """``truncated`` (vad stage, segments.json) against the post-processor itself: a segment is
    truncated exactly when only the end-of-stream flush emitted it (it is missing without the flush)."""
    from harness.runtime.config import RunConfig
    from harness.stages.vad import segment_entry
    from harness.vad.segments import SegmentRules, SpeechTracker

    cfg = RunConfig()
    sr, frame = cfg.protocol.sample_rate, 768
    assert cfg.vad.rules == SegmentRules()  # 120 ms / 800 ms
    probs = np.zeros((1, n_frames), np.float32)
    probs[0, active[0]:active[1]] = 0.9
    flushed, unflushed = SpeechTracker(1, frame, cfg.vad.rules, sr), SpeechTracker(1, frame, cfg.vad.rules, sr)
    flushed.push(probs, final=True)
    unflushed.push(probs, final=False)
    entry = segment_entry(np.array(flushed.segments(0)), n_frames * frame, cfg)
    assert entry.segments.tolist() == [list(s) for s in flushed.segments(0)]
    assert entry.truncated == (len(flushed.segments(0)) > len(unflushed.segments(0)))
    assert entry.truncated == (active in ((10, 76), (10, 100)))


def test_status_counts_failed_attempts_and_flags_suspect_models(tmp_path):
    """``make status``: failed attempts and conversation errors are separate counts, and every
    suspect model of the reduce output is named (a baseline's flag is marked expected)."""
    from harness.runtime.plan import RunPlan
    from harness.runtime.status import run_status
    from harness.store.base import LocalStore, put_json

    cfg = tiny_config(tmp_path, "st", {"silent": {"target": "silent", "role": "baseline"}, "moshi": {"target": "x:Y"}})
    store, plan = LocalStore(str(tmp_path)), RunPlan.from_config(cfg)
    lay = plan.layout
    for model, errors in (("silent", 0), ("moshi", 1)):
        prefix = plan.infer[model]
        put_json(store, lay.file(prefix, "plan.json"), {"s0000": ["a", "b"], "s0001": ["c"]})
        put_json(store, lay.marker(lay.shard(prefix, "s0000")),
                 {"ok": 2 - errors, "error": errors, "device_hours": 0.5, "conversations": {}})
    moshi = lay.shard(plan.infer["moshi"], "s0001")
    for attempt in ("20260101T000000Z-aaaaaaaa", "20260101T000100Z-bbbbbbbb"):  # two failed attempts, no marker
        put_json(store, lay.failure(moshi, attempt), {"attempt": attempt, "reason": "CUDA out of memory",
                                                      "wall_s": 1.0, "device_hours": 0.25})
    put_json(store, lay.failure(lay.shard(plan.infer["silent"], "s0001"), "20260101T000000Z-cccccccc"),
             {"attempt": "20260101T000000Z-cccccccc", "reason": "node lost", "wall_s": 1.0, "device_hours": 0.1})
    put_json(store, lay.marker(lay.shard(plan.infer["silent"], "s0001")),  # retried, then complete
             {"ok": 1, "error": 0, "device_hours": 0.5, "conversations": {}})
    text = run_status(cfg, store)
    assert "silent     2/2 shards complete, 0 failed, 0 missing; 1 failed attempts; 0 conversation errors" in text
    assert "moshi      1/2 shards complete, 1 failed, 0 missing; 2 failed attempts; 1 conversation errors" in text
    assert "SUSPECT" not in text  # reduce has not run
    put_json(store, lay.file(plan.reduce, "statistics.json"), {"output_checks": {
        "silent": {"role": "baseline", "suspect": True,
                   "reasons": ["no speech detected in any of its 3 conversations"]},
        "moshi": {"role": "evaluated", "suspect": True,
                  "reasons": ["output peak -75.0 dBFS stays below -60 dBFS in every conversation"]}}})
    put_json(store, lay.marker(plan.reduce), {"models": ["silent", "moshi"]})
    lines = run_status(cfg, store).splitlines()
    assert ("  SUSPECT   silent     no speech detected in any of its 3 conversations (expected for a baseline that "
            "never speaks)") in lines
    assert "  SUSPECT   moshi      output peak -75.0 dBFS stays below -60 dBFS in every conversation" in lines


def test_judge_calls_through_the_scoring_flow_equal_judged_windows(tmp_path):
    """The threshold sweep's relation through the real scoring flow: every window occupied at 0 ms
    is transcribed; one with under 100 ms of clipped speech (the ASR input rule) has an empty
    transcript and fails without a judge call; so occupied at 0 ms = judge calls + empty transcripts."""
    from harness.metrics.analyses import silence_sweeps
    from harness.metrics.outcomes import with_verdict
    from harness.scoring.asr import Transcript, prepare_input
    from harness.scoring.cache import ContentCache
    from harness.scoring.flow import ConversationScorer
    from harness.scoring.judge import CORRECT, answer_verdict, window_verdict
    from harness.store.base import LocalStore

    class RecognisesAnything:  # "mm hm" for any audio the ASR input rule lets through
        name, version = "fake", "1"

        def transcribe(self, audio, sample_rate, vocabulary=()):
            y, _ = prepare_input(audio, sample_rate, vocabulary, 16_000)
            return Transcript("" if y is None else "mm hm")

    class RecordingJudge:
        def __init__(self):
            self.windows, self.answers = [], []

        def classify_window(self, text, context, speech_s, overlap_s):
            self.windows.append(text)
            return window_verdict("BACKCHANNEL", "BACKCHANNEL")

        def judge_answer(self, text, gold, question):
            self.answers.append(text)
            return answer_verdict(CORRECT, CORRECT)

    # N2 window [2500, 4500): 50 ms of speech; N1 window from 10000: 500 ms; N3 window: 300 ms; T answer
    segments = np.array([[2600, 2650], [7070, 8000], [10500, 11000], [19100, 19400]], dtype=np.int64)
    rows = conversation_outcomes(SCENE, RECORD, segments, PROTO)
    output = np.zeros(RECORD.n_samples, np.float32)
    for a, b in segments:
        output[a:b] = 0.3 * np.sin(np.arange(b - a, dtype=np.float32))
    judge = RecordingJudge()
    scorer = ConversationScorer(RecognisesAnything(), judge, ContentCache(LocalStore(str(tmp_path)), "asr"), 1000,
                                "preamble")
    verdicts = scorer.score(SCENE, rows, output, segments)
    merged = [with_verdict(r, verdicts) for r in rows]
    counts = silence_sweeps(merged)["judge_windows"]
    assert counts == {"occupied_0ms": 3, "judged": 2, "empty_transcript": 1}
    assert len(judge.windows) == counts["judged"] and judge.answers == ["mm hm"]
    assert counts["occupied_0ms"] == len(judge.windows) + counts["empty_transcript"]
    n2 = next(r for r in merged if r["kind"] == "silence" and r["label"] == "N2")
    assert (n2["transcript"], n2["silence_preserved"]) == ("", False)  # failed without a judge call
