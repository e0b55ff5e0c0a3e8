"""The import rules of harness/ (docs/architecture.md, README "Layout"), read from the source: no
import circle between modules at import time, Ray imported only under harness/runtime/, and no
stage module importing another stage module."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def _module(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in HARNESS.rglob("*.py")}


def _imports(path: Path, module_level: bool) -> set[str]:
    """Dotted names ``path`` imports (``from a import b``: ``a`` and ``a.b``), relative ones resolved;
    ``module_level``: only what runs when the module is imported (not inside functions or classes'
    methods, not under ``if TYPE_CHECKING``)."""
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]

    def walk(nodes: list[ast.stmt]):
        for n in nodes:
            if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                continue
            if module_level and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if isinstance(n, ast.ClassDef):  # a class body runs at import; its methods do not
                    yield from walk([b for b in n.body if not isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))])
                continue
            yield n
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from walk([x for x in getattr(n, field, []) if isinstance(x, (ast.stmt, ast.ExceptHandler))])

    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = walk(tree.body) if module_level else ast.walk(tree)
    out: set[str] = set()
    for n in nodes:
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = package.split(".")[: len(package.split(".")) - (n.level - 1)]
                base = ".".join([*up, base] if base else up)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in n.names)
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the harness modules importing it runs (each imported module's parent packages too)."""
    graph = {}
    for name, path in MODULES.items():
        deps = {".".join(d.split(".")[:k]) for d in _imports(path, True) for k in range(1, d.count(".") + 2)}
        graph[name] = {d for d in deps if d in MODULES and d != name and not name.startswith(d + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated at the end), else None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return [*path[path.index(w):], w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_import_circle():
    assert _cycle(_graph()) is None


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_ray_is_imported_only_under_runtime():
    outside = {name: sorted(m for m in _imports(path, False) if m == "ray" or m.startswith("ray."))
               for name, path in MODULES.items() if not name.startswith("harness.runtime")}
    assert {name: found for name, found in outside.items() if found} == {}


def test_no_stage_module_imports_another_stage_module():
    stages = {n for n in MODULES if n.startswith("harness.stages.")}
    for name in stages:
        assert not (_imports(MODULES[name], False) & (stages - {name})), name
