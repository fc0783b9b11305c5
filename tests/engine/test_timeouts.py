"""Deadlines as punctual as the backend's own, and no deadline state outliving its calls (issue 15 §4).

Punctuality is counted in event-loop passes, which a virtual clock keeps deterministic: a tool's
timeout (and a breaker's half-open announcement) must reach its task in the same pass as a cancel
scope carrying the same deadline itself, not one pass later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio

from engine import BreakerConfig, ErrorKind, RetryPolicy, ToolManifest
from engine.events import BreakerHalfOpened, Event
from engine.turn import ToolCall, Turn
from tests.engine.conftest import hang, make_engine, new_engine

pytestmark = pytest.mark.anyio

ONCE = RetryPolicy(max_attempts=1)


class _PassCounter(trio.abc.Instrument):
    """trio instrument: one count per run-loop pass (each pass waits for I/O once)."""

    def __init__(self) -> None:
        self.passes = 0

    def after_io_wait(self, timeout: float) -> None:
        self.passes += 1


@contextmanager
def loop_passes() -> Iterator[Callable[[], int]]:
    """The number of event-loop passes so far, on either backend."""
    loop = anyio.lowlevel.current_token().native_token
    if isinstance(loop, asyncio.AbstractEventLoop):
        count = [0]
        selector: Any = loop._selector  # type: ignore[attr-defined]  # each pass selects once
        select = selector.select

        def counted(timeout: float | None) -> Any:
            count[0] += 1
            return select(timeout)

        selector.select = counted
        try:
            yield lambda: count[0]
        finally:
            selector.select = select
        return
    counter = _PassCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        yield lambda: counter.passes
    finally:
        trio.lowlevel.remove_instrument(counter)


async def busy(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "done"


def cut_off_in(
    seen: dict[str, int], passes: Callable[[], int]
) -> tuple[Callable[[], Awaitable[None]], Callable[[float], Awaitable[None]]]:
    """A tool that never returns and a bare cancel scope to the same deadline, each noting in
    ``seen`` the loop pass it was cut off in (``tool``, ``reference``)."""

    async def slow() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            seen["tool"] = passes()

    async def reference(deadline: float) -> None:
        with anyio.CancelScope(deadline=deadline):
            await anyio.sleep_forever()
        seen["reference"] = passes()

    return slow, reference


async def test_a_tool_timeout_cancels_in_the_same_pass_as_the_backends_own_deadline() -> None:
    engine = await new_engine(
        ToolManifest(id="slow", timeout_ms=1000, retry_policy=ONCE),
        ToolManifest(id="busy", timeout_ms=60_000, retry_policy=ONCE),
    )
    seen: dict[str, int] = {}
    with loop_passes() as passes:
        slow, reference = cut_off_in(seen, passes)
        engine.register("slow", slow)
        engine.register("busy", busy)
        async with anyio.create_task_group() as tg:
            for i in range(200):  # many calls in flight, deadlines spread around the tool's
                tg.start_soon(partial(engine.try_call, "busy", seconds=0.5 + i / 100))
            await anyio.sleep(0.25)
            tg.start_soon(reference, anyio.current_time() + 1.0)
            result = await engine.try_call("slow")
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
    assert seen["tool"] == seen["reference"]


async def test_a_turn_deadline_cancels_in_the_same_pass_as_the_backends_own_deadline() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=60_000, retry_policy=ONCE))
    seen: dict[str, int] = {}
    with loop_passes() as passes:
        slow, reference = cut_off_in(seen, passes)
        engine.register("slow", slow)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reference, anyio.current_time() + 2.0)
            result = await engine.run_turn(Turn([ToolCall("a", "slow")], deadline_s=2.0))
    assert result.timed_out
    assert seen["tool"] == seen["reference"]


async def test_the_half_open_announcement_comes_at_its_time_with_many_calls_in_flight() -> None:
    engine = await new_engine(
        ToolManifest(
            id="flaky", timeout_ms=1000, retry_policy=ONCE,
            circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=5000),
        ),
        ToolManifest(id="busy", timeout_ms=60_000, retry_policy=ONCE),
    )  # fmt: skip
    announced: list[tuple[float, int]] = []
    with loop_passes() as passes:

        def on_event(event: Event) -> None:
            if isinstance(event, BreakerHalfOpened):
                announced.append((event.t, passes()))

        engine.subscribe(on_event, direct=True)
        engine.register("flaky", hang)
        engine.register("busy", busy)
        reference: list[int] = []
        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(partial(engine.try_call, "busy", seconds=2.0 + i / 20))
            start = anyio.current_time()
            await engine.try_call("flaky")  # times out at start + 1: the breaker opens
            half_open_at = engine.breaker("flaky").half_open_at
            assert half_open_at == start + 1.0 + 5.0
            with anyio.CancelScope(deadline=half_open_at):
                await anyio.sleep_forever()
            reference.append(passes())
            if not announced:  # not started: no timer; the next look announces it
                engine.state("flaky")
    assert len(announced) == 1
    t, when = announced[0]
    assert t == half_open_at
    assert when <= reference[0]


@pytest.mark.engine_modes("started", reason="only a started engine's supervisor holds deadlines")
async def test_no_deadline_state_outlives_its_calls() -> None:
    """30,000 turns with distinct deadlines and calls with distinct timeouts leave nothing behind."""
    engine = await new_engine(*(ToolManifest(id=f"t{i}", timeout_ms=1000 + i) for i in range(20)))

    async def quick() -> str:
        return "ok"

    for i in range(20):
        engine.register(f"t{i}", quick)
    for i in range(30_000):
        await engine.run_turn(Turn([ToolCall("a", f"t{i % 20}")], deadline_s=10.0 + i / 1000))
    assert engine.timeouts.watched == 0


async def test_calls_in_flight_keep_their_deadline_when_the_engine_stops() -> None:
    engine = make_engine(ToolManifest(id="slow", timeout_ms=1000, retry_policy=ONCE))
    engine.register("slow", hang)
    results: list[Any] = []

    async def call() -> None:
        results.append(await engine.try_call("slow"))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg, engine:  # the call outlives the engine
            start = anyio.current_time()
            tg.start_soon(call)
            await anyio.sleep(0.5)
    assert results[0].error.kind is ErrorKind.TIMEOUT
    assert anyio.current_time() == pytest.approx(start + 1.0)
