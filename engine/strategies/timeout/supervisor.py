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

An attempt whose manifest sets ``idle_timeout_ms`` is not watched by the supervisor: its deadline
moves. It runs in an :class:`IdleWindow` (its own scope's deadline, ``idle_timeout_ms`` from the
last sign of progress, never past the hard cutoff ``timeout_ms`` sets); a tool signals progress
with :func:`report_progress`, which finds its attempt through a context variable set only for
such attempts (:func:`enter_idle_window`). Attempts without an idle window pay nothing for it.

Internal: the engine's machinery; :func:`report_progress` is public through :mod:`engine`.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio
import anyio.from_thread
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

    def adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Enforce deadlines with ``loop``'s own timers while the engine is not started: on asyncio
        the wake-up is a ``call_at`` callback, so no task of the engine's need run for it. Attempts
        left from another loop (one that ended with them) keep their own deadlines."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._target = None, math.inf
        for bucket in self._buckets.values():
            for scope, deadline in bucket.items():
                scope.deadline = deadline
        self._buckets = {}
        self._loop = loop

    @property
    def adopted(self) -> asyncio.AbstractEventLoop | None:
        """The asyncio loop whose timers enforce the deadlines (None: trio's, or none yet)."""
        return self._loop

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


class IdleWindow:
    """One attempt's idle window: its cancel scope's deadline is ``idle_s`` after the last progress
    report, never past ``ceiling`` (the attempt's hard cutoff, from the manifest's ``timeout_ms``)."""

    __slots__ = ("ceiling", "clock", "idle_s", "open", "scope", "thread", "token")

    def __init__(
        self, scope: CancelScope, now: float, idle_s: float, ceiling: float, clock: Callable[[], float]
    ) -> None:
        self.scope = scope
        self.idle_s = idle_s
        self.ceiling = ceiling
        self.clock = clock
        self.open = True
        """False once the attempt is over: late reports (an SDK callback still queued) do nothing."""
        self.thread = threading.get_ident()
        self.token: Token[IdleWindow | None] | None = None
        scope.deadline = min(now + idle_s, ceiling)

    def push(self) -> None:
        """Progress now: the deadline moves to ``idle_s`` from now (at most to the ceiling)."""
        if threading.get_ident() != self.thread:  # a plain tool's worker thread: the scope is the loop's
            anyio.from_thread.run_sync(self._push)
        else:
            self._push()

    def _push(self) -> None:
        deadline = min(self.clock() + self.idle_s, self.ceiling)
        if self.open and deadline > self.scope.deadline:
            self.scope.deadline = deadline


_WINDOW: ContextVar[IdleWindow | None] = ContextVar("tripwire_idle_window", default=None)
"""The running attempt's idle window; set only for the attempts that have one."""


def enter_idle_window(
    scope: CancelScope, now: float, idle_s: float, ceiling: float, clock: Callable[[], float]
) -> CancelScope:
    """Make ``scope`` (not entered yet) an attempt's idle window and the current one, until
    :func:`leave_idle_window`; returns ``scope``."""
    window = IdleWindow(scope, now, idle_s, ceiling, clock)
    window.token = _WINDOW.set(window)
    return scope


def leave_idle_window() -> None:
    """The attempt of the current idle window is over: the window before it is current again."""
    window = _WINDOW.get()
    if window is not None and window.token is not None:
        window.open = False
        _WINDOW.reset(window.token)


def timeout_error(timeout_ms: float, idle_ms: float | None) -> TimeoutError:
    """The error of an attempt cut off by its timeout, or by its idle window when ``idle_ms``."""
    if idle_ms is not None:
        return TimeoutError(f"Tool idle timeout: no progress for {idle_ms / 1000.0:g}s")
    return TimeoutError(f"Tool timeout after {timeout_ms / 1000.0:g}s")


def idle_window() -> IdleWindow | None:
    """The running attempt's idle window, or None: for adapters whose progress arrives in another
    task (an SDK's callback), which keep it and call :meth:`IdleWindow.push` there."""
    return _WINDOW.get()


def report_progress() -> bool:
    """Tell the engine the running tool made progress: the attempt's idle deadline moves back to
    ``idle_timeout_ms`` from now, never past ``timeout_ms`` (the hard cap).

    Call it from the tool (its task, or the worker thread a plain tool runs in). Returns whether
    there was an idle window to push: False, and nothing happens, outside an attempt or when the
    tool's manifest sets no ``idle_timeout_ms``.
    """
    window = _WINDOW.get()
    if window is None or not window.open:
        return False
    window.push()
    return True
