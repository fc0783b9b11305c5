"""OpenTelemetry export: engine events as GenAI ``execute_tool`` spans and a duration histogram.

Needs the ``[otel]`` extra (``pip install 'tripwire[otel]'``: opentelemetry-api, -sdk and the
OTLP/HTTP exporter). :class:`OtelExporter` subscribes to an engine's events and turns them into
spans following the GenAI semantic conventions:

* a span per tool call, ``execute_tool {tool}``, from its start to the event that ends it
  (``CallSucceeded``, ``CallFailed``, ``CallRejected``), timed by the events' wall clock, with
  ``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``;
  on failure ERROR status and ``error.type`` (the error kind) — also when the failure is returned
  to the model (``try_call``, :class:`~engine.llm.ToolCallExecutor`) instead of raised, and for a
  call refused before any attempt (``tripwire.call.status=not_run``: rejected by the breaker,
  ``circuit_open``, a full bulkhead, ``bulkhead_full``, or a rate limit, ``throttled``; an unknown
  tool, a model's call the executor or an adapter could not run);
* retries, failed and timed-out attempts, breaker transitions (named by the call that caused
  them), bulkhead queueing and rejections, retries the retry budget refused, a rate limit's waits
  (``tripwire.rate_limit.waited``) and refusals (``tripwire.rate_limit.rejected``), a cooldown
  started by a call's 429 (``tripwire.cooldown.started``, on that call's span) and found over by
  another's (``tripwire.cooldown.ended``), handler decisions and dependency cascades as span
  events, with their reasons;
* a span per turn (``tripwire.turn``) parenting its calls, itself a child of the caller's current
  span when ``run_turn`` was called; a call outside a turn is a child of the caller's current span;
* arguments (``gen_ai.tool.call.arguments``, a turn's calls) and results
  (``gen_ai.tool.call.result``, recorded by ``Engine(record=True)``) only with
  ``capture_content=True`` — as the engine redacted them in its events;
* the histogram ``gen_ai.execute_tool.duration`` (seconds, retries included) per finished call,
  through a ``MeterProvider`` or, at a twentieth of the cost, aggregated here and sent through a
  ``MetricExporter`` (see :mod:`engine.exporters.otel_metrics`). Only the GenAI conventions'
  metric: tripwire's own gauges and counters (breakers, rejections, bulkheads, retry budgets, rate
  limits) are :mod:`engine.exporters.prometheus`'s.

Off the hot path: a direct subscriber only appends each event to a deque (with the caller's
OpenTelemetry context for the events that start a trace: a turn, a call outside a turn); a worker
thread drains it in batches and turns the events into spans (:mod:`engine.exporters.otel_builder`,
made by :mod:`engine.exporters.otel_spans`): a call outside a turn that simply succeeds is one event
here, not two. Exporters handed over directly export on a thread of their own
(:mod:`engine.exporters.sender`), so a slow collector never stalls the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.context import Context, get_current
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from engine.closing import ClosedOnExit
from engine.events import AttemptStarted, CallSucceeded, Event
from engine.exporters.otel_builder import SpanBuilder
from engine.exporters.otel_metrics import (
    DURATION_BUCKETS,
    GEN_AI_EXECUTE_TOOL_DURATION,
    Durations,
    ExportedDurations,
    MeterDurations,
)
from engine.exporters.otel_spans import ExportedSpans, SpanMaker, span_maker
from engine.exporters.sender import BackgroundSender

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.otel")

_SCOPE = InstrumentationScope("tripwire")
_CLOSE_TIMEOUT_S = 30.0
"""How long closing may wait for the exporters."""


class OtelExporter(ClosedOnExit):
    """Exports an engine's tool calls and turns as OpenTelemetry spans and a duration histogram.

    ``tracer_provider`` / ``meter_provider``: the global ones by default. ``span_exporter``: an
    OpenTelemetry ``SpanExporter`` (OTLP…) to hand the spans to in batches from the worker, instead
    of the provider's span processors (a ``BatchSpanProcessor`` adds a queue, a thread and about
    2 µs a span); the provider then only lends its resource. ``metric_exporter``: a
    ``MetricExporter`` to send the duration histogram to, aggregated here, every
    ``metric_interval_s`` and on flush, instead of recording each call on ``meter_provider``
    (about 0.3 µs a call where the SDK's ``record`` takes 6.5 µs). Neither exporter is shut down
    here: they stay the caller's. ``capture_content``: put calls' arguments and results (as the
    engine redacted them) on the spans. The spans are built on a worker thread that wakes every
    ``interval_s`` (turning events into spans: :class:`~engine.exporters.otel_builder.SpanBuilder`);
    at most ``max_pending`` events wait for it (past that the oldest are dropped).
    :meth:`flush` makes everything emitted so far reach the span processors and the histogram its
    exporter; :meth:`close` (or leaving ``with``) detaches, after a flush. ``direct_spans``: with
    the SDK's ``TracerProvider``, hand finished spans to its processors (``on_end`` only) — eight
    times cheaper than its tracer; False uses the tracer.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        tracer_provider: trace_api.TracerProvider | None = None,
        meter_provider: metrics_api.MeterProvider | None = None,
        span_exporter: SpanExporter | None = None,
        metric_exporter: MetricExporter | None = None,
        metric_interval_s: float = 60.0,
        capture_content: bool = False,
        interval_s: float = 0.1,
        max_pending: int = 100_000,
        direct_spans: bool = True,
    ) -> None:
        self.capture_content = capture_content
        self.interval_s = interval_s
        provider = tracer_provider or trace_api.get_tracer_provider()
        self._sender: BackgroundSender | None = None
        self._spans: SpanMaker
        self._durations: Durations
        if span_exporter is None and metric_exporter is None:
            self._spans = span_maker(provider, _SCOPE, direct_spans)
            self._durations = MeterDurations(meter_provider or metrics_api.get_meter_provider(), _SCOPE)
        else:  # handed the exporters: exported by a thread of their own
            sender = self._sender = BackgroundSender("tripwire-otel-export")
            sdk = _sdk_settings(provider)
            self._spans = (
                span_maker(provider, _SCOPE, direct_spans)
                if span_exporter is None
                else ExportedSpans(span_exporter, sender, sdk.resource, sdk.sampler, sdk.id_generator, _SCOPE)
            )
            self._durations = (
                MeterDurations(meter_provider or metrics_api.get_meter_provider(), _SCOPE)
                if metric_exporter is None
                else ExportedDurations(
                    metric_exporter, sender, sdk.resource, _SCOPE, interval_s=metric_interval_s
                )
            )
        self._builder = SpanBuilder(self._spans, self._durations, capture_content=capture_content)
        self._pending: deque[Event | tuple[Event, Context]] = deque(maxlen=max_pending)
        self.handle_failures = 0
        """Events the worker failed on (logged)."""
        self.events_dropped = 0
        """Events dropped because ``max_pending`` were waiting for the worker (logged)."""
        self._dropped_logged = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._worker = threading.Thread(target=self._work, name="tripwire-otel", daemon=True)
        self._worker.start()
        self._unsubscribe: Callable[[], None] | None = engine.subscribe(self._subscriber(), direct=True)

    # --- the hot path: append, and note the caller's context where a trace may start ---------

    def _subscriber(self) -> Callable[[Event], None]:
        pending = self._pending
        append, full = pending.append, pending.maxlen
        started_type, succeeded_type = AttemptStarted, CallSucceeded

        def on_event(event: Event) -> None:
            item: Event | tuple[Event, Context]
            kind = type(event)
            if kind is started_type:
                if event.turn_id is not None or event.attempt > 1:  # type: ignore[attr-defined]
                    item = event  # a turn's (cut off by its deadline, it still has a span) or a retry
                elif event.probe:  # type: ignore[attr-defined]
                    item = (event, get_current())
                else:  # the first attempt of a call outside a turn: its span is dated from its end
                    return
            elif kind is succeeded_type:
                context = get_current() if event.turn_id is None else None  # type: ignore[attr-defined]
                # In a turn its turn's span is its parent; with no context (empty), it is a root.
                item = (event, context) if context else event
            else:  # a turn's start, a call's first event outside a turn, or rare events
                item = (event, get_current())
            if len(pending) == full:  # the worker is behind: the oldest event goes
                self.events_dropped += 1
            append(item)

        return on_event

    # --- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stopping:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self._drain()
            with self._lock:  # hand over, never export here: a slow collector must not stall the drain
                self._spans.drained()
                if self._durations.due():
                    self._durations.collect()

    def _drain(self) -> None:
        if self.events_dropped > 2 * self._dropped_logged:  # the first, then as they double
            self._dropped_logged = self.events_dropped
            log.warning("OpenTelemetry export is behind: %d events dropped so far", self.events_dropped)
        with self._lock:
            pending, handlers = self._pending, self._builder.handlers
            popleft = pending.popleft
            started_type, succeeded_type = AttemptStarted, CallSucceeded
            started, succeeded = handlers[started_type], handlers[succeeded_type]
            while pending:
                item = popleft()
                kind = type(item)
                try:
                    if kind is succeeded_type:  # nearly every call: a turn's, or one under no span
                        succeeded(item, None)
                    elif kind is started_type:
                        started(item, None)
                    else:
                        event: Event
                        context: Context | None
                        event, context = item if kind is tuple else (item, None)  # type: ignore[assignment, misc]
                        handler = handlers.get(type(event))
                        if handler is not None:
                            handler(event, context)
                except Exception:  # one odd event must not stop the export
                    self.handle_failures += 1
                    if self.handle_failures == 1 or self.handle_failures % 1000 == 0:
                        log.exception("OpenTelemetry export failed on %r", item)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Turn every event emitted so far into spans and push them (and the metric) to the
        exporters; False when that did not succeed within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        failures = self._sender.failures if self._sender is not None else 0
        self._drain()
        with self._lock:
            self._spans.drained()
            self._durations.collect()

        def left_ms() -> int:
            return max(int((deadline - time.monotonic()) * 1000), 0)

        ok = self._spans.force_flush(left_ms())
        ok = self._durations.flush(left_ms()) and ok
        return ok and (self._sender is None or self._sender.failures == failures)

    def close(self) -> None:
        """Stop listening to the engine, export what is pending and stop the worker."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._stopping = True
        self._wake.set()
        self._worker.join()
        self.flush(_CLOSE_TIMEOUT_S)
        if self._sender is not None:
            self._sender.close(_CLOSE_TIMEOUT_S)

    @property
    def abandoned(self) -> int:
        """Open spans given up because their end never came."""
        return self._builder.abandoned


def _sdk_settings(provider: trace_api.TracerProvider) -> TracerProvider:
    """The SDK's provider whose resource, sampler and ids spans handed to an exporter take: the
    given one when it is the SDK's, else one set from the environment ($OTEL_SERVICE_NAME,
    $OTEL_RESOURCE_ATTRIBUTES, $OTEL_TRACES_SAMPLER…), as the SDK would set it."""
    return provider if isinstance(provider, TracerProvider) else TracerProvider(shutdown_on_exit=False)


__all__ = ["DURATION_BUCKETS", "GEN_AI_EXECUTE_TOOL_DURATION", "OtelExporter"]
