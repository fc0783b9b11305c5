"""The duration histogram aggregated by tripwire and sent through an OpenTelemetry
``MetricExporter``: the SDK's own data model, the exporter's temporality, the real OTLP/HTTP
metric exporter sending to a receiver started here, which decodes the protobuf.

Engine tests run in both engine modes on both backends (tests/engine/conftest.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from engine import ToolManifest
from engine.exporters.otel import OtelExporter
from engine.exporters.otel_metrics import (
    DURATION_BUCKETS,
    GEN_AI_EXECUTE_TOOL_DURATION,
    DurationHistogram,
    ExportedDurations,
)
from engine.exporters.sender import BackgroundSender
from tests.engine.conftest import Scripted, new_engine
from tests.engine.integrations.otlp_collector import otlp_collector

SCOPE = InstrumentationScope("tripwire")


class Captured(MetricExporter):
    """A metric exporter keeping what it is sent."""

    def __init__(self, temporality: AggregationTemporality | None = None, fail: bool = False) -> None:
        super().__init__({HistogramInstrument: temporality} if temporality is not None else None)
        self.sent: list[MetricsData] = []
        self.fail = fail

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.sent.append(metrics_data)
        return MetricExportResult.FAILURE if self.fail else MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass

    def points(self, index: int = -1) -> dict[tuple[str, str | None], HistogramDataPoint]:
        """The last (or ``index``-th) export's data points, by tool and error type."""
        (resource,) = self.sent[index].resource_metrics
        (scope,) = resource.scope_metrics
        (metric,) = scope.metrics
        assert metric.name == GEN_AI_EXECUTE_TOOL_DURATION and metric.unit == "s"
        found = {}
        for point in metric.data.data_points:
            assert isinstance(point, HistogramDataPoint)
            attributes = dict(point.attributes or {})
            assert attributes.pop("gen_ai.operation.name") == "execute_tool"
            found[(str(attributes.pop("gen_ai.tool.name")), attributes.pop("error.type", None))] = point
            assert not attributes  # low cardinality: nothing else
        return found


# --- the aggregation, pure ---------------------------------------------------------------------


def test_a_value_on_a_boundary_counts_in_the_bucket_it_closes_and_min_max_sum_follow() -> None:
    histogram = DurationHistogram(start_ns=5)
    for seconds in (0.01, 0.010001, 0.003, 100.0):
        histogram.add(seconds, ("search", None))
    (point,) = histogram.points(now_ns=9)
    assert point.explicit_bounds == DURATION_BUCKETS
    assert len(point.bucket_counts) == len(DURATION_BUCKETS) + 1
    assert point.bucket_counts[0] == 2  # (-inf, 0.01]: 0.003 and 0.01
    assert point.bucket_counts[1] == 1  # (0.01, 0.02]
    assert point.bucket_counts[-1] == 1  # (81.92, +inf)
    assert (point.count, point.min, point.max) == (4, 0.003, 100.0)
    assert point.sum == pytest.approx(100.023001)
    assert (point.start_time_unix_nano, point.time_unix_nano) == (5, 9)


def test_a_new_period_starts_from_zero() -> None:
    histogram = DurationHistogram(start_ns=0)
    histogram.add(0.5, ("search", None))
    histogram.restart(now_ns=7)
    assert histogram.points(now_ns=8) == []
    histogram.add(0.25, ("search", None))
    (point,) = histogram.points(now_ns=9)
    assert (point.count, point.start_time_unix_nano) == (1, 7)


def test_the_export_is_due_once_its_interval_passed_and_a_failed_export_is_counted() -> None:
    now = [0.0]
    exporter = Captured(fail=True)
    sender = BackgroundSender("test-export")
    durations = ExportedDurations(
        exporter, sender, Resource.create(), SCOPE, interval_s=60.0, monotonic=lambda: now[0]
    )
    assert not durations.due()
    now[0] = 60.0
    assert durations.due()
    durations.collect()  # nothing recorded: nothing sent
    assert durations.flush(1_000) and exporter.sent == [] and not durations.due()
    durations.record(0.1, ("search", None))
    durations.collect()
    assert durations.flush(5_000)  # sent, though the exporter refused it...
    assert sender.failures == 1 and len(exporter.sent) == 1  # ...which is counted


# --- through the exporter ------------------------------------------------------------------------


def spans_to_memory() -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return provider


@pytest.mark.anyio
async def test_each_tool_and_error_type_is_one_point_cumulative_by_default() -> None:
    engine = await new_engine(ToolManifest(id="search"), ToolManifest(id="lookup"))
    engine.register("search", Scripted("ok", duration=0.5))
    engine.register("lookup", Scripted(FileNotFoundError("no such user"), duration=0.03))
    metrics = Captured()
    with OtelExporter(engine, tracer_provider=spans_to_memory(), metric_exporter=metrics) as exporter:
        await engine.call("search")
        await engine.try_call("lookup")
        assert exporter.flush(5.0)
        first = metrics.points()
        await engine.call("search")
        assert exporter.flush(5.0)
        second = metrics.points()
    assert set(first) == {("search", None), ("lookup", "not_found")}
    assert first[("search", None)].count == 1 and first[("search", None)].sum == pytest.approx(0.5)
    assert first[("lookup", "not_found")].bucket_counts[2] == 1  # 0.03 s: (0.02, 0.04]
    assert second[("search", None)].count == 2  # cumulative: since the exporter began
    assert second[("search", None)].start_time_unix_nano == first[("search", None)].start_time_unix_nano
    (resource,) = metrics.sent[-1].resource_metrics
    assert resource.resource.attributes["service.name"] == "agent"  # the tracer provider's resource
    assert metrics.sent[-1].resource_metrics[0].scope_metrics[0].metrics[0].data.aggregation_temporality is (
        AggregationTemporality.CUMULATIVE
    )


@pytest.mark.anyio
async def test_an_exporter_that_prefers_delta_gets_each_period_alone() -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", Scripted("ok", duration=0.5))
    metrics = Captured(AggregationTemporality.DELTA)
    with OtelExporter(engine, tracer_provider=spans_to_memory(), metric_exporter=metrics) as exporter:
        await engine.call("search")
        await engine.call("search")
        assert exporter.flush(5.0)
        await engine.call("search")
        assert exporter.flush(5.0)
    first, second = metrics.points(0), metrics.points(1)
    assert first[("search", None)].count == 2 and second[("search", None)].count == 1
    assert second[("search", None)].start_time_unix_nano == first[("search", None)].time_unix_nano


# --- the real OTLP/HTTP metric exporter ------------------------------------------------------------


@pytest.mark.anyio
async def test_the_histogram_reaches_an_otlp_http_collector() -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", Scripted("ok", duration=0.05))
    with otlp_collector() as collector:
        metrics = OTLPMetricExporter(endpoint=f"{collector.url}/v1/metrics", timeout=5)
        with OtelExporter(engine, tracer_provider=spans_to_memory(), metric_exporter=metrics) as exporter:
            for _ in range(3):
                await engine.call("search")
            assert exporter.flush(5.0)
        metrics.shutdown()
    received = collector.metrics
    assert received  # the flush's, then the close's (cumulative: the same counts again)
    points = [
        (metric, point)
        for resource in received[-1].resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in _histogram_points(metric)
    ]
    (metric, point), *others = points
    assert not others
    assert metric.name == GEN_AI_EXECUTE_TOOL_DURATION and metric.unit == "s"
    assert point.count == 3 and point.sum == pytest.approx(0.15)
    assert list(point.explicit_bounds) == list(DURATION_BUCKETS)
    assert point.bucket_counts[3] == 3  # 0.05 s: (0.04, 0.08]
    attributes = {a.key: a.value.string_value for a in point.attributes}
    assert attributes == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}


def _histogram_points(metric: Any) -> Sequence[Any]:
    return list(metric.histogram.data_points) if metric.HasField("histogram") else []
