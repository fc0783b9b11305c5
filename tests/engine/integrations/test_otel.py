"""The OpenTelemetry exporter against the real SDK: GenAI ``execute_tool`` spans and the duration
histogram, read back from the SDK's ``InMemorySpanExporter`` and ``InMemoryMetricReader`` — and the
real OTLP/HTTP exporter sending to a receiver started here, which decodes the protobuf.

Every engine test runs in both engine modes on both backends (tests/engine/conftest.py). The
exporter's worker is a thread: ``exporter.flush()`` drains it on the test's own thread, so what a
test reads is everything emitted so far, on virtual time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, DEFAULT_ON, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags, TraceState

from engine import BreakerConfig, RetryPolicy, ToolCall, ToolManifest, Turn
from engine.exporters.otel import GEN_AI_EXECUTE_TOOL_DURATION, OtelExporter
from engine.exporters.otel_spans import DirectSpans, ExportedSpans
from engine.exporters.sender import BackgroundSender
from engine.llm import ToolCallExecutor
from tests.engine.conftest import WALL, Scripted, new_engine
from tests.engine.integrations.otlp_collector import Collected, otlp_collector
from tests.engine.integrations.test_otel_metrics import Captured
from tests.readme_examples import readme_example

pytestmark = pytest.mark.anyio

SECRET = "sk-live-0123456789abcdef"
SCOPE = InstrumentationScope("tripwire")

EXAMPLE = readme_example("### OpenTelemetry")
"""README's example, run by the OTLP test below."""


class Otel:
    """An SDK tracer provider and meter provider, read back in memory. ``pipeline``: the exporter
    hands its spans to the provider's processors and records the histogram on the meter provider
    (``"sdk"``), or is given the exporters themselves (``"exporters"``: spans batched, the
    histogram aggregated by tripwire)."""

    def __init__(self, pipeline: str = "sdk") -> None:
        self.pipeline = pipeline
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(shutdown_on_exit=False)
        self.metrics = Captured()
        if pipeline == "sdk":
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        self.tracer = self.tracer_provider.get_tracer("the-agent")

    def attach(self, engine: Any, **kwargs: Any) -> OtelExporter:
        if self.pipeline == "exporters" and not kwargs.get("direct_spans", True):
            kwargs["span_exporter"] = None  # the tracer path: through the provider's processors
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        elif self.pipeline == "exporters":
            kwargs = {"span_exporter": self.spans, "metric_exporter": self.metrics, **kwargs}
        return OtelExporter(
            engine, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kwargs
        )

    def finished(self, exporter: OtelExporter) -> list[ReadableSpan]:
        assert exporter.flush(5.0)
        return list(self.spans.get_finished_spans())

    def named(self, exporter: OtelExporter, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished(exporter) if s.name == name]

    def durations(self) -> list[HistogramDataPoint]:
        if self.pipeline == "exporters":  # cumulative: the last export holds every point
            return list(self.metrics.points().values()) if self.metrics.sent else []
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == GEN_AI_EXECUTE_TOOL_DURATION
            for point in metric.data.data_points
            if isinstance(point, HistogramDataPoint)
        ]


@pytest.fixture(params=["sdk", "exporters"])
def otel(request: pytest.FixtureRequest) -> Iterator[Otel]:
    made = Otel(request.param)
    yield made
    made.tracer_provider.shutdown()
    made.meter_provider.shutdown()


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: Any) -> int:
    context = span.get_span_context()
    assert isinstance(context, SpanContext)
    return context.span_id


def event_names(span: ReadableSpan) -> list[str]:
    return [e.name for e in span.events]


# --- calls ---------------------------------------------------------------------------------


async def test_a_successful_call_is_an_execute_tool_span_under_the_callers_span(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", Scripted(["a", "b"], duration=2.0))
    with otel.attach(engine) as exporter:
        with otel.tracer.start_as_current_span("agent") as agent:
            assert await engine.call("search", q="x") == ["a", "b"]
        (span,) = otel.named(exporter, "execute_tool search")
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "tripwire.attempts": 1,
    }
    assert span.status.status_code is StatusCode.UNSET
    assert parent_of(span) == span_id(agent)
    assert span.context is not None and span.context.trace_id == agent.get_span_context().trace_id
    assert span.end_time == int(WALL * 1e9)  # the events' wall clock...
    assert span.end_time - span.start_time == 2_000_000_000  # ...and the call's duration on the engine's
    assert not span.events  # nothing happened worth an event
    (point,) = otel.durations()
    assert point.count == 1 and point.sum == pytest.approx(2.0)  # seconds, on the engine's clock
    assert dict(point.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
    }


async def test_a_call_outside_any_span_is_a_root_span(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", Scripted(1))
    with otel.attach(engine) as exporter:
        await engine.call("search")
        await engine.call("search")
        spans = otel.named(exporter, "execute_tool search")
    assert [s.parent for s in spans] == [None, None]
    assert spans[0].context is not None and spans[1].context is not None
    assert spans[0].context.trace_id != spans[1].context.trace_id


async def test_a_retry_then_success_shows_the_failed_attempt_and_the_retry(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="flaky"))
    engine.register("flaky", Scripted(ConnectionError("reset by peer"), "ok"))
    with otel.attach(engine) as exporter:
        assert await engine.call("flaky") == "ok"
        (span,) = otel.named(exporter, "execute_tool flaky")
    assert span.status.status_code is StatusCode.UNSET
    assert (span.attributes or {})["tripwire.attempts"] == 2
    assert event_names(span) == ["tripwire.attempt.failed", "tripwire.retry"]
    failed = dict(span.events[0].attributes or {})
    assert failed["error.type"] == "network_error"
    assert failed["exception.type"] == "ConnectionError"
    assert failed["exception.message"] == "reset by peer"
    assert failed["tripwire.decision"] == "retry"
    assert "retry 1" in str(failed["tripwire.decision.reason"])
    assert (span.events[1].attributes or {})["tripwire.attempt"] == 2


async def test_a_permanent_failure_is_an_error_span_raised_or_returned(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="lookup"))
    engine.register("lookup", Scripted(FileNotFoundError("no such user")))
    with otel.attach(engine) as exporter:
        with pytest.raises(Exception, match="no such user"):
            await engine.call("lookup")
        result = await engine.try_call("lookup")  # returned, not raised: the same span
        assert result.error is not None
        spans = otel.named(exporter, "execute_tool lookup")
    assert len(spans) == 2
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert "no such user" in (span.status.description or "")
        attributes = dict(span.attributes or {})
        assert attributes["error.type"] == "not_found"
        assert attributes["tripwire.error.class"] == "permanent"
        assert event_names(span) == ["tripwire.attempt.failed", "tripwire.decision"]
        assert (span.events[1].attributes or {})["tripwire.decision"] == "escalate"
    points = otel.durations()
    assert [dict(p.attributes or {}).get("error.type") for p in points] == ["not_found"]
    assert points[0].count == 2


async def test_an_open_breaker_rejects_and_the_call_that_opened_it_says_so(otel: Otel) -> None:
    manifest = ToolManifest(
        id="down",
        circuit_breaker=BreakerConfig(failure_threshold=2),
        retry_policy=RetryPolicy(max_attempts=2),
    )
    engine = await new_engine(manifest)
    engine.register("down", Scripted(ConnectionError("refused")))
    with otel.attach(engine) as exporter:
        first = await engine.try_call("down")
        rejected = await engine.try_call("down")
        assert first.error is not None and rejected.error is not None and rejected.attempts == 0
        opened, short = otel.named(exporter, "execute_tool down")
    assert "tripwire.breaker.OPEN" in event_names(opened)
    transition = next(e for e in opened.events if e.name == "tripwire.breaker.OPEN")
    assert dict(transition.attributes or {})["tripwire.breaker.from"] == "CLOSED"
    assert short.status.status_code is StatusCode.ERROR
    assert dict(short.attributes or {})["error.type"] == "circuit_open"
    assert dict(short.attributes or {})["tripwire.attempts"] == 0
    assert dict(short.attributes or {})["tripwire.call.status"] == "not_run"
    assert event_names(short) == ["tripwire.call.rejected"]
    assert "open" in str((short.events[0].attributes or {})["tripwire.reason"]).lower()


async def test_a_half_open_probe_says_so_and_closes_the_breaker_on_its_span(otel: Otel) -> None:
    manifest = ToolManifest(
        id="flaky",
        circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=1_000),
        retry_policy=RetryPolicy(max_attempts=1),
    )
    engine = await new_engine(manifest)
    engine.register("flaky", Scripted(ConnectionError("refused"), "ok"))
    with otel.attach(engine) as exporter:
        with otel.tracer.start_as_current_span("agent") as agent:
            await engine.try_call("flaky")  # opens the breaker
            await anyio.sleep(1.5)  # its open period passes (virtual time)
            assert await engine.call("flaky") == "ok"  # the probe
        _, probe = otel.named(exporter, "execute_tool flaky")
    names = event_names(probe)  # a call half-opens it when the engine is not started: it says so first
    assert names[-2:] == ["tripwire.breaker.probe", "tripwire.breaker.CLOSED"]
    assert parent_of(probe) == span_id(agent)
    assert probe.status.status_code is StatusCode.UNSET


# --- turns -------------------------------------------------------------------------------------


async def test_a_turn_parents_its_calls_and_its_cascades_under_the_callers_span(otel: Otel) -> None:
    no_retry = RetryPolicy(max_attempts=1)
    engine = await new_engine(
        ToolManifest(id="fetch"), ToolManifest(id="broken", retry_policy=no_retry), ToolManifest(id="use")
    )
    engine.register("fetch", Scripted({"id": 7}))
    engine.register("broken", Scripted(ValueError("bad input")))
    engine.register("use", Scripted("used"))
    turn = Turn([
        ToolCall("a", "fetch"),
        ToolCall("b", "broken"),
        ToolCall("c", "use", depends_on=["b"], optional=True),
        ToolCall("d", "use", depends_on=["b"]),
        ToolCall("e", "use", depends_on=["a"]),
    ])  # fmt: skip
    with otel.attach(engine) as exporter:
        with otel.tracer.start_as_current_span("agent") as agent:
            result = await engine.run_turn(turn)
        spans = otel.finished(exporter)
    (turn_span,) = [s for s in spans if s.name == "tripwire.turn"]
    assert parent_of(turn_span) == span_id(agent)
    assert dict(turn_span.attributes or {})["tripwire.turn.id"] == result.turn_id
    assert dict(turn_span.attributes or {})["tripwire.turn.outcome"] == "degraded"
    calls = {
        str((s.attributes or {})["gen_ai.tool.call.id"]): s
        for s in spans
        if s.name.startswith("execute_tool")
    }
    assert sorted(calls) == ["a", "b", "c", "d", "e"]
    assert {parent_of(s) for s in calls.values()} == {span_id(turn_span)}
    assert calls["a"].status.status_code is StatusCode.UNSET
    assert calls["e"].status.status_code is StatusCode.UNSET
    assert dict(calls["b"].attributes or {})["error.type"] == "invalid_parameters"
    skipped, escalated = dict(calls["c"].attributes or {}), dict(calls["d"].attributes or {})
    assert calls["c"].status.status_code is StatusCode.UNSET and skipped["tripwire.call.status"] == "skipped"
    assert calls["d"].status.status_code is StatusCode.ERROR and escalated["error.type"] == "escalated"
    for cascaded in (calls["c"], calls["d"]):
        (blocked,) = cascaded.events
        assert blocked.name == "tripwire.dependency.blocked"
        assert list((blocked.attributes or {})["tripwire.blocked_by"]) == ["b"]  # type: ignore[arg-type]


async def test_calls_cut_off_by_the_turns_deadline_end_as_timeouts(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="slow", timeout_ms=60_000))
    engine.register("slow", Scripted("late", duration=30.0))
    with otel.attach(engine) as exporter:
        await engine.run_turn(Turn([ToolCall("a", "slow")], deadline_s=1.0))
        spans = otel.finished(exporter)
    call, turn = spans
    assert call.name == "execute_tool slow" and turn.name == "tripwire.turn"
    assert (
        call.status.status_code is StatusCode.ERROR and dict(call.attributes or {})["error.type"] == "timeout"
    )
    assert (
        turn.status.status_code is StatusCode.ERROR and dict(turn.attributes or {})["error.type"] == "timeout"
    )
    assert event_names(turn) == ["tripwire.turn.deadline_exceeded"]


# --- errors returned to the model ---------------------------------------------------------------


async def test_a_failure_the_executor_returns_to_the_model_is_an_error_span(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="weather", retry_policy=RetryPolicy(max_attempts=1)))
    engine.register("weather", Scripted(PermissionError("forbidden city")))
    message = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "x"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
        ],
    }
    with otel.attach(engine) as exporter:
        with otel.tracer.start_as_current_span("agent") as agent:
            answers = await ToolCallExecutor(engine).run_openai(message)
        spans = otel.finished(exporter)
    assert [a["tool_call_id"] for a in answers] == ["call_1", "call_2"]  # the model got both, as text
    by_name = {s.name: s for s in spans}
    ran, refused, turn = (
        by_name["execute_tool weather"],
        by_name["execute_tool nope"],
        by_name["tripwire.turn"],
    )
    assert parent_of(turn) == span_id(agent)
    assert ran.status.status_code is StatusCode.ERROR
    assert dict(ran.attributes or {})["error.type"] == "auth_error"
    assert dict(ran.attributes or {})["gen_ai.tool.call.id"] == "call_1"
    # Refused before the engine ran it (unknown tool): only the executor's answer tells of it.
    assert refused.status.status_code is StatusCode.ERROR
    assert dict(refused.attributes or {})["error.type"] == "unknown_tool"
    assert dict(refused.attributes or {})["tripwire.call.status"] == "not_run"
    assert {parent_of(ran), parent_of(refused)} == {span_id(turn)}


# --- content --------------------------------------------------------------------------------------


async def test_arguments_and_results_only_when_opted_in_and_redacted(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="login"), record=True)
    engine.register("login", Scripted({"session": "s1", "token": SECRET}))
    turn = Turn([ToolCall("a", "login", {"user": "ann", "password": SECRET})])
    with otel.attach(engine) as plain:
        await engine.run_turn(turn)
        (without,) = otel.named(plain, "execute_tool login")
    otel.spans.clear()
    with otel.attach(engine, capture_content=True) as capturing:
        await engine.run_turn(turn)
        (span,) = otel.named(capturing, "execute_tool login")
    assert "gen_ai.tool.call.arguments" not in (without.attributes or {})
    assert "gen_ai.tool.call.result" not in (without.attributes or {})
    attributes = dict(span.attributes or {})
    arguments, result = (
        str(attributes["gen_ai.tool.call.arguments"]),
        str(attributes["gen_ai.tool.call.result"]),
    )
    assert '"user": "ann"' in arguments and '"session": "s1"' in result
    assert "[REDACTED:" in arguments and "[REDACTED:" in result
    for span_ in otel.spans.get_finished_spans():  # never the secret, anywhere
        assert SECRET not in repr(dict(span_.attributes or {}))
        assert all(SECRET not in repr(dict(e.attributes or {})) for e in span_.events)


# --- without the SDK fast path; the real OTLP/HTTP exporter -----------------------------------------


async def test_the_tracer_path_makes_the_same_spans(otel: Otel) -> None:
    engine = await new_engine(ToolManifest(id="flaky"))
    engine.register("flaky", Scripted(ConnectionError("reset"), "ok"))
    with otel.attach(engine, direct_spans=False) as exporter:
        with otel.tracer.start_as_current_span("agent") as agent:
            await engine.call("flaky")
        (span,) = otel.named(exporter, "execute_tool flaky")
    assert parent_of(span) == span_id(agent)
    assert dict(span.attributes or {})["gen_ai.tool.name"] == "flaky"
    assert event_names(span) == ["tripwire.attempt.failed", "tripwire.retry"]


@pytest.fixture
def collector() -> Iterator[Collected]:
    with otlp_collector() as collected:
        yield collected


def test_the_readme_example_sends_its_spans_and_histogram_over_otlp_http(
    collector: Collected, tmp_path: Any
) -> None:
    script = tmp_path / "example.py"
    script.write_text(EXAMPLE, encoding="utf-8")
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_SERVICE_NAME": "readme"}
    # Its own process: the example is a script (anyio.run at top level, the SDK's global state).
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=60, cwd=os.getcwd())
    spans = [
        (span, resource.resource)
        for request in collector.traces
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    (span, resource), *others = spans
    assert not others
    assert span.name == "execute_tool search"
    attributes = {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "search"
    assert attributes["gen_ai.tool.call.id"] == "c1"
    assert (
        len(span.trace_id) == 16
        and len(span.span_id) == 8
        and span.end_time_unix_nano >= span.start_time_unix_nano
    )
    service = {a.key: a.value.string_value for a in resource.attributes}["service.name"]
    assert service == "readme"
    (request,) = collector.metrics
    ((metric, point),) = [
        (metric, point)
        for resource in request.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.histogram.data_points
    ]
    assert metric.name == GEN_AI_EXECUTE_TOOL_DURATION and point.count == 1
    service = {a.key: a.value.string_value for a in request.resource_metrics[0].resource.attributes}
    assert service["service.name"] == "readme"


# --- spans batched for an exporter given directly ----------------------------------------------------


class Batches(SpanExporter):
    """A span exporter that keeps each batch's size, failing the first ``fail`` of them."""

    def __init__(self, fail: int = 0) -> None:
        self.sizes: list[int] = []
        self.fail = fail

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.sizes.append(len(spans))
        if len(self.sizes) <= self.fail:
            raise ConnectionError("collector down")
        return SpanExportResult.SUCCESS


def exported_spans(exporter: SpanExporter, sampler: Sampler = DEFAULT_ON) -> ExportedSpans:
    sender = BackgroundSender("test-export")
    return ExportedSpans(exporter, sender, Resource.create(), sampler, RandomIdGenerator(), SCOPE)


def test_spans_go_in_batches_as_they_fill_and_a_failed_batch_does_not_stop_the_next() -> None:
    exporter = Batches(fail=1)
    spans = exported_spans(exporter)
    for i in range(1_100):
        spans.emit("execute_tool search", None, i, i + 1, {"gen_ai.tool.call.id": f"c{i}"}, (), Status())
    assert spans.sender.wait(5.0)
    assert exporter.sizes == [512, 512]  # sent as each batch filled: few spans alive at a time
    spans.drained()
    assert spans.sender.wait(5.0)
    assert exporter.sizes == [512, 512, 76] and spans.sender.failures == 1


class Blocked(InMemorySpanExporter):
    """A collector that takes nothing until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        assert self.release.wait(30)
        return super().export(spans)


@pytest.mark.anyio
async def test_a_collector_that_does_not_answer_never_stalls_the_spans_and_flush_keeps_its_deadline() -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", Scripted("ok"))
    collector = Blocked()
    with OtelExporter(engine, span_exporter=collector, max_pending=100) as exporter:
        for i in range(600):  # more than a batch: one export starts, and blocks
            await engine.call("search")
            if i % 50 == 49:  # the events become spans now, whatever the collector does
                assert exporter.flush(timeout_s=0.0) is False
        assert exporter.events_dropped == 0  # never more than 100 waiting for the worker
        assert exporter.flush(timeout_s=0.1) is False  # not delivered, and said within its deadline
        collector.release.set()
        assert exporter.flush(timeout_s=5.0)
    assert len(collector.get_finished_spans()) == 600


@pytest.mark.anyio
async def test_events_the_worker_cannot_take_are_counted() -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", Scripted("ok"))
    spans = InMemorySpanExporter()
    with OtelExporter(engine, span_exporter=spans, max_pending=5, interval_s=1_000) as exporter:
        for _ in range(8):  # one event a call outside a turn; the worker sleeps
            await engine.call("search")
        assert exporter.events_dropped == 3
    assert len(spans.get_finished_spans()) == 5


@pytest.mark.anyio
async def test_the_providers_sampler_applies_to_the_spans_handed_to_an_exporter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", Scripted("ok"))
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
    with OtelExporter(engine, tracer_provider=provider, span_exporter=spans):
        await engine.call("search")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")  # no SDK provider: the environment's
    with OtelExporter(engine, tracer_provider=trace_api.NoOpTracerProvider(), span_exporter=spans):
        await engine.call("search")
    assert spans.get_finished_spans() == ()


def test_the_fast_way_decides_as_the_default_sampler_would() -> None:
    made: list[ReadableSpan] = []
    state = TraceState([("vendor", "x")])
    sampled = SpanContext(7, 8, True, TraceFlags(TraceFlags.SAMPLED), state)
    unsampled = SpanContext(7, 9, False, TraceFlags(TraceFlags.DEFAULT))
    default = DirectSpans(made.append, Resource.create(), DEFAULT_ON, RandomIdGenerator(), SCOPE)
    always = DirectSpans(made.append, Resource.create(), ALWAYS_ON, RandomIdGenerator(), SCOPE)
    default.emit("a", unsampled, 1, 2, {}, (), Status())  # a parent sampled out: so is its child
    assert made == []
    default.emit("b", sampled, 1, 2, {}, (), Status())  # a remote parent's trace, state and decision
    always.emit("c", unsampled, 1, 2, {}, (), Status())  # always on: recorded, its parent's trace
    default.emit("d", None, 1, 2, {}, (), Status())  # a root: a trace of its own
    b, c, d = made
    assert b.context is not None and b.parent is sampled
    assert (b.context.trace_id, b.context.trace_state, b.context.trace_flags.sampled) == (7, state, True)
    assert c.context is not None and c.context.trace_id == 7 and c.context.trace_flags.sampled
    assert d.parent is None and d.context is not None and d.context.trace_id not in (0, 7)
    assert d.context.trace_flags.sampled and d.context.trace_flags.random_trace_id
