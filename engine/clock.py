"""Where the engine's time comes from: anyio's clock, and wall-clock stamps that can follow it.

Internal: shared by the engine and the console, not API.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable

import anyio
import anyio.lowlevel
from anyio import CancelScope, NoEventLoopError, current_time
from anyio.abc import TaskGroup


def _backend() -> object:
    return getattr(anyio.lowlevel.current_token(), "backend_class", None)


def backend_clock() -> Callable[[], float]:
    """The running backend's clock, looked up once instead of on every read.

    ``anyio.current_time()`` finds the backend on each call; the token's ``backend_class``
    (an ``anyio.abc.AsyncBackend``) reads the same clock at half the cost. On asyncio that
    clock is the running loop's ``time()``, which the loop itself reads faster still.
    """
    loop = getattr(anyio.lowlevel.current_token(), "native_token", None)
    # start-up: asyncio is not imported for this check (15 ms at `import engine`); a loop of it can
    # only be running if something imported it.
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None and isinstance(loop, asyncio.AbstractEventLoop):
        loop_time: Callable[[], float] = loop.time
        return loop_time
    clock = getattr(_backend(), "current_time", None)
    return clock if callable(clock) else current_time


def backend_cancel_scope() -> Callable[[], CancelScope]:
    """The running backend's cancel-scope factory, looked up once (like :func:`backend_clock`)."""
    factory = getattr(_backend(), "create_cancel_scope", None)
    return factory if callable(factory) else CancelScope


def backend_task_group() -> Callable[[], TaskGroup]:
    """The running backend's task-group factory, looked up once (like :func:`backend_clock`)."""
    factory = getattr(_backend(), "create_task_group", None)
    return factory if callable(factory) else anyio.create_task_group


def time_anywhere(clock: Callable[[], float] = current_time) -> float:
    """``clock()``, engine time; outside a running event loop (a tool registered or an override
    restored before ``anyio.run``) what an asyncio loop's clock reads then, as attached readers assume."""
    try:
        return clock()
    except (NoEventLoopError, RuntimeError):  # no event loop in this thread
        return time.monotonic()


class VirtualWallClock:
    """Wall-clock stamps that follow the event loop's (possibly virtual) clock from ``epoch``.

    On trio's ``MockClock`` this makes every stamp reproducible; outside a running loop it
    reads ``epoch`` plus the last engine time it saw.
    """

    __slots__ = ("_last", "epoch")

    def __init__(self, epoch: float) -> None:
        self.epoch = epoch
        self._last = 0.0

    def __call__(self) -> float:
        with contextlib.suppress(NoEventLoopError):  # outside a loop: the last time seen
            self._last = current_time()
        return self.epoch + self._last
