"""Writing an export file safely: whole or not at all, owner-only, never onto the store itself.

A temporary file (mode 0600) beside the target is written, synced and then moved into place,
so the target appears whole or not at all and an existing one is left as it was after a
failure. The store being read is never a target, by whatever path names it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

from engine.errors import TripwireError


class ExportRefused(TripwireError):
    """An export that would destroy something, or cannot be written; ``str()`` is one line.

    ``remedy`` names what would make it work: ``"force"`` (the target exists and is replaced
    only when asked to) or ``"stream"`` (the target is no regular file: write to a stream).
    """

    def __init__(self, path: str | Path, problem: str, *, remedy: Literal["force", "stream"] | None = None):
        self.path = str(path)
        self.problem = problem
        self.remedy = remedy
        hint = {"force": "; pass force=True to replace it", "stream": "; write to a stream instead"}
        super().__init__(f"{self.path}: {problem}{hint.get(remedy or '', '')}")


_STORE_FILES = ("", "-wal", "-shm", "-journal", ".key")
"""A trace store is these files (SQLite's, and the command key): writing onto any would destroy it."""


def export_target(output: Path, store: Path, *, force: bool) -> Path:
    """Where an export to ``output`` may write (symlinks resolved), or :class:`ExportRefused`.

    Never the store being read, by any path to it, even with ``force``; an existing file only
    with ``force``; never a directory, a device or a pipe (write to a stream instead).
    """
    shown = output
    real = Path(os.path.realpath(output))
    if real.is_dir():
        raise ExportRefused(shown, "is a directory; name a file to write")
    if not real.parent.is_dir():
        raise ExportRefused(shown, f"no such directory: {real.parent}")
    if _is_store_file(real, store):
        raise ExportRefused(shown, f"that is the trace store being exported ({store}); name another file")
    if os.path.lexists(output) or real.exists():
        if real.exists() and not stat.S_ISREG(real.stat().st_mode):
            raise ExportRefused(shown, "not a regular file", remedy="stream")
        if not force:
            raise ExportRefused(shown, "already exists", remedy="force")
    return real


def _is_store_file(real: Path, store: Path) -> bool:
    """``real`` is one of the store's files: by name, or as the same file (hard link, other path)."""
    base = os.path.realpath(store)
    if str(real) in {base + suffix for suffix in _STORE_FILES}:
        return True
    try:
        target = real.stat()
    except OSError:
        return False
    for suffix in _STORE_FILES:
        try:
            found = os.stat(base + suffix)
        except OSError:
            continue
        if (found.st_dev, found.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def write_new_file(target: Path, write: Callable[[IO[str]], int], *, replace: bool, shown: str | Path) -> int:
    """Write a temporary file (owner-only) beside ``target``, sync it, then move it into place.

    Without ``replace`` a file that appeared at ``target`` meanwhile is not replaced. On any
    failure the temporary file is removed and ``target`` is left as it was.
    """
    try:
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise ExportRefused(shown, f"cannot write in {target.parent}: {exc.strerror}") from None
    try:
        with open(fd, "w", encoding="utf-8") as stream:
            count = write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        if replace:
            os.replace(temp, target)
        else:
            _link_new(temp, target, shown)
    except OSError as exc:
        raise ExportRefused(shown, f"{exc.strerror or exc}; nothing written") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    _sync_directory(target.parent)
    return count


def _link_new(temp: str, target: Path, shown: str | Path) -> None:
    """Give ``temp`` the name ``target`` only if nothing has it: link() never replaces."""
    try:
        os.link(temp, target)
    except FileExistsError:
        raise ExportRefused(shown, "already exists", remedy="force") from None
    except OSError:  # a file system without hard links: check, then rename
        if os.path.lexists(target):
            raise ExportRefused(shown, "already exists", remedy="force") from None
        os.replace(temp, target)


def _sync_directory(directory: Path) -> None:
    """Make the new name durable too; not every system can open a directory."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
