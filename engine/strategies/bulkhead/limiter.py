"""Internal: a bulkhead's state — the slots of one tool's attempts in flight and the queue of
attempts waiting for one. Import it from :mod:`engine.strategies.bulkhead`.

Slots are handed over, never raced for: ``leave()`` gives the freed slot straight to the first
waiter (it counts as in flight from that moment), and ``try_enter()`` never takes a free slot
while anyone is queued. So the queue is served first come first served whatever the backend's
scheduler does, and a waiter that stops waiting (its time ran out, or it was cancelled) only
decides what happens to a slot it was already given: kept when its wait had succeeded, passed
on otherwise.

One waiter keeps time for the whole queue (the *watch*): it waits under a cancel scope set to
the earliest deadline of all waiters and, when that passes, wakes those whose time ran out. The
others just wait to be woken. A cancel scope costs more than the rest of a wait together
(about 10 µs), so with 10,000 waiters one scope instead of 10,000 is what keeps the bulkhead
as fast as an ``anyio.CapacityLimiter``. When the watch stops waiting, the newest waiter takes
over (the one likely to wait longest).

On asyncio no waiter keeps time: one ``loop.call_at`` timer, armed for the earliest deadline,
wakes the waiters whose time ran out (as the timeout supervisor does for attempts), and a waiter
awaits a bare future (an anyio Event wraps an asyncio one and finds the backend on every
creation). A watch handing over wakes a task each time — about once a grant when callers arrive
as fast as they are served (an engine's calls): through the engine, a fifth of the throughput on
asyncio. trio keeps the watch, with the waiting task parked and rescheduled by trio itself (what a
trio Event does, without its parking lot; anyio's Event wraps that and finds the backend on each)
and trio's own cancel scope for the watch: a trio cancel scope per waiter measured slower.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from engine.strategies.bulkhead.options import BulkheadOptions

WAIT_RECORD_SIZE = 128
"""How many recent queue waits the p95 is taken over."""
WAIT_WINDOW_S = 60.0
"""Waits that ended longer ago than this (engine time) no longer count in the p95."""
_SLACK = 64
"""Entries no longer waiting that the queue and the deadline heap may hold before a rebuild."""

# A waiter's states: waiting, then exactly one of the others (set synchronously, never undone).
_WAITING, _GRANTED, _EXPIRED, _ABANDONED = 0, 1, 2, 3


class _Waiter:
    """One attempt in the queue; its event is set when it is handed a slot, when its time runs
    out, or when it is made the watch."""

    __slots__ = ("deadline", "future", "reschedule", "state", "task", "woken")

    def __init__(self, deadline: float, loop: asyncio.AbstractEventLoop | None) -> None:
        self.deadline = deadline
        # asyncio: a bare future, awaited directly (an anyio Event wraps an asyncio one, found
        # through the backend on every creation). trio: the task itself, parked and rescheduled
        # (what a trio Event does, without its parking lot).
        self.future = loop.create_future() if loop is not None else None
        self.task: Any = None
        """trio: the waiting task while it is parked."""
        self.reschedule: Any = None
        self.woken = False
        self.state = _WAITING

    def wake(self) -> None:
        future = self.future
        if future is not None:
            if not future.done():
                future.set_result(None)
        elif not self.woken:
            self.woken = True
            task, self.task = self.task, None
            if task is not None:
                self.reschedule(task)


def wait_p95_s(waits: Iterable[tuple[float, float]], now: float) -> float:
    """The nearest-rank 95th percentile of ``waits`` (ended at, waited s) that ended within
    :data:`WAIT_WINDOW_S` of ``now``; 0 when none did (what the console folds from events too)."""
    recent = sorted(waited for ended, waited in waits if now - ended <= WAIT_WINDOW_S)
    return recent[math.ceil(0.95 * len(recent)) - 1] if recent else 0.0


@dataclass(frozen=True, slots=True)
class BulkheadFacts:
    """A bulkhead's state at one moment, as ``engine.stats()`` and error handlers see it."""

    in_flight: int
    max_concurrent: int
    queued: int
    max_queued: int
    rejected_full: int
    """Attempts refused at once: every slot taken and the queue full (or no time to wait)."""
    rejected_timeout: int
    """Attempts refused after waiting in the queue as long as they could."""
    wait_p95_ms: float
    """The 95th percentile of recent queue waits (the last minute, at most 128); 0 when none."""


class Bulkhead:
    """The occupants and the waiters of one tool's bulkhead; a hot reload keeps both."""

    def __init__(self, options: BulkheadOptions) -> None:
        self.max_concurrent = options.max_concurrent
        self.max_queued = options.max_queued
        self.in_flight = 0
        """Attempts holding a slot, waiters handed one that have not resumed yet included."""
        self.queued = 0
        """Attempts waiting for a slot."""
        self.admitted = 0
        self.queued_total = 0
        self.rejected_full = 0
        self.rejected_timeout = 0
        # Waiters that stop waiting stay in the deque and the heap, no longer _WAITING, until they
        # reach the front (or a rebuild): taking one out of the middle would cost O(n) each time.
        self._queue: deque[_Waiter] = deque()
        self._gone = 0  # entries of _queue no longer waiting
        self._deadlines: list[tuple[float, int, _Waiter]] = []  # a heap: the watch's agenda
        self._watch: _Waiter | None = None
        self._watch_scope: Any = None  # trio's CancelScope
        self._timer: asyncio.TimerHandle | None = None  # asyncio: wakes the queue at its earliest deadline
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._timer_at = math.inf
        self._waits: deque[tuple[float, float]] = deque(maxlen=WAIT_RECORD_SIZE)  # (ended at, waited s)

    @property
    def queue_full(self) -> bool:
        """No attempt can join the queue now (a queue of 0 is always full)."""
        return self.queued >= self.max_queued

    def try_enter(self) -> bool:
        """Take a free slot when nobody is queued for one: the fast path, without awaiting."""
        if self.in_flight < self.max_concurrent and not self.queued:
            self.in_flight += 1
            self.admitted += 1
            return True
        return False

    def refuse_full(self) -> str:
        """Count an attempt refused without waiting and say why, on one line."""
        self.rejected_full += 1
        return f"bulkhead full: {self.in_flight} in flight, {self.queued} queued"

    async def enter(self, timeout_s: float, clock: Callable[[], float] = anyio.current_time) -> str | None:
        """Take a slot, waiting for one at most ``timeout_s``: None when admitted, else why not.

        Refused at once, without awaiting, when the queue is full or ``timeout_s`` leaves no time
        to wait. Cancelled while queued, the waiter leaves the queue and passes on a slot it had
        just been handed: no slot is lost or leaked. ``clock`` is engine time (the engine passes
        the backend's own clock, which it reads faster than ``anyio.current_time``).
        """
        if self.try_enter():
            return None
        if self.queued >= self.max_queued or timeout_s <= 0:
            return self.refuse_full()
        started = clock()
        loop = asyncio._get_running_loop()
        waiter = self._join(started + timeout_s, loop)
        try:
            if loop is None:
                await self._wait_on_trio(waiter, clock)
            else:
                self._arm(loop, waiter.deadline)
                assert waiter.future is not None  # made with the loop
                await waiter.future
        except BaseException:
            self._give_up(waiter)
            raise
        ended = clock()
        self._record_wait(ended, ended - started)
        if waiter.state == _GRANTED:  # even when its time ran out at the same moment
            self.admitted += 1
            return None
        self.rejected_timeout += 1
        return (
            f"bulkhead queue wait ran out after {round(timeout_s, 3):g} s "
            f"({self.in_flight} in flight, {self.queued} queued)"
        )

    def leave(self) -> None:
        """Free a slot: handed straight to the first waiter, if any (and the limit allows)."""
        if self.in_flight <= 0:
            raise RuntimeError("bulkhead: leave() without a slot taken")
        self.in_flight -= 1
        if self.queued:
            self._hand_over()

    def reconfigure(self, options: BulkheadOptions) -> None:
        """Take new limits (a hot reload), keeping occupants and waiters.

        A larger ``max_concurrent`` admits waiters at once; a smaller one lets occupants finish
        and admits nobody until they are below it. A smaller ``max_queued`` keeps those queued.
        """
        self.max_concurrent = options.max_concurrent
        self.max_queued = options.max_queued
        if self.queued:
            self._hand_over()

    def snapshot(self, now: float) -> BulkheadFacts:
        """The bulkhead's state at engine time ``now``."""
        return BulkheadFacts(
            in_flight=self.in_flight,
            max_concurrent=self.max_concurrent,
            queued=self.queued,
            max_queued=self.max_queued,
            rejected_full=self.rejected_full,
            rejected_timeout=self.rejected_timeout,
            wait_p95_ms=self._wait_p95_s(now) * 1000.0,
        )

    # --- the queue ----------------------------------------------------------------------------

    def _join(self, deadline: float, loop: asyncio.AbstractEventLoop | None) -> _Waiter:
        waiter = _Waiter(deadline, loop)
        self._queue.append(waiter)
        self.queued += 1
        self.queued_total += 1
        heap = self._deadlines
        while heap and heap[0][2].state != _WAITING:
            heapq.heappop(heap)
        if len(heap) > 2 * self.queued + _SLACK:
            heap[:] = [entry for entry in heap if entry[2].state == _WAITING]
            heapq.heapify(heap)
        heapq.heappush(heap, (deadline, self.queued_total, waiter))
        if loop is not None:  # asyncio: the timer keeps time
            return waiter
        if self._watch is None:
            self._watch = waiter
        elif self._watch_scope is not None and deadline < self._watch_scope.deadline:
            self._watch_scope.deadline = deadline  # a turn's deadline can come before the others'
        return waiter

    async def _wait_on_trio(self, waiter: _Waiter, clock: Callable[[], float]) -> None:
        """Until ``waiter`` is handed a slot or its time runs out, keeping time while the watch
        (the task parked by trio itself, under trio's own cancel scope: anyio's wrap them)."""
        import trio  # only when running on it: ``import engine`` stays light

        lowlevel = trio.lowlevel
        task = lowlevel.current_task()
        waiter.reschedule = lowlevel.reschedule

        def abort(_: Any) -> Any:  # cancelled while parked: nobody may reschedule it now
            waiter.task = None
            return lowlevel.Abort.SUCCEEDED

        while waiter.state == _WAITING:
            waiter.woken, waiter.task = False, task
            if self._watch is waiter:
                with trio.CancelScope(deadline=self._earliest_deadline()) as scope:
                    self._watch_scope = scope
                    await lowlevel.wait_task_rescheduled(abort)
                if self._watch_scope is scope:
                    self._watch_scope = None
                if waiter.state == _WAITING and not waiter.woken:
                    self._expire(clock())  # the scope's deadline passed
            else:
                await lowlevel.wait_task_rescheduled(abort)
            waiter.task = None  # woken: to become the watch, or with a slot or its time run out

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """asyncio: the timer wakes the queue at ``deadline`` unless it is armed earlier already."""
        timer = self._timer
        if timer is not None and self._timer_loop is loop:
            if self._timer_at <= deadline:
                return
            timer.cancel()
        self._timer_loop, self._timer_at = loop, deadline
        self._timer = loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        """asyncio: the earliest deadline passed: wake whose time ran out, re-arm for the next."""
        loop = self._timer_loop
        assert loop is not None
        self._timer = None
        self._expire(loop.time())
        heap = self._deadlines
        while heap and heap[0][2].state != _WAITING:
            heapq.heappop(heap)
        if heap:
            self._arm(loop, heap[0][0])

    def _earliest_deadline(self) -> float:
        heap = self._deadlines
        while heap[0][2].state != _WAITING:  # the caller is waiting, so the heap holds one
            heapq.heappop(heap)
        return heap[0][0]

    def _expire(self, now: float) -> None:
        """Wake every waiter whose deadline has passed, with its time run out."""
        heap = self._deadlines
        while heap:
            deadline, _, waiter = heap[0]
            if waiter.state == _WAITING:
                if deadline > now:
                    break
                waiter.state = _EXPIRED
                self.queued -= 1
                self._gone += 1
                waiter.wake()
            heapq.heappop(heap)
        self._check_watch()

    def _hand_over(self) -> None:
        """Give free slots to waiters, first come first served."""
        queue = self._queue
        while self.in_flight < self.max_concurrent and self.queued:
            waiter = queue.popleft()
            if waiter.state != _WAITING:
                self._gone -= 1
                continue
            waiter.state = _GRANTED
            self.queued -= 1
            self.in_flight += 1
            waiter.wake()
        self._check_watch()

    def _give_up(self, waiter: _Waiter) -> None:
        """A waiter was cancelled: out of the queue, and a slot it had been handed passed on."""
        if waiter.state == _GRANTED:
            self.leave()
        elif waiter.state == _WAITING:
            waiter.state = _ABANDONED
            self.queued -= 1
            self._gone += 1
            if self._gone > _SLACK and self._gone > self.queued:
                self._queue = deque(w for w in self._queue if w.state == _WAITING)
                self._gone = 0
            self._check_watch()

    def _check_watch(self) -> None:
        """When the watch has stopped waiting, make the newest waiter the watch (waking it)."""
        watch = self._watch
        if watch is None or watch.state == _WAITING:
            return
        self._watch = self._watch_scope = None
        queue = self._queue
        while self.queued:
            newest = queue[-1]
            if newest.state == _WAITING:
                self._watch = newest
                newest.wake()
                return
            queue.pop()
            self._gone -= 1

    # --- the record of waits ------------------------------------------------------------------

    def _record_wait(self, ended: float, waited_s: float) -> None:
        self._waits.append((ended, waited_s))

    def _wait_p95_s(self, now: float) -> float:
        return wait_p95_s(self._waits, now)
