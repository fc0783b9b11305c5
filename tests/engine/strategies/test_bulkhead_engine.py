"""The bulkhead in the engine (issue 23 §3): at most ``max_concurrent`` attempts in flight, a bounded
FIFO queue, rejections that say the tool never executed, waits cut by the turn's deadline, a refused
retry that ends the call on its last attempt, and a reload that keeps the occupants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine, ToolManifest, Turn
from engine.kinds import ErrorKind
from engine.outcomes import CallStatus
from engine.strategies.retry.policy import RetryPolicy
from engine.turn import ToolCall
from tests.engine.conftest import Scripted, new_engine, recorded

pytestmark = pytest.mark.anyio

NO_RETRY = RetryPolicy(max_attempts=1)


def bulkhead(**options: Any) -> ToolManifest:
    return ToolManifest(id="t", retry_policy=NO_RETRY, bulkhead=options)


async def test_a_full_bulkhead_queues_a_few_in_order_and_rejects_the_rest_unsent() -> None:
    engine = await new_engine(bulkhead(max_concurrent=2, max_queued=1, queue_timeout_ms=5000))
    tool = Scripted("ok", duration=1.0)
    engine.register("t", tool)
    events = recorded(engine)
    results: dict[int, Any] = {}

    async def call(n: int) -> None:
        results[n] = await engine.try_call("t", n=n)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(call, n)
            await anyio.sleep(0.01)  # arrive in order
        await anyio.sleep(0.5)
        facts = engine.stats()["t"].strategies["bulkhead"]
        assert (facts["in_flight"], facts["queued"], facts["rejected_full"]) == (2, 1, 1)
    assert [results[n].ok for n in range(4)] == [True, True, True, False]
    assert [a["n"] for a in tool.args] == [0, 1, 2], "the queued call ran once a slot freed, the fourth never"
    assert tool.started[2] == pytest.approx(tool.started[0] + 1.0, abs=0.001)
    refused = results[3]
    assert refused.error.kind is ErrorKind.BULKHEAD_FULL
    assert refused.error.executed is False
    assert (refused.attempts, refused.reason) == (0, "bulkhead full: 2 in flight, 1 queued")
    assert [e.attempt for e in events.of("BulkheadQueued")] == [1]
    [rejected] = events.of("BulkheadRejected")
    assert rejected.reason == refused.reason
    [call_rejected] = events.of("CallRejected")
    assert call_rejected.kind is ErrorKind.BULKHEAD_FULL
    stats = engine.stats()["t"]
    assert (stats.life.rejections, stats.life.successes) == (1, 3)
    assert stats.strategies["bulkhead"]["in_flight"] == 0
    assert stats.strategies["bulkhead"]["wait_p95_ms"] == pytest.approx(980, abs=1)


async def test_a_wait_that_runs_out_is_refused_and_leaves_no_slot_taken() -> None:
    engine = await new_engine(bulkhead(max_concurrent=1, max_queued=5, queue_timeout_ms=200))
    tool = Scripted("ok", duration=1.0)
    engine.register("t", tool)
    results = []

    async def call() -> None:
        results.append(await engine.try_call("t"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await anyio.sleep(0.1)
        started = anyio.current_time()
        waited = await engine.try_call("t")
        assert anyio.current_time() - started == pytest.approx(0.2, abs=0.001)
    assert waited.error is not None
    assert waited.error.kind is ErrorKind.BULKHEAD_FULL
    assert waited.reason.startswith("bulkhead queue wait ran out after 0.2 s")
    assert tool.calls == 1
    assert await engine.call("t") == "ok", "the slot is free again"


async def test_a_turns_deadline_cuts_the_queue_wait() -> None:
    engine = await new_engine(bulkhead(max_concurrent=1, max_queued=5, queue_timeout_ms=60_000))
    engine.register("t", Scripted("ok", duration=10.0))
    result = await engine.run_turn(
        Turn([ToolCall("a", "t"), ToolCall("b", "t", optional=True)], deadline_s=0.5)
    )
    assert anyio.current_time() == pytest.approx(0.5, abs=0.01)
    assert result.timed_out
    assert {k: o.status for k, o in result.outcomes.items()} == {
        "a": CallStatus.TIMED_OUT,
        "b": CallStatus.TIMED_OUT,
    }
    facts = engine.stats()["t"].strategies["bulkhead"]
    assert (facts["in_flight"], facts["queued"]) == (0, 0), "the turn's calls left nothing behind"


async def test_a_retry_the_bulkhead_refuses_ends_the_call_on_its_last_attempt() -> None:
    manifest = ToolManifest(
        id="t",
        retry_policy=RetryPolicy(initial_delay_ms=100, jitter_percent=0),
        bulkhead={"max_concurrent": 1},
    )
    engine = await new_engine(manifest)

    async def slow() -> str:
        await anyio.sleep(1.0)
        return "slow"

    engine.register("t", Scripted(ConnectionResetError("reset"), slow))
    results = []

    async def call() -> None:
        results.append(await engine.try_call("t"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)  # fails at once, retries in 100 ms
        await anyio.sleep(0.05)
        tg.start_soon(call)  # takes the only slot for a second
    first = results[0]
    assert first.error is not None
    assert first.error.kind is ErrorKind.CONNECTION_RESET
    assert first.error.executed is True
    assert first.reason.startswith("retry refused: bulkhead full: 1 in flight, 0 queued")
    life = engine.stats()["t"].life
    assert (life.error_count, life.retry_count, life.successes) == (1, 0, 1), (
        "the refused retry was no attempt"
    )


async def test_a_reload_keeps_the_occupants_and_a_larger_limit_admits_the_queue(tmp_path: Path) -> None:
    tool_file = tmp_path / "t.yaml"
    head = "tool:\n  id: t\n  side_effect: read_only\n"
    tool_file.write_text(head + "  bulkhead: {max_concurrent: 1, max_queued: 3, queue_timeout_ms: 60000}\n")
    engine = Engine(tmp_path)
    tool = Scripted("ok", duration=1.0)
    engine.register("t", tool)
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(engine.call, "t")
        await anyio.sleep(0.1)
        assert tool.calls == 1
        tool_file.write_text(
            head + "  bulkhead: {max_concurrent: 3, max_queued: 3, queue_timeout_ms: 60000}\n"
        )
        engine.reload_manifests()
        await anyio.sleep(0)
        await anyio.sleep(0)
        assert tool.calls == 3, "the queued calls got in at once"
        facts = engine.stats()["t"].strategies["bulkhead"]
        assert (facts["in_flight"], facts["max_concurrent"]) == (3, 3)
    assert engine.stats()["t"].strategies["bulkhead"]["in_flight"] == 0
