"""Start-up: what importing the engine and running short commands loads (bench/startup.py times it).

``import engine`` loads nothing else; each public name's module loads on first use. No command and
no import but a replay loads trio.testing (and pytest with it); the command line loads neither
pydantic nor PyYAML for ``--help``; an engine built in code does not load PyYAML or watchfiles.
Each check runs in a fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import engine

ROOT = Path(__file__).parents[1]
NEVER = {"trio.testing", "pytest", "_pytest", "textual"}
"""Loaded by no short command and no engine import (only by a replay, or by the console)."""


def loaded_after(code: str, cwd: Path = ROOT) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_engine_loads_no_other_module_of_it_nor_anything_heavy() -> None:
    modules = loaded_after("import engine")
    assert sorted(m for m in modules if m.startswith("engine.")) == []
    heavy = {"pydantic", "yaml", "asyncio", "anyio", "trio", "watchfiles", "sqlite_utils", "rich"} | NEVER
    assert sorted(modules & heavy) == []


def test_an_engine_built_in_code_does_not_load_yaml_watchfiles_or_trio_testing() -> None:
    modules = loaded_after(
        "from engine import Engine, ToolCallExecutor, ToolManifest\n"
        "ToolCallExecutor(Engine([ToolManifest(id='t')]))"
    )
    assert "engine.engine" in modules and "engine.llm.executor" in modules
    assert sorted(modules & ({"yaml", "watchfiles"} | NEVER)) == []


def test_a_recording_can_be_loaded_without_trio_testing() -> None:
    modules = loaded_after("import engine.replay")
    assert sorted(modules & ({"trio", *NEVER})) == []


def test_tripwire_help_loads_neither_the_engine_proper_nor_pydantic() -> None:
    modules = loaded_after(
        "from console.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert "console.cli" in modules
    assert sorted(modules & ({"pydantic", "yaml", "anyio", "sqlite_utils", "engine.engine"} | NEVER)) == []


def test_tripwire_traces_list_loads_no_replay_machinery(tmp_path: Path) -> None:
    store = tmp_path / "traces.db"
    make = f"from engine.store import TraceStore\nwith TraceStore({str(store)!r}):\n    pass"
    subprocess.run([sys.executable, "-c", make], check=True, cwd=ROOT)
    modules = loaded_after(
        f"from console.cli import main\nassert main(['traces', 'list', '--traces', {str(store)!r}]) == 0",
        cwd=tmp_path,
    )
    assert "engine.store" in modules
    assert sorted(modules & ({"trio", "engine.replay", "yaml"} | NEVER)) == []


# --- the lazy package ----------------------------------------------------------------------------


def test_every_public_name_has_one_home_and_the_type_checker_sees_the_same() -> None:
    homes = engine._HOME_OF
    assert sorted(homes) == sorted(engine.__all__)
    tree = ast.parse((ROOT / "engine" / "__init__.py").read_text(encoding="utf-8"))
    typed = {
        alias.asname or alias.name: node.module
        for block in tree.body
        if isinstance(block, ast.If)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    declared = {
        node.target.id
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is None
    }
    assert typed == {name: homes[name] for name in homes if name not in declared}
    assert declared <= set(homes)


def test_each_name_is_the_object_its_module_defines() -> None:
    code = (
        "import importlib, engine\n"
        "wrong = [n for n, m in engine._HOME_OF.items()\n"
        "         if getattr(engine, n) is not getattr(importlib.import_module(m), n)]\n"
        "print(wrong)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "first",
    ["import engine.classify", "import engine.manifest", "from engine import Engine", "import engine"],
)
def test_engine_classify_is_the_function_whatever_loaded_first(first: str) -> None:
    code = (
        f"{first}\nimport engine, inspect\nfrom engine import classify\n"
        "import engine.classify as imported\n"
        "print(*(inspect.isfunction(f) for f in (engine.classify, classify, imported)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["True", "True", "True"]


def test_submodules_and_star_imports_work_as_with_an_eager_package() -> None:
    code = (
        "import engine\n"
        "assert engine.events.EVENT_TYPES is engine.EVENT_TYPES\n"
        "namespace = {}\n"
        "exec('from engine import *', namespace)\n"
        "assert set(engine.__all__) <= set(namespace) and set(engine.__all__) <= set(dir(engine))\n"
        "try:\n    engine.no_such_name\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "module 'engine' has no attribute 'no_such_name'"
