"""Where tripwire finds its files when nobody says: manifests, the trace store, the bundled data.

Paths given by the user are taken relative to the current directory. Without one:

- **manifests**: ``./manifests`` when the current directory has one (a project of yours),
  otherwise the bundled travel-agent manifests and demo scenarios that ship with the package;
- **the trace store**: ``./traces/traces.db`` when the current directory has a ``traces/``
  directory (a project), otherwise ``$XDG_DATA_HOME/tripwire/traces.db`` (by default
  ``~/.local/share/tripwire/traces.db``); the store creates its directory owner-only.

The bundled manifests are the repository's top-level ``manifests/``: a wheel carries them as
``engine/manifests`` (package data); an editable install reads the repository's own copy.

Internal: shared by the engine and the console, not API.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

PROJECT_MANIFESTS = Path("manifests")
PROJECT_TRACES = Path("traces")
TRACES_FILE = "traces.db"
_REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Location:
    """A path tripwire chose, and why: shown wherever it matters (``tripwire traces where``)."""

    path: Path
    why: str


def bundled_manifests() -> Path:
    """The travel-agent manifests, ``defaults.yaml``, ``demo/`` and ``starter/`` shipped with tripwire."""
    packaged = resources.files("engine").joinpath("manifests")
    if isinstance(packaged, Path) and packaged.is_dir():  # installed from a wheel
        return packaged
    return _REPOSITORY / "manifests"  # an editable install: the repository's own


def default_manifests(cwd: Path | None = None) -> Location:
    """``./manifests`` in a project that has one, else the bundled ones."""
    here = (cwd or Path.cwd()) / PROJECT_MANIFESTS
    if here.is_dir():
        return Location(PROJECT_MANIFESTS if cwd is None else here, "this project's manifests/")
    return Location(bundled_manifests(), "the bundled demo manifests (no manifests/ here)")


def data_directory(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/tripwire``, or ``~/.local/share/tripwire`` (the XDG base directory rule)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path(env.get("HOME") or Path.home()) / ".local" / "share"
    return root / "tripwire"


def default_trace_store(cwd: Path | None = None) -> Location:
    """``./traces/traces.db`` in a project with a ``traces/`` directory, else the user's data directory."""
    here = (cwd or Path.cwd()) / PROJECT_TRACES
    if here.is_dir():
        path = PROJECT_TRACES / TRACES_FILE if cwd is None else here / TRACES_FILE
        return Location(path, "this project's traces/ directory")
    return Location(data_directory() / TRACES_FILE, "your data directory (no traces/ here)")


__all__ = [
    "Location",
    "bundled_manifests",
    "data_directory",
    "default_manifests",
    "default_trace_store",
]
