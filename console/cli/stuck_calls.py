"""The calls a stopping ``tripwire serve`` leaves behind in worker threads, and a bounded stop.

A plain-function tool runs in a worker thread, which nothing can cancel: when its timeout or a
stop cuts the attempt off, the engine abandons the call at once, but the thread runs on — and
Python waits for every such thread before the process exits: for as long as the call takes, for
ever if it never returns. So a serve that has stopped (its turns recorded ``interrupted``, its
store closed, the fleet left) gives those threads a short grace, then names the calls it abandons
and ends the process without waiting for them.

Which call a thread runs: the engine emits ``AttemptStarted`` in the task that runs the attempt,
just before a plain function's thread is started there; a direct subscriber notes the attempt in
a context variable of that task, and the thread runs in a copy of the task's context (anyio's
``to_thread``), where :func:`stuck_calls` reads it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from contextvars import Context, ContextVar
from dataclasses import dataclass
from types import FrameType

from engine.engine import Engine
from engine.errors import one_line
from engine.events import AttemptStarted, Event

STOP_GRACE_S = 2.0
"""How long a stopped serve waits for calls still running in worker threads before it leaves them."""


@dataclass(frozen=True, slots=True)
class RunningAttempt:
    """An attempt of a call, as the thread running it is tagged."""

    owner: int
    """Which :class:`WorkerCalls` tagged it (its ``id``): another engine's threads are not ours to judge."""
    tool_id: str
    call_id: str
    turn_id: str | None
    attempt: int
    started: float
    """``time.monotonic()`` when it started."""

    def describe(self, now: float) -> str:
        turn = f" of turn {self.turn_id}" if self.turn_id else ""
        running = f"attempt {self.attempt}, running {now - self.started:.1f}s"
        return one_line(f"{self.tool_id} call {self.call_id}{turn} ({running})")


_RUNNING: ContextVar[RunningAttempt | None] = ContextVar("tripwire_serve_running_attempt", default=None)


class WorkerCalls:
    """Tags every attempt of ``engine`` with its call, in the task that runs it (see the module
    docstring); :meth:`close` stops tagging."""

    def __init__(self, engine: Engine) -> None:
        self._unsubscribe: Callable[[], None] = engine.subscribe(self._on_event, direct=True)

    def _on_event(self, event: Event) -> None:
        if type(event) is AttemptStarted:
            _RUNNING.set(
                RunningAttempt(
                    id(self), event.tool_id, event.call_id, event.turn_id, event.attempt, time.monotonic()
                )
            )

    def stuck_calls(self, grace_s: float) -> list[RunningAttempt]:
        """The calls of this engine still running in worker threads once ``grace_s`` has passed (at
        once when none runs)."""
        deadline = time.monotonic() + grace_s
        while True:
            running = self._running()
            remaining = deadline - time.monotonic()
            if not running or remaining <= 0:
                return [attempt for _, attempt in running]
            running[0][0].join(min(remaining, 0.05))

    def _running(self) -> list[tuple[threading.Thread, RunningAttempt]]:
        frames = sys._current_frames()
        running = []
        for thread in threading.enumerate():
            frame = frames.get(thread.ident or -1)
            attempt = _attempt_in(frame) if thread is not threading.current_thread() else None
            if attempt is not None and attempt.owner == id(self) and thread.is_alive():
                running.append((thread, attempt))
        return running

    def close(self) -> None:
        self._unsubscribe()


def _attempt_in(frame: FrameType | None) -> RunningAttempt | None:
    """The attempt a worker thread runs: the tag in the context its job runs in (anyio's worker
    keeps it as a local of its loop; a thread without one runs nothing of ours)."""
    while frame is not None:
        context = frame.f_locals.get("context") if frame.f_code.co_name == "run" else None
        if isinstance(context, Context):
            attempt = context.get(_RUNNING)
            if attempt is not None:
                return attempt
        frame = frame.f_back
    return None


def leave_stuck_calls(calls: WorkerCalls, status: int, grace_s: float = STOP_GRACE_S) -> None:
    """Once serve has stopped and written everything: when calls of its engine still run in worker
    threads after ``grace_s``, say which, on one line, and end the process with ``status`` now,
    rather than wait for them."""
    calls.close()
    stuck = calls.stuck_calls(grace_s)
    if not stuck:
        return
    now = time.monotonic()
    shown = ", ".join(a.describe(now) for a in sorted(stuck, key=lambda a: a.started))
    print(
        f"tripwire serve: stopped; abandoning {len(stuck)} call(s) still running in worker threads"
        f" (a plain function cannot be cancelled): {shown}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(status)  # Python would wait for those threads at exit: for as long as they run


__all__ = ["STOP_GRACE_S", "RunningAttempt", "WorkerCalls", "leave_stuck_calls"]
