"""The prefixes of a Duplex Cue run, derived from its config alone (as :class:`~harness.runtime.plan.RunPlan`).

    cue-corpus -> cue-infer (per model, sharded on Ray actors) -> cue-score (per model) -> cue-reduce

Each prefix hashes its own settings chained to its upstream's, so changing a scoring setting
reuses the continuations, and changing the protocol (switch lead, context, window) reruns them.
Files enter by their content (:mod:`harness.store.content`): ``cue.manifest`` and every recording
it lists the corpus hash, an LLM labeller's prompt file the score hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from harness.cue.corpus import audio_files
from harness.cue.generate import GENERATOR
from harness.cue.scoring import PROMPT
from harness.runtime.config import RunConfig
from harness.runtime.plan import pinned_digest, prompt_digests
from harness.store.content import input_digest, listed_digest
from harness.store.layout import RunLayout, settings_hash

MANIFEST = "a JSONL cue manifest of recordings and cue items: docs/formats.md, \"Duplex Cue corpus\""

# bump when the generator or ingest changes its output for the same settings (v2: the paper's 0.5 s turn pause and
# mid-sentence rule; generated words keep their punctuation)
CORPUS_VERSION = "cue-corpus-v2"
# bump when the continuation stage's outputs change for the same settings (v2: a model's output lag is dropped)
CUE_INFER_VERSION = "cue-infer-v2"
# bump when transcription / labelling code changes (v2: no cached unscoreable label; v3: "active at the cue onset"
# is the speaker's own speech at the onset, the model's window transcribed without A's recorded continuation)
CUE_SCORE_VERSION = "cue-score-v3"
# bump when the statistics or report change (v2: recordings resampled, the paired 3 x 3 table and Stuart-Maxwell)
CUE_REDUCE_VERSION = "cue-reduce-v2"


@dataclass(frozen=True)
class CuePlan:
    """Every prefix of a Duplex Cue run: ``corpus``, per model ``infer`` and ``score``, ``reduce``."""

    layout: RunLayout
    corpus: str
    infer: dict[str, str]
    score: dict[str, str]
    reduce: str
    inputs: dict[str, str] = field(default_factory=dict)  # as :attr:`~harness.runtime.plan.RunPlan.inputs`

    @classmethod
    def from_config(cls, cfg: RunConfig) -> CuePlan:
        """Every prefix of ``cfg``'s Duplex Cue run (file digests pinned by ``cfg.inputs`` as for
        :meth:`~harness.runtime.plan.RunPlan.from_config`).

        Raises:
            InputFileError: ``cue.manifest`` or a prompt file an LLM labeller reads cannot be read
                (:mod:`harness.store.content`); a recording the manifest lists that is missing is
                its line's problem (cue-corpus reports it), not an error here.
        """
        lay = RunLayout(cfg.run_id)
        c = cfg.cue
        inputs: dict[str, str] = {}
        # the lead and window set each generated recording's padding and the ingest rules
        h_corpus = settings_hash({"n_items": c.n_items, "seed": c.seed, "manifest": _manifest(cfg, inputs),
                                  "switch_lead_s": c.switch_lead_s, "window_s": c.window_s,
                                  "turn_pause_s": c.turn_pause_s, "require_mid_sentence": c.require_mid_sentence,
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
                "vad_release_s": c.vad_release_s,
                "version": CUE_SCORE_VERSION, **_labeler_prompt(cfg, inputs)}, h_inf), m.name)
        h_reduce = settings_hash({"score": sorted(score.items()), "bootstrap": c.bootstrap,
                                  "bootstrap_unit": c.bootstrap_unit, "version": CUE_REDUCE_VERSION}, h_corpus)
        return cls(lay, lay.stage("cue-corpus", h_corpus), infer, score, lay.stage("cue-reduce", h_reduce), inputs)


def _manifest(cfg: RunConfig, inputs: dict[str, str]) -> dict[str, Any] | str | None:
    """``cue.manifest`` by content: one digest of its bytes and those of every recording it lists,
    by the path as written (resolved in the manifest's folder, as ingest resolves it); unset
    (generated): as is."""
    path = cfg.cue.manifest
    if not path:
        return path

    def digest() -> str:
        listed = {"sha256": input_digest("cue.manifest", path, MANIFEST),
                  "audio": {name: listed_digest(p) for name, p in sorted(audio_files(path).items())}}
        return hashlib.sha256(json.dumps(listed, sort_keys=True).encode()).hexdigest()

    return {"sha256": pinned_digest(cfg, inputs, "cue.manifest", digest)}


def _labeler_prompt(cfg: RunConfig, inputs: dict[str, str]) -> dict[str, Any]:
    """An LLM labeller's prompt file by content (``{"prompts": ...}``); nothing for the rule, which
    reads none (so a rule run's prefix is what it was before prompts were hashed)."""
    if cfg.cue.labeler == "rule":
        return {}
    return {"prompts": prompt_digests(cfg, inputs, "cue.labeler_params", cfg.cue.labeler_params, {"prompt": PROMPT})}
