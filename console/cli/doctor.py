"""``tripwire doctor`` and the start-up check: is this tripwire, whole, and where will it look?

tripwire's top-level packages are named ``engine`` and ``console``, and PyPI has an unrelated
``console`` package: installed into one environment, one overwrites files of the other. Each
of tripwire's packages carries a ``__tripwire__`` marker, so a foreign module in its place is
named plainly instead of failing somewhere deep with an AttributeError.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import sys
from pathlib import Path
from types import ModuleType

from engine.locations import default_manifests, default_trace_store

PACKAGES = ("engine", "console")
LIBRARIES = ("textual", "rich", "anyio", "pydantic", "watchfiles", "sqlite-utils")


def version() -> str:
    """The installed distribution's version."""
    try:
        return importlib.metadata.version("tripwire")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _module(name: str) -> ModuleType | None:
    try:
        return sys.modules.get(name) or importlib.import_module(name)
    except Exception:  # a broken foreign package: it is not ours either
        return None


def foreign_package(name: str) -> str | None:
    """Why the module importable as ``name`` is not tripwire's, or None when it is."""
    module = _module(name)
    if module is not None and getattr(module, "__tripwire__", False) is True:
        return None
    where = getattr(module, "__file__", None) or "(cannot be imported)"
    return (
        f"the `{name}` module at {where} is not tripwire's: another package named {name!r} is "
        f"installed in this environment (PyPI's `{name}` is an unrelated project); install tripwire "
        "in an environment of its own: `pipx install tripwire`, or a virtual environment just for it"
    )


def startup_problem() -> str | None:
    """The first foreign package in tripwire's place, or None: checked before every command."""
    for name in PACKAGES:
        if (problem := foreign_package(name)) is not None:
            return problem
    return None


def report(terminal: str | None) -> tuple[list[str], bool]:
    """``tripwire doctor``'s lines and whether all is well; ``terminal`` is why there is no
    usable terminal, or None."""
    lines = [f"tripwire {version()} · Python {platform.python_version()} ({sys.executable})"]
    healthy = True
    for name in PACKAGES:
        problem = foreign_package(name)
        module = _module(name)
        where = Path(getattr(module, "__file__", "") or "?").parent
        lines.append(f"{name + ':':<11}{where} ({'tripwire' if problem is None else 'NOT tripwire'})")
        if problem is not None:
            healthy = False
            lines.append(f"           {problem}")
    found = []
    for library in LIBRARIES:
        try:
            found.append(f"{library} {importlib.metadata.version(library)}")
        except importlib.metadata.PackageNotFoundError:
            healthy = False
            found.append(f"{library} MISSING")
    lines.append(f"{'libraries:':<11}{' · '.join(found)}")
    manifests, traces = default_manifests(), default_trace_store()
    lines.append(f"{'manifests:':<11}{manifests.path.absolute()} ({manifests.why})")
    state = "exists" if traces.path.exists() else "created on first record"
    lines.append(f"{'traces:':<11}{traces.path.absolute()} ({traces.why}; {state})")
    lines.append(f"{'terminal:':<11}{'ok' if terminal is None else f'{terminal}: the console needs one'}")
    return lines, healthy


__all__ = ["foreign_package", "report", "startup_problem", "version"]
