"""TraceStore: one SQLite file of turns, events, attempts, manifests, operator commands, writers and
standing overrides."""

from __future__ import annotations

import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine.locations import PROJECT_TRACES, TRACES_FILE, default_trace_store
from engine.store.command_queue import CommandQueue
from engine.store.follow import StoreFollow
from engine.store.opening import integrity_problem, open_problem, open_store
from engine.store.reads import StoreReads
from engine.store.retention import StoreRetention
from engine.store.schema import COMPACT_SINCE, OVERRIDES_SINCE
from engine.store.standing import StoreOverrides
from engine.store.writers import unclean_close
from engine.store.writes import StoreWrites

if TYPE_CHECKING:
    from sqlite_utils import Database

DEFAULT_PATH = PROJECT_TRACES / TRACES_FILE
"""A project's store, relative to it; without a ``path`` a store follows :func:`default_trace_store`."""
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
"""SQLite's ``synchronous`` levels a store may be opened with (``NORMAL`` by default)."""


class TraceStore(StoreWrites, StoreReads, StoreFollow, CommandQueue, StoreRetention, StoreOverrides):
    """A SQLite trace store; see :mod:`engine.store`. Thread-safe: one lock serialises its use.

    ``path`` defaults to :func:`engine.locations.default_trace_store`: ``./traces/traces.db`` in a
    project with a ``traces/`` directory, else the user's data directory.

    ``readonly=True`` (the console, the CLI) opens an existing store with ``mode=ro`` and never
    creates one. ``synchronous`` trades durability against power loss for speed (in WAL mode
    ``NORMAL`` already survives a killed process). ``busy_timeout_ms`` is how long to wait for
    another writer before reporting the store locked. ``verify`` runs ``PRAGMA quick_check`` on
    open: None (the default) when it is warranted — the last writer did not close the store, the
    file is shorter than its header says, or the store is small (:mod:`engine.store.opening`) —,
    True always (it reads the whole file), False never; :meth:`check` checks on request.
    ``create=False`` opens an existing store read-write but never creates one (an attached console
    writing commands).
    ``wall_clock`` stamps heartbeats, reconciliations and the commands' times.

    Opened read-write, a store finishes as ``interrupted`` the turns left running by writers
    that are gone (:mod:`engine.store.writers`).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        readonly: bool = False,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 5000,
        verify: bool | None = None,
        create: bool = True,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, got {synchronous!r}")
        self.path = Path(path) if path is not None else default_trace_store().path
        self.readonly = readonly
        self._lock = threading.RLock()
        self._open_turns = {}
        self._faults: dict[tuple[object, ...], str] = {}
        self._closed = False
        self._wall_clock = wall_clock
        self._writer_id = None
        self._writer_unsure = False
        self._heartbeat_at = 0.0
        self._conn, checked = open_store(
            self.path, readonly, synchronous.upper(), busy_timeout_ms, verify, create, unclean_close
        )
        version = self.schema_version
        self._has_writers = version >= 3
        self._compact = version >= COMPACT_SINCE
        self._has_overrides = version >= OVERRIDES_SINCE
        self.checked_on_open = checked
        """Why integrity was checked (and found sound) as the store opened; None when it was not."""
        if not readonly:
            self.reconcile()
            if checked is not None:
                self.integrity_checked()

    @functools.cached_property
    def db(self) -> Database:
        """sqlite-utils over the store's connection, for introspection (made on first use)."""
        from sqlite_utils import Database

        return Database(self._conn, recursive_triggers=False, execute_plugins=False)

    def check(self, *, full: bool = False) -> str | None:
        """Check the store's integrity now: None when SQLite finds nothing wrong, else the problem on
        one line ("corrupt: …"). ``full``: ``integrity_check`` (slower: every index against its
        table) instead of ``quick_check``. Both read the whole file."""
        with self._lock:
            try:
                return integrity_problem(self._conn, full=full)
            except sqlite3.Error as exc:
                return open_problem(exc, 0)

    def close(self) -> None:
        """Close the connection; a writer is recorded as closed (its running turns are reconciled)."""
        with self._lock:
            if not self._closed:
                self._close_writer()
                self._closed = True
                self._conn.close()
