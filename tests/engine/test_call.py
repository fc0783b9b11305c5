"""The guarded call on virtual time: attempts, timeouts, retries, breakers and events."""

from __future__ import annotations

import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio.testing

from engine import (
    BreakerConfig,
    BreakerState,
    Engine,
    ErrorKind,
    RetryPolicy,
    SideEffect,
    ToolError,
    ToolManifest,
)
from engine.events import AttemptFailed
from engine.turn import ToolCall, Turn
from tests.engine.conftest import WALL, Scripted, hang, make_engine, new_engine, recorded

pytestmark = pytest.mark.anyio


class HTTPStatusError(Exception):
    """Shaped like httpx's: the classifier reads ``.response``."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status, "headers": headers or {}})()


async def test_success_returns_the_value_and_emits_start_and_success() -> None:
    engine = await new_engine()
    tool = engine.register("echo", Scripted("pong"))
    events = recorded(engine)
    assert await engine.call("echo", q="ping") == "pong"
    assert tool.args == [{"q": "ping"}]
    assert events.types() == ["AttemptStarted", "CallSucceeded"]
    started, done = events
    assert started.attempt == 1 and started.timeout_ms == 30_000 and not started.probe
    assert done.attempts == 1 and done.call_id == started.call_id
    assert done.to_dict()["timestamp"] == "2025-11-05T10:30:45.000Z"


# Autojump would advance virtual time while the worker thread runs; freeze the clock instead.
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock()})])
async def test_plain_functions_run_in_a_worker_thread() -> None:
    engine = await new_engine()
    engine.register("sync", lambda x: (x * 2, threading.get_ident()))
    value, thread = await engine.call("sync", x=21)
    assert value == 42
    assert thread != threading.get_ident()


async def test_transient_failures_are_retried_with_backoff_until_success() -> None:
    engine = await new_engine()
    tool = engine.register("flaky", Scripted(ConnectionResetError(), TimeoutError(), "ok"))
    events = recorded(engine)
    result = await engine.try_call("flaky")
    assert result.ok and result.value == "ok" and result.attempts == 3
    assert tool.gaps() == [pytest.approx(0.1, rel=0.1), pytest.approx(0.2, rel=0.1)]
    failures = events.of("ToolError")
    assert [f.decision for f in failures] == ["retry", "retry"]
    assert [f.kind for f in failures] == [ErrorKind.CONNECTION_RESET, ErrorKind.TIMEOUT]
    assert [f.retry_count for f in failures] == [0, 1]
    assert events.of("CallSucceeded")[0].describe() == "Tool succeeded on retry 3 (flaky)"


async def test_each_failed_attempt_tells_the_breakers_streak_after_it() -> None:
    engine = await new_engine()
    engine.register("flaky", Scripted(ConnectionResetError(), TimeoutError(), ValueError("bad"), "ok"))
    events = recorded(engine)
    await engine.try_call("flaky")
    await engine.try_call("flaky")
    streaks = [f.consecutive_failures for f in events.of("ToolError")]
    assert streaks == [1, 2, 0], "a permanent error: the service answered, the streak ends"


async def test_permanent_errors_are_not_retried_and_raise_a_tool_error() -> None:
    engine = await new_engine()
    tool = engine.register("search", Scripted(ValueError("Invalid airport code: XYZ")))
    with pytest.raises(ToolError) as caught:
        await engine.call("search", origin="XYZ")
    error = caught.value
    assert tool.calls == 1
    assert error.kind is ErrorKind.INVALID_PARAMETERS
    assert error.tool_id == "search"
    assert error.tool_input == {"origin": "XYZ"}
    assert isinstance(error.original_error, ValueError)
    assert error.at == WALL
    assert error.timestamp == datetime.fromtimestamp(WALL, UTC)
    assert error.attempts == 1
    assert error.classification is not None and not error.classification.transient
    as_dict = error.to_dict()
    assert as_dict["error_type"] == "ValueError"
    assert as_dict["classification"]["class"] == "permanent"
    assert as_dict["timestamp"] == "2025-11-05T10:30:45.000Z"


async def test_final_error_carries_status_code_and_retry_after() -> None:
    engine = await new_engine(ToolManifest(id="api", retry_policy=RetryPolicy(max_attempts=1)))
    engine.register("api", Scripted(HTTPStatusError(429, {"Retry-After": "1"})))
    result = await engine.try_call("api")
    assert result.error is not None
    assert result.error.kind is ErrorKind.RATE_LIMIT
    assert result.error.status_code == 429
    assert result.error.retry_after_s == 1.0


async def test_per_tool_timeout_is_a_hard_stop_and_is_retried() -> None:
    manifest = ToolManifest(id="slow", timeout_ms=5000, retry_policy=RetryPolicy(max_total_time_ms=60_000))
    engine = await new_engine(manifest)
    tool = engine.register("slow", Scripted(hang, "fast"))
    events = recorded(engine)
    start = anyio.current_time()
    assert await engine.call("slow") == "fast"
    assert tool.cancelled == 1, "the hung attempt was cancelled"
    assert tool.started[1] - start == pytest.approx(5.0 + 0.1, rel=0.02)
    (timeout,) = events.of("ToolTimeout")
    assert timeout.timeout_ms == 5000
    assert events.of("ToolError")[0].kind is ErrorKind.TIMEOUT


async def test_timeouts_work_the_same_with_and_without_background_services() -> None:
    manifest = ToolManifest(id="slow", timeout_ms=2000, retry_policy=RetryPolicy(max_attempts=1))
    for running in (False, True):
        engine = make_engine(manifest)
        engine.register("slow", Scripted(hang))
        start = anyio.current_time()
        if running:
            async with engine:
                result = await engine.try_call("slow")
        else:
            result = await engine.try_call("slow")
        assert anyio.current_time() - start == pytest.approx(2.0)
        assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
        assert result.error.message == "Tool timeout after 2s"


async def test_supervised_timeouts_of_different_lengths_each_fire_on_time() -> None:
    engine = make_engine(
        ToolManifest(id="a", timeout_ms=3000, retry_policy=RetryPolicy(max_attempts=1)),
        ToolManifest(id="b", timeout_ms=1000, retry_policy=RetryPolicy(max_attempts=1)),
    )
    engine.register("a", Scripted(hang))
    engine.register("b", Scripted(hang))
    ended: dict[str, float] = {}

    async def run(tool: str) -> None:
        await engine.try_call(tool)
        ended[tool] = anyio.current_time()

    async with engine:
        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a")
            await anyio.sleep(0.5)
            tg.start_soon(run, "b")
    assert ended["a"] - start == pytest.approx(3.0)
    assert ended["b"] - start == pytest.approx(1.5)


async def test_retry_after_within_budget_sets_the_delay() -> None:
    engine = await new_engine()
    tool = engine.register("api", Scripted(HTTPStatusError(503, {"retry-after-ms": "1500"}), "ok"))
    assert await engine.call("api") == "ok"
    assert tool.gaps() == [pytest.approx(1.5)]


async def test_retry_after_beyond_budget_gives_up_at_once() -> None:
    engine = await new_engine()
    tool = engine.register("api", Scripted(HTTPStatusError(429, {"Retry-After": "30"})))
    events = recorded(engine)
    start = anyio.current_time()
    result = await engine.try_call("api")
    assert tool.calls == 1
    assert anyio.current_time() == start
    assert result.error is not None
    (failed,) = events.of("ToolError")
    assert failed.decision == "escalate"
    assert "server asked to retry after 30s" in failed.decision_reason


async def test_unknown_tool_fails_without_running_anything() -> None:
    engine = await new_engine()
    events = recorded(engine)
    with pytest.raises(ToolError) as caught:
        await engine.call("nope", a=1)
    assert caught.value.kind is ErrorKind.UNKNOWN_TOOL
    assert not caught.value.executed
    assert events.types() == ["CallFailed"]


async def test_open_breaker_rejects_without_attempting() -> None:
    manifest = ToolManifest(id="down", circuit_breaker=BreakerConfig(failure_threshold=2))
    engine = await new_engine(manifest)
    tool = engine.register("down", Scripted(ConnectionRefusedError()))
    events = recorded(engine)
    await engine.try_call("down")
    assert tool.calls == 2
    assert engine.breaker("down").state is BreakerState.OPEN
    result = await engine.try_call("down", x=1)
    assert tool.calls == 2
    assert result.error is not None
    assert result.error.kind is ErrorKind.CIRCUIT_OPEN
    assert result.error.tool_input == {"x": 1}
    assert not result.error.executed
    assert events.types()[-1] == "CallRejected"
    assert events.of("BreakerOpened")[0].describe().startswith("Circuit breaker opened for down")


async def test_one_breaker_is_shared_by_concurrent_calls_and_their_retries() -> None:
    manifest = ToolManifest(id="down", retry_policy=RetryPolicy(max_attempts=3, max_total_time_ms=60_000))
    engine = await new_engine(manifest)
    tool = engine.register("down", Scripted(ConnectionResetError(), duration=1.0))
    results = []

    async def caller() -> None:
        results.append(await engine.try_call("down"))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(caller)
    breaker = engine.breaker("down")
    assert breaker.state is BreakerState.OPEN
    assert breaker.opens == 1
    # 4 first attempts fail (count 4), all 4 retries start while still CLOSED, the first of
    # their failures is the 5th and opens the breaker: nobody makes a third attempt.
    assert tool.calls == 8
    assert all(r.error is not None and r.attempts == 2 for r in results)
    assert (await engine.try_call("down")).error.kind is ErrorKind.CIRCUIT_OPEN  # type: ignore[union-attr]


async def test_half_open_is_announced_by_the_timer_even_without_calls() -> None:
    manifest = ToolManifest(id="down", circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=30_000))
    engine = make_engine(manifest)
    engine.register("down", Scripted(ConnectionResetError()))
    events = recorded(engine)
    async with engine:
        await engine.try_call("down")
        opened_at = anyio.current_time()
        await anyio.sleep(29.99)
        assert engine.breaker("down").state is BreakerState.OPEN
        await anyio.sleep(0.02)
        assert engine.breaker("down").state is BreakerState.HALF_OPEN
    (half_open,) = events.of("BreakerHalfOpened")
    assert half_open.t == pytest.approx(opened_at + 30.0)


async def test_a_thousand_callers_at_half_open_admit_exactly_one_probe() -> None:
    manifest = ToolManifest(id="svc", circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=1000))
    engine = await new_engine(manifest)
    tool = engine.register("svc", Scripted(ConnectionResetError(), "recovered", duration=0.5))
    await engine.try_call("svc")
    await anyio.sleep(1.0)
    results = []

    async def caller() -> None:
        results.append(await engine.try_call("svc"))

    async with anyio.create_task_group() as tg:
        for _ in range(1000):
            tg.start_soon(caller)
    assert tool.calls == 2, "one failure, then exactly one probe"
    assert sum(r.ok for r in results) == 1
    assert all(r.error.kind is ErrorKind.CIRCUIT_OPEN for r in results if r.error)
    assert engine.breaker("svc").state is BreakerState.CLOSED


async def test_a_hanging_probe_is_timed_out_counts_as_failure_and_never_sticks() -> None:
    manifest = ToolManifest(
        id="svc",
        timeout_ms=2000,
        retry_policy=RetryPolicy(max_attempts=1),
        circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=10_000),
    )
    engine = make_engine(manifest)
    tool = engine.register("svc", Scripted(ConnectionResetError(), hang, "ok"))
    events = recorded(engine)
    async with engine:
        await engine.try_call("svc")
        await anyio.sleep(10)
        probe = await engine.try_call("svc")
        assert probe.error is not None and probe.error.kind is ErrorKind.TIMEOUT
        assert tool.cancelled == 1
        breaker = engine.breaker("svc")
        assert breaker.state is BreakerState.OPEN
        assert not breaker.probe_in_flight
        await anyio.sleep(10)
        assert (await engine.try_call("svc")).value == "ok"
        assert breaker.state is BreakerState.CLOSED
    assert [e.to_state for e in events if e.event_type.startswith("Breaker")] == [
        "OPEN", "HALF_OPEN", "OPEN", "HALF_OPEN", "CLOSED",
    ]  # fmt: skip


async def test_a_probe_cancelled_from_outside_frees_the_slot() -> None:
    manifest = ToolManifest(id="svc", circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=1000))
    engine = await new_engine(manifest)
    engine.register("svc", Scripted(ConnectionResetError(), hang, "ok"))
    await engine.try_call("svc")
    await anyio.sleep(1)
    with anyio.move_on_after(0.5):
        await engine.try_call("svc")
    breaker = engine.breaker("svc")
    assert breaker.state is BreakerState.HALF_OPEN
    assert not breaker.probe_in_flight
    assert (await engine.try_call("svc")).value == "ok"


async def test_cancellation_propagates_and_is_never_a_tool_failure() -> None:
    engine = await new_engine()
    engine.register("svc", Scripted(hang))
    events = recorded(engine)
    with anyio.move_on_after(1):
        await engine.try_call("svc")
    assert engine.breaker("svc").consecutive_failures == 0
    assert events.types() == ["AttemptStarted"]


async def test_side_effecting_tools_are_not_retried_after_ambiguous_failures() -> None:
    booking = ToolManifest(id="book", side_effect=SideEffect.SIDE_EFFECTING)
    engine = await new_engine(booking)
    tool = engine.register("book", Scripted(ConnectionResetError(), "booked"))
    events = recorded(engine)
    result = await engine.try_call("book")
    assert tool.calls == 1
    assert result.error is not None and result.error.kind is ErrorKind.CONNECTION_RESET
    assert "ambiguous" in events.of("ToolError")[0].decision_reason


async def test_side_effecting_tools_retry_unambiguous_failures_and_opt_in_ambiguous_ones() -> None:
    refused = ToolManifest(id="refused", side_effect=SideEffect.SIDE_EFFECTING)
    opted_in = ToolManifest(id="opted", side_effect=SideEffect.SIDE_EFFECTING, retry_ambiguous=True)
    engine = await new_engine(refused, opted_in)
    engine.register("refused", Scripted(ConnectionRefusedError(), "ok"))
    engine.register("opted", Scripted(ConnectionResetError(), "ok"))
    assert await engine.call("refused") == "ok", "the request never left: safe to retry"
    assert await engine.call("opted") == "ok"


async def test_operator_actions_emit_events_naming_actor_and_reason() -> None:
    engine = await new_engine()
    tool = engine.register("svc", Scripted("ok"))
    events = recorded(engine)
    engine.trip("svc", actor="alice", reason="vendor outage")
    assert (await engine.try_call("svc")).error is not None
    engine.disable("svc", actor="bob", reason="load test")
    assert await engine.call("svc") == "ok"
    engine.reset("svc", actor="carol", reason="vendor recovered")
    transitions = [e for e in events if e.event_type.startswith("Breaker")]
    assert [(e.event_type, e.actor, e.reason) for e in transitions] == [
        ("BreakerTripped", "alice", "vendor outage"),
        ("BreakerDisabled", "bob", "load test"),
        ("BreakerReset", "carol", "vendor recovered"),
    ]
    assert tool.calls == 1
    with pytest.raises(LookupError, match="unknown tool 'nope'"):
        engine.trip("nope")


async def test_failing_and_slow_subscribers_never_break_or_block_calls() -> None:
    engine = await new_engine()
    engine.register("svc", Scripted("ok"))
    release = threading.Event()
    seen: list[str] = []

    def broken(event: Any) -> None:
        raise RuntimeError("subscriber bug")

    def slow(event: Any) -> None:
        release.wait(5)
        seen.append(event.event_type)

    engine.subscribe(broken, direct=True)
    engine.subscribe(broken)
    engine.subscribe(slow, maxlen=3)
    for _ in range(10):
        assert await engine.call("svc") == "ok"
    release.set()
    assert engine.bus.flush(5)
    assert engine.bus.direct_failures == 20
    assert 3 <= len(seen) <= 4, "the slow subscriber's queue holds 3; one may already be in hand"
    assert engine.bus.dropped() == 20 - len(seen)


async def test_unsubscribe_stops_delivery() -> None:
    engine = await new_engine()
    engine.register("svc", Scripted("ok"))
    seen: list[Any] = []
    queued: list[Any] = []
    stop_direct = engine.subscribe(seen.append, direct=True)
    stop_queued = engine.subscribe(queued.append)
    await engine.call("svc")
    assert engine.bus.flush(5)
    stop_direct()
    stop_queued()
    assert not engine.bus.active
    await engine.call("svc")
    assert len(seen) == 2
    assert len(queued) == 2


async def test_every_call_ends_with_exactly_one_terminal_event() -> None:
    manifest = ToolManifest(id="svc", circuit_breaker=BreakerConfig(failure_threshold=3))
    engine = await new_engine(manifest)
    engine.register("svc", Scripted("ok", ConnectionResetError(), ValueError("bad"), ConnectionResetError()))
    events = recorded(engine)
    for _ in range(5):
        await engine.try_call("svc")
    terminal = [e for e in events if e.event_type in {"CallSucceeded", "CallFailed", "CallRejected"}]
    assert len(terminal) == 5
    assert len({e.call_id for e in terminal}) == 5
    failed = [e for e in events if isinstance(e, AttemptFailed)]
    assert all(e.circuit_breaker_state in set(BreakerState) for e in failed)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_backend_parity_on_asyncio() -> None:
    manifest = ToolManifest(id="slow", timeout_ms=1, retry_policy=RetryPolicy(max_attempts=1))
    engine = make_engine(manifest)
    engine.register("slow", Scripted(hang))
    engine.register("ok", Scripted("fine"))
    async with engine:
        assert await engine.call("ok") == "fine"
        result = await engine.try_call("slow")
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT


async def test_tool_names_are_checked_when_registered() -> None:
    engine = await new_engine()
    with pytest.raises(ValueError, match="tool name '_private' must match"):
        engine.register("_private", Scripted("x"))
    engine.register("ok_name", Scripted("x"))
    with pytest.raises(ValueError, match="already registered"):
        engine.register("ok_name", Scripted("x"))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # watchfiles waits on a real thread
async def test_a_service_that_fails_to_start_leaves_nothing_running(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "svc.yaml").write_text("tool:\n  id: svc\n  side_effect: idempotent\n")
    engine = Engine(manifests, watch=True)
    engine.register("svc", Scripted("ok"))
    shutil.rmtree(manifests)
    with pytest.raises(FileNotFoundError):
        async with engine:
            pass
    assert not engine.timeouts.running
    assert await engine.call("svc") == "ok", "the engine still works without its services"


async def test_a_rejected_calls_reason_is_the_same_with_or_without_a_custom_handler() -> None:
    def defer(failure: Any) -> None:
        return None

    reasons = []
    for handler in (None, defer):
        engine = await new_engine(handler=handler)
        engine.register("svc", Scripted("ok"))
        engine.trip("svc")
        plain = await engine.try_call("svc")
        turn = await engine.run_turn(Turn([ToolCall("x", "svc", optional=True)]))
        reasons.append((plain.decision, plain.reason, turn.outcomes["x"].reason))
    assert reasons[0] == reasons[1]
    assert "svc" in reasons[0][1] and "FORCED_OPEN" in reasons[0][1], "the tool and its state are named"


async def test_a_probe_that_closes_the_breaker_names_its_call_outside_a_turn() -> None:
    manifest = ToolManifest(
        id="svc",
        retry_policy=RetryPolicy(max_attempts=1),
        circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=1000),
    )
    engine = await new_engine(manifest)
    engine.register("svc", Scripted(ConnectionResetError(), "ok"))
    events = recorded(engine)
    await engine.try_call("svc")
    await anyio.sleep(1)
    assert (await engine.try_call("svc")).ok
    first, probe = (e.call_id for e in events.of("AttemptStarted"))
    (opened,) = events.of("BreakerOpened")
    (closed,) = events.of("BreakerClosed")
    assert (opened.call_id, closed.call_id) == (first, probe)


async def test_a_call_arriving_after_the_open_period_names_itself_on_the_half_open() -> None:
    manifest = ToolManifest(
        id="svc",
        retry_policy=RetryPolicy(max_attempts=1),
        circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=1000),
    )
    engine = make_engine(manifest)  # not started: no timer half-opens the breaker first
    engine.register("svc", Scripted(ConnectionResetError(), "ok"))
    events = recorded(engine)
    await engine.try_call("svc")
    await anyio.sleep(1)
    await engine.try_call("svc")
    probe = events.of("AttemptStarted")[1].call_id
    (half_open,) = events.of("BreakerHalfOpened")
    assert half_open.call_id == probe


async def test_the_half_open_timer_names_no_call() -> None:
    manifest = ToolManifest(id="svc", circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=1000))
    engine = make_engine(manifest)
    engine.register("svc", Scripted(ConnectionResetError()))
    events = recorded(engine)
    async with engine:
        await engine.try_call("svc")
        await anyio.sleep(1.5)
    (half_open,) = events.of("BreakerHalfOpened")
    assert (half_open.call_id, half_open.turn_id) == (None, None)
