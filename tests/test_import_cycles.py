"""No import cycles among kathikon's modules, counting every import in a file.

Imports inside functions and under ``TYPE_CHECKING`` count too: moving an import
into a function hides a cycle from Python, not from the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kathikon"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(root: Path, path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports (``from pkg import sub`` names ``pkg.sub``)."""
    this = module_name(root, path)
    package = this.split(".") if path.name == "__init__.py" else this.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                          else source)
    # A package's __init__ runs on the way to any submodule; only real modules tie.
    return {name for name in found if name in modules and name not in (this, root.name)}


def import_graph(root: Path) -> dict[str, set[str]]:
    files = [p for p in root.rglob("*.py") if "migrations" not in p.parts]
    modules = {module_name(root, p) for p in files}
    return {module_name(root, p): imported_modules(root, p, modules) for p in files}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def describe(graph: dict[str, set[str]], group: list[str]) -> str:
    return "; ".join(f"{a} -> {b}" for a in group for b in sorted(graph[a] & set(group)))


def test_kathikon_has_no_import_cycles():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50  # the walk found the package
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(describe(graph, g) for g in found)


@pytest.mark.parametrize("sources, expected", [
    ({"a": "from kathikon import b\n", "b": "def f():\n    from kathikon.a import x\n"},
     [["kathikon.a", "kathikon.b"]]),
    ({"a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kathikon.b\n",
      "b": "from . import c\n", "c": "from .a import y\n"},
     [["kathikon.a", "kathikon.b", "kathikon.c"]]),
    ({"a": "from kathikon import b\n", "b": "import os\n"}, []),
])
def test_the_check_sees_function_level_and_type_checking_imports(tmp_path, sources, expected):
    root = tmp_path / "kathikon"
    root.mkdir()
    (root / "__init__.py").write_text("from kathikon.a import x\n")  # __init__ ties nothing
    for name, text in sources.items():
        (root / f"{name}.py").write_text(text)
    assert cycles(import_graph(root)) == expected
