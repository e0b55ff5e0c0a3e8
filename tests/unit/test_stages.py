"""The stage registry of harness/stages/__init__.py: names to classes, imported when used."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.stages import CUE_STAGES, STAGES, stage_class
from tests.fixtures.jobs import REPO


@pytest.mark.parametrize("name", STAGES + CUE_STAGES)
def test_each_stage_name_is_its_class_name(name):
    assert stage_class(name).name == name


def test_an_unknown_stage_is_a_key_error():
    with pytest.raises(KeyError):
        stage_class("scoring")


def test_a_process_running_one_stage_imports_no_other_stage_module():
    """A score actor unpickles harness.stages.score: the other stages' modules (and their stacks:
    the TTS engines, Silero, the report's figures) stay unimported."""
    code = ("import sys, harness.stages.score; "
            "print(sorted(m for m in sys.modules if m.startswith('harness.stages.')), 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["['harness.stages.score']", "False"]


def test_the_job_drivers_import_no_torch():
    """A job process that plans, dispatches or reads (the pipeline's driver, ``make status``, the
    scene manifest, the review kit) imports no torch (about 1.5 s of CPU per process): the worker
    that streams (harness.runtime.infer_worker) and the resamplers' filters import it where they run."""
    code = ("import sys, jobs.pipeline, jobs.status, jobs.scenes, jobs.review, jobs.rerun_failed, jobs.cue, "
            "harness.runtime.executor, harness.stages.synth, harness.stages.score, harness.stages.reduce; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]
