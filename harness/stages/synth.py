"""The ``synth`` stage: every human turn and the spoken preamble as audio clips (spec section 3).

Each distinct (voice, text) is synthesised once (the paper reuses 44.45 of 110.93 h across the
two versions): its clip id is the backend's content hash of everything that determines the
audio, and the clip is stored as FLAC at ``<synth>/clips/<clip_id>.flac``. The work:

* the clips whose length no earlier invocation recorded, longest text first, in batches of
  ``tts.batch``, on a pool of Ray actors (``tts.num_cpus`` / ``tts.num_gpus`` each; espeak-ng on
  CPUs, Qwen3-TTS on GPUs, one model load per actor), ``tts.actors`` of them or as many as the
  cluster holds; in the driver process with ``tts.actors=0``, or when a CPU engine has a
  single batch to make (no actor start-up for work no pool could share);
* each clip is written as soon as it is made, by one atomic put (a temporary file renamed on
  the local store, one PutObject on S3), so a clip that exists is complete; after its batch
  the worker writes ``<synth>/batches/<batch_id>.json`` (the batch's clip lengths);
* **resume**: a later invocation reads those records and lists the stored clips; a clip with
  both is reused as is, a clip stored without a record (its batch was cut short) is decoded
  once to check it and read its length (an unreadable one is made again), and only the rest
  is synthesised;
* **failures**: a clip the engine cannot make (:class:`~harness.audio.tts.SynthesisError`:
  an unknown voice, silent output) is recorded with its reason in the index under
  ``failed_clips``, and every conversation that needs it is ``error`` with that reason (never
  silence); the others go on. A batch lost for another reason (its actor died on every
  ``cluster.batch_attempts`` attempt, the store failed) or an engine that cannot run at all
  (:class:`~harness.audio.tts.TtsUnavailableError`) leaves the stage incomplete:
  :class:`SynthIncomplete` is raised after the other batches finish, no index or marker is
  written, and a rerun makes only what is missing;
* ``index.json`` then the marker are written last.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from tqdm import tqdm

from harness.audio.io import AudioError, decode, encode
from harness.audio.tts import SynthesisError, TtsUnavailableError, build_tts
from harness.products.scenes import SceneSet
from harness.products.timeline import ClipRef, Timeline
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.runtime.plan import SYNTH_VERSION, RunPlan
from harness.runtime.pool import BatchFailure, Resources, map_batches
from harness.store.base import ObjectStore, get_json, put_json
from harness.store.settings import open_store

log = logging.getLogger("duplex_mpe")

class SynthIncomplete(RuntimeError):
    """Some batches were lost (not a clip the engine refused): the clips made are kept, no index
    or marker is written, and a rerun synthesises only what is missing."""


@dataclass(frozen=True)
class ClipJob:
    """One distinct clip to make: its content id, the engine's voice name and the text."""

    clip_id: str
    voice: str
    text: str


def batch_id(jobs: list[ClipJob]) -> str:
    """Name of a batch's length record: a hash of its clip ids."""
    return hashlib.sha256("\n".join(j.clip_id for j in jobs).encode()).hexdigest()[:16]


class ClipSynthesizer:
    """Makes batches of clips into the store; built once per Ray actor (or once in the driver
    with ``tts.actors=0``), loading the engine once. Raises :class:`TtsUnavailableError` when the
    engine cannot run here."""

    def __init__(self, cfg: RunConfig, store: ObjectStore | None = None):
        self.cfg = cfg
        self.store = store if store is not None else open_store(cfg.store)
        self.plan = RunPlan.from_config(cfg)
        self.tts = build_tts(cfg.tts, cfg.protocol.sample_rate)
        self.tts.load()

    def run(self, jobs: list[ClipJob], verify: list[str]) -> dict[str, Any]:
        """Make ``jobs`` into the store; those in ``verify`` are stored already without a
        recorded length, so they are decoded (and made again only when unreadable).

        Returns ``{"lengths": {clip_id: samples}, "failed": {clip_id: reason}, "made": count,
        "audio_s": seconds made}``; writes the batch's length record last.
        """
        lay, prefix, sr = self.plan.layout, self.plan.synth, self.cfg.protocol.sample_rate
        lengths: dict[str, int] = {}
        failed: dict[str, str] = {}
        todo = []
        for job in jobs:
            if job.clip_id in verify:
                try:
                    lengths[job.clip_id] = len(decode(self.store.get(lay.clip(prefix, job.clip_id)), sr)[0])
                    continue
                except (AudioError, FileNotFoundError) as e:
                    log.warning("synth: stored clip %s is unusable (%s); making it again", job.clip_id, e)
            todo.append(job)
        samples = 0
        step = len(todo) if self.tts.batched else 1  # a clip is stored as soon as its engine call returns
        for i in range(0, len(todo), step):
            chunk = todo[i:i + step]
            for job, audio in zip(chunk, self._speak(chunk), strict=True):
                if isinstance(audio, SynthesisError):
                    failed[job.clip_id] = f"{type(audio).__name__}: {audio}"
                    continue
                self.store.put(lay.clip(prefix, job.clip_id), encode(audio, sr))
                lengths[job.clip_id] = len(audio)
                samples += len(audio)
        put_json(self.store, lay.file(prefix, f"batches/{batch_id(jobs)}.json"), {"lengths": lengths})
        return {"lengths": lengths, "failed": failed, "made": len(todo) - len(failed), "audio_s": samples / sr}

    def _speak(self, jobs: list[ClipJob]) -> list[Any]:
        """One engine call for the batch; when the engine refuses the call as a whole (e.g. one
        unknown speaker), one call per clip so that only the clips at fault fail."""
        if not jobs:
            return []
        try:
            return self.tts.synthesize_batch([j.text for j in jobs], [j.voice for j in jobs])
        except TtsUnavailableError:
            raise
        except SynthesisError as e:
            if len(jobs) == 1:
                return [e]
        return [x for j in jobs for x in self._speak([j])]


def clip_jobs(cfg: RunConfig, tts: Any, scenes: list) -> tuple[dict[str, ClipJob], dict[str, list], dict[str, str]]:
    """The distinct clips of the preamble and every scene's turns.

    Returns ``(jobs by clip id, per scene the clip id of each turn, per scene an error)``: a
    scene whose speaker has no voice in ``tts.voices`` gets that error and no clips.
    """
    jobs: dict[str, ClipJob] = {}

    def job(voice: str, text: str) -> str:
        cid = tts.clip_id(voice, text)
        jobs.setdefault(cid, ClipJob(cid, voice, text))
        return cid

    job(cfg.tts.narrator, cfg.tts.preamble_text)
    turns: dict[str, list] = {}
    errors: dict[str, str] = {}
    for scene in scenes:
        missing = sorted({t.speaker for t in scene.turns} - set(cfg.tts.voices))
        if missing:
            errors[scene.scene_id] = f"synthesis failed: no voice for speaker(s) {', '.join(missing)} (tts.voices)"
            continue
        turns[scene.scene_id] = [job(cfg.tts.voices[t.speaker], t.text) for t in scene.turns]
    return jobs, turns, errors


def _recorded_lengths(store: ObjectStore, plan: RunPlan) -> tuple[dict[str, int], set[str]]:
    """Lengths from earlier invocations' batch records, and the clip ids stored."""
    lay = plan.layout
    stored = {k.rsplit("/", 1)[1].removesuffix(".flac") for k in store.list(lay.file(plan.synth, "clips"))}
    lengths: dict[str, int] = {}
    for key in store.list(lay.file(plan.synth, "batches")):
        lengths.update(get_json(store, key)["lengths"])
    return {c: n for c, n in lengths.items() if c in stored}, stored


class SynthStage(Stage):
    """Speak every distinct (voice, text) once and index each conversation (module docstring).

    Writes the :class:`~harness.products.timeline.Timeline` (``index.json``) after the clips, then
    the marker. Raises :class:`SynthIncomplete` when batches were lost, :class:`SynthesisError`
    when the preamble cannot be made.
    """

    name, version = "synth", SYNTH_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: RunPlan) -> list[Unit]:
        return [Unit(self.name, plan.synth)]

    def inputs(self, plan: RunPlan) -> list[Unit]:
        return [Unit("scenes", plan.scenes)]

    def compute(self, store: ObjectStore, plan: RunPlan, todo: list[Unit]):
        cfg = self.cfg
        tts = build_tts(cfg.tts, cfg.protocol.sample_rate)  # clip ids only: the engine loads in the workers
        scenes = SceneSet.read(store, plan.layout, plan.scenes).scenes
        jobs, turns, errors = clip_jobs(cfg, tts, scenes)
        lengths, stored = _recorded_lengths(store, plan)
        todo_clips = sorted((j for c, j in jobs.items() if c not in lengths), key=lambda j: (-len(j.text), j.clip_id))
        batches = [todo_clips[i:i + cfg.tts.batch] for i in range(0, len(todo_clips), cfg.tts.batch)]
        log.info("synth: %d distinct clips, %d stored, %d to make in %d batches", len(jobs), len(lengths),
                 len(todo_clips), len(batches))
        failed: dict[str, str] = {}
        lost: list[str] = []
        made, made_s = 0, 0.0
        t0 = time.perf_counter()
        bar = tqdm(total=len(todo_clips), desc="synth clips", unit="clip")
        try:
            for jobs_done, result in _run_batches(cfg, batches, stored):
                if isinstance(result, str):
                    log.warning("synth: a batch of %d clips was lost: %s", len(jobs_done), result)
                    lost.append(result)
                else:
                    lengths.update(result["lengths"])
                    failed.update(result["failed"])
                    made, made_s = made + result["made"], made_s + result["audio_s"]
                bar.update(len(jobs_done))
                bar.set_postfix(made=made, failed=len(failed), lost=len(lost))
        finally:
            bar.close()
        if lost:
            raise SynthIncomplete(f"synth: {len(lost)} of {len(batches)} batch(es) were lost ({lost[0]}); the "
                                  f"{made} clips made are kept, rerun the stage to make the rest")
        pre = jobs[tts.clip_id(cfg.tts.narrator, cfg.tts.preamble_text)]
        if pre.clip_id in failed:
            raise SynthesisError(f"the duty preamble (voice {pre.voice!r}) could not be synthesised: "
                                 f"{failed[pre.clip_id]}")
        by_id = {s.scene_id: s for s in scenes}
        conversations = {}
        for sid, cids in turns.items():
            bad = next((i for i, c in enumerate(cids) if c in failed), None)
            if bad is None:
                conversations[sid] = tuple(ClipRef(c, lengths[c]) for c in cids)
            else:
                errors[sid] = (f"synthesis failed: turn {bad} (speaker {by_id[sid].turns[bad].speaker}, "
                               f"voice {jobs[cids[bad]].voice!r}): {failed[cids[bad]]}")
        timeline = Timeline(cfg.protocol.sample_rate, ClipRef(pre.clip_id, lengths[pre.clip_id]), conversations,
                            errors, {c: {"voice": jobs[c].voice, "text": jobs[c].text, "reason": r}
                                     for c, r in sorted(failed.items())})
        used = {c for cids in turns.values() for c in cids if c not in failed} | {pre.clip_id}
        total_s = sum(lengths[c] for c in used) / cfg.protocol.sample_rate
        log.info("synth: %d distinct clips (%d made now in %.1f s, %.1f s of audio), %.1f s of audio in all, "
                 "%d failed clips, %d conversations in error", len(used), made, time.perf_counter() - t0, made_s,
                 total_s, len(failed), len(errors))
        yield todo[0], Output({"clips": len(used), "distinct_audio_s": round(total_s, 2), "errors": len(errors),
                               "failed_clips": len(failed), "engine": cfg.tts.engine}, timeline.objects())


def _run_batches(cfg: RunConfig, batches: list[list[ClipJob]],
                 stored: set[str]) -> Iterator[tuple[list[ClipJob], dict[str, Any] | str]]:
    """Yield ``(batch, result)`` as batches finish, on the synthesis pool
    (:func:`~harness.runtime.pool.map_batches`; in this process with ``tts.actors=0``, or when a CPU
    engine has a single batch); ``result`` is :meth:`ClipSynthesizer.run`'s, or why the batch was
    lost (its actor died every ``cluster.batch_attempts`` attempt, or the worker raised)."""
    t = cfg.tts
    one_cpu_batch = not t.num_gpus and len(batches) == 1  # no actor start-up for work no pool could share
    resources = Resources.of(t, "the synthesis actor (tts.num_cpus / tts.num_gpus)")
    work = [(b, [j.clip_id for j in b if j.clip_id in stored]) for b in batches]
    for i, out in map_batches(cfg, "synth", ClipSynthesizer, "run", work,
                              replace(resources, actors=0) if one_cpu_batch else resources, args=(cfg,),
                              describe=lambda i: f"{len(batches[i])} clips, {batch_id(batches[i])}", progress=False):
        yield batches[i], out.detail() if isinstance(out, BatchFailure) else out
