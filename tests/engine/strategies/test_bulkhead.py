"""A tool's bulkhead on virtual time, both backends: slots handed over first come first served,
refusals when full or when a wait runs out, no slot lost to a cancelled waiter, hot reloads that
keep occupants and waiters, and the p95 of waits. The strategy's hooks: test_bulkhead_strategy."""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from engine.strategies.bulkhead import Bulkhead, BulkheadFacts, BulkheadOptions
from engine.strategies.bulkhead.limiter import WAIT_RECORD_SIZE, WAIT_WINDOW_S
from tests.conftest import virtual_time_backend

on_both_backends = pytest.mark.anyio


def bulkhead(max_concurrent: int = 1, max_queued: int = 100, queue_timeout_ms: float = 1000.0) -> Bulkhead:
    return Bulkhead(options(max_concurrent, max_queued, queue_timeout_ms))


def options(
    max_concurrent: int = 1, max_queued: int = 100, queue_timeout_ms: float = 1000.0
) -> BulkheadOptions:
    return BulkheadOptions(
        max_concurrent=max_concurrent, max_queued=max_queued, queue_timeout_ms=queue_timeout_ms
    )


def occupy(limiter: Bulkhead, slots: int) -> None:
    for _ in range(slots):
        assert limiter.try_enter()


@dataclass
class Visit:
    """One caller's passage through a bulkhead, as the test saw it."""

    ticket: int
    arrived: float
    result: str | None = "not yet"
    admitted_at: float | None = None
    refused_at: float | None = None


async def visit(limiter: Bulkhead, visits: list[Visit], timeout_s: float, work_s: float) -> None:
    """Enter (the ticket is taken with no await before joining the queue), work, leave."""
    me = Visit(len(visits), anyio.current_time())
    visits.append(me)
    me.result = await limiter.enter(timeout_s)
    if me.result is not None:
        me.refused_at = anyio.current_time()
        return
    me.admitted_at = anyio.current_time()
    try:
        await anyio.sleep(work_s)
    finally:
        limiter.leave()


async def settle() -> None:
    """Let every task that can run, run (no virtual time passes)."""
    for _ in range(5):
        await anyio.sleep(0)


# --- first come first served --------------------------------------------------------------


@on_both_backends
async def test_one_slot_admits_waiters_in_arrival_order() -> None:
    limiter = bulkhead(max_concurrent=1)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        for _ in range(50):
            tg.start_soon(visit, limiter, visits, 60.0, 1.0)
    order = sorted(visits, key=lambda v: (v.admitted_at, v.ticket))
    assert [v.ticket for v in order] == list(range(50))
    assert [v.admitted_at for v in order] == [float(i) for i in range(50)]  # one second each, no gap
    assert limiter.in_flight == 0 and limiter.queued == 0 and limiter.admitted == 50


@on_both_backends
async def test_several_slots_serve_the_queue_in_arrival_order() -> None:
    limiter = bulkhead(max_concurrent=3)
    visits: list[Visit] = []
    durations = [5.0, 1.0, 3.0, 2.0, 1.0, 4.0, 1.0, 2.0, 3.0, 1.0, 2.0, 1.0]

    async with anyio.create_task_group() as tg:
        for work_s in durations:
            tg.start_soon(visit, limiter, visits, 60.0, work_s)
            await anyio.sleep(0.001)  # arrivals a millisecond apart: their order is known
    admitted_at = [v.admitted_at for v in visits if v.admitted_at is not None]
    assert len(admitted_at) == len(durations)
    assert admitted_at == sorted(admitted_at), "a later arrival got a slot before an earlier one"
    assert limiter.in_flight == 0 and limiter.queued == 0


@on_both_backends
async def test_a_freed_slot_goes_to_the_waiter_not_to_a_newcomer() -> None:
    limiter = bulkhead(max_concurrent=1)
    occupy(limiter, 1)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(visit, limiter, visits, 60.0, 1.0)
        await settle()
        assert limiter.queued == 1
        limiter.leave()
        # Handed over before the waiter even resumed: no free slot for anyone else meanwhile.
        assert (limiter.in_flight, limiter.queued) == (1, 0)
        assert not limiter.try_enter()
    assert visits[0].admitted_at == 0.0
    assert limiter.try_enter()


# --- refusals -----------------------------------------------------------------------------


@on_both_backends
async def test_a_full_queue_refuses_at_once() -> None:
    limiter = bulkhead(max_concurrent=2, max_queued=1)
    occupy(limiter, 2)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(visit, limiter, visits, 60.0, 0.0)
        await settle()
        started = anyio.current_time()
        assert await limiter.enter(60.0) == "bulkhead full: 2 in flight, 1 queued"
        assert anyio.current_time() == started
        assert limiter.snapshot(started).rejected_full == 1
        limiter.leave()
    limiter.leave()
    assert limiter.in_flight == 0


@on_both_backends
async def test_no_queue_or_no_time_to_wait_refuses_at_once() -> None:
    no_queue = bulkhead(max_concurrent=1, max_queued=0)
    occupy(no_queue, 1)
    assert no_queue.queue_full
    assert await no_queue.enter(5.0) == "bulkhead full: 1 in flight, 0 queued"
    room = bulkhead(max_concurrent=1, max_queued=5)
    occupy(room, 1)
    assert await room.enter(0.0) == "bulkhead full: 1 in flight, 0 queued"
    assert await room.enter(-1.0) == "bulkhead full: 1 in flight, 0 queued"
    assert anyio.current_time() == 0.0
    assert (room.queued, room.rejected_full, room.rejected_timeout) == (0, 2, 0)


@on_both_backends
async def test_a_wait_that_runs_out_is_refused_and_takes_no_slot() -> None:
    limiter = bulkhead(max_concurrent=1)
    occupy(limiter, 1)
    reason = await limiter.enter(0.5)
    assert reason == "bulkhead queue wait ran out after 0.5 s (1 in flight, 0 queued)"
    assert anyio.current_time() == 0.5
    assert (limiter.in_flight, limiter.queued, limiter.rejected_timeout) == (1, 0, 1)
    limiter.leave()
    assert limiter.in_flight == 0
    assert limiter.try_enter()


@on_both_backends
async def test_every_waiter_runs_out_at_its_own_deadline() -> None:
    # The earliest deadline arrives last (a turn about to end): the time keeping must follow it,
    # and keep time on after the waiter keeping it is served or runs out.
    limiter = bulkhead(max_concurrent=1)
    occupy(limiter, 1)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        for timeout_s in (10.0, 3.0, 1.0, 6.0):
            tg.start_soon(visit, limiter, visits, timeout_s, 1.0)
            await anyio.sleep(0.25)
        await anyio.sleep(2.0 - anyio.current_time())
        limiter.leave()  # t=2: the first arrival is served, the others still wait
    first, second, third, fourth = visits
    assert first.admitted_at == 2.0
    assert third.refused_at == 1.5  # arrived at 0.5 with 1 s
    assert second.refused_at is None and second.admitted_at == 3.0  # served as first left
    assert fourth.admitted_at == 4.0
    assert third.result == "bulkhead queue wait ran out after 1 s (1 in flight, 3 queued)"
    assert limiter.in_flight == 0 and limiter.queued == 0


@on_both_backends
async def test_waits_run_out_even_when_no_slot_is_ever_freed() -> None:
    limiter = bulkhead(max_concurrent=2)
    occupy(limiter, 2)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(visit, limiter, visits, 1.0 + (i % 7) * 0.5, 1.0)
            await anyio.sleep(0.1)
    assert all(v.admitted_at is None for v in visits)
    for v in visits:
        assert v.refused_at == pytest.approx(v.arrived + 1.0 + (v.ticket % 7) * 0.5)
    assert (limiter.in_flight, limiter.queued, limiter.rejected_timeout) == (2, 0, 30)


# --- cancellation -------------------------------------------------------------------------


@on_both_backends
async def test_a_cancelled_waiter_leaves_the_queue_and_no_slot_behind() -> None:
    limiter = bulkhead(max_concurrent=1)
    occupy(limiter, 1)
    visits: list[Visit] = []
    with anyio.move_on_after(0.3):  # the turn's deadline, say
        await visit(limiter, visits, 60.0, 1.0)
    assert (limiter.in_flight, limiter.queued) == (1, 0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(visit, limiter, visits, 60.0, 1.0)
        await settle()
        limiter.leave()  # the cancelled waiter is skipped: the next one is served
    assert visits[1].admitted_at == 0.3
    assert limiter.in_flight == 0 and limiter.try_enter()


@on_both_backends
async def test_a_waiter_cancelled_as_it_is_handed_a_slot_passes_the_slot_on() -> None:
    limiter = bulkhead(max_concurrent=1)
    occupy(limiter, 1)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        first = anyio.CancelScope()

        async def cancelled_visit() -> None:
            with first:
                await visit(limiter, visits, 60.0, 5.0)

        tg.start_soon(cancelled_visit)
        await settle()
        tg.start_soon(visit, limiter, visits, 60.0, 1.0)
        await settle()
        await anyio.sleep(1.0)
        limiter.leave()  # the slot goes to the first waiter...
        first.cancel()  # ...which is cancelled before it resumes
    # asyncio: its wait raises and it passes the slot on; trio: it resumes admitted and leaves
    # at once. Either way the second waiter is served at that moment and nothing leaks.
    assert visits[1].admitted_at == 1.0
    assert limiter.in_flight == 0 and limiter.queued == 0


@on_both_backends
@pytest.mark.parametrize("anyio_backend", [virtual_time_backend("asyncio")], ids=["asyncio"])
async def test_a_waiter_whose_task_is_cancelled_after_the_hand_over_passes_the_slot_on() -> None:
    # anyio's cancel scopes (and trio) never interrupt a task whose wait has already succeeded;
    # a plain asyncio cancel (asyncio.timeout, a framework's task.cancel()) does.
    limiter = bulkhead(max_concurrent=1)
    occupy(limiter, 1)
    visits: list[Visit] = []
    tasks: list[asyncio.Task[Any]] = []

    async def first_visit() -> None:
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        with contextlib.suppress(asyncio.CancelledError):
            await visit(limiter, visits, 60.0, 5.0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first_visit)
        await settle()
        tg.start_soon(visit, limiter, visits, 60.0, 1.0)
        await settle()
        await anyio.sleep(1.0)
        limiter.leave()
        tasks[0].cancel()
    first, second = visits
    assert first.result == "not yet"  # its enter() raised: it never held the slot
    assert second.admitted_at == 1.0
    assert limiter.in_flight == 0 and limiter.queued == 0


@on_both_backends
async def test_a_hand_over_at_the_instant_a_wait_runs_out_keeps_the_count_right() -> None:
    async def free_at_one(limiter: Bulkhead) -> None:
        await anyio.sleep(1.0)
        limiter.leave()

    for free_first in (True, False):
        limiter = bulkhead(max_concurrent=1)
        occupy(limiter, 1)
        visits: list[Visit] = []
        async with anyio.create_task_group() as tg:
            if free_first:
                tg.start_soon(free_at_one, limiter)
            tg.start_soon(visit, limiter, visits, 1.0, 0.5)
            if not free_first:
                tg.start_soon(free_at_one, limiter)
        (only,) = visits
        assert only.result is None or only.result.startswith("bulkhead queue wait ran out")
        assert limiter.in_flight == 0 and limiter.queued == 0
        assert limiter.try_enter()


@on_both_backends
async def test_random_arrivals_timeouts_and_cancellations_leak_nothing() -> None:
    rng = random.Random(2024)
    limiter = bulkhead(max_concurrent=4, max_queued=12)
    visits: list[Visit] = []
    holding = 0
    most = 0
    cancelled = 0

    async def caller(timeout_s: float, work_s: float, cancel_after: float | None) -> None:
        nonlocal holding, most, cancelled
        with anyio.CancelScope() as scope:
            if cancel_after is not None:
                scope.deadline = anyio.current_time() + cancel_after
            me = Visit(len(visits), anyio.current_time())
            visits.append(me)
            me.result = await limiter.enter(timeout_s)
            if me.result is None:
                me.admitted_at = anyio.current_time()
                holding += 1
                most = max(most, holding)
                try:
                    await anyio.sleep(work_s)
                finally:
                    holding -= 1
                    limiter.leave()
        cancelled += scope.cancelled_caught

    async with anyio.create_task_group() as tg:
        for _ in range(400):
            cancel_after = rng.uniform(0, 2) if rng.random() < 0.2 else None
            tg.start_soon(caller, rng.uniform(0, 1.5), rng.uniform(0, 1), cancel_after)
            if rng.random() < 0.7:
                await anyio.sleep(rng.uniform(0, 0.1))
    assert most == 4
    assert limiter.in_flight == 0 and limiter.queued == 0
    refused = limiter.rejected_full + limiter.rejected_timeout
    assert limiter.rejected_full and limiter.rejected_timeout and cancelled
    assert sum(v.result is not None and v.result != "not yet" for v in visits) == refused
    assert limiter.admitted == sum(v.admitted_at is not None for v in visits)
    for _ in range(4):
        assert limiter.try_enter()


# --- hot reload ---------------------------------------------------------------------------


@on_both_backends
async def test_a_larger_limit_admits_waiters_at_once() -> None:
    limiter = bulkhead(max_concurrent=2)
    occupy(limiter, 2)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(visit, limiter, visits, 60.0, 1.0)
        await anyio.sleep(0.5)
        limiter.reconfigure(options(max_concurrent=4))
        assert (limiter.in_flight, limiter.queued) == (4, 1)
        await anyio.sleep(0.5)
        limiter.leave()
        limiter.leave()
    assert [v.admitted_at for v in visits] == [0.5, 0.5, 1.0]


@on_both_backends
async def test_a_smaller_limit_lets_occupants_finish_first() -> None:
    limiter = bulkhead(max_concurrent=4, max_queued=2)
    occupy(limiter, 4)
    visits: list[Visit] = []
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(visit, limiter, visits, 60.0, 1.0)
        await settle()
        limiter.reconfigure(options(max_concurrent=2, max_queued=1))
        assert (limiter.in_flight, limiter.queued) == (4, 2)  # a smaller queue keeps its waiters
        assert await limiter.enter(60.0) == "bulkhead full: 4 in flight, 2 queued"
        for left in range(3):
            await anyio.sleep(1.0)
            limiter.leave()
            assert limiter.in_flight == max(2, 3 - left)
        await anyio.sleep(1.0)
        limiter.leave()
    assert [v.admitted_at for v in visits] == [3.0, 4.0]


# --- the record of waits ------------------------------------------------------------------


@on_both_backends
async def test_the_p95_of_waits_is_taken_over_the_recent_ones() -> None:
    limiter = bulkhead(max_concurrent=1)
    assert limiter.snapshot(0.0).wait_p95_ms == 0.0
    visits: list[Visit] = []
    for tenths in range(1, 21):  # waits of 0.1 s … 2.0 s
        occupy(limiter, 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(visit, limiter, visits, 60.0, 0.0)
            await anyio.sleep(tenths / 10)
            limiter.leave()
    now = anyio.current_time()
    facts = limiter.snapshot(now)
    assert facts.wait_p95_ms == pytest.approx(1900.0)  # nearest rank: the 19th of 20
    assert facts == BulkheadFacts(
        in_flight=0, max_concurrent=1, queued=0, max_queued=100, rejected_full=0, rejected_timeout=0,
        wait_p95_ms=facts.wait_p95_ms,
    )  # fmt: skip
    assert limiter.snapshot(now + WAIT_WINDOW_S + 1).wait_p95_ms == 0.0  # too old to count


@on_both_backends
async def test_the_record_of_waits_keeps_only_the_latest() -> None:
    limiter = bulkhead(max_concurrent=1)
    visits: list[Visit] = []
    for wait_s in [2.0] * 10 + [0.1] * WAIT_RECORD_SIZE:  # 33 s: all within the window
        occupy(limiter, 1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(visit, limiter, visits, 60.0, 0.0)
            await anyio.sleep(wait_s)
            limiter.leave()
    assert anyio.current_time() < WAIT_WINDOW_S
    assert limiter.snapshot(anyio.current_time()).wait_p95_ms == pytest.approx(100.0)
