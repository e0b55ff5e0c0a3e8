"""The ``synth`` stage: every human turn and the spoken preamble as audio clips (spec section 3)."""

from __future__ import annotations

import logging
from typing import Any

from tqdm import tqdm

from harness.audio.io import decode, encode
from harness.audio.tts.espeak import EspeakSettings, EspeakTTS, SynthesisError
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.stages.common import load_scenes, require_stage, stage_done
from harness.store.base import ObjectStore, put_json

log = logging.getLogger("duplex_mpe")


def synth_stage(cfg: RunConfig, store: ObjectStore) -> str:
    """Speak every distinct (voice, text) once (content-addressed clips) and index each conversation."""
    plan = RunPlan.from_config(cfg)
    require_stage(store, plan, plan.scenes, "scenes")
    if stage_done(store, plan, plan.synth, "synth"):
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
