"""The ``reduce`` stage: scores, statistics, the per-event table and the report (spec sections 5-6)."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections import defaultdict
from typing import Any

import numpy as np

from harness.audio.io import decode
from harness.metrics.analyses import all_statistics, output_checks, streaming_speed
from harness.metrics.outcomes import with_verdict
from harness.metrics.scores import compute_metrics
from harness.pricing import load_prices, metered_key, spend_rows
from harness.products.infer import ModelLedger, read_ledger
from harness.protocol.scheduler import Scheduler
from harness.report.conversation import conversation_page, example_conversations, mix_flac, stereo_mix
from harness.report.figures import report_figures
from harness.report.markdown import render_html, render_report
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.shard import read_output
from harness.scenes.schema import CONDITIONS, Scene
from harness.stages.common import load_scenes, require_stage, stage_done
from harness.stages.infer import infer_records
from harness.stages.score import ERROR_KEY, scored_windows
from harness.store.base import ObjectStore, get_json, put_json
from harness.vad.tables import read_sweep_rows

log = logging.getLogger("duplex_mpe")


def reduce_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Per-event table, ``metrics.json`` and the Markdown report."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    if stage_done(store, plan, plan.reduce, "reduce"):
        return plan.reduce
    scenes = {s.scene_id: s for s in load_scenes(store, plan)}
    index = get_json(store, lay.file(plan.synth, "index.json"))
    synth_errors = index["errors"]
    invalid = get_json(store, lay.file(plan.scenes, "invalid.json"))
    require_stage(store, plan, plan.reference, "reference")
    reference = get_json(store, lay.file(plan.reference, "reference.json"))
    rows_by_model: dict[str, list[dict[str, Any]]] = {}
    errors: dict[str, dict[str, int]] = {}
    error_list: list[dict[str, str]] = []
    spend: dict[str, dict[str, Any]] = {}
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # model -> (infer records, vad segments)
    produced: dict[str, list[dict[str, Any]]] = {}  # model -> what each stored output holds (output_checks)
    failures: dict[str, dict[str, int]] = {}  # model -> failed infer attempts and conversation errors
    ledgers: dict[str, ModelLedger] = {}
    sr = cfg.protocol.sample_rate
    for m in cfg.models:
        require_stage(store, plan, plan.score[m.name], f"score {m.name}")
        segs = get_json(store, lay.file(plan.vad[m.name], "segments.json"))
        verdicts = get_json(store, lay.file(plan.score[m.name], "verdicts.json"))
        spend[m.name] = get_json(store, lay.marker(plan.score[m.name]))
        led = ledgers[m.name] = read_ledger(store, plan.layout, plan.infer[m.name], m.name)
        recs = infer_records(store, plan, m.name, led)
        outputs[m.name] = recs, segs
        rows: list[dict[str, Any]] = []
        errs: dict[str, int] = defaultdict(int)
        produced[m.name] = []
        for sid, scene in scenes.items():
            reason = synth_errors.get(sid) or (None if sid in segs else "no infer output")
            entry = segs.get(sid, {})
            if reason is None and entry.get("status") != "ok":
                reason = entry.get("reason", "unknown error")
            if reason is None:
                try:
                    rec = json.loads(read_output(store, recs[sid], "json"))
                    produced[m.name].append({"speech_s": sum(e - b for b, e in entry["segments"]) / sr,
                                             "truncated": entry.get("truncated", False),
                                             "peak": rec.get("output_peak"),
                                             "audio_s": (rec.get("n_samples") or 0) / sr,
                                             "wall_s": rec.get("wall_s"), "step_s": rec.get("step_s")})
                    reason = verdicts.get(sid, {}).get(ERROR_KEY)
                    if reason is None:
                        conv = scored_windows(cfg, scene, rec, entry["segments"])
                        rows += [{"model": m.name, **with_verdict(r, verdicts.get(sid, {}))} for r in conv]
                        continue
                except (ValueError, KeyError, FileNotFoundError) as e:
                    reason = f"cannot score: {type(e).__name__}: {e}"
            errs[scene.condition] += 1
            error_list.append({"model": m.name, "scene_id": sid, "reason": reason})
        rows_by_model[m.name] = rows
        errors[m.name] = dict(errs)
        failures[m.name] = {"shards": len(led.shards), "failed_attempts": sum(map(len, led.failures.values())),
                            "infer_conversation_errors": led.conversation_errors,
                            "conversations_in_error": sum(errs.values())}
    metrics = compute_metrics(rows_by_model, errors, CONDITIONS, cfg.metrics.min_n, cfg.judge.kind)
    roles = {m.name: m.role for m in cfg.models}
    statistics = all_statistics(rows_by_model, metrics, request_times(cfg, index, scenes), CONDITIONS,
                                cfg.metrics.min_n, roles)
    statistics["output_checks"] = output_checks(produced, roles, cfg.metrics.suspect_peak_dbfs)
    statistics["streaming_speed"] = streaming_speed(produced)
    statistics["failures"] = failures
    statistics["scoring_cost"] = spend
    statistics["turn_taking"] = turn_taking_settings(cfg)
    refuse_mixed_turn_taking(statistics, statistics["turn_taking"])
    table = load_prices(cfg.budget.price_table)
    statistics["api_cost"] = {"table": table.label, "rows": spend_rows(  # the usage ledger, priced now
        ledgers.values(), spend, get_json(store, lay.marker(plan.reference)), table,
        f"reference ({cfg.reference.kind})")}
    all_rows = [r for rows in rows_by_model.values() for r in rows]
    put_json(store, lay.file(plan.reduce, "metrics.json"), metrics)
    put_json(store, lay.file(plan.reduce, "statistics.json"), statistics)
    store.put(lay.file(plan.reduce, "events.parquet"), _parquet(all_rows))
    put_json(store, lay.file(plan.reduce, "errors.json"), {"conversations": error_list, "invalid_scenes": invalid})
    stats = get_json(store, lay.file(plan.scenes, "stats.json"))
    examples = {m: example_conversations(rows) for m, rows in rows_by_model.items()}
    report = render_report(cfg, metrics, statistics, stats, error_list, invalid, plan, reference=reference,
                           examples=examples)
    store.put(lay.file(plan.reduce, "report.md"), report.encode())
    sweep = [r for m in cfg.models if cfg.vad.sweep
             for r in read_sweep_rows(store.get(lay.file(plan.vad[m.name], "sweep.parquet")), m.name)]
    figures = report_figures(metrics, sweep, dataclasses.asdict(cfg.vad.rules))
    html = render_html(cfg, metrics, statistics, stats, error_list, invalid, plan, figures,
                       reference=reference, examples=examples)
    store.put(lay.file(plan.reduce, "report.html"), html.encode())
    _conversation_pages(cfg, store, plan, scenes, rows_by_model, examples, outputs)
    put_json(store, lay.marker(plan.reduce), {"models": [m.name for m in cfg.models], "rows": len(all_rows)})
    return plan.reduce


def _conversation_pages(cfg: RunConfig, store: ObjectStore, plan: RunPlan, scenes: dict[str, Scene],
                        rows_by_model: dict[str, list[dict[str, Any]]], examples: dict[str, dict[str, list[str]]],
                        outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """One debugging page per model for an example of every kind of outcome (pass, fail, exclusion),
    with its stereo mix beside it (``<scene>.flac``: humans left, model right)."""
    lay = plan.layout
    sr = cfg.protocol.sample_rate
    index = get_json(store, lay.file(plan.synth, "index.json"))
    clips: dict[str, np.ndarray] = {}

    def clip(cid: str) -> np.ndarray:
        if cid not in clips:
            clips[cid] = decode(store.get(lay.clip(plan.synth, cid)), expected_rate=sr)[0]
        return clips[cid]

    for m in cfg.models:
        rows = rows_by_model[m.name]
        recs, segs = outputs[m.name]
        for sids in examples[m.name].values():
            for sid in sids:
                rec = json.loads(read_output(store, recs[sid], "json"))
                out = decode(read_output(store, recs[sid], "flac"), expected_rate=sr)[0] \
                    if "flac" in recs[sid]["objects"] else None
                turns = [clip(t["clip"]) for t in index["conversations"][sid]["turns"]]
                mix = stereo_mix(rec, turns, clip(index["preamble"]["clip"]), out)
                store.put(lay.file(plan.reduce, f"conversations/{m.name}/{sid}.flac"), mix_flac(mix, sr))
                page = conversation_page(m.name, scenes[sid], rec, np.asarray(segs[sid]["segments"]).reshape(-1, 2),
                                         [r for r in rows if r["scene_id"] == sid], sr,
                                         cfg.protocol.fresh_onset_window_s,
                                         truncated=segs[sid].get("truncated", False), audio=f"{sid}.flac")
                store.put(lay.file(plan.reduce, f"conversations/{m.name}/{sid}.html"), page.encode())


def turn_taking_settings(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """``{model: {"provider", "model" (provider/model id), "settings"}}`` of every hosted model of the run: its
    turn-taking settings as its config's params give them (the run manifest records the params;
    the ``infer`` prefix hashes them, so every conversation of a model ran under the same ones)."""
    from harness.models.hosted import HostedRealtimeModel
    from harness.models.registry import model_class

    out = {}
    for m in cfg.models:
        try:
            cls = model_class(m.target)
        except (ImportError, ValueError):
            continue
        if isinstance(cls, type) and issubclass(cls, HostedRealtimeModel):
            out[m.name] = {"provider": cls.provider, "model": metered_key(m.target, m.params),
                           "settings": cls.turn_taking(m.params)}
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


def request_times(cfg: RunConfig, index: dict[str, Any], scenes: dict[str, Scene]) -> dict[str, float]:
    """Seconds from the first human turn's start to T's start, per conversation.

    Everything up to T is scripted, so the scheduler's initial placements give this on a
    model-independent timeline: every model gets the same tertile bins (spec section 6).
    """
    out = {}
    for sid, entry in index["conversations"].items():
        scene = scenes[sid]
        sched = Scheduler([t["n"] for t in entry["turns"]], [t.label for t in scene.turns],
                          index["preamble"]["n"], cfg.protocol)
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
