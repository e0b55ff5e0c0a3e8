"""The preflight finds a TTS engine that cannot run before anything is spent (issue 21: the synth
stage's actors used to find a missing Qwen3-TTS package or weights only when they loaded)."""

from __future__ import annotations

from harness.runtime.plan import RunPlan
from harness.runtime.preflight import problems
from harness.stages import STAGES
from harness.store.base import LocalStore, put_json
from tests.fixtures.runs import tiny_config


def _tts_problems(c, stages=STAGES) -> list[str]:
    return [p for p in problems(c, LocalStore(c.store.root), stages) if p.startswith("tts=")]


def test_qwen3_tts_without_its_package_is_named_before_the_synth_stage(tmp_path):
    c = tiny_config(tmp_path, tts={"engine": "qwen3"})
    (problem,) = _tts_problems(c)
    assert problem.startswith("tts=qwen3: Qwen3-TTS needs the `qwen-tts` package")
    assert _tts_problems(c, ["scenes"]) == []  # only the synth stage speaks


def test_qwen3_tts_weights_missing_are_named_with_the_setting(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec  # the package "installed": its weights are what is missing
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "qwen_tts" else
                        real(name, *a))
    c = tiny_config(tmp_path, tts={"engine": "qwen3", "params": {"weights": str(tmp_path / "no-such-folder")}})
    assert _tts_problems(c) == [f"tts=qwen3: Qwen3-TTS weights folder {str(tmp_path / 'no-such-folder')!r} "
                                "(tts.params.weights) does not exist"]


def test_a_bad_tts_param_is_named_and_a_complete_synth_needs_no_engine(tmp_path):
    c = tiny_config(tmp_path, tts={"engine": "qwen3", "params": {"voices_of": 1}})
    (problem,) = _tts_problems(c)
    assert problem.startswith("tts=qwen3: tts.params ['voices_of']: the qwen3 engine takes")
    plan = RunPlan.from_config(c)
    put_json(LocalStore(c.store.root), plan.layout.marker(plan.synth), {"done": True})
    assert _tts_problems(c) == []
    assert _tts_problems(tiny_config(tmp_path / "espeak")) == []  # espeak-ng is installed here
