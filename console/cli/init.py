"""``tripwire init``: a starter project — manifests, a first scenario, and a trace store directory.

The templates are the bundled ``manifests/starter/`` (shipped with the package like the demo).
Nothing that exists is overwritten: every file is checked before any is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine.errors import TripwireError
from engine.files import make_private_directories, write_private_file
from engine.locations import PROJECT_TRACES, bundled_manifests

STARTER = "starter"
TRACES_IGNORE = "# the trace store: recorded turns (tool inputs and results), not for version control\n*\n"


class ProjectExists(TripwireError):
    """``tripwire init`` would overwrite something; ``str()`` is one line naming it."""


@dataclass(frozen=True, slots=True)
class StarterFile:
    target: Path
    """Relative to the project."""
    content: bytes


def starter_files() -> list[StarterFile]:
    """What ``tripwire init`` writes, relative to the project directory."""
    source = bundled_manifests() / STARTER
    files = [
        StarterFile(path.relative_to(source), path.read_bytes()) for path in sorted(source.rglob("*.yaml"))
    ]
    return [*files, StarterFile(PROJECT_TRACES / ".gitignore", TRACES_IGNORE.encode())]


def init_project(directory: Path) -> list[Path]:
    """Write the starter project into ``directory`` (created if missing); the files written.

    Raises :class:`ProjectExists` — before writing anything — if any of them is there already.
    """
    files = starter_files()
    if directory.exists() and not directory.is_dir():
        raise ProjectExists(f"{directory}: not a directory")
    taken = [f.target for f in files if os.path.lexists(directory / f.target)]
    if taken:
        listed = ", ".join(str(directory / t) for t in taken)
        raise ProjectExists(f"{listed}: already there; tripwire init never overwrites (remove it first)")
    written = []
    for file in files:
        path = directory / file.target
        make_private_directories(path.parent)  # 0700, like every file here 0600: the owner's
        write_private_file(path, file.content)  # exclusive: a file that appeared meanwhile stays
        written.append(path)
    return written


__all__ = ["ProjectExists", "StarterFile", "init_project", "starter_files"]
