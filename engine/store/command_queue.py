"""The ``commands`` table: operator actions queued for the engine serving the store.

A console attached to the store queues them; :mod:`engine.commands` applies and acknowledges
them in the engine's process.
"""

from __future__ import annotations

import sqlite3
from typing import Literal

from engine.errors import TraceStoreError, one_line
from engine.store.base import StoreCore
from engine.store.rows import COMMAND_ACTIONS, CommandAction, CommandRow

COMMAND_COLUMNS = "id, created_at, action, tool_id, actor, reason, status, applied_at, result, expires_at"


class CommandQueue(StoreCore):
    """Submitting, listing and acknowledging operator commands."""

    def submit_command(
        self,
        action: CommandAction,
        tool_id: str,
        *,
        actor: str,
        reason: str = "",
        expires_at: float | None = None,
        now: float | None = None,
    ) -> int:
        """Queue an operator action for the engine serving this store; returns the command's id."""
        self._refuse_writes("submit commands")
        if action not in COMMAND_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(COMMAND_ACTIONS)}, got {action!r}")
        if not tool_id or not actor:
            raise ValueError(f"a command needs a tool and an actor, got {tool_id!r} and {actor!r}")
        with self._lock:
            try:
                cursor = self._conn.execute(
                    "INSERT INTO commands (created_at, action, tool_id, actor, reason, expires_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (self._wall_clock() if now is None else now, action, tool_id, actor, reason, expires_at),
                )
            except sqlite3.Error as exc:
                raise self._fail("submitting a command", exc) from None
        assert cursor.lastrowid is not None
        return cursor.lastrowid

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
        status: Literal["applied", "failed"],
        result: str,
        *,
        now: float | None = None,
    ) -> bool:
        """Mark a pending command applied or failed, with its result; False if it was not pending."""
        self._refuse_writes("acknowledge commands")
        if status not in ("applied", "failed"):
            raise ValueError(f"status must be 'applied' or 'failed', got {status!r}")
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
