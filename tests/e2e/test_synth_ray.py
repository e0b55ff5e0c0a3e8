"""The synth stage on a real local Ray (2 CPUs, 1 logical GPU; its workers import the ``qwen_tts``
stand-in of tests/fixtures/synth_runs.py): the parallel path writes the serial outputs, Qwen3-TTS
on a GPU actor, and an engine that cannot load loses every batch. The stage in this process:
tests/unit/test_synth.py; an actor killed mid-batch: tests/e2e/test_stage_pools.py."""

from __future__ import annotations

import json
import os

import pytest

from harness.runtime.plan import RunPlan
from harness.stages import run_stage
from harness.stages.synth import SynthIncomplete
from harness.store.base import get_json
from tests.fixtures.synth_runs import ROOT, qwen3_scenes, synth_outputs, with_scenes, write_qwen_tts


@pytest.fixture(scope="module")
def ray_with_fake(tmp_path_factory):
    """One Ray for this module (2 CPUs, 1 logical GPU) whose workers can import the stand-in."""
    import ray

    pkg = write_qwen_tts(tmp_path_factory.mktemp("fake_pkg_ray"))
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", os.pathsep.join([str(pkg), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    mp.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, _temp_dir=f"/tmp/dmpe-synth-ray-{os.getpid()}",
             logging_level="WARNING")
    yield
    ray.shutdown()
    mp.undo()


def test_the_parallel_path_gives_the_serial_outputs(tmp_path, ray_with_fake):
    cfg, store, plan = with_scenes(tmp_path / "serial")
    run_stage("synth", cfg, store)
    par, pstore, _ = with_scenes(tmp_path / "parallel", actors=2, batch=3)
    assert RunPlan.from_config(par).synth == plan.synth  # execution settings are not in the stage's hash
    run_stage("synth", par, pstore)
    assert synth_outputs(pstore, plan) == synth_outputs(store, plan)
    assert len(list(pstore.list(plan.layout.file(plan.synth, "batches")))) >= 4  # it did run in batches


def test_qwen3_on_a_gpu_actor_and_an_engine_that_cannot_load(tmp_path, ray_with_fake):
    weights = tmp_path / "weights"
    weights.mkdir()
    cfg, store, plan = qwen3_scenes(tmp_path / "store", weights, actors=None, num_gpus=1, num_cpus=1)
    run_stage("synth", cfg, store)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    assert index["errors"] == {} and len(index["conversations"]) == 4
    [load] = [json.loads(x) for x in (weights / "loads.jsonl").read_text().splitlines()]
    assert load["pid"] != os.getpid() and load["device"] == "cuda:0"  # one actor, on the (logical) GPU
    # weights that are not there: every batch is lost, nothing is marked, the reason is named
    cfg, store, plan = qwen3_scenes(tmp_path / "store2", tmp_path / "absent", actors=None, num_gpus=1, num_cpus=1,
                              cluster={"max_restarts": 0, "max_task_retries": 0})
    with pytest.raises(SynthIncomplete, match="does not exist"):
        run_stage("synth", cfg, store)
    assert not store.exists(plan.layout.marker(plan.synth))
