"""Per-attempt timeouts enforced by one supervisor instead of a timer per attempt.

A deadline on every cancel scope costs an event-loop timer per attempt (scheduled, then
cancelled): 11-14 % of turn throughput and a third to a half of a call's cost on both backends,
measured side by side. Attempts of one tool share a timeout, so their deadlines arrive in
order: the supervisor keeps one insertion-ordered bucket per timeout value, wakes at the
earliest head and cancels the scopes whose deadline has passed. Registering and finishing an
attempt are O(1) dictionary operations; a bucket is dropped as its last attempt finishes, so
no state outlives the calls.

The wake-up cancels the due scopes inside the backend's own timer pass, as its own deadlines
do, not in a task that must first be scheduled (one extra loop pass: p99 1.3-1.4x late on
asyncio, 1.6-2x on trio under load): on asyncio a ``loop.call_at`` callback, on trio the
abort callback trio runs as it expires the supervisor's deadline.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import anyio.lowlevel
from anyio import CancelScope

if TYPE_CHECKING:
    from anyio.abc import TaskStatus

Bucket: TypeAlias = float
"""What :meth:`TimeoutSupervisor.watch` returns for :meth:`TimeoutSupervisor.done`: the key of
the attempt's bucket, its timeout value."""


class TimeoutSupervisor:
    def __init__(self) -> None:
        self._buckets: dict[float, dict[CancelScope, float]] = {}
        """Per timeout value, its attempts in insertion order: earliest deadline first."""
        self._target = math.inf
        """When the wake-up is armed for (inf: not armed)."""
        self._timer: asyncio.TimerHandle | None = None
        self._sleep: Any = None
        """trio: the cancel scope whose deadline is the wake-up."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self.running = False
        """While true, :meth:`watch` enforces deadlines; otherwise scopes carry their own."""

    def watch(self, timeout_s: float, scope: CancelScope, deadline: float) -> Bucket:
        """Cancel ``scope`` at ``deadline`` (``timeout_s`` from now); returns the key for :meth:`done`."""
        bucket = self._buckets.get(timeout_s)
        if bucket is None:
            bucket = self._buckets[timeout_s] = {}
        bucket[scope] = deadline
        if deadline < self._target:
            self._arm(deadline)
        return timeout_s

    def done(self, timeout_s: Bucket, scope: CancelScope) -> None:
        """The attempt (or turn) ended; its bucket goes with its last attempt."""
        bucket = self._buckets.get(timeout_s)
        if bucket is not None:
            bucket.pop(scope, None)
            if not bucket:
                del self._buckets[timeout_s]

    @property
    def watched(self) -> int:
        """Buckets held (each holds at least one unfinished attempt)."""
        return len(self._buckets)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        loop = anyio.lowlevel.current_token().native_token
        self.running = True
        task_status.started()
        try:
            first = min((next(iter(b.values())) for b in self._buckets.values() if b), default=math.inf)
            if isinstance(loop, asyncio.AbstractEventLoop):
                self._loop = loop
                if first < math.inf:
                    self._arm(first)
                await anyio.sleep_forever()
            else:
                self._target = first
                await self._run_trio()
        finally:
            self.running = False
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._sleep = self._loop = None
            self._target = math.inf
            # Attempts still in flight keep their deadlines: each scope enforces its own now.
            for bucket in self._buckets.values():
                for scope, deadline in bucket.items():
                    scope.deadline = deadline

    def _arm(self, deadline: float) -> None:
        self._target = deadline
        if self._loop is not None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_at(deadline, self._fire)
        elif self._sleep is not None:
            self._sleep.deadline = deadline

    def _fire(self) -> None:
        """asyncio: the loop's timer callback, run in the pass the deadline falls due."""
        assert self._loop is not None
        self._timer = None
        self._target = math.inf
        earliest = self._expire(self._loop.time())
        if earliest < math.inf:
            self._arm(earliest)

    async def _run_trio(self) -> None:
        import trio  # lazy: trio only when running on it, keeps `import engine` light

        def abort(_: Any) -> trio.lowlevel.Abort:
            # Called by trio as it expires the deadline (before the tasks of that pass run),
            # so the attempts cancelled here run in the same pass as with their own deadline.
            self._target = self._expire(trio.current_time())
            return trio.lowlevel.Abort.SUCCEEDED

        while True:
            with trio.CancelScope(deadline=self._target) as self._sleep:
                await trio.lowlevel.wait_task_rescheduled(abort)

    def _expire(self, now: float) -> float:
        """Cancel every overdue scope and drop empty buckets; return the next deadline."""
        earliest = math.inf
        for timeout_s, bucket in list(self._buckets.items()):
            due = []
            for scope, deadline in bucket.items():  # one pass: a dict's deleted head slots cost a scan
                if deadline > now:
                    earliest = min(earliest, deadline)
                    break
                due.append(scope)
            for scope in due:
                del bucket[scope]
                scope.cancel()
            if not bucket:
                del self._buckets[timeout_s]
        return earliest
