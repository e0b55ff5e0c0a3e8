"""The ``reference`` stage's product: the text-conditioned reference (spec section 7).

``reference.json`` under the reference prefix: every pass's decisions per turn, their scores and
the agreement between passes (layout in :mod:`harness.reference.evaluate`); its marker carries
the stage's cost (``cost``: the reference's and its judge's calls, cache hits and spend).
"""

from __future__ import annotations

from typing import Any

from harness.store.base import ObjectStore, get_json
from harness.store.layout import RunLayout

REFERENCE = "reference.json"


def read_reference(store: ObjectStore, layout: RunLayout, prefix: str) -> dict[str, Any]:
    """The content of ``reference.json`` (FileNotFoundError when the stage has not run)."""
    return get_json(store, layout.file(prefix, REFERENCE))


def read_reference_cost(store: ObjectStore, layout: RunLayout, prefix: str) -> dict[str, Any] | None:
    """The reference stage's marker (its ``cost``), or None when the stage has not completed."""
    key = layout.marker(prefix)
    return get_json(store, key) if store.exists(key) else None
