"""The run's prefixes, derived from its config alone (so any stage job can find its inputs).

Each stage's prefix carries a hash of its own settings chained to its upstream stage's hash:
changing a ``vad`` setting (the offline detector that is scored) changes the ``vad`` and
``reduce`` prefixes only, so ``infer`` outputs are reused and nothing is overwritten. The
online detector the scheduler acts on is a protocol setting (``protocol.detector``): changing
it changes what the model hears, so it re-runs ``infer``.

A file a stage reads enters its hash by content (:mod:`harness.store.content`; docs/configuration.md,
"Files named by settings"): ``scenes.manifest`` and, with ``scenes.source=llm``, the script
prompt (``scenes.llm.prompt``) the scenes hash (so everything downstream), an LLM
judge's and an LLM reference's prompt files the score and reference hashes, and the price table
(``budget.price_table``, None: the newest) the reduce hash, which prices the usage ledger with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from harness.pricing import load_prices
from harness.reference.llm import PROMPT as REFERENCE_PROMPT
from harness.runtime.config import RunConfig
from harness.scenes.llm import PROMPT as SCRIPT_PROMPT
from harness.scoring.judge.llm import ANSWER_PROMPT, WINDOW_PROMPT, prompt_path
from harness.store.content import InputFileError, input_digest
from harness.store.layout import RunLayout, settings_hash
from harness.vad.settings import VadSettings

# v3: issue 22 (contextual implicit requests, shared question pools, N4 edits); v4: paper-profile T onsets (bbe607d);
# v5: surface tells, silence mix, N4 edits (de03ad7); v6: the reviewed generator (implicit T points at Aria, self-talk,
# no self-contradiction, values and devices that fit the setting: 093d328, 5b22ca1)
GENERATOR_VERSION = "templates-v6"
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
# window with its verdict in windows.json instead of verdicts joined by "<kind>:<turn>"; v4: no cached UNPARSEABLE)
SCORE_VERSION = "score-v4"
# bump when the reference stage's outputs change for the same settings (reference code, its scores; v2: no
# cached UNPARSEABLE decision or judge verdict is served, an empty transcript is EMPTY_TRANSCRIPT)
REFERENCE_VERSION = "reference-v2"


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
    # {setting: sha256} of every file a setting names that entered a hash (``cfg.inputs`` pins them)
    inputs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: RunConfig) -> RunPlan:
        """Every prefix of ``cfg``'s run (the module docstring says what each hashes). A file's
        digest is ``cfg.inputs[setting]`` when the job pinned it (so Ray workers, which may not
        have the file, build the same plan), else read now.

        Raises:
            InputFileError: a file a setting names cannot be read (``scenes.manifest``, a prompt
                file of the script writer, an LLM judge or reference) or ``budget.price_table``
                names no table; the preflight reports it (exit 2) before anything runs.
        """
        lay = RunLayout(cfg.run_id)
        inputs: dict[str, str] = {}
        h_scenes = settings_hash(_scenes(cfg, inputs), GENERATOR_VERSION)
        h_synth = settings_hash({"tts": cfg.tts.audio_settings(), "rate": cfg.protocol.sample_rate}, h_scenes)
        infer, vad, score = {}, {}, {}
        judge = _judge(cfg, inputs)
        for m in cfg.models:
            h_inf = settings_hash({"protocol": asdict(cfg.protocol), "detector": _detector(cfg.detector),
                                   "target": m.target, "params": m.params, "seed": cfg.seed,
                                   "max_duration_s": cfg.infer.max_duration_s, "version": INFER_VERSION}, h_synth)
            infer[m.name] = lay.stage("infer", h_inf, m.name)
            h_vad = settings_hash(_detector(cfg.vad), h_inf)
            vad[m.name] = lay.stage("vad", h_vad, m.name)
            score[m.name] = lay.stage("score", settings_hash({"asr": asdict(cfg.asr), "judge": judge,
                                                              "preamble": cfg.tts.preamble_text,
                                                              "version": SCORE_VERSION}, h_vad), m.name)
        reference = lay.stage("reference", settings_hash({
            "reference": _reference(cfg, inputs), "judge": judge, "duty": cfg.tts.preamble_text,
            "min_n": cfg.metrics.min_n, "version": REFERENCE_VERSION}, h_scenes))
        h_scored = settings_hash({"metrics": asdict(cfg.metrics), "score": sorted(score.items()),
                                  "reference": reference, "version": REDUCE_VERSION}, h_synth)
        # the report's cost table is priced now with the price table; the review kit samples what was
        # scored, which no price changes, so its prefix (and its reviewers' results) stays
        h_reduce = settings_hash({"prices": _prices(cfg)}, h_scored)
        return cls(lay, lay.stage("scenes", h_scenes), lay.stage("synth", h_synth), infer, vad, score,
                   lay.stage("reduce", h_reduce), reference,
                   lay.stage("review", h_scored), inputs)


def pinned_digest(cfg: RunConfig, inputs: dict[str, str], setting: str, compute: Callable[[], str]) -> str:
    """The digest of the file ``setting`` names: ``cfg.inputs[setting]`` when pinned, else
    ``compute()``; recorded in ``inputs`` (a plan's :attr:`RunPlan.inputs`)."""
    inputs[setting] = cfg.inputs[setting] if setting in cfg.inputs else compute()
    return inputs[setting]


def prompt_digests(cfg: RunConfig, inputs: dict[str, str], setting: str, params: Mapping[str, Any],
                   names: Mapping[str, str]) -> dict[str, str]:
    """The prompt files an LLM backend with ``params`` (a judge, the text reference, the Duplex Cue
    labeller) reads, by content: ``{param: sha256}`` for each prompt parameter in ``names`` (its
    default file name), the file ``params[param]`` (or the default) in ``params["prompts_dir"]``
    (None: the repository's ``prompts/``), as the backends resolve them. ``setting`` names the
    params in a message (``"judge.params"``).

    Raises:
        InputFileError: a prompt file is missing or cannot be read.
    """
    what = f"a prompt file{' in ' + setting + '.prompts_dir' if 'prompts_dir' in params else ''}"
    folder = params.get("prompts_dir")
    return {key: pinned_digest(cfg, inputs, f"{setting}.{key}", partial(
                input_digest, f"{setting}.{key}", prompt_path(folder, params.get(key, default)), what))
            for key, default in names.items()}


def _scenes(cfg: RunConfig, inputs: dict[str, str]) -> dict[str, Any]:
    """The scenes settings, ``manifest`` by its content (unset when generated: as before content
    counted). ``source``, ``llm`` and ``strict`` enter only where they change the scenes (so the
    template and non-strict prefixes are those from before these settings existed): ``strict``
    when true, ``source`` and ``llm`` for ``source=llm``, with the prompt file by content instead
    of ``prompt`` / ``prompts_dir`` (``scenes.llm.prompt`` in :attr:`RunPlan.inputs`)."""
    d = asdict(cfg.scenes)
    source, llm, strict = d.pop("source"), d.pop("llm"), d.pop("strict")
    if d["manifest"]:
        d["manifest"] = {"sha256": pinned_digest(cfg, inputs, "scenes.manifest", partial(
            input_digest, "scenes.manifest", d["manifest"], "a JSONL scene manifest, one scene per line"))}
    if strict:
        d["strict"] = True
    if source == "llm":
        files = {k: v for k, v in llm.items() if k in ("prompt", "prompts_dir") and v is not None}
        d["source"] = source
        d["llm"] = {k: v for k, v in llm.items() if k not in ("prompt", "prompts_dir")} | {
            "prompt": prompt_digests(cfg, inputs, "scenes.llm", files, {"prompt": SCRIPT_PROMPT})["prompt"]}
    return d


def _judge(cfg: RunConfig, inputs: dict[str, str]) -> dict[str, Any]:
    """The judge's settings and, for an LLM judge, its two prompt files by content (the offline
    ``lexical`` judge reads none: its settings alone, as before prompts were hashed)."""
    d = asdict(cfg.judge)
    if cfg.judge.kind != "lexical":
        d["prompts"] = prompt_digests(cfg, inputs, "judge.params", cfg.judge.params,
                                      {"answer_prompt": ANSWER_PROMPT, "window_prompt": WINDOW_PROMPT})
    return d


def _reference(cfg: RunConfig, inputs: dict[str, str]) -> dict[str, Any]:
    """The text reference's settings but ``workers`` (speed only) and, for an LLM reference, its
    prompt file by content (the ``rule`` reference reads none)."""
    d = {k: v for k, v in asdict(cfg.reference).items() if k != "workers"}
    if cfg.reference.kind != "rule":
        d["prompts"] = prompt_digests(cfg, inputs, "reference.params", cfg.reference.params,
                                      {"prompt": REFERENCE_PROMPT})
    return d


def _prices(cfg: RunConfig) -> dict[str, Any]:
    """The price table ``budget.price_table`` (None: the newest) by content: its version, date and
    prices, as :func:`harness.pricing.load_prices` reads them (so a new table file, or an edited
    one, is a new reduce; its comments are not content)."""
    try:
        table = load_prices(cfg.budget.price_table)
    except (OSError, ValueError) as e:
        raise InputFileError(f"budget.price_table={cfg.budget.price_table}: {e}") from None
    return {"version": table.version, "as_of": table.as_of, "currency": table.currency, "models": table.models}


def _detector(vad: VadSettings) -> dict:
    """The VAD settings that change segments (not the batch size or the threads, which only change speed)."""
    d = asdict(vad)
    d.pop("batch")
    d.pop("threads")
    return d
