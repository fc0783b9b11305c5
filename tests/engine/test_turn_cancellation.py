"""Deadlines and cancellation on the path users run: every engine mode, both backends.

Regressions of issue 10 §1 (a started engine enforced a turn's deadline only while its first
call ran) and §2 (a tool raising ``CancelledError`` without being cancelled cut its siblings off).
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from engine import ErrorKind, ToolCallExecutor, ToolError, ToolManifest
from engine.errors import TraceStoreError, TurnNotPersisted
from engine.llm import LLMToolCall
from engine.outcomes import CallStatus
from engine.turn import ToolCall, Turn
from tests.conftest import virtual_time_backend
from tests.engine.conftest import Scripted, after, new_engine, recorded

pytestmark = pytest.mark.anyio

# A tool that raises CancelledError nobody asked for exists only on asyncio: trio's Cancelled
# cannot be made or caught outside the scope that raised it.
asyncio_only = pytest.mark.parametrize("anyio_backend", [virtual_time_backend("asyncio")], ids=["asyncio"])


async def fast() -> str:
    return "fast"


async def slow() -> str:
    await anyio.sleep(3000)
    return "slow"


async def test_the_turn_deadline_holds_after_the_first_call_ends() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=3_600_000))
    engine.register("fast", fast)
    engine.register("slow", slow)
    start = anyio.current_time()
    result = await engine.run_turn(Turn([ToolCall("a", "fast"), ToolCall("b", "slow")], deadline_s=300))
    assert anyio.current_time() - start == pytest.approx(300.0)
    assert result.timed_out
    assert [result.outcomes[c].status for c in "ab"] == [CallStatus.SUCCEEDED, CallStatus.TIMED_OUT]


async def test_the_turn_deadline_holds_for_calls_released_later() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=3_600_000))
    engine.register("fast", fast)
    engine.register("slow", slow)
    turn = Turn([ToolCall("a", "fast"), ToolCall("b", "slow", depends_on=("a",), inputs={})], deadline_s=300)
    start = anyio.current_time()
    result = await engine.run_turn(turn)
    assert anyio.current_time() - start == pytest.approx(300.0)
    assert result.outcomes["b"].status is CallStatus.TIMED_OUT


async def test_the_executor_answers_at_its_deadline() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=3_600_000))
    engine.register("fast", fast)
    engine.register("slow", slow)
    start = anyio.current_time()
    batch = await ToolCallExecutor(engine, deadline_s=5).run(
        [LLMToolCall("a", "fast", {}), LLMToolCall("b", "slow", {})]
    )
    assert anyio.current_time() - start == pytest.approx(5.0)
    assert [item.status for item in batch.items] == ["succeeded", "timed_out"]


async def cancelled_elsewhere() -> str:
    """Awaits a future that something else cancelled: CancelledError, though nobody cancelled us."""
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.cancel)
    return await future


@asyncio_only
async def test_a_stray_cancelled_error_is_the_tools_own_failure() -> None:
    engine = await new_engine(ToolManifest(id="victim", side_effect="side_effecting"))
    engine.register("victim", cancelled_elsewhere)
    sibling = engine.register("sibling", Scripted(after(0.05, "ok")))
    start = anyio.current_time()
    result = await engine.run_turn(Turn([ToolCall("v", "victim"), ToolCall("s", "sibling")], deadline_s=120))
    assert not result.timed_out and not result.canceled
    assert anyio.current_time() - start == pytest.approx(0.05)
    victim, healthy = result.outcomes["v"], result.outcomes["s"]
    assert healthy.status is CallStatus.SUCCEEDED and healthy.value == "ok"
    assert sibling.cancelled == 0
    assert victim.status is CallStatus.FAILED
    assert victim.error is not None and victim.error.kind is ErrorKind.TRANSPORT_ERROR
    assert "not cancelled" in victim.error.message
    assert victim.attempts == 1, "ambiguous: a side-effecting call is not sent again"


@asyncio_only
async def test_a_stray_cancelled_error_in_the_first_call_still_answers_every_call_id() -> None:
    engine = await new_engine(ToolManifest(id="victim", retry_policy={"max_attempts": 2}))
    engine.register("victim", cancelled_elsewhere)
    engine.register("sibling", Scripted(after(0.05, "ok")))
    message: dict[str, Any] = {
        "role": "assistant",
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for cid, name in (("call_1", "victim"), ("call_2", "sibling"))
        ],
    }
    replies = await ToolCallExecutor(engine).run_openai(message)
    assert [r["tool_call_id"] for r in replies] == ["call_1", "call_2"]
    assert "Tool Execution Failed" in replies[0]["content"]
    assert replies[1]["content"] == "ok"


async def test_a_real_cancellation_still_cancels_the_turn() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=3_600_000))
    tool = engine.register("slow", Scripted(after(1000, "late")))
    with anyio.move_on_after(10) as scope:
        await engine.run_turn(Turn([ToolCall("s", "slow")], deadline_s=300))
    assert scope.cancelled_caught, "the caller's cancellation reached run_turn"
    assert tool.cancelled == 1


async def test_a_cancelled_caller_leaves_the_turn_interrupted_with_its_calls_in_flight() -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=3_600_000))
    engine.register("fast", fast)
    engine.register("slow", slow)
    events = recorded(engine)
    turn = Turn(
        [
            ToolCall("a", "fast"),
            ToolCall("b", "slow"),
            ToolCall("c", "fast", depends_on=("b",), inputs={}),
        ],
        deadline_s=300,
    )
    with anyio.move_on_after(10):
        await engine.run_turn(turn)
    (interrupted,) = events.of("TurnInterrupted")
    assert (interrupted.in_flight, interrupted.unfinished) == (("b",), ("b", "c"))
    (finished,) = events.of("TurnFinished")
    assert finished.outcome == "interrupted"
    assert finished.statuses == {"a": "succeeded", "b": "interrupted", "c": "interrupted"}
    assert finished.executed == 2, "the call in flight had started running"
    assert finished.duration_ms == pytest.approx(10_000.0)
    assert events.types()[-2:] == ["TurnInterrupted", "TurnFinished"]


class FullDisk:
    """A recorder whose store cannot take the turn (the real store is tested in tests/reliability)."""

    async def turn_finished(self, turn_id: str) -> TraceStoreError | None:
        return TraceStoreError("traces.db", "database or disk is full", untouched=False)


async def test_a_turn_that_is_not_durable_raises_with_its_result() -> None:
    engine = await new_engine()
    engine.register("fast", fast)
    engine.recorder = FullDisk()
    with pytest.raises(TurnNotPersisted, match="not persisted: database or disk is full") as raised:
        await engine.run_turn(Turn([ToolCall("a", "fast")], id="t1"))
    assert raised.value.result.outcomes["a"].value == "fast", "nothing the tool returned is lost"
    with pytest.raises(TurnNotPersisted):
        await ToolCallExecutor(engine).run([LLMToolCall("a", "fast", {})])


@asyncio_only
async def test_a_stray_cancelled_error_mid_stream_is_a_truncated_stream() -> None:
    async def pages() -> Any:
        yield "page 1"
        await cancelled_elsewhere()

    engine = await new_engine()
    engine.register("pages", pages)
    chunks: list[str] = []

    async def read_all() -> None:
        async with engine.stream("pages") as stream:
            async for chunk in stream:
                chunks.append(chunk)

    with pytest.raises(ToolError) as raised:
        await read_all()
    assert chunks == ["page 1"]
    assert raised.value.kind is ErrorKind.PARTIAL_RESULT
    assert "not cancelled" in raised.value.message
