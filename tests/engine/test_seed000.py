"""The specification's test conditions (docs/spec-map.md), one named test each, on virtual time.

Conditions 1 classification, 2 retry policy, 3 circuit breaker, 7.1–7.2 edge cases. (4–6 and
7.3–7.4 need turns and are in test_seed000_turns.py.) The map names each condition's entry.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import anyio
import pytest

from engine import (
    BreakerConfig,
    BreakerState,
    ErrorClass,
    ErrorKind,
    RetryPolicy,
    ToolError,
    ToolManifest,
    classify,
    load_manifest,
)
from engine.events import Event
from tests.engine.conftest import Scripted, make_engine, new_engine, recorded

MANIFESTS = Path(__file__).parents[2] / "manifests"


def custom_api() -> ToolManifest:
    return load_manifest(MANIFESTS / "custom_api.yaml")


# --- 1 error classification (spec-map classify) --------------------------------------------


def test_1_1_network_timeout_classified_as_transient() -> None:
    c = classify(Exception("Connection timeout after 30s"))
    assert (c.error_class, c.retryable, c.kind) == (ErrorClass.TRANSIENT, True, ErrorKind.TIMEOUT)
    assert "timeout" in c.reason


def test_1_2_invalid_input_classified_as_permanent() -> None:
    c = classify(Exception("Invalid airport code: XYZ"))
    assert (c.error_class, c.retryable, c.kind) == (ErrorClass.PERMANENT, False, ErrorKind.INVALID_PARAMETERS)


def test_1_3_rate_limit_classified_as_transient() -> None:
    c = classify(Exception("Rate limit exceeded (429)"))
    assert (c.error_class, c.retryable, c.kind) == (ErrorClass.TRANSIENT, True, ErrorKind.RATE_LIMIT)


def test_1_4_auth_failure_classified_as_permanent() -> None:
    c = classify(Exception("Authentication failed (401)"))
    assert (c.error_class, c.retryable, c.kind) == (ErrorClass.PERMANENT, False, ErrorKind.AUTH_ERROR)


def test_1_5_tool_manifest_can_override_classification() -> None:
    error = Exception("Service unavailable (503)")
    assert classify(error).error_class is ErrorClass.TRANSIENT
    c = classify(error, custom_api())
    assert (c.error_class, c.retryable) == (ErrorClass.PERMANENT, False)
    assert c.reason.startswith("manifest override for custom_api: status 503 treated as permanent")


# --- 2 retry policy (spec-map retry) -------------------------------------------------------

pytestmark_anyio = pytest.mark.anyio


@pytestmark_anyio
async def test_2_1_exponential_backoff_delays_correct() -> None:
    totals = []
    for seed in range(20):
        engine = await new_engine(seed=seed)
        tool = engine.register("flight_search", Scripted(TimeoutError("Connection timeout")))
        await engine.try_call("flight_search")
        assert tool.calls == 5, "all 5 attempts executed"
        for gap, expected in zip(tool.gaps(), [0.1, 0.2, 0.4, 0.8], strict=True):
            assert expected * 0.9 <= gap <= expected * 1.1
        totals.append(tool.started[-1] - tool.started[0])
    assert all(1.35 <= total <= 1.65 for total in totals), "1500 ms ± 150 ms on every run"


@pytestmark_anyio
async def test_2_2_jitter_applied_correctly() -> None:
    policy = RetryPolicy(strategy="fixed", initial_delay_ms=100, max_delay_ms=100, max_attempts=11,
                         max_total_time_ms=10_000)  # fmt: skip
    breaker = BreakerConfig(failure_threshold=20)  # keep the breaker out of this retry test
    engine = await new_engine(
        ToolManifest(id="flight_search", retry_policy=policy, circuit_breaker=breaker), seed=2025
    )
    tool = engine.register("flight_search", Scripted(TimeoutError()))
    await engine.try_call("flight_search")
    delays_ms = [gap * 1000 for gap in tool.gaps()]
    assert len(delays_ms) == 10
    assert all(90 <= d <= 110 for d in delays_ms)
    assert len({round(d, 3) for d in delays_ms}) >= 8
    assert 95 <= statistics.mean(delays_ms) <= 105


@pytestmark_anyio
async def test_2_3_max_attempts_respected() -> None:
    engine = await new_engine()
    tool = engine.register("flight_search", Scripted(ConnectionResetError()))
    events = recorded(engine)
    with pytest.raises(ToolError) as caught:
        await engine.call("flight_search")
    assert tool.calls == 5
    assert caught.value.attempts == 5
    assert events.of("ToolError")[-1].decision_reason == "max attempts (5) reached"


@pytestmark_anyio
async def test_2_4_max_total_time_respected() -> None:
    policy = RetryPolicy(initial_delay_ms=0, max_total_time_ms=2000)
    engine = await new_engine(ToolManifest(id="flight_search", retry_policy=policy))
    tool = engine.register("flight_search", Scripted(ConnectionResetError(), duration=0.6))
    events = recorded(engine)
    start = anyio.current_time()
    await engine.try_call("flight_search")
    assert [round(t - start, 3) for t in tool.started] == [0.0, 0.6, 1.2, 1.8]
    assert tool.calls == 4, "attempt 5 would start at 2.4 s, past the 2 s budget"
    assert "budget" in events.of("ToolError")[-1].decision_reason


@pytestmark_anyio
async def test_2_5_tool_specific_overrides_work() -> None:
    engine = await new_engine(custom_api())
    tool = engine.register("custom_api", Scripted(ConnectionResetError()))
    await engine.try_call("custom_api")
    assert tool.calls == 3, "max_attempts 3, not the default 5"
    first, second = tool.gaps()
    assert first == pytest.approx(0.05, rel=0.1)
    assert second == pytest.approx(0.1, rel=0.1)


# --- 3 circuit breaker (spec-map breaker) --------------------------------------------------


def single_attempts() -> ToolManifest:
    """One attempt per call, so each call is one failure of the breaker's count."""
    return ToolManifest(id="flight_search", retry_policy=RetryPolicy(max_attempts=1))


@pytestmark_anyio
async def test_3_1_circuit_opens_after_n_failures() -> None:
    engine = await new_engine(single_attempts())
    tool = engine.register("flight_search", Scripted(ConnectionResetError()))
    events = recorded(engine)
    breaker = engine.breaker("flight_search")
    for _ in range(4):
        await engine.try_call("flight_search")
        assert breaker.state is BreakerState.CLOSED
    await engine.try_call("flight_search")
    assert breaker.state is BreakerState.OPEN
    sixth = await engine.try_call("flight_search")
    assert tool.calls == 5, "attempt 6 returns an error immediately"
    assert sixth.error is not None and sixth.error.kind is ErrorKind.CIRCUIT_OPEN
    assert "Circuit breaker opened for flight_search" in [e.describe().split(" (")[0] for e in events]


@pytestmark_anyio
@pytest.mark.parametrize("probe_succeeds", [True, False])
async def test_3_2_circuit_half_opens_after_timeout(probe_succeeds: bool) -> None:
    manifest = single_attempts().model_copy(update={"circuit_breaker": BreakerConfig(failure_threshold=5)})
    engine = make_engine(manifest)
    probe_result: object = "ok" if probe_succeeds else ConnectionResetError()
    tool = engine.register(
        "flight_search", Scripted(*[ConnectionResetError()] * 5, probe_result, duration=0.01)
    )
    breaker = engine.breaker("flight_search")
    async with engine:
        for _ in range(5):
            await engine.try_call("flight_search")
        t0 = anyio.current_time()
        assert (await engine.try_call("flight_search")).error.kind is ErrorKind.CIRCUIT_OPEN  # type: ignore[union-attr]
        await anyio.sleep(15)
        assert (await engine.try_call("flight_search")).error.kind is ErrorKind.CIRCUIT_OPEN  # type: ignore[union-attr]
        await anyio.sleep_until(t0 + 30)
        assert engine.state("flight_search") is BreakerState.HALF_OPEN, "at t=30 s the state query says so"

        results: list[object] = []

        async def caller() -> None:
            results.append(await engine.try_call("flight_search"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await anyio.sleep(0)
            tg.start_soon(caller)  # blocked while the first retry runs
        assert tool.calls == 6, "exactly one retry allowed"
        settled = anyio.current_time()
        assert settled - (t0 + 30) <= 0.05
        if probe_succeeds:
            assert breaker.state is BreakerState.CLOSED
        else:
            assert breaker.state is BreakerState.OPEN
            assert breaker.half_open_at == pytest.approx(settled + 30), "timeout timer restarted"


@pytestmark_anyio
async def test_3_3_circuit_closes_after_success_in_half_open() -> None:
    manifest = single_attempts().model_copy(update={"circuit_breaker": BreakerConfig(timeout_ms=30_000)})
    engine = await new_engine(manifest)
    engine.register("flight_search", Scripted(*[ConnectionResetError()] * 5, "ok"))
    for _ in range(5):
        await engine.try_call("flight_search")
    await anyio.sleep(30)
    assert await engine.call("flight_search") == "ok"
    breaker = engine.breaker("flight_search")
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 0
    assert await engine.call("flight_search") == "ok", "normal operation resumes"


@pytestmark_anyio
async def test_3_4_permanent_errors_dont_increment_circuit_counter() -> None:
    engine = await new_engine(single_attempts())
    errors = [
        ValueError("Invalid input"),
        Exception("Authentication failed (401)"),
        FileNotFoundError("Not found"),
        ValueError("Invalid input"),
        Exception("Authentication failed (401)"),
    ]
    engine.register("flight_search", Scripted(*errors))
    for _ in errors:
        result = await engine.try_call("flight_search")
        assert result.error is not None and not result.error.classification.transient  # type: ignore[union-attr]
    breaker = engine.breaker("flight_search")
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 0


@pytestmark_anyio
async def test_3_5_transient_errors_increment_circuit_counter() -> None:
    engine = await new_engine(single_attempts())
    errors = [
        TimeoutError("Timeout"),
        Exception("Rate limit exceeded (429)"),
        ConnectionResetError("Connection reset"),
        TimeoutError("Timeout"),
        Exception("Rate limit exceeded (429)"),
    ]
    engine.register("flight_search", Scripted(*errors))
    for _ in errors:
        await engine.try_call("flight_search")
    breaker = engine.breaker("flight_search")
    assert breaker.state is BreakerState.OPEN
    assert breaker.opens == 1
    # The count that opened the breaker is kept on its transition event.
    assert engine.breaker("flight_search").consecutive_failures == 5


# --- 7 edge cases (spec-map breaker.opens, breaker.permanent-not-counted) ---------------


@pytestmark_anyio
async def test_7_1_rapid_sequential_failures() -> None:
    engine = await new_engine()
    tool = engine.register("flight_search", Scripted(ConnectionResetError()))
    events = recorded(engine)
    outcomes = [await engine.try_call("flight_search") for _ in range(6)]
    assert tool.calls == 5, "failures 1-5 were attempts, retried with backoff"
    assert [e.decision for e in events.of("ToolError")] == ["retry"] * 4 + ["escalate"]
    assert all(o.error is not None and o.error.kind is ErrorKind.CIRCUIT_OPEN for o in outcomes[1:])
    assert len(events.of("CallRejected")) == 5, "failures 6-10: circuit open, no retry"
    assert engine.breaker("flight_search").state is BreakerState.OPEN


@pytestmark_anyio
async def test_7_2_mixed_transient_and_permanent_errors() -> None:
    engine = await new_engine()
    engine.register(
        "flight_search",
        Scripted(
            TimeoutError("timeout"), ValueError("Invalid input"), Exception("Rate limit exceeded"), "ok"
        ),
    )
    breaker = engine.breaker("flight_search")
    counter_after: list[int] = []

    def count(event: Event) -> None:
        if event.event_type == "ToolError":
            counter_after.append(breaker.consecutive_failures)

    engine.subscribe(count, direct=True)
    events = recorded(engine)
    first = await engine.try_call("flight_search")
    second = await engine.try_call("flight_search")
    assert first.error is not None and first.error.kind is ErrorKind.INVALID_PARAMETERS
    assert second.ok
    assert [e.decision for e in events.of("ToolError")] == ["retry", "escalate", "retry"]
    assert counter_after == [1, 0, 1], "circuit counter: 1 — only transient errors count"


def test_seed_rng_is_the_only_randomness() -> None:
    """Same seed, same jitter: runs are reproducible."""
    policy = RetryPolicy()
    assert [policy.delay_s(r, random.Random(3)) for r in range(1, 5)] == [
        policy.delay_s(r, random.Random(3)) for r in range(1, 5)
    ]
