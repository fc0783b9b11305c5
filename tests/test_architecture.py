"""The code's shape, checked: no import cycles, modules a reader can take in one sitting,
layers that only look down (the engine never sees the console; widgets never see screens).

The import graph is read from the source (``ast``), not by importing: every import counts —
module level, under ``TYPE_CHECKING`` and inside functions — so a cycle cannot hide behind a
late import or a type-only one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "console")
MAX_LINES = 600
UI = {"textual", "rich"}
DATA_TABLES: dict[str, str] = {}
"""Modules allowed past ``MAX_LINES`` because most of their length is a data table, and why."""


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[Import]:
    """Every first-party module ``path`` imports; ``from a import b`` names ``a.b`` when it is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield Import(name, target, node.lineno)
                elif base in known:
                    yield Import(name, base, node.lineno)


def graph() -> dict[str, list[Import]]:
    known = modules()
    edges: dict[str, list[Import]] = {}
    for name, path in known.items():
        edges[name] = [i for i in imports_of(name, path, known) if i.target != name]
    return edges


def find_cycle(edges: dict[str, list[Import]]) -> list[Import] | None:
    """One cycle as the imports that make it, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(edges):
        if start in state:
            continue
        stack: list[tuple[str, Iterator[Import]]] = [(start, iter(edges[start]))]
        path: list[Import] = []
        state[start] = 1
        while stack:
            node, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                state[node] = 2
                stack.pop()
                if path:
                    path.pop()
                continue
            if state.get(step.target) == 1:
                loop = [*path, step]
                first = next(i for i, edge in enumerate(loop) if edge.source == step.target)
                return loop[first:]
            if step.target not in state:
                state[step.target] = 1
                path.append(step)
                stack.append((step.target, iter(edges.get(step.target, []))))
    return None


def describe(cycle: list[Import]) -> str:
    return " → ".join(f"{i.source} (line {i.line})" for i in cycle) + f" → {cycle[0].source}"


def test_no_import_cycles() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, f"import cycle: {describe(cycle)}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    a_b, b_c, c_a = Import("a", "b", 1), Import("b", "c", 2), Import("c", "a", 3)
    assert find_cycle({"a": [a_b], "b": [b_c], "c": [c_a]}) == [a_b, b_c, c_a]
    assert find_cycle({"a": [a_b], "b": [b_c], "c": []}) is None


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_stay_readable_in_one_sitting(name: str) -> None:
    path = modules()[name]
    lines = len(path.read_text(encoding="utf-8").splitlines())
    relative = str(path.relative_to(ROOT))
    if relative in DATA_TABLES:
        return
    assert lines <= MAX_LINES, f"{relative} has {lines} lines (> {MAX_LINES}): split it by concept"


def test_layers_only_look_down() -> None:
    edges = graph()
    wrong = [
        f"{i.source} imports {i.target} (line {i.line})"
        for imports in edges.values()
        for i in imports
        if (i.source.startswith("engine") and i.target.startswith("console"))
        or (i.source.startswith("console.widgets") and i.target.startswith("console.screens"))
    ]
    assert wrong == []


def test_the_engine_never_names_textual_or_rich() -> None:
    """Statically, every module: the import test (test_import_hygiene.py) only sees what loads."""
    named = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            named += [f"{path.name}:{node.lineno} {n}" for n in names if n.partition(".")[0] in UI]
    assert named == []
