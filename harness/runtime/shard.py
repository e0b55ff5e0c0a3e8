"""One shard of the ``infer`` stage: load its conversations, stream them, write outputs, mark it done.

:class:`ShardWorker` holds one loaded model; :meth:`ShardWorker.run` processes a shard and
is what the Ray actor (:mod:`harness.runtime.executor`) calls. A conversation whose input
cannot be loaded or that fails while streaming is written with ``status: error`` and its
reason; the shard still completes. The shard marker is written last and lists every
conversation with its status and the checksum of each object written, so a shard without
its marker is never read as complete.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from harness.audio.io import AudioError, decode, encode
from harness.models.registry import build_model
from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.runner import ConversationInput, ConversationResult, run_batch
from harness.scenes.schema import Scene, read_manifest
from harness.store.base import ObjectStore, get_json, put_json


@dataclass
class ShardSummary:
    shard_id: str
    ok: int
    error: int
    wall_s: float
    audio_s: float
    skipped: bool = False


class ShardWorker:
    """Runs shards of one model; loads the model once.

    Args:
        cfg: the run config.
        model: which of ``cfg.models`` this worker runs.
        store: where inputs are read and outputs written.
        device: ``"cpu"`` or ``"cuda"``.
    """

    def __init__(self, cfg: RunConfig, model: ModelSettings, store: ObjectStore, device: str = "cpu"):
        self.cfg, self.msettings, self.store = cfg, model, store
        self.plan = RunPlan.from_config(cfg)
        self.model = build_model(model.target, model.params)
        self.model.load(device)
        self._scenes: dict[str, Scene] | None = None
        self._index: dict | None = None
        self._clip_cache: dict[str, object] = {}

    def _inputs(self) -> tuple[dict[str, Scene], dict]:
        if self._scenes is None:
            lines = self.store.get(self.plan.layout.file(self.plan.scenes, "scenes.jsonl")).decode().splitlines()
            self._scenes = {s.scene_id: s for s in read_manifest(lines)}
            self._index = get_json(self.store, self.plan.layout.file(self.plan.synth, "index.json"))
        return self._scenes, self._index

    def _clip(self, clip_id: str):
        if clip_id not in self._clip_cache:
            data = self.store.get(self.plan.layout.clip(self.plan.synth, clip_id))
            self._clip_cache[clip_id] = decode(data, expected_rate=self.cfg.protocol.sample_rate)[0]
        return self._clip_cache[clip_id]

    def _load(self, scene_id: str, scenes: dict[str, Scene], index: dict) -> ConversationInput:
        entry = index["conversations"][scene_id]
        clips = [self._clip(t["clip"]) for t in entry["turns"]]
        for t, c in zip(entry["turns"], clips, strict=True):
            if len(c) != t["n"]:
                raise AudioError(f"clip {t['clip']} has {len(c)} samples, index says {t['n']}")
        return ConversationInput(scenes[scene_id], clips, self._clip(index["preamble"]["clip"]),
                                 self.cfg.conversation_seed(scene_id), self.cfg.tts.preamble_text)

    def run(self, shard_id: str, scene_ids: list[str]) -> ShardSummary:
        """Process one shard (skipped when its marker exists). Returns its summary."""
        lay, prefix = self.plan.layout, self.plan.infer[self.msettings.name]
        shard_prefix = lay.shard(prefix, shard_id)
        marker_key = lay.marker(shard_prefix)
        if self.store.exists(marker_key):
            m = get_json(self.store, marker_key)
            return ShardSummary(shard_id, m["ok"], m["error"], 0.0, 0.0, skipped=True)
        t0 = time.perf_counter()
        scenes, index = self._inputs()
        results: list[ConversationResult] = []
        ready: list[ConversationInput] = []
        for sid in scene_ids:
            try:
                ready.append(self._load(sid, scenes, index))
            except (AudioError, KeyError, FileNotFoundError) as e:
                results.append(ConversationResult(sid, "error", f"cannot load input: {type(e).__name__}: {e}"))
        bs = max(1, min(self.msettings.batch_size, self.model.info.max_batch))
        for i in range(0, len(ready), bs):
            results += run_batch(self.model, ready[i:i + bs], self.cfg.protocol, self.cfg.detector,
                                 self.cfg.infer.max_duration_s)
        sr = self.cfg.protocol.sample_rate
        entries, audio_s = {}, 0.0
        for r in results:
            objs = {}
            if r.status == "ok":
                data = encode(r.output, sr)
                key = lay.conversation(shard_prefix, r.scene_id, "flac")
                self.store.put(key, data)
                objs[key] = hashlib.sha256(data).hexdigest()
                audio_s += len(r.output) / sr
            rec_key = lay.conversation(shard_prefix, r.scene_id, "json")
            put_json(self.store, rec_key, r.record(sr))
            objs[rec_key] = hashlib.sha256(self.store.get(rec_key)).hexdigest()
            entries[r.scene_id] = {"status": r.status, "reason": r.reason, "objects": objs}
        wall = time.perf_counter() - t0
        n_ok = sum(e["status"] == "ok" for e in entries.values())
        put_json(self.store, marker_key, {"shard": shard_id, "model": self.msettings.name, "ok": n_ok,
                                          "error": len(entries) - n_ok, "wall_s": round(wall, 3),
                                          "audio_s": round(audio_s, 3), "conversations": entries})
        return ShardSummary(shard_id, n_ok, len(entries) - n_ok, wall, audio_s)
