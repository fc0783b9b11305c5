"""Operator commands from the store's command table, applied by the engine in its own loop.

Polling runs on trio's MockClock. While the SQLite work is in a worker thread every task is
blocked, and ``autojump_threshold=0`` jumps virtual time meanwhile: the test of the poll timing
uses a clock that jumps only after a real second of idleness (a hang still fails fast) and moves
time by hand; the others let time run on, which only hurries the loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from engine import Engine, ToolManifest
from engine.breaker import BreakerState
from engine.commands import apply_command, apply_pending_commands, serve_operator_commands
from engine.events import BreakerDisabled, BreakerReset, BreakerTripped
from engine.store import TraceStore, TraceStoreError
from tests.engine.conftest import WALL, Scripted, make_engine, recorded

pytestmark = pytest.mark.anyio

HAND_CLOCK = pytest.mark.parametrize(
    "anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=1.0)})]
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def travel_engine() -> Engine:
    engine = make_engine(ToolManifest(id="flight_search"), ToolManifest(id="hotel_search"))
    engine.register("flight_search", Scripted("ok"))
    engine.register("hotel_search", Scripted("ok"))
    return engine


def submit(store: TraceStore, action: Any, tool_id: str, **kwargs: Any) -> int:
    return store.submit_command(action, tool_id, actor="operator:alice", now=WALL, **kwargs)


async def test_pending_commands_are_applied_in_order_and_acknowledged_with_the_state(
    store: TraceStore,
) -> None:
    engine = travel_engine()
    events = recorded(engine)
    trip = submit(store, "trip", "flight_search", reason="vendor maintenance")
    disable = submit(store, "disable", "hotel_search")
    reset = submit(store, "reset", "flight_search", reason="back")
    async with engine:
        acks = await apply_pending_commands(engine, store)
    assert [(a.command_id, a.status, a.result) for a in acks] == [
        (trip, "applied", "FORCED_OPEN"),
        (disable, "applied", "DISABLED"),
        (reset, "applied", "CLOSED"),
    ]
    assert [type(e) for e in events] == [BreakerTripped, BreakerDisabled, BreakerReset]
    tripped = events[0]
    assert isinstance(tripped, BreakerTripped)
    assert (tripped.tool_id, tripped.actor, tripped.reason) == (
        "flight_search",
        "operator:alice",
        "vendor maintenance",
    )
    assert [(store.command(i).status, store.command(i).result) for i in (trip, disable, reset)] == [
        ("applied", "FORCED_OPEN"),
        ("applied", "DISABLED"),
        ("applied", "CLOSED"),
    ]
    assert store.command(trip).applied_at == WALL, "stamped with the engine's wall clock"
    assert store.pending_commands() == []
    assert engine.state("hotel_search") is BreakerState.DISABLED


async def test_an_unknown_tool_fails_with_a_one_line_reason_and_the_rest_still_apply(
    store: TraceStore,
) -> None:
    engine = travel_engine()
    unknown = submit(store, "trip", "car_rental")
    known = submit(store, "trip", "hotel_search")
    await apply_pending_commands(engine, store)
    failed = store.command(unknown)
    assert failed.status == "failed"
    assert failed.result == "unknown tool 'car_rental'; registered: flight_search, hotel_search"
    assert store.command(known).result == "FORCED_OPEN"


async def test_an_expired_command_is_refused_never_applied_late(store: TraceStore) -> None:
    engine = travel_engine()
    events = recorded(engine)
    stale = store.submit_command("trip", "flight_search", actor="a", now=WALL - 60, expires_at=WALL - 55)
    (ack,) = await apply_pending_commands(engine, store)
    assert (ack.command_id, ack.status) == (stale, "failed")
    assert ack.result == "expired: not applied within 5s of being sent (the engine was not serving commands)"
    assert engine.state("flight_search") is BreakerState.CLOSED and events == []


async def test_a_failed_acknowledgement_is_written_again_without_applying_twice(
    store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = travel_engine()
    events = recorded(engine)
    command = submit(store, "trip", "flight_search")
    real = store.acknowledge_command

    def full_disk(*args: Any, **kwargs: Any) -> bool:
        raise TraceStoreError(store.path, "acknowledging a command failed: disk full", untouched=False)

    monkeypatch.setattr(store, "acknowledge_command", full_disk)
    unacknowledged: dict[int, Any] = {}
    with pytest.raises(TraceStoreError, match="disk full"):
        await apply_pending_commands(engine, store, unacknowledged=unacknowledged)
    assert store.command(command).status == "pending" and list(unacknowledged) == [command]
    monkeypatch.setattr(store, "acknowledge_command", real)
    await apply_pending_commands(engine, store, unacknowledged=unacknowledged)
    assert store.command(command).result == "FORCED_OPEN"
    assert len(events) == 1, "tripped once"
    assert unacknowledged == {}


def test_a_command_never_raises_into_the_engine(store: TraceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = travel_engine()

    def broken(tool_id: str, *, actor: str, reason: str) -> None:
        raise RuntimeError("breaker jammed\nbadly")

    monkeypatch.setattr(engine, "disable", broken)
    submit(store, "disable", "flight_search")
    (command,) = store.pending_commands()
    ack = apply_command(engine, command)
    assert (ack.status, ack.result) == ("failed", "RuntimeError: breaker jammed\\nbadly")


# --- the polling loop, on virtual time ------------------------------------------------------


@HAND_CLOCK
async def test_the_loop_polls_on_engine_time_off_the_event_loop(
    store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    engine = travel_engine()
    events = recorded(engine)
    loop_thread = threading.current_thread()
    polled_in: list[threading.Thread] = []
    acknowledged = anyio.Event()
    real_pending, real_acknowledge = store.pending_commands, store.acknowledge_command

    def pending(limit: int = 100) -> Any:
        polled_in.append(threading.current_thread())
        return real_pending(limit)

    def acknowledge(*args: Any, **kwargs: Any) -> bool:
        done = real_acknowledge(*args, **kwargs)
        anyio.from_thread.run_sync(acknowledged.set)
        return done

    monkeypatch.setattr(store, "pending_commands", pending)
    monkeypatch.setattr(store, "acknowledge_command", acknowledge)
    with anyio.fail_after(30):
        async with engine, anyio.create_task_group() as group:
            await group.start(serve_operator_commands, engine, store)  # the first poll is done
            assert len(polled_in) == 1
            command = submit(store, "trip", "flight_search", reason="drill")
            await trio.testing.wait_all_tasks_blocked()
            assert store.command(command).status == "pending", "no poll before its time comes"
            clock.jump(0.2)
            await acknowledged.wait()
            assert store.command(command).result == "FORCED_OPEN"
            assert [type(e) for e in events] == [BreakerTripped]
            assert len(polled_in) == 2 and loop_thread not in polled_in, "SQLite work runs in worker threads"
            group.cancel_scope.cancel()


async def test_a_failing_store_is_logged_once_and_the_loop_carries_on(
    store: TraceStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine = travel_engine()
    failures = iter([True, True, True])
    real_pending = store.pending_commands

    def pending(limit: int = 100) -> Any:
        if next(failures, False):
            raise TraceStoreError(store.path, "read failed: database is locked", untouched=False)
        return real_pending(limit)

    monkeypatch.setattr(store, "pending_commands", pending)
    command = submit(store, "trip", "hotel_search")
    # Autojumping time: each poll's thread lets the clock run on, which only hurries the loop.
    with caplog.at_level(logging.WARNING, logger="tripwire.commands"), anyio.fail_after(600):
        async with anyio.create_task_group() as group:
            group.start_soon(serve_operator_commands, engine, store)
            while store.command(command).status == "pending":
                await anyio.sleep(0.2)
            group.cancel_scope.cancel()
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "database is locked" in m]) == 1, messages
    assert messages[-1] == "operator commands: the store works again"
    assert all("\n" not in m for m in messages)
    assert store.command(command).result == "FORCED_OPEN"


async def test_the_poll_interval_must_be_positive(store: TraceStore) -> None:
    with pytest.raises(ValueError, match="poll_s must be positive"):
        await serve_operator_commands(travel_engine(), store, poll_s=0)
