"""Every object key of a run, built in one place.

::

    <run>/run.json                                  run manifest (config, versions, seeds)
    <run>/scenes/<h>/scenes.jsonl | stats.json | _SUCCESS.json
    <run>/synth/<h>/clips/<clip_id>.flac            one clip per distinct (voice, text, settings)
    <run>/synth/<h>/index.json | _SUCCESS.json      per conversation: clip ids and lengths
    <run>/infer/<model>/<h>/plan.json               shard plan, written once
    <run>/infer/<model>/<h>/<shard>/<scene_id>.flac model output on the stream timeline
    <run>/infer/<model>/<h>/<shard>/<scene_id>.json status, placements, scheduler events
    <run>/infer/<model>/<h>/<shard>/_SUCCESS.json   shard marker, written last
    <run>/vad/<model>/<h>/segments.json | _SUCCESS.json
    <run>/score/<model>/<h>/verdicts.json | _SUCCESS.json   ASR transcripts and judge verdicts
    <run>/reduce/<h>/metrics.json | statistics.json | events.parquet | report.md | _SUCCESS.json
    _cache/asr/.., _cache/judge/..                  content-addressed ASR and judge results, shared by runs

``<h>`` is a short hash of the settings that produced the stage's outputs *and* of its
upstream stage's hash, so a changed setting gets a new prefix and nothing is overwritten.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from harness.store.base import check_key

MARKER = "_SUCCESS.json"
CACHE_ROOT = "_cache"


def cache_prefix(kind: str) -> str:
    """Prefix of a content cache shared by every run in the store (``asr``, ``judge``)."""
    return check_key(f"{CACHE_ROOT}/{kind}")


def settings_hash(settings: Any, upstream: str = "") -> str:
    """Short stable hash of JSON-able ``settings`` chained to the upstream stage's hash."""
    blob = json.dumps([upstream, settings], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class RunLayout:
    """Keys of one run. ``run_id`` must be a single safe key part."""

    run_id: str

    def __post_init__(self) -> None:
        check_key(self.run_id)
        if self.run_id == CACHE_ROOT:
            raise ValueError(f"run id {CACHE_ROOT!r} is reserved for the shared caches")
        if "/" in self.run_id:
            raise ValueError(f"run id {self.run_id!r} must not contain '/'")

    def _k(self, *parts: str) -> str:
        return check_key("/".join((self.run_id, *parts)))

    def run_manifest(self) -> str:
        return self._k("run.json")

    def stage(self, stage: str, h: str, model: str | None = None) -> str:
        """Prefix of one stage's outputs (``model`` for per-model stages)."""
        return self._k(stage, model, h) if model else self._k(stage, h)

    def marker(self, prefix: str) -> str:
        return check_key(f"{prefix}/{MARKER}")

    def file(self, prefix: str, name: str) -> str:
        return check_key(f"{prefix}/{name}")

    def clip(self, synth_prefix: str, clip_id: str) -> str:
        return check_key(f"{synth_prefix}/clips/{clip_id}.flac")

    def shard(self, infer_prefix: str, shard_id: str) -> str:
        return check_key(f"{infer_prefix}/{shard_id}")

    def conversation(self, shard_prefix: str, scene_id: str, ext: str) -> str:
        return check_key(f"{shard_prefix}/{scene_id}.{ext}")
