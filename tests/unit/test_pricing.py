"""The usage ledger's prices: cost from stored usage under a dated, versioned table; a model or a
token kind without a price is unpriced (never $0); an old run is re-priced without a rerun."""

from __future__ import annotations

import hashlib
import json

import pytest

from harness.pricing import PriceTable, ledger_cost, load_prices, status_lines, tables

USAGE = {"provider": "openai", "model": "gpt-realtime",
         "tokens": {"input_text": 1000, "input_text_cached": 2000, "input_audio": 30_000, "input_audio_cached": 50_000,
                    "output_text": 0, "output_audio": 12_000}}


def _table(tmp_path, version: int, audio_out: float, **extra) -> PriceTable:
    p = tmp_path / f"v{version}.yaml"
    p.write_text(json.dumps({"version": version, "as_of": "2030-01-01", "currency": "USD", "per_tokens": 1_000_000,
                             "models": {"openai/gpt-realtime": {"input_text": 4, "input_text_cached": 0.4,
                                                                "input_audio": 32, "input_audio_cached": 0.4,
                                                                "output_text": 16, "output_audio": audio_out},
                                        **extra}}))
    return PriceTable.load(p)


def test_the_repository_table_prices_the_realtime_models_per_million_tokens():
    table = load_prices()
    assert table.version == max(tables()) and table.as_of
    usd = (1000 * 4 + 2000 * 0.4 + 30_000 * 32 + 50_000 * 0.4 + 12_000 * 64) / 1e6
    assert table.cost(USAGE).usd == pytest.approx(usd)


@pytest.mark.parametrize("usage, why", [
    ({**USAGE, "model": "gpt-realtime-2"}, "openai/gpt-realtime-2 is not in prices v1"),  # no prefix matching
    ({**USAGE, "provider": "google"}, "google/gpt-realtime is not in"),
    ({"provider": "google", "model": "gemini-2.5-flash-native-audio-preview-09-2025",
      "tokens": {"input_audio": 10, "input_audio_cached": 5}}, "has no price for input_audio_cached"),
])
def test_a_model_or_token_kind_without_a_price_is_unpriced_never_zero(usage, why):
    cost = load_prices(1).cost(usage)
    assert cost.usd is None and why in cost.unpriced


def test_re_pricing_reads_the_same_usage_under_another_table(tmp_path):
    old, new = _table(tmp_path, 1, 64.0), _table(tmp_path, 2, 32.0)
    assert old.cost(USAGE).usd - new.cost(USAGE).usd == pytest.approx(12_000 * 32 / 1e6)
    led = ledger_cost([USAGE, None, {**USAGE, "model": "gpt-realtime-2"}, {**USAGE, "owed_at_close": "response.done"}],
                      new)
    assert (led.metered, led.priced) == (3, 2)  # None: a model that meters nothing, not in the ledger
    assert led.usd == pytest.approx(2 * new.cost(USAGE).usd)
    assert led.tokens["output_audio"] == 36_000
    text = led.describe()
    assert "for 2 conversations (prices v2 as of 2030-01-01)" in text and "1 unpriced" in text
    assert "1 ended with a reply's usage still owed (a lower bound)" in text


@pytest.mark.parametrize("bad", [{"input_audio": -1.0}, {"input_audio": "free"}, {"input_audio": float("nan")}])
def test_a_bad_table_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="not a price"):
        _table(tmp_path, 3, 64.0, **{"openai/x": bad})
    with pytest.raises(ValueError, match="no price table v99"):
        load_prices(99)


def test_status_shows_the_api_cost_of_a_hosted_model_from_its_records(tmp_path):
    from harness.runtime.config import RunConfig
    from harness.runtime.plan import RunPlan
    from harness.runtime.status import run_status
    from harness.store.base import LocalStore, put_json

    cfg = RunConfig.from_dict({"run_id": "api", "store": {"kind": "local", "root": str(tmp_path)},
                               "model": {"openai_realtime": {"target": "openai_realtime", "num_gpus": 0},
                                         "silent": {"target": "silent"}}})
    store, plan = LocalStore(str(tmp_path)), RunPlan.from_config(cfg)
    lay = plan.layout
    prefix = plan.infer["openai_realtime"]
    put_json(store, lay.file(prefix, "plan.json"), {"s0000": ["a", "b", "c"]})
    conversations = {}
    for sid, usage in (("a", USAGE), ("b", {**USAGE, "model": "gpt-realtime-2"}), ("c", USAGE)):
        data = json.dumps({"scene_id": sid, "status": "ok", "usage": usage}).encode()
        key = f"{prefix}/s0000/attempts/x/{sid}.json"
        store.put(key, data)
        conversations[sid] = {"status": "ok", "objects": {"json": {"key": key,
                                                                   "sha256": hashlib.sha256(data).hexdigest()}}}
    put_json(store, lay.marker(lay.shard(prefix, "s0000")),
             {"ok": 3, "error": 0, "device_hours": 0.1, "conversations": conversations})
    usd = 2 * load_prices().cost(USAGE).usd
    line = next(x for x in run_status(cfg, store).splitlines() if x.lstrip().startswith("api"))
    assert f"openai_realtime API ${usd:,.2f} for 2 conversations" in line
    assert "1 unpriced: openai/gpt-realtime-2 is not in" in line
    assert status_lines(store, plan, [m for m in cfg.models if m.name == "silent"]) == []  # meters nothing
