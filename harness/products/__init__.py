"""What the stages hand each other: one typed record per product, with its reader and writer.

Each product module owns its object names and their format; a stage writes its products with the
module's writer and later stages read them with its reader. No stage module imports another stage
module: the products are the only thing stages share (docs/architecture.md has the diagram)::

    scenes --SceneSet--> synth --Timeline--> infer --InferEntry/InferRecord, ModelFacts-->
        vad --Segments--> score --Windows (bounds + verdicts)--> reduce --report

    (reference --reference.json--> reduce;  Duplex Cue: cue-corpus --CueCorpus--> cue-infer -->
     cue-score --rows--> cue-reduce)

Readers take ``(store, layout, prefix)`` (a :class:`~harness.store.layout.RunLayout` and the
producing stage's prefix from the run plan), so products depend on the store only, never on the
runtime. A product's JSON carries the ``schema`` it was written with; a reader refuses another
schema with :class:`ProductMismatch` (a product whose shape changed must come with a version bump
of the stage that writes it, so that it is written afresh under a new prefix). Products written
before schemas existed have none and are read as schema 1, the shape they were written in.
"""

from __future__ import annotations

from typing import Any


class ProductMismatch(ValueError):
    """A stored product was written in another shape (schema) than this harness reads."""


def check_schema(doc: Any, expected: int, what: str) -> None:
    """Raise :class:`ProductMismatch` unless ``doc`` (a product's JSON object) was written with
    schema ``expected`` (no ``schema`` key: schema 1). ``what`` names the product and its key."""
    got = doc.get("schema", 1) if isinstance(doc, dict) else 1
    if not isinstance(got, int) or isinstance(got, bool):  # an id-keyed map whose id is "schema"
        got = 1
    if got != expected:
        raise ProductMismatch(f"{what} was written with schema {got}, this harness reads schema {expected}: the "
                              "stage that writes it changed its output without a version bump (its prefix), so "
                              "its outputs cannot be reused; bump that stage's version in harness/runtime/plan.py")
