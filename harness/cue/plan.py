"""The prefixes of a Duplex Cue run, derived from its config alone (as :class:`~harness.runtime.plan.RunPlan`).

    cue-corpus -> cue-infer (per model, sharded on Ray actors) -> cue-score (per model) -> cue-reduce

Each prefix hashes its own settings chained to its upstream's, so changing a scoring setting
reuses the continuations, and changing the protocol (switch lead, context, window) reruns them.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.cue.generate import GENERATOR
from harness.runtime.config import RunConfig
from harness.store.layout import RunLayout, settings_hash

CORPUS_VERSION = "cue-corpus-v1"  # bump when the generator or ingest changes its output for the same settings
CUE_INFER_VERSION = "cue-infer-v1"  # bump when the continuation stage's outputs change for the same settings
CUE_SCORE_VERSION = "cue-score-v1"  # bump when transcription / labelling code changes
CUE_REDUCE_VERSION = "cue-reduce-v1"  # bump when the statistics or report change


@dataclass(frozen=True)
class CuePlan:
    """Every prefix of a Duplex Cue run: ``corpus``, per model ``infer`` and ``score``, ``reduce``."""

    layout: RunLayout
    corpus: str
    infer: dict[str, str]
    score: dict[str, str]
    reduce: str

    @classmethod
    def from_config(cls, cfg: RunConfig) -> CuePlan:
        lay = RunLayout(cfg.run_id)
        c = cfg.cue
        # the lead and window set each generated recording's padding and the ingest rules
        h_corpus = settings_hash({"n_items": c.n_items, "seed": c.seed, "manifest": c.manifest,
                                  "switch_lead_s": c.switch_lead_s, "window_s": c.window_s,
                                  "generator": GENERATOR, "rate": cfg.protocol.sample_rate}, CORPUS_VERSION)
        infer, score = {}, {}
        for m in cfg.models:
            h_inf = settings_hash({"switch_lead_s": c.switch_lead_s, "context_s": c.context_s, "window_s": c.window_s,
                                   "target": m.target, "params": m.params, "seed": cfg.seed,
                                   "version": CUE_INFER_VERSION}, h_corpus)
            infer[m.name] = lay.stage("cue-infer", h_inf, m.name)
            score[m.name] = lay.stage("cue-score", settings_hash({
                "transcriber": c.transcriber, "asr": cfg.asr.params if c.transcriber == cfg.asr.kind else {},
                "labeler": c.labeler, "labeler_params": c.labeler_params, "review_context_s": c.review_context_s,
                "version": CUE_SCORE_VERSION}, h_inf), m.name)
        h_reduce = settings_hash({"score": sorted(score.items()), "bootstrap": c.bootstrap,
                                  "version": CUE_REDUCE_VERSION}, h_corpus)
        return cls(lay, lay.stage("cue-corpus", h_corpus), infer, score, lay.stage("cue-reduce", h_reduce))
