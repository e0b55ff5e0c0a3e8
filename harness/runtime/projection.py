"""What a run will cost, projected before its first shard (``make status``, the job's start).

A shard's measured spend calibrates the budget only once it has run (:mod:`harness.runtime.executor`);
before that the run's cost is projected from three things:

* **the audio each model streams** (:class:`RunAudio`): per conversation the preamble, the turns,
  the scheduler's gaps and waits (:func:`stream_seconds`, which asks the real
  :class:`~harness.protocol.scheduler.Scheduler`, answering T for ``budget.projected_answer_s``),
  from the synth index once synth has run (the clips' lengths), else from the scene texts at the
  paper's speaking rate (:data:`harness.scenes.stats.CHARS_PER_S`, 14.0 characters a second) and,
  before the scenes stage has run, from the scenes its settings generate or import (with
  ``scenes.source=llm``, from the template pairs whose layouts the model will script: no model is
  called to project, and the texts' lengths are the templates');
* **each model's figure** (``model.<name>.estimate``, :class:`~harness.runtime.config.CostEstimate`):
  device-hours per hour of streamed audio, measured or estimated with its source, so a model's
  projected device-hours are ``audio hours x figure`` (the figure is in the budget's device-hours:
  wall time x ``num_gpus``, a CPU actor one device) and its dollars ``x budget.usd_per_gpu_hour``;
  a hosted model's API cost is its ``api_tokens_per_audio_s`` x the audio x the price table. A
  model without a figure is **unknown**, never 0;
* **the LLM calls the scenes imply**, priced with the price table (``budget.price_table``): the
  judge's at most one call per T answer and per silence window (N1-N3) of each model (a bound: a
  model that speaks in every window), the text reference's one call per turn and pass and its
  judge's at most one per T answer and pass; each prompt is the real one rendered with the scene's
  text (an assumed transcript of ``projected_answer_s`` of speech at 14 characters a second), its
  tokens counted as characters / :data:`CHARS_PER_TOKEN`, a reply as its label or answer (capped at
  the backend's ``max_output_tokens``; a backend without a cap adds ``budget.projected_thinking_tokens``);
  and, with ``scenes.source=llm`` before the scenes stage has run, the script writer's one call per
  pair (its real prompt on the template's layout, a reply the size of the template pair's JSON;
  a rejected script asks again, up to ``scenes.llm.max_attempts``, and cached replies cost nothing).

Everything here is a pure function of the config and what the store holds; nothing is written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.pricing import PriceTable, load_prices, metered_key
from harness.products.scenes import SceneSet
from harness.products.timeline import Timeline
from harness.protocol.scheduler import ProtocolSettings, Scheduler
from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.plan import RunPlan
from harness.scenes.schema import Label, Scene
from harness.scenes.settings import make_scenes, script_backend, template_scenes
from harness.scenes.stats import CHARS_PER_S
from harness.store.base import ObjectStore
from harness.vad.segments import SegmentRules, SpeechView

CHARS_PER_TOKEN = 4  # a rough count of an English prompt's tokens (stated wherever a count is shown)


def stream_seconds(turn_samples: Sequence[int], labels: Sequence[Label], preamble_samples: int,
                   protocol: ProtocolSettings, rules: SegmentRules, answer_s: float) -> float:
    """Seconds a model streams one conversation when it answers T at once for ``answer_s`` (clipped to
    the response cap; 0 or under the detector's ``min_speech``: it stays silent): the real
    :class:`~harness.protocol.scheduler.Scheduler`, told what a detector would see at its decision."""
    sched, t_end = _scheduler(turn_samples, labels, preamble_samples, protocol)
    min_speech, min_silence = rules.samples(protocol.sample_rate)
    cap = protocol.s(protocol.response_cap_s)
    answer = min(protocol.s(answer_s), cap)
    if answer >= max(1, min_speech):  # answered: decided at the endpoint, or at the cap
        segments = ((t_end, t_end + answer),)
        decided = min(t_end + answer + protocol.s(protocol.endpoint_silence_s), t_end + cap)
    else:  # silent: decided once the onset window has passed
        segments, decided = (), t_end + protocol.s(protocol.fresh_onset_window_s) + 1
    return _finish(sched, decided, SpeechView(decided, segments, None, None, min_speech, min_silence), protocol)


def longest_stream_seconds(turn_samples: Sequence[int], labels: Sequence[Label], preamble_samples: int,
                           protocol: ProtocolSettings, rules: SegmentRules) -> float:
    """The longest one conversation's stream can last, whatever the model says (seconds): the real
    :class:`~harness.protocol.scheduler.Scheduler` with the model silent at T's end and speaking
    without end from the last instant of the fresh-onset window, so the response runs to its cap
    (spec section 4: T end + ``fresh_onset_window_s`` + ``response_cap_s``, 65 s) and the later turns,
    the N4 answer windows and the tail follow as scripted. Speaking at T's end caps 5 s sooner and
    every other wait is fixed, so no stream of this script is longer at its rule times; the decision
    itself can come a little after its rule time (the runner advances the scheduler once per model
    step, the detector lags the output), a margin the caller adds (:func:`longest_stream_bound`)."""
    sched, t_end = _scheduler(turn_samples, labels, preamble_samples, protocol)
    min_speech, min_silence = rules.samples(protocol.sample_rate)
    onset = t_end + protocol.s(protocol.fresh_onset_window_s)
    cap = onset + protocol.s(protocol.response_cap_s)
    return _finish(sched, cap, SpeechView(cap, (), onset, cap, min_speech, min_silence), protocol)


def longest_stream_bound(streams: Iterable[tuple[Sequence[int], Sequence[Label]]], preamble_samples: int,
                         protocol: ProtocolSettings, rules: SegmentRules, step_s: float,
                         max_duration_s: float) -> float:
    """The longest of ``streams`` (each conversation's turn lengths in timeline samples and labels)
    can last (seconds; 0.0 for none): :func:`longest_stream_seconds` plus the decision's lag behind its
    rule time (two model steps of ``step_s`` seconds and :data:`DECISION_LAG_S`), and never more than
    ``max_duration_s`` (``infer.max_duration_s``: the runner fails a longer stream)."""
    longest = max((longest_stream_seconds(n, labels, preamble_samples, protocol, rules) for n, labels in streams),
                  default=None)
    return 0.0 if longest is None else min(longest + 2 * step_s + DECISION_LAG_S, max_duration_s)


DECISION_LAG_S = 1.0  # the detector's lag behind the output (a Silero window, the resamplers) with room to spare


def _scheduler(turn_samples: Sequence[int], labels: Sequence[Label], preamble_samples: int,
               protocol: ProtocolSettings) -> tuple[Scheduler, int]:
    """A conversation's scheduler and the sample where its T ends."""
    sched = Scheduler(turn_samples, labels, preamble_samples, protocol)
    t_index = next(i for i, label in enumerate(labels) if Label(label) is Label.T)
    return sched, sched.turn_placement(t_index).end


def _finish(sched: Scheduler, now: int, view: SpeechView, protocol: ProtocolSettings) -> float:
    """Seconds the stream of ``sched`` lasts once it is told ``view`` at ``now``."""
    sched.advance(now, view)
    if not sched.done:  # the scheduler asked for more than this view says: a changed rule, not a guess to hide
        raise RuntimeError(f"the scheduler did not finish a projected conversation (phase {sched.phase})")
    return sched.end / protocol.sample_rate


@dataclass(frozen=True)
class RunAudio:
    """The conversations a run streams and their audio, as projected.

    Attributes:
        scenes: the conversations that will stream (scenes with audio), in manifest order.
        seconds: audio each model streams over all of them (every model streams the same script).
        basis: where the lengths come from (the synth index, or the texts at 14 characters a second).
    """

    scenes: tuple[Scene, ...]
    seconds: float
    basis: str

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0


STORED_SCENES = "the scene manifest"  # run_scenes' ``where`` once the scenes stage has written them


def run_scenes(cfg: RunConfig, store: ObjectStore, plan: RunPlan) -> tuple[list[Scene], Timeline | None, str]:
    """The run's valid scenes, its synth index when synth has written it, and where the scenes come from.

    Raises:
        OSError: the scenes stage has not run and ``scenes.manifest`` cannot be read here.
    """
    try:
        scenes = list(SceneSet.read(store, plan.layout, plan.scenes).scenes)
        where = STORED_SCENES
    except FileNotFoundError:  # what the scenes stage will write, made here in memory
        if cfg.scenes.source == "llm":  # never a paid call to project: the layouts the model will script
            scenes = template_scenes(cfg.scenes)
            where = ("the template pairs whose layouts the LLM will script (scenes.source=llm; the scenes stage "
                     "has not run, no model was called to project: turn lengths are the templates')")
        else:
            scenes = make_scenes(cfg.scenes).scenes
            where = "the scenes the settings make (the scenes stage has not run)"
    try:
        timeline = Timeline.read(store, plan.layout, plan.synth)
    except FileNotFoundError:
        timeline = None
    return scenes, timeline, where


def run_audio(cfg: RunConfig, scenes: Sequence[Scene], timeline: Timeline | None, where: str) -> RunAudio:
    """The audio of ``scenes``: clip lengths from ``timeline`` (the synth index; its conversations
    without audio never stream), else the texts (and the preamble's) at :data:`CHARS_PER_S`."""
    p, answer_s = cfg.protocol, cfg.budget.projected_answer_s
    sr = p.sample_rate

    def spoken(text: str) -> int:
        return max(1, round(len(text) / CHARS_PER_S * sr))

    if timeline is not None:
        scenes = [s for s in scenes if s.scene_id in timeline.conversations]
        lengths = {s.scene_id: [t.n for t in timeline.conversations[s.scene_id]] for s in scenes}
        preamble = timeline.preamble.n
        basis = "clip lengths from the synth index"
    else:
        lengths = {s.scene_id: [spoken(t.text) for t in s.turns] for s in scenes}
        text = cfg.tts.preamble_text
        preamble = spoken(text) if text.strip() else 0
        basis = f"{where}, spoken at {CHARS_PER_S:.1f} characters/s (the paper's rate; synth measures the real one)"
    seconds = sum(stream_seconds(lengths[s.scene_id], [t.label for t in s.turns], preamble, p, cfg.detector.rules,
                                 answer_s) for s in scenes)
    return RunAudio(tuple(scenes), seconds, f"{basis}; each T answered for {answer_s:g} s, then the endpoint")


@dataclass(frozen=True)
class ModelCost:
    """One model's projected infer cost.

    Attributes:
        device_hours: None when the model has no figure (unknown, never 0).
        factor: device-hours per hour of streamed audio used (None: unknown).
        label: ``measured`` / ``estimated`` with the figure's source, or why it is unknown.
        metered: a hosted model whose API the budget's ``usd`` counts.
        api_usd: its projected API cost (None: unknown or unpriced, ``api_note`` says which).
    """

    model: str
    device_hours: float | None
    factor: float | None
    label: str
    metered: bool = False
    api_usd: float | None = None
    api_note: str = ""


def model_cost(m: ModelSettings, audio: RunAudio, table: PriceTable) -> ModelCost:
    """``m``'s projected device-hours (and API cost) for streaming ``audio``."""
    key = metered_key(m.target, m.params)
    est = m.estimate
    if est is None:
        return ModelCost(m.name, None, None, f"unknown: model.{m.name}.estimate is not set (docs/models.md, \"Cost\")",
                         key is not None, None, "unknown: no figure" if key else "")
    basis, note = est.basis, ""
    if est.batch_size is not None and est.batch_size != m.batch_size:
        basis, note = "estimated", f" (a figure for {est.batch_size} rows; this run steps {m.batch_size})"
    label = f"{basis}{note}: {est.source}"
    if key is None:
        return ModelCost(m.name, audio.hours * est.device_hours_per_audio_hour, est.device_hours_per_audio_hour, label)
    if not est.api_tokens_per_audio_s:
        api_usd, api_note = None, f"unknown: model.{m.name}.estimate.api_tokens_per_audio_s is not set"
    else:
        provider, model = key.split("/", 1)
        tokens = {k: round(rate * audio.seconds) for k, rate in est.api_tokens_per_audio_s.items()}
        cost = table.cost({"provider": provider, "model": model, "tokens": tokens})
        api_usd = cost.usd
        api_note = (f"unpriced: {cost.unpriced}" if cost.usd is None else
                    f"{sum(tokens.values()):,} tokens ({', '.join(f'{k} {n:,}' for k, n in tokens.items())}), "
                    f"{table.label}")
    return ModelCost(m.name, audio.hours * est.device_hours_per_audio_hour, est.device_hours_per_audio_hour, label,
                     True, api_usd, api_note)


@dataclass(frozen=True)
class CallCost:
    """The projected paid calls of an LLM stage.

    Attributes:
        stage: ``scenes (scripts)``, ``score (judge)``, ``reference`` or ``reference (judge)``.
        who: ``provider/model``.
        calls, tokens_in, tokens_out: counts (tokens: characters / :data:`CHARS_PER_TOKEN`).
        usd: None when the price table does not price ``who`` (``note`` says why).
        note: what the count is (e.g. an upper bound) and the table.
    """

    stage: str
    who: str
    calls: int
    tokens_in: int
    tokens_out: int
    usd: float | None
    note: str


def tokens(text: str) -> int:
    """A rough token count of ``text``: characters / :data:`CHARS_PER_TOKEN`, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _reply_tokens(backend: Any, reply: str, thinking: int) -> int:
    """Tokens of ``reply`` billed as output: capped at the backend's ``max_output_tokens``; a backend
    without a cap also thinks (its ``thinking_budget`` when set, else ``thinking``)."""
    cap = getattr(backend, "max_output_tokens", None)
    if cap is not None:
        return min(tokens(reply), cap)
    budget = getattr(backend, "thinking_budget", None)
    return tokens(reply) + (thinking if budget is None else int(budget))


def _priced(stage: str, backend: Any, prompts: Iterable[tuple[str, str]], times: int, table: PriceTable,
            thinking: int, note: str) -> CallCost:
    """The cost of sending every ``(prompt, expected reply)`` of ``prompts`` ``times`` times."""
    calls = tin = tout = 0
    for prompt, reply in prompts:
        calls += times
        tin += times * tokens(prompt)
        tout += times * _reply_tokens(backend, reply, thinking)
    who = f"{backend.provider}/{backend.model}"
    cost = table.cost({"provider": backend.provider, "model": backend.model,
                       "tokens": {"input_text": tin, "output_text": tout}})
    return CallCost(stage, who, calls, tin, tout, cost.usd,
                    note if cost.usd is not None else f"{note}; unpriced: {cost.unpriced}")


def script_costs(cfg: RunConfig, table: PriceTable) -> list[CallCost]:
    """The projected calls of the script writer (``scenes.source=llm``; none otherwise): one per
    template pair, its real prompt, a reply the size of the template pair written as the JSON the
    prompt asks for. Builds the backend and renders the prompts; calls nothing.

    Raises:
        ValueError: a backend the settings cannot build (e.g. an unpriced model; the preflight names it).
        OSError: the prompt file cannot be read.
    """
    import json

    from harness.scenes.llm import LLMScriptWriter

    s = cfg.scenes
    if s.source != "llm":
        return []
    backend = script_backend(s.llm)
    writer = LLMScriptWriter(backend, None, s.llm.budget_usd, s.llm.max_attempts, s.llm.prompts_dir, s.llm.prompt)
    pairs = template_scenes(s)

    def reply(e: Scene, i: Scene) -> str:
        turns = [{"text": turn.text} for turn in e.turns]
        turns[e.t_index]["implicit_text"] = i.turns[i.t_index].text
        return json.dumps({"gold_answer": e.gold_answer, "turns": turns})

    calls = [(writer.prompt_text(e, i), reply(e, i)) for e, i in zip(pairs[::2], pairs[1::2], strict=True)]
    note = (f"one call per pair, at most {s.llm.max_attempts} when scripts are rejected; none for replies already "
            f"cached; scenes.llm.budget_usd={s.llm.budget_usd} stops the calls")
    return [_priced("scenes (scripts)", backend, calls, 1, table, cfg.budget.projected_thinking_tokens, note)]


def llm_costs(cfg: RunConfig, scenes: Sequence[Scene], table: PriceTable) -> list[CallCost]:
    """The projected calls of the LLM judge (per model) and of an LLM text reference over ``scenes``;
    none for the offline ``lexical`` judge and ``rule`` reference (they call no API).

    Raises:
        ValueError, TypeError: a judge or reference that cannot be built from its params (the
            preflight reports it first).
    """
    from harness.reference import build_reference, turn_inputs
    from harness.scoring.flow import CONTEXT_TURNS
    from harness.scoring.judge import ANSWER_LABELS, WINDOW_LABELS, ContextTurn, build_judge

    b = cfg.budget
    transcript = "x" * round(b.projected_answer_s * CHARS_PER_S)  # what an assumed answer transcribes to
    judge = build_judge(cfg.judge.kind, **cfg.judge.params)
    llm_judge = cfg.judge.kind != "lexical"  # the offline judge calls no API
    answer_reply, window_reply = max(ANSWER_LABELS, key=len), max(WINDOW_LABELS, key=len)

    def answers() -> list[tuple[str, str]]:
        return [(judge.answer_prompt_text(transcript, s.gold_answer, s.turns[s.t_index].text), answer_reply)
                for s in scenes]

    out = []
    if llm_judge:
        windows = [(judge.window_prompt_text(transcript, [ContextTurn(t.speaker, t.text)
                                                          for t in s.turns[max(0, i - CONTEXT_TURNS + 1): i + 1]],
                                             b.projected_answer_s, 0.0), window_reply)
                   for s in scenes for i, turn in enumerate(s.turns) if turn.label.is_silence]
        out.append(_priced("score (judge)", judge, answers() + windows, len(cfg.models), table,
                           b.projected_thinking_tokens,
                           f"at most: every T answer and every silence window of {len(cfg.models)} model(s), "
                           f"one call each"))
    if cfg.reference.kind != "rule":
        reference = build_reference(cfg.reference.kind, **cfg.reference.params)
        duty = cfg.tts.preamble_text
        said = "RESPOND\n" + transcript
        turns = [(reference.prompt_text(turn), said if s.turns[i].label in (Label.T, Label.N4_Q) else "SILENT")
                 for s in scenes for i, turn in enumerate(turn_inputs(s, duty))]
        out.append(_priced("reference", reference.backend, turns, cfg.reference.runs, table,
                           b.projected_thinking_tokens,
                           f"every turn in each of {cfg.reference.runs} passes (RESPOND with an answer on T and "
                           "N4_Q, SILENT elsewhere)"))
        if llm_judge and reference.writes_answers:
            out.append(_priced("reference (judge)", judge, answers(), cfg.reference.runs, table,
                               b.projected_thinking_tokens, f"at most: every T answer of {cfg.reference.runs} passes"))
    return out


@dataclass(frozen=True)
class Projection:
    """A run's projected cost (:func:`project`); ``audio`` None when it cannot be projected (``problem``)."""

    audio: RunAudio | None
    models: tuple[ModelCost, ...] = ()
    calls: tuple[CallCost, ...] = ()
    problem: str = ""
    usd_per_gpu_hour: float = 0.0
    prices: str = ""

    @property
    def unknown(self) -> list[str]:
        """Models without a device-hours figure."""
        return [c.model for c in self.models if c.device_hours is None]

    @property
    def device_hours(self) -> float:
        """Projected device-hours of the models with a figure (a lower bound when :attr:`unknown`)."""
        return sum(c.device_hours for c in self.models if c.device_hours is not None)

    @property
    def api_unknown(self) -> list[str]:
        """Hosted models, and LLM stages, whose API cost is unknown or unpriced."""
        return ([c.model for c in self.models if c.metered and c.api_usd is None]
                + [f"{c.stage} {c.who}" for c in self.calls if c.usd is None])

    @property
    def infer_usd(self) -> float:
        """What ``budget.usd`` counts: device-hours at ``usd_per_gpu_hour`` and the hosted models' API."""
        return self.device_hours * self.usd_per_gpu_hour + sum(c.api_usd or 0.0 for c in self.models)

    @property
    def calls_usd(self) -> float:
        """The LLM judge's and the text reference's priced calls (no budget counts them)."""
        return sum(c.usd or 0.0 for c in self.calls)

    def over_budget(self, gpu_hours: float | None, usd: float | None) -> list[str]:
        """Why the projection passes a limit of the budget (empty: it does not, as far as it is known)."""
        if self.audio is None:
            return []
        out = []
        if gpu_hours is not None and self.device_hours > gpu_hours:
            out.append(f"budget.gpu_hours {gpu_hours:g}: the run is projected at{' least' * bool(self.unknown)} "
                       f"{self.device_hours:.4g} device-h")
        partial = self.unknown or any(c.metered and c.api_usd is None for c in self.models)
        if usd is not None and self.infer_usd > usd:
            out.append(f"budget.usd {usd:g}: infer (device-hours and hosted APIs) is projected at"
                       f"{' least' * bool(partial)} ${self.infer_usd:,.2f}")
        return out


def project(cfg: RunConfig, store: ObjectStore) -> Projection:
    """The projected cost of ``cfg``'s whole run (what the store holds refines the audio: the scene
    manifest, the synth index). Never raises for a scene manifest it cannot read (``problem``)."""
    plan = RunPlan.from_config(cfg)
    table = load_prices(cfg.budget.price_table)
    try:
        scenes, timeline, where = run_scenes(cfg, store, plan)
    except OSError as e:
        return Projection(None, problem=f"the scenes cannot be read here ({type(e).__name__}: {e})",
                          usd_per_gpu_hour=cfg.budget.usd_per_gpu_hour, prices=table.label)
    audio = run_audio(cfg, scenes, timeline, where)
    calls = []
    if where != STORED_SCENES:  # the scenes stage has not run: its script calls, if any, are to come
        try:
            calls += script_costs(cfg, table)
        except (ValueError, OSError) as e:
            calls.append(CallCost("scenes (scripts)", f"scenes.llm.backend={cfg.scenes.llm.backend}", 0, 0, 0, None,
                                  f"cannot be projected: {e}"))
    try:
        calls += llm_costs(cfg, audio.scenes, table)
    except (ValueError, TypeError) as e:  # a judge or reference its params cannot build (the preflight names it)
        calls.append(CallCost("score and reference", f"judge={cfg.judge.kind} reference={cfg.reference.kind}", 0, 0,
                              0, None, f"cannot be projected: {e}"))
    return Projection(audio, tuple(model_cost(m, audio, table) for m in cfg.models), tuple(calls),
                      usd_per_gpu_hour=cfg.budget.usd_per_gpu_hour, prices=table.label)


def measured_factor(markers: Mapping[str, Mapping[str, Any]]) -> float | None:
    """Device-hours per hour of streamed audio over completed shard markers (None: no audio yet)."""
    audio_s = sum(mk.get("audio_s", 0.0) for mk in markers.values())
    return sum(mk.get("device_hours", 0.0) for mk in markers.values()) / (audio_s / 3600) if audio_s > 0 else None


def _usd(hours: float, price: float) -> str:
    return f" (${hours * price:,.2f})" if price else ""


def projection_lines(p: Projection, gpu_hours: float | None = None, usd: float | None = None,
                     measured: Mapping[str, float | None] | None = None) -> list[str]:
    """``make status`` / the job's start: the projection, one line per model and LLM stage, its total and,
    when it passes ``gpu_hours`` / ``usd`` (the budget's), a line saying so. ``measured``: ``{model:
    device-hours per audio hour}`` of its completed shards, shown beside its figure."""
    if p.audio is None:
        return [f"  projected unknown: {p.problem}"]
    a, price = p.audio, p.usd_per_gpu_hour
    lines = [f"  projected audio     {len(a.scenes)} conversations, {a.hours:.3f} h streamed per model ({a.basis})"]
    for c in p.models:
        if c.device_hours is None:
            text = c.label
        else:
            text = f"{c.device_hours:.4g} device-h{_usd(c.device_hours, price)} at {c.factor:.4g} device-h per audio-h"
            rate = (measured or {}).get(c.model)
            if rate is not None:
                text += f"; measured so far {rate:.4g} device-h per audio-h"
            text += f" ({c.label})"
        if c.metered:
            text += f"; API {'$' + format(c.api_usd, ',.2f') if c.api_usd is not None else c.api_note}" + (
                f" ({c.api_note})" if c.api_usd is not None else "")
        lines.append(f"  projected {c.model:10} {text}")
    lines += [f"  projected {c.stage} {c.who}: {c.calls:,} calls, ~{c.tokens_in:,} tokens in / {c.tokens_out:,} out "
              f"(characters/{CHARS_PER_TOKEN}): " + (f"${c.usd:,.2f}" if c.usd is not None else "unpriced")
              + f"; {c.note} ({p.prices})" for c in p.calls]
    total = f"  projected total     {p.device_hours:.4g} device-h{_usd(p.device_hours, price)}"
    if p.unknown:
        total += f" and {len(p.unknown)} model(s) unknown ({', '.join(p.unknown)})"
    api = sum(c.api_usd or 0.0 for c in p.models) + p.calls_usd
    if api or p.api_unknown:
        total += f"; API ${api:,.2f}" + (f" and unknown ({', '.join(p.api_unknown)})" if p.api_unknown else "")
    if price or api:
        total += f"; ${p.device_hours * price + api:,.2f} in all"
    lines.append(total)
    lines += [f"  OVER BUDGET {why}: the budget stops infer when it is reached (completed shards are kept); "
              "raise it or expect a stop" for why in p.over_budget(gpu_hours, usd)]
    return lines
