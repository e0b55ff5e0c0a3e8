"""The ``scenes`` stage's product: the scene set (spec section 2), by id.

Objects under the scenes prefix: ``scenes.jsonl`` (one :class:`~harness.scenes.schema.Scene` per
line, :func:`~harness.scenes.schema.write_manifest`), ``invalid.json`` (scene id -> why it was
refused) and ``stats.json`` (corpus statistics).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from harness.scenes.schema import Scene, read_manifest, write_manifest
from harness.store.base import ObjectStore, get_json
from harness.store.layout import RunLayout

SCENES, INVALID, STATS = "scenes.jsonl", "invalid.json", "stats.json"


@dataclass(frozen=True)
class SceneSet:
    """The valid scenes in manifest order, what was refused and the corpus statistics."""

    scenes: tuple[Scene, ...]
    invalid: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def by_id(self) -> dict[str, Scene]:
        return {s.scene_id: s for s in self.scenes}

    def __len__(self) -> int:
        return len(self.scenes)

    def objects(self) -> dict[str, Any]:
        """The objects to write under the scenes prefix (name -> bytes or a JSON-able value)."""
        buf = io.StringIO()
        write_manifest(self.scenes, buf)
        return {SCENES: buf.getvalue().encode(), INVALID: self.invalid, STATS: self.stats}

    @classmethod
    def read(cls, store: ObjectStore, layout: RunLayout, prefix: str) -> SceneSet:
        """Raises FileNotFoundError when the scenes stage has not written its outputs."""
        scenes = read_manifest(store.get(layout.file(prefix, SCENES)).decode().splitlines())
        return cls(tuple(scenes), get_json(store, layout.file(prefix, INVALID)),
                   get_json(store, layout.file(prefix, STATS)))
