"""The pipeline's stages. Each reads its inputs by key, writes under its own prefix, and
writes its completion marker last; a stage whose marker exists is skipped.

    scenes -> synth -> infer (Ray actors) -> vad -> score (ASR + judge) -> reduce
"""

from __future__ import annotations

import io
import json
import logging
from collections import defaultdict
from dataclasses import asdict
from typing import Any

import numpy as np
from tqdm import tqdm

from harness.audio.io import decode, encode
from harness.audio.tts.espeak import EspeakSettings, EspeakTTS, SynthesisError
from harness.metrics.analyses import all_statistics
from harness.metrics.outcomes import conversation_outcomes, with_verdict
from harness.metrics.scores import compute_metrics
from harness.protocol.scheduler import Scheduler
from harness.report.conversation import conversation_page, example_conversations
from harness.report.figures import report_figures
from harness.report.markdown import render_html, render_report
from harness.runtime.config import RunConfig
from harness.runtime.executor import ray_session, run_shards, shard_plan
from harness.runtime.plan import RunPlan
from harness.scenes.generator import corpus_stats, generate_pairs
from harness.scenes.schema import CONDITIONS, Scene, SceneError, iter_manifest, write_manifest
from harness.store.base import ObjectStore, get_json, open_store, put_json
from harness.store.layout import cache_prefix
from harness.vad.silero import detect

log = logging.getLogger("duplex_mpe")


class StageInputMissing(RuntimeError):
    """An upstream stage has not completed (its marker is missing)."""


def _require(store: ObjectStore, plan: RunPlan, prefix: str, stage: str) -> None:
    if not store.exists(plan.layout.marker(prefix)):
        raise StageInputMissing(f"stage {stage!r} has not completed at {prefix}: run it first (or run the pipeline)")


def _require_infer(store: ObjectStore, plan: RunPlan, model: str) -> None:
    if not store.exists(plan.layout.file(plan.infer[model], "plan.json")):
        raise StageInputMissing(f"stage 'infer' has not run for model {model!r}: run it first (or run the pipeline)")


def _done(store: ObjectStore, plan: RunPlan, prefix: str, stage: str) -> bool:
    if store.exists(plan.layout.marker(prefix)):
        log.info("%s: complete at %s, skipped", stage, prefix)
        return True
    return False


def load_scenes(store: ObjectStore, plan: RunPlan) -> list[Scene]:
    from harness.scenes.schema import read_manifest

    return read_manifest(store.get(plan.layout.file(plan.scenes, "scenes.jsonl")).decode().splitlines())


# -- scenes ----------------------------------------------------------------------------------
def scenes_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Generate (or import) the scene manifest; invalid scenes are recorded, not written."""
    plan = RunPlan.from_config(cfg)
    if _done(store, plan, plan.scenes, "scenes"):
        return plan.scenes
    s = cfg.scenes
    if s.manifest:
        with open(s.manifest, encoding="utf-8") as fh:
            items = list(iter_manifest(fh))
        scenes = [x for x in items if isinstance(x, Scene)]
        invalid = {x.scene_id: str(x) for x in items if isinstance(x, SceneError)}
    else:
        scenes = generate_pairs(s.n_pairs, s.seed, s.four_party_share, s.n4_share)
        invalid = {}
    buf = io.StringIO()
    write_manifest(scenes, buf)
    lay = plan.layout
    store.put(lay.file(plan.scenes, "scenes.jsonl"), buf.getvalue().encode())
    put_json(store, lay.file(plan.scenes, "invalid.json"), invalid)
    put_json(store, lay.file(plan.scenes, "stats.json"), corpus_stats(scenes))
    put_json(store, lay.marker(plan.scenes), {"scenes": len(scenes), "invalid": len(invalid)})
    log.info("scenes: %d scenes (%d invalid) at %s", len(scenes), len(invalid), plan.scenes)
    return plan.scenes


# -- synth -----------------------------------------------------------------------------------
def synth_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Speak every distinct (voice, text) once (content-addressed clips) and index each conversation."""
    plan = RunPlan.from_config(cfg)
    _require(store, plan, plan.scenes, "scenes")
    if _done(store, plan, plan.synth, "synth"):
        return plan.synth
    if cfg.tts.engine != "espeak":
        raise ValueError(f"tts.engine {cfg.tts.engine!r} is not available here (known: espeak)")
    lay = plan.layout
    tts = EspeakTTS(cfg.protocol.sample_rate, EspeakSettings(words_per_minute=cfg.tts.words_per_minute))
    lengths: dict[str, int] = {}

    def clip(text: str, voice: str) -> dict[str, Any]:
        cid = tts.clip_id(voice, text)
        if cid not in lengths:
            key = lay.clip(plan.synth, cid)
            if store.exists(key):
                lengths[cid] = len(decode(store.get(key))[0])
            else:
                audio = tts.synthesize(text, voice)
                store.put(key, encode(audio, cfg.protocol.sample_rate))
                lengths[cid] = len(audio)
        return {"clip": cid, "n": lengths[cid]}

    scenes = load_scenes(store, plan)
    index: dict[str, Any] = {"sample_rate": cfg.protocol.sample_rate, "conversations": {}, "errors": {}}
    index["preamble"] = clip(cfg.tts.preamble_text, cfg.tts.narrator)
    for scene in tqdm(scenes, desc="synth", unit="scene"):
        try:
            turns = [clip(t.text, cfg.tts.voices[t.speaker]) for t in scene.turns]
            index["conversations"][scene.scene_id] = {"turns": turns}
        except (SynthesisError, KeyError) as e:
            index["errors"][scene.scene_id] = f"synthesis failed: {type(e).__name__}: {e}"
    put_json(store, lay.file(plan.synth, "index.json"), index)
    total_s = sum(lengths.values()) / cfg.protocol.sample_rate
    put_json(store, lay.marker(plan.synth), {"clips": len(lengths), "distinct_audio_s": round(total_s, 2),
                                             "errors": len(index["errors"])})
    log.info("synth: %d distinct clips, %.1f s of audio, %d errors", len(lengths), total_s, len(index["errors"]))
    return plan.synth


# -- infer -----------------------------------------------------------------------------------
def infer_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Stream every conversation through every selected model on Ray actors."""
    plan = RunPlan.from_config(cfg)
    _require(store, plan, plan.synth, "synth")
    lay = plan.layout
    index = get_json(store, lay.file(plan.synth, "index.json"))
    ids = sorted(index["conversations"])
    work: dict[str, dict[str, list[str]]] = {}
    for m in cfg.models:
        prefix = plan.infer[m.name]
        shards = shard_plan(store, lay.file(prefix, "plan.json"), ids, cfg.infer.shard_size)
        pending = {s: v for s, v in shards.items() if not store.exists(lay.marker(lay.shard(prefix, s)))}
        log.info("infer %s: %d shards, %d to run", m.name, len(shards), len(pending))
        if pending:
            work[m.name] = pending
    if work:
        with ray_session(cfg):
            report = run_shards(cfg, work)
        for (model, shard), reason in sorted(report.failed.items()):
            log.error("infer %s %s failed: %s", model, shard, reason)
    return dict(plan.infer)


def infer_records(store: ObjectStore, plan: RunPlan, model: str) -> dict[str, dict[str, Any]]:
    """``{scene_id: marker entry + shard}`` for every conversation in the model's completed shards."""
    lay, prefix = plan.layout, plan.infer[model]
    shards = get_json(store, lay.file(prefix, "plan.json"))
    out = {}
    for shard, ids in shards.items():
        mk = lay.marker(lay.shard(prefix, shard))
        if not store.exists(mk):
            for sid in ids:
                out[sid] = {"status": "error", "reason": f"{shard} has no completed output", "shard": shard}
            continue
        for sid, entry in get_json(store, mk)["conversations"].items():
            out[sid] = {**entry, "shard": shard}
    return out


# -- vad -------------------------------------------------------------------------------------
def detect_outputs(cfg: RunConfig, keys: list[str]) -> list[list[list[int]]]:
    """Offline Silero + post-processor over the stored outputs at ``keys`` (one batch)."""
    store = open_store(cfg.store.kind, cfg.store.root)
    sr = cfg.protocol.sample_rate
    waves = [decode(store.get(k), expected_rate=sr)[0] for k in keys]
    return [segs.tolist() for segs in detect(waves, sr, cfg.vad)]


def vad_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Detect speech in every stored output: batches of ``vad.batch`` conversations run as
    parallel Ray tasks (one CPU each), each batched across its conversations in Silero."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    todo = {}
    for m in cfg.models:
        _require_infer(store, plan, m.name)
        if not _done(store, plan, plan.vad[m.name], f"vad {m.name}"):
            todo[m.name] = infer_records(store, plan, m.name)
    if not todo:
        return dict(plan.vad)
    with ray_session(cfg):
        import ray

        task = ray.remote(num_cpus=1)(detect_outputs)
        jobs = []
        for name, recs in todo.items():
            ok = sorted(s for s, r in recs.items() if r["status"] == "ok")
            for i in range(0, len(ok), cfg.vad.batch):
                ids = ok[i:i + cfg.vad.batch]
                keys = [lay.conversation(lay.shard(plan.infer[name], recs[s]["shard"]), s, "flac") for s in ids]
                jobs.append((name, ids, task.remote(cfg, keys)))
        results = {name: {s: {"status": "error", "reason": r["reason"]} for s, r in recs.items()
                          if r["status"] != "ok"} for name, recs in todo.items()}
        for name, ids, ref in tqdm(jobs, desc="vad batches", unit="batch"):
            for sid, segs in zip(ids, ray.get(ref), strict=True):
                results[name][sid] = {"status": "ok", "segments": segs}
    for name, result in results.items():
        prefix = plan.vad[name]
        put_json(store, lay.file(prefix, "segments.json"), result)
        put_json(store, lay.marker(prefix), {"conversations": len(result),
                                             "ok": sum(r["status"] == "ok" for r in result.values())})
    return dict(plan.vad)


# -- score -----------------------------------------------------------------------------------
ERROR_KEY = "error"  # in verdicts.json: the conversation could not be scored, and why
def _outcomes(cfg: RunConfig, store: ObjectStore, plan: RunPlan, model: str, scene: Scene, shard: str,
              segments: list) -> list[dict[str, Any]]:
    lay = plan.layout
    rec = get_json(store, lay.conversation(lay.shard(plan.infer[model], shard), scene.scene_id, "json"))
    return conversation_outcomes(scene, rec, np.asarray(segments), cfg.protocol, cfg.metrics.yield_deadline_s)


def score_conversations(cfg: RunConfig, model: str, items: list[tuple[str, str]]) -> dict[str, Any]:
    """ASR + judge for the windows of ``items`` (scene id, shard) that need them (one Ray task)."""
    from harness.scoring.asr import build_asr
    from harness.scoring.cache import CachedJudge, ContentCache
    from harness.scoring.flow import ConversationScorer
    from harness.scoring.judge import build_judge

    store = open_store(cfg.store.kind, cfg.store.root)
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    judge = CachedJudge(build_judge(cfg.judge.kind, **cfg.judge.params), store, cache_prefix("judge"))
    scorer = ConversationScorer(build_asr(cfg.asr.kind, **cfg.asr.params), judge,
                                ContentCache(store, cache_prefix("asr")), cfg.protocol.sample_rate,
                                cfg.tts.preamble_text)
    scenes = {s.scene_id: s for s in load_scenes(store, plan)}
    segs = get_json(store, lay.file(plan.vad[model], "segments.json"))
    results: dict[str, Any] = {}
    for sid, shard in items:
        rows = _outcomes(cfg, store, plan, model, scenes[sid], shard, segs[sid]["segments"])
        if not any((r["kind"] == "T" and r["response_presence"]) or (r["kind"] == "silence" and not r["silent"])
                   for r in rows):
            results[sid] = {}
            continue
        key = lay.conversation(lay.shard(plan.infer[model], shard), sid, "flac")
        try:
            output = decode(store.get(key), expected_rate=cfg.protocol.sample_rate)[0]
            results[sid] = scorer.score(scenes[sid], rows, output, np.asarray(segs[sid]["segments"]))
        except Exception as e:
            results[sid] = {ERROR_KEY: f"scoring failed: {type(e).__name__}: {e}"}
    return {"results": results, "asr_calls": scorer.asr_calls, "judge_hits": judge.hits,
            "judge_misses": judge.misses, "usd": judge.cost.usd, "usd_saved": judge.saved.usd}


def score_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Transcribe and judge every window with model speech (spec section 5) as parallel Ray tasks."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    todo = {}
    for m in cfg.models:
        _require(store, plan, plan.vad[m.name], f"vad {m.name}")
        if not _done(store, plan, plan.score[m.name], f"score {m.name}"):
            segs = get_json(store, lay.file(plan.vad[m.name], "segments.json"))
            recs = infer_records(store, plan, m.name)
            todo[m.name] = sorted((s, recs[s]["shard"]) for s, v in segs.items() if v["status"] == "ok")
    if not todo:
        return dict(plan.score)
    with ray_session(cfg):
        import ray

        task = ray.remote(num_cpus=1)(score_conversations)
        jobs = [(name, task.remote(cfg, name, items[i:i + cfg.score.batch]))
                for name, items in todo.items() for i in range(0, len(items), cfg.score.batch)]
        merged = {name: {"results": {}, "asr_calls": 0, "judge_hits": 0, "judge_misses": 0, "usd": 0.0,
                         "usd_saved": 0.0} for name in todo}
        for name, ref in tqdm(jobs, desc="score batches", unit="batch"):
            part = ray.get(ref)
            acc = merged[name]
            acc["results"].update(part.pop("results"))
            for k, v in part.items():
                acc[k] += v
    for name, acc in merged.items():
        prefix = plan.score[name]
        put_json(store, lay.file(prefix, "verdicts.json"), acc.pop("results"))
        acc.update(asr=cfg.asr.kind, judge=cfg.judge.kind)
        put_json(store, lay.marker(prefix), acc)
        log.info("score %s: %d ASR calls, judge %d hits / %d misses, $%.4f", name, acc["asr_calls"],
                 acc["judge_hits"], acc["judge_misses"], acc["usd"])
    return dict(plan.score)


# -- reduce ----------------------------------------------------------------------------------
def reduce_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Per-event table, ``metrics.json`` and the Markdown report."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    if _done(store, plan, plan.reduce, "reduce"):
        return plan.reduce
    scenes = {s.scene_id: s for s in load_scenes(store, plan)}
    index = get_json(store, lay.file(plan.synth, "index.json"))
    synth_errors = index["errors"]
    invalid = get_json(store, lay.file(plan.scenes, "invalid.json"))
    rows_by_model: dict[str, list[dict[str, Any]]] = {}
    errors: dict[str, dict[str, int]] = {}
    error_list: list[dict[str, str]] = []
    spend: dict[str, dict[str, Any]] = {}
    for m in cfg.models:
        _require(store, plan, plan.score[m.name], f"score {m.name}")
        segs = get_json(store, lay.file(plan.vad[m.name], "segments.json"))
        verdicts = get_json(store, lay.file(plan.score[m.name], "verdicts.json"))
        spend[m.name] = get_json(store, lay.marker(plan.score[m.name]))
        recs = infer_records(store, plan, m.name)
        rows: list[dict[str, Any]] = []
        errs: dict[str, int] = defaultdict(int)
        for sid, scene in scenes.items():
            reason = synth_errors.get(sid) or (None if sid in segs else "no infer output")
            entry = segs.get(sid, {})
            if reason is None and entry.get("status") != "ok":
                reason = entry.get("reason", "unknown error")
            if reason is None:
                reason = verdicts.get(sid, {}).get(ERROR_KEY)
            if reason is None:
                try:
                    conv = _outcomes(cfg, store, plan, m.name, scene, recs[sid]["shard"], entry["segments"])
                    rows += [{"model": m.name, **with_verdict(r, verdicts.get(sid, {}))} for r in conv]
                    continue
                except (ValueError, KeyError) as e:
                    reason = f"cannot score: {type(e).__name__}: {e}"
            errs[scene.condition] += 1
            error_list.append({"model": m.name, "scene_id": sid, "reason": reason})
        rows_by_model[m.name] = rows
        errors[m.name] = dict(errs)
    metrics = compute_metrics(rows_by_model, errors, CONDITIONS, cfg.metrics.min_n, cfg.judge.kind)
    statistics = all_statistics(rows_by_model, metrics, request_times(cfg, index, scenes), CONDITIONS,
                                cfg.metrics.min_n)
    statistics["scoring_cost"] = spend
    all_rows = [r for rows in rows_by_model.values() for r in rows]
    put_json(store, lay.file(plan.reduce, "metrics.json"), metrics)
    put_json(store, lay.file(plan.reduce, "statistics.json"), statistics)
    store.put(lay.file(plan.reduce, "events.parquet"), _parquet(all_rows))
    put_json(store, lay.file(plan.reduce, "errors.json"), {"conversations": error_list, "invalid_scenes": invalid})
    stats = get_json(store, lay.file(plan.scenes, "stats.json"))
    report = render_report(cfg, metrics, statistics, stats, error_list, invalid, plan)
    store.put(lay.file(plan.reduce, "report.md"), report.encode())
    html = render_html(cfg, metrics, statistics, stats, error_list, invalid, plan, report_figures(metrics))
    store.put(lay.file(plan.reduce, "report.html"), html.encode())
    _conversation_pages(cfg, store, plan, scenes, rows_by_model)
    put_json(store, lay.marker(plan.reduce), {"models": [m.name for m in cfg.models], "rows": len(all_rows)})
    return plan.reduce


def _conversation_pages(cfg: RunConfig, store: ObjectStore, plan: RunPlan, scenes: dict[str, Scene],
                        rows_by_model: dict[str, list[dict[str, Any]]]) -> None:
    """One debugging page per model for an example of every kind of outcome (pass, fail, exclusion)."""
    lay = plan.layout
    for m in cfg.models:
        rows = rows_by_model[m.name]
        segs = get_json(store, lay.file(plan.vad[m.name], "segments.json"))
        recs = infer_records(store, plan, m.name)
        for sids in example_conversations(rows).values():
            for sid in sids:
                rec = get_json(store, lay.conversation(lay.shard(plan.infer[m.name], recs[sid]["shard"]), sid, "json"))
                page = conversation_page(m.name, scenes[sid], rec, np.asarray(segs[sid]["segments"]).reshape(-1, 2),
                                         [r for r in rows if r["scene_id"] == sid], cfg.protocol.sample_rate,
                                         cfg.protocol.fresh_onset_window_s)
                store.put(lay.file(plan.reduce, f"conversations/{m.name}/{sid}.html"), page.encode())


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


# -- all -------------------------------------------------------------------------------------
STAGES = ("scenes", "synth", "infer", "vad", "score", "reduce")


def run_stage(name: str, cfg: RunConfig, store: ObjectStore) -> Any:
    fn = {"scenes": scenes_stage, "synth": synth_stage, "infer": infer_stage, "vad": vad_stage,
          "score": score_stage, "reduce": reduce_stage}[name]
    return fn(cfg, store)


def write_run_manifest(cfg: RunConfig, store: ObjectStore) -> None:
    """The run's resolved config (first write wins; later runs with the same id reuse it)."""
    plan = RunPlan.from_config(cfg)
    put_json(store, plan.layout.run_manifest(), {"config": json.loads(json.dumps(asdict(cfg), default=str))},
             if_absent=True)


def run_pipeline(cfg: RunConfig, store: ObjectStore) -> str:
    """Run every stage in order; returns the key of the report."""
    write_run_manifest(cfg, store)
    for name in STAGES:
        run_stage(name, cfg, store)
    plan = RunPlan.from_config(cfg)
    return plan.layout.file(plan.reduce, "report.md")
