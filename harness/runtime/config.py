"""Typed run settings built from the composed Hydra config (plain dicts; no hydra import).

Every stage reads its settings from :class:`RunConfig`; ``from_dict`` rejects unknown keys so
a typo in ``conf/`` or on the command line fails loudly instead of being ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

from harness.audio.preamble import DUTY_TEXT
from harness.protocol.scheduler import ProtocolSettings
from harness.vad.segments import SegmentRules
from harness.vad.silero import VadSettings


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid."""


@dataclass(frozen=True)
class ScenesSettings:
    n_pairs: int = 32
    seed: int = 20260902
    four_party_share: float = 0.25
    n4_share: float = 0.6
    manifest: str | None = None  # import a JSONL manifest instead of generating scenes


@dataclass(frozen=True)
class TtsSettings:
    engine: str = "espeak"
    voices: dict[str, str] = field(default_factory=lambda: {
        "A": "en-us+m1", "B": "en-gb+m3", "C": "en-us+f2", "D": "en-gb-scotland+f4"})
    narrator: str = "en-us+m7"
    words_per_minute: int = 175
    preamble_text: str = DUTY_TEXT


@dataclass(frozen=True)
class ModelSettings:
    name: str
    target: str
    params: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 32
    num_gpus: float = 0
    num_cpus: float = 1
    image: str | None = None


@dataclass(frozen=True)
class InferSettings:
    shard_size: int = 32
    max_duration_s: float = 1800.0
    actors_per_model: int = 1
    torch_threads: int = 1


@dataclass(frozen=True)
class ClusterSettings:
    num_cpus: int | None = None  # None: this machine's cores
    num_gpus: int = 0
    ray_tmp: str = "/tmp/duplex-mpe-ray"
    address: str | None = None  # connect to an existing cluster (KubeRay) instead of starting one


@dataclass(frozen=True)
class StoreSettings:
    kind: str = "local"
    root: str = "runs"


@dataclass(frozen=True)
class AsrSettings:
    kind: str = "pocketsphinx"  # harness.scoring.asr.build_asr
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeSettings:
    kind: str = "lexical"  # harness.scoring.judge.build_judge
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoreSettings:
    batch: int = 16  # conversations per Ray task


@dataclass(frozen=True)
class MetricsSettings:
    min_n: int = 30  # a rate whose denominator is under this is n/a (spec section 5)
    yield_deadline_s: float = 2.0  # N4_R start + this is the yield stop deadline (spec section 5)

    def __post_init__(self) -> None:
        if self.min_n < 1:
            raise ValueError("metrics.min_n must be >= 1")


@dataclass(frozen=True)
class RunConfig:
    run_id: str = "demo"
    seed: int = 0
    scenes: ScenesSettings = field(default_factory=ScenesSettings)
    tts: TtsSettings = field(default_factory=TtsSettings)
    protocol: ProtocolSettings = field(default_factory=ProtocolSettings)
    detector: VadSettings = field(default_factory=VadSettings)  # online, what the scheduler acts on
    vad: VadSettings = field(default_factory=VadSettings)  # offline, what is scored
    models: tuple[ModelSettings, ...] = ()
    infer: InferSettings = field(default_factory=InferSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    asr: AsrSettings = field(default_factory=AsrSettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    score: ScoreSettings = field(default_factory=ScoreSettings)

    def conversation_seed(self, scene_id: str) -> int:
        """Per-conversation seed derived from (run seed, conversation id)."""
        h = hashlib.sha256(f"{self.seed}:{scene_id}".encode()).digest()
        return int.from_bytes(h[:4], "little")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Build from a plain dict (the resolved Hydra config). Raises :class:`ConfigError`."""
        d = dict(d)
        d.pop("hydra", None)
        models = d.pop("model", None) or {}
        protocol = dict(d.pop("protocol", {}) or {})
        kw: dict[str, Any] = {
            "vad": _vad(d.pop("vad", {}), "vad"),
            "detector": _vad(protocol.pop("detector", {}), "protocol.detector"),
            "protocol": _build(ProtocolSettings, protocol, "protocol"),
            "models": tuple(_build(ModelSettings, {"name": k, **v}, f"model.{k}") for k, v in models.items()),
        }
        sub = {"scenes": ScenesSettings, "tts": TtsSettings, "infer": InferSettings,
               "cluster": ClusterSettings, "store": StoreSettings, "metrics": MetricsSettings,
               "asr": AsrSettings, "judge": JudgeSettings, "score": ScoreSettings}
        for key, typ in sub.items():
            if key in d:
                kw[key] = _build(typ, d.pop(key) or {}, key)
        for key in ("run_id", "seed"):
            if key in d:
                kw[key] = d.pop(key)
        if d:
            raise ConfigError(f"unknown config keys: {sorted(d)}")
        cfg = cls(**kw)
        if not cfg.models:
            raise ConfigError("no model selected (e.g. model=[silent,babble,oracle])")
        return cfg


def _vad(values: dict[str, Any] | None, where: str) -> VadSettings:
    values = dict(values or {})
    rules = _build(SegmentRules, values.pop("rules", {}) or {}, f"{where}.rules")
    return _build(VadSettings, {**values, "rules": rules}, where)


def _build(typ: type, values: dict[str, Any], where: str) -> Any:
    names = {f.name for f in dataclasses.fields(typ)}
    unknown = set(values) - names
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(names)})")
    try:
        return typ(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
