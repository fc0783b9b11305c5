"""The trace store: turns, every event, attempts, breaker transitions and manifest versions in SQLite.

One file (``traces/traces.db`` by default) in WAL mode, so a console can read while the engine
writes. Writes happen off the engine's hot path: :class:`TraceRecorder` subscribes with a sink
that only appends to a deque, and a writer thread commits batches, one transaction each. With
``durability="turn"`` the recorder makes ``run_turn`` wait until the turn's events are committed.

Events are stored flat: the columns the store indexes or filters on (``turn_id``, ``call_id``,
``tool_id``, ``event_type``, ``at``, ``t``, and ``turn``, the turn's rowid) plus ``data``, a JSON
object of the other fields, so ``{**columns, **data}`` rebuilds the event (:func:`decode_event`).
Turn rows, the tools each turn touched and the attempts table are derived in the same
transaction as the events they come from: a batch is all or nothing, so a crash never leaves a
half-written turn.

Since schema 2 the store is also how a console reaches an engine in another process: it follows
the events as they are committed (:meth:`TraceStore.events_after`), seeds its board from
:meth:`TraceStore.tool_states`, and queues operator actions in the ``commands`` table, which the
engine polls and acknowledges (:mod:`engine.commands`).

Opening never modifies a file it refuses: a file that is not SQLite, a SQLite database of
another application, a corrupt, locked or unreadable file, or a schema newer than this code
raises :class:`TraceStoreError`, whose ``str()`` is one line ending "(left untouched)".
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import logging
import math
import os
import sqlite3
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal, NamedTuple, Self
from urllib.parse import quote

import anyio

from engine.breaker import BreakerState
from engine.config import one_line
from engine.events import (
    EVENT_TYPES,
    AttemptFailed,
    AttemptStarted,
    CallSucceeded,
    Event,
    ManifestLoaded,
    TurnFinished,
    TurnStarted,
    event_from_dict,
    field_shapes,
)

if TYPE_CHECKING:
    from sqlite_utils import Database

    from engine.engine import Engine

log = logging.getLogger("tripwire.store")

DEFAULT_PATH = Path("traces/traces.db")
APPLICATION_ID = 0x54525057
"""``PRAGMA application_id`` of a tripwire trace store ("TRPW"): tells our files from others'."""
SQLITE_MAGIC = b"SQLite format 3\x00"
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")

Migration = Callable[["Database"], None]


class TraceStoreError(Exception):
    """A trace store that cannot be opened or used; ``str()`` is one line naming the file.

    ``untouched`` says the file was left exactly as it was found (every refusal to open).
    """

    def __init__(self, path: str | Path, problem: str, *, untouched: bool = True) -> None:
        self.path = str(path)
        self.problem = problem
        self.untouched = untouched
        suffix = " (left untouched)" if untouched else ""
        super().__init__(one_line(f"{self.path}: {problem}{suffix}"))


# --- schema ---------------------------------------------------------------------------------


def _v1(db: Database) -> None:
    """The first schema: turns, the tools they touched, events, attempts, manifests, meta."""
    db.table("meta").create({"key": str, "value": str}, pk="key")
    db.table("turns").create(
        {
            "id": int,
            "turn_id": str,
            "started_at": float,
            "t_start": float,
            "ended_at": float,
            "duration_ms": float,
            "outcome": str,
            "summary": str,
            "calls": int,
            "executed": int,
            "deadline_ms": float,
            "seed": str,
            "spec": str,
            "statuses": str,
            "breakers": str,
            "manifests": str,
        },
        pk="id",
        not_null=["turn_id", "started_at", "outcome"],
        defaults={"outcome": "running"},
    )
    db.table("turns").create_index(["turn_id"], index_name="turns_turn_id", unique=True)
    # The rowid is the last column of every index: (started_at) is the (started_at, rowid) keyset.
    db.table("turns").create_index(["started_at"], index_name="turns_by_time")
    db.table("turns").create_index(["outcome", "started_at"], index_name="turns_by_outcome")
    # Without a rowid (sqlite-utils cannot say so): two b-trees per row instead of three.
    db.execute(
        "CREATE TABLE turn_tools (turn INTEGER NOT NULL, tool_id TEXT NOT NULL, started_at FLOAT NOT NULL,"
        " PRIMARY KEY (turn, tool_id)) WITHOUT ROWID"
    )
    db.table("turn_tools").create_index(["tool_id", "started_at", "turn"], index_name="turn_tools_by_tool")
    db.table("events").create(
        {
            "id": int,
            "turn": int,
            "turn_id": str,
            "call_id": str,
            "tool_id": str,
            "event_type": str,
            "at": float,
            "t": float,
            "data": str,
        },
        pk="id",
        not_null=["event_type", "at", "t", "data"],
    )
    # By the turn's rowid, not its id: turn rowids grow, so inserts append to the index instead of
    # landing all over it (text ids sort t10 < t2): a third of the insert cost, measured.
    db.table("events").create_index(["turn", "id"], index_name="events_by_turn")
    # Events in turns are found by time through their turn; only the rest need a time index.
    db.execute("CREATE INDEX events_outside_turns ON events (at) WHERE turn IS NULL")
    db.table("attempts").create(
        {
            "id": int,
            "event_id": int,
            "turn": int,
            "turn_id": str,
            "call_id": str,
            "tool_id": str,
            "attempt": int,
            "outcome": str,
            "kind": str,
            "class": str,
            "status_code": int,
            "message": str,
            "latency_ms": float,
            "fault_type": str,
            "at": float,
        },
        pk="id",
        not_null=["event_id", "call_id", "tool_id", "attempt", "outcome", "at"],
    )
    db.table("attempts").create_index(["turn", "id"], index_name="attempts_by_turn")
    db.table("manifests").create(
        {"digest": str, "tool_id": str, "content": str, "first_seen": float},
        pk="digest",
        not_null=["tool_id", "content", "first_seen"],
    )


# The WHERE clauses of _v2's partial indexes; queries must repeat them word for word, or SQLite will
# not use the indexes. Part of a released migration: never edit them.
_BREAKER_TRANSITIONS = (
    "event_type IN ('BreakerOpened', 'BreakerHalfOpened', 'BreakerClosed', 'BreakerTripped', 'BreakerReset',"
    " 'BreakerDisabled')"
)
_MANIFEST_CHANGES = "event_type IN ('ManifestLoaded', 'ManifestRemoved')"


def _v2(db: Database) -> None:
    """Operator commands for an engine in another process, and what an attached console seeds from."""
    # CHECK constraints: sqlite-utils cannot declare them. expires_at: a command the engine has not
    # applied by then is refused, never applied late (its sender has stopped waiting).
    db.execute(
        "CREATE TABLE commands (id INTEGER PRIMARY KEY, created_at FLOAT NOT NULL,"
        " action TEXT NOT NULL CHECK (action IN ('trip', 'reset', 'disable')), tool_id TEXT NOT NULL,"
        " actor TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',"
        " status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'applied', 'failed')),"
        " applied_at FLOAT, result TEXT, expires_at FLOAT)"
    )
    # The engine polls for pending commands several times a second: only they are indexed.
    db.execute("CREATE INDEX commands_pending ON commands (id) WHERE status = 'pending'")
    # A tool's newest breaker transition and manifest change, without scanning its events.
    db.execute(
        f"CREATE INDEX events_breaker_transitions ON events (tool_id, id) WHERE {_BREAKER_TRANSITIONS}"
    )
    db.execute(f"CREATE INDEX events_manifest_changes ON events (tool_id, id) WHERE {_MANIFEST_CHANGES}")
    db.execute("CREATE INDEX manifests_by_tool ON manifests (tool_id, first_seen)")


MIGRATIONS: list[Migration] = [_v1, _v2]
"""Migration ``i`` takes a store from schema version ``i`` to ``i + 1``; never edit a released one."""
SCHEMA_VERSION = len(MIGRATIONS)
TABLES = frozenset({"meta", "turns", "turn_tools", "events", "attempts", "manifests", "commands"})


# --- rows -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnRow:
    """One turn as the browser lists it."""

    turn_id: str
    started_at: float
    ended_at: float | None
    duration_ms: float | None
    outcome: str
    """``running`` until its TurnFinished is stored; then ok, degraded, failed, timed_out or canceled."""
    summary: str | None
    calls: int
    executed: int | None
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TurnPage:
    rows: list[TurnRow]
    next_cursor: str | None
    """Pass as ``cursor`` for the next (older) page; None on the last page."""


class AttemptRow(NamedTuple):
    """One attempt: a failure (``error``), a success (``ok``) or a kept partial result (``partial``).

    A named tuple: a turn has thousands and a frozen dataclass takes ~3 µs each to build.
    """

    event_id: int
    turn_id: str | None
    call_id: str
    tool_id: str
    attempt: int
    outcome: str
    kind: str | None
    error_class: str | None
    status_code: int | None
    message: str | None
    latency_ms: float | None
    fault_type: str | None
    value: Any
    """What a success returned (kept once, in its CallSucceeded event); None for a failure."""
    at: float


@dataclass(frozen=True, slots=True)
class StoredTurn:
    row: TurnRow
    events: list[Event]
    """Every event of the turn in the order it happened, breaker transitions its calls caused included."""
    attempts: list[AttemptRow]
    spec: dict[str, Any] | None
    seed: str | None
    breakers: dict[str, Any] | None
    manifests: dict[str, str] | None


CommandAction = Literal["trip", "reset", "disable"]
COMMAND_ACTIONS: tuple[CommandAction, ...] = ("trip", "reset", "disable")
CommandStatus = Literal["pending", "applied", "failed"]


@dataclass(frozen=True, slots=True)
class CommandRow:
    """An operator command for the engine serving this store (see :mod:`engine.commands`)."""

    id: int
    created_at: float
    action: CommandAction
    tool_id: str
    actor: str
    reason: str
    status: CommandStatus
    applied_at: float | None
    """When the engine acknowledged it (applied or failed)."""
    result: str | None
    """Applied: the breaker state the action left; failed: why, on one line."""
    expires_at: float | None
    """Not applied by then, it is refused: its sender has stopped waiting."""


@dataclass(frozen=True, slots=True)
class StoredManifest:
    """A tool's newest manifest version as the store knows it."""

    digest: str
    content: dict[str, Any]
    version: int | None
    """The engine's registry version, when a ManifestLoaded event said (not for the versions an
    engine started with: it announces only reloads)."""
    path: str | None
    at: float
    """When it came into force, or was first stored."""


@dataclass(frozen=True, slots=True)
class StoredBreaker:
    """A tool's newest breaker state: its last transition, or a later turn's snapshot."""

    state: BreakerState
    consecutive_failures: int
    half_open_at: float | None
    """Engine time at which an OPEN breaker admits a probe."""
    at: float


@dataclass(frozen=True, slots=True)
class ToolState:
    tool_id: str
    breaker: StoredBreaker | None
    manifest: StoredManifest | None


@dataclass(frozen=True, slots=True)
class StoreSnapshot:
    """Every tool seen in the store, as of one moment: event ``last_event_id``."""

    tools: list[ToolState]
    last_event_id: int
    """0 when there are no events; follow with :meth:`TraceStore.events_after`."""
    newest_at: float | None
    """Wall-clock and engine time of the newest event."""
    newest_t: float | None


# --- encoding events ------------------------------------------------------------------------

_COLUMNS = ("turn_id", "call_id", "tool_id")
_NOT_DATA = frozenset({"at", "t", *_COLUMNS})

# What a write does besides storing the event row, by event class (up to _STARTED: nothing more).
_PLAIN, _STARTED, _FINISHED, _FAILED, _SUCCEEDED, _ATTEMPT = range(6)
_ACTIONS: tuple[tuple[type[Event], int], ...] = (
    (TurnStarted, _STARTED),
    (TurnFinished, _FINISHED),
    (AttemptFailed, _FAILED),
    (CallSucceeded, _SUCCEEDED),
    (AttemptStarted, _ATTEMPT),
)


def _fallback(value: Any) -> Any:
    """What JSON cannot hold as it is: enums by value, sets as lists, anything else as its repr."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return repr(value)


_c_encoder = c_make_encoder(None, _fallback, encode_basestring, None, ":", ",", False, False, True)


def _dumps(value: Any) -> str:
    """Compact JSON straight from the C encoder: ``json.dumps`` adds ~0.6 µs per call in Python."""
    return "".join(_c_encoder(value, 0))


_loads = json.loads
_EVENT_COLUMNS = "id, event_type, turn_id, call_id, tool_id, at, t, data"
_COMMAND_COLUMNS = "id, created_at, action, tool_id, actor, reason, status, applied_at, result, expires_at"


@dataclass(frozen=True, slots=True)
class _Codec:
    """How one event class becomes an ``events`` row, worked out once per class."""

    event_type: str
    action: int
    """What a write does besides storing the row."""
    names: tuple[str, ...]
    """The fields that go into ``data``: all but ``at``, ``t`` and the id columns."""
    row: Callable[[Any], tuple[Any, ...] | None]
    """(turn_id, call_id, tool_id, event_type, at, t, data), or None when a value is not of its
    field's declared type (then :meth:`slow_row` gives the same row)."""

    def values(self, event: Any) -> dict[str, Any]:
        return {name: getattr(event, name) for name in self.names}

    def slow_row(self, event: Any) -> tuple[Any, ...]:
        turn_id, call_id, tool_id = (getattr(event, c, None) for c in _COLUMNS)
        return turn_id, call_id, tool_id, self.event_type, event.at, event.t, _dumps(self.values(event))


def _codec(cls: type[Event]) -> _Codec:
    names = tuple(f.name for f in fields(cls))
    data_names = tuple(n for n in names if n not in _NOT_DATA)
    action = next((action for base, action in _ACTIONS if issubclass(cls, base)), _PLAIN)
    return _Codec(cls.event_type, action, data_names, _row_function(cls, names, data_names))


def _row_function(
    cls: type[Event], names: tuple[str, ...], data_names: tuple[str, ...]
) -> Callable[[Any], tuple[Any, ...] | None]:
    """Generate the function that turns one event of ``cls`` into its row.

    ``_dumps(dict)`` costs ~3 µs for an AttemptFailed, most of the write path's budget: this
    f-string, with the keys escaped in advance, takes about half. Each value is checked against
    its field's declared type (an int, a finite float, a bool, a str); anything else is encoded
    by ``_dumps``. When a check fails the function returns None and the caller falls back to
    :meth:`_Codec.slow_row`, so the JSON is the same either way.
    """
    shapes = {shape.name: shape for shape in field_shapes(cls)}
    loads, checks, parts = [], [], []
    for i, name in enumerate(data_names):
        v = f"v{i}"
        loads.append(f"    {v} = e.{name}")
        shape = shapes[name]
        optional = shape.nullable
        kind = "any"
        if (o := shape.only) is not None:
            if o is bool:
                kind = "bool"
            elif o is int or o is float:
                kind = o.__name__
            elif isinstance(o, type) and issubclass(o, str):
                kind = "str"
        check, text = {
            "bool": (f"type({v}) is bool", f'("true" if {v} else "false")'),
            "int": (f"type({v}) is int", v),
            "float": (f"(type({v}) is float and _finite({v}) or type({v}) is int)", f"repr({v})"),
            "str": (f"isinstance({v}, str)", f"_string({v})"),
            "any": ("", f"_dumps({v})"),
        }[kind]
        if optional and kind != "any":
            check, text = f"({v} is None or {check})", f'("null" if {v} is None else {text})'
        if check:
            checks.append(check)
        parts.append(f"{encode_basestring(name)}:{{{text}}}")
    columns = ", ".join(f"e.{c}" if c in names else "None" for c in _COLUMNS)
    source = "\n".join(
        [
            "def row(e):",
            *loads,
            *([f"    if not ({' and '.join(checks)}):", "        return None"] if checks else []),
            f"    return ({columns}, {cls.event_type!r}, e.at, e.t, f'{{{{{','.join(parts)}}}}}')",
        ]
    )
    namespace: dict[str, Any] = {"_string": encode_basestring, "_dumps": _dumps, "_finite": math.isfinite}
    exec(compile(source, f"<trace row of {cls.__name__}>", "exec"), namespace)
    row: Callable[[Any], tuple[Any, ...] | None] = namespace["row"]
    return row


_CODECS: dict[type[Event], _Codec] = {}


def _codec_of(cls: type[Event]) -> _Codec:
    codec = _CODECS.get(cls)
    if codec is None:
        codec = _CODECS[cls] = _codec(cls)
    return codec


@dataclass(slots=True)
class _Pending:
    """Derived rows of a write, inserted together when the events are."""

    next_turn: int
    """The rowid the next new turn gets (we hold the write lock: ids are known in advance)."""
    turns: list[tuple[Any, ...]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: list[tuple[Any, ...]] = field(default_factory=list)
    tools: list[tuple[int, str, float]] = field(default_factory=list)
    finished: list[tuple[Any, ...]] = field(default_factory=list)

    def flush(self, conn: sqlite3.Connection) -> None:
        if self.turns:
            self._insert_turns(conn)
        if self.rows:
            conn.executemany(
                "INSERT INTO events (turn_id, call_id, tool_id, event_type, at, t, data, turn)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                self.rows,
            )
            self.rows.clear()
        if self.attempts:
            conn.executemany(
                "INSERT INTO attempts (event_id, turn, turn_id, call_id, tool_id, attempt, outcome, kind,"
                " class, status_code, message, latency_ms, fault_type, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self.attempts,
            )
            self.attempts.clear()
        if self.tools:
            conn.executemany(
                "INSERT OR IGNORE INTO turn_tools (turn, tool_id, started_at) VALUES (?, ?, ?)", self.tools
            )
            self.tools.clear()
        if self.finished:
            conn.executemany(
                "UPDATE turns SET ended_at = ?, duration_ms = ?, outcome = ?, summary = ?, executed = ?,"
                " statuses = ? WHERE id = ?",
                self.finished,
            )
            self.finished.clear()

    def _insert_turns(self, conn: sqlite3.Connection) -> None:
        conn.execute("SAVEPOINT turns")
        try:
            conn.executemany(_INSERT_TURN, self.turns)
        except sqlite3.IntegrityError:
            # Turn ids repeat (a restarted engine numbers from t1 again; scenarios reuse ids): the
            # earlier turn stays, listed as "<id>~<rowid>"; its events keep the id they were
            # emitted with (they belong to their turn by rowid).
            conn.execute("ROLLBACK TO turns")
            for row in self.turns:
                turn_id = row[1]
                old = conn.execute("SELECT id FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
                if old is not None:
                    conn.execute("UPDATE turns SET turn_id = ? WHERE id = ?", (f"{turn_id}~{old[0]}", old[0]))
                conn.execute(_INSERT_TURN, row)
        conn.execute("RELEASE turns")
        self.turns.clear()


_INSERT_TURN = (
    "INSERT INTO turns (id, turn_id, started_at, t_start, outcome, calls, deadline_ms, seed, spec,"
    " breakers, manifests) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)"
)


def _decoder(cls: type[Event]) -> Callable[..., Event]:
    """How to rebuild ``cls`` from a row: ``(turn_id, call_id, tool_id, at, t, data dict) → event``.

    Generated: one call with keyword arguments, enums looked up in a dict (``ErrorKind(value)``
    costs ~1 µs), about half the cost of building kwargs. It expects data holding every field
    and raises on anything unexpected: then :func:`~engine.events.event_from_dict` takes over.
    """
    namespace: dict[str, Any] = {"cls": cls}
    arguments = ["at=at", "t=t"]
    for field_ in field_shapes(cls):
        name, convert = field_.name, field_.convert
        if name in ("at", "t"):
            continue
        if name in _COLUMNS:
            arguments.append(f"{name}={name}")
            continue
        value = f"d[{name!r}]"
        if convert is not None:
            if issubclass(convert, Enum):
                namespace[f"E_{name}"] = {member.value: member for member in convert}
                value = f"E_{name}[{value}]"
            else:
                value = f"tuple({value})"
            if field_.nullable:
                value = f"(None if d[{name!r}] is None else {value})"
        arguments.append(f"{name}={value}")
    source = f"def fast(turn_id, call_id, tool_id, at, t, d):\n    return cls({', '.join(arguments)})"
    exec(compile(source, f"<trace decoder of {cls.__name__}>", "exec"), namespace)
    fast: Callable[..., Event] = namespace["fast"]
    return fast


_DECODERS: dict[str, Callable[..., Event]] = {}
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The C scanner itself: ``json.loads`` spends as long again in Python around it."""


def decode_event(
    event_type: str,
    turn_id: str | None,
    call_id: str | None,
    tool_id: str | None,
    at: float,
    t: float,
    data: str,
) -> Event:
    """Rebuild an event from its row: ``data`` plus the columns its class has."""
    decoder = _DECODERS.get(event_type)
    if decoder is None:
        cls = EVENT_TYPES.get(event_type)
        if cls is None:
            raise ValueError(f"unknown event type {event_type!r} (written by a newer tripwire?)")
        decoder = _DECODERS[event_type] = _decoder(cls)
    fields_ = _json(data)  # a damaged row raises json's own error
    if type(fields_) is not dict:
        raise ValueError(f"{event_type} data is not a JSON object")
    try:
        return decoder(turn_id, call_id, tool_id, at, t, fields_)
    except (KeyError, TypeError):
        # Any data: fields missing (an older writer) take their defaults, unknown ones are dropped.
        return event_from_dict(
            {**fields_, "event_type": event_type, "turn_id": turn_id, "call_id": call_id, "tool_id": tool_id,
             "at": at, "t": t}
        )  # fmt: skip


# --- the store ------------------------------------------------------------------------------


@dataclass(slots=True)
class _OpenTurn:
    rowid: int
    started_at: float
    tools: set[str]


Since = float | datetime | None


def _bounds(since: float | None, until: float | None) -> tuple[float, float]:
    """Finite stand-ins for open ends (SQLite prints infinities as text it cannot read back)."""
    return -sys.float_info.max if since is None else since, sys.float_info.max if until is None else until


def _seconds(value: Since) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else value


class _ClosedOnExit:
    """``with`` closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class TraceStore(_ClosedOnExit):
    """A SQLite trace store; see the module docstring. Thread-safe: one lock serialises its use.

    ``readonly=True`` (the console, the CLI) opens an existing store with ``mode=ro`` and never
    creates one. ``synchronous`` trades durability against power loss for speed (in WAL mode
    ``NORMAL`` already survives a killed process). ``busy_timeout_ms`` is how long to wait for
    another writer before reporting the store locked. ``verify`` runs ``PRAGMA quick_check`` on
    open (it reads the whole file: large stores open faster without it). ``create=False`` opens an
    existing store read-write but never creates one (an attached console writing commands).
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        readonly: bool = False,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 5000,
        verify: bool = True,
        create: bool = True,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, got {synchronous!r}")
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        self._open_turns: dict[str, _OpenTurn] = {}
        self._faults: dict[tuple[Any, ...], str] = {}
        self._closed = False
        self._conn = _open(self.path, readonly, synchronous.upper(), busy_timeout_ms, verify, create)

    @functools.cached_property
    def db(self) -> Database:
        """sqlite-utils over the store's connection, for introspection (made on first use)."""
        from sqlite_utils import Database

        return Database(self._conn, recursive_triggers=False, execute_plugins=False)

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _fail(self, action: str, exc: BaseException) -> TraceStoreError:
        return TraceStoreError(self.path, f"{action} failed: {exc}", untouched=False)

    # --- writing -------------------------------------------------------------------------

    def write(
        self,
        events: Sequence[Event],
        *,
        manifests: Iterable[tuple[str, str, Mapping[str, Any]]] = (),
    ) -> int:
        """Store ``events`` in one transaction, with the turn rows, tools and attempts they imply.

        ``manifests`` are ``(digest, tool_id, content)`` snapshots stored in the same transaction.
        Returns the number of events written.
        """
        if self.readonly:
            raise TraceStoreError(self.path, "opened read-only: cannot write", untouched=False)
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for digest, tool_id, content in manifests:
                        self._insert_manifest(digest, tool_id, content, None)
                    if events:
                        self._write_events(events)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    self._open_turns.clear()  # rows they pointed at may be gone: look them up again
                    raise
            except sqlite3.Error as exc:
                raise self._fail("write", exc) from None
        return len(events)

    def ensure_manifest(
        self, digest: str, tool_id: str, content: Mapping[str, Any], *, at: float | None = None
    ) -> bool:
        """Store a manifest version once; returns whether it was new."""
        if self.readonly:
            raise TraceStoreError(self.path, "opened read-only: cannot write", untouched=False)
        with self._lock:
            try:
                with self._conn:
                    return self._insert_manifest(digest, tool_id, content, at)
            except sqlite3.Error as exc:
                raise self._fail("write", exc) from None

    def _insert_manifest(
        self, digest: str, tool_id: str, content: Mapping[str, Any], at: float | None
    ) -> bool:
        cur = self._conn.execute(
            "INSERT OR IGNORE INTO manifests (digest, tool_id, content, first_seen) VALUES (?, ?, ?, ?)",
            (digest, tool_id, _dumps(content), time.time() if at is None else at),
        )
        return cur.rowcount > 0

    def _write_events(self, events: Sequence[Event]) -> None:
        """The hot path: one generated tuple per event, derived rows alongside, executemany."""
        conn = self._conn
        # Rows get rowid max + 1 in order (we hold the write lock): the ids are known in advance.
        first_id = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()[0])
        next_turn = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM turns").fetchone()[0])
        pending = _Pending(next_turn)
        rows, attempts, tools = pending.rows, pending.attempts, pending.tools
        add_row, add_attempt = rows.append, attempts.append
        open_turns, faults, codecs, dumps = self._open_turns, self._faults, _CODECS, _dumps
        looked_up: dict[str, _OpenTurn | None] = {}  # turns this store did not start: found or not
        finished: list[str] = []
        event_id = first_id - 1
        for event in events:
            codec = codecs.get(type(event)) or _codec_of(type(event))
            action = codec.action
            event_id += 1
            if action == _STARTED:
                row: tuple[Any, ...] = self._start_turn(event, codec, pending)  # type: ignore[arg-type]
            else:
                row = codec.row(event) or codec.slow_row(event)
            turn_id, call_id, tool_id = row[0], row[1], row[2]
            rowid = None
            if turn_id is not None:
                turn = open_turns.get(turn_id)
                if turn is None:
                    if turn_id in looked_up:
                        turn = looked_up[turn_id]
                    else:
                        turn = looked_up[turn_id] = self._find_turn(turn_id)
                if turn is not None:
                    rowid = turn.rowid
                    if tool_id is not None and tool_id not in turn.tools:
                        turn.tools.add(tool_id)
                        tools.append((rowid, tool_id, turn.started_at))
            add_row((*row, rowid))
            if action <= _STARTED:
                continue
            e: Any = event
            if action == _ATTEMPT:
                if e.fault_type is not None:
                    if len(faults) > 10_000:  # attempts cut off never conclude: bound the memory
                        faults.clear()
                    faults[(turn_id, call_id, tool_id, e.attempt)] = e.fault_type
            elif action == _FAILED:
                if faults:
                    faults.pop((turn_id, call_id, tool_id, e.attempt), None)
                add_attempt(
                    (event_id, rowid, turn_id, call_id, tool_id, e.attempt, "error", e.kind,
                     e.classification, e.status_code, e.error, e.latency_ms, e.fault_type, e.at)
                )  # fmt: skip
            elif action == _SUCCEEDED:
                fault = faults.pop((turn_id, call_id, tool_id, e.attempts), None) if faults else None
                add_attempt(
                    (event_id, rowid, turn_id, call_id, tool_id, e.attempts, "partial" if e.partial else "ok",
                     None, None, None, None, e.attempt_ms, fault, e.at)
                )  # fmt: skip
            elif action == _FINISHED and rowid is not None:  # rowid: the turn, found above
                pending.finished.append(
                    (e.at, e.duration_ms, e.outcome, e.summary, e.executed, dumps(e.statuses), rowid)
                )
                # Forgotten after this batch: events after the turn's end (the answers the
                # model received) may follow in it, and its row is only inserted at the end.
                finished.append(turn_id)
        pending.flush(conn)
        for turn_id in finished:
            open_turns.pop(turn_id, None)
        last = conn.execute("SELECT max(id) FROM events").fetchone()[0]
        if events and last != event_id:  # never expected: the attempts would point at other events
            raise sqlite3.IntegrityError(f"event ids {first_id}..{event_id} were assigned up to {last}")

    def _start_turn(self, event: TurnStarted, codec: _Codec, pending: _Pending) -> tuple[Any, ...]:
        """Queue the turn's row; returns the event's row (sharing the big fields' JSON)."""
        turn_id = event.turn_id
        big = {name: _dumps(getattr(event, name)) for name in ("spec", "breakers", "manifests")}
        rowid = pending.next_turn
        pending.next_turn += 1
        pending.turns.append(
            (rowid, turn_id, event.at, event.t, len(event.calls), event.deadline_ms, event.seed,
             *big.values())
        )  # fmt: skip
        spec = event.spec or {}
        tools = {str(call["tool"]) for call in spec.get("calls", ()) if "tool" in call}
        pending.tools += [(rowid, tool, event.at) for tool in sorted(tools)]
        self._open_turns[turn_id] = _OpenTurn(rowid, event.at, tools)
        rest = {name: value for name, value in codec.values(event).items() if name not in big}
        data = _dumps(rest)[:-1] + "".join(f',"{name}":{text}' for name, text in big.items()) + "}"
        return turn_id, None, None, codec.event_type, event.at, event.t, data

    def _find_turn(self, turn_id: str) -> _OpenTurn | None:
        """A turn started before this store object saw it (another process, a reopened store)."""
        row = self._conn.execute("SELECT id, started_at FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
        if row is None:
            return None
        tools = {r[0] for r in self._conn.execute("SELECT tool_id FROM turn_tools WHERE turn = ?", (row[0],))}
        return _OpenTurn(row[0], row[1], tools)

    # --- reading -------------------------------------------------------------------------

    def list_turns(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        outcome: str | None = None,
        tool: str | None = None,
        since: Since = None,
        until: Since = None,
    ) -> TurnPage:
        """A page of turns, newest first, keyset-paginated on (started_at, rowid).

        ``since``/``until`` bound ``started_at`` (wall-clock seconds or a datetime; until excluded).
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where: list[str] = []
        params: list[Any] = []
        if tool is not None:
            source, key_at, key_id = "turn_tools x JOIN turns t ON t.id = x.turn", "x.started_at", "x.turn"
            where.append("x.tool_id = ?")
            params.append(tool)
        else:
            source, key_at, key_id = "turns t", "t.started_at", "t.id"
        if outcome is not None:
            where.append("t.outcome = ?")
            params.append(outcome)
        if (since := _seconds(since)) is not None:
            where.append(f"{key_at} >= ?")
            params.append(since)
        if (until := _seconds(until)) is not None:
            where.append(f"{key_at} < ?")
            params.append(until)
        if cursor is not None:
            where.append(f"({key_at}, {key_id}) < (?, ?)")
            params += self._parse_cursor(cursor)
        sql = (
            "SELECT t.id, t.turn_id, t.started_at, t.ended_at, t.duration_ms, t.outcome, t.summary, t.calls,"
            " t.executed, (SELECT group_concat(tool_id, char(31)) FROM turn_tools WHERE turn = t.id)"
            f" FROM {source}{' WHERE ' + ' AND '.join(where) if where else ''}"
            f" ORDER BY {key_at} DESC, {key_id} DESC LIMIT ?"
        )
        params.append(limit + 1)
        with self._lock:
            found = self._query(sql, params)
        more = len(found) > limit
        found = found[:limit]
        rows = [_turn_row(r[1:]) for r in found]
        next_cursor = f"{found[-1][2]!r}:{found[-1][0]}" if more else None
        return TurnPage(rows, next_cursor)

    def _parse_cursor(self, cursor: str) -> list[Any]:
        at, _, rowid = cursor.rpartition(":")
        try:
            return [float(at), int(rowid)]
        except ValueError:
            raise TraceStoreError(self.path, f"invalid cursor {cursor!r}", untouched=False) from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._fail("read", exc) from None

    def load_turn(self, turn_id: str) -> StoredTurn:
        """One turn with every event in order and its attempts; raises if there is no such turn."""
        with self._lock:
            found = self._query(
                "SELECT turn_id, started_at, ended_at, duration_ms, outcome, summary, calls, executed,"
                " (SELECT group_concat(tool_id, char(31)) FROM turn_tools WHERE turn = turns.id),"
                " spec, seed, breakers, manifests, id FROM turns WHERE turn_id = ?",
                (turn_id,),
            )
            if not found:
                raise TraceStoreError(self.path, f"no turn {turn_id!r}", untouched=False)
            rowid = found[0][13]
            event_rows = self._query(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE turn = ? ORDER BY id", (rowid,)
            )
            attempt_rows = self._query(
                "SELECT event_id, turn_id, call_id, tool_id, attempt, outcome, kind, class, status_code,"
                " message, latency_ms, fault_type, NULL, at FROM attempts WHERE turn = ? ORDER BY id",
                (rowid,),
            )
        row = found[0]
        try:
            events = [decode_event(*r[1:]) for r in event_rows]
            by_id = dict(zip((r[0] for r in event_rows), events, strict=True))
            return StoredTurn(
                row=_turn_row(row[:9]),
                events=events,
                attempts=[_attempt_row(r, by_id) for r in attempt_rows],
                spec=_json(row[9]),
                seed=row[10],
                breakers=_json(row[11]),
                manifests=_json(row[12]),
            )
        except (ValueError, TypeError) as exc:
            raise TraceStoreError(
                self.path, f"turn {turn_id!r} cannot be read: {exc}", untouched=False
            ) from None

    def events(
        self, *, turn_id: str | None = None, since: Since = None, until: Since = None, chunk: int = 2000
    ) -> Iterator[Event]:
        """Stored events: one turn's, a time range's, or all, in the order they were written.

        A time range (``since``/``until``, until excluded) holds the turns that started in it,
        each whole and in start order, and the events outside turns (operator actions, breaker
        timers, manifest loads) that happened in it, in time order among them. Read in chunks
        (keysets), so iterating slowly never holds the store's lock.
        """
        for row in self._rows(turn_id, since, until, chunk):
            yield self._decode(row)

    def _rows(self, turn_id: str | None, since: Since, until: Since, chunk: int) -> Iterator[Any]:
        since, until = _seconds(since), _seconds(until)
        if turn_id is not None or (since is None and until is None):
            yield from self._event_rows(turn_id, chunk)
            return
        merged = heapq.merge(
            self._turn_rows_between(since, until, chunk), self._outside_rows_between(since, until, chunk)
        )
        for _, row in merged:
            yield row

    def _decode(self, row: Sequence[Any]) -> Event:
        try:
            return decode_event(*row[1:])
        except (ValueError, TypeError) as exc:
            raise TraceStoreError(
                self.path, f"event {row[0]} cannot be read: {exc}", untouched=False
            ) from None

    def _pages(
        self, sql: str, params: Sequence[Any], key: Sequence[Any], key_of: Callable[[Any], Sequence[Any]],
        chunk: int,
    ) -> Iterator[Any]:  # fmt: skip
        """Every row of a keyset-paginated query whose parameters end with the key and the limit.

        The lock is held per page only, so a slow consumer never blocks the writer."""
        while True:
            with self._lock:
                rows = self._query(sql, (*params, *key, chunk))
            yield from rows
            if len(rows) < chunk:
                return
            key = key_of(rows[-1])

    def _event_rows(self, turn_id: str | None, chunk: int, turn: int | None = None) -> Iterator[Any]:
        where: list[str] = []
        params: list[Any] = []
        if turn is not None:
            where.append("turn = ?")
            params.append(turn)
        elif turn_id is not None:
            with self._lock:
                found = self._query("SELECT id FROM turns WHERE turn_id = ?", (turn_id,))
            # Events of a turn whose start was never stored have no turn row: found by id, slowly.
            where.append("turn = ?" if found else "turn_id = ?")
            params.append(found[0][0] if found else turn_id)
        where.append("id > ?")
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        return self._pages(sql, params, (0,), lambda row: (row[0],), chunk)

    def _turn_rows_between(self, since: float | None, until: float | None, chunk: int) -> Iterator[Any]:
        """((started_at, 0, turn, id), row) for every event of the turns that started in the range."""
        sql = (
            "SELECT id, started_at FROM turns WHERE started_at >= ? AND started_at < ?"
            " AND (started_at, id) > (?, ?) ORDER BY started_at, id LIMIT ?"
        )
        low, high = _bounds(since, until)
        for turn, started_at in self._pages(sql, (low, high), (low, 0), lambda r: (r[1], r[0]), chunk):
            for row in self._event_rows(None, chunk, turn=turn):
                yield (started_at, 0, turn, row[0]), row

    def _outside_rows_between(self, since: float | None, until: float | None, chunk: int) -> Iterator[Any]:
        """((at, 1, 0, id), row) for the events outside turns that happened in the range."""
        sql = (
            f"SELECT {_EVENT_COLUMNS} FROM events INDEXED BY events_outside_turns"
            " WHERE turn IS NULL AND at >= ? AND at < ?"
            " AND (at, id) > (?, ?) ORDER BY at, id LIMIT ?"
        )
        low, high = _bounds(since, until)
        for row in self._pages(sql, (low, high), (low, 0), lambda r: (r[5], r[0]), chunk):
            yield (row[5], 1, 0, row[0]), row

    def manifest(self, digest: str) -> dict[str, Any] | None:
        """A stored manifest version's content, by digest."""
        with self._lock:
            found = self._query("SELECT content FROM manifests WHERE digest = ?", (digest,))
        return _json(found[0][0]) if found else None

    def export_jsonl(
        self,
        out: IO[str] | str | Path,
        *,
        turn_id: str | None = None,
        since: Since = None,
        until: Since = None,
    ) -> int:
        """Write events as JSON Lines, one ``event.to_dict()`` per line; returns how many.

        Selects as :meth:`events` does. A path is created owner-only.
        """
        if turn_id is not None:
            with self._lock:
                known = self._query(
                    "SELECT EXISTS (SELECT 1 FROM turns WHERE turn_id = ?)"
                    " OR EXISTS (SELECT 1 FROM events WHERE turn_id = ?)",
                    (turn_id, turn_id),
                )[0][0]
            if not known:
                raise TraceStoreError(self.path, f"no turn {turn_id!r}", untouched=False)
        if isinstance(out, str | Path):
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "w", encoding="utf-8") as stream:
                return self.export_jsonl(stream, turn_id=turn_id, since=since, until=until)
        count = 0
        for row in self._rows(turn_id, since, until, 2000):
            out.write(json.dumps(self._decode(row).to_dict(), ensure_ascii=False, default=_fallback))
            out.write("\n")
            count += 1
        return count

    def counts(self) -> dict[str, int]:
        """Rows per trace table (operator commands are not traces), and turns still ``running``."""
        with self._lock:
            tables = sorted(TABLES - {"commands"})
            out = {table: int(self._query(f"SELECT count(*) FROM {table}")[0][0]) for table in tables}
            out["running"] = int(self._query("SELECT count(*) FROM turns WHERE outcome = 'running'")[0][0])
        out.pop("meta", None)
        return out

    # --- following a live engine --------------------------------------------------------

    def events_after(
        self,
        event_id: int,
        *,
        limit: int = 1000,
        on_unreadable: Callable[[int, str], None] | None = None,
    ) -> list[tuple[int, Event]]:
        """The events stored after row ``event_id``, as (row id, event), in id order: how a console
        follows an engine in another process (ids grow in commit order; a batch is seen whole).

        An event that cannot be read raises, unless ``on_unreadable(row id, problem)`` is given: then
        it is reported there and skipped (a newer engine may write types this code does not know).
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        with self._lock:
            rows = self._query(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?", (event_id, limit)
            )
        if on_unreadable is None:
            return [(row[0], self._decode(row)) for row in rows]
        out: list[tuple[int, Event]] = []
        for row in rows:
            try:
                out.append((row[0], decode_event(*row[1:])))
            except (ValueError, TypeError) as exc:
                on_unreadable(row[0], one_line(f"{row[1]}: {exc}"))
        return out

    def tool_states(self) -> StoreSnapshot:
        """Every tool seen in the store with its newest manifest version and breaker state, read in
        one transaction, and the id of the newest event: follow it with :meth:`events_after`."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN")  # one snapshot: the writer may commit between our queries
            except sqlite3.Error as exc:
                raise self._fail("read", exc) from None
            try:
                newest = self._query("SELECT id, at, t FROM events ORDER BY id DESC LIMIT 1")
                tool_ids = sorted(
                    {
                        *self._distinct_tools("turn_tools", "1"),
                        *self._distinct_tools("manifests", "1"),
                        *self._distinct_tools("events", _BREAKER_TRANSITIONS),
                        *self._distinct_tools("events", _MANIFEST_CHANGES),
                    }
                )
                tools = [self._tool_state(tool_id) for tool_id in tool_ids]
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("COMMIT")
        last_id, newest_at, newest_t = newest[0] if newest else (0, None, None)
        return StoreSnapshot(tools, int(last_id), newest_at, newest_t)

    def _distinct_tools(self, table: str, where: str) -> list[str]:
        """Distinct tool ids by skipping through an index on (tool_id, …): one probe per tool."""
        sql = (
            "WITH RECURSIVE tools(tool_id) AS ("
            f" SELECT (SELECT min(tool_id) FROM {table} WHERE {where})"
            f" UNION ALL SELECT (SELECT min(tool_id) FROM {table} WHERE {where} AND tool_id > tools.tool_id)"
            " FROM tools WHERE tool_id IS NOT NULL)"
            " SELECT tool_id FROM tools WHERE tool_id IS NOT NULL"
        )
        return [r[0] for r in self._query(sql)]

    def _tool_state(self, tool_id: str) -> ToolState:
        transition = self._query(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {_BREAKER_TRANSITIONS}"
            " ORDER BY id DESC LIMIT 1",
            (tool_id,),
        )
        change = self._query(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {_MANIFEST_CHANGES}"
            " ORDER BY id DESC LIMIT 1",
            (tool_id,),
        )
        # The newest turn that used the tool: the breaker and manifest it started with.
        turn = self._query(
            "SELECT t.t_start, t.started_at, t.breakers, t.manifests,"
            " (SELECT min(id) FROM events WHERE turn = t.id)"
            " FROM turn_tools x JOIN turns t ON t.id = x.turn WHERE x.tool_id = ?"
            " ORDER BY x.started_at DESC, x.turn DESC LIMIT 1",
            (tool_id,),
        )
        stored = self._query(
            "SELECT digest, first_seen FROM manifests WHERE tool_id = ? ORDER BY first_seen DESC LIMIT 1",
            (tool_id,),
        )
        t_start, started_at, breakers, digests, turn_event_id = turn[0] if turn else (None,) * 5
        return ToolState(
            tool_id,
            self._newest_breaker(tool_id, transition, t_start, started_at, breakers, turn_event_id),
            self._newest_manifest(tool_id, change, started_at, digests, stored),
        )

    def _newest_breaker(
        self, tool_id: str, transition: list[Any], t_start: float | None, started_at: float | None,
        breakers: str | None, turn_event_id: int | None,
    ) -> StoredBreaker | None:  # fmt: skip
        snapshot = (_json(breakers) or {}).get(tool_id) if breakers else None
        if transition:
            event: Any = self._decode(transition[0])
            # A turn that started after the transition saw its outcome, and maybe a later timer's.
            later = snapshot is not None and (turn_event_id or 0) > transition[0][0]
            if not later:
                half_open_at = event.half_open_at if event.to_state is BreakerState.OPEN else None
                return StoredBreaker(event.to_state, event.consecutive_failures, half_open_at, event.at)
        if not isinstance(snapshot, dict) or started_at is None or t_start is None:
            return None
        try:
            state = BreakerState(snapshot["state"])
            half_open_in = snapshot.get("half_open_in_s")
            half_open_at = t_start + float(half_open_in) if half_open_in is not None else None
            failures = int(snapshot.get("consecutive_failures") or 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceStoreError(
                self.path, f"the breaker snapshot of {tool_id!r} cannot be read: {exc}", untouched=False
            ) from None
        if state is not BreakerState.OPEN:
            half_open_at = None
        return StoredBreaker(state, failures, half_open_at, started_at)

    def _newest_manifest(
        self, tool_id: str, change: list[Any], started_at: float | None, digests: str | None,
        stored: list[Any],
    ) -> StoredManifest | None:  # fmt: skip
        # Three witnesses, newest wins: a ManifestLoaded/Removed event, the newest stored version,
        # and the digest the tool's newest turn started with. On a tie the event wins: it knows more.
        candidates: list[tuple[float, int, str | None, Any]] = []
        if change:
            event: Any = self._decode(change[0])
            digest = event.digest if isinstance(event, ManifestLoaded) else None
            candidates.append((event.at, 2, digest, event))
        in_turn = (_json(digests) or {}).get(tool_id) if digests else None
        if isinstance(in_turn, str) and started_at is not None:
            candidates.append((started_at, 1, in_turn, None))
        if stored:
            candidates.append((stored[0][1], 0, stored[0][0], None))
        if not candidates:
            return None
        _, _, digest, event = max(candidates, key=lambda c: (c[0], c[1]))
        if digest is None:  # removed: the defaults apply now
            return None
        if not isinstance(event, ManifestLoaded):
            found = self._query(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {_MANIFEST_CHANGES}"
                " AND event_type = 'ManifestLoaded' AND json_extract(data, '$.digest') = ?"
                " ORDER BY id DESC LIMIT 1",
                (tool_id, digest),
            )
            event = self._decode(found[0]) if found else None
        content = self._query("SELECT content, first_seen FROM manifests WHERE digest = ?", (digest,))
        if isinstance(event, ManifestLoaded):
            body = event.manifest if event.manifest is not None else _json(content[0][0]) if content else {}
            return StoredManifest(digest, body or {}, event.version, event.path, event.at)
        if not content:
            return StoredManifest(digest, {}, None, None, started_at or 0.0)
        return StoredManifest(digest, _json(content[0][0]) or {}, None, None, content[0][1])

    # --- operator commands -----------------------------------------------------------------

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
        if self.readonly:
            raise TraceStoreError(self.path, "opened read-only: cannot submit commands", untouched=False)
        if action not in COMMAND_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(COMMAND_ACTIONS)}, got {action!r}")
        if not tool_id or not actor:
            raise ValueError(f"a command needs a tool and an actor, got {tool_id!r} and {actor!r}")
        with self._lock:
            try:
                cursor = self._conn.execute(
                    "INSERT INTO commands (created_at, action, tool_id, actor, reason, expires_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (time.time() if now is None else now, action, tool_id, actor, reason, expires_at),
                )
            except sqlite3.Error as exc:
                raise self._fail("submitting a command", exc) from None
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def pending_commands(self, limit: int = 100) -> list[CommandRow]:
        """Commands not acknowledged yet, oldest first."""
        with self._lock:
            rows = self._query(
                f"SELECT {_COMMAND_COLUMNS} FROM commands WHERE status = 'pending' ORDER BY id LIMIT ?",
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
        if self.readonly:
            raise TraceStoreError(self.path, "opened read-only: cannot acknowledge commands", untouched=False)
        if status not in ("applied", "failed"):
            raise ValueError(f"status must be 'applied' or 'failed', got {status!r}")
        with self._lock:
            try:
                cursor = self._conn.execute(
                    "UPDATE commands SET status = ?, result = ?, applied_at = ?"
                    " WHERE id = ? AND status = 'pending'",
                    (status, one_line(result), time.time() if now is None else now, command_id),
                )
            except sqlite3.Error as exc:
                raise self._fail("acknowledging a command", exc) from None
        return cursor.rowcount == 1

    def command(self, command_id: int) -> CommandRow:
        """One command, as it stands; raises if there is no such command."""
        with self._lock:
            rows = self._query(f"SELECT {_COMMAND_COLUMNS} FROM commands WHERE id = ?", (command_id,))
        if not rows:
            raise TraceStoreError(self.path, f"no command {command_id}", untouched=False)
        return CommandRow(*rows[0])

    # --- retention -----------------------------------------------------------------------

    def prune(
        self, *, older_than_s: float | None = None, keep: int | None = None, now: float | None = None
    ) -> int:
        """Remove turns started more than ``older_than_s`` ago and/or all but the newest ``keep``.

        A turn goes with its events, attempts and tools; events and attempts outside turns go by
        age only. Manifest versions are kept (they are small and old turns may name them).
        Returns the number of turns removed.
        """
        if self.readonly:
            raise TraceStoreError(self.path, "opened read-only: cannot prune", untouched=False)
        if older_than_s is None and keep is None:
            return 0
        cutoff = (time.time() if now is None else now) - older_than_s if older_than_s is not None else None
        doomed: list[str] = []
        params: list[Any] = []
        if cutoff is not None:
            doomed.append("SELECT id FROM turns WHERE started_at < ?")
            params.append(cutoff)
        if keep is not None:
            doomed.append(
                "SELECT id FROM (SELECT id FROM turns ORDER BY started_at DESC, id DESC LIMIT -1 OFFSET ?)"
            )
            params.append(max(keep, 0))
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        "CREATE TEMP TABLE IF NOT EXISTS doomed (id INTEGER PRIMARY KEY, turn_id TEXT)"
                    )
                    conn.execute("DELETE FROM temp.doomed")
                    conn.execute(
                        "INSERT OR IGNORE INTO temp.doomed SELECT id, turn_id FROM turns WHERE id IN"
                        f" ({' UNION '.join(doomed)})",
                        params,
                    )
                    removed = int(conn.execute("SELECT count(*) FROM temp.doomed").fetchone()[0])
                    conn.execute("DELETE FROM events WHERE turn IN (SELECT id FROM temp.doomed)")
                    conn.execute("DELETE FROM attempts WHERE turn IN (SELECT id FROM temp.doomed)")
                    conn.execute("DELETE FROM turn_tools WHERE turn IN (SELECT id FROM temp.doomed)")
                    conn.execute("DELETE FROM turns WHERE id IN (SELECT id FROM temp.doomed)")
                    conn.execute("DELETE FROM temp.doomed")
                    if cutoff is not None:
                        conn.execute("DELETE FROM events WHERE turn IS NULL AND at < ?", (cutoff,))
                        conn.execute("DELETE FROM attempts WHERE turn IS NULL AND at < ?", (cutoff,))
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._fail("prune", exc) from None
            self._open_turns.clear()
        return removed


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    return value if end == len(text) else _loads(text)


def _turn_row(r: Sequence[Any]) -> TurnRow:
    tools = tuple(sorted(r[8].split("\x1f"))) if r[8] else ()
    return TurnRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6] or 0, r[7], tools)


def _attempt_row(r: Sequence[Any], events: Mapping[int, Event]) -> AttemptRow:
    if r[5] == "error":
        return AttemptRow._make(r)
    return AttemptRow._make((*r[:12], getattr(events.get(r[0]), "value", None), r[13]))


# --- opening --------------------------------------------------------------------------------


def _open(
    path: Path, readonly: bool, synchronous: str, busy_timeout_ms: int, verify: bool, create: bool = True
) -> sqlite3.Connection:
    """Open (or create) the store, refusing anything that is not a healthy tripwire store of ours."""
    if readonly:
        _inspect(path, readonly=True)
        return _validated(path, busy_timeout_ms, verify, readonly=True)
    if create:
        created = _create_file(path)
    else:
        _inspect(path, readonly=True)  # nothing there, or an empty file: refused, never created
        created = False
    # An empty file is a creation that was interrupted before SQLite wrote anything: adopt it.
    fresh = created or not _inspect(path, readonly=False)
    if not fresh:
        _validated(path, busy_timeout_ms, verify, readonly=False).close()
    conn = _connect(path, busy_timeout_ms, readonly=False)
    try:
        if fresh:
            # Our mark goes into the header first: a store interrupted later is still recognisably ours.
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        else:
            _check_writable(conn, path, busy_timeout_ms)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        _migrate(conn, path, fresh, busy_timeout_ms)
    except BaseException:
        conn.close()
        if created and isinstance(sys.exc_info()[1], TraceStoreError):
            with contextlib.suppress(OSError):
                path.unlink()  # we made it and it holds nothing
        raise
    return conn


def _create_file(path: Path) -> bool:
    """Create the file owner-only before SQLite touches it; False when something is there already."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        raise TraceStoreError(
            path, f"cannot create: {path.parent} is not a directory", untouched=False
        ) from None
    except OSError as exc:
        raise TraceStoreError(path, f"cannot create: {exc.strerror or exc}", untouched=False) from None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise TraceStoreError(path, f"cannot create: {exc.strerror or exc}", untouched=False) from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
    finally:
        os.close(fd)
    return True


def _inspect(path: Path, *, readonly: bool) -> bool:
    """Look at the file before SQLite does; returns False for an empty file (nothing in it yet)."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        raise TraceStoreError(path, "no trace store here", untouched=False) from None
    except IsADirectoryError:
        raise TraceStoreError(path, "is a directory, not a trace store") from None
    except OSError as exc:
        raise TraceStoreError(path, f"cannot read: {exc.strerror or exc}") from None
    if not header:
        if readonly:
            raise TraceStoreError(path, "empty file, not a trace store")
        if not os.access(path, os.W_OK):
            raise TraceStoreError(path, "cannot write: permission denied")
        return False
    if not header.startswith(SQLITE_MAGIC):
        raise TraceStoreError(path, "not a SQLite database, so not a trace store")
    if len(header) < 100:
        raise TraceStoreError(path, "corrupt: truncated SQLite header")
    app_id = int.from_bytes(header[68:72], "big")
    if app_id not in (0, APPLICATION_ID):
        raise TraceStoreError(path, f"a SQLite database of another application (application_id {app_id:#x})")
    if not readonly and not os.access(path, os.W_OK):
        raise TraceStoreError(path, "cannot write: permission denied (open it read-only to browse)")
    return True


def _connect(path: Path, busy_timeout_ms: int, *, readonly: bool) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.absolute()))}{'?mode=ro' if readonly else '?mode=rw'}"
    try:
        conn = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
    except sqlite3.Error as exc:
        raise TraceStoreError(path, _problem(exc, busy_timeout_ms)) from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA cache_size = -16000")  # 16 MB: index inserts stay in memory
    except sqlite3.Error as exc:
        conn.close()
        raise TraceStoreError(path, _problem(exc, busy_timeout_ms)) from None
    return conn


def _problem(exc: sqlite3.Error, busy_timeout_ms: int) -> str:
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if "locked" in text or "busy" in text or code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return f"locked by another writer (still busy after {busy_timeout_ms / 1000:g}s)"
    if "not a database" in text:
        return "not a SQLite database (or encrypted), so not a trace store"
    if "malformed" in text or "corrupt" in text:
        return f"corrupt: {text}"
    return f"cannot open: {text}"


def _validated(path: Path, busy_timeout_ms: int, verify: bool, *, readonly: bool) -> sqlite3.Connection:
    """A read-only connection that has checked this is a healthy tripwire store we can read."""
    conn = _connect(path, busy_timeout_ms, readonly=True)
    try:
        try:
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = {
                r[0]
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                if not str(r[0]).startswith("sqlite_")
            }
        except sqlite3.Error as exc:
            raise TraceStoreError(path, _problem(exc, busy_timeout_ms)) from None
        current = len(MIGRATIONS)
        if app_id != APPLICATION_ID:
            if tables:
                listed = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
                raise TraceStoreError(path, f"a SQLite database that is not a trace store (tables: {listed})")
            raise TraceStoreError(path, "an empty SQLite database that is not a trace store")
        if version > current:
            raise TraceStoreError(
                path,
                f"schema version {version} is newer than this tripwire supports ({current})",
            )
        if version == current and not tables >= TABLES:
            raise TraceStoreError(path, f"corrupt: missing table(s) {', '.join(sorted(TABLES - tables))}")
        if readonly and version < current:
            raise TraceStoreError(
                path, f"schema version {version} is older than {current}: open it once read-write to migrate"
            )
        if verify:
            try:
                problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)")]
            except sqlite3.Error as exc:
                raise TraceStoreError(path, _problem(exc, busy_timeout_ms)) from None
            if problems != ["ok"]:
                lines = [line for p in problems for line in str(p).splitlines() if not line.startswith("***")]
                more = " (and more)" if len(lines) > 1 else ""
                raise TraceStoreError(path, f"corrupt: {lines[0] if lines else problems[0]}{more}")
    except BaseException:
        conn.close()
        raise
    return conn


def _check_writable(conn: sqlite3.Connection, path: Path, busy_timeout_ms: int) -> None:
    """Take the write lock once: another writer holding it past the busy timeout means locked."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise TraceStoreError(path, _problem(exc, busy_timeout_ms)) from None


def _migrate(conn: sqlite3.Connection, path: Path, fresh: bool, busy_timeout_ms: int) -> None:
    """Bring the schema to the newest version: every missing migration in one transaction."""
    migrations = list(MIGRATIONS)
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) >= len(migrations):
        return
    from sqlite_utils import Database  # only needed to migrate: readers start faster without it

    db = Database(conn, recursive_triggers=False, execute_plugins=False)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise TraceStoreError(path, _problem(exc, busy_timeout_ms)) from None
    version = step = int(conn.execute("PRAGMA user_version").fetchone()[0])  # another process may have won
    try:
        if version < len(migrations):
            for step in range(version, len(migrations)):
                migrations[step](db)
            conn.execute(f"PRAGMA user_version = {len(migrations)}")
            now = repr(time.time())
            conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [*([("created_at", now)] if fresh else []), (f"schema_{len(migrations)}_at", now)],
            )
        conn.execute("COMMIT")
    except Exception as exc:
        conn.execute("ROLLBACK")
        problem = f"migration to schema version {step + 1} failed: {type(exc).__name__}: {exc}"
        raise TraceStoreError(path, problem, untouched=not fresh) from None


# --- the recorder ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ManifestSnapshot:
    digest: str
    tool_id: str
    content: dict[str, Any]


_Item = Event | _ManifestSnapshot
_MANIFEST = _ATTEMPT + 1
_SINK_ACTIONS: dict[type[Event], int] = {
    TurnStarted: _STARTED,
    TurnFinished: _FINISHED,
    ManifestLoaded: _MANIFEST,
}
"""The events the recorder's sink looks at; every other event is only appended."""


@dataclass(frozen=True, slots=True)
class RecorderStats:
    written: int
    """Events committed."""
    batches: int
    errors: int
    """Failed batch writes (each batch is retried once before it is dropped)."""
    dropped: int
    """Events lost after a batch failed twice."""
    pending: int


class TraceRecorder(_ClosedOnExit):
    """Records an engine's events into a :class:`TraceStore` from a writer thread.

    The engine-side sink only appends to a deque. The writer drains it every ``batch_ms`` (or as
    soon as ``max_batch`` items wait) and commits each batch in one transaction. With
    ``durability="turn"`` the recorder becomes ``engine.recorder``: ``run_turn`` returns once the
    turn's events are committed. ``"batch"`` trades that for speed: a crash may lose the last
    ``batch_ms`` of events. A failing write never reaches the engine: it is counted, retried once
    with the next batch interval, then logged on one line and dropped.
    """

    def __init__(
        self,
        store: TraceStore,
        *,
        durability: Literal["turn", "batch"] = "turn",
        batch_ms: float = 50,
        max_batch: int = 10_000,
        durable_timeout_s: float = 10.0,
    ) -> None:
        if durability not in ("turn", "batch"):
            raise ValueError(f"durability must be 'turn' or 'batch', got {durability!r}")
        if not batch_ms > 0 or max_batch < 1:
            raise ValueError(
                f"batch_ms must be positive and max_batch at least 1, got {batch_ms}, {max_batch}"
            )
        self.store = store
        self.durability = durability
        self.batch_s = batch_ms / 1000.0
        self.max_batch = max_batch
        self.durable_timeout_s = durable_timeout_s
        self._queue: deque[_Item] = deque()
        self._enqueued = 0
        self._committed = 0
        self._marks: dict[str, int] = {}
        self._digests: set[str] = set()
        self._engine: Engine | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._wake = threading.Event()
        self._done = threading.Condition()
        self._stopping = False
        self._retry: list[_Item] | None = None
        self._written = self._batches = self._errors = self._dropped = 0
        self._thread: threading.Thread | None = None

    # --- engine side ---------------------------------------------------------------------

    def attach(self, engine: Engine) -> Self:
        """Subscribe to ``engine`` (inline: the sink only enqueues) and start the writer thread."""
        if self._engine is not None:
            raise RuntimeError("this recorder is already attached to an engine")
        self._engine = engine
        for tool_id, entry in engine.manifests.entries.items():  # the versions in force now
            self._snapshot(entry.digest, tool_id)
        self._unsubscribe = engine.subscribe(self._sink, direct=True)
        if self.durability == "turn":
            engine.recorder = self
        self._start()
        return self

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tripwire-trace-writer", daemon=True)
            self._thread.start()

    def _sink(self, event: Event) -> None:
        """Called inline in the engine's thread: append and count, nothing that can block."""
        queue = self._queue
        what = _SINK_ACTIONS.get(type(event))
        if what is None:
            queue.append(event)
        else:
            e: Any = event
            if what == _STARTED and e.manifests:
                for tool_id, digest in e.manifests.items():
                    self._snapshot(digest, tool_id)
            elif what == _MANIFEST:
                self._snapshot(e.digest, e.tool_id, e.manifest)
            queue.append(event)
            if what == _FINISHED and self.durability == "turn":
                self._marks[e.turn_id] = self._enqueued + 1
        self._enqueued += 1
        if len(queue) >= self.max_batch:
            self._wake.set()

    def _snapshot(self, digest: str, tool_id: str, content: dict[str, Any] | None = None) -> None:
        """Queue a manifest version's content, once per digest, if it is still the one in force.

        ``content``: the version as data when the caller has it (a ManifestLoaded carries it).
        """
        engine = self._engine
        if digest in self._digests or engine is None:
            return
        try:
            if engine.manifests.digest(tool_id) != digest:
                return  # superseded already: its content is gone
            if content is None:
                content = engine.manifest(tool_id).model_dump(mode="json")
        except Exception as exc:
            log.warning("trace recorder: could not snapshot manifest %s of %s: %s", digest, tool_id, exc)
            return
        self._digests.add(digest)
        self._queue.append(_ManifestSnapshot(digest, tool_id, content))
        self._enqueued += 1

    async def turn_finished(self, turn_id: str) -> None:
        """With durability "turn": return once everything up to the turn's TurnFinished is committed."""
        # No mark: a turn id run twice at once; waiting for everything so far is always enough.
        mark = self._marks.pop(turn_id, None) or self._enqueued
        if self._committed >= mark:
            return
        self._wake.set()
        durable = await anyio.to_thread.run_sync(
            self._wait, mark, self.durable_timeout_s, abandon_on_cancel=True
        )
        if not durable:
            log.warning(
                "trace recorder: turn %s not durable after %gs; carrying on", turn_id, self.durable_timeout_s
            )

    def _wait(self, mark: int, timeout: float) -> bool:
        with self._done:
            return self._done.wait_for(lambda: self._committed >= mark or self._thread is None, timeout)

    # --- writer side ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.batch_s)
            self._wake.clear()
            stopping = self._stopping
            try:
                self._drain()
                while stopping and (self._retry is not None or self._queue):
                    self._drain()  # a batch fails at most twice: this ends
            except Exception:  # a bug here must not stop recording for good
                log.exception("trace recorder: writer failed")
            if stopping:
                return

    def _drain(self) -> None:
        """Write what is queued, in batches of at most ``max_batch``; a pending retry goes first."""
        if self._retry is not None:
            batch, self._retry = self._retry, None
            self._commit(batch, retry=True)
        queue = self._queue
        while queue and self._retry is None:
            batch = []
            popleft = queue.popleft
            with contextlib.suppress(IndexError):
                for _ in range(self.max_batch):
                    batch.append(popleft())
            self._commit(batch, retry=False)

    def _commit(self, batch: list[_Item], *, retry: bool) -> None:
        events: list[Event] = []
        manifests: list[tuple[str, str, Mapping[str, Any]]] = []
        for item in batch:
            if isinstance(item, Event):
                events.append(item)
            else:
                manifests.append((item.digest, item.tool_id, item.content))
        try:
            self.store.write(events, manifests=manifests)
        except Exception as exc:
            self._errors += 1
            if not retry:
                self._retry = batch
                log.warning("trace recorder: write failed, retrying once: %s", exc)
                return
            self._dropped += len(events)
            log.error("trace recorder: dropped %d events after a second failed write: %s", len(events), exc)
        else:
            self._written += len(events)
            self._batches += 1
        with self._done:
            self._committed += len(batch)
            self._done.notify_all()

    # --- control -------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until everything enqueued so far is committed (or dropped); False on timeout."""
        target = self._enqueued
        if self._committed >= target:
            return True
        if self._thread is None:
            self._drain()
            return self._committed >= target
        self._wake.set()
        deadline = time.monotonic() + timeout
        with self._done:
            while self._committed < target:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return self._committed >= target
                self._done.wait(min(left, self.batch_s or 0.05))
                self._wake.set()  # a pending retry waits for the next interval: keep it moving
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Detach from the engine, write what is queued and stop the writer (the store stays open)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        engine = self._engine
        if engine is not None and engine.recorder is self:
            engine.recorder = None
        self.flush(timeout)
        thread = self._thread
        if thread is not None:
            self._stopping = True
            self._wake.set()
            thread.join(timeout)
            with self._done:
                self._thread = None
                self._done.notify_all()

    @property
    def stats(self) -> RecorderStats:
        return RecorderStats(
            self._written, self._batches, self._errors, self._dropped, self._enqueued - self._committed
        )


__all__ = [
    "APPLICATION_ID",
    "COMMAND_ACTIONS",
    "DEFAULT_PATH",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "AttemptRow",
    "CommandAction",
    "CommandRow",
    "CommandStatus",
    "RecorderStats",
    "StoreSnapshot",
    "StoredBreaker",
    "StoredManifest",
    "StoredTurn",
    "ToolState",
    "TraceRecorder",
    "TraceStore",
    "TraceStoreError",
    "TurnPage",
    "TurnRow",
    "decode_event",
]
