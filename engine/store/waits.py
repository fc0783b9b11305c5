"""A turn waiting in its event loop for a recorder's writer thread to say it is durable.

The writer thread decides each wait (durable, or the store's error) and wakes the waiting
tasks with one call into each event loop — ``call_soon_threadsafe`` on asyncio, the trio
token's ``run_sync_soon`` on trio, both found through anyio's event-loop token — never
blocking on the loop: one hand-off from the writer to the turn, no worker thread in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, final

import anyio
import anyio.lowlevel

from engine.errors import TraceStoreError


@final
class _Pending:
    """The verdict on a wait that is not over."""

    __slots__ = ()


PENDING: Final = _Pending()
Verdict = str | None | _Pending
"""None: durable; a string: why it cannot be; PENDING: not decided yet."""


class DurableWait:
    """One turn's wait: everything in the sequence range before ``mark`` committed, or a problem.

    Made in the event loop (it remembers how to call into it); decided by the writer thread."""

    __slots__ = ("call_soon", "deadline", "done", "event", "loop", "mark", "path", "problem", "start")

    def __init__(self, mark: int, start: int, deadline: float, path: Path) -> None:
        self.mark = mark
        self.start = start
        self.deadline = deadline
        """By ``time.monotonic()``: real time, whatever clock the event loop runs on."""
        self.path = path
        """The store's, to name in the error."""
        self.done = False
        self.problem: TraceStoreError | None = None
        self.event = anyio.Event()
        loop: Any = anyio.lowlevel.current_token().native_token
        self.loop: object = loop
        self.call_soon: Callable[..., object] = (
            loop.call_soon_threadsafe if isinstance(loop, asyncio.AbstractEventLoop) else loop.run_sync_soon
        )

    def decide(self, verdict: Verdict) -> bool:
        """Record ``verdict`` if it ends the wait; returns whether it did."""
        if isinstance(verdict, _Pending):
            return False
        self.done = True
        if verdict is not None:
            self.problem = TraceStoreError(self.path, verdict, untouched=False)
        return True

    async def wait(self) -> None:
        await self.event.wait()


def settle_waits(waits: list[DurableWait], verdict: Callable[[DurableWait], Verdict]) -> list[DurableWait]:
    """Decide ``waits`` (in the writer thread); returns those still pending. The decided ones are
    woken with one call per event loop, however many share it (a group commit wakes them all)."""
    pending: list[DurableWait] = []
    woken: dict[int, tuple[Callable[..., object], list[Callable[[], None]]]] = {}
    for wait in waits:
        if not wait.decide(verdict(wait)):
            pending.append(wait)
            continue
        group = woken.get(id(wait.loop))
        if group is None:
            woken[id(wait.loop)] = (wait.call_soon, [wait.event.set])
        else:
            group[1].append(wait.event.set)
    for call_soon, sets in woken.values():
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody there waits any more
            call_soon(_set_all, sets)
    return pending


class DeadlineKeeper:
    """A thread that ends the durable waits past their deadline, in real time, apart from the
    writer thread, which may be held in a write for the store's whole busy timeout.

    ``settle`` settles the waits that are over and returns the oldest still pending (whose
    deadline comes first). Nothing wakes the keeper when a wait begins: a wait made after it
    fell asleep is due no sooner than ``idle_s`` (the wait's timeout) after that."""

    def __init__(self, settle: Callable[[], DurableWait | None], idle_s: float) -> None:
        self._settle = settle
        self._idle_s = idle_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tripwire-trace-deadlines", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            first = self._settle()
            self._stop.wait(self._idle_s if first is None else max(0.0, first.deadline - time.monotonic()))


def _set_all(sets: list[Callable[[], None]]) -> None:
    for set_event in sets:
        set_event()
