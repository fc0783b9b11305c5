"""Who may command the engine serving a store: its command key, the MAC of a command, its sender.

Writing the store is not enough to trip, reset or disable a breaker: the engine applies only
commands that carry an HMAC-SHA256 of their content (id, action, tool, reason, actor, host, pid,
created_at, expires_at) under the store's command key. The key is 32 random bytes in a file
beside the store (``traces.db.key``), created owner-only (``0600``, ``O_EXCL``) by the engine
side the first time it serves commands or submits one, and never overwritten. A key file that
others may read or write, or that another user owns, is refused: whoever can read the key can
command the engine, so only its owner may (see the README's "Security model").

The sender of a command is named by the operating system, never by the environment: the user
of the process (``pwd``, not ``$USER``), its host and its pid.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import pwd
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.errors import TraceStoreError
from engine.files import create_private_file
from engine.store.rows import CommandRow

KEY_SUFFIX = ".key"
KEY_BYTES = 32
DEFAULT_EXPIRY_S = 30.0
"""How long a command may wait for the engine unless its sender says otherwise."""
MAX_EXPIRY_S = 3600.0
"""The longest a command may wait: the engine refuses one that would stay valid longer."""
_DOMAIN = "tripwire-command-v1"
"""Part of every signed content: a MAC made for anything else never matches a command's."""


class CommandKeyError(TraceStoreError):
    """A command key that cannot be used: missing, unreadable, too open, another user's, or not a key."""


def command_key_path(store_path: str | Path) -> Path:
    """The key of the store at ``store_path``: beside it, its name plus ``.key``."""
    path = Path(store_path)
    return path.with_name(path.name + KEY_SUFFIX)


def read_key(path: Path) -> bytes:
    """The key in ``path``; raises :class:`CommandKeyError` unless it is ours alone and a key."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise CommandKeyError(
            path, "no command key: no engine has served operator commands on this store yet"
        ) from None
    except PermissionError:
        raise CommandKeyError(
            path, "cannot read the command key: permission denied (only its owner may command the engine)"
        ) from None
    except OSError as exc:
        if os.path.islink(path):
            raise CommandKeyError(path, "is a symbolic link, not a command key") from None
        raise CommandKeyError(path, f"cannot read the command key: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        _check_ours(path, info)
        data = os.read(fd, KEY_BYTES + 1)
    except OSError as exc:
        raise CommandKeyError(path, f"cannot read the command key: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise CommandKeyError(path, f"not a command key: {len(data)} bytes, expected {KEY_BYTES}")
    return data


def _check_ours(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise CommandKeyError(path, "not a regular file, so not a command key")
    if info.st_uid != os.getuid():
        raise CommandKeyError(
            path, f"the command key is owned by another user (uid {info.st_uid}, this is uid {os.getuid()})"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise CommandKeyError(
            path,
            f"the command key is open to others (mode {mode:04o}): chmod 600 it, or delete it for a new one",
        )


def load_or_create_key(path: Path) -> bytes:
    """The key in ``path``, created owner-only when there is none (never overwritten)."""
    try:
        return read_key(path)
    except CommandKeyError:
        if os.path.lexists(path):
            raise
    # Written whole under a private name, then linked into place: a key appears whole or not
    # at all, and of two processes creating it at once, one wins and both use its key.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = create_private_file(temporary)
    except OSError as exc:
        raise CommandKeyError(path, f"cannot create the command key: {exc.strerror or exc}") from None
    if fd is None:  # a name of our pid and 32 random bits, there already: not ours to touch
        raise CommandKeyError(path, f"cannot create the command key: {temporary} is in the way")
    try:
        try:
            with open(fd, "wb", closefd=False) as out:
                out.write(secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process made it first: its key is the key
        except OSError as exc:
            raise CommandKeyError(path, f"cannot create the command key: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    return read_key(path)


@dataclass(frozen=True, slots=True)
class Origin:
    """Who sends a command: the OS user of the process, its host and its pid."""

    user: str
    host: str
    pid: int


def command_origin() -> Origin:
    """This process, as the operating system names it (``$USER`` and the like are not asked)."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a container): its number is its name
        user = str(uid)
    return Origin(user, socket.gethostname(), os.getpid())


def signed_content(
    *,
    id: int,
    action: str,
    tool_id: str,
    reason: str,
    actor: str,
    host: str | None,
    pid: int | None,
    created_at: float,
    expires_at: float | None,
) -> bytes:
    """What a command's MAC covers, encoded one way only (JSON, keys sorted, times as floats)."""
    fields = {
        "domain": _DOMAIN,
        "id": int(id),
        "action": action,
        "tool_id": tool_id,
        "reason": reason,
        "actor": actor,
        "host": host,
        "pid": None if pid is None else int(pid),
        "created_at": float(created_at),
        "expires_at": None if expires_at is None else float(expires_at),
    }
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def sign(key: bytes, content: bytes) -> str:
    """HMAC-SHA256 of ``content`` (from :func:`signed_content`), in hex."""
    return hmac.new(key, content, hashlib.sha256).hexdigest()


def command_content(command: CommandRow) -> bytes:
    return signed_content(
        id=command.id, action=command.action, tool_id=command.tool_id, reason=command.reason,
        actor=command.actor, host=command.host, pid=command.pid, created_at=command.created_at,
        expires_at=command.expires_at,
    )  # fmt: skip


def verify(key: bytes, command: CommandRow) -> bool:
    """Whether ``command`` carries the MAC of its content under ``key`` (in constant time)."""
    if not command.mac or not isinstance(command.mac, str):
        return False
    try:
        content = command_content(command)
    except (TypeError, ValueError, OverflowError):  # a row nobody signed: a NaN time, a pid in words
        return False
    return hmac.compare_digest(sign(key, content).encode(), command.mac.encode(errors="replace"))


__all__ = [
    "DEFAULT_EXPIRY_S",
    "KEY_BYTES",
    "MAX_EXPIRY_S",
    "CommandKeyError",
    "Origin",
    "command_content",
    "command_key_path",
    "command_origin",
    "load_or_create_key",
    "read_key",
    "sign",
    "signed_content",
    "verify",
]
