"""Streaming tools: guarded opening, idle timeouts, truncation and early stops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from engine import BreakerConfig, BreakerState, ErrorKind, RetryPolicy, ToolError, ToolManifest
from engine.faults import FaultInjector, FaultPlan
from tests.engine.conftest import new_engine, recorded

pytestmark = pytest.mark.anyio


class Source:
    """A streaming tool: per invocation, chunks with a pause each, then an optional error."""

    def __init__(self, *runs: tuple[list[Any], BaseException | None], pause: float = 0.1) -> None:
        self.runs = list(runs)
        self.pause = pause
        self.invocations = 0
        self.closed = 0

    async def __call__(self, **args: Any) -> AsyncIterator[Any]:
        chunks, error = self.runs[min(self.invocations, len(self.runs) - 1)]
        self.invocations += 1
        try:
            for chunk in chunks:
                await anyio.sleep(self.pause)
                yield chunk
            if error is not None:
                raise error
        finally:
            self.closed += 1


async def drain(engine: Any, tool: str, into: list[Any] | None = None) -> None:
    """Read a stream to its end, keeping the chunks in ``into``."""
    async with engine.stream(tool) as chunks:
        async for chunk in chunks:
            if into is not None:
                into.append(chunk)


async def streaming_engine(source: Source, **manifest: Any) -> Any:
    engine = await new_engine(ToolManifest(id="llm", **manifest))
    engine.register("llm", source.__call__)
    return engine


async def test_chunks_arrive_in_order_and_the_stream_completes() -> None:
    source = Source((["a", "b", "c"], None))
    engine = await streaming_engine(source)
    events = recorded(engine)
    async with engine.stream("llm", prompt="hi") as chunks:
        got = [chunk async for chunk in chunks]
    assert got == ["a", "b", "c"]
    assert events.types() == ["AttemptStarted", "CallSucceeded", "StreamEnded"]
    assert events.of("StreamEnded")[0].outcome == "completed"
    assert events.of("StreamEnded")[0].chunks == 3
    assert engine.breaker("llm").consecutive_failures == 0


async def test_a_plain_call_collects_the_chunks() -> None:
    engine = await streaming_engine(Source((["x", "y"], None)))
    assert await engine.call("llm") == ["x", "y"]


async def test_a_failure_before_the_first_chunk_is_retried_like_a_call() -> None:
    source = Source(([], ConnectionResetError("reset")), (["ok"], None))
    engine = await streaming_engine(source)
    async with engine.stream("llm") as chunks:
        assert [c async for c in chunks] == ["ok"]
    assert source.invocations == 2


async def test_a_truncated_stream_is_a_transient_failure_that_counts() -> None:
    source = Source((["a", "b"], ConnectionResetError("peer went away")))
    engine = await streaming_engine(source, circuit_breaker=BreakerConfig(failure_threshold=1))
    events = recorded(engine)
    got: list[Any] = []
    with pytest.raises(ToolError) as caught:
        await drain(engine, "llm", got)
    assert got == ["a", "b"], "what arrived was delivered; nothing is replayed"
    assert caught.value.kind is ErrorKind.PARTIAL_RESULT
    assert caught.value.classification is not None and caught.value.classification.transient
    assert "stream cut after 2 chunk(s)" in caught.value.message
    assert source.invocations == 1, "never retried once chunks were delivered"
    assert engine.breaker("llm").state is BreakerState.OPEN
    (ended,) = events.of("StreamEnded")
    assert (ended.outcome, ended.chunks, ended.kind) == ("truncated", 2, ErrorKind.PARTIAL_RESULT)


async def test_a_stalled_stream_hits_the_idle_timeout() -> None:
    engine = await new_engine(ToolManifest(id="stall", timeout_ms=30_000))

    async def stall(**_: Any) -> AsyncIterator[str]:
        yield "first"
        await anyio.sleep_forever()
        yield "never"

    engine.register("stall", stall)
    start = anyio.current_time()
    with pytest.raises(ToolError, match="no chunk within 30s"):
        await drain(engine, "stall")
    assert anyio.current_time() - start == pytest.approx(30.0)


async def test_stopping_early_is_not_a_failure_and_closes_the_generator() -> None:
    source = Source((["a", "b", "c", "d"], None))
    engine = await streaming_engine(source, circuit_breaker=BreakerConfig(failure_threshold=1))
    events = recorded(engine)
    async with engine.stream("llm") as chunks:
        async for chunk in chunks:
            if chunk == "b":
                break
    assert source.closed == 1
    assert engine.breaker("llm").state is BreakerState.CLOSED
    assert engine.breaker("llm").consecutive_failures == 0
    (ended,) = events.of("StreamEnded")
    assert (ended.outcome, ended.chunks) == ("abandoned", 2)
    assert engine.stats()["llm"].life.error_count == 0


async def test_an_open_breaker_rejects_the_stream_at_once() -> None:
    source = Source((["a"], None))
    engine = await streaming_engine(source)
    engine.trip("llm")
    with pytest.raises(ToolError) as caught:
        async with engine.stream("llm"):
            pass
    assert caught.value.kind is ErrorKind.CIRCUIT_OPEN
    assert source.invocations == 0


async def test_an_injected_stream_truncation_takes_the_same_path() -> None:
    plan = FaultPlan.from_dict(
        {"steps": [{"match": {"tool": "llm"}, "sequence": [{"type": "stream_truncate", "after_chunks": 2}]}]}
    )
    source = Source((["a", "b", "c", "d"], None))
    engine = await new_engine(
        ToolManifest(id="llm", retry_policy=RetryPolicy(max_attempts=1)), faults=FaultInjector(plan)
    )
    engine.register("llm", source.__call__)
    events = recorded(engine)
    got: list[Any] = []
    with pytest.raises(ToolError) as caught:
        await drain(engine, "llm", got)
    assert got == ["a", "b"]
    assert caught.value.kind is ErrorKind.PARTIAL_RESULT
    assert events.of("AttemptStarted")[0].fault_type == "stream_truncate"


async def test_a_non_streaming_tool_cannot_be_streamed() -> None:
    engine = await new_engine()

    async def plain() -> str:
        return "x"

    engine.register("plain", plain)
    with pytest.raises(TypeError, match="not a streaming tool"):
        engine.stream("plain")


async def test_a_truncation_that_opens_the_breaker_names_the_streams_call() -> None:
    source = Source((["a", "b"], ConnectionResetError("peer went away")))
    engine = await streaming_engine(source, circuit_breaker=BreakerConfig(failure_threshold=1))
    events = recorded(engine)
    with pytest.raises(ToolError):
        await drain(engine, "llm")
    (started,) = events.of("AttemptStarted")
    (opened,) = events.of("BreakerOpened")
    (ended,) = events.of("StreamEnded")
    assert opened.call_id == started.call_id == ended.call_id
