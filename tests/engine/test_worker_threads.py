"""Plain-function attempts run in worker threads, which nothing can cancel: the engine lists them
while they run, so a process that stops can name what it leaves behind (issue 22 §7, prompt stop)."""

from __future__ import annotations

import threading

import pytest

from engine import ErrorKind, RetryPolicy, ToolManifest
from tests.engine.conftest import new_engine

pytestmark = pytest.mark.anyio


async def test_an_attempt_cut_off_by_its_timeout_stays_listed_until_its_thread_returns() -> None:
    release, entered = threading.Event(), threading.Event()

    def stuck() -> str:
        entered.set()
        release.wait(30)
        return "late"

    engine = await new_engine(
        ToolManifest(id="stuck", timeout_ms=1000, retry_policy=RetryPolicy(max_attempts=1))
    )
    engine.register("stuck", stuck)
    assert engine.threads.running() == []
    result = await engine.try_call("stuck")
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT, "abandoned by the engine"
    assert entered.wait(10)
    (running,) = engine.threads.running()
    assert (running.attempt.tool_id, running.attempt.call_id, running.attempt.attempt) == ("stuck", "c1", 1)
    assert running.describe(running.started + 2.5) == "stuck call c1 (attempt 1, running 2.5s)"
    assert engine.threads.left_after(0.0) == [running], "still running: left behind"
    release.set()
    assert engine.threads.left_after(10.0) == [], "its thread returned: nothing left"
