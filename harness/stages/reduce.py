"""The ``reduce`` stage: scores, statistics, the per-event table and the report (spec sections 5-6)."""

from __future__ import annotations

import dataclasses
import io
import logging
from collections import defaultdict
from typing import Any

from harness.metrics.analyses import (
    all_statistics,
    output_checks,
    settings_acknowledged,
    stream_pacing,
    streaming_speed,
)
from harness.metrics.scores import compute_metrics
from harness.models.base import gives_duty_text
from harness.pricing import load_prices, spend_rows
from harness.products.infer import InferEntry, ModelFacts, ModelLedger, read_ledger
from harness.products.reference import read_reference, read_reference_cost
from harness.products.scenes import SceneSet
from harness.products.segments import SegmentEntry, read_segments, read_sweep
from harness.products.timeline import ClipReader, Timeline
from harness.products.windows import Windows, unparseable_over
from harness.protocol.scheduler import Scheduler
from harness.report.conversation import conversation_page, example_conversations, mix_flac, stereo_mix
from harness.report.figures import report_figures
from harness.report.markdown import render_html, render_report
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.runtime.plan import REDUCE_VERSION, RunPlan
from harness.scenes.schema import CONDITIONS, Scene
from harness.store.base import ObjectStore, get_json

log = logging.getLogger("duplex_mpe")


class ReduceStage(Stage):
    """Per-event table, ``metrics.json``, ``statistics.json``, the report and the conversation pages,
    from the products of every earlier stage (nothing is computed again: the rows are the score
    stage's windows, the hosted models' settings their infer facts)."""

    name, version = "reduce", REDUCE_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: RunPlan) -> list[Unit]:
        return [Unit(self.name, plan.reduce)]

    def inputs(self, plan: RunPlan) -> list[Unit]:
        return [Unit("reference", plan.reference), *(Unit("score", plan.score[m.name], m.name)
                                                     for m in self.cfg.models)]

    def compute(self, store: ObjectStore, plan: RunPlan, todo: list[Unit]):
        cfg, lay = self.cfg, plan.layout
        scene_set = SceneSet.read(store, lay, plan.scenes)
        scenes, invalid = scene_set.by_id, scene_set.invalid
        timeline = Timeline.read(store, lay, plan.synth)
        reference = read_reference(store, lay, plan.reference)
        rows_by_model: dict[str, list[dict[str, Any]]] = {}
        errors: dict[str, dict[str, int]] = {}
        error_list: list[dict[str, str]] = []
        spend: dict[str, dict[str, Any]] = {}
        outputs: dict[str, tuple[dict[str, InferEntry], dict[str, SegmentEntry]]] = {}
        produced: dict[str, list[dict[str, Any]]] = {}  # model -> what each stored output holds (output_checks)
        failures: dict[str, dict[str, int]] = {}  # model -> failed infer attempts and conversation errors
        ledgers: dict[str, ModelLedger] = {}
        facts: dict[str, ModelFacts] = {}
        sr = cfg.protocol.sample_rate
        for m in cfg.models:
            segs = read_segments(store, lay, plan.vad[m.name])
            windows = Windows.read(store, lay, plan.score[m.name]).conversations
            spend[m.name] = get_json(store, lay.marker(plan.score[m.name]))
            led = ledgers[m.name] = read_ledger(store, lay, plan.infer[m.name], m.name)
            facts[m.name] = ModelFacts.read(store, lay, plan.infer[m.name])
            entries = led.entries()
            outputs[m.name] = entries, segs
            rows: list[dict[str, Any]] = []
            errs: dict[str, int] = defaultdict(int)
            produced[m.name] = []
            for sid, scene in scenes.items():
                reason = timeline.errors.get(sid) or (None if sid in segs else "no infer output")
                seg = segs.get(sid)
                if reason is None and not seg.ok:
                    reason = seg.reason or "unknown error"
                if reason is None:
                    try:
                        rec = entries[sid].record(store)
                    except (ValueError, KeyError, FileNotFoundError) as e:
                        reason = f"cannot read the infer record: {type(e).__name__}: {e}"
                    else:
                        produced[m.name].append({"speech_s": seg.speech_samples / sr, "truncated": seg.truncated,
                                                 "peak": rec.output_peak, "audio_s": (rec.n_samples or 0) / sr,
                                                 "wall_s": rec.wall_s, "step_s": rec.step_s, "scene_id": sid,
                                                 "pacing": rec.pacing,
                                                 "settings": (rec.usage or {}).get("settings")})
                        conv = windows.get(sid)
                        if conv is not None and conv.ok:
                            rows += [{"model": m.name, **r} for r in conv.windows]
                            continue
                        reason = conv.reason if conv is not None else "not scored"
                errs[scene.condition] += 1
                error_list.append({"model": m.name, "scene_id": sid, "reason": reason})
            rows_by_model[m.name] = rows
            errors[m.name] = dict(errs)
            failures[m.name] = {"shards": len(led.shards), "failed_attempts": sum(map(len, led.failures.values())),
                                "infer_conversation_errors": led.conversation_errors,
                                "conversations_in_error": sum(errs.values())}
        metrics = compute_metrics(rows_by_model, errors, CONDITIONS, cfg.metrics.min_n, cfg.judge.kind)
        roles = {m.name: m.role for m in cfg.models}
        statistics = all_statistics(rows_by_model, metrics, request_times(cfg, timeline, scenes), CONDITIONS,
                                    cfg.metrics.min_n, roles)
        statistics["output_checks"] = output_checks(produced, roles, cfg.metrics.suspect_peak_dbfs)
        statistics["streaming_speed"] = streaming_speed(produced)
        statistics["failures"] = failures
        verdicts = {m: c.pop("judge_verdicts") for m, c in spend.items()}  # the score markers' counts
        over = unparseable_over(verdicts, cfg.metrics.max_unparseable_share)
        statistics["judge_verdicts"] = {"max_unparseable_share": cfg.metrics.max_unparseable_share,
                                        "models": verdicts, "over": over}
        statistics["scoring_cost"] = spend
        statistics["turn_taking"] = turn_taking_settings(facts, settings_acknowledged(produced))
        statistics["prompts"] = model_prompts(facts, cfg.protocol.duty_as_text, timeline.preamble.n / sr)
        statistics["context"] = context_overruns(facts, produced)
        for m, c in statistics["context"].items():
            if c["over"]:
                log.warning("reduce: %d of %d conversations of %s are longer than its %g s context (scored, and "
                            "counted in the report)", len(c["over"]), c["conversations"], m, c["context_s"])
        statistics["pacing"] = stream_pacing(produced, cfg.metrics.max_lag_s)
        for m, p in statistics["pacing"]["models"].items():
            if p["over"]:
                log.warning("reduce: %d of %d conversations of %s fell more than %g s behind real time (worst "
                            "%.2f s; metrics.max_lag_s): scored, and flagged in the report's pacing table",
                            len(p["over"]), p["conversations"], m, cfg.metrics.max_lag_s, p["worst_lag_s"])
        refuse_mixed_turn_taking(statistics, statistics["turn_taking"])
        table = load_prices(cfg.budget.price_table)
        statistics["api_cost"] = {"table": table.label, "rows": spend_rows(  # the usage ledger, priced now
            ledgers.values(), spend, read_reference_cost(store, lay, plan.reference), table,
            f"reference ({cfg.reference.kind})", get_json(store, lay.marker(plan.scenes)))}
        all_rows = [r for rows in rows_by_model.values() for r in rows]
        examples = {m: example_conversations(rows) for m, rows in rows_by_model.items()}
        report = render_report(cfg, metrics, statistics, scene_set.stats, error_list, invalid, plan,
                               reference=reference, examples=examples)
        sweep = [r for m in cfg.models if cfg.vad.sweep for r in read_sweep(store, lay, plan.vad[m.name], m.name)]
        figures = report_figures(metrics, sweep, dataclasses.asdict(cfg.vad.rules))
        html = render_html(cfg, metrics, statistics, scene_set.stats, error_list, invalid, plan, figures,
                           reference=reference, examples=examples)
        objects: dict[str, Any] = {"metrics.json": metrics, "statistics.json": statistics,
                                   "events.parquet": _parquet(all_rows),
                                   "errors.json": {"conversations": error_list, "invalid_scenes": invalid,
                                                   "unparseable_judge_verdicts": over},
                                   "report.md": report.encode(), "report.html": html.encode()}
        objects.update(_conversation_pages(cfg, store, plan, timeline, scenes, rows_by_model, examples, outputs))
        yield todo[0], Output({"models": [m.name for m in cfg.models], "rows": len(all_rows)}, objects)


def _conversation_pages(cfg: RunConfig, store: ObjectStore, plan: RunPlan, timeline: Timeline,
                        scenes: dict[str, Scene], rows_by_model: dict[str, list[dict[str, Any]]],
                        examples: dict[str, dict[str, list[str]]],
                        outputs: dict[str, tuple[dict[str, InferEntry], dict[str, SegmentEntry]]]) -> dict[str, bytes]:
    """One debugging page per model for an example of every kind of outcome (pass, fail, exclusion),
    with its stereo mix beside it (``<scene>.flac``: humans left, model right): the objects
    ``conversations/<model>/<scene>.html`` and ``.flac``."""
    sr = cfg.protocol.sample_rate
    clip = ClipReader(store, plan.layout, plan.synth, sr)
    out: dict[str, bytes] = {}
    for m in cfg.models:
        rows = rows_by_model[m.name]
        entries, segs = outputs[m.name]
        for sids in examples[m.name].values():
            for sid in sids:
                entry, seg = entries[sid], segs[sid]
                rec = entry.record(store)
                audio = entry.audio(store, sr) if "flac" in entry.objects else None
                turns = [clip(t.clip) for t in timeline.conversations[sid]]
                mix = stereo_mix(rec, turns, clip(timeline.preamble.clip), audio)
                out[f"conversations/{m.name}/{sid}.flac"] = mix_flac(mix, sr)
                page = conversation_page(m.name, scenes[sid], rec, seg.segments,
                                         [r for r in rows if r["scene_id"] == sid], sr,
                                         cfg.protocol.fresh_onset_window_s, truncated=seg.truncated,
                                         audio=f"{sid}.flac")
                out[f"conversations/{m.name}/{sid}.html"] = page.encode()
    return out


def turn_taking_settings(facts: dict[str, ModelFacts],
                         acknowledged: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{model: {"provider", "model" (provider/model id), "settings", "acknowledged"}}`` of every
    hosted model of the run, from the facts its infer stage wrote
    (:class:`~harness.products.infer.ModelFacts`): its turn-taking settings as sent (the ``infer``
    prefix hashes the params, so every conversation of a model ran under the same ones) and what
    the service acknowledged of them (``acknowledged``:
    :func:`~harness.metrics.analyses.settings_acknowledged` of its records; None without records)."""
    return {name: {"provider": f.provider, "model": f.metered, "settings": f.turn_taking,
                   "acknowledged": acknowledged.get(name)}
            for name, f in facts.items() if f.provider is not None}


def model_prompts(facts: dict[str, ModelFacts], duty_as_text: bool, preamble_s: float) -> dict[str, Any]:
    """What each model was told (docs/protocol-decisions.md, "What each model is told"): every model
    hears the spoken preamble (``preamble_s``: the synthesised clip's length, seconds); per model,
    from the facts its infer stage wrote, whether the duty text went to it as text too
    (:func:`~harness.models.base.gives_duty_text`: ``protocol.duty_as_text`` and ``text_prompt``),
    the preset text its adapter sends and its voice prompt. ``{"duty_as_text", "preamble_s",
    "models": {model: {"duty_text", "preset_text", "voice_prompt"}}}``."""
    return {"duty_as_text": duty_as_text, "preamble_s": round(preamble_s, 3),
            "models": {name: {"duty_text": gives_duty_text(f.capabilities, duty_as_text),
                              "preset_text": f.preset_text, "voice_prompt": f.voice_prompt}
                       for name, f in facts.items()}}


def context_overruns(facts: dict[str, ModelFacts], produced: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per model declaring a context (:attr:`~harness.products.infer.ModelFacts.context_s`), the
    conversations with a stored output whose stream (preamble, turns, waits and tail: the output's
    length, ``produced[model][i]["audio_s"]``, seconds) is longer than it, so the model no longer
    attended to the start of its stream (the preamble's) by the end: ``{model: {"context_s",
    "conversations", "over" (scene ids, sorted), "longest_s"}}``; models without one are left out."""
    out: dict[str, Any] = {}
    for name, f in facts.items():
        if f.context_s is None:
            continue
        convs = produced.get(name, [])
        out[name] = {"context_s": f.context_s, "conversations": len(convs),
                     "over": sorted(c["scene_id"] for c in convs if c["audio_s"] > f.context_s),
                     "longest_s": round(max((c["audio_s"] for c in convs), default=0.0), 3)}
    return out


def turn_taking_refusal(a: str, b: str, hosted: dict[str, dict[str, Any]]) -> str | None:
    """Why models ``a`` and ``b`` may not be compared (None: they may): both are hosted models of
    one provider whose turn-taking settings differ, so a difference between them would be the
    settings' as much as the models' (issue 14; docs/models.md, "Turn-taking settings")."""
    ha, hb = hosted.get(a), hosted.get(b)
    if ha is None or hb is None or ha["provider"] != hb["provider"] or ha["settings"] == hb["settings"]:
        return None
    differ = sorted(k for k in ha["settings"] if ha["settings"][k] != hb["settings"].get(k))
    return f"turn-taking settings differ ({', '.join(differ)}) between two {ha['provider']} models"


def refuse_mixed_turn_taking(statistics: dict[str, Any], hosted: dict[str, dict[str, Any]]) -> None:
    """Mark every between-model test and bootstrap of a pair :func:`turn_taking_refusal` refuses:
    no p-value, no interval, the reason instead (the Bonferroni m still counts the pair: conservative)."""
    for tests in statistics["between_models"].values():
        for t in tests:
            if why := turn_taking_refusal(t["a"], t["b"], hosted):
                t.update(refused=why, p=None, p_bonferroni=None, significant=False)
    for rows in statistics["silence_bootstrap"].values():
        for r in rows:
            if why := turn_taking_refusal(r["a"], r["b"], hosted):
                r.update(refused=why, diff=None, lo=None, hi=None)


def request_times(cfg: RunConfig, timeline: Timeline, scenes: dict[str, Scene]) -> dict[str, float]:
    """Seconds from the first human turn's start to T's start, per conversation.

    Everything up to T is scripted, so the scheduler's initial placements give this on a
    model-independent timeline: every model gets the same tertile bins (spec section 6).
    """
    out = {}
    for sid, turns in timeline.conversations.items():
        scene = scenes[sid]
        sched = Scheduler([t.n for t in turns], [t.label for t in scene.turns], timeline.preamble.n, cfg.protocol)
        starts = {p.turn: p.start for p in sched.placements}
        out[sid] = (starts[scene.t_index] - starts[0]) / cfg.protocol.sample_rate
    return out


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = sorted({k for r in rows for k in r})
    table = pa.table({c: [r.get(c) for r in rows] for c in cols})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()
