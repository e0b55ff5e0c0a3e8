"""Every config in conf/ composes and validates, without building anything heavy."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.runtime.config import ConfigError, RunConfig
from harness.runtime.plan import RunPlan

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(overrides: list[str]) -> RunConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True))


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_default_composes_to_the_demo():
    cfg = _compose([])
    assert [m.name for m in cfg.models] == ["silent", "babble", "oracle"]
    assert cfg.protocol.fresh_onset_window_s == 5.0 and cfg.protocol.response_cap_s == 60.0
    assert cfg.protocol.echo is False
    assert cfg.detector == cfg.vad  # online and offline detectors agree by default
    assert cfg.metrics.min_n == 30
    RunPlan.from_config(cfg)


@pytest.mark.parametrize("group", ["scenes", "tts", "protocol", "vad", "store", "cluster", "infer"])
def test_every_group_option_composes(group):
    for option in _options(group):
        _compose([f"{group}={option}"])


def test_every_model_composes_alone():
    for option in _options("model"):
        cfg = _compose([f"model=[{option}]"])
        assert [m.name for m in cfg.models] == [option]


def test_unknown_key_is_rejected():
    with pytest.raises(ConfigError, match="unknown keys"):
        _compose(["+protocol.fresh_onset_window=4"])
    with pytest.raises(ConfigError, match="unknown config keys"):
        RunConfig.from_dict({"model": {"silent": {"target": "silent"}}, "typo": 1})


def test_invalid_value_is_rejected():
    with pytest.raises(ConfigError, match="neg_threshold"):
        _compose(["vad.rules.neg_threshold=0.9"])
    with pytest.raises(ConfigError, match="no model"):
        RunConfig.from_dict({})


def test_vad_change_keeps_infer_prefix():
    a, b = _compose([]), _compose(["vad.rules.min_silence_s=0.5"])
    pa, pb = RunPlan.from_config(a), RunPlan.from_config(b)
    assert pa.infer == pb.infer and pa.vad != pb.vad and pa.reduce != pb.reduce
    c = _compose(["protocol.detector.rules.min_silence_s=0.5"])
    assert RunPlan.from_config(c).infer != pa.infer


@pytest.mark.parametrize(("override", "message"), [
    ("scenes.n_pairs=-3", "scenes: n_pairs must be >= 1"),
    ("scenes.n_pairs=0", "scenes: n_pairs must be >= 1"),
    ("scenes.n_pairs=abc", "scenes: n_pairs must be an integer, got 'abc'"),
    ("scenes.four_party_share=2", r"scenes: four_party_share must be a number in \[0, 1\], got 2"),
    ("protocol.sample_rate=0", r"protocol: sample_rate must be a positive integer \(Hz\), got 0"),
    ("protocol.sample_rate=65537", r"protocol: sample_rate must be an integer from 8000 to 48000 Hz in multiples of "
                                   r"125 Hz \(whole 32 ms Silero windows: 16000, 24000, 48000, ...\), got 65537"),
    ("protocol.sample_rate=16001", r"protocol: sample_rate must be an integer from 8000 .*got 16001"),
    ("protocol.sample_rate=44100", r"protocol: sample_rate must be an integer from 8000 .*got 44100"),
    ("protocol.turn_gap_s=-1", "protocol: turn_gap_s must be a number of seconds >= 0, got -1"),
    ("protocol.endpoint_silence_s=0", "protocol: endpoint_silence_s must be a number of seconds > 0, got 0"),
    ("metrics.yield_deadline_s=-1", "metrics: yield_deadline_s must be a number > 0, got -1"),
    ("seed=abc", "seed must be an integer, got 'abc'"),
    ("run_id=true", "run_id must be a name, got True"),
    ("run_id=null", "run_id must be a name, got None"),
])
def test_values_that_cannot_be_settings_are_config_errors(override, message):
    """From a fresh-user trial: these crashed a stage with a traceback, or ran and wrote nonsense."""
    with pytest.raises(ConfigError, match=f"^{message}"):
        _compose([override])


def test_min_n_must_be_positive():
    with pytest.raises(ConfigError, match="min_n"):
        _compose(["metrics.min_n=0"])
