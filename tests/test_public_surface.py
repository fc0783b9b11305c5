"""The engine's public surface: ``engine`` and a few documented subpackages, each with ``__all__``.

Everything they export is importable and documented (in README, or by a docstring of its own);
README imports only from them; every other engine module says it is internal. (That the engine
never imports Textual or Rich is tests/test_import_hygiene.py's; here the public subpackages,
which that test does not import, are checked too.)
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

import engine

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

PUBLIC = (
    "engine",
    "engine.demo",
    "engine.events",
    "engine.faults",
    "engine.llm",
    "engine.replay",
    "engine.store",
    "engine.adapters",
    "engine.adapters.langgraph",
    "engine.adapters.mcp",
    "engine.adapters.openai_agents",
    "engine.adapters.pydantic_ai",
    "engine.exporters",
    "engine.exporters.otel",
    "engine.exporters.prometheus",
    "engine.fleet",
)
"""The stable places to import from; engine/__init__.py's docstring names the same ones."""


def _exports() -> list[tuple[str, str]]:
    return [(module, name) for module in PUBLIC for name in importlib.import_module(module).__all__]


@cache
def _module_ast(module: str) -> ast.Module:
    source = inspect.getsource(importlib.import_module(module))
    return ast.parse(source)


def _has_attribute_docstring(module: str, name: str, depth: int = 0) -> bool:
    """``name = …`` followed by a string literal in ``module``, or in the module it is imported from."""
    body = _module_ast(module).body
    for statement, following in zip(body, [*body[1:], None], strict=True):
        if isinstance(statement, ast.Assign):
            targets = [t.id for t in statement.targets if isinstance(t, ast.Name)]
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            targets = [statement.target.id]
        else:
            targets = []
        if name in targets:
            return (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            )
        if isinstance(statement, ast.ImportFrom) and statement.module and depth < 5:
            for alias in statement.names:
                if (alias.asname or alias.name) == name:
                    return _has_attribute_docstring(statement.module, alias.name, depth + 1)
    return False


def _own_docstring(obj: object) -> bool:
    if inspect.isclass(obj):
        doc = vars(obj).get("__doc__")
        # A dataclass without a docstring gets its signature as one: that documents nothing.
        return isinstance(doc, str) and bool(doc) and not doc.startswith(f"{obj.__name__}(")
    if inspect.isfunction(obj) or inspect.ismodule(obj):
        return bool(obj.__doc__)
    return False


def _in_readme(name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", README) is not None


@pytest.mark.parametrize(("module", "name"), _exports())
def test_every_export_is_importable_and_documented(module: str, name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module} import {name}", namespace)
    obj = namespace[name]
    documented = _in_readme(name) or _own_docstring(obj) or _has_attribute_docstring(module, name)
    assert documented, f"{module}.{name} is exported but neither in README nor documented by a docstring"


def test_each_public_place_has_its_all_and_engine_names_them() -> None:
    for module in PUBLIC:
        exported = importlib.import_module(module).__all__
        assert len(exported) == len(set(exported)), f"{module}.__all__ repeats a name"
    doc = engine.__doc__ or ""
    for module in PUBLIC[1:]:
        assert f":mod:`{module}`" in doc, f"engine's docstring does not name {module} as public"


def _engine_modules() -> list[ModuleType]:
    """engine's own modules and subpackages (not the modules inside a subpackage)."""
    return [importlib.import_module(f"engine.{m.name}") for m in pkgutil.iter_modules(engine.__path__)]


def test_every_other_engine_module_says_it_is_internal() -> None:
    not_said = [
        module.__name__
        for module in _engine_modules()
        if module.__name__ not in PUBLIC and "Internal:" not in (module.__doc__ or "")
    ]
    assert not_said == [], "neither public nor documented as internal ('Internal: …' in its docstring)"


def _readme_imports() -> list[tuple[str, list[str]]]:
    """Every ``from engine… import …`` and ``import engine…`` README shows, in code or in prose."""
    found: list[tuple[str, list[str]]] = []
    for m in re.finditer(r"from (engine[\w.]*) import (?:\(([^)]*)\)|([\w ,]+))", README):
        names = [n.split(" as ")[0].strip() for n in (m.group(2) or m.group(3)).split(",")]
        found.append((m.group(1), [n for n in names if n]))
    found += [(m.group(1), []) for m in re.finditer(r"^\s*import (engine[\w.]*)", README, flags=re.MULTILINE)]
    return found


def test_readme_imports_only_from_the_public_places() -> None:
    imports = _readme_imports()
    assert imports, "README shows no engine import: the pattern no longer finds them"
    for module, names in imports:
        assert module in PUBLIC, f"README imports from {module}, which is not a public place"
        exported = importlib.import_module(module).__all__
        for name in names:
            assert name in exported, f"README imports {name} from {module}, which does not export it"


WRAPPED = (
    "agents", "langgraph.prebuilt", "mcp", "opentelemetry.sdk.trace", "prometheus_client",
    "pydantic_ai", "redis",
)  # fmt: skip
"""The libraries the adapters and exporters wrap: pydantic-ai and LangGraph load Rich themselves."""


def test_the_public_places_do_not_import_textual_or_rich() -> None:
    """Beyond what the wrapped libraries load on their own (the static test sees every import)."""
    code = (
        "import sys\n"
        f"for name in {WRAPPED!r}: __import__(name)\n"
        "before = set(sys.modules)\n"
        f"for name in {PUBLIC!r}: __import__(name)\n"
        "new = set(sys.modules) - before\n"
        "bad = sorted(m for m in new if m.split('.')[0] in {'textual', 'rich', 'console'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"a public engine module imported: {out.stdout.strip()}"
