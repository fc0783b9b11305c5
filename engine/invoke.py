"""How an attempt runs its tool: awaited, in a worker thread, or as a stream (collected, or opened
on its first chunk); or with an injected fault in its place.

The guarded call (:mod:`engine.pipeline.runtime`) times, counts and decides; this only invokes — and keeps
the list of plain-function attempts running in worker threads (:class:`WorkerThreads`): nothing
can cancel a thread, so an attempt cut off by its timeout or a stop is abandoned by the engine
while its thread runs on, and Python waits for every such thread at exit. A process that stops
asks which are left (``tripwire serve`` names them and exits without waiting).

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio

from engine.streams import collect, open_stream

if TYPE_CHECKING:
    from engine.call import RegisteredTool
    from engine.faults import InjectedAttempt
    from engine.faults.models import StreamCut


class Attempt(NamedTuple):
    """Which attempt of which call runs: what a worker thread is listed under."""

    tool_id: str
    call_id: str
    turn_id: str | None
    attempt: int


@dataclass(frozen=True, slots=True)
class ThreadedAttempt:
    """A plain-function attempt running in a worker thread."""

    attempt: Attempt
    thread: threading.Thread
    started: float
    """``time.monotonic()`` when its thread took it up: for people ("running 31.2s"), never a decision."""

    def describe(self, now: float) -> str:
        a = self.attempt
        turn = f" of turn {a.turn_id}" if a.turn_id else ""
        return f"{a.tool_id} call {a.call_id}{turn} (attempt {a.attempt}, running {now - self.started:.1f}s)"


class WorkerThreads:
    """The engine's plain-function attempts running in worker threads now (see the module docstring)."""

    def __init__(self) -> None:
        self._running: dict[int, ThreadedAttempt] = {}

    def run(self, attempt: Attempt, fn: Callable[..., Any], args: dict[str, Any]) -> Any:
        """Run ``fn(**args)`` in this worker thread, listed as ``attempt`` while it runs."""
        thread = threading.current_thread()
        key = id(thread)
        self._running[key] = ThreadedAttempt(attempt, thread, time.monotonic())
        try:
            return fn(**args)
        finally:
            del self._running[key]

    def running(self) -> list[ThreadedAttempt]:
        """The attempts running now, oldest first."""
        return sorted(self._running.values(), key=lambda running: running.started)

    def left_after(self, grace_s: float) -> list[ThreadedAttempt]:
        """The attempts still running once ``grace_s`` seconds have passed (at once when none runs)."""
        deadline = time.monotonic() + grace_s
        while (running := self.running()) and (left := deadline - time.monotonic()) > 0:
            running[0].thread.join(min(left, 0.05))
        return running


async def invoke(
    tool: RegisteredTool, args: dict[str, Any], opening_stream: bool, cut: StreamCut | None = None,
    *, threads: WorkerThreads | None = None, attempt: Attempt | None = None,
) -> Any:  # fmt: skip
    """Run ``tool`` once: a streaming tool's chunks collected (or, ``opening_stream``, the open
    stream with its first chunk), cut by ``cut`` when a fault says so; a plain function in a
    worker thread, listed in ``threads`` as ``attempt`` while it runs."""
    if tool.is_stream:
        chunks = tool.fn(**args)
        if cut is not None:
            chunks = cut(chunks)
        return await (open_stream(chunks) if opening_stream else collect(chunks))
    if tool.is_async:
        return await tool.fn(**args)
    if threads is not None and attempt is not None:
        return await anyio.to_thread.run_sync(threads.run, attempt, tool.fn, args, abandon_on_cancel=True)
    return await anyio.to_thread.run_sync(partial(tool.fn, **args), abandon_on_cancel=True)


async def invoke_injected(
    fault: InjectedAttempt, tool: RegisteredTool, args: dict[str, Any], opening_stream: bool,
    *, threads: WorkerThreads | None = None, attempt: Attempt | None = None,
) -> Any:  # fmt: skip
    """An attempt an injector stepped into: the fault runs in the tool's place, or cuts its stream."""
    cut = fault.stream_cut() if tool.is_stream else None
    if cut is None:
        return await fault.run(partial(invoke, tool, args, opening_stream, threads=threads, attempt=attempt))
    return await invoke(tool, args, opening_stream, cut)
