"""Per-tool metrics as the engine records them (spec-map metrics.per-tool), on virtual time."""

from __future__ import annotations

import json

import anyio
import pytest

from engine import BreakerConfig, RetryPolicy, ToolManifest
from tests.engine.conftest import Scripted, hang, new_engine

pytestmark = pytest.mark.anyio


async def test_one_snapshot_has_the_spec_metrics_for_every_tool() -> None:
    engine = await new_engine(
        ToolManifest(id="flaky", circuit_breaker=BreakerConfig(failure_threshold=3)),
        ToolManifest(id="slow", timeout_ms=1000, retry_policy=RetryPolicy(max_attempts=1)),
    )
    engine.register("flaky", Scripted(ConnectionResetError(), "ok", ValueError("bad"), duration=0.2))
    engine.register("slow", Scripted(hang))
    await engine.try_call("flaky")  # attempt 1 fails (transient), attempt 2 succeeds: a retry success
    await engine.try_call("flaky")  # permanent: one error, the call fails
    await engine.try_call("slow")  # a timeout
    stats = engine.stats()
    assert set(stats) == {"flaky", "slow"}
    flaky = stats["flaky"].life
    assert (flaky.calls, flaky.successes, flaky.failures) == (2, 1, 1)
    assert (flaky.error_count, flaky.transient_error_count, flaky.permanent_error_count) == (2, 1, 1)
    assert (flaky.retry_count, flaky.retry_successes, flaky.retry_success_rate) == (1, 1, 1.0)
    assert flaky.p50_ms == pytest.approx(200, rel=0.03)
    slow = stats["slow"].life
    assert (slow.timeout_count, slow.failures) == (1, 1)
    assert slow.p99_ms == pytest.approx(1000, rel=0.03)
    json.dumps({tool: s.to_dict() for tool, s in stats.items()})


async def test_rejections_and_breaker_opens_are_counted() -> None:
    engine = await new_engine(
        ToolManifest(
            id="down",
            retry_policy=RetryPolicy(max_attempts=1),
            circuit_breaker=BreakerConfig(failure_threshold=2),
        )
    )
    engine.register("down", Scripted(ConnectionRefusedError()))
    for _ in range(5):
        await engine.try_call("down")
    life = engine.stats()["down"].life
    assert (life.calls, life.failures, life.rejections, life.circuit_breaker_opens) == (5, 2, 3, 1)
    assert life.error_percent == pytest.approx(100.0)


async def test_the_rolling_window_forgets_and_the_lifetime_does_not() -> None:
    engine = await new_engine()
    engine.register("svc", Scripted("ok"))
    for _ in range(4):
        await engine.call("svc")
    await anyio.sleep(60)
    await engine.call("svc")
    stats = engine.stats()["svc"]
    assert stats.life.calls == 5
    assert stats.window.calls == 1
    assert stats.rate_per_s == pytest.approx(0.1)
    assert sum(stats.sparkline) == 5
