"""The usage ledger's prices: cost of hosted models computed later from stored usage.

A hosted model's adapter stores each conversation's raw usage in its record
(:meth:`harness.models.base.DuplexModel.usage`): ``provider``, ``model`` and ``tokens``, a
mapping of **disjoint** token kinds to counts (``input_text``, ``input_text_cached``,
``input_audio``, ``input_audio_cached``, ``output_text``, ``output_audio``). Nothing is priced
when a run streams; a cost is ``sum(count * price)`` under a **price table**: a dated,
versioned YAML file in ``harness/pricing/tables/`` (``v1.yaml``, ...; USD per million tokens of
each kind, keyed ``provider/model`` by exact id). Re-pricing an old run under a newer table
reads its records and needs no rerun.

A conversation is **unpriced** (never $0) when its model has no entry in the table or it used
a token kind the entry has no price for; summaries count unpriced conversations apart and say
why. A conversation that ended while the service still owed a reply's usage (``owed_at_close``)
is priced as counted and flagged: its cost is a lower bound. A conversation without usage (a
model that meters nothing) is not part of the ledger.
"""

from __future__ import annotations

import json
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
        missing = sorted(k for k, n in tokens.items() if n and k not in prices)
        if missing:
            return Cost(None, f"{key} has no price for {', '.join(missing)} in {self.label}")
        return Cost(sum(n * prices[k] for k, n in tokens.items() if n) / 1e6)


@dataclass(frozen=True)
class Cost:
    """``usd`` is None when unpriced, and ``unpriced`` then says why."""

    usd: float | None
    unpriced: str | None = None


@dataclass
class LedgerCost:
    """The cost of many conversations' usage under one table."""

    table: str  # PriceTable.label
    metered: int = 0  # conversations with usage
    priced: int = 0
    usd: float = 0.0  # of the priced ones only
    unpriced: Counter = field(default_factory=Counter)  # reason -> conversations
    undercounted: int = 0  # conversations that ended while the service still owed usage (``owed_at_close``)
    tokens: Counter = field(default_factory=Counter)  # token kind -> count, over every metered conversation

    def describe(self) -> str:
        """One line, e.g. ``API $12.34 for 40 conversations (prices v1 as of ...); 2 unpriced: ...``."""
        if not self.metered:
            return "no metered usage"
        text = f"API ${self.usd:,.2f} for {self.priced} conversations ({self.table})"
        if self.unpriced:
            text += f"; {sum(self.unpriced.values())} unpriced: " + "; ".join(
                f"{why} ({n})" for why, n in self.unpriced.most_common())
        if self.undercounted:
            text += f"; {self.undercounted} ended with a reply's usage still owed (a lower bound)"
        return text


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


def ledger_cost(usages: Iterable[Mapping[str, Any] | None], table: PriceTable) -> LedgerCost:
    """Price every usage of ``usages`` (None entries, from models that meter nothing, are skipped)."""
    out = LedgerCost(table.label)
    for usage in usages:
        if not usage:
            continue
        out.metered += 1
        out.undercounted += bool(usage.get("owed_at_close"))
        out.tokens.update({k: int(n) for k, n in (usage.get("tokens") or {}).items()})
        cost = table.cost(usage)
        if cost.usd is None:
            out.unpriced[cost.unpriced] += 1
        else:
            out.priced += 1
            out.usd += cost.usd
    return out


def stored_usages(store: Any, plan: Any, model: str) -> list[dict]:
    """The ``usage`` of every conversation of ``model``'s committed shards in a run (one read per
    conversation: meant for hosted models, whose runs are small). Incomplete shards are left out;
    usage of failed attempts is not stored anywhere (docs/models.md)."""
    from harness.runtime.ledger import read_ledger
    from harness.runtime.shard import read_output

    led = read_ledger(store, plan, model, failures=False)
    out = []
    for marker in led.markers.values():
        for entry in marker["conversations"].values():
            if "json" in entry.get("objects", {}):
                usage = json.loads(read_output(store, entry, "json")).get("usage")
                if usage:
                    out.append(usage)
    return out


def is_metered(target: str) -> bool:
    """Does the model class ``target`` names meter a hosted API (it declares ``credentials_env``)?"""
    from harness.models.registry import model_class

    try:
        return bool(getattr(model_class(target), "credentials_env", ()))
    except (ImportError, ValueError):
        return False


def status_lines(store: Any, plan: Any, models: Iterable[Any], table: PriceTable | None = None) -> list[str]:
    """``make status`` lines: the API cost so far of each metered model of a run (``models``:
    :class:`~harness.runtime.config.ModelSettings`)."""
    metered = [m for m in models if is_metered(m.target)]
    if not metered:
        return []
    table = table or load_prices()
    return [f"  api       {m.name:10} {ledger_cost(stored_usages(store, plan, m.name), table).describe()}"
            for m in metered]
