"""Operator commands from the store's command table, checked and applied by the engine in its own loop.

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
from engine.events import BreakerDisabled, BreakerReset, BreakerTripped
from engine.store import CommandKeyError, TraceStore, TraceStoreError
from engine.store.command_auth import MAX_EXPIRY_S, command_origin, sign, signed_content
from engine.store.operator_commands import (
    CommandGuard,
    apply_command,
    apply_pending_commands,
    serve_operator_commands,
)
from engine.strategies.breaker.machine import BreakerState
from tests.engine.conftest import WALL, Scripted, make_engine, recorded
from tests.polling import wait_for

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


ME = command_origin()
OPERATOR = f"operator:{ME.user}@{ME.host}"
"""How the engine names the operator of a command this process sent."""


def submit(store: TraceStore, action: Any, tool_id: str, **kwargs: Any) -> int:
    return store.submit_command(action, tool_id, now=WALL, **kwargs)


def guard_of(store: TraceStore) -> CommandGuard:
    return CommandGuard(store.command_key())


def queue(
    store: TraceStore,
    *,
    signed: bool = True,
    mac: str | None = None,
    action: str = "trip",
    tool_id: str = "flight_search",
    reason: str = "",
    actor: str = ME.user,
    host: str | None = ME.host,
    pid: int | None = ME.pid,
    created_at: float = WALL,
    expires_at: float | None = WALL + 30,
) -> int:
    """A command written straight into the table, as any process that can write the store could:
    signed with the store's key (as only its holder can) unless ``signed`` is False."""
    cursor = store.db.execute(
        "INSERT INTO commands (created_at, action, tool_id, actor, reason, expires_at, host, pid)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (created_at, action, tool_id, actor, reason, expires_at, host, pid),
    )
    command_id = cursor.lastrowid
    assert command_id is not None
    if signed:
        content = signed_content(
            id=command_id, action=action, tool_id=tool_id, reason=reason, actor=actor, host=host, pid=pid,
            created_at=created_at, expires_at=expires_at,
        )  # fmt: skip
        mac = sign(store.command_key(), content)
    store.db.execute("UPDATE commands SET mac = ? WHERE id = ?", (mac, command_id))
    return command_id


async def test_pending_commands_are_applied_in_order_and_acknowledged_with_the_state(
    store: TraceStore,
) -> None:
    engine = travel_engine()
    events = recorded(engine)
    trip = submit(store, "trip", "flight_search", reason="vendor maintenance")
    disable = submit(store, "disable", "hotel_search")
    reset = submit(store, "reset", "flight_search", reason="back")
    async with engine:
        acks = await apply_pending_commands(engine, store, guard_of(store))
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
        OPERATOR,
        "vendor maintenance",
    ), "the OS user and host of the sender, never a name it chose"
    sent = store.command(trip)
    assert (sent.actor, sent.host, sent.pid) == (ME.user, ME.host, ME.pid)
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
    await apply_pending_commands(engine, store, guard_of(store))
    failed = store.command(unknown)
    assert failed.status == "failed"
    assert failed.result == "unknown tool 'car_rental'; registered: flight_search, hotel_search"
    assert store.command(known).result == "FORCED_OPEN"


async def test_an_expired_command_is_refused_never_applied_late(store: TraceStore) -> None:
    engine = travel_engine()
    events = recorded(engine)
    stale = store.submit_command("trip", "flight_search", now=WALL - 60, expires_in_s=5)
    (ack,) = await apply_pending_commands(engine, store, guard_of(store))
    assert (ack.command_id, ack.status) == (stale, "refused")
    assert ack.result == "expired: not applied within 5s of being sent (the engine was not serving commands)"
    assert engine.state("flight_search") is BreakerState.CLOSED and events == []
    assert (store.command(stale).status, store.command(stale).result) == ("refused", ack.result)


def _forged(store: TraceStore) -> int:
    return queue(store, signed=False, mac="0" * 64)


def _altered(store: TraceStore) -> int:
    """Signed for flight_search, then pointed at hotel_search by someone without the key."""
    command_id = queue(store)
    store.db.execute("UPDATE commands SET tool_id = 'hotel_search' WHERE id = ?", (command_id,))
    return command_id


def _other_key(store: TraceStore) -> int:
    command_id = queue(store, signed=False)
    content = signed_content(
        id=command_id, action="trip", tool_id="flight_search", reason="", actor=ME.user, host=ME.host,
        pid=ME.pid, created_at=WALL, expires_at=WALL + 30,
    )  # fmt: skip
    store.db.execute("UPDATE commands SET mac = ? WHERE id = ?", (sign(b"k" * 32, content), command_id))
    return command_id


UNSIGNED = "unsigned: it carries no MAC (only a holder of the store's command key may command)"
FORGED = "forged or altered: its MAC does not match its content under the store's command key"
REFUSALS: dict[str, tuple[Any, str]] = {
    "unsigned": (lambda s: queue(s, signed=False), UNSIGNED),
    "forged": (_forged, FORGED),
    "altered after signing": (_altered, FORGED),
    "signed with another key": (_other_key, FORGED),
    "reserved actor": (
        lambda s: queue(s, actor="engine"),
        "reserved actor 'engine': only the engine's own transitions are recorded as 'engine'",
    ),
    "reserved actor, other case": (
        lambda s: queue(s, actor="Engine"),
        "reserved actor 'Engine': only the engine's own transitions are recorded as 'Engine'",
    ),
    "blank actor": (lambda s: queue(s, actor=""), "no actor: a command must name the OS user who sent it"),
    "white actor": (lambda s: queue(s, actor="  "), "no actor: a command must name the OS user who sent it"),
    "actor with a line break": (
        lambda s: queue(s, actor="alice\nBreakerReset by engine"),
        "bad actor 'alice\\\\nBreakerReset by engine': not the name of an OS user",
    ),
    "no host": (
        lambda s: queue(s, host=None),
        "no origin: a command must name the host and pid it was sent from",
    ),
    "no pid": (
        lambda s: queue(s, pid=None),
        "no origin: a command must name the host and pid it was sent from",
    ),
    "no expiry": (
        lambda s: queue(s, created_at=0.0, expires_at=None),
        "no expiry: a command must say until when it may be applied",
    ),
    "an expiry too far off": (
        lambda s: queue(s, expires_at=WALL + MAX_EXPIRY_S + 1),
        "expiry too far off: a command may wait at most 3600s",
    ),
    "sent from the future": (
        lambda s: queue(s, created_at=WALL + 10**6, expires_at=WALL + 10**6 + 30),
        "expiry too far off: a command may wait at most 3600s",
    ),
    "expired": (
        lambda s: queue(s, created_at=WALL - 31, expires_at=WALL - 1),
        "expired: not applied within 30s of being sent (the engine was not serving commands)",
    ),
}


@pytest.mark.parametrize("make", list(REFUSALS), ids=list(REFUSALS))
async def test_a_command_the_engine_must_not_take_is_refused_with_its_reason(
    store: TraceStore, make: str
) -> None:
    engine = travel_engine()
    events = recorded(engine)
    queue_it, reason = REFUSALS[make]
    command_id = queue_it(store)
    (ack,) = await apply_pending_commands(engine, store, guard_of(store))
    assert (ack.command_id, ack.status, ack.result) == (command_id, "refused", reason)
    refused = store.command(command_id)
    assert (refused.status, refused.result, refused.applied_at) == ("refused", reason, WALL), "audited"
    assert events == [] and engine.state("flight_search") is BreakerState.CLOSED
    assert engine.state("hotel_search") is BreakerState.CLOSED


async def test_a_command_id_is_taken_once_however_often_it_comes_back(store: TraceStore) -> None:
    engine = travel_engine()
    events = recorded(engine)
    guard = guard_of(store)
    command_id = submit(store, "trip", "flight_search", reason="drill")
    (applied,) = await apply_pending_commands(engine, store, guard)
    assert applied.status == "applied"
    engine.reset("flight_search", actor="operator:bob")
    # Someone who can write the store sets the signed command pending again: still signed, still
    # unexpired, so only the engine's memory of the ids it took stops it.
    store.db.execute("UPDATE commands SET status = 'pending', result = NULL, applied_at = NULL")
    (again,) = await apply_pending_commands(engine, store, guard)
    assert (again.status, again.result) == ("refused", f"replayed: command {command_id} was taken already")
    # And a copy under a new id no longer matches its MAC.
    store.db.execute(
        "INSERT INTO commands (created_at, action, tool_id, actor, reason, expires_at, host, pid, mac)"
        " SELECT created_at, action, tool_id, actor, reason, expires_at, host, pid, mac FROM commands"
    )
    (copy,) = await apply_pending_commands(engine, store, guard)
    assert (copy.status, copy.result) == ("refused", FORGED)
    assert [type(e) for e in events] == [BreakerTripped, BreakerReset], "tripped once"
    assert engine.state("flight_search") is BreakerState.CLOSED


def test_the_guard_forgets_an_id_only_long_after_its_command_expired(store: TraceStore) -> None:
    guard = guard_of(store)
    first = store.command(submit(store, "trip", "flight_search"))
    guard.take(first, WALL)
    later = store.command(submit(store, "trip", "flight_search"))
    guard.take(later, first.expires_at + MAX_EXPIRY_S - 1)  # type: ignore[operator]
    assert guard.refusal(first, WALL) == f"replayed: command {first.id} was taken already"
    guard.take(later, first.expires_at + MAX_EXPIRY_S + 1)  # type: ignore[operator]
    assert guard.refusal(first, WALL) is None, "forgotten: by now it is refused as expired anyway"
    assert guard.refusal(first, first.expires_at + 1).startswith("expired")  # type: ignore[operator,union-attr]


def test_a_command_is_signed_in_the_transaction_that_queues_it(store: TraceStore) -> None:
    command = store.command(submit(store, "disable", "hotel_search", reason="noisy", expires_in_s=12))
    assert command.mac is not None and len(command.mac) == 64
    assert command.expires_at == WALL + 12 and command.created_at == WALL
    assert guard_of(store).refusal(command, WALL) is None
    with pytest.raises(ValueError, match="expires_in_s must be above 0 and at most 3600"):
        store.submit_command("trip", "flight_search", expires_in_s=MAX_EXPIRY_S + 1)
    with pytest.raises(ValueError, match="expires_in_s must be above 0"):
        store.submit_command("trip", "flight_search", expires_in_s=0)


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
    guard = guard_of(store)
    with pytest.raises(TraceStoreError, match="disk full"):
        await apply_pending_commands(engine, store, guard, unacknowledged=unacknowledged)
    assert store.command(command).status == "pending" and list(unacknowledged) == [command]
    monkeypatch.setattr(store, "acknowledge_command", real)
    await apply_pending_commands(engine, store, guard, unacknowledged=unacknowledged)
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
    ack = apply_command(engine, command, guard_of(store))
    assert (ack.status, ack.result) == ("failed", "RuntimeError: breaker jammed\\nbadly")


# --- the polling loop, on virtual time ------------------------------------------------------


def until_answered(store: TraceStore, command_id: int, timeout_s: float = 30.0) -> None:
    wait_for(lambda: store.command(command_id).status != "pending", "the engine's answer", timeout_s)


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
    # Waited for from a thread, on a real deadline: while threads work, virtual time runs on to
    # the next timer, so a deadline on it would pass after a few slow threads, however far off.
    with caplog.at_level(logging.WARNING, logger="tripwire.commands"):
        async with anyio.create_task_group() as group:
            group.start_soon(serve_operator_commands, engine, store)
            await anyio.to_thread.run_sync(until_answered, store, command)
            group.cancel_scope.cancel()
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "database is locked" in m]) == 1, messages
    assert messages[-1] == "operator commands: the store works again"
    assert all("\n" not in m for m in messages)
    assert store.command(command).result == "FORCED_OPEN"


async def test_the_poll_interval_must_be_positive(store: TraceStore) -> None:
    with pytest.raises(ValueError, match="poll_s must be positive"):
        await serve_operator_commands(travel_engine(), store, poll_s=0)


async def test_serving_makes_the_key_owner_only_and_says_it_takes_commands(store: TraceStore) -> None:
    key_path = store.command_key_path
    assert key_path == store.path.with_name("traces.db.key") and not key_path.exists()
    assert store.taking_commands() is None
    # No fail_after: on virtual time its deadline is where the clock jumps while threads work.
    async with anyio.create_task_group() as group:
        await group.start(serve_operator_commands, travel_engine(), store)
        group.cancel_scope.cancel()
    assert key_path.stat().st_mode & 0o777 == 0o600 and len(key_path.read_bytes()) == 32
    assert store.taking_commands() is True
    key = key_path.read_bytes()
    assert store.command_key() == key, "never made again, never overwritten"


async def test_a_key_others_may_read_is_refused_before_the_first_poll(store: TraceStore) -> None:
    store.command_key()
    store.command_key_path.chmod(0o640)
    with pytest.raises(CommandKeyError) as info:
        await serve_operator_commands(travel_engine(), store)
    assert str(info.value) == (
        f"{store.command_key_path}: the command key is open to others (mode 0640): chmod 600 it, or"
        " delete it for a new one (left untouched)"
    )
    assert store.command_key_path.stat().st_mode & 0o777 == 0o640
