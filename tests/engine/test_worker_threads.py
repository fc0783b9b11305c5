"""Plain-function attempts run in worker threads, which nothing can cancel: the engine lists them
while they run, so a process that stops can name what it leaves behind (issue 22 §7, prompt stop)."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from engine import ToolManifest
from tests.engine.conftest import new_engine

pytestmark = pytest.mark.anyio


async def test_an_abandoned_attempt_stays_listed_until_its_thread_returns() -> None:
    release, entered = threading.Event(), threading.Event()

    def stuck() -> str:
        entered.set()
        release.wait(30)
        return "late"

    engine = await new_engine(ToolManifest(id="stuck"))
    engine.register("stuck", stuck)
    assert engine.threads.running() == []
    with anyio.CancelScope() as stop:
        async with anyio.create_task_group() as group:
            group.start_soon(engine.try_call, "stuck")
            deadline = time.monotonic() + 10  # the thread starts in real time; checkpoints keep the
            while not entered.is_set():  # virtual clock from jumping to the tool's timeout meanwhile
                assert time.monotonic() < deadline, "the tool's thread never started"
                await anyio.sleep(0)
            (running,) = engine.threads.running()
            stop.cancel()  # the caller stops: the engine abandons the call, its thread runs on
    assert (running.attempt.tool_id, running.attempt.call_id, running.attempt.attempt) == ("stuck", "c1", 1)
    assert running.describe(running.started + 2.5) == "stuck call c1 (attempt 1, running 2.5s)"
    assert engine.threads.left_after(0.0) == [running], "still running: left behind"
    release.set()
    assert engine.threads.left_after(10.0) == [], "its thread returned: nothing left"
