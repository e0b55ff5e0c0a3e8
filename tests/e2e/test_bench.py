"""The benchmark scripts run and report what they must (figures, not timings, are asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def bench(script: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, f"bench/{script}", *args], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_reduce_bench_on_a_small_table():
    figures = bench("reduce.py", "--scenes", "60")
    assert figures["reduce_seconds"] > 0 and figures["rows"] > 5 * 2 * 60


def test_cluster_simulation_reruns_only_the_failed_shards():
    figures = bench("cluster_sim.py", "--conversations", "96", "--gpus", "2", "--shard-size", "8",
                    "--seconds", "0.01", "--fail-share", "0.25")
    assert figures["failed_shards"] == 3 and figures["rerun_shards"] == 3
    assert figures["rerun_extra_shards"] == 0 and figures["complete_after_rerun"]
    assert 0 < figures["gpu_utilisation"] <= 1


def test_gpu_throughput_smoke_streams_tiny_moshi_with_refills():
    pytest.importorskip("moshi")
    figures = bench("gpu_throughput.py", "--smoke")
    assert figures["smoke"] and figures["device"] == "cpu" and figures["batch"] in (1, 2)
    assert figures["masks"] == "per-step"  # the adapter's dense attention: one mask a step
    assert {r["batch"] for r in figures["runs"]} == {1, 2}
    for r in figures["runs"]:
        assert r["errors"] == 0 and r["conversations"] == 2 * r["batch"]
        assert r["aggregate_rtf"] > 0 and r["per_stream_rtf"] > 0 and r["projected_gpu_hours"] > 0


def test_gpu_throughput_smoke_streams_with_flex_attention():
    """``--attention flex`` reaches the model (the figures report the model's own setting); it streams
    with refills without errors."""
    pytest.importorskip("moshi")
    figures = bench("gpu_throughput.py", "--smoke", "--attention", "flex")
    assert figures["attention"] == "flex" and figures["masks"] == "per-step"
    assert all(r["errors"] == 0 and r["conversations"] == 2 * r["batch"] for r in figures["runs"])


def test_gpu_throughput_smoke_with_upstreams_per_layer_masks():
    """``--masks per-layer`` (the baseline of issue 24 item 4's measurement) reaches the model: dense keeps
    upstream's attention modules; it streams with refills without errors."""
    pytest.importorskip("moshi")
    figures = bench("gpu_throughput.py", "--smoke", "--masks", "per-layer")
    assert figures["attention"] == "dense" and figures["masks"] == "per-layer"
    assert all(r["errors"] == 0 and r["conversations"] == 2 * r["batch"] for r in figures["runs"])


def test_moshi_memory_counts_the_lms_rings_from_moshis_own_code():
    """The accounting sees the rings: between two ring sizes a row's state differs by exactly the 7B LM's
    K and V for the steps between (32 layers x 2 x 4,096 x 2 bytes a step); the weights are 7.7 billion
    parameters in bfloat16 (the LM) plus Mimi."""
    pytest.importorskip("moshi")
    figures = bench("moshi_memory.py", "--contexts", "3000,1000", "--rows", "1,3")
    full, small = figures["contexts"]
    assert full["context_steps"] == 3000 and small["context_steps"] == 1000
    kv_step = 32 * 2 * 4096 * 2 / 2**30
    assert full["per_row_gib"] - small["per_row_gib"] == pytest.approx(2000 * kv_step, abs=2e-4)
    assert full["per_row_gib"] == pytest.approx(3000 * kv_step, rel=0.03)  # the rest: Mimi's and LMGen's states
    assert 14 < figures["weights_gib"] < 15.5
    assert full["rows_that_fit"]["141 GB"] < 128 <= small["rows_that_fit"]["141 GB"]


def test_kv_precision_reports_each_round_trip_against_exact_kv():
    """Every round trip changes the random tiny model's tokens (near-tied logits), and the 8-bit formats'
    own logit error, before the tokens part, is larger than bfloat16's."""
    pytest.importorskip("moshi")
    figures = bench("kv_precision.py")
    trips = figures["round_trips"]
    assert set(trips) == {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fn scaled per vector"}
    assert figures["tokens"] > 400 and all(0 < r["tokens_differing"] < figures["tokens"] for r in trips.values())
    bf16 = trips["bfloat16"]["text_logit_max_diff_before"]
    assert all(r["text_logit_max_diff_before"] > 5 * bf16 > 0 for name, r in trips.items() if name != "bfloat16")


def test_runner_bench_measures_the_overlap_beside_a_slept_step():
    """``--gpu-sleep``: off and on, paired; the same conversations and steps either way, the model's share
    of the wall reported, the row-steps due on the critical path counted."""
    figures = bench("runner_cpu.py", "--rows", "4", "--turn-s", "1.0", "--gpu-sleep", "--gpu-step-ms", "5")
    off, on = figures["runs"]
    assert (off["overlap"], on["overlap"]) == (False, True) and off["slept"] and on["slept"]
    for r in (off, on):
        assert r["errors"] == 0 and r["conversations"] == 8 and r["steps"] == off["steps"]
        assert 0 < r["model_share_of_wall"] < 1 and 0 < r["due_row_steps"] < 1


def test_kv_pool_bench_reruns_streams_only_when_the_pool_is_short():
    """``--smoke``: at kv_pool 1.0 no stream is given back and every conversation ends ok (Silero hears every
    answer); at a quarter of the rings (2 rings for 8 rows) streams are given back and run again, yet every
    conversation ends ok (a rerun takes its whole ring: contention never reaches ``RowBatch.MAX_REQUEUES``),
    the run is longer, and no more pages are held than the pool has."""
    pytest.importorskip("moshi")
    figures = bench("kv_pool.py", "--smoke", "--no-progress")
    n = figures["conversations"]
    full, short = figures["runs"]
    assert (full["kv_pool"], short["kv_pool"]) == (1.0, 0.25) and full["rows"] == short["rows"] == 8
    assert full["requeued"] == full["thrown_row_steps"] == full["admit_refusals"] == 0
    assert full["ok"] == full["t_answered"] == n and full["steps_vs_full"] == 1.0
    assert short["requeued"] > 0 and short["thrown_row_steps"] > 0 and short["steps"] > full["steps"]
    assert short["ok"] == n and short["error"] == 0
    assert short["peak_held"] <= short["pool_pages"] / (8 * 24) < full["peak_held"]
