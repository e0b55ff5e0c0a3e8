"""Adding a model touches no shared file (issue 20): a contributor writes an adapter module and its
``conf/model/<name>.yaml`` (here both in a temporary folder, the module on ``sys.path``), and the
registry lists it, preflight checks it, and the runner streams it; no list in the harness, the
Makefile or the tests is edited."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.models.registry import build_model, model_configs
from harness.runtime.config import RunConfig
from harness.runtime.preflight import problems
from harness.runtime.runner import run_conversations
from harness.store.base import LocalStore
from harness.vad.settings import VadSettings
from tests.fixtures.import_probe import added_packages
from tests.fixtures.runs import tiny_config
from tests.fixtures.tiny import PROTOCOL, noise_conversations

ADAPTER = '''"""A contributor's model: says back what it heard one step later, at a gain."""

import numpy as np

from harness.models.base import DuplexModel, ModelInfo


class EchoModel(DuplexModel):
    def __init__(self, gain: float = 0.5, max_batch: int = 4):
        self.gain = gain
        self.info = ModelInfo("echo", 24_000, 24_000, 1_920, 1_920, max_batch)

    def load(self, device):
        self.last = np.zeros((self.info.max_batch, 1_920), np.float32)

    def open(self, row, stream):
        self.last[row] = 0.0

    def step(self, frames):
        out, self.last[:len(frames)] = self.last[:len(frames)].copy(), frames * self.gain
        return np.clip(out, -1.0, 1.0)
'''
CONFIG = '''# The echo model: an adapter outside the harness, registered by this file alone.
echo:
  target: "h20_contrib_echo:EchoModel"
  params: {gain: 0.5}
  batch_size: 2
  num_gpus: 0
  num_cpus: 1
  image: null
  role: evaluated
'''


@pytest.fixture
def contributed(tmp_path, monkeypatch) -> Path:
    """The two files a contributor writes; returns the folder of model configs."""
    (tmp_path / "h20_contrib_echo.py").write_text(ADAPTER)
    conf = tmp_path / "conf" / "model"
    conf.mkdir(parents=True)
    (conf / "echo.yaml").write_text(CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield conf
    sys.modules.pop("h20_contrib_echo", None)


def test_a_new_model_is_an_adapter_and_a_config_and_nothing_else(contributed, tmp_path):
    assert list(model_configs(contributed)) == ["echo"]  # the registry lists it from its config

    # preflight checks it like any registered model: its params bind to the constructor, a misspelt one is named
    settings = yaml.safe_load((contributed / "echo.yaml").read_text())
    cfg = tiny_config(tmp_path / "store", "contrib", settings, cluster={"num_cpus": 2, "num_gpus": 0})
    store = LocalStore(cfg.store.root)
    assert problems(cfg, store, ["scenes", "infer"]) == []
    misspelt = {"echo": {**settings["echo"], "params": {"gian": 0.7}}}
    bad = RunConfig.from_dict({**cfg.to_dict(), "model": misspelt})
    assert problems(bad, store, ["scenes"]) == [
        "model 'echo' (h20_contrib_echo:EchoModel): model.echo.params: unknown parameter 'gian'; EchoModel accepts: "
        "gain, max_batch"]

    # built by its config name and streamed by the runner, in two rows with a refill
    (m,) = cfg.models
    model = build_model("echo", m.params, conf_dir=contributed)
    model.load("cpu")
    convs = noise_conversations(3)
    res = run_conversations(model, convs, PROTOCOL, VadSettings(), rows=m.batch_size)
    assert [r.status for r in res] == ["ok"] * 3, [r.reason for r in res]
    heard = np.abs(res[0].output).max()
    assert 0 < heard <= 0.5 * np.abs(np.concatenate(convs[0].turn_clips)).max() + 0.01  # the room, echoed at half gain

    # and it keeps the contract's first rule: importing it imports no stack
    assert added_packages(["h20_contrib_echo"], [tmp_path]) == {"h20_contrib_echo": []}
