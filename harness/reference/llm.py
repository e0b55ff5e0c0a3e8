"""LLM text references: Claude (``anthropic``) and Gemini (``gemini``) through the judge's backends.

* **One SDK path**: the backend is the judge's :class:`~harness.scoring.judge.llm.AnthropicJudge`
  or :class:`~harness.scoring.judge.llm.GeminiJudge`, built by
  :func:`~harness.scoring.judge.build_judge`; the reference sends its own prompt through
  :meth:`~harness.scoring.judge.llm.LLMJudge.complete`. Keys (``ANTHROPIC_API_KEY``,
  ``GEMINI_API_KEY``/``GOOGLE_API_KEY``) are read by the SDKs from the environment only; the
  client is built on the first call that needs it (a fully cached rerun needs neither SDK nor
  key); tokens and dollars come from the same usage fields and price table as the judge's.
* **Prompt**: ``prompts/reference_v1.txt`` with placeholders ``{duty}``, ``{history}``,
  ``{speaker}``, ``{utterance}``, loaded and versioned like the judge prompts
  (``reference_v1@<10 hex of its SHA-256>``); inputs are put between tags with ``<``/``>``
  replaced so they cannot close one.
* **Output** (:func:`parse_decision`): the reply must *begin* with ``RESPOND`` or ``SILENT``
  (case-insensitive, after optional Markdown decoration); after ``RESPOND`` the rest of the
  reply is the answer. Anything else is ``UNPARSEABLE``, recorded as such (never as
  ``SILENT``), with the reply kept verbatim in ``raw``.
* **Cache**: every decision goes through a :class:`~harness.scoring.cache.ContentCache`
  keyed by (backend, model, prompt version, request settings, **pass index**, inputs), so a
  second pass with a new index asks the model again, while a rerun of the same pass costs
  nothing (a hit returns the stored decision with its cost zeroed; the original cost is added
  to ``saved``). API errors propagate and are never cached; an ``UNPARSEABLE`` decision is
  stored for audit but never served (the next run asks again, ``retried``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.reference import RESPOND, SILENT, UNPARSEABLE, Decision, TurnInput
from harness.scoring.cache import ContentCache, MeteredCache
from harness.scoring.judge import build_judge
from harness.scoring.judge.llm import LLMJudge, _data, load_prompt, prompt_path

PROMPT = "reference_v1.txt"
PROMPT_FIELDS = frozenset({"duty", "history", "speaker", "utterance"})
# The judge's Anthropic default (20 tokens) fits a label, not an answer; Gemini's stays unset
# (on thinking models thinking tokens count against the limit).
ANTHROPIC_MAX_OUTPUT_TOKENS = 300
NO_HISTORY = "(nothing has been said yet)"

_DECISION = re.compile(r"^[\s*_#>\"'`]*(RESPOND|SILENT)(?![A-Za-z0-9_])[\s*_:.\-–—]*(.*)$",
                       re.IGNORECASE | re.DOTALL)


def parse_decision(raw: str) -> tuple[str, str | None]:
    """``(decision, answer)`` from a reply: the reply must begin with ``RESPOND`` or ``SILENT``
    (whole word, any case, after optional ``*``/``#``/``>``/quote decoration). After
    ``RESPOND`` the rest of the reply, stripped of separators, is the answer (possibly ``""``);
    after ``SILENT`` the answer is ``None`` whatever follows. Anything else, e.g. "I would
    respond", is ``(UNPARSEABLE, None)``."""
    m = _DECISION.match(raw or "")
    if m is None:
        return UNPARSEABLE, None
    decision = m.group(1).upper()
    return (RESPOND, m.group(2).strip()) if decision == RESPOND else (SILENT, None)


def format_history(history: tuple[Any, ...]) -> str:
    """The history turns, oldest first, one ``speaker: text`` line each."""
    if not history:
        return NO_HISTORY
    return "\n".join(f"{_data(t.speaker)}: {_data(t.text)}" for t in history)


class LLMReference(MeteredCache):
    """A text reference on an LLM backend.

    Args:
        kind: ``"anthropic"`` or ``"gemini"``.
        store, cache_prefix: where the content cache lives (both, or neither for no cache).
        prompt: prompt file name in ``prompts_dir`` (default ``reference_v1.txt``).
        prompts_dir: folder of the reference prompt (default the repository's ``prompts/``).
        **params: the backend's parameters, as for :func:`~harness.scoring.judge.build_judge`:
            ``model``, ``client`` (tests pass a fake), ``http_client`` (tests: the real SDK
            over a mock transport), ``price_per_mtok``, ``max_output_tokens``
            (Anthropic default here :data:`ANTHROPIC_MAX_OUTPUT_TOKENS`), ``max_retries``
            (Anthropic), ``thinking_budget`` (Gemini).

    Raises:
        ValueError: unknown kind, a bad parameter, a prompt with the wrong placeholders, or
            only one of ``store``/``cache_prefix``.
    """

    writes_answers = True

    def __init__(self, kind: str, store: Any = None, cache_prefix: str | None = None, prompt: str = PROMPT,
                 prompts_dir: str | Path | None = None, **params: Any):
        if kind not in ("anthropic", "gemini"):
            raise ValueError(f"unknown LLM reference kind {kind!r}; expected anthropic or gemini")
        if (store is None) != (cache_prefix is None):
            raise ValueError("give both store and cache_prefix (a cached reference) or neither")
        if kind == "anthropic":
            params.setdefault("max_output_tokens", ANTHROPIC_MAX_OUTPUT_TOKENS)
        self.backend: LLMJudge = build_judge(kind, **params)  # type: ignore[assignment]
        self.name, self.model = self.backend.name, self.backend.model
        self.prompt = load_prompt(prompt_path(prompts_dir, prompt),
                                  PROMPT_FIELDS)
        self.prompt_version = self.prompt.version
        self.description = f"LLM text reference: {self.name} `{self.model}`, prompt `{self.prompt_version}`"
        # an UNPARSEABLE decision is stored for audit but asked again next time (as the judge's)
        super().__init__(ContentCache(store, cache_prefix) if store is not None else None,
                         reuse=lambda decision: decision.decision != UNPARSEABLE)

    def prompt_text(self, turn: TurnInput) -> str:
        return self.prompt.render(duty=_data(turn.duty), history=format_history(turn.history),
                                  speaker=_data(turn.current.speaker), utterance=_data(turn.current.text))

    def key_parts(self, turn: TurnInput, run: int) -> dict[str, Any]:
        """The cache key parts of a decision: the pass index makes passes independent."""
        return {"task": "reference", "backend": self.name, "model": self.model,
                "prompt_version": self.prompt_version, "settings": self.backend.settings, "run": run,
                "inputs": turn.key()}

    def _ask(self, turn: TurnInput) -> Decision:
        raw, cost = self.backend.complete(self.prompt_text(turn))
        decision, answer = parse_decision(raw)
        return Decision(decision, answer, raw, cost)

    def decide(self, turn: TurnInput, run: int) -> Decision:
        if run < 1:
            raise ValueError(f"run index must be >= 1, got {run}")
        return self.paid(self.key_parts(turn, run), lambda: self._ask(turn), Decision)

    def stats(self) -> dict[str, Any]:
        """Counters as JSON: backend, model, hits, misses (paid calls), cost spent and saved, and
        ``usage``, the paid calls' raw usage for the usage ledger (:mod:`harness.pricing`)."""
        return {"backend": self.name, "model": self.model, "hits": self.hits, "misses": self.misses,
                "cost": self.cost.to_dict(), "saved": self.saved.to_dict(),
                "usage": self.backend.usage(self.cost, self.misses)}


__all__ = ["ANTHROPIC_MAX_OUTPUT_TOKENS", "PROMPT", "LLMReference", "format_history", "parse_decision"]
