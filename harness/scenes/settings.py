"""The ``scenes`` stage's settings (conf/scenes/; spec section 2): generate, script or import the corpus.

* ``source: template`` (the default): the template generator writes every turn
  (:func:`harness.scenes.generator.generate_pairs`).
* ``source: llm``: the generator fixes every pair's layout and a language model writes the texts
  (:mod:`harness.scenes.llm`), with the settings ``llm`` (:class:`ScriptLLMSettings`); replies are
  cached in the run's store (``_cache/scripts``), pairs without a valid script are reported.
* ``manifest``: import a JSONL manifest instead (docs/formats.md); ``strict`` also holds it to
  the content rules generated and LLM-written scenes always meet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, NamedTuple

from harness.checks import require_integer
from harness.scenes.generator import check_profile, check_share, generate_pairs
from harness.scenes.llm import PROMPT
from harness.scenes.schema import Scene, import_manifest, validate_scenes

SOURCES = ("template", "llm")
SCRIPT_BACKENDS = ("anthropic", "gemini")  # LLM judge backends (harness.scoring.judge.llm) that write scripts
CACHE_KIND = "scripts"  # the replies' cache: harness.store.layout.cache_prefix("scripts") in the run's store


@dataclass(frozen=True)
class ScriptLLMSettings:
    """``scenes.llm``: the language model that writes the scripts when ``scenes.source=llm``.

    Attributes:
        backend: ``anthropic`` or ``gemini`` (its SDK; the key from the environment:
            ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY``).
        model: model id; ``None``: the backend's default (``claude-sonnet-4-5``, ``gemini-2.5-flash``).
        budget_usd: no call starts once this many US dollars are spent by the stage (cached
            replies cost nothing); ``None``: no limit. The pairs left are reported as invalid.
        max_attempts: scripts asked for per pair before it is reported as invalid.
        max_output_tokens: the reply's token limit per call.
        prompt, prompts_dir: the prompt file (default :data:`harness.scenes.llm.PROMPT` in the
            repository's ``prompts/``); it enters the scenes hash by content.
    """

    backend: str = "anthropic"
    model: str | None = None
    budget_usd: float | None = None
    max_attempts: int = 3
    max_output_tokens: int = 4000
    prompt: str = PROMPT
    prompts_dir: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in SCRIPT_BACKENDS:
            raise ValueError(f"llm.backend must be one of {', '.join(SCRIPT_BACKENDS)}, got {self.backend!r}")
        require_integer(self, "max_attempts", "max_output_tokens")
        if self.max_attempts < 1 or self.max_output_tokens < 1:
            raise ValueError(f"llm.max_attempts and llm.max_output_tokens must be >= 1, got {self.max_attempts} "
                             f"and {self.max_output_tokens}")
        b = self.budget_usd
        if b is not None and (isinstance(b, bool) or not isinstance(b, int | float) or b < 0):
            raise ValueError(f"llm.budget_usd must be a number >= 0 (US dollars) or null, got {b!r}")


@dataclass(frozen=True)
class ScenesSettings:
    n_pairs: int = 32
    seed: int = 20260902
    four_party_share: float = 0.25
    n4_share: float = 0.6
    manifest: str | None = None  # import a JSONL manifest instead of generating scenes
    profile: str = "compact"  # generator profile: compact (demo) or paper (harness/scenes/generator.py)
    source: str = "template"  # who writes the generated scenes' texts: template | llm (the module docstring)
    strict: bool = False  # hold an imported manifest to the content rules too (docs/formats.md, "Rules")
    llm: ScriptLLMSettings = field(default_factory=ScriptLLMSettings)  # source=llm: the model writing the scripts

    def __post_init__(self) -> None:
        if isinstance(self.llm, Mapping):  # as the config (and run.json) gives it
            known = {f.name for f in fields(ScriptLLMSettings)}
            if unknown := set(self.llm) - known:
                raise ValueError(f"llm: unknown keys {sorted(unknown)} (known: {sorted(known)})")
            object.__setattr__(self, "llm", ScriptLLMSettings(**self.llm))
        require_integer(self, "n_pairs", "seed")
        check_profile(self.profile)
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        if not isinstance(self.strict, bool):
            raise ValueError(f"strict must be true or false, got {self.strict!r}")
        if self.manifest and self.source != "template":
            raise ValueError("source=llm scripts the generator's layouts; it cannot import a manifest "
                             f"(manifest={self.manifest!r}): set one or the other")
        if self.strict and not self.manifest:
            raise ValueError("strict applies to an imported manifest (manifest=...); generated and LLM-written "
                             "scenes are always held to the strict rules")
        if self.manifest is None and self.n_pairs < 1:
            raise ValueError(f"n_pairs must be >= 1 (or give a manifest), got {self.n_pairs}")
        for name in ("four_party_share", "n4_share"):
            check_share(name, getattr(self, name))


class MadeScenes(NamedTuple):
    """What :func:`make_scenes` made.

    Attributes:
        scenes: the valid scenes, in manifest order (pair by pair).
        invalid: ``{scene_id: why}`` of the scenes refused by validation (docs/formats.md, "Rules").
        rejected: ``source=llm`` only: ``{scene_id: why}`` of both versions of every pair left
            without a script (no valid one after every attempt, or the budget spent first).
        llm: ``source=llm`` only: the backend, model, prompt version, ``calls``, ``usd`` (spent
            now), ``usd_saved`` (what the cached replies cost originally), ``budget_usd`` and
            ``usage`` (the usage ledger's raw usage, :func:`harness.pricing.llm_usage`).
    """

    scenes: list[Scene]
    invalid: dict[str, str]
    rejected: Mapping[str, str] = MappingProxyType({})
    llm: dict[str, Any] | None = None

    @property
    def refused(self) -> dict[str, str]:
        """Every scene that will not run, with why: ``invalid`` and ``rejected`` (the stage's ``invalid.json``)."""
        return {**self.invalid, **self.rejected}


def template_scenes(s: ScenesSettings) -> list[Scene]:
    """The generator's pairs for ``s`` (its texts; with ``source=llm`` the layouts the model
    scripts), every one of them: the cost projection counts these without calling a model."""
    return generate_pairs(s.n_pairs, s.seed, s.four_party_share, s.n4_share, s.profile)


def script_backend(llm: ScriptLLMSettings) -> Any:
    """The LLM backend ``llm`` names (an LLM judge of :mod:`harness.scoring.judge.llm`, whose
    ``complete`` writes the scripts). Building it needs neither the SDK nor a key (both are
    needed at the first call; the preflight checks them). Raises ``ValueError`` (e.g. a model the
    price table does not price)."""
    from harness.scoring.judge import build_judge

    return build_judge(llm.backend, model=llm.model, max_output_tokens=llm.max_output_tokens)


def make_scenes(s: ScenesSettings, store: Any = None, backend: Any = None) -> MadeScenes:
    """The scenes ``s`` names: imported from ``s.manifest`` (the same line and pair rules as
    generated scenes, and with ``s.strict`` their content rules; docs/formats.md), generated from
    templates, or (``s.source == "llm"``) scripted by a language model on the templates' layouts.
    The stage writes them; the cost projection counts them before it runs (never with
    ``source=llm``: it counts :func:`template_scenes`, which calls no model).

    Args:
        store: ``source=llm``: the object store whose ``_cache/scripts`` keeps the replies (``None``:
            no cache, every call paid).
        backend: ``source=llm``: the backend writing the scripts (tests pass one on a mock
            transport); ``None``: :func:`script_backend` of ``s.llm``.

    Raises:
        OSError: the manifest or the prompt file cannot be read; errors of the LLM's API (after its
        SDK's retries) propagate, nothing of them is cached.
    """
    if s.manifest:
        with open(s.manifest, encoding="utf-8-sig") as fh:  # a byte-order mark, as editors save it
            return MadeScenes(*import_manifest(fh, strict=s.strict))
    if s.source == "template":
        return MadeScenes(*validate_scenes(template_scenes(s), strict=True))
    return _scripted(s, store, backend or script_backend(s.llm))


def _scripted(s: ScenesSettings, store: Any, backend: Any) -> MadeScenes:
    """``source=llm``: the scripts of ``backend`` on the layouts of :func:`template_scenes`."""
    from harness.scenes.llm import LLMScriptWriter
    from harness.scoring.cache import ContentCache
    from harness.store.layout import cache_prefix

    c = s.llm
    cache = ContentCache(store, cache_prefix(CACHE_KIND)) if store is not None else None
    writer = LLMScriptWriter(backend, cache, c.budget_usd, c.max_attempts, c.prompts_dir, c.prompt)
    templates = template_scenes(s)
    result = writer.write_pairs(templates)
    scenes, invalid = validate_scenes(result.scenes, strict=True)
    rejected = {}
    for tmpl in templates:
        why = result.rejected.get(tmpl.pair_id)
        if why == "budget":
            rejected[tmpl.scene_id] = (f"not scripted: the script budget scenes.llm.budget_usd=${c.budget_usd:g} was "
                                       "spent before this pair (raise it and rerun: cached replies cost nothing)")
        elif why is not None:
            rejected[tmpl.scene_id] = (f"no valid script from {backend.name}/{backend.model} after "
                                       f"{result.attempts.get(tmpl.pair_id, c.max_attempts)} attempt(s) "
                                       f"({writer.prompt.version}); the last: {why}")
    usage = getattr(backend, "usage", None)
    summary = {"backend": backend.name, "model": backend.model, "prompt": writer.prompt.version,
               "calls": writer.calls, "usd": round(writer.cost.usd, 6), "usd_saved": round(writer.saved.usd, 6),
               "budget_usd": c.budget_usd, "rejected_pairs": len(result.rejected),
               "usage": usage(writer.cost, writer.calls) if usage else None}
    return MadeScenes(scenes, invalid, rejected, summary)
