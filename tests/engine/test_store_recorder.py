"""The recorder's durability contract when the store refuses writes.

Real SQLite errors, made in-process: ``PRAGMA max_page_count`` at the store's size makes SQLite
answer "database or disk is full" (SQLITE_FULL, rolled back by SQLite itself), ``PRAGMA
query_only`` makes it answer "attempt to write a readonly database". The disk-full, lock and
kill tests with real processes and file systems are in tests/reliability/.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from engine.errors import TurnNotPersisted
from engine.events import AttemptFailed, Event, ManifestRejected, TurnFinished, TurnStarted
from engine.store import StoreWriteError, TraceRecorder, TraceStore
from engine.store.backlog import Backlog, HeldBatch
from engine.store.failures import FailureLog, write_problem
from engine.turn import ToolCall, Turn
from tests.engine.conftest import WALL
from tests.engine.test_store import travel_engine, turn_events

pytestmark = pytest.mark.anyio
real_time = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""Real threads wait for real commits: these run on a real-time loop."""


def fill_up(store: TraceStore) -> None:
    """The store's file may not grow by a page: every write that needs one fails, as on a full disk.

    The room left in its pages is filled too (with events outside turns), as on a full disk: a
    turn's compact rows (schema 5) could otherwise fit in it."""
    with store._lock:
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")
    size = 4096
    while size >= 1:
        try:
            store.write(
                [ManifestRejected(at=WALL, t=0.0, path="filler", errors=("x" * size,), kept_digest=None)]
            )
        except StoreWriteError:
            size //= 2


def free_up(store: TraceStore) -> None:
    with store._lock:
        store._conn.execute("PRAGMA max_page_count = 1073741823")


def refuse_writes(store: TraceStore, refuse: bool) -> None:
    """Every write refused (SQLite: "attempt to write a readonly database"), or none."""
    with store._lock:
        store._conn.execute(f"PRAGMA query_only = {int(refuse)}")


def hotel_turn(turn_id: str) -> Turn:
    return Turn([ToolCall("h", "hotel_search", {"n": turn_id})], id=turn_id)


@real_time
async def test_a_turn_the_store_cannot_take_raises_at_once_naming_sqlites_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, turn = travel_engine()
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store, batch_ms=5, durable_timeout_s=60).attach(engine)
        assert recorder.flush(5)
        fill_up(store)
        with caplog.at_level(logging.WARNING, logger="tripwire.store"):
            started = time.monotonic()
            with pytest.raises(TurnNotPersisted) as first:
                await engine.run_turn(turn)
            with pytest.raises(TurnNotPersisted) as second:
                await engine.run_turn(hotel_turn("again"))
            assert time.monotonic() - started < 30, "at once, not after durable_timeout_s"
            for raised, turn_id in ((first.value, "trip"), (second.value, "again")):
                assert "database or disk is full" in str(raised)
                assert f"turn {turn_id} not persisted" in str(raised) and "\n" not in str(raised)
                assert (raised.result.turn_id, raised.result.outcome) == (turn_id, "ok"), "the result is kept"
            stats = recorder.stats
            assert stats.not_persisted == 2 and stats.problem == "write failed: database or disk is full"
            assert stats.dropped == 0 and stats.held > 0
            with TraceStore(tmp_path / "t.db", readonly=True) as reader:
                on_disk = {r.outcome for r in reader.list_turns().rows}
                assert on_disk <= {"running"}, "no end on disk: nothing is reported durable that is not"

            free_up(store)
            assert recorder.flush(10), "the kept batches are written once the store takes writes"
            await engine.run_turn(hotel_turn("after"))  # durable again: returns normally
        assert [r.outcome for r in store.list_turns().rows] == ["ok", "ok", "ok"]
        assert store.load_turn("trip").events == [*first.value.result.trace.events]
        stats = recorder.stats
        assert stats.not_persisted == 0 and stats.problem is None and stats.dropped == 0
        recorder.close()
    lines = [r.getMessage() for r in caplog.records]
    assert not any("cannot rollback" in line for line in lines), "the real error is never masked"
    full = [line for line in lines if "database or disk is full" in line]
    assert len(full) == 2, f"once when it starts and once when it ends, not per batch: {full}"
    assert "works again after" in full[1]


@real_time
async def test_a_store_that_turns_read_only_fails_turns_at_once_and_writes_them_later(tmp_path: Path) -> None:
    engine, turn = travel_engine()
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store, batch_ms=5, durable_timeout_s=60).attach(engine)
        refuse_writes(store, True)
        with pytest.raises(TurnNotPersisted, match="attempt to write a readonly database"):
            await engine.run_turn(turn)
        assert recorder.stats.not_persisted == 1
        refuse_writes(store, False)
        assert recorder.flush(10)
        assert store.load_turn("trip").row.outcome == "ok"
        recorder.close()


def test_a_recorder_refuses_a_store_opened_read_only(tmp_path: Path) -> None:
    TraceStore(tmp_path / "t.db").close()
    with (
        TraceStore(tmp_path / "t.db", readonly=True) as store,
        pytest.raises(StoreWriteError, match="opened read-only: cannot record into it"),
    ):
        TraceRecorder(store)


@real_time
async def test_a_batch_that_cannot_be_written_is_written_around_losing_only_what_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine, turn = travel_engine()
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store, batch_ms=5).attach(engine)
        real_write = store.write

        def poisoned(events: list[Event], **kwargs: Any) -> int:
            if any(isinstance(e, AttemptFailed) for e in events):
                raise TypeError("cannot encode this")  # a bug, not the store: the batch itself
            return real_write(events, **kwargs)

        monkeypatch.setattr(store, "write", poisoned)
        with pytest.raises(TurnNotPersisted, match="events lost: a AttemptFailed cannot be written"):
            await engine.run_turn(turn)
        recorder.close()
        stored = store.load_turn("trip")
        assert stored.row.outcome == "ok", "everything else of the turn is written"
        assert not any(isinstance(e, AttemptFailed) for e in stored.events)
        stats = recorder.stats
        assert stats.dropped == 2 and stats.pending == 0  # flight_search failed twice
    assert any("writing it one event at a time" in r.getMessage() for r in caplog.records)


@real_time
async def test_past_its_bound_the_backlog_keeps_turn_starts_and_ends_and_counts_the_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, _ = travel_engine()
    emitted: list[Event] = []
    engine.subscribe(emitted.append, direct=True)
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store, durability="batch", batch_ms=5, max_held=30).attach(engine)
        assert recorder.flush(5)
        refuse_writes(store, True)
        ids = [f"t{i}" for i in range(8)]
        with caplog.at_level(logging.WARNING, logger="tripwire.store"):
            for turn_id in ids:
                await engine.run_turn(hotel_turn(turn_id))  # "batch": run_turn never waits
            assert not recorder.flush(0.3)  # the store still refuses
            stats = recorder.stats
            assert stats.dropped > 0, "past the bound, something is lost"
            assert stats.not_persisted == len(ids), "every turn's end is held, none in the store"
            refuse_writes(store, False)
            assert recorder.flush(10)
        rows = {r.turn_id: r for r in store.list_turns().rows}
        assert set(rows) == set(ids) and {r.outcome for r in rows.values()} == {"ok"}, (
            "each turn is stored with its outcome, without the details the bound cost"
        )
        stored = sum(len(store.load_turn(t).events) for t in ids)
        assert stats.dropped + stored == len(emitted), "every event is stored or counted as lost"
        assert recorder.stats.not_persisted == 0
        recorder.close()
    losses = [r.getMessage() for r in caplog.records if "dropping the oldest" in r.getMessage()]
    assert len(losses) == 1, "said once"


@real_time
async def test_closing_finishes_the_turns_it_saw_start_as_interrupted(tmp_path: Path) -> None:
    engine, _ = travel_engine()
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store, durability="batch", batch_ms=5).attach(engine)
        for event in turn_events("half", WALL, outcome=None):  # a turn that never got to its end
            engine.runtime.publish(event)
        recorder.close()
        row = store.load_turn("half").row
    assert row.outcome == "interrupted"
    assert row.summary == "interrupted: recording stopped before the turn finished"
    assert row.ended_at == WALL and row.duration_ms == 0.0


def test_failures_are_logged_once_per_cause_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailureLog(logging.getLogger("tripwire.store"), "writing", every_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="tripwire.store"):
        for _ in range(800):
            failures.failed("database or disk is full")
            now[0] += 0.05  # 40 s of failing every 50 ms
        failures.failed("database is locked")
        now[0] += 30
        failures.failed("database or disk is full")
        failures.recovered()
    assert [r.getMessage() for r in caplog.records] == [
        "writing failed: database or disk is full",
        "writing failed: database is locked",
        "writing still fails: database or disk is full (800 more times in the last 70s)",
        "writing works again after 801 failed attempt(s) over 70.0s (database or disk is full)",
        "writing works again after 1 failed attempt(s) over 30.0s (database is locked)",
    ]


def test_sqlite_errors_are_told_apart_by_their_code() -> None:
    import sqlite3

    conn = sqlite3.connect(":memory:")
    conn.execute("PRAGMA query_only = 1")
    with pytest.raises(sqlite3.Error) as readonly:
        conn.execute("CREATE TABLE x (a)")
    assert write_problem(readonly.value) == "read-only"
    with pytest.raises(sqlite3.Error) as other:
        conn.execute("SELECT * FROM nowhere")
    assert write_problem(other.value) == "other"
    assert write_problem(sqlite3.OperationalError("database is locked")) == "locked"


def test_the_backlog_thins_the_oldest_batches_then_drops_them_whole() -> None:
    a, b = turn_events("a", WALL), turn_events("b", WALL)
    backlog = Backlog(limit=len(a) + 2)
    backlog.hold(HeldBatch(0, len(a), list(a)))
    backlog.hold(HeldBatch(len(a), len(b), list(b)))
    assert backlog.items == len(a) + len(b)
    loss = backlog.trim()
    assert loss is not None and loss.ranges == [(0, len(a))] and loss.settled is None
    assert (loss.events, loss.turns) == (len(a) - 2, 0)
    assert [type(e) for e in backlog.first().items] == [TurnStarted, TurnFinished], "a's start and end stay"
    assert backlog.items == len(b) + 2

    backlog.limit = 3  # the thinned batches alone are over it: the oldest go whole
    loss = backlog.trim()
    assert loss is not None and loss.settled == len(a) and loss.turns == 1, "a's end is lost"
    assert backlog.items == 2
    assert [type(e) for e in backlog.first().items] == [TurnStarted, TurnFinished]
