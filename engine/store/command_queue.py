"""The ``commands`` table: operator actions queued for the engine serving the store.

A console attached to the store queues them, signed with the store's command key
(:mod:`engine.store.command_auth`); :mod:`engine.store.operator_commands` checks, applies and
acknowledges them in the engine's process. The table is also the audit of operator actions:
who sent what, when, why, and what became of it (applied, failed, refused and why).
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Literal

from engine.errors import TraceStoreError, one_line
from engine.store.base import StoreCore
from engine.store.command_auth import (
    DEFAULT_EXPIRY_S,
    MAX_EXPIRY_S,
    Origin,
    command_key_path,
    command_origin,
    load_or_create_key,
    read_key,
    sign,
    signed_content,
)
from engine.store.opening import rollback
from engine.store.rows import COMMAND_ACTIONS, CommandAction, CommandRow

COMMAND_COLUMNS = (
    "id, created_at, action, tool_id, actor, reason, status, applied_at, result, expires_at, host, pid, mac"
)
ACKNOWLEDGED = ("applied", "failed", "refused")
TAKING_COMMANDS = "operator_commands"
"""The ``meta`` key by which a service says whether it takes operator commands (``on``/``off``)."""


class CommandQueue(StoreCore):
    """Submitting, listing and acknowledging operator commands."""

    @property
    def command_key_path(self) -> Path:
        """Where this store's command key is: beside it (``traces.db.key``)."""
        return command_key_path(self.path)

    def command_key(self, *, create: bool = True) -> bytes:
        """This store's command key; created owner-only when there is none, if ``create`` and this
        store is open read-write. Raises :class:`~engine.store.command_auth.CommandKeyError`."""
        if create and not self.readonly:
            return load_or_create_key(self.command_key_path)
        return read_key(self.command_key_path)

    def submit_command(
        self,
        action: CommandAction,
        tool_id: str,
        *,
        reason: str = "",
        expires_in_s: float = DEFAULT_EXPIRY_S,
        now: float | None = None,
        key: bytes | None = None,
    ) -> int:
        """Queue an operator action for the engine serving this store; returns the command's id.

        The command names this process (its OS user, host and pid) and is signed with ``key``,
        by default this store's command key (made if there is none). Not applied within
        ``expires_in_s`` by the engine's clock, it is refused.
        """
        self._refuse_writes("submit commands")
        if action not in COMMAND_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(COMMAND_ACTIONS)}, got {action!r}")
        if not tool_id:
            raise ValueError(f"a command needs a tool, got {tool_id!r}")
        if not (0 < expires_in_s <= MAX_EXPIRY_S):  # NaN too
            raise ValueError(f"expires_in_s must be above 0 and at most {MAX_EXPIRY_S:g}, got {expires_in_s}")
        signing_key = self.command_key() if key is None else key
        origin = command_origin()
        created_at = self._wall_clock() if now is None else now
        if not math.isfinite(created_at):
            raise ValueError(f"now must be a finite time, got {created_at}")
        return self._insert_signed(
            action, tool_id, reason, origin, created_at, created_at + expires_in_s, signing_key
        )

    def _insert_signed(
        self,
        action: CommandAction,
        tool_id: str,
        reason: str,
        origin: Origin,
        created_at: float,
        expires_at: float,
        key: bytes,
    ) -> int:
        # The id is covered by the MAC and only known once inserted: signed in the same
        # transaction, so no reader ever sees the command unsigned.
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    cursor = self._conn.execute(
                        "INSERT INTO commands (created_at, action, tool_id, actor, reason, expires_at, host,"
                        " pid) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            created_at,
                            action,
                            tool_id,
                            origin.user,
                            reason,
                            expires_at,
                            origin.host,
                            origin.pid,
                        ),
                    )
                    command_id = cursor.lastrowid
                    assert command_id is not None
                    content = signed_content(
                        id=command_id, action=action, tool_id=tool_id, reason=reason, actor=origin.user,
                        host=origin.host, pid=origin.pid, created_at=created_at, expires_at=expires_at,
                    )  # fmt: skip
                    self._conn.execute(
                        "UPDATE commands SET mac = ? WHERE id = ?", (sign(key, content), command_id)
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    rollback(self._conn)
                    raise
            except sqlite3.Error as exc:
                raise self._fail("submitting a command", exc) from None
        return command_id

    def pending_commands(self, limit: int = 100) -> list[CommandRow]:
        """Commands not acknowledged yet, oldest first."""
        with self._lock:
            rows = self._query(
                f"SELECT {COMMAND_COLUMNS} FROM commands WHERE status = 'pending' ORDER BY id LIMIT ?",
                (limit,),
            )
        return [CommandRow(*row) for row in rows]

    def acknowledge_command(
        self,
        command_id: int,
        status: Literal["applied", "failed", "refused"],
        result: str,
        *,
        now: float | None = None,
    ) -> bool:
        """Mark a pending command applied, failed or refused, with its result (for a refusal, why);
        False if it was not pending."""
        self._refuse_writes("acknowledge commands")
        if status not in ACKNOWLEDGED:
            raise ValueError(f"status must be 'applied', 'failed' or 'refused', got {status!r}")
        with self._lock:
            try:
                cursor = self._conn.execute(
                    "UPDATE commands SET status = ?, result = ?, applied_at = ?"
                    " WHERE id = ? AND status = 'pending'",
                    (status, one_line(result), self._wall_clock() if now is None else now, command_id),
                )
            except sqlite3.Error as exc:
                raise self._fail("acknowledging a command", exc) from None
        return cursor.rowcount == 1

    def command(self, command_id: int) -> CommandRow:
        """One command, as it stands; raises if there is no such command."""
        with self._lock:
            rows = self._query(f"SELECT {COMMAND_COLUMNS} FROM commands WHERE id = ?", (command_id,))
        if not rows:
            raise TraceStoreError(self.path, f"no command {command_id}", untouched=False)
        return CommandRow(*rows[0])

    def command_history(
        self, *, since: float | None = None, until: float | None = None, limit: int = 50
    ) -> list[CommandRow]:
        """Operator commands, newest first: the audit. A command's time is when the engine answered
        it, or when it was sent while it is pending (its sender's clock may be anything)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        when = "COALESCE(applied_at, created_at)"
        where = [
            *([f"{when} >= ?"] if since is not None else []),
            *([f"{when} < ?"] if until is not None else []),
        ]
        params = [p for p in (since, until) if p is not None]
        sql = f"SELECT {COMMAND_COLUMNS} FROM commands"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._query(f"{sql} ORDER BY id DESC LIMIT ?", (*params, limit))
        return [CommandRow(*row) for row in rows]

    def set_taking_commands(self, taking: bool) -> None:
        """Say whether the engine serving this store takes operator commands: an attached console
        reads it to know it is read-only (``tripwire serve --no-commands``)."""
        self._refuse_writes("say whether it takes commands")
        with self._lock:
            try:
                self._conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    (TAKING_COMMANDS, "on" if taking else "off"),
                )
            except sqlite3.Error as exc:
                raise self._fail("writing meta", exc) from None

    def taking_commands(self) -> bool | None:
        """What the last service on this store said: True, False, or None if none said."""
        with self._lock:
            rows = self._query("SELECT value FROM meta WHERE key = ?", (TAKING_COMMANDS,))
        return None if not rows else rows[0][0] == "on"
