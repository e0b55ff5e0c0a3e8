"""The configuration ``make demo`` composes carries the specification's numbers.

The rules written in Python are pinned by their own tests; this file pins the YAML under
``conf/``: every protocol constant of ``shared/spec/duplex-mpe.md`` as the composed default
config holds it, for the online detector the scheduler acts on (``protocol.detector``) and for
the scored one (``vad``) alike. Changing one of these numbers in ``conf/`` changes the
benchmark, so it must fail here (and be a deliberate, documented decision).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.runtime.config import RunConfig

CONF = Path(__file__).resolve().parents[2] / "conf"

# (what, spec section, value): the protocol's numbers in seconds unless named otherwise.
PROTOCOL = {
    "turn_gap_s": 0.5,  # section 4: 0.5 s of silence between ordinary human turns
    "fresh_onset_window_s": 5.0,  # section 4: 5 s window for a fresh voiced onset after T
    "endpoint_silence_s": 2.0,  # section 4: 2 s of confirmed silence ends the T response
    "response_cap_s": 60.0,  # section 4: capped at 60 s from the onset (or T end)
    "n4_answer_window_s": 3.0,  # section 4: exactly 3 s of silence after N4_Q, then N4_R
    "echo": False,  # section 4: no acoustic echo (protocol.echo, default off)
    "sample_rate": 24_000,  # section 3: clips at 24 kHz; the timeline runs at that rate
}
SEGMENT_RULES = {
    "min_speech_s": 0.12,  # section 4: speech segments of at least 120 ms
    "min_silence_s": 0.8,  # section 4: pauses shorter than 800 ms merged
}


@pytest.fixture(scope="module")
def demo_config() -> RunConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config")
    return RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True))


@pytest.mark.parametrize("name,value", sorted(PROTOCOL.items()))
def test_protocol_constant(demo_config, name, value):
    assert getattr(demo_config.protocol, name) == value


@pytest.mark.parametrize("detector", ["online (protocol.detector)", "scored (vad)"])
@pytest.mark.parametrize("name,value", sorted(SEGMENT_RULES.items()))
def test_segment_rule_of_both_detectors(demo_config, detector, name, value):
    settings = demo_config.detector if detector.startswith("online") else demo_config.vad
    assert getattr(settings.rules, name) == value
    assert settings.model == "silero-vad-jit"  # section 4: causal Silero VAD


def test_scoring_constants(demo_config):
    assert demo_config.metrics.yield_deadline_s == 2.0  # section 5: N4_R start + 2 s
    assert demo_config.metrics.min_n == 30  # section 5: a denominator under 30 is n/a


def test_the_yaml_is_what_is_pinned():
    """The pins above read the composed YAML, not the dataclass defaults: a config that left a
    value out would pass them through the Python default, so every pinned key must be in the YAML."""
    protocol = OmegaConf.load(CONF / "protocol" / "duplex_mpe.yaml")
    vad = OmegaConf.load(CONF / "vad" / "silero.yaml")
    top = OmegaConf.load(CONF / "config.yaml")
    assert set(PROTOCOL) <= set(protocol)
    assert set(SEGMENT_RULES) <= set(protocol.detector.rules) and set(SEGMENT_RULES) <= set(vad.rules)
    assert {"yield_deadline_s", "min_n"} <= set(top.metrics)
