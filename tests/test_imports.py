"""No import cycles among the modules of simasgd/ and executors/.

The graph counts every import, at module level or inside a function (a function-level import
between two modules that import each other is still a cycle: it only defers the failure, and
it hides the layering). Relative imports are resolved; ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, and to ``pkg`` always (the name is looked up in the package's
namespace, which its ``__init__`` fills).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simasgd", "executors")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a relative import ``from <level dots><target> import ...``."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)




def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``module`` imports anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node.level, node.module) if node.level else node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in known:
                    out.add(sub)
            if source in known:
                out.add(source)
    out.discard(module)
    return out


def graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on deep chains): the graph's SCCs."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    return sorted(c for c in strongly_connected(edges) if len(c) > 1)


def _describe(component: list[str], edges: dict[str, set[str]]) -> str:
    members = set(component)
    lines = [f"  {m} -> {', '.join(sorted(edges[m] & members))}" for m in component]
    return "\n".join([" <-> ".join(component), *lines])


def test_tarjan_finds_a_cycle_and_only_it() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": set(), "f": {"f"}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_graph_resolves_relative_and_submodule_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from ..top import g\n")
    (pkg / "top.py").write_text("from pkg.sub import leaf\n")
    edges = graph(tmp_path, ["pkg"])
    assert edges["pkg.sub"] == {"pkg.sub.leaf"}  # the package itself is no edge
    assert "pkg.top" in edges["pkg.sub.leaf"]  # function-level and relative
    assert "pkg.sub.leaf" in edges["pkg.top"]  # from package import submodule
    assert cycles(edges) == [["pkg.sub", "pkg.sub.leaf", "pkg.top"]]


def test_no_import_cycles() -> None:
    edges = graph()
    assert len(edges) > 50  # the walk found the packages
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(_describe(c, edges) for c in found)
