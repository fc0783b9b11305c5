"""An operator's trip or disable stands until an operator resets it, across restarts (issue 22 §1).

The store keeps each tool's standing override, written with the transition that set it; a recorder
made with ``overrides="keep"`` puts them back on the engine it attaches to — the tools registered
then and every tool registered later — announced as ``BreakerRestored`` with who set it, when
and why. ``forget`` drops them and says so; ``ignore`` (scenario runs) neither reads nor writes.
Readers take a tool's state from the newest of its breaker events and the recording engine's
start, never from an earlier run's last transition.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.events import BreakerRestored, OverridesForgotten, RecordingStarted, ToolRegistered
from engine.store import StandingOverride, TraceRecorder, TraceStore
from engine.store.command_auth import command_origin
from engine.store.operator_commands import CommandGuard, apply_pending_commands
from engine.strategies.breaker.machine import BreakerState
from tests.engine.conftest import WALL, Scripted, new_engine, recorded

pytestmark = pytest.mark.anyio

FORCED_OPEN, DISABLED, CLOSED = BreakerState.FORCED_OPEN, BreakerState.DISABLED, BreakerState.CLOSED


async def first_run(path: Path) -> None:
    """An engine that an operator acted on: hotel_search tripped, custom_api disabled, flights
    tripped and reset again."""
    engine = await new_engine()
    for tool in ("hotel_search", "custom_api", "flights"):
        engine.register(tool, Scripted("ok"))
    with TraceStore(path) as store:
        recorder = TraceRecorder(store, overrides="keep").attach(engine)
        engine.trip("hotel_search", actor="operator:alice@h", reason="maint")
        engine.disable("custom_api", actor="operator:bob@h", reason="flaky")
        engine.trip("flights", actor="operator:alice@h", reason="oops")
        engine.reset("flights", actor="operator:alice@h", reason="wrong tool")
        recorder.close()


async def test_the_store_keeps_each_operator_override_until_it_is_reset(tmp_path: Path) -> None:
    await first_run(tmp_path / "t.db")
    with TraceStore(tmp_path / "t.db", readonly=True) as store:
        assert store.standing_overrides() == {
            "custom_api": StandingOverride(DISABLED, "operator:bob@h", "flaky", WALL),
            "hotel_search": StandingOverride(FORCED_OPEN, "operator:alice@h", "maint", WALL),
        }


async def test_a_restarted_engine_puts_them_back_on_every_tool_however_late_it_is_registered(
    tmp_path: Path,
) -> None:
    await first_run(tmp_path / "t.db")
    engine = await new_engine()
    hotel = Scripted("ok")
    engine.register("hotel_search", hotel)
    events = recorded(engine)
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store, overrides="keep").attach(engine)
        assert engine.state("hotel_search") is FORCED_OPEN
        engine.register("custom_api", Scripted("ok"))  # after the recorder attached
        engine.register("flights", Scripted("ok"))
        assert (engine.state("custom_api"), engine.state("flights")) == (DISABLED, CLOSED)
        restored = {e.tool_id: e for e in events.of("BreakerRestored")}
        assert set(restored) == {"hotel_search", "custom_api"}
        trip = restored["hotel_search"]
        assert isinstance(trip, BreakerRestored)
        assert (trip.from_state, trip.to_state, trip.actor, trip.reason, trip.set_at) == (
            CLOSED, FORCED_OPEN, "operator:alice@h", "maint", WALL
        )  # fmt: skip
        result = await engine.try_call("hotel_search")
        assert result.error is not None and not result.error.executed
        assert hotel.calls == 0, "the engine refuses it as before the restart"
        recorder.close()
        states = {tool.tool_id: tool.breaker for tool in store.tool_states().tools}
    assert {tool: b.state for tool, b in states.items() if b is not None} == {
        "hotel_search": FORCED_OPEN, "custom_api": DISABLED, "flights": CLOSED
    }  # fmt: skip


async def test_forget_drops_them_and_says_who_did(tmp_path: Path) -> None:
    await first_run(tmp_path / "t.db")
    engine = await new_engine()
    engine.register("hotel_search", Scripted("ok"))
    events = recorded(engine)
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store, overrides="forget").attach(engine)
        engine.register("custom_api", Scripted("ok"))
        assert (engine.state("hotel_search"), engine.state("custom_api")) == (CLOSED, CLOSED)
        (forgotten,) = events.of("OverridesForgotten")
        assert isinstance(forgotten, OverridesForgotten)
        assert forgotten.forgotten["hotel_search"] == {
            "state": "FORCED_OPEN", "actor": "operator:alice@h", "reason": "maint", "set_at": WALL
        }  # fmt: skip
        me = command_origin()
        assert forgotten.actor == f"operator:{me.user}@{me.host}"
        assert store.standing_overrides() == {}
        engine.trip("custom_api", actor="operator:carol@h", reason="new")  # kept from now on
        recorder.close()
        assert set(store.standing_overrides()) == {"custom_api"}
        assert any(isinstance(e, OverridesForgotten) for e in store.events()), "recorded"


async def test_a_scenario_run_neither_reads_nor_writes_them(tmp_path: Path) -> None:
    await first_run(tmp_path / "t.db")
    engine = await new_engine()
    engine.register("hotel_search", Scripted("ok"))
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store).attach(engine)  # "ignore", the default
        assert engine.state("hotel_search") is CLOSED
        engine.register("custom_api", Scripted("ok"))
        engine.trip("custom_api", reason="a scenario's operator step")
        recorder.close()
        assert set(store.standing_overrides()) == {"hotel_search", "custom_api"}
        assert store.standing_overrides()["custom_api"].actor == "operator:bob@h", "untouched"


async def test_an_applied_command_is_acknowledged_once_its_override_is_stored(tmp_path: Path) -> None:
    """Without the flush the acknowledgement would be written before the recorder's batch: a kill
    right after "applied" would lose the trip."""
    engine = await new_engine()
    engine.register("hotel_search", Scripted("ok"))
    with TraceStore(tmp_path / "t.db", wall_clock=lambda: WALL) as store:
        recorder = TraceRecorder(store, durability="batch", batch_ms=60_000, overrides="keep").attach(engine)
        key = store.command_key()
        store.submit_command("trip", "hotel_search", reason="maint", key=key, now=WALL)
        (ack,) = await apply_pending_commands(engine, store, CommandGuard(key), flush=recorder.flush)
        assert ack.status == "applied"
        assert set(store.standing_overrides()) == {"hotel_search"}, "stored by the time it was acknowledged"
        recorder.close()


async def test_readers_take_the_state_from_the_restarted_engine_never_an_earlier_runs_transition(
    tmp_path: Path,
) -> None:
    await first_run(tmp_path / "t.db")
    engine = await new_engine()
    for tool in ("hotel_search", "flights"):  # custom_api is no longer registered
        engine.register(tool, Scripted("ok"))
    with TraceStore(tmp_path / "t.db") as store:
        recorder = TraceRecorder(store).attach(engine)  # keeps nothing: every tool starts CLOSED
        engine.register("late", Scripted("ok"))
        recorder.close()
        snapshot = store.tool_states()
        states = {t.tool_id: (t.breaker.state if t.breaker else None, t.registered) for t in snapshot.tools}
        assert states == {
            "hotel_search": (CLOSED, True),  # its trip is an earlier run's last transition
            "flights": (CLOSED, True),
            "late": (CLOSED, True),
            "custom_api": (DISABLED, False),  # an earlier run's tool: its last state, not registered
        }
        events = list(store.events())
        start = next(i for i, e in reversed(list(enumerate(events))) if isinstance(e, RecordingStarted))
        assert snapshot.run_started_id == start + 1, "where the newest run begins (row ids count from 1)"
        assert isinstance(store.last_breaker_change("hotel_search"), RecordingStarted)
        assert isinstance(store.last_breaker_change("late"), ToolRegistered)
