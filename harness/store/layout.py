"""Every object key of a run, built in one place.

::

    <run>/run.json                                  run manifest (config, versions, seeds), written once
    <run>/invocations/<id>.json                     provenance of every invocation (resume, rerun)
    <run>/scenes/<h>/scenes.jsonl | stats.json | _SUCCESS.json
    <run>/synth/<h>/clips/<clip_id>.flac            one clip per distinct (voice, text, settings)
    <run>/synth/<h>/batches/<batch_id>.json         clip lengths of a synthesized batch (resume)
    <run>/synth/<h>/index.json | _SUCCESS.json      per conversation: clip ids and lengths; failed clips
    <run>/infer/<model>/<h>/plan.json               shard plan, written once
    <run>/infer/<model>/<h>/<shard>/_SUCCESS.json   shard marker: written last, once (conditional put);
                                                    names the attempt and every output's checksum
    <run>/infer/<model>/<h>/<shard>/attempts/<a>/<scene_id>.flac       model output on the stream timeline
    <run>/infer/<model>/<h>/<shard>/attempts/<a>/<scene_id>.json       status, placements, scheduler events
    <run>/infer/<model>/<h>/<shard>/attempts/<a>/<scene_id>.probs.npy  online Silero probabilities
    <run>/infer/<model>/<h>/<shard>/failures/<a>.json                  an attempt that died: reason, spend
    <run>/vad/<model>/<h>/segments.json | _SUCCESS.json
    <run>/score/<model>/<h>/windows.json | _SUCCESS.json    every scored window with its ASR/judge verdict
    <run>/reduce/<h>/metrics.json | statistics.json | events.parquet | report.md | _SUCCESS.json
    <run>/cue-corpus/<h>/recordings.jsonl | items.jsonl | audio/<id>.flac | problems.json | _SUCCESS.json
    <run>/cue-infer/<model>/<h>/...                 Duplex Cue continuations, sharded as infer (docs/cue.md)
    <run>/cue-score/<model>/<h>/rows.json | _SUCCESS.json
    <run>/cue-reduce/<h>/cue_metrics.json | cue_report.md | cue_report.html | items/<model>/<item>.html
    _cache/asr/.., _cache/judge/..                  content-addressed ASR and judge results, shared by runs

``<h>`` is a short hash of the settings that produced the stage's outputs *and* of its
upstream stage's hash, so a changed setting gets a new prefix and nothing is overwritten.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from harness.store.base import InvalidKey, check_key

MARKER = "_SUCCESS.json"
CACHE_ROOT = "_cache"


# What an id may be (a run, model, shard, scene, item or clip id): it names store objects, files on
# disk and the links of the report, conversation and review pages, so it is ASCII letters, digits,
# '.', '_' and '-' only, starting with a letter or digit ('_' and '.' starts are reserved for
# markers, caches and temporary files): no character is special in a URL, a file name or Markdown.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_id(value: str, what: str) -> str:
    """Return ``value`` when it can name one key part (a run, model, shard, scene or clip id):
    :data:`SAFE_ID`, at most 128 characters; raise :class:`InvalidKey` naming the rule otherwise."""
    if not isinstance(value, str) or not SAFE_ID.fullmatch(value):
        raise InvalidKey(f"invalid {what} {value!r}: ids are ASCII letters, digits, '.', '_' and '-', starting "
                         "with a letter or digit, at most 128 characters (they name files and links)")
    return check_key(value)


def cache_prefix(kind: str) -> str:
    """Prefix of a content cache shared by every run in the store (``asr``, ``judge``)."""
    return check_key(f"{CACHE_ROOT}/{kind}")


def settings_hash(settings: Any, upstream: str = "") -> str:
    """Short stable hash of JSON-able ``settings`` chained to the upstream stage's hash."""
    blob = json.dumps([upstream, settings], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class RunLayout:
    """Keys of one run. Every id that goes into a key (run, model, shard, scene, clip) is checked
    with :func:`check_id`, so none can escape its prefix or collide with a marker or the shared
    caches (``_cache``); a bad one raises :class:`~harness.store.base.InvalidKey` (a ValueError)."""

    run_id: str

    def __post_init__(self) -> None:
        check_id(self.run_id, "run id")

    def _k(self, *parts: str) -> str:
        return check_key("/".join((self.run_id, *parts)))

    def run_manifest(self) -> str:
        return self._k("run.json")

    def invocation(self, invocation_id: str) -> str:
        return self._k("invocations", f"{invocation_id}.json")

    def stage(self, stage: str, h: str, model: str | None = None) -> str:
        """Prefix of one stage's outputs (``model`` for per-model stages)."""
        return self._k(stage, check_id(model, "model name"), h) if model is not None else self._k(stage, h)

    def marker(self, prefix: str) -> str:
        return check_key(f"{prefix}/{MARKER}")

    def file(self, prefix: str, name: str) -> str:
        return check_key(f"{prefix}/{name}")

    def clip(self, synth_prefix: str, clip_id: str) -> str:
        return check_key(f"{synth_prefix}/clips/{check_id(clip_id, 'clip id')}.flac")

    def shard(self, infer_prefix: str, shard_id: str) -> str:
        return check_key(f"{infer_prefix}/{check_id(shard_id, 'shard id')}")

    def attempt(self, shard_prefix: str, attempt_id: str) -> str:
        """Prefix of one attempt's outputs: a dead or duplicate attempt never shares keys with another."""
        return check_key(f"{shard_prefix}/attempts/{attempt_id}")

    def failure(self, shard_prefix: str, attempt_id: str) -> str:
        return check_key(f"{shard_prefix}/failures/{attempt_id}.json")

    def conversation(self, attempt_prefix: str, scene_id: str, ext: str) -> str:
        return check_key(f"{attempt_prefix}/{check_id(scene_id, 'scene id')}.{ext}")
