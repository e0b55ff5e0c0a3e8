"""The infer executor's pieces that need no Ray: a store error's message in a failure reason, the
USD budget over priced API usage, and a duplicate attempt that cannot overwrite the committed one.
The executor on real Ray actors: tests/e2e/test_executor.py."""

from __future__ import annotations

import hashlib

import pytest

from harness.products.infer import read_ledger
from harness.runtime.plan import RunPlan
from harness.runtime.simulate import NullWorker
from harness.store.base import LocalStore, put_json
from tests.fixtures.runs import null_run, tiny_config


def test_a_store_errors_server_message_survives_into_the_failure_reason():
    from harness.runtime.executor import _reason
    from harness.store.base import StoreError

    key = "runs/" + "k" * 240 + "/infer/m/abc/shard-00000/_SUCCESS.json"
    server = ("NotImplemented (HTTP 501, after 1 of 3 attempts): A header you provided implies functionality "
              "that is not implemented [Header: If-None-Match]")
    assert _reason(StoreError(f"s3://b/team (http://127.0.0.1:9000): put {key!r} failed: {server}")).endswith(server)


def _hosted_budget(tmp_path, budget, shard_tokens=(), model="gpt-realtime"):
    """A Budget over a run of ``openai_realtime`` whose completed shards used ``shard_tokens`` (one
    ``{kind: n}`` per shard; their markers carry the usage, 0.01 device-hours each)."""
    from harness.pricing import sum_usage
    from harness.runtime.executor import Budget

    cfg = tiny_config(tmp_path / "store", "api", {"openai_realtime": {"target": "openai_realtime", "num_gpus": 0,
                                                                    "params": {"model": model}}}, budget=budget)
    store, plan = LocalStore(tmp_path / "store"), RunPlan.from_config(cfg)
    prefix = plan.infer["openai_realtime"]
    put_json(store, plan.layout.file(prefix, "plan.json"), {f"s{i}": [str(i)] for i in range(len(shard_tokens) + 2)})
    for i, tokens in enumerate(shard_tokens):
        usage = sum_usage([{"provider": "openai", "model": model, "tokens": tokens}])
        put_json(store, plan.layout.marker(plan.layout.shard(prefix, f"s{i}")),
                 {"ok": 1, "error": 0, "device_hours": 0.01, "usage": usage, "conversations": {}})
    return Budget.for_run(cfg, store, {"openai_realtime": prefix}, 0.01 * len(shard_tokens))


def test_the_usd_budget_counts_priced_api_usage_and_estimates_the_next_shard_from_its_mean(tmp_path):
    # two shards: $1.00 and $3.00 of output audio at $64 per million tokens; device $1 per hour
    budget = _hosted_budget(tmp_path, {"usd": 4.1, "usd_per_gpu_hour": 1.0},
                            [{"output_audio": 15_625}, {"output_audio": 46_875}])
    assert budget.spent_api_usd == pytest.approx(4.0) and budget.api_estimate("openai_realtime") == pytest.approx(2.0)
    assert budget.refusal(0.0, 0.0, "openai_realtime") is None  # $4.02 spent of $4.10
    why = budget.refusal(0.01, budget.api_estimate("openai_realtime"), "openai_realtime")
    assert why == "budget.usd 4.1: $4.02 spent (API $4.00), $6.03 projected with the next shard"
    assert _hosted_budget(tmp_path / "gpu", {"gpu_hours": 1.0}, [{"output_audio": 10**9}]).refusal(
        0.01, 64_000.0, "openai_realtime") is None  # a device-hour budget does not count dollars


def test_a_hosted_model_the_table_cannot_price_is_refused_under_a_usd_budget_unless_allowed(tmp_path):
    why = _hosted_budget(tmp_path, {"usd": 100.0, "usd_per_gpu_hour": 1.0}, model="gpt-realtime-9").refusal(
        0.0, 0.0, "openai_realtime")
    assert "the API usage of openai_realtime is unpriced (openai/gpt-realtime-9 is not in prices v" in why
    assert "budget.allow_unpriced=true" in why
    allowed = _hosted_budget(tmp_path / "b", {"usd": 100.0, "usd_per_gpu_hour": 1.0, "allow_unpriced": True},
                             model="gpt-realtime-9")
    assert allowed.refusal(0.0, 0.0, "openai_realtime") is None and allowed.spent_api_usd == 0.0
    # a priced model whose usage has a kind the table does not price (here: after its first shard)
    later = _hosted_budget(tmp_path / "c", {"usd": 100.0, "usd_per_gpu_hour": 1.0}, [{"reasoning": 5}])
    assert "has no price for reasoning" in later.refusal(0.0, 0.0, "openai_realtime")
    assert later.refusal(0.0, 0.0, "another_model") is None


def test_a_duplicate_attempt_cannot_overwrite_the_committed_one(tmp_path):
    cfg, store, plan, shards = null_run(tmp_path / "store", {"null": {}}, n_shards=1)
    worker = NullWorker(cfg, cfg.models[0], store)
    first = worker.run("shard-00000", shards["shard-00000"])
    real_exists = store.exists
    store.exists = lambda key: False if key.endswith("_SUCCESS.json") else real_exists(key)  # a racing duplicate
    second = worker.run("shard-00000", shards["shard-00000"])
    store.exists = real_exists
    assert first.committed and not second.committed and second.attempt != first.attempt
    marker = read_ledger(store, plan.layout, plan.infer["null"], "null").markers["shard-00000"]
    assert marker["attempt"] == first.attempt
    entry = next(iter(marker["conversations"].values()))
    data = store.get(entry["objects"]["json"]["key"])
    assert hashlib.sha256(data).hexdigest() == entry["objects"]["json"]["sha256"]
