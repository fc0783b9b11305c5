"""The files tripwire makes are its owner's: ``0600`` files, ``0700`` directories, whatever the umask.

Traces hold tool inputs and results, export files the same, the command key lets its reader
steer the engine: none of them is for other users of the machine. The modes are given at
creation — to every missing parent directory too, which ``mkdir -p`` would make with the
umask's leave (0777 under a umask of 000) — and a umask can only narrow them further.

Internal: shared by the engine and the console, not API.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


def make_private_directories(directory: Path) -> None:
    """Create ``directory`` and any missing parents, each new one ``0700`` (existing ones untouched).

    Raises NotADirectoryError when the nearest existing one is a file."""
    missing: list[Path] = []
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise NotADirectoryError(f"{candidate} is not a directory")
            break
        missing.append(candidate)
    for new in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by someone else: left as it is
            new.mkdir(mode=DIRECTORY_MODE)


def create_private_file(path: Path) -> int | None:
    """Create ``path`` (``0600``, exclusive) and return its open descriptor; None if it exists."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return None


def write_private_file(path: Path, content: bytes) -> None:
    """Write a new ``0600`` file; raises FileExistsError rather than replace one."""
    fd = create_private_file(path)
    if fd is None:
        raise FileExistsError(path)
    with open(fd, "wb") as out:
        out.write(content)


def read_private_file(path: Path, limit: int) -> bytes | str:
    """The content of ``path`` (at most ``limit`` bytes), which must be a regular file of this
    process's user that no one else may read or write (a secret's file) — or why not, on one line."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return f"{path} does not exist"
    except PermissionError:
        return f"{path}: permission denied"
    except OSError as exc:
        if os.path.islink(path):
            return f"{path} is a symbolic link: name the file itself"
        return f"{path}: {exc.strerror or exc}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"{path} is not a regular file"
        if info.st_uid != os.getuid():
            return f"{path} is owned by another user (uid {info.st_uid}, this is uid {os.getuid()})"
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            return f"{path} is open to others (mode {mode:04o}): chmod 600 it"
        data = os.read(fd, limit + 1)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return data if len(data) <= limit else f"{path} is longer than {limit} bytes"


def wider_than_owner(path: Path) -> int | None:
    """The file's permission bits when others (group or world) may use it, else None."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return mode if mode & 0o077 else None


def owned_by_someone_else(path: Path) -> int | None:
    """The owner's uid when it is not this process's user, else None."""
    uid = os.stat(path).st_uid
    return uid if uid != os.getuid() else None


__all__ = [
    "DIRECTORY_MODE",
    "FILE_MODE",
    "create_private_file",
    "make_private_directories",
    "owned_by_someone_else",
    "read_private_file",
    "wider_than_owner",
    "write_private_file",
]
