"""LLM script generation: the same corpus accounting as the template generator, texts written by a
language model through the official SDKs (issue 10, section 3).

The template generator (:func:`harness.scenes.generator.generate_pairs`) decides every pair's
*layout* (speakers and their names, attributes, turn labels and targets, T position, N4 events,
which pairs may rewrite the turn before T), so the paper's accounting is exact whatever the model
writes. :class:`LLMScriptWriter` sends each layout to the model with ``prompts/scene_script_v2.txt``
(:data:`PROMPT`: the implicit request recognised from the conversation, not from a role noun or a
form only T has; ``scene_script_v1.txt``, which taught role nouns, stays for reproducibility) and
builds the pair from the JSON reply:

* **Backend**: an LLM judge backend (:mod:`harness.scoring.judge.llm`: ``anthropic`` or
  ``gemini``), reused for its ``complete(prompt)``: one SDK path, the key read from the environment
  by the SDK, the same price table.
* **Cache**: every reply in a :class:`~harness.scoring.cache.ContentCache` keyed by backend, model,
  settings, prompt version, layout and attempt number: a rerun costs nothing, and a regenerated
  script (attempt 2, 3) is a new key, not the cached rejected one.
* **Cost**: counted per call (:attr:`LLMScriptWriter.cost`; hits cost nothing, :attr:`saved` keeps
  what they cost originally) and **budgeted**: no call starts once ``budget_usd`` is spent; the
  pairs left are reported as ``budget``.
* **Validation**: every script passes the same rules as generated and imported scenes
  (``Scene.validate`` and ``validate_pair(strict=True)``) plus the layout (labels, speakers, turn
  count), the labels' mentions (an N1 turn refers to Aria, by name or role; an N2 or N3 turn says
  neither "Aria" nor "assistant") and the support rule (the gold answer is said before T, not in
  it). A rejected script is regenerated up to ``max_attempts`` times, then reported in
  :attr:`ScriptResult.rejected`; it is never kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.scenes.generator import PAPER_SPEECH_S, generate_pairs
from harness.scenes.schema import (
    CONDITIONS,
    Label,
    Scene,
    SceneError,
    Target,
    Turn,
    extra_event,
    names_assistant_or_designates,
    validate_pair,
)
from harness.scenes.stats import CHARS_PER_S
from harness.scoring.cache import ContentCache
from harness.scoring.judge import Cost
from harness.scoring.judge.llm import load_prompt, prompt_path

# v2 (issue 22): contextual cues (a job given to Aria, who holds the fact, a capability only the device
# has, the people not knowing, a relay), role nouns only now and then, no form reserved for T; v1 (role
# nouns as the cue) stays for reproducing corpora written with it (scenes.llm.prompt=scene_script_v1.txt)
PROMPT = "scene_script_v2.txt"
FIELDS = frozenset({"attributes", "layout", "names", "rewrite", "chars"})
REWRITE_NOTE = ("- The turn marked \"rewrite\" comes right before T and is the relay that carries the cue in the "
                "implicit version: its \"text\" sends the asker on to Aria, naming Aria (\"ask Aria, it heard all "
                "of that\"); its \"implicit_text\" says the same without the name, calling the device what people "
                "here would call it (the speaker, the tablet, the car, the assistant); the implicit T itself may "
                "then be just the question.")
ONLY_NOTE = ("- The two turns marked \"only\" (a question to Aria and its retraction) are said in that version "
             "only: write them so that the conversation also reads well without them.")
RELABEL_NOTE = ("- A rewrite turn that also has an \"implicit_label\" is a different kind of turn in the implicit "
                "version: its \"implicit_text\" instead says the speaker does not know (N2, to the same "
                "person), without referring to Aria or any device, so that the implicit T is not preceded by "
                "a relay.")
_WORD = re.compile(r"[a-z']+")
_MENTION = re.compile(r"\b(Aria|assistant)\b", re.IGNORECASE)  # what an N2 or N3 turn may not say


class BudgetSpent(RuntimeError):
    """The script budget is spent: no further call is made."""


@dataclass
class ScriptResult:
    """What :meth:`LLMScriptWriter.write_corpus` produced: valid scenes (pair by pair) and, per
    pair id, why it has none (``rejected``: the last validation error after every attempt, or
    ``"budget"``)."""

    scenes: list[Scene] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)


def layout_of(explicit: Scene, implicit: Scene) -> list[dict[str, Any]]:
    """The layout the model fills: per turn its speaker, label, target, ``rewrite`` for the turn
    before T when this pair's implicit version rewrites it, and ``only`` (a condition) for the two
    turns of an N4 event that one version lacks (the paper's N4 edits with unequal turn counts), and
    ``implicit_label`` where the implicit version's turn has another label (a relay rewritten as an
    "I don't know", N1 -> N2: the paper's implicit N1/N2 counts)."""
    extra = extra_event(explicit, implicit)  # the layout follows the version that has every turn
    base = implicit if extra and extra[0] == implicit.condition else explicit
    t = explicit.t_index
    rows = []
    for i, a in enumerate(base.turns):
        row = {"turn": i, "speaker": a.speaker, "label": a.label.value, "target": a.target.value}
        if i == t - 1 and explicit.turns[i] != implicit.turns[i]:
            row["rewrite"] = True
            if implicit.turns[i].label is not explicit.turns[i].label:
                row["implicit_label"] = implicit.turns[i].label.value
        if extra and extra[1] <= i <= extra[1] + 1:
            row["only"] = extra[0]
        rows.append(row)
    return rows


class LLMScriptWriter:
    """Writes scene scripts with an LLM backend (see the module docstring).

    Args:
        backend: an object with ``complete(prompt) -> (text, Cost)``, ``name``, ``model`` and
            ``settings`` (an LLM judge of :mod:`harness.scoring.judge.llm`; tests pass one built
            on a fake SDK client).
        cache: where replies are kept (``None``: no cache).
        budget_usd: no call starts once this many US dollars are spent (``None``: no limit).
        max_attempts: scripts asked for per pair before it is reported as rejected.
        prompts_dir, prompt: the prompt file (default :data:`PROMPT` in the repository's ``prompts/``).

    Raises:
        ValueError: ``max_attempts`` < 1, ``budget_usd`` < 0, or a prompt file whose placeholders are
            not :data:`FIELDS`; ``OSError``: the prompt file cannot be read.
    """

    def __init__(self, backend: Any, cache: ContentCache | None = None, budget_usd: float | None = None,
                 max_attempts: int = 3, prompts_dir: str | Path | None = None, prompt: str = PROMPT):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if budget_usd is not None and budget_usd < 0:
            raise ValueError(f"budget_usd must be >= 0, got {budget_usd}")
        self.backend, self.cache, self.budget_usd, self.max_attempts = backend, cache, budget_usd, max_attempts
        self.prompt = load_prompt(prompt_path(prompts_dir or None, prompt), FIELDS)
        self.cost = Cost(0, 0, 0.0)
        self.saved = Cost(0, 0, 0.0)
        self.calls = 0

    # -- one pair ------------------------------------------------------------------------------
    def prompt_text(self, explicit: Scene, implicit: Scene) -> str:
        layout = layout_of(explicit, implicit)
        chars = round(PAPER_SPEECH_S * CHARS_PER_S / 13.09)
        return self.prompt.render(
            attributes=json.dumps({k: v for k, v in explicit.attributes.items() if k != "implicit_cue"}, indent=1),
            layout="\n".join(json.dumps(r) for r in layout),
            names=", ".join(f"{s} = {n}" for s, n in explicit.speaker_names.items()),
            rewrite="\n".join(note for note, key in ((REWRITE_NOTE, "rewrite"), (ONLY_NOTE, "only"),
                                                      (RELABEL_NOTE, "implicit_label"))
                              if any(r.get(key) for r in layout)),
            chars=chars)

    def _reply(self, prompt: str, key: dict[str, Any]) -> str:
        def call() -> dict[str, Any]:
            if self.budget_usd is not None and self.cost.usd >= self.budget_usd:
                raise BudgetSpent(f"script budget ${self.budget_usd:.2f} spent (${self.cost.usd:.4f})")
            text, cost = self.backend.complete(prompt)
            self.calls += 1
            self.cost = self.cost + cost
            return {"text": text, "cost": cost.to_dict()}

        if self.cache is None:
            return call()["text"]
        hits = self.cache.hits
        value = self.cache.get_or_compute(key, call)
        if self.cache.hits > hits:
            self.saved = self.saved + Cost.from_dict(value["cost"])
        return value["text"]

    def write_pair(self, explicit: Scene, implicit: Scene) -> tuple[tuple[Scene, Scene] | None, str, int]:
        """Script one pair on the layout of the template pair ``(explicit, implicit)``. Returns
        ``(pair or None, last error, attempts)``; raises :class:`BudgetSpent` when no call may start."""
        prompt = self.prompt_text(explicit, implicit)
        error = ""
        for attempt in range(1, self.max_attempts + 1):
            key = {"backend": self.backend.name, "model": self.backend.model,
                   "settings": getattr(self.backend, "settings", {}), "prompt": self.prompt.version,
                   "layout": layout_of(explicit, implicit), "attributes": explicit.attributes,
                   "names": explicit.speaker_names, "attempt": attempt}
            reply = self._reply(prompt, key)
            try:
                return build_pair(reply, explicit, implicit), "", attempt
            except (SceneError, ValueError) as e:
                error = str(e)
        return None, error, self.max_attempts

    def write_corpus(self, n_pairs: int, seed: int, four_party_share: float = 0.25, n4_share: float = 0.484,
                     profile: str = "paper") -> ScriptResult:
        """Script ``n_pairs`` pairs on the layouts of ``generate_pairs(...)`` (same arguments)."""
        return self.write_pairs(generate_pairs(n_pairs, seed, four_party_share, n4_share, profile))

    def write_pairs(self, templates: list[Scene]) -> ScriptResult:
        """Script every template pair of ``templates`` (explicit, implicit, explicit, ... as
        :func:`~harness.scenes.generator.generate_pairs` returns them), in order. API errors (after
        the SDK's retries) propagate and are never cached: a rerun resumes from the cache."""
        out = ScriptResult()
        for explicit, implicit in zip(templates[::2], templates[1::2], strict=True):
            pid = explicit.pair_id
            try:
                pair, error, attempts = self.write_pair(explicit, implicit)
            except BudgetSpent:
                out.rejected[pid] = "budget"
                continue
            out.attempts[pid] = attempts
            if pair is None:
                out.rejected[pid] = error
            else:
                out.scenes += pair
        return out


def _json_object(text: str) -> dict[str, Any]:
    """The reply's JSON object (a ```json fence or surrounding prose is tolerated)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("reply holds no JSON object")
    try:
        d = json.loads(text[start:end + 1])
    except json.JSONDecodeError as e:
        raise ValueError(f"reply is not valid JSON: {e.msg}") from None
    if not isinstance(d, dict):
        raise ValueError("reply is not a JSON object")
    return d


def build_pair(reply: str, explicit: Scene, implicit: Scene) -> tuple[Scene, Scene]:
    """The scripted pair from a model reply on the template pair's layout; raises
    :class:`SceneError` / ``ValueError`` naming the broken rule (the script is then rejected)."""
    d = _json_object(reply)
    sid = explicit.pair_id
    gold, rows = d.get("gold_answer"), d.get("turns")
    if not isinstance(gold, str) or not gold.strip():
        raise SceneError(sid, None, "gold_answer", "reply has no gold_answer")
    layout = layout_of(explicit, implicit)
    if not isinstance(rows, list) or len(rows) != len(layout):
        raise SceneError(sid, None, "layout", f"reply has {len(rows) if isinstance(rows, list) else 0} turns, "
                                              f"the layout {len(layout)}")
    t = explicit.t_index
    e_turns, i_turns = [], []
    for i, (row, slot) in enumerate(zip(rows, layout, strict=True)):
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise SceneError(sid, i, "layout", "turn without a text")
        label = Label(slot["label"])
        answer = row.get("answer") if label is Label.N4_Q else None
        if label is Label.N4_Q and not (isinstance(answer, str) and answer.strip()):
            raise SceneError(sid, i, "n4_answer", "N4_Q turn without an answer")
        turn = Turn(slot["speaker"], row["text"].strip(), label, Target(slot["target"]), answer)
        alt = row.get("implicit_text")
        may_differ = i == t or slot.get("rewrite")
        if i == t and not (isinstance(alt, str) and alt.strip()):
            raise SceneError(sid, i, "layout", "T turn without an implicit_text")
        if alt is not None and not may_differ and alt.strip() != turn.text:
            raise SceneError(sid, i, "layout", "only T (and a turn marked rewrite) may differ between versions")
        only = slot.get("only")
        if only != implicit.condition:
            e_turns.append(turn)
        if only != explicit.condition:
            i_label = Label(slot.get("implicit_label", label))
            i_turns.append(Turn(turn.speaker, alt.strip(), i_label, turn.target, answer)
                           if may_differ and isinstance(alt, str) and alt.strip() else turn)
    pair = tuple(
        Scene(f"{sid}-{cond}", sid, cond, explicit.speakers, tuple(ts), gold.strip(), dict(explicit.attributes),
              explicit.t_position, speaker_names=dict(explicit.speaker_names))
        for cond, ts in zip(CONDITIONS, (e_turns, i_turns), strict=True))
    for s in pair:
        s.validate()
        for i, turn in enumerate(s.turns):
            if turn.label is Label.N1 and not names_assistant_or_designates(turn.text):
                raise SceneError(s.scene_id, i, "label", "a N1 turn that does not mention Aria")
            if turn.label in (Label.N2, Label.N3) and _MENTION.search(turn.text):
                raise SceneError(s.scene_id, i, "label",
                                 f"a {turn.label.value} turn refers to the assistant (that is N1)")
        gold_words = set(_WORD.findall(gold.lower()))
        if not any(gold_words <= set(_WORD.findall(x.text.lower())) for x in s.turns[:t]):
            raise SceneError(s.scene_id, None, "support", "no turn before T states the gold answer")
        if gold_words <= set(_WORD.findall(s.turns[t].text.lower())):
            raise SceneError(s.scene_id, t, "support", "T contains the gold answer")
    validate_pair(*pair, strict=True)
    return pair
