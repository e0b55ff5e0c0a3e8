"""The run manifest: written once, complete enough to reproduce the run, reloaded for reruns."""

from __future__ import annotations

import pytest

from harness.runtime.config import RunConfig
from harness.runtime.manifest import build_manifest, load_run_config, write_run_manifest
from harness.store.base import LocalStore, get_json, put_json
from harness.store.layout import RunLayout


def _cfg(**kw) -> RunConfig:
    return RunConfig.from_dict({"run_id": "m", "seed": 7, "scenes": {"n_pairs": 5, "seed": 11},
                                "model": {"moshi": {"target": "moshi", "image": "ghcr.io/x/moshi@sha256:ab",
                                                    "params": {"weights": "kyutai/moshiko", "revision": "abc123"}}},
                                **kw})


def test_manifest_names_everything_a_reproduction_needs(monkeypatch):
    monkeypatch.setenv("DUPLEX_MPE_IMAGE", "ghcr.io/x/base:1.0")
    monkeypatch.setenv("DUPLEX_MPE_IMAGE_DIGEST", "sha256:0123")
    m = build_manifest(_cfg())
    assert m["git"]["commit"] and len(m["git"]["commit"]) == 40  # this checkout
    assert m["packages"]["torch"] and m["packages"]["ray"] and m["packages"]["transformers"] is None
    assert m["image"] == {"reference": "ghcr.io/x/base:1.0", "digest": "sha256:0123"}
    assert m["models"]["moshi"] == {"target": "moshi", "image": "ghcr.io/x/moshi@sha256:ab",
                                    "params": {"weights": "kyutai/moshiko", "revision": "abc123"}}
    assert m["seeds"]["run"] == 7 and m["seeds"]["scenes"] == 11 and m["seeds"]["bootstrap"] == 20260902
    assert RunConfig.from_dict(m["config"]) == _cfg()


def test_first_invocation_writes_run_json_later_ones_add_records(tmp_path):
    store = LocalStore(tmp_path)
    first = write_run_manifest(_cfg(), store)
    later = write_run_manifest(_cfg(metrics={"min_n": 10}), store)  # a different config does not replace it
    assert later == first == get_json(store, RunLayout("m").run_manifest())
    records = list(store.list("m/invocations"))
    assert len(records) == 2
    # one record per invocation, each with its own config (both may fall in the same second: no order)
    assert sorted(get_json(store, r)["config"]["metrics"]["min_n"] for r in records) == [10, 30]


def test_rerun_config_comes_from_the_manifest_except_where_it_runs(tmp_path):
    store = LocalStore(tmp_path)
    write_run_manifest(_cfg(), store)
    here = RunConfig.from_dict({"run_id": "m", "model": {"silent": {"target": "silent"}},
                                "cluster": {"num_gpus": 8}, "budget": {"gpu_hours": 3.0},
                                "store": {"root": str(tmp_path)}})
    cfg = load_run_config(store, here)
    assert cfg.models == _cfg().models and cfg.seed == 7 and cfg.scenes.n_pairs == 5
    assert cfg.cluster.num_gpus == 8 and cfg.budget.gpu_hours == 3.0 and cfg.store.root == str(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"nope/run\.json"):
        load_run_config(store, RunConfig.from_dict({"run_id": "nope", "model": {"s": {"target": "silent"}}}))


def test_a_copied_manifest_reproduces_the_run_under_the_new_id_and_budget_is_kept_unless_given(tmp_path, caplog):
    store = LocalStore(tmp_path)
    write_run_manifest(_cfg(budget={"gpu_hours": 2.0}), store)
    store.put("copy/run.json", store.get("m/run.json"))  # docs/reproducibility.md, step 3
    here = RunConfig.from_dict({"run_id": "copy", "model": {"s": {"target": "silent"}}})
    cfg = load_run_config(store, here, keep_budget=True)
    assert cfg.run_id == "copy" and cfg.models == _cfg().models and cfg.budget.gpu_hours == 2.0
    assert load_run_config(store, here).budget.gpu_hours is None  # a budget given on the command line wins
    with caplog.at_level("WARNING"):
        write_run_manifest(_cfg(metrics={"min_n": 10}, budget={"gpu_hours": 9.0}), store)
    assert "changes metrics.min_n from run.json" in caplog.text and "budget" not in caplog.text


def test_a_setting_added_since_run_json_was_written_is_not_a_change(tmp_path, caplog):
    """run.json from before scenes.source / strict / llm existed: their defaults are what it ran."""
    store = LocalStore(tmp_path)
    cfg = _cfg()
    old = build_manifest(cfg)
    old["config"]["scenes"] = {k: v for k, v in old["config"]["scenes"].items() if k not in ("source", "strict", "llm")}
    put_json(store, RunLayout("m").run_manifest(), old)
    with caplog.at_level("WARNING"):
        write_run_manifest(cfg, store)
    assert "changes" not in caplog.text
    with caplog.at_level("WARNING"):
        write_run_manifest(_cfg(scenes={"n_pairs": 5, "seed": 11, "source": "llm"}), store)
    assert "changes scenes.source from run.json" in caplog.text
