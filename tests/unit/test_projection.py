"""The cost projected before a run's first shard (harness/runtime/projection.py; docs/cluster.md, "Cost
projection"): the audio a run streams from the real scheduler, hand-computed device-hours and dollars, a
model without a figure is unknown (never 0), hosted models and the LLM judge and reference priced with
the price table, ``make status`` shows it before any shard and beside the measured rate after, and a
projection above the budget is said at the start."""

from __future__ import annotations

import logging
import math

import pytest

from harness.pricing import load_prices
from harness.products.scenes import SceneSet
from harness.products.timeline import ClipRef, Timeline
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.config import ConfigError, RunConfig
from harness.runtime.driver import write_objects
from harness.runtime.infer_worker import InferWorker
from harness.runtime.plan import RunPlan
from harness.runtime.projection import (
    longest_stream_bound,
    longest_stream_seconds,
    project,
    projection_lines,
    stream_seconds,
)
from harness.runtime.status import run_status
from harness.scenes.schema import Label
from harness.scenes.settings import make_scenes
from harness.store.base import LocalStore, get_json, put_json
from harness.vad.segments import SegmentRules
from tests.fixtures.runs import babble_shard, planned, tiny_config

ESTIMATE = {"device_hours_per_audio_hour": 0.5, "basis": "measured", "source": "timed here"}
L = Label


def test_stream_seconds_follow_the_scheduler_by_hand():
    """At 1 kHz (a sample a millisecond): preamble 1 s, N2 2 s, T 1.5 s, N4_Q 1 s, N4_R 0.5 s, N3 0.8 s."""
    p, rules = ProtocolSettings(sample_rate=1000), SegmentRules()
    turns, labels = [2000, 1500, 1000, 500, 800], [L.N2, L.T, L.N4_Q, L.N4_R, L.N3]
    # preamble 0-1000, gap, N2 1500-3500, gap, T 4000-5500; after T's wait: N4_Q, 3 s, N4_R, gap, N3, 2 s tail
    after_t = 1000 + 3000 + 500 + 500 + 800 + 2000
    answered = 5500 + 10_000 + 2000  # a 10 s answer from T's end, then the 2 s endpoint
    assert stream_seconds(turns, labels, 1000, p, rules, 10.0) == (answered + after_t) / 1000
    silent = 5500 + 5000 + 1  # no onset: decided just after the 5 s window
    assert stream_seconds(turns, labels, 1000, p, rules, 0.1) == (silent + after_t) / 1000  # 0.1 s < 120 ms
    capped = 5500 + 60_000  # a response is cut at the 60 s cap
    assert stream_seconds(turns, labels, 1000, p, rules, 100.0) == (capped + after_t) / 1000


def test_the_longest_stream_by_hand_bounds_every_answer():
    """The conversation above, at 1 kHz: silent at T's end, then speaking without end from the last
    instant of the 5 s onset window, so the response is cut at onset + 60 s."""
    p, rules = ProtocolSettings(sample_rate=1000), SegmentRules()
    turns, labels = [2000, 1500, 1000, 500, 800], [L.N2, L.T, L.N4_Q, L.N4_R, L.N3]
    after_t = 1000 + 3000 + 500 + 500 + 800 + 2000
    longest = longest_stream_seconds(turns, labels, 1000, p, rules)
    assert longest == (5500 + 5000 + 60_000 + after_t) / 1000
    assert all(stream_seconds(turns, labels, 1000, p, rules, a / 4) < longest for a in range(0, 300))
    # two model steps and the detector's lag on top, never past the runner's duration limit
    two = [(turns, labels), ([2000, 1500, 800], [L.N2, L.T, L.N3])]
    assert longest_stream_bound(two, 1000, p, rules, 0.08, 1800.0) == pytest.approx(longest + 0.16 + 1.0)
    assert longest_stream_bound([(turns, labels)], 1000, p, rules, 0.08, 30.0) == 30.0
    assert longest_stream_bound([], 1000, p, rules, 0.08, 1800.0) == 0.0


def test_a_model_talking_all_the_time_streams_within_the_bound(tmp_path):
    """babble (speech all the time, real Silero on its output) runs every T wait to a cap: each stream
    is within the bound, and within its last 5 s (the onset window it did not need) and the margin."""
    cfg, store, plan, entries = babble_shard(tmp_path, "bound")
    scenes = SceneSet.read(store, plan.layout, plan.scenes).by_id
    timeline = Timeline.read(store, plan.layout, plan.synth)
    sr = cfg.protocol.sample_rate
    for sid, entry in entries.items():
        stream = ([t.n for t in timeline.conversations[sid]], [t.label for t in scenes[sid].turns])
        bound = longest_stream_bound([stream], timeline.preamble.n, cfg.protocol, cfg.detector.rules, 0.08, 1800.0)
        streamed = entry.record(store).n_samples / sr
        assert bound - 5.0 - 2.16 - 0.5 <= streamed <= bound, (sid, streamed, bound)


def _with_audio(tmp_path, models, **sections):
    """A generated tiny run (one pair) whose scene set and a synth index of known clip lengths are in
    the store: every turn 2.0 s, the preamble 3.0 s, at 24 kHz."""
    # the spec's 60 s response cap (not tiny runs' 10 s): T's projected answer and endpoint (12 s) are not cut
    cfg = tiny_config(tmp_path, "proj", models, **{"protocol": {"response_cap_s": 60.0}, **sections})
    store, plan = LocalStore(str(tmp_path)), RunPlan.from_config(cfg)
    scenes = make_scenes(cfg.scenes)[0]
    write_objects(store, plan.layout, plan.scenes, SceneSet(tuple(scenes)).objects())
    sr = cfg.protocol.sample_rate
    timeline = Timeline(sr, ClipRef("pre", 3 * sr), {s.scene_id: tuple(ClipRef(f"c{i}", 2 * sr)
                                                                         for i in range(len(s.turns)))
                                                     for s in scenes})
    write_objects(store, plan.layout, plan.synth, timeline.objects())
    return cfg, store, plan, scenes


def _hand_seconds(scenes, answer_s=10.0):
    """The streamed seconds of :func:`_with_audio`'s scenes, by hand: the preamble and its 0.5 s gap, 2 s
    turns, 0.5 s gaps (3 s after N4_Q), T's wait (the answer and the 2 s endpoint), the 2 s tail."""
    total = 0.0
    for s in scenes:
        waits = [answer_s + 2.0 if t.label is L.T else 3.0 if t.label is L.N4_Q else 0.5 for t in s.turns[:-1]]
        total += 3.0 + 0.5 + 2.0 * len(s.turns) + sum(waits) + 2.0
    return total


def test_device_hours_and_dollars_by_hand_from_a_synth_index(tmp_path):
    cfg, store, _, scenes = _with_audio(tmp_path, {"m": {"target": "silent", "estimate": ESTIMATE},
                                                   "m2": {"target": "silent", "batch_size": 8,
                                                          "estimate": {**ESTIMATE, "batch_size": 4}}},
                                        budget={"usd_per_gpu_hour": 2.0})
    p = project(cfg, store)
    hours = _hand_seconds(scenes) / 3600
    assert len(p.audio.scenes) == len(scenes) == 2 and p.audio.hours == pytest.approx(hours, abs=1e-6)
    assert "synth index" in p.audio.basis
    m, m2 = p.models
    assert m.device_hours == pytest.approx(0.5 * hours) and m.label == "measured: timed here"
    # a figure for another batch size is used, but said to be one and labelled estimated
    assert m2.device_hours == pytest.approx(0.5 * hours)
    assert m2.label == "estimated (a figure for 4 rows; this run steps 8): timed here"
    lines = projection_lines(p)
    assert any(ln.startswith("  projected m ") and f"{0.5 * hours:.4g} device-h (${hours:,.2f})" in ln
               for ln in lines)
    assert lines[-1] == f"  projected total     {hours:.4g} device-h (${2 * hours:,.2f}); ${2 * hours:,.2f} in all"


def test_before_synth_the_texts_give_the_audio(tmp_path):
    """No store content at all: the scenes the settings make, spoken at the paper's 14 characters a second."""
    from harness.scenes.stats import CHARS_PER_S

    cfg = tiny_config(tmp_path, "text", {"m": {"target": "silent", "estimate": ESTIMATE}})
    p = project(cfg, LocalStore(str(tmp_path)))
    sr = cfg.protocol.sample_rate
    scenes = make_scenes(cfg.scenes)[0]
    expected = sum(stream_seconds([round(len(t.text) / CHARS_PER_S * sr) for t in s.turns], [t.label for t in s.turns],
                                  round(len(cfg.tts.preamble_text) / CHARS_PER_S * sr), cfg.protocol,
                                  cfg.detector.rules, 10.0) for s in scenes)
    assert p.audio.seconds == pytest.approx(expected)
    assert "the scenes stage has not run" in p.audio.basis and "14.0 characters/s" in p.audio.basis


def test_a_model_without_a_figure_is_unknown_never_zero(tmp_path):
    cfg, store, _, _ = _with_audio(tmp_path, {"known": {"target": "silent", "estimate": ESTIMATE},
                                              "nofig": {"target": "silent"}}, budget={"gpu_hours": 0.0})
    p = project(cfg, store)
    nofig = p.models[1]
    assert nofig.device_hours is None and nofig.factor is None and p.unknown == ["nofig"]
    lines = projection_lines(p, gpu_hours=0.0)
    assert '  projected nofig      unknown: model.nofig.estimate is not set (docs/models.md, "Cost")' in lines
    assert "and 1 model(s) unknown (nofig)" in next(ln for ln in lines if "projected total" in ln)
    # the known part alone passes the budget: said as a lower bound
    assert p.over_budget(0.0, None) == [f"budget.gpu_hours 0: the run is projected at least "
                                        f"{p.device_hours:.4g} device-h"]


def test_a_hosted_model_is_priced_with_the_table(tmp_path):
    rates = {"input_audio": 10, "output_audio": 9}
    cfg, store, _, _ = _with_audio(tmp_path, {
        "rt": {"target": "openai_realtime", "num_cpus": 1, "params": {"model": "gpt-realtime"},
               "estimate": {**ESTIMATE, "api_tokens_per_audio_s": rates}},
        "unlisted": {"target": "openai_realtime", "params": {"model": "gpt-nothing"},
                     "estimate": {**ESTIMATE, "api_tokens_per_audio_s": rates}},
        "nofig": {"target": "openai_realtime", "estimate": ESTIMATE}})
    p = project(cfg, store)
    table = load_prices()
    prices = table.models["openai/gpt-realtime"]
    s = p.audio.seconds
    rt, unlisted, nofig = p.models
    assert rt.metered and rt.api_usd == pytest.approx(
        (round(10 * s) * prices["input_audio"] + round(9 * s) * prices["output_audio"]) / 1e6)
    assert unlisted.api_usd is None and "openai/gpt-nothing is not in" in unlisted.api_note
    assert nofig.api_usd is None and "api_tokens_per_audio_s is not set" in nofig.api_note
    assert p.api_unknown == ["unlisted", "nofig"]
    assert p.infer_usd == pytest.approx(rt.api_usd)  # no price per GPU-hour here: the API only


def test_the_llm_judge_and_reference_calls_the_scenes_imply(tmp_path):
    cfg, store, _, scenes = _with_audio(
        tmp_path, {"a": {"target": "silent"}, "b": {"target": "babble"}},
        judge={"kind": "anthropic", "params": {"model": "claude-sonnet-4-5"}},
        reference={"kind": "anthropic", "params": {"model": "claude-sonnet-4-5", "max_output_tokens": 300}})
    p = project(cfg, store)
    judge, reference, ref_judge = p.calls
    n_t = len(scenes)
    n_windows = sum(t.label.is_silence for s in scenes for t in s.turns)
    n_turns = sum(len(s.turns) for s in scenes)
    n_said = sum(t.label in (L.T, L.N4_Q) for s in scenes for t in s.turns)
    price = load_prices().models["anthropic/claude-sonnet-4-5"]
    # at most one call per T answer and silence window of each model; a label's tokens out (characters / 4)
    assert judge.stage == "score (judge)" and judge.who == "anthropic/claude-sonnet-4-5"
    assert judge.calls == 2 * (n_t + n_windows)
    assert judge.tokens_out == 2 * (n_t * math.ceil(len("INCORRECT") / 4)
                                    + n_windows * math.ceil(len("SUBSTANTIVE_INTRUSION") / 4))
    assert judge.usd == pytest.approx((judge.tokens_in * price["input_text"]
                                       + judge.tokens_out * price["output_text"]) / 1e6)
    assert judge.tokens_in > judge.calls * 1600 // 4  # every prompt file is over 1,600 characters
    # every turn in each of 2 passes; an answer of 10 s at 14 characters/s where it should respond
    answer = math.ceil((len("RESPOND\n") + 140) / 4)
    assert reference.calls == 2 * n_turns
    assert reference.tokens_out == 2 * (n_said * answer + (n_turns - n_said) * math.ceil(len("SILENT") / 4))
    assert ref_judge.calls == 2 * n_t
    assert p.calls_usd == pytest.approx(judge.usd + reference.usd + ref_judge.usd)
    text = "\n".join(projection_lines(p))
    assert f"projected score (judge) anthropic/claude-sonnet-4-5: {judge.calls:,} calls" in text
    assert f"${p.calls_usd:,.2f} in all" in text  # no figure for the models: the calls are the whole known cost


def test_a_judge_without_an_output_cap_adds_its_thinking(tmp_path):
    cfg, store, _, scenes = _with_audio(tmp_path, {"a": {"target": "silent"}},
                                        judge={"kind": "gemini", "params": {"model": "gemini-2.5-flash"}},
                                        budget={"projected_thinking_tokens": 100})
    (judge,) = project(cfg, store).calls
    n_t, n_windows = len(scenes), sum(t.label.is_silence for s in scenes for t in s.turns)
    assert judge.tokens_out == n_t * (3 + 100) + n_windows * (6 + 100)


def test_offline_judge_and_reference_cost_nothing_and_say_so(tmp_path):
    cfg, store, _, _ = _with_audio(tmp_path, {"a": {"target": "silent", "estimate": ESTIMATE}})
    p = project(cfg, store)
    assert p.calls == () and p.calls_usd == 0.0  # lexical judge, rule reference: no API call to project


def test_status_shows_the_projection_before_any_shard_and_the_measured_rate_after(tmp_path):
    cfg, store, plan, _ = _with_audio(tmp_path, {"m": {"target": "silent", "estimate": ESTIMATE}},
                                      budget={"usd_per_gpu_hour": 2.0})
    put_json(store, plan.layout.file(plan.infer["m"], "plan.json"), {"s0": ["a"], "s1": ["b"]})
    text = run_status(cfg, store)
    hours = project(cfg, store).audio.hours
    assert "to finish: no measured rate yet (projected below)" in text
    assert (f"  projected m          {0.5 * hours:.4g} device-h (${hours:,.2f}) at 0.5 device-h per audio-h "
            "(measured: timed here)") in text.splitlines()
    assert "projected audio     2 conversations" in text
    put_json(store, plan.layout.marker(plan.layout.shard(plan.infer["m"], "s0")),
             {"ok": 1, "error": 0, "device_hours": 0.001, "audio_s": 36.0, "conversations": {}})
    text = run_status(cfg, store)
    assert "to finish ~0.001 device-h ($0.00)" in text  # the measured rate, as before
    assert "at 0.5 device-h per audio-h; measured so far 0.1 device-h per audio-h (measured: timed here)" in text


def test_the_projected_audio_is_what_a_silent_model_streams(tmp_path):
    """A real tiny synth timeline streamed through the silent baseline: its shard's audio equals the
    projection of a model that never answers, up to the detector's decision latency (a step or two)."""
    cfg = tiny_config(tmp_path, "real", {"silent": {"target": "silent"}}, budget={"projected_answer_s": 0.05})
    store, plan, ids = planned(cfg)
    InferWorker(cfg, cfg.models[0], store).run("shard-00000", ids)
    marker = get_json(store, plan.layout.marker(plan.layout.shard(plan.infer["silent"], "shard-00000")))
    projected = project(cfg, store).audio.seconds
    assert 0 <= marker["audio_s"] - projected <= 0.25 * len(ids), (marker["audio_s"], projected)


def test_over_budget_is_said_at_the_start_not_refused(tmp_path, caplog):
    from jobs._entry import log_projection

    cfg, store, _, _ = _with_audio(tmp_path, {"m": {"target": "silent", "estimate": ESTIMATE}},
                                   budget={"gpu_hours": 0.001, "usd": 0.01, "usd_per_gpu_hour": 2.0})
    p = project(cfg, store)
    assert p.over_budget(0.001, 0.01) == [
        f"budget.gpu_hours 0.001: the run is projected at {p.device_hours:.4g} device-h",
        f"budget.usd 0.01: infer (device-hours and hosted APIs) is projected at ${p.infer_usd:,.2f}"]
    with caplog.at_level(logging.INFO, logger="duplex_mpe"):
        log_projection(cfg, store)
    (record,) = [r for r in caplog.records if "projected cost" in r.getMessage()]
    assert record.levelno == logging.WARNING and "OVER BUDGET budget.gpu_hours 0.001" in record.getMessage()
    assert p.over_budget(10.0, 100.0) == []
    caplog.clear()
    roomy = RunConfig.from_dict({**cfg.to_dict(), "budget": {"gpu_hours": 10.0}})
    with caplog.at_level(logging.INFO, logger="duplex_mpe"):
        log_projection(roomy, store)
    (record,) = [r for r in caplog.records if "projected cost" in r.getMessage()]
    assert record.levelno == logging.INFO and "OVER" not in record.getMessage()


def test_the_job_start_projects_duplex_mpe_runs_only(tmp_path, caplog):
    """check_ready logs the projection for a job that runs infer; the Duplex Cue job (which preflights
    infer's models but never runs the Duplex-MPE conversations) asks for none."""
    from jobs._entry import check_ready

    cfg, store, _, _ = _with_audio(tmp_path, {"m": {"target": "silent", "estimate": ESTIMATE}})
    for project_cost, logged in ((True, 1), (False, 0)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="duplex_mpe"):
            check_ready(cfg, store, ["infer"], project_cost=project_cost)
        assert len([r for r in caplog.records if "projected cost" in r.getMessage()]) == logged


def test_the_estimate_is_validated_and_enters_no_hash(tmp_path):
    bare = tiny_config(tmp_path, "h", {"m": {"target": "silent"}})
    with_figure = tiny_config(tmp_path, "h", {"m": {"target": "silent", "estimate": ESTIMATE}})
    assert RunPlan.from_config(bare) == RunPlan.from_config(with_figure)
    assert RunConfig.from_dict(with_figure.to_dict()) == with_figure
    for bad, why in (({**ESTIMATE, "device_hours_per_audio_hour": 0}, "must be a number > 0"),
                     ({**ESTIMATE, "basis": "guessed"}, "not one of: measured, estimated"),
                     ({**ESTIMATE, "source": " "}, "source must say"),
                     ({**ESTIMATE, "api_tokens_per_audio_s": {"input_audio": -1}}, ">= 0"),
                     ({**ESTIMATE, "speed": 2}, "unknown keys ['speed']")):
        with pytest.raises(ConfigError, match=r"model\.m: estimate: .*" + why.replace("[", r"\[").replace("]", r"\]")
                           .replace("(", r"\(").replace(")", r"\)")):
            tiny_config(tmp_path, "h", {"m": {"target": "silent", "estimate": bad}})


def test_every_evaluated_model_ships_a_figure():
    from harness.models.registry import model_configs
    from harness.runtime.config import ModelSettings

    configs = model_configs()
    for name in ("moshi", "personaplex", "minicpm_o", "flm_audio", "voila", "freeze_omni",  # the six evaluated
                 "openai_realtime", "gemini_live", "silent", "babble", "oracle", "cascade"):
        est = ModelSettings(name=name, **configs[name]).estimate
        assert est is not None and est.source.strip(), name
        assert est.batch_size in (None, configs[name]["batch_size"]), name  # the figure is for the shipped rows


def test_the_cost_table_in_the_docs_is_the_configs_times_the_paper_audio():
    """docs/models.md, "Cost": each row's figure and basis are its config's, and its GPU-hours for 4,000
    conversations are the figure x the audio the projection gives for scenes=paper (stated there)."""
    import re
    from pathlib import Path

    import yaml

    from harness.models.registry import model_configs
    from harness.runtime.projection import run_audio

    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = text[text.index("## Cost: GPU-hours for 4,000 conversations"):]
    section = section[:section.index("\n## ", 1)]
    audio_h = float(re.search(r"the figure x \*\*([\d.]+) hours\*\*", section).group(1))
    paper = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf" / "scenes" / "paper.yaml").read_text())
    cfg = RunConfig.from_dict({"scenes": paper, "model": {"silent": {"target": "silent"}}})
    audio = run_audio(cfg, make_scenes(cfg.scenes)[0], None, "scenes=paper")
    assert len(audio.scenes) == 4000 and audio.hours == pytest.approx(audio_h, abs=0.05)
    configs, rows = model_configs(), [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert len(rows) >= 12
    for row in rows:
        name, figure, basis, hours = (c.strip() for c in row.strip("|").split(" | ")[:4])
        est = configs[name.strip("`")]["estimate"]
        assert float(figure.split()[0]) == est["device_hours_per_audio_hour"] and basis == est["basis"], name
        assert float(hours.split()[0]) == pytest.approx(est["device_hours_per_audio_hour"] * audio_h, rel=0.05), name


def test_a_changed_figure_is_accepted_on_an_existing_run():
    """``make status`` / ``make rerun-failed`` may state another figure: it changes no product."""
    from jobs._entry import where_or_speed

    assert where_or_speed("model.moshi.estimate.device_hours_per_audio_hour")
    assert where_or_speed("budget.projected_answer_s") and where_or_speed("model.moshi.batch_size")
    assert not where_or_speed("model.moshi.params.temp")
