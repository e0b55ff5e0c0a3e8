"""The usage ledger's prices: cost of hosted models computed later from stored usage.

A hosted model's adapter stores each conversation's raw usage in its record
(:meth:`harness.models.base.DuplexModel.usage`): ``provider``, ``model`` and ``tokens``, a
mapping of **disjoint** token kinds to counts (``input_text``, ``input_text_cached``,
``input_audio``, ``input_audio_cached``, ``output_text``, ``output_audio``). Nothing is priced
when a run streams; a cost is ``sum(count * price)`` under a **price table**: a dated,
versioned YAML file in ``harness/pricing/tables/`` (``v1.yaml``, ...; USD per million tokens of
each kind, keyed ``provider/model`` by exact id). Re-pricing an old run under a newer table
reads its shard markers and needs no rerun.

A conversation is **unpriced** (never $0) when its model has no entry in the table or it used
a token kind the entry has no price for; summaries count unpriced conversations apart and say
why. Tokens a service reports in a total without saying of which modality (the adapters count
them as ``input_unattributed``, ``output_unattributed`` or, in neither direction,
``unattributed``: :func:`harness.models.hosted.count_unattributed`) are priced at the entry's
dearest rate of their direction (any direction for ``unattributed``), so their cost is an
**upper bound** and flagged as one (:attr:`Cost.upper_bound`); an entry without any price of
that direction leaves them unpriced (docs/models.md, "Usage and cost"). A conversation that
ended while the service still owed a reply's usage (``owed_at_close``) is priced as counted
and flagged: its cost is a lower bound. A conversation without usage (a model that meters
nothing) is not part of the ledger.

The ledger's books are raw usage summed per ``provider/model`` (:func:`sum_usage`): each infer
shard marker carries the sum of its conversations' usage, and a failed attempt's record the
usage it had spent when it failed (:mod:`harness.runtime.shard`), so ``make status``, the budget
and the report read markers only. A sum is priced as a whole (:func:`ledger_cost`). The LLM
judge and the text reference keep the same raw usage of their paid calls (:func:`llm_usage`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TABLES_DIR = Path(__file__).resolve().parent / "tables"


@dataclass(frozen=True)
class PriceTable:
    """One price table file.

    Attributes:
        version: the table's version (its file is ``v<version>.yaml``).
        as_of: the date its prices were read from the providers' pages (ISO ``YYYY-MM-DD``).
        models: ``{"provider/model": {token kind: USD per million tokens}}``.
    """

    version: int
    as_of: str
    models: Mapping[str, Mapping[str, float]]
    currency: str = "USD"

    @property
    def label(self) -> str:
        return f"prices v{self.version} as of {self.as_of}"

    @classmethod
    def load(cls, path: str | Path) -> PriceTable:
        """Read and check a table file.

        Raises:
            ValueError: a missing field, a currency other than USD, a ``per_tokens`` other than
                one million, or a price that is not a finite number >= 0 (naming the entry).
        """
        path = Path(path)
        raw = yaml.safe_load(path.read_text())
        for key in ("version", "as_of", "models"):
            if key not in raw:
                raise ValueError(f"price table {path}: no {key!r}")
        if raw.get("currency", "USD") != "USD" or raw.get("per_tokens", 1_000_000) != 1_000_000:
            raise ValueError(f"price table {path}: prices must be USD per million tokens")
        models: dict[str, dict[str, float]] = {}
        for model, prices in raw["models"].items():
            if "/" not in model:
                raise ValueError(f"price table {path}: {model!r} is not 'provider/model'")
            for kind, usd in prices.items():
                if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd) or usd < 0:
                    raise ValueError(f"price table {path}: {model} {kind}: {usd!r} is not a price >= 0")
            models[model] = {k: float(v) for k, v in prices.items()}
        return cls(int(raw["version"]), str(raw["as_of"]), models)

    def cost(self, usage: Mapping[str, Any]) -> Cost:
        """The cost of one conversation's ``usage`` (a record's ``usage``)."""
        key = f"{usage.get('provider')}/{usage.get('model')}"
        prices = self.models.get(key)
        if prices is None:
            return Cost(None, f"{key} is not in {self.label}")
        tokens = usage.get("tokens") or {}
        rates = {k: prices.get(k, _dearest(prices, k)) for k, n in tokens.items() if n}
        missing = sorted(k for k, rate in rates.items() if rate is None)
        if missing:
            return Cost(None, f"{key} has no price for {', '.join(missing)} in {self.label}")
        return Cost(sum(tokens[k] * rate for k, rate in rates.items()) / 1e6,
                    upper_bound=any(k in UNATTRIBUTED for k in rates))


# token kinds of a total the service did not break down by modality -> the prefix of the kinds whose
# dearest price they are charged at (an upper bound)
UNATTRIBUTED = {"input_unattributed": "input_", "output_unattributed": "output_", "unattributed": ""}


def _dearest(prices: Mapping[str, float], kind: str) -> float | None:
    """The price of an :data:`UNATTRIBUTED` kind: the dearest of the entry's kinds in its direction
    (None: no such price, or ``kind`` is not one of them)."""
    if kind not in UNATTRIBUTED:
        return None
    rates = [v for k, v in prices.items() if k.startswith(UNATTRIBUTED[kind]) and k not in UNATTRIBUTED]
    return max(rates, default=None)


@dataclass(frozen=True)
class Cost:
    """``usd`` is None when unpriced, and ``unpriced`` then says why; ``upper_bound``: it includes
    tokens without a modality breakdown charged at the dearest rate (:data:`UNATTRIBUTED`)."""

    usd: float | None
    unpriced: str | None = None
    upper_bound: bool = False


@dataclass
class LedgerCost:
    """The cost of many usage entries (conversations of a hosted model, calls of an LLM judge) under one table."""

    table: str  # PriceTable.label
    unit: str = "conversations"  # what an entry's ``count`` counts, for messages
    metered: int = 0  # conversations (calls) with usage
    priced: int = 0
    usd: float = 0.0  # of the priced ones only
    unpriced: Counter = field(default_factory=Counter)  # reason -> conversations (calls)
    undercounted: int = 0  # conversations that ended while the service still owed usage (``owed_at_close``)
    overcounted: int = 0  # priced entries with tokens of no stated modality, at the dearest rate (an upper bound)
    tokens: Counter = field(default_factory=Counter)  # token kind -> count, over every metered entry

    @property
    def tokens_in(self) -> int:
        return sum(n for k, n in self.tokens.items() if k.startswith("input"))

    @property
    def tokens_out(self) -> int:
        return sum(n for k, n in self.tokens.items() if k.startswith("output"))

    @property
    def complete(self) -> bool:
        """Is every metered entry priced (so :attr:`usd` is the whole cost, not a part)?"""
        return not self.unpriced

    def describe(self) -> str:
        """One line, e.g. ``API $12.34 for 40 conversations (prices v1 as of ...); 2 unpriced: ...``."""
        if not self.metered:
            return "no metered usage"
        text = f"API ${self.usd:,.2f} for {self.priced} {self.unit} ({self.table})"
        if self.unpriced:
            text += f"; {sum(self.unpriced.values())} unpriced: " + "; ".join(
                f"{why} ({n})" for why, n in self.unpriced.most_common())
        if self.undercounted:
            text += f"; {self.undercounted} ended with a reply's usage still owed (a lower bound)"
        if self.overcounted:
            text += (f"; {self.overcounted} with tokens of no stated modality, priced at the dearest rate "
                     "(an upper bound)")
        return text + f"; tokens in {self.tokens_in:,} / out {self.tokens_out:,}"


def usage_key(usage: Mapping[str, Any]) -> str:
    """``provider/model``: the price table's key of a usage record."""
    return f"{usage.get('provider')}/{usage.get('model')}"


def add_usage(totals: dict[str, dict[str, Any]], usage: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Add one usage record (a conversation's ``usage``) or a sum of them (an entry of
    :func:`sum_usage`) to ``totals`` (``{provider/model: sum}``, changed in place and returned).

    A sum has ``provider``, ``model``, ``count`` (records summed), ``tokens`` (kind -> count),
    ``seconds`` and ``responses`` (summed by key) and ``owed_at_close`` (records that ended with
    usage still owed): raw usage, so it is priced later like one record and re-priced by any table.
    ``None`` (a model that meters nothing) adds nothing.
    """
    if not usage:
        return totals
    key = usage_key(usage)
    acc = totals.setdefault(key, {"provider": usage.get("provider"), "model": usage.get("model"), "count": 0,
                                  "tokens": {}, "seconds": {}, "responses": {}, "owed_at_close": 0})
    acc["count"] += int(usage.get("count", 1))
    owed = usage.get("owed_at_close")
    acc["owed_at_close"] += owed if isinstance(owed, int) and not isinstance(owed, bool) else int(bool(owed))
    for part, cast in (("tokens", int), ("seconds", float), ("responses", int)):
        for k, v in (usage.get(part) or {}).items():
            acc[part][k] = cast(acc[part].get(k, 0) + v)
    acc["seconds"] = {k: round(v, 3) for k, v in acc["seconds"].items()}
    return totals


def sum_usage(usages: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """``{provider/model: sum}`` of ``usages`` (records or sums; see :func:`add_usage`)."""
    totals: dict[str, dict[str, Any]] = {}
    for u in usages:
        add_usage(totals, u)
    return totals


def llm_usage(provider: str, model: str, calls: int, input_tokens: int, output_tokens: int) -> dict[str, Any] | None:
    """The ledger's raw usage of ``calls`` paid calls of a text LLM (the LLM judge, the text
    reference): input and output tokens as ``input_text`` / ``output_text``; None for no call."""
    if not calls:
        return None
    return {"provider": provider, "model": model, "count": int(calls),
            "tokens": {"input_text": int(input_tokens), "output_text": int(output_tokens)}}


def tables() -> dict[int, Path]:
    """Every table file in :data:`TABLES_DIR`, by version."""
    return {int(p.stem[1:]): p for p in TABLES_DIR.glob("v*.yaml") if p.stem[1:].isdigit()}


def load_prices(version: int | None = None) -> PriceTable:
    """Table ``version`` (default: the newest).

    Raises:
        ValueError: no table has that version.
    """
    found = tables()
    if not found:
        raise ValueError(f"no price table in {TABLES_DIR}")
    v = max(found) if version is None else version
    if v not in found:
        raise ValueError(f"no price table v{v}; have {sorted(found)} in {TABLES_DIR}")
    return PriceTable.load(found[v])


def ledger_cost(usages: Iterable[Mapping[str, Any] | None], table: PriceTable,
                unit: str = "conversations") -> LedgerCost:
    """Price every entry of ``usages``: usage records or sums (:func:`sum_usage`), each priced as
    a whole (a sum with a token kind the table does not price is unpriced with all its ``count``);
    None entries, from models that meter nothing, are skipped."""
    out = LedgerCost(table.label, unit)
    for usage in usages:
        if not usage:
            continue
        n = int(usage.get("count", 1))
        owed = usage.get("owed_at_close")
        out.metered += n
        out.undercounted += owed if isinstance(owed, int) and not isinstance(owed, bool) else int(bool(owed))
        out.tokens.update({k: int(v) for k, v in (usage.get("tokens") or {}).items()})
        cost = table.cost(usage)
        if cost.usd is None:
            out.unpriced[cost.unpriced] += n
        else:
            out.priced += n
            out.usd += cost.usd
            out.overcounted += n if cost.upper_bound else 0
    return out


def spend_row(stage: str, who: str, usages: Iterable[Mapping[str, Any] | None], table: PriceTable,
              unit: str = "conversations") -> dict[str, Any] | None:
    """One row of a report's API spend table: ``stage`` and ``who`` spent ``usages`` (records or
    sums); None when nothing in them is metered. ``usd`` is None when any of it is unpriced
    (``priced_usd`` is then the priced part only, and ``unpriced`` says why)."""
    usages = [u for u in usages if u]
    cost = ledger_cost(usages, table, unit)
    if not cost.metered:
        return None
    return {"stage": stage, "who": who, "priced_as": ", ".join(sorted({usage_key(u) for u in usages})),
            "count": cost.metered, "unit": unit, "tokens_in": cost.tokens_in, "tokens_out": cost.tokens_out,
            "usd": cost.usd if cost.complete else None, "priced_usd": cost.usd,
            "unpriced": "; ".join(cost.unpriced) or None, "lower_bound": cost.undercounted,
            "upper_bound": cost.overcounted}


def spend_rows(ledgers: Iterable[Any], scoring: Mapping[str, Mapping[str, Any]], reference: Mapping[str, Any] | None,
               table: PriceTable, reference_name: str = "reference",
               scenes: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The API spend of a run from the usage ledger, one :func:`spend_row` per metered spender:
    the script writer's paid calls (``scenes``: the scenes marker, whose ``llm`` holds them with
    ``scenes.source=llm``), each model's infer usage (``ledgers``:
    :class:`~harness.products.infer.ModelLedger`, completed shards and failed attempts), the LLM
    judge's paid calls per model (``scoring``: ``{model: score marker}``) and the text reference's
    and its judge's (``reference``: the reference marker, if any)."""
    scripts = (scenes or {}).get("llm") or {}
    rows = [spend_row("scenes (scripts)", f"{scripts.get('backend')}/{scripts.get('model')}", [scripts.get("usage")],
                      table, "calls")] if scripts else []
    rows += [spend_row("infer", led.model, [*led.usage.values(), *led.failed_usage.values()], table)
             for led in ledgers]
    rows += [spend_row("score (judge)", name, (s.get("usage") or {}).values(), table, "calls")
             for name, s in scoring.items()]
    cost = (reference or {}).get("cost") or {}
    rows += [spend_row(stage, reference_name, [(cost.get(part) or {}).get("usage")], table, "calls")
             for stage, part in (("reference", "reference"), ("reference (judge)", "judge"))]
    return [r for r in rows if r is not None]


def describe_row(row: Mapping[str, Any]) -> str:
    """A :func:`spend_row` in one line: ``$0.0123 for 40 calls (prices ...); tokens in N / out M``."""
    usd = f"${row['usd']:,.4f}" if row["usd"] is not None else f"unpriced: {row['unpriced']}"
    return f"{usd} for {row['count']} {row['unit']}; tokens in {row['tokens_in']:,} / out {row['tokens_out']:,}"


def metered_key(target: str, params: Mapping[str, Any]) -> str | None:
    """The price table key (``provider/model``) of the model class ``target`` names when it meters a
    hosted API (it declares ``provider`` and ``credentials_env``), with ``params``; else None."""
    import inspect

    from harness.models.registry import model_class

    try:
        cls = model_class(target)
    except (ImportError, ValueError):
        return None
    if not getattr(cls, "credentials_env", ()) or not getattr(cls, "provider", ""):
        return None
    model = params.get("model")
    if model is None:
        default = inspect.signature(cls.__init__).parameters.get("model")
        model = None if default is None else default.default
    return f"{cls.provider}/{model}"


def is_metered(target: str) -> bool:
    """Does the model class ``target`` names meter a hosted API (it declares ``credentials_env``)?"""
    return metered_key(target, {}) is not None


def status_lines(ledgers: Iterable[Any], models: Iterable[Any], table: PriceTable | None = None) -> list[str]:
    """``make status`` lines: the API cost so far of each metered model of a run, from its shard
    markers and failure records only (``ledgers``: :class:`~harness.products.infer.ModelLedger`
    by model; ``models``: :class:`~harness.runtime.config.ModelSettings`)."""
    metered = [m for m in models if is_metered(m.target)]
    if not metered:
        return []
    table = table or load_prices()
    by_name = {led.model: led for led in ledgers}
    lines = []
    for m in metered:
        led = by_name[m.name]
        line = f"  api       {m.name:10} {ledger_cost(led.usage.values(), table).describe()}"
        failed = ledger_cost(led.failed_usage.values(), table)
        if failed.metered or led.failed_usage_unknown:
            line += f"; failed attempts: {failed.describe() if failed.metered else 'no usage'}"
            if led.failed_usage_unknown:
                line += f", {led.failed_usage_unknown} with usage unknown (the actor died)"
        lines.append(line)
    return lines
