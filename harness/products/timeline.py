"""The ``synth`` stage's product: every conversation's audio on its timeline (spec section 3).

Objects under the synth prefix: ``clips/<clip_id>.flac`` (one clip per distinct voice and text,
mono 16-bit at the timeline rate, content-addressed: :meth:`~harness.store.layout.RunLayout.clip`)
and ``index.json``, this module's :class:`Timeline`: per conversation the clip and length of each
turn in turn order, the preamble's clip, the conversations synthesis could not make (and why) and
the clips the engine refused.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.audio.io import decode
from harness.products import check_schema
from harness.store.base import ObjectStore, get_json
from harness.store.layout import RunLayout

INDEX = "index.json"
SCHEMA = 1


@dataclass(frozen=True)
class ClipRef:
    """One stored clip: its content id and its length in samples at the timeline rate."""

    clip: str
    n: int


@dataclass(frozen=True)
class Timeline:
    """The synth index.

    Attributes:
        sample_rate: the timeline rate in Hz (``protocol.sample_rate``).
        preamble: the spoken duty preamble's clip.
        conversations: scene id -> its turns' clips, in turn order.
        errors: scene id -> why it has no audio (a missing voice, a clip the engine refused).
        failed_clips: clip id -> ``{"voice", "text", "reason"}``.
    """

    sample_rate: int
    preamble: ClipRef
    conversations: dict[str, tuple[ClipRef, ...]]
    errors: dict[str, str] = field(default_factory=dict)
    failed_clips: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "sample_rate": self.sample_rate,
                "preamble": {"clip": self.preamble.clip, "n": self.preamble.n},
                "conversations": {sid: {"turns": [{"clip": t.clip, "n": t.n} for t in turns]}
                                  for sid, turns in self.conversations.items()},
                "errors": self.errors, "failed_clips": self.failed_clips}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timeline:
        check_schema(d, SCHEMA, "the synth index")
        return cls(int(d["sample_rate"]), ClipRef(d["preamble"]["clip"], int(d["preamble"]["n"])),
                   {sid: tuple(ClipRef(t["clip"], int(t["n"])) for t in c["turns"])
                    for sid, c in d["conversations"].items()},
                   dict(d.get("errors", {})), dict(d.get("failed_clips", {})))

    def objects(self) -> dict[str, Any]:
        """The object to write under the synth prefix (its clips are written as they are made)."""
        return {INDEX: self.to_dict()}

    @classmethod
    def read(cls, store: ObjectStore, layout: RunLayout, prefix: str) -> Timeline:
        """Raises FileNotFoundError when synth has not written its index."""
        return cls.from_dict(get_json(store, layout.file(prefix, INDEX)))


class ClipReader:
    """Decoded clips of one synth prefix (``float32[n]`` at ``sample_rate``), cached.

    ``max_bytes``: the cache keeps the most recently used clips up to this many bytes of decoded
    audio (a clip larger than the bound alone is returned uncached), so a long-lived reader (an
    infer actor over many shards) stays bounded; None keeps every clip (each read once).

    Raises :class:`~harness.audio.io.AudioError` for a clip that does not decode at that rate
    and FileNotFoundError for a missing one."""

    def __init__(self, store: ObjectStore, layout: RunLayout, prefix: str, sample_rate: int,
                 max_bytes: int | None = None):
        self.store, self.layout, self.prefix, self.sample_rate = store, layout, prefix, sample_rate
        self.max_bytes = max_bytes
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.nbytes = 0  # decoded bytes cached now

    def __call__(self, clip_id: str) -> np.ndarray:
        clip = self._cache.get(clip_id)
        if clip is not None:
            self._cache.move_to_end(clip_id)
            return clip
        clip = decode(self.store.get(self.layout.clip(self.prefix, clip_id)), expected_rate=self.sample_rate)[0]
        if self.max_bytes is None or clip.nbytes <= self.max_bytes:
            self._cache[clip_id] = clip
            self.nbytes += clip.nbytes
            while self.max_bytes is not None and self.nbytes > self.max_bytes:
                self.nbytes -= self._cache.popitem(last=False)[1].nbytes
        return clip
