"""The run's prefixes, derived from its config alone (so any stage job can find its inputs).

Each stage's prefix carries a hash of its own settings chained to its upstream stage's hash:
changing a ``vad`` setting (the offline detector that is scored) changes the ``vad`` and
``reduce`` prefixes only, so ``infer`` outputs are reused and nothing is overwritten. The
online detector the scheduler acts on is a protocol setting (``protocol.detector``): changing
it changes what the model hears, so it re-runs ``infer``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.runtime.config import RunConfig
from harness.store.layout import RunLayout, settings_hash
from harness.vad.silero import VadSettings

GENERATOR_VERSION = "templates-v2"
# the synth stage's outputs (recorded in its marker): v1 is the layout before stage versions existed, so it
# is not in the synth hash; the first bump adds it there (a new prefix: clips are made again)
SYNTH_VERSION = "synth-v1"
VAD_VERSION = "vad-v1"  # the same for the vad stage's outputs
# bump when the infer stage's outputs change for the same settings (v2: attempts, checksummed markers,
# stored probabilities; v3: the endpoint rule from rule times, streaming resampling, output peak)
INFER_VERSION = "infer-v4"
# bump when the reduce stage's outputs change for the same inputs (new scores, statistics; v6: the
# silence window after the T wait starts at the rule time, every score per timing bin, evaluated-only family;
# v7: rows from the score stage's windows, hosted settings from the model facts, no review results)
REDUCE_VERSION = "reduce-v7"
# bump when the score stage's outputs change for the same settings (ASR/judge code, scoring flow; v3: every
# window with its verdict in windows.json instead of verdicts joined by "<kind>:<turn>")
SCORE_VERSION = "score-v3"
# bump when the reference stage's outputs change for the same settings (reference code, its scores)
REFERENCE_VERSION = "reference-v1"


@dataclass(frozen=True)
class RunPlan:
    layout: RunLayout
    scenes: str
    synth: str
    infer: dict[str, str]
    vad: dict[str, str]
    score: dict[str, str]
    reduce: str
    reference: str
    review: str  # the human validation kit of this reduce output (harness/review)

    @classmethod
    def from_config(cls, cfg: RunConfig) -> RunPlan:
        lay = RunLayout(cfg.run_id)
        h_scenes = settings_hash(asdict(cfg.scenes), GENERATOR_VERSION)
        h_synth = settings_hash({"tts": cfg.tts.audio_settings(), "rate": cfg.protocol.sample_rate}, h_scenes)
        infer, vad, score = {}, {}, {}
        for m in cfg.models:
            h_inf = settings_hash({"protocol": asdict(cfg.protocol), "detector": _detector(cfg.detector),
                                   "target": m.target, "params": m.params, "seed": cfg.seed,
                                   "max_duration_s": cfg.infer.max_duration_s, "version": INFER_VERSION}, h_synth)
            infer[m.name] = lay.stage("infer", h_inf, m.name)
            h_vad = settings_hash(_detector(cfg.vad), h_inf)
            vad[m.name] = lay.stage("vad", h_vad, m.name)
            score[m.name] = lay.stage("score", settings_hash({"asr": asdict(cfg.asr), "judge": asdict(cfg.judge),
                                                              "preamble": cfg.tts.preamble_text,
                                                              "version": SCORE_VERSION}, h_vad), m.name)
        reference = lay.stage("reference", settings_hash({
            "reference": {k: v for k, v in asdict(cfg.reference).items() if k != "workers"},
            "judge": asdict(cfg.judge), "duty": cfg.tts.preamble_text, "min_n": cfg.metrics.min_n,
            "version": REFERENCE_VERSION}, h_scenes))
        h_reduce = settings_hash({"metrics": asdict(cfg.metrics), "score": sorted(score.items()),
                                  "reference": reference, "version": REDUCE_VERSION}, h_synth)
        return cls(lay, lay.stage("scenes", h_scenes), lay.stage("synth", h_synth), infer, vad, score,
                   lay.stage("reduce", h_reduce), reference,
                   lay.stage("review", h_reduce))


def _detector(vad: VadSettings) -> dict:
    """The VAD settings that change segments (not the batch size, which only changes speed)."""
    d = asdict(vad)
    d.pop("batch")
    return d
