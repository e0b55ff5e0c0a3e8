"""The products between stages (harness/products) and the driver's bookkeeping: a resumed run of
an older layout reuses what is still valid, and a product of another shape is refused, never read."""

from __future__ import annotations

import os

import pytest

from harness.products import ProductMismatch
from harness.products.infer import MODEL_FACTS, ModelFacts
from harness.products.timeline import INDEX, Timeline
from harness.products.windows import WINDOWS, Windows
from harness.runtime.driver import StageInputMissing
from harness.stages import run_stage
from harness.store.base import LocalStore, get_json, put_json
from tests.fixtures.runs import babble_shard, tiny_config


def test_an_infer_stage_without_model_facts_writes_them_and_reruns_no_shard(tmp_path):
    """A run whose shards completed before model facts existed: the stage writes the facts from the
    config, starts no actor and leaves every shard marker as it was."""
    cfg, store, plan, _ = babble_shard(tmp_path, "facts")
    facts_key = plan.layout.file(plan.infer["babble"], MODEL_FACTS)
    assert ModelFacts.read(store, plan.layout, plan.infer["babble"]).name == "babble"  # the worker wrote them
    os.remove(store.root / facts_key)
    shard_marker = store.root / plan.layout.marker(plan.layout.shard(plan.infer["babble"], "shard-00000"))
    before = shard_marker.stat().st_mtime_ns
    run_stage("infer", cfg, store)
    facts = ModelFacts.read(store, plan.layout, plan.infer["babble"])
    assert (facts.target, facts.input_rate, facts.provider) == (cfg.models[0].target, 24_000, None)
    assert shard_marker.stat().st_mtime_ns == before


def test_products_written_before_schemas_existed_read_as_schema_1_and_others_are_refused(tmp_path):
    _, store, plan, _ = babble_shard(tmp_path, "schema")
    key = plan.layout.file(plan.synth, INDEX)
    index = get_json(store, key)
    index.pop("schema")  # as an older harness wrote it
    put_json(store, key, index)
    assert Timeline.read(store, plan.layout, plan.synth).conversations  # the same shape: reused
    put_json(store, key, {**index, "schema": 2})
    with pytest.raises(ProductMismatch, match=r"the synth index was written with schema 2, this harness reads "
                                              r"schema 1: .* bump that stage's version"):
        Timeline.read(store, plan.layout, plan.synth)
    put_json(store, plan.layout.file(plan.score["babble"], WINDOWS), {"schema": 2, "conversations": {}})
    with pytest.raises(ProductMismatch, match=r"windows\.json was written with schema 2"):
        Windows.read(store, plan.layout, plan.score["babble"])


def test_a_stage_refuses_to_run_before_its_inputs(tmp_path):
    cfg = tiny_config(tmp_path)
    with pytest.raises(StageInputMissing, match=r"stage 'scenes' has not completed at tiny/scenes/\w+: run it first"):
        run_stage("synth", cfg, LocalStore(tmp_path))
