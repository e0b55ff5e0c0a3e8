"""The pipeline's stages. Each reads its inputs by key, writes under its own prefix, and
writes its completion marker last; a stage whose marker exists is skipped.

    scenes -> reference (text) -> synth -> infer (Ray actors) -> vad -> score (ASR + judge) -> reduce
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from tqdm import tqdm

from harness.audio.io import decode, encode
from harness.audio.tts.espeak import EspeakSettings, EspeakTTS, SynthesisError
from harness.metrics.analyses import all_statistics, output_checks, streaming_speed
from harness.metrics.outcomes import conversation_outcomes, with_verdict
from harness.metrics.scores import compute_metrics
from harness.protocol.scheduler import Scheduler
from harness.report.conversation import conversation_page, example_conversations, mix_flac, stereo_mix
from harness.report.figures import report_figures
from harness.report.markdown import render_html, render_report
from harness.review.results import load_results
from harness.runtime.config import RunConfig
from harness.runtime.executor import (
    BudgetExceeded,
    actor_count,
    ray_session,
    require_resources,
    run_shards,
    shard_plan,
)
from harness.runtime.ledger import ModelLedger, read_ledger
from harness.runtime.manifest import write_run_manifest
from harness.runtime.plan import RunPlan
from harness.runtime.shard import read_output
from harness.scenes.generator import corpus_stats, generate_pairs
from harness.scenes.schema import CONDITIONS, Scene, import_manifest, validate_scenes, write_manifest
from harness.store.base import ObjectStore, get_json, open_store, put_json
from harness.store.layout import cache_prefix
from harness.vad.silero import frame_samples, segment_probs, speech_probs
from harness.vad.sweep import sweep_points, sweep_scores, sweep_segments
from harness.vad.tables import probability_bytes, read_sweep_rows, segment_table_bytes, sweep_table_bytes

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
    if s.manifest:  # the same line and pair rules as generated scenes (docs/formats.md)
        with open(s.manifest, encoding="utf-8") as fh:
            scenes, invalid = import_manifest(fh)
    else:
        scenes, invalid = validate_scenes(generate_pairs(s.n_pairs, s.seed, s.four_party_share, s.n4_share,
                                                         s.profile), strict=True)
    buf = io.StringIO()
    write_manifest(scenes, buf)
    lay = plan.layout
    store.put(lay.file(plan.scenes, "scenes.jsonl"), buf.getvalue().encode())
    put_json(store, lay.file(plan.scenes, "invalid.json"), invalid)
    put_json(store, lay.file(plan.scenes, "stats.json"), corpus_stats(scenes))
    put_json(store, lay.marker(plan.scenes), {"scenes": len(scenes), "invalid": len(invalid)})
    log.info("scenes: %d scenes (%d invalid) at %s", len(scenes), len(invalid), plan.scenes)
    return plan.scenes


# -- reference -------------------------------------------------------------------------------
def reference_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """The text-conditioned reference (spec section 7): ``reference.runs`` passes over every turn
    of every scene, its scores and the agreement between passes, in ``reference.json``."""
    from harness.reference import build_reference
    from harness.reference.evaluate import run_reference
    from harness.scoring.cache import CachedJudge
    from harness.scoring.judge import build_judge

    plan = RunPlan.from_config(cfg)
    _require(store, plan, plan.scenes, "scenes")
    if _done(store, plan, plan.reference, "reference"):
        return plan.reference
    rc = cfg.reference
    reference = build_reference(rc.kind, store=store, cache_prefix=cache_prefix("reference"), **rc.params)
    judge = CachedJudge(build_judge(cfg.judge.kind, **cfg.judge.params), store, cache_prefix("judge"))
    out = run_reference(load_scenes(store, plan), reference, judge, cfg.tts.preamble_text, rc.runs,
                        cfg.metrics.min_n, rc.workers)
    lay = plan.layout
    put_json(store, lay.file(plan.reference, "reference.json"), out)
    put_json(store, lay.marker(plan.reference), {"kind": rc.kind, "turns": len(out["turns"]),
                                                 "errors": len(out["errors"]), "cost": out["cost"]})
    ref_cost = out["cost"]["reference"]
    log.info("reference %s: %d decisions, %d errors, %d calls / %d cache hits, $%.4f", rc.kind, len(out["turns"]),
             len(out["errors"]), ref_cost["misses"], ref_cost["hits"], ref_cost["cost"]["usd"])
    return plan.reference


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
class InferIncomplete(RuntimeError):
    """Some infer shards have no marker after the stage ran (failed, or left by the budget)."""


def infer_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Stream every conversation through every selected model on Ray actors.

    Completed shards (marker present) are skipped and cost nothing. Raises
    :class:`~harness.runtime.executor.BudgetExceeded` when the budget stopped the stage and
    :class:`InferIncomplete` when shards failed, so that no later stage ever reads a partial
    set of outputs as complete; completed shards stay and ``make rerun-failed`` runs the rest.
    """
    plan = RunPlan.from_config(cfg)
    _require(store, plan, plan.synth, "synth")
    lay = plan.layout
    index = get_json(store, lay.file(plan.synth, "index.json"))
    ids = sorted(index["conversations"])
    work: dict[str, dict[str, list[str]]] = {}
    spent, estimates = 0.0, {}
    for m in cfg.models:
        shards = shard_plan(store, lay.file(plan.infer[m.name], "plan.json"), ids, cfg.infer.shard_size)
        led = read_ledger(store, plan, m.name)
        spent += led.spent_hours
        if led.mean_shard_hours is not None:
            estimates[m.name] = led.mean_shard_hours
        log.info("infer %s: %d shards, %d complete, %d to run", m.name, len(shards), len(led.markers),
                 len(led.missing))
        if led.missing:
            work[m.name] = {s: shards[s] for s in led.missing}
    if not work:
        return dict(plan.infer)
    with ray_session(cfg):
        report = run_shards(cfg, store, work, spent, estimates)
    for (model, shard), reason in sorted(report.failed.items()):
        log.error("infer %s %s failed: %s", model, shard, reason)
    if report.budget_stop:
        raise BudgetExceeded(f"the budget leaves {len(report.not_started)} shard(s) not started: "
                             f"{report.budget_stop}. Completed shards are kept.")
    if report.failed:
        raise InferIncomplete(f"{len(report.failed)} shard(s) failed after {cfg.cluster.shard_attempts} attempts "
                              "(reasons below); completed shards are kept.")
    return dict(plan.infer)


def infer_records(store: ObjectStore, plan: RunPlan, model: str,
                  led: ModelLedger | None = None) -> dict[str, dict[str, Any]]:
    """``{scene_id: marker entry + shard}`` for every conversation of the model's shard plan.

    An entry has ``status``, ``reason`` and ``objects`` (``kind -> {key, sha256}``, read with
    :func:`~harness.runtime.shard.read_output`). Raises :class:`InferIncomplete` when a shard
    has no marker: a partial ``infer`` is never read as complete. ``led``: the model's ledger
    when the caller has read it already (read here, without failure listings, otherwise).
    """
    led = led or read_ledger(store, plan, model, failures=False)
    if led.missing:
        raise InferIncomplete(f"infer {model}: {len(led.missing)} of {len(led.shards)} shards incomplete "
                              f"({', '.join(led.missing[:5])}{'...' if len(led.missing) > 5 else ''}): "
                              "run `make rerun-failed` first")
    return {sid: {**entry, "shard": shard} for shard, mk in led.markers.items()
            for sid, entry in mk["conversations"].items()}


# -- vad -------------------------------------------------------------------------------------
def reuses_online_detector(cfg: RunConfig) -> bool:
    """True when the scored detector computes the same Silero probabilities as the online one
    (same model; the streaming resampler gives the same 16 kHz samples online and offline; the
    post-processing rules may differ), so the ``vad`` stage post-processes the probabilities
    ``infer`` stored instead of re-running Silero."""
    return cfg.vad.model == cfg.detector.model


def segment_entry(segments: np.ndarray, scored_samples: int, cfg: RunConfig) -> dict[str, Any]:
    """One ok conversation's ``segments.json`` entry (without ``status``).

    ``segments``: ``int64[k, 2]`` sorted ``[start, end)`` speech in timeline samples.
    ``scored_samples``: where the last scored detector frame ends (samples). The entry's
    ``truncated`` is True when the last segment was still open when the stream ended: its pause
    was never confirmed (its end + ``vad.rules.min_silence_s`` lies beyond the last scored
    frame), so it was closed at the end of the stream. Readers of older entries without the key
    take it as False.
    """
    sr = cfg.protocol.sample_rate
    segs = np.asarray(segments, dtype=np.int64).reshape(-1, 2)
    truncated = bool(len(segs)) and int(segs[-1, 1]) + cfg.vad.rules.samples(sr)[1] > scored_samples
    return {"segments": segs.tolist(), "truncated": truncated}


def detect_outputs(cfg: RunConfig, entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], np.ndarray]]:
    """Offline Silero over the stored outputs of ``entries`` (one batch, all streams in one call
    of :func:`~harness.vad.silero.speech_probs` on ``vad.device``), then the post-processor:
    per entry its :func:`segment_entry` and its probabilities (``float32[k]``, kept for sweeps)."""
    store = open_store(cfg.store)
    sr = cfg.protocol.sample_rate
    waves = [decode(read_output(store, e, "flac"), expected_rate=sr)[0] for e in entries]
    probs = speech_probs(waves, sr, cfg.vad.device)
    segments = segment_probs(probs, sr, cfg.vad.rules)
    frame = frame_samples(sr)
    return [(segment_entry(s, len(p) * frame, cfg), p) for s, p in zip(segments, probs, strict=True)]


def stored_probs(store: ObjectStore, entry: dict[str, Any]) -> np.ndarray:
    """The online probabilities ``infer`` stored for one conversation (``float32[k]``)."""
    return np.load(io.BytesIO(read_output(store, entry, "probs.npy")), allow_pickle=False)


def segment_stored_probs(cfg: RunConfig, store: ObjectStore, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The post-processor (``vad.rules``) over the online probabilities ``infer`` stored: one
    :func:`segment_entry` per entry."""
    probs = [stored_probs(store, e) for e in entries]
    sr = cfg.protocol.sample_rate
    segs = segment_probs(probs, sr, cfg.vad.rules)
    return [segment_entry(s, len(p) * frame_samples(sr), cfg) for s, p in zip(segs, probs, strict=True)]


def vad_sweep(cfg: RunConfig, store: ObjectStore, plan: RunPlan, recs: dict[str, dict[str, Any]],
              probs: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """``vad.sweep`` for one model: the segmenter rerun over the stored probabilities of every ok
    conversation under every swept setting (one call of :func:`~harness.vad.sweep.sweep_segments`),
    then each segment-only score (:data:`~harness.vad.sweep.SWEPT_SCORES`) per condition. Rows
    ``{setting, value, condition, score, successes, n, rate}``; a conversation whose record does
    not fit its scene (the score stage reports it) is left out."""
    points = sweep_points(cfg.vad.rules, dict(cfg.vad.sweep))
    ids = sorted(probs)
    sr = cfg.protocol.sample_rate
    segs = sweep_segments([probs[s] for s in ids], frame_samples(sr), sr, [p.rules for p in points])
    scenes = {s.scene_id: s for s in load_scenes(store, plan)}
    records = {sid: json.loads(read_output(store, recs[sid], "json")) for sid in ids}
    rows = []
    for point, per_conv in zip(points, segs, strict=True):
        outcomes = []
        for sid, s in zip(ids, per_conv, strict=True):
            try:
                outcomes += _outcomes(cfg, scenes[sid], records[sid], s)
            except ValueError:
                continue
        rows += [{"setting": point.setting, "value": point.value, **r} for r in sweep_scores(outcomes)]
    return rows


def vad_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Find the model's speech in every stored output.

    When :func:`reuses_online_detector`, the post-processor runs over the stored online
    probabilities (seconds); otherwise Silero runs again over the stored audio in batches of
    ``vad.batch`` conversations as parallel Ray tasks (one CPU each, or one GPU with
    ``vad.device: cuda``), and the probabilities are kept in ``probabilities.parquet``.
    Writes ``segments.json`` (the per-model index: status, segments, truncated) and
    ``segments.parquet`` (one row per segment, :mod:`harness.vad.tables`).
    """
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    todo = {}
    for m in cfg.models:
        _require_infer(store, plan, m.name)
        if not _done(store, plan, plan.vad[m.name], f"vad {m.name}"):
            todo[m.name] = infer_records(store, plan, m.name)
    if not todo:
        return dict(plan.vad)
    results = {name: {s: {"status": "error", "reason": r["reason"]} for s, r in recs.items() if r["status"] != "ok"}
               for name, recs in todo.items()}
    probs: dict[str, dict[str, np.ndarray]] = {name: {} for name in todo}
    batches = [(name, ids[i:i + cfg.vad.batch]) for name, recs in todo.items()
               for ids in [sorted(s for s, r in recs.items() if r["status"] == "ok")]
               for i in range(0, len(ids), cfg.vad.batch)]

    def store_batch(name: str, ids: list[str], compute: Callable[[str, list[str]], list]) -> None:
        """Segments of ``ids``; a batch that fails is retried conversation by conversation, so a
        corrupt or missing output is an error on its own conversation only."""
        try:
            segs = compute(name, ids)
        except Exception as e:
            if len(ids) > 1:
                for sid in ids:
                    store_batch(name, [sid], compute)
            else:
                results[name][ids[0]] = {"status": "error",
                                         "reason": f"speech detection failed: {type(e).__name__}: {e}"}
            return
        for sid, (seg, p) in zip(ids, segs, strict=True):
            results[name][sid] = {"status": "ok", **seg}
            if p is not None:
                probs[name][sid] = p

    reuse = reuses_online_detector(cfg)
    if reuse:
        def from_probs(name: str, ids: list[str]) -> list:
            ps = [stored_probs(store, todo[name][s]) for s in ids]
            sr = cfg.protocol.sample_rate
            return [(segment_entry(s, len(p) * frame_samples(sr), cfg), p)
                    for s, p in zip(segment_probs(ps, sr, cfg.vad.rules), ps, strict=True)]

        for name, ids in tqdm(batches, desc="vad (stored probabilities)", unit="batch"):
            store_batch(name, ids, from_probs)
    else:
        with ray_session(cfg):
            import ray

            on_gpu = cfg.vad.device.startswith("cuda")
            task = ray.remote(num_cpus=1, num_gpus=1 if on_gpu else 0)(detect_outputs)
            refs = {(name, tuple(ids)): task.remote(cfg, [todo[name][s] for s in ids]) for name, ids in batches}

            def on_ray(name: str, ids: list[str]) -> list:  # the batch submitted above, or a retry of a part
                ref = refs.pop((name, tuple(ids)), None) or task.remote(cfg, [todo[name][s] for s in ids])
                return ray.get(ref)

            for name, ids in tqdm(batches, desc="vad batches", unit="batch"):
                store_batch(name, ids, on_ray)
    for name, result in results.items():
        prefix = plan.vad[name]
        put_json(store, lay.file(prefix, "segments.json"), result)
        store.put(lay.file(prefix, "segments.parquet"), segment_table_bytes(result))
        if not reuse:  # the online probabilities are infer's; these are the only copy of the offline ones
            store.put(lay.file(prefix, "probabilities.parquet"), probability_bytes(probs[name]))
        if cfg.vad.sweep:
            store.put(lay.file(prefix, "sweep.parquet"),
                      sweep_table_bytes(vad_sweep(cfg, store, plan, todo[name], probs[name])))
        put_json(store, lay.marker(prefix), {"conversations": len(result),
                                             "ok": sum(r["status"] == "ok" for r in result.values()),
                                             "truncated": sum(r.get("truncated", False) for r in result.values()),
                                             "source": "online probabilities" if reuse else "offline Silero"})
    return dict(plan.vad)


# -- score -----------------------------------------------------------------------------------
ERROR_KEY = "error"  # in verdicts.json: the conversation could not be scored, and why


def _outcomes(cfg: RunConfig, scene: Scene, rec: dict[str, Any], segments: list) -> list[dict[str, Any]]:
    """The conversation's scored windows from its infer record and speech segments."""
    return conversation_outcomes(scene, rec, np.asarray(segments), cfg.protocol, cfg.metrics.yield_deadline_s)


class ConversationScoring:
    """ASR + judge for the windows that need them; built once per Ray actor (the ASR and judge
    load once), then :meth:`score` runs batches of one model's conversations."""

    def __init__(self, cfg: RunConfig):
        from harness.scoring.asr import build_asr
        from harness.scoring.cache import CachedJudge, ContentCache
        from harness.scoring.flow import ConversationScorer
        from harness.scoring.judge import build_judge

        self.cfg = cfg
        self.store = open_store(cfg.store)
        self.plan = RunPlan.from_config(cfg)
        self.judge = CachedJudge(build_judge(cfg.judge.kind, **cfg.judge.params), self.store, cache_prefix("judge"))
        self.scorer = ConversationScorer(build_asr(cfg.asr.kind, **cfg.asr.params), self.judge,
                                         ContentCache(self.store, cache_prefix("asr")), cfg.protocol.sample_rate,
                                         cfg.tts.preamble_text, bias_with_gold=cfg.asr.bias_with_gold)
        self.scenes = {s.scene_id: s for s in load_scenes(self.store, self.plan)}
        self._segments: dict[str, dict[str, Any]] = {}

    def score(self, model: str, items: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """``items``: (scene id, infer record). Returns verdicts per scene and this batch's counts."""
        cfg, store = self.cfg, self.store
        if model not in self._segments:
            self._segments[model] = get_json(store, self.plan.layout.file(self.plan.vad[model], "segments.json"))
        segs = self._segments[model]
        before = (self.scorer.asr_calls, self.judge.hits, self.judge.misses, self.judge.cost.usd,
                  self.judge.saved.usd)
        results: dict[str, Any] = {}
        for sid, entry in items:
            try:
                rec = json.loads(read_output(store, entry, "json"))
                rows = _outcomes(cfg, self.scenes[sid], rec, segs[sid]["segments"])
                if not any((r["kind"] == "T" and r["response_presence"]) or
                           (r["kind"] == "silence" and not r["silent"]) for r in rows):
                    results[sid] = {}
                    continue
                output = decode(read_output(store, entry, "flac"), expected_rate=cfg.protocol.sample_rate)[0]
                results[sid] = self.scorer.score(self.scenes[sid], rows, output, np.asarray(segs[sid]["segments"]))
            except Exception as e:
                results[sid] = {ERROR_KEY: f"scoring failed: {type(e).__name__}: {e}"}
        after = (self.scorer.asr_calls, self.judge.hits, self.judge.misses, self.judge.cost.usd, self.judge.saved.usd)
        counts = dict(zip(("asr_calls", "judge_hits", "judge_misses", "usd", "usd_saved"),
                          (a - b for a, b in zip(after, before, strict=True)), strict=True))
        return {"model": model, "results": results, **counts}


def score_stage(cfg: RunConfig, store: ObjectStore) -> dict[str, str]:
    """Transcribe and judge every window with model speech (spec section 5) on a pool of Ray
    actors (``score.num_cpus`` / ``num_gpus`` each, ``score.actors`` or as many as the cluster
    holds), batches of ``score.batch``, the batches with the most speech first."""
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    todo, speech = {}, {}
    for m in cfg.models:
        _require(store, plan, plan.vad[m.name], f"vad {m.name}")
        if not _done(store, plan, plan.score[m.name], f"score {m.name}"):
            segs = get_json(store, lay.file(plan.vad[m.name], "segments.json"))
            recs = infer_records(store, plan, m.name)
            speech.update({(m.name, s): sum(e - b for b, e in v["segments"]) for s, v in segs.items()
                           if v["status"] == "ok"})
            # most speech first: ASR time grows with it, so the longest batches start first
            todo[m.name] = sorted(((s, recs[s]) for s, v in segs.items() if v["status"] == "ok"),
                                  key=lambda item, m=m.name: (-speech[(m, item[0])], item[0]))
    if not todo:
        return dict(plan.score)
    batches = sorted(((name, items[i:i + cfg.score.batch]) for name, items in todo.items()
                      for i in range(0, len(items), cfg.score.batch)),
                     key=lambda b: -sum(speech[(b[0], sid)] for sid, _ in b[1]))
    merged = {name: {"results": {}, "asr_calls": 0, "judge_hits": 0, "judge_misses": 0, "usd": 0.0,
                     "usd_saved": 0.0} for name in todo}
    with ray_session(cfg):
        import ray
        from ray.util import ActorPool

        sc = cfg.score
        require_resources({"the scoring actor (score.num_cpus / score.num_gpus)": (sc.num_cpus, sc.num_gpus)},
                          cfg.cluster.resource_wait_s)
        n_actors = actor_count(sc.actors, sc.num_cpus, sc.num_gpus, len(batches))
        actor = ray.remote(num_cpus=sc.num_cpus, num_gpus=sc.num_gpus)(ConversationScoring)
        pool = ActorPool([actor.remote(cfg) for _ in range(n_actors)])
        parts = pool.map_unordered(lambda a, b: a.score.remote(*b), batches)
        for part in tqdm(parts, total=len(batches), desc="score batches", unit="batch"):
            acc = merged[part.pop("model")]
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
    _require(store, plan, plan.reference, "reference")
    reference = get_json(store, lay.file(plan.reference, "reference.json"))
    rows_by_model: dict[str, list[dict[str, Any]]] = {}
    errors: dict[str, dict[str, int]] = {}
    error_list: list[dict[str, str]] = []
    spend: dict[str, dict[str, Any]] = {}
    outputs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # model -> (infer records, vad segments)
    produced: dict[str, list[dict[str, Any]]] = {}  # model -> what each stored output holds (output_checks)
    failures: dict[str, dict[str, int]] = {}  # model -> failed infer attempts and conversation errors
    sr = cfg.protocol.sample_rate
    for m in cfg.models:
        _require(store, plan, plan.score[m.name], f"score {m.name}")
        segs = get_json(store, lay.file(plan.vad[m.name], "segments.json"))
        verdicts = get_json(store, lay.file(plan.score[m.name], "verdicts.json"))
        spend[m.name] = get_json(store, lay.marker(plan.score[m.name]))
        led = read_ledger(store, plan, m.name)
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
                        conv = _outcomes(cfg, scene, rec, entry["segments"])
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
    all_rows = [r for rows in rows_by_model.values() for r in rows]
    put_json(store, lay.file(plan.reduce, "metrics.json"), metrics)
    put_json(store, lay.file(plan.reduce, "statistics.json"), statistics)
    statistics["human_validation"] = load_results(store, plan.review)  # shown, not stored: harness/review
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
STAGES = ("scenes", "reference", "synth", "infer", "vad", "score", "reduce")


def run_stage(name: str, cfg: RunConfig, store: ObjectStore) -> Any:
    fn = {"scenes": scenes_stage, "reference": reference_stage, "synth": synth_stage, "infer": infer_stage,
          "vad": vad_stage, "score": score_stage, "reduce": reduce_stage}[name]
    return fn(cfg, store)


def run_pipeline(cfg: RunConfig, store: ObjectStore) -> str:
    """Run every stage in order (one Ray session for all of them); returns the key of the report."""
    write_run_manifest(cfg, store)
    with ray_session(cfg):
        for name in STAGES:
            run_stage(name, cfg, store)
    plan = RunPlan.from_config(cfg)
    return plan.layout.file(plan.reduce, "report.md")
