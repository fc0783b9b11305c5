"""The trace store's schema: every table and index, as versioned migrations.

Migration ``i`` takes a store from schema version ``i`` to ``i + 1`` (``PRAGMA user_version``);
a released migration is never edited. Opening a store read-write applies the missing ones in one
transaction (:mod:`engine.store.opening`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.store.codec import TURN_STARTED_FIELDS, dumps

if TYPE_CHECKING:
    from sqlite_utils import Database

APPLICATION_ID = 0x54525057
"""``PRAGMA application_id`` of a tripwire trace store ("TRPW"): tells our files from others'."""

Migration = Callable[["Database"], None]


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
BREAKER_TRANSITIONS = (
    "event_type IN ('BreakerOpened', 'BreakerHalfOpened', 'BreakerClosed', 'BreakerTripped', 'BreakerReset',"
    " 'BreakerDisabled')"
)
MANIFEST_CHANGES = "event_type IN ('ManifestLoaded', 'ManifestRemoved')"


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
    db.execute(f"CREATE INDEX events_breaker_transitions ON events (tool_id, id) WHERE {BREAKER_TRANSITIONS}")
    db.execute(f"CREATE INDEX events_manifest_changes ON events (tool_id, id) WHERE {MANIFEST_CHANGES}")
    db.execute("CREATE INDEX manifests_by_tool ON manifests (tool_id, first_seen)")


def _v3(db: Database) -> None:
    """Who records each turn: a turn left ``running`` by a process that is gone can be closed."""
    # process_key: boot id, pid namespace and start time in clock ticks (Linux), which tell a live
    # process from a later one given the same pid; NULL where they cannot be read.
    db.execute(
        "CREATE TABLE writers (id INTEGER PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,"
        " process_key TEXT, process_started_at FLOAT, opened_at FLOAT NOT NULL, heartbeat_at FLOAT NOT NULL,"
        " closed_at FLOAT)"
    )
    db.execute("ALTER TABLE turns ADD COLUMN writer INTEGER")


def _v4(db: Database) -> None:
    """Signed operator commands: who sent each (host and pid beside the OS user), its MAC, and
    ``refused`` for those the engine would not take; ids never reused."""
    # SQLite cannot change a CHECK constraint in place: the table is rebuilt, its rows kept.
    # AUTOINCREMENT: a command's id is covered by its MAC and taken at most once, so an id must
    # never come back after the newest rows are deleted.
    db.execute("ALTER TABLE commands RENAME TO commands_v3")
    db.execute(
        "CREATE TABLE commands (id INTEGER PRIMARY KEY AUTOINCREMENT, created_at FLOAT NOT NULL,"
        " action TEXT NOT NULL CHECK (action IN ('trip', 'reset', 'disable')), tool_id TEXT NOT NULL,"
        " actor TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT 'pending'"
        " CHECK (status IN ('pending', 'applied', 'failed', 'refused')), applied_at FLOAT, result TEXT,"
        " expires_at FLOAT, host TEXT, pid INTEGER, mac TEXT)"
    )
    db.execute(
        "INSERT INTO commands (id, created_at, action, tool_id, actor, reason, status, applied_at, result,"
        " expires_at) SELECT id, created_at, action, tool_id, actor, reason, status, applied_at, result,"
        " expires_at FROM commands_v3"
    )
    db.execute("DROP TABLE commands_v3")  # and its index
    db.execute("CREATE INDEX commands_pending ON commands (id) WHERE status = 'pending'")


# What the ``attempts`` view shows, from the ToolError and CallSucceeded events: the table it
# replaces held the same columns. A success's fault is its AttemptStarted's.
ATTEMPTS_VIEW = """CREATE VIEW attempts AS SELECT e.id AS id, e.id AS event_id, e.turn AS turn,
 coalesce(e.turn_id, (SELECT turn_id FROM turns WHERE turns.id = e.turn)) AS turn_id, e.call_id AS call_id,
 e.tool_id AS tool_id,
 CASE WHEN e.event_type = 'ToolError' THEN json_extract(e.data, '$.attempt')
  ELSE json_extract(e.data, '$.attempts') END AS attempt,
 CASE WHEN e.event_type = 'ToolError' THEN 'error' WHEN json_extract(e.data, '$.partial') THEN 'partial'
  ELSE 'ok' END AS outcome,
 CASE WHEN e.event_type = 'ToolError' THEN json_extract(e.data, '$.kind') END AS kind,
 CASE WHEN e.event_type = 'ToolError' THEN json_extract(e.data, '$.classification') END AS class,
 CASE WHEN e.event_type = 'ToolError' THEN json_extract(e.data, '$.status_code') END AS status_code,
 CASE WHEN e.event_type = 'ToolError' THEN json_extract(e.data, '$.error') END AS message,
 CASE WHEN e.event_type = 'ToolError' THEN json_extract(e.data, '$.latency_ms')
  ELSE json_extract(e.data, '$.attempt_ms') END AS latency_ms,
 CASE WHEN e.event_type = 'ToolError' THEN json_extract(e.data, '$.fault_type')
  ELSE (SELECT json_extract(s.data, '$.fault_type') FROM events s WHERE s.turn IS e.turn
   AND s.call_id = e.call_id AND s.tool_id = e.tool_id AND s.event_type = 'AttemptStarted' AND s.id < e.id
   AND json_extract(s.data, '$.attempt') = json_extract(e.data, '$.attempts') ORDER BY s.id DESC LIMIT 1)
  END AS fault_type,
 e.at AS at
 FROM events e WHERE e.event_type IN ('ToolError', 'CallSucceeded')"""


def _v5(db: Database) -> None:
    """A smaller store: what was stored twice is stored once (see :mod:`engine.store.codec`).

    A TurnStarted event's spec, breakers and manifests stay in its turn's row only (reads put them
    back); the ``attempts`` table becomes a view of the events it was derived from. Rows written
    later also leave out the fields at their defaults and, in a turn, the turn id (the turn's row
    has it); the rows already there keep theirs: rewriting every row would take minutes.
    """
    conn = db.conn
    # Through the turns (events_by_turn): a turn's TurnStarted is its first event, no table scan.
    started = conn.execute(
        "SELECT e.id, e.data, t.id, t.spec, t.breakers, t.manifests FROM turns t"
        " JOIN events e ON e.turn = t.id AND e.event_type = 'TurnStarted'"
    ).fetchall()
    for event_id, data, turn, *big in started:
        texts = [text if text is not None else "null" for text in big]
        suffix = "".join(f',"{name}":{text}' for name, text in zip(TURN_STARTED_FIELDS, texts, strict=True))
        if data.endswith(suffix + "}") and len(data) > len(suffix) + 2:  # as every writer since v1 did
            rest = data[: -len(suffix) - 1] + "}"
        else:
            fields: dict[str, Any] = json.loads(data)
            values = [fields.pop(name, None) for name in TURN_STARTED_FIELDS]
            if values != [json.loads(text) for text in texts]:  # never expected: the event is the record
                conn.execute(
                    "UPDATE turns SET spec = ?, breakers = ?, manifests = ? WHERE id = ?",
                    (*(dumps(value) for value in values), turn),
                )
            rest = dumps(fields)
        conn.execute("UPDATE events SET data = ? WHERE id = ?", (rest, event_id))
    conn.execute("DROP TABLE attempts")  # and its index
    conn.execute(ATTEMPTS_VIEW)


BREAKER_STATES = (
    "event_type IN ('BreakerOpened', 'BreakerHalfOpened', 'BreakerClosed', 'BreakerTripped', 'BreakerReset',"
    " 'BreakerDisabled', 'BreakerRestored', 'ToolRegistered')"
)
"""The events that say a tool's breaker state: its transitions, restored overrides, registration.
The WHERE clause of _v6's partial index: queries repeat it word for word. Never edit it."""
RECORDING_STARTS = "event_type = 'RecordingStarted'"
"""The WHERE clause of _v6's other partial index. Never edit it."""


def _v6(db: Database) -> None:
    """Operators' standing overrides, and what tells one engine's run from the next: readers take a
    tool's state from its newest breaker event, restored override or registration, never from an
    earlier run's last transition (:mod:`engine.store.standing`)."""
    db.execute(
        "CREATE TABLE overrides (tool_id TEXT PRIMARY KEY, state TEXT NOT NULL CHECK (state IN"
        " ('FORCED_OPEN', 'DISABLED')), actor TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',"
        " set_at FLOAT NOT NULL) WITHOUT ROWID"
    )
    db.execute(f"CREATE INDEX events_breaker_states ON events (tool_id, id) WHERE {BREAKER_STATES}")
    db.execute(f"CREATE INDEX events_recording_starts ON events (id) WHERE {RECORDING_STARTS}")


def _v7(db: Database) -> None:
    """Whether a writer closed the store itself or was found gone (SIGKILLed, crashed) and closed by
    the next read-write open: readers say "gone", not "stopped", for a crash."""
    db.execute("ALTER TABLE writers ADD COLUMN found_gone INTEGER NOT NULL DEFAULT 0")


MIGRATIONS: list[Migration] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7]
"""Migration ``i`` takes a store from schema version ``i`` to ``i + 1``; never edit a released one."""
SCHEMA_VERSION = len(MIGRATIONS)
"""The newest schema's version: what opening migrates a store up to."""
TABLES = frozenset({"meta", "turns", "turn_tools", "events", "manifests", "commands", "writers", "overrides"})
"""Every table of the newest schema (``attempts`` is a view since schema 5)."""
OVERRIDES_SINCE = 6
"""The schema from which a store keeps standing overrides and tells one engine's run from the next."""
COMPACT_SINCE = 5
"""The schema from which rows are written compact: TurnStarted's big fields and ``attempts`` once,
defaults and a turn's id left out of event rows (older schemas: only while a test makes one)."""
