"""The ``gen_ai.execute_tool.duration`` histogram, two ways.

Needs the ``[otel]`` extra. Used by :mod:`engine.exporters.otel` on its worker thread:

* :class:`MeterDurations` records each call's duration on a histogram of a ``MeterProvider``
  (its views, readers and exporters apply). The SDK's ``Histogram.record`` costs about 6.5 µs
  a measurement (SDK 1.45: the measurement object, attribute cleaning and hashing, locks) — as
  much as the guarded call itself.
* :class:`ExportedDurations` aggregates the histogram here (explicit buckets, sum, count, min,
  max per tool and error type; about 0.3 µs a call) and hands it, as the SDK's own
  ``MetricsData``, to any OpenTelemetry ``MetricExporter`` (OTLP/HTTP, console…) every
  ``interval_s`` and on flush, in the exporter's preferred temporality, as the SDK's
  ``PeriodicExportingMetricReader`` would — exported by a sender thread, never the worker's.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from opentelemetry import metrics as metrics_api
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_NAME,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE

from engine.exporters.sender import BackgroundSender

GEN_AI_EXECUTE_TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
"""The histogram's name (the installed semantic-conventions package has no constant for it yet)."""
DESCRIPTION: Final = "Duration of tool execution, retries included"
EXECUTE_TOOL: Final = "execute_tool"
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
"""Bucket boundaries the GenAI conventions advise for operation durations, in seconds."""

Labels = tuple[str, str | None]
"""A data point's labels: the tool and, for a failed call, its error type."""


def attributes_of(labels: Labels) -> dict[str, str]:
    tool, error_type = labels
    attributes = {GEN_AI_OPERATION_NAME: EXECUTE_TOOL, GEN_AI_TOOL_NAME: tool}
    if error_type is not None:
        attributes[ERROR_TYPE] = error_type
    return attributes


class Durations:
    """Where the exporter's worker puts each finished call's duration."""

    def record(self, seconds: float, labels: Labels) -> None:
        raise NotImplementedError

    def due(self) -> bool:
        """Whether the worker should :meth:`collect` now, unasked."""
        return False

    def collect(self) -> None:
        """Hand what was recorded to the exporter's side (the worker calls it, under its lock)."""

    def flush(self, timeout_millis: int) -> bool:
        """Wait, at most ``timeout_millis``, until what was collected reached the exporters."""
        return True


class MeterDurations(Durations):
    """A histogram of ``meter_provider``: one ``record`` per call."""

    def __init__(self, meter_provider: metrics_api.MeterProvider, scope: InstrumentationScope) -> None:
        self.meter_provider = meter_provider
        self.histogram = meter_provider.get_meter(scope.name).create_histogram(
            GEN_AI_EXECUTE_TOOL_DURATION, unit="s", explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            description=DESCRIPTION,
        )  # fmt: skip
        self._attributes: dict[Labels, dict[str, str]] = {}

    def record(self, seconds: float, labels: Labels) -> None:
        attributes = self._attributes.get(labels)
        if attributes is None:  # one dict per label set: the SDK copies what it keeps
            attributes = self._attributes[labels] = attributes_of(labels)
        self.histogram.record(seconds, attributes)

    def flush(self, timeout_millis: int) -> bool:
        flush = getattr(self.meter_provider, "force_flush", None)  # the API's provider has none
        return bool(flush(timeout_millis)) if flush is not None else True


@dataclass(slots=True)
class Series:
    """One data point's running aggregation."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    count: int = 0
    sum: float = 0.0
    min: float = float("inf")
    max: float = float("-inf")

    def add(self, seconds: float) -> None:
        self.counts[bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.count += 1
        self.sum += seconds
        if seconds < self.min:
            self.min = seconds
        if seconds > self.max:
            self.max = seconds


class DurationHistogram:
    """The histogram's data points, aggregated here; pure (the times are given)."""

    def __init__(self, start_ns: int) -> None:
        self.series: dict[Labels, Series] = {}
        self.start_ns = start_ns
        """When the current aggregation period began (creation; the last delta export)."""

    def add(self, seconds: float, labels: Labels) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = Series()
        series.add(seconds)

    def points(self, now_ns: int) -> list[HistogramDataPoint]:
        """The data points from the period's start to ``now_ns``."""
        start_ns, points = self.start_ns, []
        for labels, s in self.series.items():
            if s.count:
                points.append(HistogramDataPoint(
                    attributes=attributes_of(labels), start_time_unix_nano=start_ns, time_unix_nano=now_ns,
                    count=s.count, sum=s.sum, bucket_counts=list(s.counts), explicit_bounds=DURATION_BUCKETS,
                    min=s.min, max=s.max,
                ))  # fmt: skip
        return points

    def restart(self, now_ns: int) -> None:
        """A new period (delta temporality): counts from zero, from ``now_ns``."""
        self.series.clear()
        self.start_ns = now_ns


class ExportedDurations(Durations):
    """The histogram aggregated here, exported through ``exporter`` by ``sender``'s thread at most
    every ``interval_s`` (and on flush). ``resource`` describes the process (the tracer
    provider's, by default). The exporter stays the caller's: it is never shut down here."""

    def __init__(
        self,
        exporter: MetricExporter,
        sender: BackgroundSender,
        resource: Resource,
        scope: InstrumentationScope,
        *,
        interval_s: float = 60.0,
        clock: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exporter = exporter
        self.sender = sender
        self.resource = resource
        self.scope = scope
        self.interval_s = interval_s
        self.clock = clock
        """Wall-clock nanoseconds: the data points' times."""
        self.monotonic = monotonic
        """When exports are due (a wall-clock jump does not move them)."""
        preferred = getattr(exporter, "_preferred_temporality", None) or {}  # as the SDK's readers read it
        self.temporality = preferred.get(HistogramInstrument, AggregationTemporality.CUMULATIVE)
        self.histogram = DurationHistogram(clock())
        self._collected_at = monotonic()

    def record(self, seconds: float, labels: Labels) -> None:
        series = self.histogram.series.get(labels)  # DurationHistogram.add, a call less
        if series is None:
            series = self.histogram.series[labels] = Series()
        series.add(seconds)

    def due(self) -> bool:
        return self.monotonic() - self._collected_at >= self.interval_s

    def collect(self) -> None:
        self._collected_at = self.monotonic()
        now = self.clock()
        points = self.histogram.points(now)
        if not points:
            return
        data = MetricsData([ResourceMetrics(self.resource, [ScopeMetrics(self.scope, [Metric(
            GEN_AI_EXECUTE_TOOL_DURATION, DESCRIPTION, "s", Histogram(points, self.temporality),
        )], self.scope.schema_url or "")], self.resource.schema_url)])  # fmt: skip
        if self.temporality is AggregationTemporality.DELTA:
            self.histogram.restart(now)
        self.sender.submit(partial(self._export, data), len(points))

    def _export(self, data: MetricsData) -> bool:
        return self.exporter.export(data) is MetricExportResult.SUCCESS

    def flush(self, timeout_millis: int) -> bool:
        return self.sender.wait(timeout_millis / 1000.0)


__all__ = [
    "DURATION_BUCKETS",
    "GEN_AI_EXECUTE_TOOL_DURATION",
    "DurationHistogram",
    "Durations",
    "ExportedDurations",
    "MeterDurations",
]
