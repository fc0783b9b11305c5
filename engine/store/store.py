"""TraceStore: one SQLite file of turns, events, attempts, manifests, operator commands and writers."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine.locations import PROJECT_TRACES, TRACES_FILE, default_trace_store
from engine.store.command_queue import CommandQueue
from engine.store.follow import StoreFollow
from engine.store.opening import open_store
from engine.store.reads import StoreReads
from engine.store.retention import StoreRetention
from engine.store.writes import StoreWrites

if TYPE_CHECKING:
    from sqlite_utils import Database

DEFAULT_PATH = PROJECT_TRACES / TRACES_FILE
"""A project's store, relative to it; without a ``path`` a store follows :func:`default_trace_store`."""
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
"""SQLite's ``synchronous`` levels a store may be opened with (``NORMAL`` by default)."""


class TraceStore(StoreWrites, StoreReads, StoreFollow, CommandQueue, StoreRetention):
    """A SQLite trace store; see :mod:`engine.store`. Thread-safe: one lock serialises its use.

    ``path`` defaults to :func:`engine.locations.default_trace_store`: ``./traces/traces.db`` in a
    project with a ``traces/`` directory, else the user's data directory.

    ``readonly=True`` (the console, the CLI) opens an existing store with ``mode=ro`` and never
    creates one. ``synchronous`` trades durability against power loss for speed (in WAL mode
    ``NORMAL`` already survives a killed process). ``busy_timeout_ms`` is how long to wait for
    another writer before reporting the store locked. ``verify`` runs ``PRAGMA quick_check`` on
    open (it reads the whole file: large stores open faster without it). ``create=False`` opens an
    existing store read-write but never creates one (an attached console writing commands).
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
        verify: bool = True,
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
        self._conn = open_store(self.path, readonly, synchronous.upper(), busy_timeout_ms, verify, create)
        self._has_writers = self.schema_version >= 3
        if not readonly:
            self.reconcile()

    @functools.cached_property
    def db(self) -> Database:
        """sqlite-utils over the store's connection, for introspection (made on first use)."""
        from sqlite_utils import Database

        return Database(self._conn, recursive_triggers=False, execute_plugins=False)

    def close(self) -> None:
        """Close the connection; a writer is recorded as closed (its running turns are reconciled)."""
        with self._lock:
            if not self._closed:
                self._close_writer()
                self._closed = True
                self._conn.close()
