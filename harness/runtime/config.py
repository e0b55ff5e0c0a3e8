"""Typed run settings built from the composed Hydra config (plain dicts; no hydra import).

Every stage reads its settings from :class:`RunConfig`; ``from_dict`` rejects unknown keys so
a typo in ``conf/`` or on the command line fails loudly instead of being ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from harness.audio.tts.settings import TtsSettings
from harness.checks import require_integer, require_positive, settings_with_url_credentials
from harness.protocol.scheduler import ProtocolSettings, timeline_rate_problem
from harness.scenes.settings import ScenesSettings
from harness.store.layout import check_id
from harness.store.settings import StoreSettings
from harness.vad.segments import SegmentRules
from harness.vad.settings import VadSettings


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid."""


MODEL_ROLES = ("evaluated", "baseline", "reference")  # model.<name>.role (harness.metrics.analyses)
ESTIMATE_BASES = ("measured", "estimated")  # model.<name>.estimate.basis


@dataclass(frozen=True)
class CostEstimate:
    """What a model's inference costs per hour of audio streamed through it (``model.<name>.estimate``),
    from which a job projects a run's cost before its first shard (:mod:`harness.runtime.projection`;
    docs/models.md, "Cost"). It changes no output, so it enters no stage hash.

    Attributes:
        device_hours_per_audio_hour: device-hours the budget books (an actor's wall time x its
            ``num_gpus``, a CPU actor one device: :func:`harness.runtime.shard.device_hours`) per hour
            of streamed audio (a shard marker's ``audio_s``: the preamble, the turns and every wait).
        basis: ``measured`` (a run timed it; ``source`` names the command and machine) or ``estimated``.
        source: where the figure comes from: the command, machine and date, or the reasoning.
        batch_size: the rows the figure holds for (None: any); a run stepping another number is
            projected with it all the same, labelled estimated and saying so.
        api_tokens_per_audio_s: a hosted model's expected usage per second of streamed audio, by the
            price table's token kinds (``input_audio``, ``output_audio``, ...); empty: unknown.
    """

    device_hours_per_audio_hour: float
    basis: str
    source: str
    batch_size: int | None = None
    api_tokens_per_audio_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_positive(self, "device_hours_per_audio_hour")
        if self.basis not in ESTIMATE_BASES:
            raise ValueError(f"basis {self.basis!r} is not one of: {', '.join(ESTIMATE_BASES)}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("source must say where the figure comes from")
        if self.batch_size is not None:
            require_integer(self, "batch_size")
            require_positive(self, "batch_size")
        for kind, rate in dict(self.api_tokens_per_audio_s or {}).items():
            if isinstance(rate, bool) or not isinstance(rate, int | float) or rate < 0:
                raise ValueError(f"api_tokens_per_audio_s.{kind} must be a number >= 0, got {rate!r}")


@dataclass(frozen=True)
class ModelSettings:
    name: str
    target: str
    params: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 64
    num_gpus: float = 0
    num_cpus: float = 1
    image: str | None = None
    # evaluated: enters the between-model comparisons (Bonferroni m, Spearman); baseline (a
    # self-test such as silent/babble/oracle) or reference: scored and shown, never compared
    role: str = "evaluated"
    # this model's watchdog (None: infer.step_timeout_s), e.g. a model that generates a whole answer in one step
    step_timeout_s: float | None = None
    # device-hours per hour of streamed audio, measured or estimated (None: unknown); the projection's only input
    estimate: CostEstimate | None = None

    def __post_init__(self) -> None:
        if isinstance(self.estimate, dict):  # as the config gives it
            object.__setattr__(self, "estimate", _build(CostEstimate, self.estimate, "estimate"))
        check_id(self.name, "model name")
        require_positive(self, "batch_size")
        if self.step_timeout_s is not None:
            require_positive(self, "step_timeout_s")
        if self.num_gpus < 0 or self.num_cpus < 0:
            raise ValueError("num_gpus and num_cpus must be >= 0")
        if self.role not in MODEL_ROLES:
            raise ValueError(f"role {self.role!r} is not one of: {', '.join(MODEL_ROLES)}")


@dataclass(frozen=True)
class InferSettings:
    # conversations per shard; None: per model, BATCHES_PER_SHARD x its batch_size (at least 64), so
    # continuous batching keeps the rows full for most of a shard and only its tail drains
    shard_size: int | None = None
    max_duration_s: float = 1800.0
    actors_per_model: int | None = None  # None: one actor per GPU (or CPU slot) the cluster has
    torch_threads: int = 1
    step_timeout_s: float = 60.0  # watchdog: a model call that takes longer fails the attempt
    first_step_timeout_s: float = 900.0  # for open and a batch's first step (warm-up, compilation)
    load_timeout_s: float = 3600.0  # for the model's load (a cold cache of full-size weights, compilation)
    # an actor given GPUs (model num_gpus > 0) where torch sees no usable CUDA fails at once (it
    # would load on CPU and book GPU-hours); true: run it on CPU on purpose (a test, a CPU-only box)
    allow_cpu_for_gpu_actors: bool = False
    # decoded synth clips an infer actor keeps for reuse (MiB; least recently used dropped first): with
    # inputs read as rows free up, the actor's memory is its rows, this cache and its model (issue 24)
    clip_cache_mib: float = 256.0

    BATCHES_PER_SHARD = 8

    def __post_init__(self) -> None:
        require_positive(self, "max_duration_s", "torch_threads", "step_timeout_s", "first_step_timeout_s",
                         "load_timeout_s")
        if self.clip_cache_mib < 0:
            raise ValueError("clip_cache_mib must be >= 0")
        if self.shard_size is not None:
            require_integer(self, "shard_size")
            require_positive(self, "shard_size")
        if self.actors_per_model is not None and self.actors_per_model < 1:
            raise ValueError("actors_per_model must be >= 1 or null")

    def shard_size_for(self, batch_size: int) -> int:
        """Conversations per shard for a model stepping ``batch_size`` rows: ``shard_size``, or (None)
        ``max(64, BATCHES_PER_SHARD * batch_size)``. A shard whose conversations all start together
        idles its rows while the longest finishes; eight batches' worth keeps that tail to a few
        percent of the shard's time (rows refill within a shard, not across shards)."""
        return self.shard_size or max(64, self.BATCHES_PER_SHARD * max(1, batch_size))


@dataclass(frozen=True)
class ClusterSettings:
    num_cpus: int | None = None  # None: this machine's cores
    num_gpus: int = 0
    ray_tmp: str = "/tmp/duplex-mpe-ray"
    address: str | None = None  # connect to an existing cluster (KubeRay) instead of starting one
    max_restarts: int = 2  # Ray restarts of a dead ShardRunner actor
    max_task_retries: int = 2  # Ray retries of a shard whose actor died (on the restarted actor)
    shard_attempts: int = 3  # driver-level attempts per shard after Ray gave up (a fresh actor each)
    # attempts per batch of the other stages' pools (synth, vad, score, cue-score) whose actor died (a
    # fresh actor each); a batch whose worker raised is not retried (harness.runtime.pool)
    batch_attempts: int = 3
    resource_wait_s: float = 0.0  # wait this long for a node that can hold an actor's request, then fail

    def __post_init__(self) -> None:
        require_integer(self, "batch_attempts")
        require_positive(self, "shard_attempts", "batch_attempts")
        if self.resource_wait_s < 0:
            raise ValueError("resource_wait_s must be >= 0")
        if self.max_restarts < 0 or self.max_task_retries < 0:
            raise ValueError("max_restarts and max_task_retries must be >= 0")


@dataclass(frozen=True)
class BudgetSettings:
    """Spend limits checked before each shard starts (docs/cluster.md).

    Spend is measured wall time of every shard attempt times the GPUs its actor holds (a CPU
    actor counts as one device), in device-hours; ``usd`` adds the API cost of hosted models,
    their raw usage priced with the price table ``price_table`` (a version of
    ``harness/pricing/tables``; None: the newest). A hosted model the table cannot price is
    refused under ``usd`` unless ``allow_unpriced`` (its API cost is then left out of the budget).
    ``None``: no limit.
    """

    gpu_hours: float | None = None
    usd: float | None = None
    usd_per_gpu_hour: float = 0.0
    price_table: int | None = None
    allow_unpriced: bool = False
    # what the cost projection printed before the first shard assumes (harness.runtime.projection;
    # docs/cluster.md): a model's response to T lasts this long (then the endpoint's silence), and an
    # LLM call that sets no output limit thinks this many tokens (Gemini bills thinking as output)
    projected_answer_s: float = 10.0
    projected_thinking_tokens: int = 500

    def __post_init__(self) -> None:
        require_positive(self, "projected_answer_s")
        require_integer(self, "projected_thinking_tokens")
        if self.projected_thinking_tokens < 0:
            raise ValueError("budget.projected_thinking_tokens must be >= 0")
        for name in ("gpu_hours", "usd"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"budget.{name} must be >= 0 or null")
        if self.usd is not None and self.usd_per_gpu_hour <= 0:
            raise ValueError("budget.usd needs budget.usd_per_gpu_hour > 0")


@dataclass(frozen=True)
class AsrSettings:
    kind: str = "pocketsphinx"  # harness.scoring.asr.build_asr
    params: dict[str, Any] = field(default_factory=dict)
    # add the scene's answer key (gold answer, N4_Q reference answers) to the ASR's LM / context
    # (harness.scoring.flow.scene_vocabulary); off: transcripts are not biased towards the gold phrase
    bias_with_gold: bool = False


@dataclass(frozen=True)
class JudgeSettings:
    kind: str = "lexical"  # harness.scoring.judge.build_judge
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferenceSettings:
    """The text-conditioned reference (spec section 7; docs/reference.md)."""

    kind: str = "rule"  # harness.reference.build_reference: rule (offline stand-in) | anthropic | gemini
    params: dict[str, Any] = field(default_factory=dict)
    runs: int = 2  # independent passes (the pass index is part of the cache key); agreement needs 2
    workers: int = 8  # concurrent backend calls; changes speed, not results

    def __post_init__(self) -> None:
        if self.runs < 2:
            raise ValueError("reference.runs must be >= 2 (agreement between passes)")
        if self.workers < 1:
            raise ValueError("reference.workers must be >= 1")


@dataclass(frozen=True)
class ScoreSettings:
    batch: int = 16  # conversations per batch sent to a scoring actor
    num_cpus: float = 1  # per scoring actor (ASR + judge)
    num_gpus: float = 0  # per scoring actor: 1 for a GPU ASR (asr=qwen3) on a cluster
    actors: int | None = None  # None: as many as the Ray cluster's CPUs (or GPUs) hold

    def __post_init__(self) -> None:
        require_positive(self, "batch")


@dataclass(frozen=True)
class MetricsSettings:
    min_n: int = 30  # a rate whose denominator is under this is n/a (spec section 5)
    yield_deadline_s: float = 2.0  # N4_R start + this is the yield stop deadline (spec section 5)
    suspect_peak_dbfs: float = -60.0  # a model whose output peak stays below this everywhere is flagged suspect
    max_lag_s: float = 0.5  # a paced stream that fell further behind real time than this is flagged (not excluded)
    # a (model, condition, window kind) whose UNPARSEABLE share of judged items exceeds this is flagged in the
    # report and at exit (docs/judge.md)
    max_unparseable_share: float = 0.02

    def __post_init__(self) -> None:
        require_integer(self, "min_n")
        if self.min_n < 1:
            raise ValueError("metrics.min_n must be >= 1")
        require_positive(self, "yield_deadline_s", "max_lag_s")
        share = self.max_unparseable_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            raise ValueError(f"metrics.max_unparseable_share must be a share in [0, 1], got {share!r}")


@dataclass(frozen=True)
class CueSettings:
    """Duplex Cue, the companion protocol (spec section 9; docs/cue.md): its corpus, the
    conditional continuation and its scoring. Times in seconds on the recording's timeline."""

    n_items: int = 24  # generated corpus size (harness/cue/generate.py); ignored with a manifest
    seed: int = 20260913  # generator seed
    manifest: str | None = None  # ingest a corpus (docs/formats.md, "Duplex Cue corpus") instead of generating
    allow_outside_paths: bool = False  # a manifest's audio may lie outside its folder (default: refused)
    turn_pause_s: float = 0.5  # the paper: pauses under 0.5 s between A's words are inside A's turn (ingest rule)
    require_mid_sentence: bool = True  # the paper: A is mid-sentence at the switch point (ingest rule)
    switch_lead_s: float = 0.08  # the switch point: this long before the cue's first word, clipped at 0
    context_s: float = 120.0  # at most this much of both channels is fed before the switch point
    window_s: float = 10.0  # the model generates this long after the switch point
    vad_release_s: float = 0.08  # a VAD segment runs on this long after speech stops ("active at the cue onset")
    review_context_s: float = 15.0  # prior context a labeller or human reviewer is given
    transcriber: str = "pocketsphinx"  # word timestamps (harness.scoring.asr): the offline default or a GPU backend
    labeler: str = "rule"  # Continued / Adapted / Yielded: rule (offline stand-in) | an LLM backend
    labeler_params: dict[str, Any] = field(default_factory=dict)
    bootstrap: int = 2000  # bootstrap resamples for the intervals of the response distributions
    bootstrap_unit: str = "recording"  # what a resample draws: recordings (a cluster bootstrap) or items
    shard_size: int = 32  # items per shard of the continuation stage

    def __post_init__(self) -> None:
        require_integer(self, "n_items", "seed", "bootstrap", "shard_size")
        require_positive(self, "n_items", "context_s", "window_s", "review_context_s", "bootstrap", "shard_size",
                         "turn_pause_s")
        if self.bootstrap_unit not in ("recording", "item"):
            raise ValueError(f"bootstrap_unit must be recording or item, got {self.bootstrap_unit!r}")
        for name in ("switch_lead_s", "vad_release_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")


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
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    asr: AsrSettings = field(default_factory=AsrSettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    reference: ReferenceSettings = field(default_factory=ReferenceSettings)
    score: ScoreSettings = field(default_factory=ScoreSettings)
    cue: CueSettings = field(default_factory=CueSettings)
    # {setting: sha256} of the files settings name (scenes.manifest, prompt files, cue.manifest), pinned by the
    # job when it starts (jobs/_entry.pin_inputs) so every process of the run, Ray workers without the files
    # included, builds the same plan; empty: the plan reads the files (harness/runtime/plan.py)
    inputs: dict[str, str] = field(default_factory=dict)

    def conversation_seed(self, scene_id: str) -> int:
        """Per-conversation seed derived from (run seed, conversation id)."""
        h = hashlib.sha256(f"{self.seed}:{scene_id}".encode()).digest()
        return int.from_bytes(h[:4], "little")

    def to_dict(self) -> dict[str, Any]:
        """The plain-dict form :meth:`from_dict` reads (JSON-able): ``from_dict(to_dict())`` equals self."""
        d = dataclasses.asdict(self)
        d["model"] = {m.pop("name"): m for m in d.pop("models")}
        d["protocol"]["detector"] = d.pop("detector")
        return json.loads(json.dumps(d))  # tuples (e.g. vad.sweep) as lists: equal to a stored run.json's

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Build from a plain dict (the resolved Hydra config). Raises :class:`ConfigError`, also
        for any setting holding a URL with credentials (they would be written to ``run.json``)."""
        d = dict(d)
        d.pop("hydra", None)
        if leaky := settings_with_url_credentials(d):
            raise ConfigError(f"{', '.join(leaky)}: a URL holds credentials (user:password@), which would be written "
                              "to run.json and the logs; give them through the environment instead (a model's or "
                              "backend's API key variable, boto3's chain for S3)")
        models = d.pop("model", None) or {}
        protocol = dict(d.pop("protocol", {}) or {})
        kw: dict[str, Any] = {
            "vad": _vad(d.pop("vad", {}), "vad"),
            "detector": _vad(protocol.pop("detector", {}), "protocol.detector"),
            "protocol": _build(ProtocolSettings, protocol, "protocol"),
            "models": tuple(_build(ModelSettings, {"name": str(k), **v}, f"model.{k}") for k, v in models.items()),
        }
        sub = {"scenes": ScenesSettings, "tts": TtsSettings, "infer": InferSettings,
               "cluster": ClusterSettings, "budget": BudgetSettings, "store": StoreSettings, "metrics": MetricsSettings,
               "asr": AsrSettings, "judge": JudgeSettings, "score": ScoreSettings,
               "reference": ReferenceSettings, "cue": CueSettings}
        for key, typ in sub.items():
            if key in d:
                kw[key] = _build(typ, d.pop(key) or {}, key)
        if "inputs" in d:
            kw["inputs"] = {str(k): str(v) for k, v in (d.pop("inputs") or {}).items()}
        if "run_id" in d:
            kw["run_id"] = _as_text(d.pop("run_id"))
            if not isinstance(kw["run_id"], str):  # Hydra reads run_id=true / null as a bool / None
                raise ConfigError(f"run_id must be a name, got {kw['run_id']!r} (quote it: run_id='\"true\"')")
        if "seed" in d:
            kw["seed"] = d.pop("seed")
            if isinstance(kw["seed"], bool) or not isinstance(kw["seed"], int):
                raise ConfigError(f"seed must be an integer, got {kw['seed']!r}")
        try:  # the run id names the run's prefix in the store
            check_id(str(kw.get("run_id", "demo")), "run_id")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if d:
            raise ConfigError(f"unknown config keys: {sorted(d)}")
        if problem := timeline_rate_problem(kw["protocol"].sample_rate):
            raise ConfigError(f"protocol: {problem}")
        cfg = cls(**kw)
        if not cfg.models:
            raise ConfigError("no model selected (e.g. model=[silent,babble,oracle])")
        return cfg


def _vad(values: dict[str, Any] | None, where: str) -> VadSettings:
    values = dict(values or {})
    rules = _build(SegmentRules, values.pop("rules", {}) or {}, f"{where}.rules")
    return _build(VadSettings, {**values, "rules": rules}, where)


_TEXT_TYPES = ("str", "str | None")  # annotations (postponed: strings) of identifier-like fields


def _as_text(value: Any) -> Any:
    """An identifier is a string whatever it looks like: Hydra turns ``run_id=20260115`` or
    ``store.prefix=2026`` into numbers, which become their text again here."""
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _build(typ: type, values: dict[str, Any], where: str) -> Any:
    fields = {f.name: f.type for f in dataclasses.fields(typ)}
    unknown = set(values) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(fields)})")
    values = {k: _as_text(v) if fields[k] in _TEXT_TYPES else v for k, v in values.items()}
    try:
        return typ(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
