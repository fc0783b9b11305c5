"""Schema 5: a smaller store. Nothing stored twice, every column plain text or JSON, and every read
giving exactly what it gave before, whether the rows were written compact or migrated in place."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from engine.events import (
    BreakerOpened,
    BreakerRestored,
    Event,
    ManifestLoaded,
    RecordingStarted,
    ToolRegistered,
    TurnFinished,
    TurnStarted,
)
from engine.store import MIGRATIONS, SCHEMA_VERSION, TraceStore
from engine.strategies.breaker.machine import BreakerState
from tests.engine.conftest import WALL
from tests.engine.test_store import every_event, turn_events

ATTEMPT_COLUMNS = (
    "event_id, turn, turn_id, call_id, tool_id, attempt, outcome, kind, class, status_code, message,"
    " latency_ms, fault_type, at"
)


def recorded_turn(turn_id: str, at: float) -> list[Event]:
    """A turn as an engine records it: breakers and manifests it started with, a fault injected."""
    events = turn_events(turn_id, at, tools=("flight_search", "hotel_search", "car_rental"), failures=2)
    first = events[0]
    assert isinstance(first, TurnStarted)
    events[0] = TurnStarted(
        at=first.at, t=first.t, turn_id=turn_id, calls=first.calls, deadline_ms=first.deadline_ms,
        spec=first.spec, seed="5eed",
        breakers={"flight_search": {"state": "CLOSED", "consecutive_failures": 0, "half_open_in_s": None}},
        manifests={"flight_search": "d1", "hotel_search": "d2"},
    )  # fmt: skip
    for e in events:  # a fault injected into every second attempt: successes carry it in attempts
        if getattr(e, "attempt", 0) == 3 and type(e).__name__ == "AttemptStarted":
            e.fault_type = "latency"  # type: ignore[attr-defined]
    return events


SINCE_V6 = (BreakerRestored, RecordingStarted, ToolRegistered)
"""Events that say a breaker's state and only a schema-6 reader reads so: not in an older store."""


def workload(*, since_v6: bool = True) -> list[Event]:
    events: list[Event] = [
        ManifestLoaded(at=WALL - 1, t=0.0, tool_id="flight_search", path="m.yaml", version=1, digest="d1",
                       manifest={"timeout_ms": 5}),
    ]  # fmt: skip
    events += recorded_turn("t1", WALL)
    events += recorded_turn("t2", WALL + 1)
    events += [e for e in every_event("t2") if not isinstance(e, TurnStarted)]  # every kind, in the turn
    events += [e for e in every_event(None) if not isinstance(e, TurnStarted | TurnFinished)]  # and outside
    if not since_v6:
        events = [e for e in events if not isinstance(e, SINCE_V6)]
    events += recorded_turn("t1", WALL + 2)  # the id again (a restarted engine): the first is renamed
    events.append(
        BreakerOpened(at=WALL + 3, t=3.0, tool_id="car_rental", from_state=BreakerState.CLOSED,
                      to_state=BreakerState.OPEN, reason="5 failures", actor="engine", consecutive_failures=5)
    )  # fmt: skip
    return events


def everything_read(store: TraceStore) -> dict[str, Any]:
    """What every reader sees: events, each turn whole, pages, the board, the follower, an export."""
    out = io.StringIO()
    store.export_jsonl(out)
    turns = store.list_turns(limit=100).rows
    return {
        "events": list(store.events()),
        "turns": turns,
        "loaded": [store.load_turn(row.turn_id) for row in turns],
        "by_tool": store.list_turns(tool="hotel_search").rows,
        "range": list(store.events(since=WALL - 10, until=WALL + 1.5)),
        "states": store.tool_states(),
        "after": store.events_after(0),
        "export": out.getvalue(),
        "transition": store.last_transition("car_rental"),
        "counts": store.counts(),
    }


def test_compact_rows_read_back_exactly_as_written(tmp_path: Path) -> None:
    events = workload()
    with TraceStore(tmp_path / "t.db") as store:
        store.write(events[:5], manifests=[("d1", "flight_search", {"timeout_ms": 5})])
        store.write(events[5:])
        assert list(store.events()) == events
        seen = everything_read(store)
        assert [getattr(e, "turn_id", None) for e in store.load_turn("t1~1").events] == ["t1"] * len(
            recorded_turn("t1", 0)
        )
        assert seen["loaded"][0].row.turn_id == "t1" and seen["loaded"][-1].row.turn_id == "t1~1"
        # Attempts worked out from the events, the fault of each success its attempt's.
        attempts = store.load_turn("t2").attempts
        assert [(a.outcome, a.attempt, a.fault_type) for a in attempts[:4]] == [
            ("error", 1, None), ("error", 2, None), ("ok", 3, "latency"), ("error", 1, None)
        ]  # fmt: skip


def test_a_v2_store_is_migrated_in_place_and_reads_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.db"
    events = workload(since_v6=False)
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS[:2])
    with TraceStore(path) as v2:
        assert v2.schema_version == 2
        v2.write(events, manifests=[("d1", "flight_search", {"timeout_ms": 5})])
        before = everything_read(v2)
        old_attempts = v2.db.execute(f"SELECT {ATTEMPT_COLUMNS} FROM attempts ORDER BY event_id").fetchall()
        started = v2.db.execute("SELECT data FROM events WHERE event_type = 'TurnStarted'").fetchall()
        assert all('"spec":' in data for (data,) in started), "stored twice, as schema 2 did"
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS)
    with TraceStore(path) as store:
        assert store.schema_version == len(MIGRATIONS) == SCHEMA_VERSION
        after = everything_read(store)
        for key in before:
            assert after[key] == before[key], key
        assert list(store.events()) == events
        # The attempts view shows what the table held.
        assert store.db.execute(f"SELECT {ATTEMPT_COLUMNS} FROM attempts ORDER BY event_id").fetchall() == (
            old_attempts
        )
        assert "attempts" in store.db.view_names() and "attempts" not in store.db.table_names()
        started = store.db.execute("SELECT data FROM events WHERE event_type = 'TurnStarted'").fetchall()
        assert not any('"spec":' in data for (data,) in started), "the spec is in the turn's row only"
        # Written after the migration, compact: the same reads.
        store.write(recorded_turn("t3", WALL + 5))
        assert store.load_turn("t3").events == recorded_turn("t3", WALL + 5)


def test_nothing_is_stored_twice(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        store.write(recorded_turn("t1", WALL))
        conn = store.db.conn
        data, turn_id = conn.execute(
            "SELECT data, turn_id FROM events WHERE event_type = 'TurnStarted'"
        ).fetchone()
        assert json.loads(data) == {"calls": ["c0", "c1", "c2"], "deadline_ms": 60000.0, "seed": "5eed"}
        assert turn_id is None, "an event in a turn leaves its id to the turn's row"
        spec, breakers = conn.execute("SELECT spec, breakers FROM turns").fetchone()
        assert json.loads(spec)["id"] == "t1" and "flight_search" in json.loads(breakers)
        started = conn.execute("SELECT data FROM events WHERE event_type = 'AttemptStarted'").fetchone()[0]
        assert json.loads(started) == {"attempt": 1, "timeout_ms": 1000.0, "deadline": 1.0}, "no defaults"
        assert "attempts" in store.db.view_names()


def test_every_column_is_plain_text_or_json_any_sqlite_tool_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with TraceStore(path) as store:
        store.write(workload(), manifests=[("d1", "flight_search", {"timeout_ms": 5})])
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        ]
        for table in tables:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            for column in columns:
                kinds = {r[0] for r in conn.execute(f"SELECT DISTINCT typeof({column}) FROM {table}")}
                assert "blob" not in kinds, f"{table}.{column}"
        invalid = "SELECT count(*) FROM events WHERE NOT json_valid(data)"
        assert conn.execute(invalid).fetchone()[0] == 0
        for column in ("spec", "breakers", "manifests", "statuses"):
            assert (
                conn.execute(f"SELECT count(*) FROM turns WHERE NOT json_valid({column})").fetchone()[0] == 0
            )
        assert conn.execute("SELECT count(*) FROM attempts").fetchone()[0] > 0
    finally:
        conn.close()
