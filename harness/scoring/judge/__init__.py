"""The judge of the scoring stage (spec section 5): two text tasks, three backends.

Tasks:

* **answer correctness** (:meth:`Judge.judge_answer`): the ASR transcript of a T response
  against the scene's gold answer, ignoring fillers, politeness and ASR noise. Labels
  ``CORRECT`` / ``INCORRECT``; output that names no label, or both, is ``UNPARSEABLE`` and
  scored as incorrect.
* **window classification** (:meth:`Judge.classify_window`): model speech in an N1/N2/N3
  silence window, given the transcript, up to three preceding human turns, the model's total
  speech duration in the window and its overlap with human speech. Labels ``BACKCHANNEL``
  (exempt: the window passes) / ``SUBSTANTIVE_INTRUSION``; ``UNPARSEABLE`` fails the window,
  like an intrusion. Duration alone decides nothing.

Two verdicts are not judgements (spec section 5: both fail): ``UNPARSEABLE``, the judge answered
without a single label (a refusal, a reply cut off, prose), which the cache never serves again
(:class:`harness.scoring.cache.CachedJudge`: the next lookup asks the judge again); and
``EMPTY_TRANSCRIPT``, speech whose transcript holds no word, which no backend is asked about.

Backends, built by :func:`build_judge` (SDKs are imported only when a client is needed):

* ``"lexical"``: :class:`~harness.scoring.judge.lexical.LexicalJudge`, a deterministic,
  offline rule-based **stand-in** (never an LLM judgement; its ``name`` is ``"lexical"``);
* ``"anthropic"``: :class:`~harness.scoring.judge.llm.AnthropicJudge` (official ``anthropic`` SDK);
* ``"gemini"``: :class:`~harness.scoring.judge.llm.GeminiJudge` (official ``google-genai`` SDK).

Every verdict carries the backend's raw output (for audit) and its :class:`Cost`. Wrap any
judge in :class:`harness.scoring.cache.CachedJudge` so a repeated call costs nothing.
``docs/judge.md`` has the rules, prompts, versioning and cost accounting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

CORRECT = "CORRECT"
INCORRECT = "INCORRECT"
BACKCHANNEL = "BACKCHANNEL"
SUBSTANTIVE_INTRUSION = "SUBSTANTIVE_INTRUSION"
UNPARSEABLE = "UNPARSEABLE"
EMPTY_TRANSCRIPT = "EMPTY_TRANSCRIPT"

ANSWER_LABELS: tuple[str, ...] = (CORRECT, INCORRECT)
WINDOW_LABELS: tuple[str, ...] = (BACKCHANNEL, SUBSTANTIVE_INTRUSION)
KINDS: tuple[str, ...] = ("lexical", "anthropic", "gemini")
TASKS: tuple[str, ...] = ("answer", "window")

# Raw text recorded when a judge returns a verdict without looking (nothing was said).
EMPTY_TRANSCRIPT_RAW = "<empty transcript: not judged>"


@dataclass(frozen=True)
class Cost:
    """What one judge call cost: tokens from the backend's usage fields and US dollars from the
    price table of :mod:`harness.scoring.judge.llm` (all zero for offline backends and cache hits)."""

    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                    self.usd + other.usd)

    def to_dict(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "usd": self.usd}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cost:
        return cls(int(d.get("input_tokens", 0)), int(d.get("output_tokens", 0)), float(d.get("usd", 0.0)))


@dataclass(frozen=True)
class Verdict:
    """One judgement.

    Attributes:
        label: ``CORRECT``/``INCORRECT`` (answers), ``BACKCHANNEL``/``SUBSTANTIVE_INTRUSION``
            (windows), or for either task ``UNPARSEABLE`` (the output named no single label) or
            ``EMPTY_TRANSCRIPT`` (no word to judge: not sent to a backend).
        passed: answers: ``label == CORRECT``; windows: ``label == BACKCHANNEL``. An
            ``UNPARSEABLE`` or ``EMPTY_TRANSCRIPT`` verdict never passes.
        raw: the backend's raw output, kept for audit (the lexical judge writes its reasoning).
        cost: tokens and USD of this call (zero for offline backends and for cache hits).
    """

    label: str
    passed: bool
    raw: str
    cost: Cost = field(default_factory=Cost)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "passed": self.passed, "raw": self.raw, "cost": self.cost.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        return cls(str(d["label"]), bool(d["passed"]), str(d.get("raw", "")), Cost.from_dict(d.get("cost", {})))


@dataclass(frozen=True)
class ContextTurn:
    """A preceding human turn given to the window classifier: scene-local speaker id and text."""

    speaker: str
    text: str


@runtime_checkable
class Judge(Protocol):
    """A judge backend.

    Attributes:
        name: backend name (``"lexical"``, ``"anthropic"``, ``"gemini"``).
        model: the model id (``"claude-sonnet-4-5"``, ...; the rule-set id for ``lexical``).
        prompt_version: changes whenever a verdict may change for the same inputs (prompt text,
            rules); part of cache keys. A judge may also expose ``prompt_versions``, a mapping
            ``{"answer": ..., "window": ...}``, so a change of one task's prompt keeps the other's cache.
    """

    name: str
    model: str
    prompt_version: str

    def judge_answer(self, transcript: str, gold: str, question: str) -> Verdict:
        """Is ``transcript`` (the ASR text of the response) a correct answer to ``question``
        with gold answer ``gold``? ``CORRECT``/``INCORRECT``/``UNPARSEABLE``; ``EMPTY_TRANSCRIPT``
        without a call when ``transcript`` holds no word."""
        ...

    def classify_window(self, transcript: str, context: Sequence[ContextTurn], speech_s: float,
                        overlap_s: float) -> Verdict:
        """Classify the model's speech in a silence window. ``context`` holds up to three
        preceding human turns, oldest first (the last is the most recent); ``speech_s`` is the
        model's total speech in the window and ``overlap_s`` its overlap with human speech,
        in seconds. ``BACKCHANNEL``/``SUBSTANTIVE_INTRUSION``/``UNPARSEABLE``; ``EMPTY_TRANSCRIPT``
        without a call when ``transcript`` holds no word."""
        ...


def answer_verdict(label: str, raw: str, cost: Cost | None = None) -> Verdict:
    """A correctness verdict; any label other than ``CORRECT``/``INCORRECT`` becomes ``UNPARSEABLE``."""
    label = label if label in ANSWER_LABELS else UNPARSEABLE
    return Verdict(label, label == CORRECT, raw, cost or Cost())


def window_verdict(label: str, raw: str, cost: Cost | None = None) -> Verdict:
    """A window verdict; any label other than ``BACKCHANNEL``/``SUBSTANTIVE_INTRUSION`` becomes ``UNPARSEABLE``."""
    label = label if label in WINDOW_LABELS else UNPARSEABLE
    return Verdict(label, label == BACKCHANNEL, raw, cost or Cost())


def empty_transcript_verdict(task: str) -> Verdict:
    """The verdict for speech whose transcript holds no word, for either ``task``: ``EMPTY_TRANSCRIPT``,
    which fails (spec section 5: speech with an empty transcript fails the window; a T response
    with nothing heard is not a correct answer). It is not a judge's verdict, so it is never
    counted as ``UNPARSEABLE``; no backend is called and it costs nothing.

    Raises:
        ValueError: ``task`` is not one of :data:`TASKS`.
    """
    if task not in TASKS:
        raise ValueError(f"unknown judge task {task!r}; expected one of {', '.join(TASKS)}")
    return Verdict(EMPTY_TRANSCRIPT, False, EMPTY_TRANSCRIPT_RAW)


_NEGATION_BEFORE = re.compile(r"(?:\bnot|\bno|\bnever|n't|\bnor)\s+(?:an?\s+|the\s+)?$", re.IGNORECASE)


def _label_pattern(label: str) -> re.Pattern[str]:
    parts = [re.escape(p) for p in label.split("_") if p]
    return re.compile(r"(?<![A-Za-z0-9_])" + r"[\s_-]+".join(parts) + r"(?![A-Za-z0-9_])", re.IGNORECASE)


def parse_label(raw: str, allowed: Sequence[str]) -> str:
    """The single label of ``allowed`` that ``raw`` names, else ``UNPARSEABLE``.

    Strict rules:

    * labels are matched as whole words, case-insensitively (``"correct"``, ``"**Correct.**"``
      and ``"Label: CORRECT"`` all give ``CORRECT``; ``INCORRECT`` never matches ``CORRECT``);
      the words of a multi-word label may be joined by ``_``, ``-`` or spaces
      (``"substantive intrusion"``);
    * exactly one distinct label must be named (repeating the same label is fine); none, or
      two different ones (``"CORRECT or INCORRECT"``), give ``UNPARSEABLE``;
    * a label directly negated (``"not correct"``, ``"not a backchannel"``) gives ``UNPARSEABLE``:
      the output is prose, not a verdict.
    """
    found: set[str] = set()
    text = raw or ""
    for label in allowed:
        for m in _label_pattern(label).finditer(text):
            if _NEGATION_BEFORE.search(text[: m.start()]):
                return UNPARSEABLE
            found.add(label)
    return found.pop() if len(found) == 1 else UNPARSEABLE


def build_judge(kind: str, **params: Any) -> Judge:
    """Build the judge backend ``kind`` (one of :data:`KINDS`) with backend ``params``.

    The LLM backends import their SDK only when they first need a client, so building one (for
    a fully cached rerun, say) needs neither the SDK nor an API key.

    Raises:
        ValueError: unknown ``kind`` or a bad parameter.
    """
    if kind == "lexical":
        from harness.scoring.judge.lexical import LexicalJudge

        return LexicalJudge(**params)
    if kind == "anthropic":
        from harness.scoring.judge.llm import AnthropicJudge

        return AnthropicJudge(**params)
    if kind == "gemini":
        from harness.scoring.judge.llm import GeminiJudge

        return GeminiJudge(**params)
    raise ValueError(f"unknown judge kind {kind!r}; expected one of {', '.join(KINDS)}")


__all__ = [
    "ANSWER_LABELS",
    "BACKCHANNEL",
    "CORRECT",
    "EMPTY_TRANSCRIPT",
    "INCORRECT",
    "KINDS",
    "SUBSTANTIVE_INTRUSION",
    "TASKS",
    "UNPARSEABLE",
    "WINDOW_LABELS",
    "ContextTurn",
    "Cost",
    "Judge",
    "Verdict",
    "answer_verdict",
    "build_judge",
    "empty_transcript_verdict",
    "parse_label",
    "window_verdict",
]
