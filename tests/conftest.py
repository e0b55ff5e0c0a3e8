"""The folders are the kinds of test, and mark them: everything under tests/e2e/ is ``slow`` (real
Ray, servers, job processes, the browser), everything under tests/gpu/ ``gpu`` (CUDA only);
tests/unit/ and tests/contract/ run in this process (``make test-fast``). Shared fixtures:
espeak-ng speech (real TTS, made here, never downloaded), the S3 servers (moto per session and a
bucket per test, tests/fixtures/s3.py; SeaweedFS likewise, tests/fixtures/seaweed.py; registered
here once, so one server each serves the session) and the session's one completed tiny run,
which the read-only end-to-end checks share (tests/fixtures/runs.py)."""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.audio.tts.espeak import EspeakTTS
from tests.fixtures.s3 import moto_url_fixture, s3_fixture  # noqa: F401  (defined once: one server per session)
from tests.fixtures.seaweed import seaweed_fixture, seaweed_s3_fixture  # noqa: F401

if TYPE_CHECKING:
    from tests.fixtures.runs import CompletedRun

TESTS = Path(__file__).resolve().parent

# A run under kernel caps (ONEDNN_MAX_CPU_ISA / ATEN_CPU_CAPABILITY, docs/vad.md) keeps its own
# torch.compile cache: an AVX2-capped process that loaded the kernels an uncapped run had compiled
# into the shared inductor cache crashed (segfault in the tiny Moshi's compiled RMSNorm, torch
# 2.9.1); with a cache of its own it passes. Set here, so job processes and Ray workers inherit it.
_CAPS = [os.environ.get(k, "") for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")]
if any(_CAPS) and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_" + "_".join(c.lower() or "any" for c in _CAPS))
KIND_MARKS = {"e2e": pytest.mark.slow, "gpu": pytest.mark.gpu}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = KIND_MARKS.get(item.path.relative_to(TESTS).parts[0])
        if mark is not None:
            item.add_marker(mark)


@pytest.fixture(scope="session")
def tts() -> EspeakTTS:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is not installed: run `make setup`")
    return EspeakTTS(24_000)


@pytest.fixture(scope="session")
def completed_run(tmp_path_factory, worker_id) -> CompletedRun:
    """One run of every stage on the tiny scenes (three baselines, two faulty models), built once
    per session on first use (about a minute); under pytest-xdist (``make test``) once for all
    workers, each of which then checks a copy of its own (tests/fixtures/runs.py). Its checks only
    read it, or write under prefixes of their own (a new stage version, the review kit) and assert
    that nothing else changed."""
    from tests.fixtures.runs import complete_run, shared_complete_run

    mine = tmp_path_factory.mktemp("completed")
    if worker_id == "master":  # one process (the parent of its folder is shared by every session)
        return complete_run(mine)
    # the workers' folders are popen-gw<n> of this session's own folder
    return shared_complete_run(tmp_path_factory.getbasetemp().parent / "completed-run", mine)
