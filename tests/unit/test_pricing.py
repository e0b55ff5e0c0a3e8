"""The usage ledger's prices: cost from stored usage under a dated, versioned table; a model or a
token kind without a price is unpriced (never $0); an old run is re-priced without a rerun."""

from __future__ import annotations

import json

import pytest

from harness.pricing import PriceTable, ledger_cost, llm_usage, load_prices, status_lines, sum_usage, tables

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


def test_usage_sums_are_raw_and_priced_like_one_record():
    a = {**USAGE, "seconds": {"session": 1.5}, "responses": {"completed": 1}, "owed_at_close": "response.done"}
    totals = sum_usage([a, None, USAGE, {**USAGE, "model": "gpt-realtime-2"}])
    s = totals["openai/gpt-realtime"]
    assert (s["count"], s["owed_at_close"], s["seconds"], s["responses"]) == (2, 1, {"session": 1.5}, {"completed": 1})
    assert s["tokens"] == {k: 2 * v for k, v in USAGE["tokens"].items()}
    again = sum_usage([s, s])["openai/gpt-realtime"]  # sums of sums (markers into a run)
    assert again["count"] == 4 and again["tokens"]["input_audio"] == 4 * USAGE["tokens"]["input_audio"]
    table = load_prices(1)
    led = ledger_cost(totals.values(), table)
    assert (led.metered, led.priced, led.undercounted) == (3, 2, 1)
    assert led.usd == pytest.approx(2 * table.cost(USAGE).usd)
    assert led.tokens_in == 3 * 83_000 and led.tokens_out == 3 * 12_000
    assert llm_usage("anthropic", "claude-sonnet-4-5", 0, 0, 0) is None
    judge = llm_usage("anthropic", "claude-sonnet-4-5", 3, 900, 12)
    assert sum_usage([judge])["anthropic/claude-sonnet-4-5"]["tokens"] == {"input_text": 900, "output_text": 12}


def _hosted_run(tmp_path, marker_usage, failures=()):
    """A run whose hosted model has one committed shard carrying ``marker_usage`` (no records at all:
    status reads markers only) and the failure records ``failures``."""
    from harness.runtime.config import RunConfig
    from harness.runtime.plan import RunPlan
    from harness.store.base import LocalStore, put_json

    cfg = RunConfig.from_dict({"run_id": "api", "store": {"kind": "local", "root": str(tmp_path)},
                               "model": {"openai_realtime": {"target": "openai_realtime", "num_gpus": 0},
                                         "silent": {"target": "silent"}}})
    store, plan = LocalStore(str(tmp_path)), RunPlan.from_config(cfg)
    lay = plan.layout
    prefix = plan.infer["openai_realtime"]
    put_json(store, lay.file(prefix, "plan.json"), {"s0000": ["a", "b", "c"], "s0001": ["d"]})
    put_json(store, lay.marker(lay.shard(prefix, "s0000")),
             {"ok": 3, "error": 0, "device_hours": 0.1, "usage": marker_usage,
              "conversations": {sid: {"status": "ok", "objects": {"json": {"key": f"nowhere/{sid}.json",
                                                                           "sha256": "0"}}} for sid in "abc"}})
    for i, f in enumerate(failures):
        put_json(store, lay.failure(lay.shard(prefix, "s0001"), f"f{i}"),
                 {"attempt": f"f{i}", "reason": "boom", "device_hours": 0.01, **f})
    return cfg, store, plan


def test_status_shows_the_api_cost_of_a_hosted_model_from_its_markers_only(tmp_path):
    from harness.runtime.status import run_status

    failed = sum_usage([USAGE])
    cfg, store, plan = _hosted_run(tmp_path, sum_usage([USAGE, {**USAGE, "model": "gpt-realtime-2"}, USAGE]),
                                   failures=[{"usage": failed}, {}])
    table = load_prices()
    usd = 2 * table.cost(USAGE).usd
    text = run_status(cfg, store)  # the records named in the marker do not exist: never read
    line = next(x for x in text.splitlines() if x.lstrip().startswith("api"))
    assert f"openai_realtime API ${usd:,.2f} for 2 conversations ({table.label})" in line
    assert "1 unpriced: openai/gpt-realtime-2 is not in" in line
    assert f"tokens in {3 * 83_000:,} / out {3 * 12_000:,}" in line
    assert f"failed attempts: API ${usd / 2:,.2f} for 1 conversations" in line
    assert "1 with usage unknown (the actor died)" in line
    total = next(x for x in text.splitlines() if x.startswith("total spent"))
    assert f"+ API ${1.5 * usd:,.2f} and unpriced usage" in total
    # the LLM judge's and the text reference's paid calls, from their markers, priced the same way
    from harness.store.base import put_json

    judge = llm_usage("anthropic", "claude-sonnet-4-5", 3, 900, 12)
    put_json(store, plan.layout.marker(plan.score["openai_realtime"]), {"usage": sum_usage([judge])})
    put_json(store, plan.layout.marker(plan.reference),
             {"cost": {"reference": {"usage": llm_usage("anthropic", "claude-unlisted", 2, 10, 10)},
                       "judge": {"usage": None}}})
    text = run_status(cfg, store)
    usd = table.cost(judge).usd
    assert (f"api       score (judge) of openai_realtime: ${usd:,.4f} for 3 calls; tokens in 900 / out 12 "
            f"({table.label})") in text
    assert "api       reference of reference (rule): unpriced: anthropic/claude-unlisted is not in" in text
    from harness.products.infer import read_ledger

    leds = [read_ledger(store, plan.layout, plan.infer[m.name], m.name) for m in cfg.models]
    assert status_lines(leds, [m for m in cfg.models if m.name == "silent"]) == []  # meters nothing


def test_an_old_run_is_re_priced_under_a_new_table_without_a_rerun(tmp_path, monkeypatch):
    from harness.runtime.status import run_status

    cfg, store, _ = _hosted_run(tmp_path / "run", sum_usage([USAGE, USAGE]))
    v1 = next(x for x in run_status(cfg, store).splitlines() if x.lstrip().startswith("api"))
    tables_dir = tmp_path / "tables"
    tables_dir.mkdir()
    new = _table(tables_dir, 7, 32.0)  # output audio at half price
    monkeypatch.setattr("harness.pricing.TABLES_DIR", tables_dir)  # a newer table than the run's
    v7 = next(x for x in run_status(cfg, store).splitlines() if x.lstrip().startswith("api"))
    assert f"API ${2 * new.cost(USAGE).usd:,.2f} for 2 conversations (prices v7 as of 2030-01-01)" in v7
    assert v1 != v7 and "prices v7" not in v1
