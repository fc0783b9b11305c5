"""What every part of a :class:`~engine.store.TraceStore` shares: its connection, its lock, and
how it turns SQLite errors into one-line :class:`TraceStoreError` s."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.closing import ClosedOnExit
from engine.errors import TraceStoreError
from engine.events import Event
from engine.store.codec import decode_event
from engine.store.failures import StoreWriteError


@dataclass(slots=True)
class OpenTurn:
    """A turn this store object started (or looked up), while its events may still arrive."""

    rowid: int
    started_at: float
    tools: set[str]


class StoreCore(ClosedOnExit):
    """The state of an open store; the parts of :class:`~engine.store.TraceStore` extend it."""

    path: Path
    readonly: bool
    _conn: sqlite3.Connection
    _lock: threading.RLock
    """Serialises every use of the connection: the store is shared by threads."""
    _closed: bool
    _wall_clock: Callable[[], float]
    _open_turns: dict[str, OpenTurn]
    _writer_id: int | None
    """This store's row in ``writers`` once it has recorded a turn (schema 3 and later)."""
    _has_overrides: bool
    """Schema 6 or later: standing overrides kept, one engine's run told from the next
    (:mod:`engine.store.standing`)."""

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _fail(self, action: str, exc: BaseException) -> TraceStoreError:
        return TraceStoreError(self.path, f"{action} failed: {exc}", untouched=False)

    def _refuse_writes(self, what: str) -> None:
        if self.readonly:
            raise StoreWriteError(self.path, f"opened read-only: cannot {what}", "read-only")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._fail("read", exc) from None

    def _decode(self, row: Sequence[Any]) -> Event:
        try:
            return decode_event(*row[1:])
        except (ValueError, TypeError) as exc:
            raise TraceStoreError(
                self.path, f"event {row[0]} cannot be read: {exc}", untouched=False
            ) from None
