"""LLM judges through the official SDKs: :class:`AnthropicJudge` (``anthropic``) and
:class:`GeminiJudge` (``google-genai``).

* **Keys** come only from the environment, read by the SDKs themselves: ``ANTHROPIC_API_KEY``
  for Anthropic, ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` for Gemini. No key is ever taken
  from config, passed as an argument or logged.
* **Clients** are injectable (``client=``); without one, the SDK is imported and its client
  built on the first call that needs it, so building a judge (e.g. for a fully cached rerun)
  needs neither the SDK nor a key. A missing SDK is a :class:`RuntimeError` that says what
  to install. ``http_client=`` (an ``httpx2.Client``, the HTTP library of the pinned SDKs)
  replaces only the SDK client's transport: the unit tests drive the real SDKs offline
  through a mock transport; production leaves it ``None`` (the SDK's own).
* **Prompts** are the versioned files ``prompts/judge_answer_v1.txt`` and
  ``prompts/judge_window_v1.txt``, filled with ``str.format``; ``prompt_version`` is
  ``<file stem>@<10 hex of its SHA-256>`` (``prompt_versions`` per task; the combined
  ``prompt_version`` is ``"<answer>+<window>"``).
* **Decoding**: Gemini runs at ``temperature=0``. The Anthropic SDK pinned here (2.x) has no
  sampling parameters and sends API version 2026-10-21, which rejects ``temperature`` at any
  value, so the Anthropic judge sends none (the model's default); its verdicts are made
  reproducible by the cache (:mod:`harness.scoring.cache`), which computes each one once.
* **Output**: the reply text is kept verbatim as :attr:`Verdict.raw` and read by
  :func:`~harness.scoring.judge.parse_label`; anything but exactly one label is
  ``UNPARSEABLE`` (fails). API errors (after the SDK's own retries) propagate: they are not
  verdicts and are never cached.
* **Cost**: tokens from the response's usage fields (Anthropic ``usage.input_tokens`` /
  ``output_tokens``; Gemini ``usage_metadata.prompt_token_count`` / ``candidates_token_count``
  + ``thoughts_token_count``, since thinking is billed as output) times the model's
  ``input_text`` / ``output_text`` prices in the newest price table (:mod:`harness.pricing`,
  exact ids; ``price_per_mtok=`` for a model it does not list). The raw tokens also go to the
  usage ledger (:meth:`LLMJudge.usage`), so the report re-prices them with any table. A count
  the API always sends (Anthropic's two, Gemini's
  ``prompt_token_count``) that is missing is a :class:`RuntimeError`, never a call booked at $0.
"""

from __future__ import annotations

import hashlib
import string
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.scoring.judge import (
    ANSWER_LABELS,
    WINDOW_LABELS,
    ContextTurn,
    Cost,
    Verdict,
    answer_verdict,
    empty_transcript_verdict,
    parse_label,
    window_verdict,
)

PROMPTS_DIR = Path(__file__).resolve().parents[3] / "prompts"
ANSWER_PROMPT = "judge_answer_v1.txt"
WINDOW_PROMPT = "judge_window_v1.txt"
ANSWER_FIELDS = frozenset({"question", "gold", "transcript"})
WINDOW_FIELDS = frozenset({"context", "transcript", "speech_s", "overlap_s"})
MAX_CONTEXT_TURNS = 3

def price_for(provider: str, model: str, version: int | None = None) -> tuple[float, float]:
    """``(input, output)`` USD per million tokens of ``provider/model`` in the price table
    ``version`` (default: the newest; :mod:`harness.pricing`, the one place prices live): its
    ``input_text`` and ``output_text`` prices, by exact model id (a dated snapshot needs its own
    entry). Raises ``ValueError`` for a model the table does not price."""
    from harness.pricing import load_prices

    table = load_prices(version)
    prices = table.models.get(f"{provider}/{model}", {})
    if "input_text" not in prices or "output_text" not in prices:
        raise ValueError(f"no price for judge model {provider}/{model} in {table.label}: add it to a new table in "
                         "harness/pricing/tables or pass price_per_mtok=(input_usd, output_usd) per million tokens")
    return prices["input_text"], prices["output_text"]


def cost_of(input_tokens: int, output_tokens: int, price_per_mtok: tuple[float, float]) -> Cost:
    usd = (input_tokens * price_per_mtok[0] + output_tokens * price_per_mtok[1]) / 1e6
    return Cost(int(input_tokens), int(output_tokens), usd)


@dataclass(frozen=True)
class Prompt:
    """A prompt template loaded from a file, with its version (``<stem>@<sha256[:10]>``)."""

    name: str
    text: str
    version: str

    def render(self, **values: Any) -> str:
        return self.text.format_map(values)


def prompt_path(prompts_dir: str | Path | None, name: str) -> Path:
    """Where an LLM backend's prompt file ``name`` is: in ``prompts_dir`` (None: the repository's
    :data:`PROMPTS_DIR`). The one lookup of every backend and of the plan that hashes the files."""
    return Path(prompts_dir if prompts_dir is not None else PROMPTS_DIR) / name


def load_prompt(path: str | Path, fields: frozenset[str]) -> Prompt:
    """Load a prompt file and check that its placeholders are exactly ``fields``."""
    path = Path(path)
    data = path.read_bytes()
    text = data.decode("utf-8")
    try:
        found = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as e:
        raise ValueError(f"prompt {path}: bad braces ({e}); only the placeholders may use {{ }}") from e
    if found != set(fields):
        raise ValueError(f"prompt {path}: placeholders {sorted(found)}, expected {sorted(fields)}")
    return Prompt(path.stem, text, f"{path.stem}@{hashlib.sha256(data).hexdigest()[:10]}")


def _data(text: str) -> str:
    """An input as it goes between the prompt's tags: no angle brackets, so it cannot close a tag."""
    return (text or "").replace("<", "\u2039").replace(">", "\u203a").strip()


def format_context(context: Sequence[ContextTurn]) -> str:
    """The last :data:`MAX_CONTEXT_TURNS` turns, oldest first, one ``speaker: text`` line each."""
    turns = list(context)[-MAX_CONTEXT_TURNS:]
    if not turns:
        return "(none)"
    return "\n".join(f"{_data(t.speaker)}: {_data(t.text)}" for t in turns)


class LLMJudge:
    """Shared logic of the LLM judges: prompts, parsing, verdicts, cost. Subclasses implement
    :meth:`_build_client` and :meth:`_complete`."""

    name = "llm"
    provider = ""  # the price table's and the usage ledger's provider name
    default_model = ""
    temperature: float | None = None
    # what a job's preflight (harness.runtime.preflight) checks before anything is spent: the SDK
    # module it imports (and its PyPI package) and the environment variables of its key (any one)
    sdk_module = ""
    sdk_package = ""
    credentials_env: tuple[str, ...] = ()

    def __init__(self, model: str | None = None, client: Any = None, prompts_dir: str | Path | None = None,
                 answer_prompt: str = ANSWER_PROMPT, window_prompt: str = WINDOW_PROMPT,
                 price_per_mtok: tuple[float, float] | None = None, max_output_tokens: int | None = None,
                 http_client: Any = None):
        self.model = model or self.default_model
        if not self.model:
            raise ValueError(f"the {self.name} judge needs a model id")
        self.price_per_mtok = (tuple(price_per_mtok) if price_per_mtok is not None
                               else price_for(self.provider, self.model))
        if len(self.price_per_mtok) != 2 or min(self.price_per_mtok) < 0:
            raise ValueError(f"price_per_mtok must be (input_usd, output_usd) >= 0, got {price_per_mtok}")
        if max_output_tokens is not None and max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {max_output_tokens}")
        self.max_output_tokens = max_output_tokens
        self.answer_prompt = load_prompt(prompt_path(prompts_dir, answer_prompt), ANSWER_FIELDS)
        self.window_prompt = load_prompt(prompt_path(prompts_dir, window_prompt), WINDOW_FIELDS)
        self.prompt_versions = {"answer": self.answer_prompt.version, "window": self.window_prompt.version}
        self.prompt_version = f"{self.answer_prompt.version}+{self.window_prompt.version}"
        self._client = client
        self.http_client = http_client  # for the SDK client built by _build_client; None: the SDK's own
        self._lock = threading.Lock()

    # -- backend hooks -------------------------------------------------------------------------
    def _build_client(self) -> Any:
        raise NotImplementedError

    def _complete(self, prompt: str) -> tuple[str, int, int]:
        """Send ``prompt``; return ``(reply text, input tokens, output tokens)``."""
        raise NotImplementedError

    @property
    def settings(self) -> dict[str, Any]:
        """Request settings that can change a verdict; part of cache keys."""
        return {"temperature": self.temperature, "max_output_tokens": self.max_output_tokens}

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def usage(self, cost: Cost, calls: int) -> dict[str, Any] | None:
        """The usage ledger's raw usage of ``calls`` paid calls that cost ``cost`` in all
        (:func:`harness.pricing.llm_usage`): re-priceable later with any price table."""
        from harness.pricing import llm_usage

        return llm_usage(self.provider, self.model, calls, cost.input_tokens, cost.output_tokens)

    def complete(self, prompt: str) -> tuple[str, Cost]:
        """Send any ``prompt`` through this backend's SDK call; return the reply text verbatim and
        its :class:`Cost`. The judge tasks use it, and so does the text reference
        (:mod:`harness.reference.llm`), so both share one SDK path, key handling and price table.
        API errors (after the SDK's retries) propagate."""
        text, tin, tout = self._complete(prompt)
        return text, cost_of(tin, tout, self.price_per_mtok)

    # -- tasks ---------------------------------------------------------------------------------
    def _ask(self, prompt: str, labels: Sequence[str]) -> tuple[str, str, Cost]:
        text, cost = self.complete(prompt)
        return parse_label(text, labels), text, cost

    def answer_prompt_text(self, transcript: str, gold: str, question: str) -> str:
        return self.answer_prompt.render(question=_data(question), gold=_data(gold), transcript=_data(transcript))

    def window_prompt_text(self, transcript: str, context: Sequence[ContextTurn], speech_s: float,
                           overlap_s: float) -> str:
        return self.window_prompt.render(context=format_context(context), transcript=_data(transcript),
                                         speech_s=f"{float(speech_s):.2f}", overlap_s=f"{float(overlap_s):.2f}")

    def judge_answer(self, transcript: str, gold: str, question: str) -> Verdict:
        if not (gold or "").strip():
            raise ValueError("empty gold answer")
        if not (transcript or "").strip():
            return empty_transcript_verdict("answer")
        label, raw, cost = self._ask(self.answer_prompt_text(transcript, gold, question), ANSWER_LABELS)
        return answer_verdict(label, raw, cost)

    def classify_window(self, transcript: str, context: Sequence[ContextTurn], speech_s: float,
                        overlap_s: float) -> Verdict:
        if not (transcript or "").strip():
            return empty_transcript_verdict("window")
        prompt = self.window_prompt_text(transcript, context, speech_s, overlap_s)
        label, raw, cost = self._ask(prompt, WINDOW_LABELS)
        return window_verdict(label, raw, cost)


def _tokens(usage: Any, name: str, provider: str, required: bool = True) -> int:
    """Token count ``name`` of a response's usage object. A count the API always sends that is
    missing raises ``RuntimeError`` (a renamed SDK field must not book every call at $0); an
    optional one is 0."""
    value = getattr(usage, name, None)
    if value is None:
        if required:
            raise RuntimeError(f"the {provider} response has no usage field {name!r}, so its cost cannot be "
                               "booked; has the SDK renamed it? (harness/scoring/judge/llm.py reads it)")
        return 0
    return int(value)


def _missing_sdk(judge: str, package: str, e: ImportError) -> RuntimeError:
    """The error for an LLM backend whose provider SDK is not installed."""
    return RuntimeError(f"the {judge} judge needs the `{package}` package ({e}); install the pinned "
                        "requirements (`make setup`, or `.venv/bin/pip install -r requirements.txt`)")


class AnthropicJudge(LLMJudge):
    """Claude through ``anthropic.Anthropic().messages.create`` (key: ``ANTHROPIC_API_KEY``).

    Args:
        model: model id, default ``claude-sonnet-4-5``.
        client: an object with ``messages.create(...)`` (tests pass a fake); built lazily otherwise.
        http_client: an ``httpx2.Client`` for the SDK client built lazily (tests: a mock transport).
        max_output_tokens: ``max_tokens`` of the request (default 20: a label is a few tokens).
        max_retries: the SDK client's retries on rate limits and transient errors (default 4).
        prompts_dir, answer_prompt, window_prompt, price_per_mtok: see :class:`LLMJudge`.

    No sampling parameter is sent (see the module docstring): ``temperature`` is ``None``.
    """

    name = "anthropic"
    provider = "anthropic"
    default_model = "claude-sonnet-4-5"
    temperature = None
    sdk_module = sdk_package = "anthropic"
    credentials_env = ("ANTHROPIC_API_KEY",)

    def __init__(self, model: str | None = None, client: Any = None, max_output_tokens: int = 20,
                 max_retries: int = 4, **kwargs: Any):
        super().__init__(model=model, client=client, max_output_tokens=max_output_tokens, **kwargs)
        self.max_retries = int(max_retries)

    def _build_client(self) -> Any:
        try:
            import anthropic
        except ImportError as e:
            raise _missing_sdk("anthropic", "anthropic", e) from e
        extra = {} if self.http_client is None else {"http_client": self.http_client}
        return anthropic.Anthropic(max_retries=self.max_retries, **extra)  # key: ANTHROPIC_API_KEY, read by the SDK

    def _complete(self, prompt: str) -> tuple[str, int, int]:
        resp = self.client.messages.create(
            model=self.model,
            max_tokens=self.max_output_tokens,
            messages=[{"role": "user", "content": prompt}],
        )
        text = "".join(getattr(b, "text", "") or "" for b in (getattr(resp, "content", None) or [])
                       if getattr(b, "type", "text") == "text")
        usage = getattr(resp, "usage", None)
        return text, _tokens(usage, "input_tokens", "Anthropic"), _tokens(usage, "output_tokens", "Anthropic")


class GeminiJudge(LLMJudge):
    """Gemini through ``google.genai.Client().models.generate_content`` (key: ``GEMINI_API_KEY``
    or ``GOOGLE_API_KEY``), at ``temperature=0``.

    Args:
        model: model id, default ``gemini-2.5-flash``.
        client: an object with ``models.generate_content(...)`` (tests pass a fake); built lazily otherwise.
        http_client: an ``httpx2.Client`` for the SDK client built lazily (tests: a mock transport).
        max_output_tokens: ``max_output_tokens`` of the request; default ``None`` (not sent),
            because on thinking models the thinking tokens count against it.
        thinking_budget: ``thinking_config.thinking_budget``; default ``None`` (the model's
            default); ``0`` turns thinking off where the model allows it (cheaper).
        prompts_dir, answer_prompt, window_prompt, price_per_mtok: see :class:`LLMJudge`.
    """

    name = "gemini"
    provider = "google"
    default_model = "gemini-2.5-flash"
    temperature = 0.0
    sdk_module, sdk_package = "google.genai", "google-genai"
    credentials_env = ("GEMINI_API_KEY", "GOOGLE_API_KEY")

    def __init__(self, model: str | None = None, client: Any = None, max_output_tokens: int | None = None,
                 thinking_budget: int | None = None, **kwargs: Any):
        super().__init__(model=model, client=client, max_output_tokens=max_output_tokens, **kwargs)
        self.thinking_budget = thinking_budget

    def _build_client(self) -> Any:
        try:
            from google import genai
        except ImportError as e:
            raise _missing_sdk("gemini", "google-genai", e) from e
        extra = {} if self.http_client is None else {"http_options": {"httpx_client": self.http_client}}
        return genai.Client(**extra)  # key: GEMINI_API_KEY / GOOGLE_API_KEY, read by the SDK

    @property
    def settings(self) -> dict[str, Any]:
        return {**super().settings, "thinking_budget": self.thinking_budget}

    def generation_config(self) -> dict[str, Any]:
        """The request's ``config`` (a plain dict, which the SDK accepts)."""
        config: dict[str, Any] = {"temperature": self.temperature}
        if self.max_output_tokens is not None:
            config["max_output_tokens"] = self.max_output_tokens
        if self.thinking_budget is not None:
            config["thinking_config"] = {"thinking_budget": int(self.thinking_budget)}
        return config

    def _complete(self, prompt: str) -> tuple[str, int, int]:
        resp = self.client.models.generate_content(model=self.model, contents=prompt,
                                                   config=self.generation_config())
        text = getattr(resp, "text", None) or ""
        um = getattr(resp, "usage_metadata", None)
        # no candidates (a blocked prompt) or no thinking: the API leaves those counts out
        tout = _tokens(um, "candidates_token_count", "Gemini", False) + _tokens(um, "thoughts_token_count", "Gemini",
                                                                                 False)
        return text, _tokens(um, "prompt_token_count", "Gemini"), tout


__all__ = [
    "ANSWER_PROMPT",
    "PROMPTS_DIR",
    "WINDOW_PROMPT",
    "AnthropicJudge",
    "GeminiJudge",
    "LLMJudge",
    "Prompt",
    "cost_of",
    "format_context",
    "load_prompt",
    "price_for",
    "prompt_path",
]
