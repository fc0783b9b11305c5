"""The OpenTelemetry exporter and the bulkhead, the retry budget (issue 23) and the rate limit (issue
24), read back from the SDK's in-memory exporters through both pipelines (the SDK's processors and
meter provider, or exporters handed over): a call the bulkhead refused is a ``not_run`` span whose
``error.type`` is ``bulkhead_full`` (the kind from the event, not assumed ``circuit_open``), one the
rate limit refused ``throttled``; queueing, the bulkhead's refusals, the retries the budget
refused, a rate limit's waits and refusals and a cooldown started and found over are span events
with their reasons. Every engine test runs in both engine modes on both backends, on virtual time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from engine import BreakerConfig, RetryPolicy, ToolCall, ToolManifest, Turn
from tests.engine.conftest import Scripted, new_engine
from tests.engine.integrations.test_otel import Otel, event_names, parent_of, span_id
from tests.engine.strategies.test_rate_limit_engine import TooManyRequests

pytestmark = pytest.mark.anyio

Manifest: Callable[..., ToolManifest] = ToolManifest
"""``ToolManifest``, with the strategies' sections (``bulkhead=``, ``retry_budget=``) that its
validator knows and its signature does not."""

NO_RETRY = RetryPolicy(max_attempts=1)
RETRIES = RetryPolicy(initial_delay_ms=100, max_delay_ms=100, jitter_percent=0, max_attempts=3)


@pytest.fixture(params=["sdk", "exporters"])
def otel(request: pytest.FixtureRequest) -> Iterator[Otel]:
    made = Otel(request.param)
    yield made
    made.tracer_provider.shutdown()
    made.meter_provider.shutdown()


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def event(span: ReadableSpan, name: str) -> dict[str, Any]:
    (found,) = [e for e in span.events if e.name == name]
    return dict(found.attributes or {})


def by_call_id(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {str(attributes(s)["gen_ai.tool.call.id"]): s for s in spans if s.name.startswith("execute_tool")}


async def test_a_call_the_bulkhead_refused_is_a_not_run_span_and_its_wait_is_an_event(otel: Otel) -> None:
    manifest = Manifest(
        id="t", retry_policy=NO_RETRY,
        bulkhead={"max_concurrent": 1, "max_queued": 1, "queue_timeout_ms": 200},
    )  # fmt: skip
    engine = await new_engine(manifest)
    engine.register("t", Scripted("ok", duration=1.0))
    with otel.attach(engine) as exporter:
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.try_call, "t")  # c1: runs for a second
            await anyio.sleep(0.1)
            tg.start_soon(engine.try_call, "t")  # c2: queues, and its 200 ms run out
            await anyio.sleep(0.01)
            full = await engine.try_call("t")  # c3: the queue is full, refused at once
        spans = by_call_id(otel.named(exporter, "execute_tool t"))

    assert full.error is not None and full.attempts == 0
    ran, waited, refused = spans["c1"], spans["c2"], spans["c3"]
    assert ran.status.status_code is StatusCode.UNSET and not ran.events
    for span in (waited, refused):
        assert span.status.status_code is StatusCode.ERROR
        assert attributes(span)["error.type"] == "bulkhead_full"
        assert attributes(span)["tripwire.call.status"] == "not_run"
        assert attributes(span)["tripwire.attempts"] == 0
        assert event(span, "tripwire.call.rejected")["error.type"] == "bulkhead_full"
    assert refused.status.description == "bulkhead full: 1 in flight, 1 queued" == full.reason
    assert event_names(refused) == ["tripwire.bulkhead.rejected", "tripwire.call.rejected"]
    assert event(refused, "tripwire.bulkhead.rejected") == {
        "tripwire.attempt": 1, "tripwire.reason": "bulkhead full: 1 in flight, 1 queued",
        "tripwire.bulkhead.in_flight": 1, "tripwire.bulkhead.queued": 1, "tripwire.bulkhead.waited_ms": 0.0,
    }  # fmt: skip
    assert event_names(waited) == [
        "tripwire.bulkhead.queued", "tripwire.bulkhead.rejected", "tripwire.call.rejected",
    ]  # fmt: skip
    assert event(waited, "tripwire.bulkhead.queued") == {
        "tripwire.attempt": 1, "tripwire.bulkhead.in_flight": 1, "tripwire.bulkhead.queued": 1,
    }  # fmt: skip
    rejection = event(waited, "tripwire.bulkhead.rejected")
    assert str(rejection["tripwire.reason"]).startswith("bulkhead queue wait ran out after 0.2 s")
    assert rejection["tripwire.bulkhead.waited_ms"] == pytest.approx(200.0, abs=0.01)
    # Nothing ran: only the call that executed has a duration.
    (point,) = otel.durations()
    assert point.count == 1 and "error.type" not in (point.attributes or {})


async def test_a_queued_call_that_got_its_slot_says_so_on_its_span(otel: Otel) -> None:
    engine = await new_engine(Manifest(id="t", bulkhead={"max_concurrent": 1, "max_queued": 1}))
    engine.register("t", Scripted("ok", duration=1.0))
    with otel.attach(engine) as exporter:
        with otel.tracer.start_as_current_span("agent") as agent:
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.call, "t")
                await anyio.sleep(0.25)
                tg.start_soon(engine.call, "t")  # waits 0.75 s for the slot, then runs 1 s
        spans = by_call_id(otel.named(exporter, "execute_tool t"))

    queued = spans["c2"]
    assert queued.status.status_code is StatusCode.UNSET
    assert event_names(queued) == ["tripwire.bulkhead.queued"]
    assert parent_of(queued) == span_id(agent), "its first event (queueing) carried the caller's context"
    assert queued.end_time is not None and queued.start_time is not None
    assert queued.end_time - queued.start_time == pytest.approx(1.75e9, rel=1e-6), "the wait is in its span"


async def test_in_a_turn_the_refused_call_is_a_not_run_child_of_the_turn(otel: Otel) -> None:
    engine = await new_engine(
        Manifest(id="t", retry_policy=NO_RETRY, bulkhead={"max_concurrent": 1, "max_queued": 0})
    )
    engine.register("t", Scripted("ok", duration=1.0))
    with otel.attach(engine) as exporter:
        result = await engine.run_turn(Turn([ToolCall("a", "t"), ToolCall("b", "t", optional=True)]))
        spans = otel.finished(exporter)

    assert result.outcome == "degraded"
    (turn,) = [s for s in spans if s.name == "tripwire.turn"]
    calls = by_call_id(spans)
    assert {parent_of(calls["a"]), parent_of(calls["b"])} == {span_id(turn)}
    refused = [s for s in calls.values() if s.status.status_code is StatusCode.ERROR]
    (span,) = refused
    assert attributes(span)["error.type"] == "bulkhead_full"
    assert attributes(span)["tripwire.call.status"] == "not_run"
    assert event_names(span) == ["tripwire.bulkhead.rejected", "tripwire.call.rejected"]


async def test_a_retry_the_budget_refused_is_an_event_with_its_reason(otel: Otel) -> None:
    manifest = Manifest(
        id="svc", retry_policy=RETRIES, retry_budget={"budget_percent": 0, "min_retries_per_s": 0}
    )
    engine = await new_engine(manifest)
    engine.register("svc", Scripted(ConnectionResetError("connection reset by peer")))
    with otel.attach(engine) as exporter:
        result = await engine.try_call("svc")
        (span,) = otel.named(exporter, "execute_tool svc")

    assert result.attempts == 1
    assert span.status.status_code is StatusCode.ERROR
    assert attributes(span)["error.type"] == "connection_reset", "the call ends on its last attempt's error"
    assert attributes(span)["tripwire.attempts"] == 1
    assert "tripwire.call.status" not in attributes(span), "it ran"
    assert event_names(span) == [
        "tripwire.retry_budget.spent",
        "tripwire.attempt.failed",
        "tripwire.decision",
    ]
    spent = event(span, "tripwire.retry_budget.spent")
    assert spent == {
        "tripwire.attempt": 1, "tripwire.reason": "retry budget spent: 0 retries over 1 calls in 10 s",
        "tripwire.retry_budget.retries": 0, "tripwire.retry_budget.calls": 1,
        "tripwire.retry_budget.window_s": 10.0, "tripwire.retry_budget.shared": False,
    }  # fmt: skip
    assert "retry budget spent" in str(event(span, "tripwire.decision")["tripwire.decision.reason"])


async def test_a_retry_the_bulkhead_refused_is_an_event_on_a_call_that_ran(otel: Otel) -> None:
    manifest = Manifest(
        id="t", retry_policy=RETRIES, circuit_breaker=BreakerConfig(failure_threshold=100),
        bulkhead={"max_concurrent": 1, "max_queued": 0},
    )  # fmt: skip
    engine = await new_engine(manifest)

    async def slow() -> str:
        await anyio.sleep(1.0)
        return "slow"

    engine.register("t", Scripted(ConnectionResetError("reset"), slow))
    with otel.attach(engine) as exporter:
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.try_call, "t")  # c1: fails at once, retries in 100 ms
            await anyio.sleep(0.05)
            tg.start_soon(engine.try_call, "t")  # c2: takes the only slot for a second
        spans = by_call_id(otel.named(exporter, "execute_tool t"))

    first = spans["c1"]
    assert attributes(first)["error.type"] == "connection_reset"
    assert attributes(first)["tripwire.attempts"] == 1
    assert event_names(first) == [
        "tripwire.attempt.failed",
        "tripwire.bulkhead.rejected",
        "tripwire.decision",
    ]
    assert event(first, "tripwire.bulkhead.rejected")["tripwire.attempt"] == 2, "the retry it refused"
    assert spans["c2"].status.status_code is StatusCode.UNSET


# --- the rate limit (issue 24) ----------------------------------------------------------------


async def test_a_rate_limits_waits_refusals_and_cooldowns_are_span_events_with_reasons(otel: Otel) -> None:
    """c1 and c2 take the burst, c3 waits 0.5 s for its token, c4 is refused at once; c5's 429
    (Retry-After 30) starts a cooldown, which refuses c6; c7, 31 s later, finds it over."""
    limit = {"rate_per_s": 2, "burst": 2, "max_wait_ms": 600}
    manifest = Manifest(id="t", retry_policy=NO_RETRY, rate_limit=limit)
    engine = await new_engine(manifest)
    engine.register("t", Scripted("ok", "ok", "ok", TooManyRequests(30.0), "ok"))
    with otel.attach(engine) as exporter:
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(engine.try_call, "t")
                await anyio.sleep(0)
        await anyio.sleep(1.0)
        await engine.try_call("t")  # c5: the 429
        refused = await engine.try_call("t")  # c6: 30 s of cooldown, 0.6 s of wait allowed
        await anyio.sleep(31.0)
        await engine.try_call("t")  # c7
        spans = by_call_id(otel.named(exporter, "execute_tool t"))

    assert refused.error is not None and refused.attempts == 0 and refused.error.kind == "throttled"
    waited = spans["c3"]
    assert waited.status.status_code is StatusCode.UNSET
    assert event_names(waited) == ["tripwire.rate_limit.waited"]
    wait = event(waited, "tripwire.rate_limit.waited")
    assert wait == {"tripwire.attempt": 1, "tripwire.rate_limit.waited_ms": 500.0}
    assert waited.end_time is not None and waited.start_time is not None
    assert waited.end_time - waited.start_time == pytest.approx(0.5e9, rel=1e-6), "the wait is in its span"
    for call_id, needed in (("c4", 1000.0), ("c6", 30_000.0)):
        span = spans[call_id]
        assert attributes(span)["error.type"] == "throttled"
        assert attributes(span)["tripwire.call.status"] == "not_run"
        assert event_names(span) == ["tripwire.rate_limit.rejected", "tripwire.call.rejected"]
        rejection = event(span, "tripwire.rate_limit.rejected")
        assert rejection["tripwire.reason"] == span.status.description
        assert rejection["tripwire.rate_limit.wait_needed_ms"] == pytest.approx(needed)
    assert str(event(spans["c6"], "tripwire.rate_limit.rejected")["tripwire.reason"]).startswith(
        "rate limit: cooling down for 30 s more"
    )
    started = event(spans["c5"], "tripwire.cooldown.started")
    assert started == {
        "tripwire.attempt": 1, "tripwire.cooldown.s": 30.0, "tripwire.cooldown.extended": False,
        "tripwire.cooldown.retry_after_s": 30.0,
    }  # fmt: skip
    assert event(spans["c7"], "tripwire.cooldown.ended") == {
        "tripwire.cooldown.how": "expired",
        "tripwire.cooldown.started_by": "c5",
    }
