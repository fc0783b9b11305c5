"""Per-attempt timeouts enforced by one supervisor task instead of a timer per attempt.

A deadline on every cancel scope costs an event-loop timer per attempt (scheduled, then
cancelled). Attempts of one tool share a timeout, so their deadlines arrive in order: the
supervisor keeps one insertion-ordered bucket per timeout value, sleeps until the earliest
head, and cancels the scopes whose deadline has passed. Registering and finishing an
attempt are O(1) dictionary operations.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import anyio
from anyio import CancelScope, current_time


class TimeoutSupervisor:
    def __init__(self) -> None:
        self._buckets: dict[float, OrderedDict[CancelScope, float]] = {}
        self._sleep: CancelScope | None = None
        self._target = math.inf
        self.running = False

    def watch(self, timeout_s: float, scope: CancelScope, deadline: float) -> OrderedDict[CancelScope, float]:
        """Cancel ``scope`` at ``deadline``; returns the bucket to pass to :meth:`done`."""
        bucket = self._buckets.get(timeout_s)
        if bucket is None:
            bucket = self._buckets[timeout_s] = OrderedDict()
        bucket[scope] = deadline
        if deadline < self._target and self._sleep is not None:
            self._target = deadline
            self._sleep.deadline = deadline
        return bucket

    @staticmethod
    def done(bucket: OrderedDict[CancelScope, float], scope: CancelScope) -> None:
        bucket.pop(scope, None)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.running = True
        task_status.started()
        try:
            while True:
                self._target = self._expire(current_time())
                with CancelScope(deadline=self._target) as self._sleep:
                    await anyio.sleep_forever()
        finally:
            self.running = False
            self._sleep = None
            self._target = math.inf

    def _expire(self, now: float) -> float:
        """Cancel every overdue scope; return the next deadline."""
        earliest = math.inf
        for bucket in self._buckets.values():
            while bucket:
                scope, deadline = next(iter(bucket.items()))
                if deadline > now:
                    earliest = min(earliest, deadline)
                    break
                del bucket[scope]
                scope.cancel()
        return earliest
