"""The text-conditioned reference of Duplex-MPE (spec section 7).

A reference reads a scene's script turn by turn, as text with speaker ids, and after every
human turn decides ``RESPOND`` or ``SILENT``; on ``RESPOND`` an LLM reference also writes what
it would say (scored against the gold answer on T). It is not an acoustic system and not an
upper bound: it shows whether the explicit/implicit intervention changes decisions when the
words and speakers are known.

What a reference sees for turn ``i`` (:func:`turn_inputs`, a :class:`TurnInput`): the duty
instruction (the text of the spoken preamble, ``tts.preamble_text``, by default
:data:`harness.audio.preamble.DUTY_TEXT`), the speaker-attributed script turns ``0 .. i-1``
(never turn ``i`` itself in the history, never a later turn, never an earlier reference
answer) and the current utterance ``i`` with its speaker.

Backends, built by :func:`build_reference`:

* ``"rule"``: :class:`~harness.reference.rule.RuleReference`, the offline default, a
  **rule-based stand-in, not an LLM**: ``RESPOND`` when the name "Aria" is spoken in the
  current utterance; it writes no answer, so its conditional answer accuracy is "not scored";
* ``"anthropic"`` / ``"gemini"``: :class:`~harness.reference.llm.LLMReference` through the
  judge's SDK backends (:class:`harness.scoring.judge.llm.AnthropicJudge` /
  :class:`~harness.scoring.judge.llm.GeminiJudge`: one SDK path, keys from the environment
  only, one price table), the versioned prompt ``prompts/reference_v1.txt`` and the
  content-hash cache of :mod:`harness.scoring.cache`, keyed with the pass index so two passes
  are independent; a reply that does not start with a decision is ``UNPARSEABLE`` (recorded as
  such: it is neither a response nor silence).

Scoring, agreement between passes and the stage's ``reference.json``: :mod:`harness.reference.evaluate`.
Details and decisions: ``docs/reference.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.scenes.schema import Scene
from harness.scoring.judge import UNPARSEABLE, ContextTurn, Cost
from harness.store.base import ObjectStore

RESPOND = "RESPOND"
SILENT = "SILENT"
DECISIONS: tuple[str, ...] = (RESPOND, SILENT)
KINDS: tuple[str, ...] = ("rule", "anthropic", "gemini")


@dataclass(frozen=True)
class TurnInput:
    """Everything a reference may see when it decides on one turn.

    Attributes:
        duty: the duty instruction (the spoken preamble's text).
        history: the script turns before the current one, oldest first, as (speaker id, text).
        current: the turn just spoken, as (speaker id, text).
    """

    duty: str
    history: tuple[ContextTurn, ...]
    current: ContextTurn

    def key(self) -> dict[str, Any]:
        """The input as it enters cache keys (JSON-able)."""
        return {"duty": self.duty, "history": [[t.speaker, t.text] for t in self.history],
                "speaker": self.current.speaker, "utterance": self.current.text}


def turn_inputs(scene: Scene, duty: str) -> list[TurnInput]:
    """One :class:`TurnInput` per turn of ``scene``, in script order: turn ``i`` gets the
    turns ``0 .. i-1`` as history and turn ``i`` as the current utterance.

    Raises:
        ValueError: an empty ``duty``.
    """
    if not (duty or "").strip():
        raise ValueError("the text reference needs the duty instruction (tts.preamble_text is empty)")
    turns = tuple(ContextTurn(t.speaker, t.text) for t in scene.turns)
    return [TurnInput(duty, turns[:i], turns[i]) for i in range(len(turns))]


@dataclass(frozen=True)
class Decision:
    """One reference decision.

    Attributes:
        decision: ``RESPOND``, ``SILENT`` or ``UNPARSEABLE`` (the output named no decision; it
            counts neither as a response nor as silence).
        answer: what the reference would say on ``RESPOND`` (LLM backends; ``None`` otherwise).
        raw: the backend's output verbatim (the rule backend writes its rule).
        cost: tokens and USD of this call (zero for the rule backend and for cache hits).
    """

    decision: str
    answer: str | None
    raw: str
    cost: Cost = field(default_factory=Cost)

    def __post_init__(self) -> None:
        if self.decision not in (*DECISIONS, UNPARSEABLE):
            raise ValueError(f"decision must be RESPOND, SILENT or UNPARSEABLE, got {self.decision!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "answer": self.answer, "raw": self.raw, "cost": self.cost.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        return cls(str(d["decision"]), d.get("answer"), str(d.get("raw", "")), Cost.from_dict(d.get("cost", {})))


@runtime_checkable
class Reference(Protocol):
    """A reference backend.

    Attributes:
        name: backend kind (``"rule"``, ``"anthropic"``, ``"gemini"``).
        model: model id (the rule-set id for ``rule``).
        prompt_version: ``<prompt file stem>@<10 hex of its SHA-256>`` (the rule-set id for ``rule``).
        description: how the report labels it (the rule backend says it is a rule-based stand-in).
        writes_answers: whether ``RESPOND`` comes with an answer (conditional accuracy is scored).
    """

    name: str
    model: str
    prompt_version: str
    description: str
    writes_answers: bool

    def decide(self, turn: TurnInput, run: int) -> Decision:
        """The decision on ``turn`` in pass ``run`` (1, 2, ...; passes are independent)."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters as JSON, shaped like :meth:`harness.scoring.cache.CachedJudge.stats`."""
        ...


def build_reference(kind: str, store: ObjectStore | None = None, cache_prefix: str | None = None,
                    **params: Any) -> Reference:
    """Build the reference backend ``kind`` (one of :data:`KINDS`).

    ``store`` and ``cache_prefix`` give LLM backends their content cache (both or neither; the
    rule backend needs none). ``params`` go to the backend: none for ``rule``; for the LLM
    backends see :class:`~harness.reference.llm.LLMReference`.

    Raises:
        ValueError: unknown ``kind`` or a bad parameter.
    """
    if kind == "rule":
        from harness.reference.rule import RuleReference

        if params:
            raise ValueError(f"the rule reference takes no parameters, got {sorted(params)}")
        return RuleReference()
    if kind in ("anthropic", "gemini"):
        from harness.reference.llm import LLMReference

        return LLMReference(kind, store=store, cache_prefix=cache_prefix, **params)
    raise ValueError(f"unknown reference kind {kind!r}; expected one of {', '.join(KINDS)}")


__all__ = [
    "DECISIONS",
    "KINDS",
    "RESPOND",
    "SILENT",
    "UNPARSEABLE",
    "Decision",
    "Reference",
    "TurnInput",
    "build_reference",
    "turn_inputs",
]
