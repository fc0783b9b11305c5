"""Per-call cost of a successful guarded call with the telemetry exporters attached.

    python bench/exporters.py [--calls 20000] [--repeat 5] [--json]

One asyncio loop calls a zero-latency async tool through ``engine.call`` outside any turn, as
bench/call_overhead.py does, in these set-ups:

* ``events on``: a direct subscriber appending to a deque (call_overhead.py's "events on");
* ``+ OTel``: :class:`engine.exporters.otel.OtelExporter` given the exporters — a ``SpanExporter``
  that drops the spans (encoding and sending them is the exporter's cost, not ours), handed them in
  batches, and a ``MetricExporter`` that drops the ``gen_ai.execute_tool.duration`` histogram,
  aggregated by tripwire;
* ``+ OTel through the SDK's pipeline``: the same exporter behind a ``TracerProvider``'s
  ``BatchSpanProcessor``, and the histogram recorded call by call on a ``MeterProvider`` (an
  in-memory reader);
* ``+ Prometheus``: ``engine.exporters.prometheus.PrometheusMetrics`` on its own registry;
* ``+ OTel + Prometheus`` (the issue's target: ≤ 1.5×), and the same through the SDK's pipeline.

Work pushed to a thread is paid for inside the timed region: each run times ``--calls`` calls and
then the exporters' flush (the OTel worker's drain, the span processor's and the meter's flush), so
the worker's CPU is counted. Figures are medians of ``--repeat`` interleaved runs (each set-up once
per round, in turn), with the min–max spread; the ratio to ``events on`` is taken round by round.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from engine import Engine, ToolManifest
from engine.exporters.otel import OtelExporter

prometheus_exporter: Any = None  # built in parallel: a TODO row until it is importable
try:
    from prometheus_client import CollectorRegistry

    from engine.exporters import prometheus as prometheus_exporter
except ImportError:
    pass

BASE = "events on"


class DroppingExporter(SpanExporter):
    """Receives the spans and drops them: what is left is the exporter's own and the SDK's work."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class DroppingMetrics(MetricExporter):
    """Receives the histogram and drops it."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.exports += 1
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


async def tool() -> int:
    return 1


class Setup:
    """One engine with its subscribers; ``flush`` pays for the work its threads were handed."""

    def __init__(self, name: str, otel: str | None, prometheus: bool) -> None:
        self.name = name
        self.engine = Engine([ToolManifest(id="tool")], rng=random.Random(1))
        self.engine.register("tool", tool)
        self.sink: deque[object] = deque(maxlen=10_000)
        self.engine.subscribe(self.sink.append, direct=True)
        self.closers: list[Callable[[], object]] = []
        self.flushers: list[Callable[[], object]] = []
        self.spans: DroppingExporter | None = None
        if otel is not None:
            self.spans = DroppingExporter()
            tracer_provider = TracerProvider(shutdown_on_exit=False)
            meter_provider: Any = NoOpMeterProvider()
            if otel == "sdk":  # the SDK's pipeline: a BatchSpanProcessor, a MeterProvider
                tracer_provider.add_span_processor(BatchSpanProcessor(self.spans, max_queue_size=1_000_000))
                meter_provider = MeterProvider([InMemoryMetricReader()], shutdown_on_exit=False)
                self.closers.append(meter_provider.shutdown)
                exporter = OtelExporter(
                    self.engine, tracer_provider=tracer_provider, meter_provider=meter_provider
                )
            else:  # the exporters handed to tripwire: spans batched, the histogram aggregated
                exporter = OtelExporter(
                    self.engine, tracer_provider=tracer_provider, span_exporter=self.spans,
                    metric_exporter=DroppingMetrics(),
                )  # fmt: skip
            self.flushers.append(exporter.flush)
            self.closers[:0] = [exporter.close, tracer_provider.shutdown]
        if prometheus:
            metrics = prometheus_exporter.PrometheusMetrics(self.engine, registry=CollectorRegistry())
            self.closers.append(metrics.close)

    async def run(self, calls: int) -> float:
        """µs per call, the flush included."""
        call = self.engine.call
        start = time.perf_counter()
        for _ in range(calls):
            await call("tool")
        for flush in self.flushers:
            flush()
        return (time.perf_counter() - start) / calls * 1e6

    def close(self) -> None:
        for close in self.closers:
            close()
        self.engine.close()


async def run(calls: int, repeat: int) -> dict[str, Any]:
    specs: list[tuple[str, str | None, bool]] = [
        (BASE, None, False),
        ("+ OTel", "exporters", False),
        ("+ OTel through the SDK's pipeline", "sdk", False),
    ]
    if prometheus_exporter is not None:
        specs += [
            ("+ Prometheus", None, True),
            ("+ OTel + Prometheus", "exporters", True),
            ("+ OTel (SDK's pipeline) + Prometheus", "sdk", True),
        ]
    setups = [Setup(*spec) for spec in specs]
    async with AsyncExitStack() as stack:
        for setup in setups:  # started, as call_overhead.py measures it
            await stack.enter_async_context(setup.engine)
        figures, ratios = await _measure(setups, calls, repeat)
    for setup in setups:
        if setup.spans is not None:
            assert setup.spans.spans >= calls * repeat, f"{setup.name}: spans went missing"
        setup.close()
    return {
        "us_per_call": {name: _summary(values) for name, values in figures.items()},
        "ratio_to_events_on": {name: _summary(values) for name, values in ratios.items()},
        "prometheus": prometheus_exporter is not None,
    }


async def _measure(
    setups: list[Setup], calls: int, repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    figures: dict[str, list[float]] = {s.name: [] for s in setups}
    ratios: dict[str, list[float]] = {s.name: [] for s in setups if s.name != BASE}
    for setup in setups:  # warm up: first calls, first spans, the worker thread running
        await setup.run(max(calls // 10, 100))
    for _ in range(repeat):
        this_round = {}
        for setup in setups:
            this_round[setup.name] = await setup.run(calls)
            figures[setup.name].append(this_round[setup.name])
        for name in ratios:
            ratios[name].append(this_round[name] / this_round[BASE])
    return figures, ratios


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results = anyio.run(run, args.calls, args.repeat)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    python = f"Python {platform.python_version()} on {platform.machine()}"
    print(f"{python}, {args.calls:,} calls per run, median of {args.repeat} interleaved runs (min–max)")
    print("| set-up | µs/call | × events on |")
    print("| --- | ---: | ---: |")
    for name, micros in results["us_per_call"].items():
        ratio = results["ratio_to_events_on"].get(name)
        shown = f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})" if ratio else "1"
        print(f"| {name} | {micros['median']:.2f} ({micros['min']:.2f}–{micros['max']:.2f}) | {shown} |")
    if not results["prometheus"]:
        print("| + Prometheus | TODO: engine/exporters/prometheus.py not importable yet | |")
        print("| + OTel + Prometheus | TODO | |")
    print("\ntarget: + OTel + Prometheus ≤ 1.5 × events on")


if __name__ == "__main__":
    main()
