"""The set of registered tools changes at run time: tools retired and the ones a model may be offered."""

from __future__ import annotations

import anyio
import pytest

from engine import RetryPolicy, ToolError, ToolManifest
from engine.strategies.breaker.machine import BreakerConfig
from tests.engine.conftest import Scripted, new_engine

pytestmark = pytest.mark.anyio


async def test_a_retired_tool_is_refused_as_unknown_and_keeps_its_metrics_when_it_returns() -> None:
    engine = await new_engine()
    engine.register("search", Scripted("hit"))
    assert await engine.call("search") == "hit"
    engine.unregister("search")
    assert "search" not in engine.tool_ids
    with pytest.raises(ToolError, match="unknown tool"):
        await engine.call("search")
    with pytest.raises(LookupError):
        engine.unregister("search")
    engine.register("search", Scripted("again"))
    assert await engine.call("search") == "again"
    assert engine.stats()["search"].life.calls == 2


async def test_available_tools_leaves_out_a_tool_whose_breaker_rejects_until_its_probe_is_due() -> None:
    breaker = BreakerConfig(failure_threshold=1, timeout_ms=30_000)
    once = RetryPolicy(max_attempts=1)
    engine = await new_engine(ToolManifest(id="flaky", circuit_breaker=breaker, retry_policy=once))
    engine.register("flaky", Scripted(ConnectionResetError("reset"), "ok"))
    engine.register("steady", Scripted("ok"))
    assert engine.available_tools() == ["flaky", "steady"]
    result = await engine.try_call("flaky")
    assert not result.ok
    assert engine.available_tools() == ["steady"]
    engine.trip("steady", reason="maintenance")
    assert engine.available_tools() == []
    await anyio.sleep(30)  # the open period ends: one probe is admitted again
    assert engine.available_tools() == ["flaky"]


async def test_registration_hooks_see_every_later_tool_already_registered_until_removed() -> None:
    engine = await new_engine()
    engine.register("early", Scripted("ok"))
    seen: list[tuple[str, str]] = []
    remove = engine.on_register(lambda tool: seen.append((tool, str(engine.state(tool)))))
    engine.on_register(lambda tool: engine.trip(tool, reason="standing") if tool == "late" else None)
    engine.register("search", Scripted("ok"))
    engine.register("late", Scripted("ok"))
    assert seen == [("search", "CLOSED"), ("late", "CLOSED")]  # in order, after the tool exists
    assert str(engine.state("late")) == "FORCED_OPEN"  # applied before register returned
    remove()
    engine.register("after", Scripted("ok"))
    assert [tool for tool, _ in seen] == ["search", "late"]
