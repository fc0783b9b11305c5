"""How the OpenTelemetry exporter makes spans, once it knows everything about them.

Needs the ``[otel]`` extra (``pip install 'tripwire[otel]'``). Used by
:mod:`engine.exporters.otel`, which rebuilds spans from engine events after the fact, off the
call's hot path. Two ways:

* :class:`DirectSpans`, for the SDK's ``TracerProvider``: a finished ``ReadableSpan`` is built in
  one go and handed to the provider's span processors (``on_end``: what ``BatchSpanProcessor``
  and ``SimpleSpanProcessor`` export), honouring its sampler, id generator and resource. About
  2 µs a span, where ``tracer.start_span`` + ``end`` costs about 16 µs (measured, SDK 1.45).
  Processors' ``on_start`` is not called: the span is complete when it is made.
* :class:`ExportedSpans`, for a ``SpanExporter`` given directly (OTLP…): the same spans, batched
  here and handed whole to a sender thread that exports them — no span processor's per-span
  queue between (a ``BatchSpanProcessor`` adds about 2 µs a span).
* :class:`TracerSpans`, for any other implementation of the API: ``tracer.start_span`` with the
  event's time, events added, ``end`` with the event's time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from random import getrandbits
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan, Tracer
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, DEFAULT_ON, Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags
from opentelemetry.util.types import AttributeValue

from engine.exporters.sender import BackgroundSender

Attributes = Mapping[str, AttributeValue]
SpanEventData = tuple[str, int, Attributes]
"""A span event as the exporter collects it: name, time (ns since the epoch), attributes."""

_INTERNAL = SpanKind.INTERNAL
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_NOT_SAMPLED_RANDOM = TraceFlags(TraceFlags.RANDOM_TRACE_ID)


@dataclass(slots=True)
class StartedSpan:
    """A span whose start is known: its context (children need it) and what ending it needs."""

    name: str
    context: SpanContext
    parent: SpanContext | None
    start_ns: int
    recording: bool
    live: trace_api.Span | None = None
    """The API's span, on the tracer path."""


class SpanMaker:
    """Starts and ends spans for the exporter; see the module docstring for the two ways."""

    def start(self, name: str, parent: SpanContext | None, start_ns: int) -> StartedSpan:
        """A span named ``name`` from ``start_ns``, child of ``parent`` (a root when None or invalid)."""
        raise NotImplementedError

    def end(
        self,
        span: StartedSpan,
        end_ns: int,
        attributes: Attributes,
        events: Sequence[SpanEventData],
        status: Status,
    ) -> None:
        """End ``span`` at ``end_ns`` with its attributes, events and status."""
        raise NotImplementedError

    def emit(
        self,
        name: str,
        parent: SpanContext | None,
        start_ns: int,
        end_ns: int,
        attributes: Attributes,
        events: Sequence[SpanEventData],
        status: Status,
    ) -> None:
        """A span whose start and end are both known: made in one go."""
        self.end(self.start(name, parent, start_ns), end_ns, attributes, events, status)

    def force_flush(self, timeout_millis: int) -> bool:
        """Push what the processors hold to their exporters."""
        return True

    def drained(self) -> None:
        """The exporter's worker has drained a batch of events (its spans may go now)."""


class DirectSpans(SpanMaker):
    """Finished SDK spans straight to the provider's span processors."""

    def __init__(
        self,
        deliver: Callable[[ReadableSpan], object],
        resource: Resource,
        sampler: Sampler,
        ids: IdGenerator,
        scope: InstrumentationScope,
    ) -> None:
        self._deliver = deliver
        self.resource = resource
        self.sampler = _as_known(sampler)
        self.ids = ids
        self.scope = scope
        # The SDK's default generator draws from ``random``: so do we, without two calls a span.
        self._random_ids = type(self.ids) is RandomIdGenerator
        self._default = self._random_ids and (self.sampler is DEFAULT_ON or self.sampler is ALWAYS_ON)
        """The SDK's default ids and a sampler that decides without a call: the fast way applies."""

    def _context(self, name: str, parent: SpanContext | None) -> tuple[SpanContext, SpanContext | None, bool]:
        """The new span's context, its parent (None for a root) and whether it records."""
        ids = self.ids
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            random_trace_id = parent.trace_flags.random_trace_id
            trace_state = parent.trace_state
        else:
            parent, trace_state = None, None
            trace_id = ids.generate_trace_id()
            random_trace_id = self._random_ids or ids.is_trace_id_random()
        sampler = self.sampler
        if sampler is DEFAULT_ON or sampler is ALWAYS_ON:  # the SDK's default: decided without a call
            recording = sampled = parent is None or sampler is ALWAYS_ON or parent.trace_flags.sampled
        else:
            parent_context = Context()
            if parent is not None:
                parent_context = trace_api.set_span_in_context(trace_api.NonRecordingSpan(parent))
            result = sampler.should_sample(parent_context, trace_id, name, _INTERNAL)
            decision = result.decision
            recording = decision in (Decision.RECORD_ONLY, Decision.RECORD_AND_SAMPLE)
            sampled = decision is Decision.RECORD_AND_SAMPLE
            trace_state = result.trace_state
        if sampled:
            flags = _SAMPLED_RANDOM if random_trace_id else _SAMPLED
        else:
            flags = _NOT_SAMPLED_RANDOM if random_trace_id else _NOT_SAMPLED
        span_id = (getrandbits(64) or ids.generate_span_id()) if self._random_ids else ids.generate_span_id()
        return SpanContext(trace_id, span_id, False, flags, trace_state), parent, recording

    def start(self, name: str, parent: SpanContext | None, start_ns: int) -> StartedSpan:
        context, parent, recording = self._context(name, parent)
        return StartedSpan(name, context, parent, start_ns, recording)

    def emit(
        self,
        name: str,
        parent: SpanContext | None,
        start_ns: int,
        end_ns: int,
        attributes: Attributes,
        events: Sequence[SpanEventData],
        status: Status,
    ) -> None:
        if self._default and not events:  # nearly every span, in one go (what _context decides)
            if parent is not None and parent.is_valid:
                flags = parent.trace_flags
                if not flags.sampled and self.sampler is DEFAULT_ON:
                    return  # a parent sampled out: so is its child
                trace_id, trace_state = parent.trace_id, parent.trace_state
                flags = _SAMPLED_RANDOM if flags.random_trace_id else _SAMPLED
            else:
                parent, trace_id, trace_state, flags = None, getrandbits(128) or 1, None, _SAMPLED_RANDOM
            context = SpanContext(trace_id, getrandbits(64) or 1, False, flags, trace_state)
            self._deliver(ReadableSpan(
                name, context, parent, self.resource, attributes, (), (), _INTERNAL, None, status, start_ns,
                max(end_ns, start_ns), self.scope,
            ))  # fmt: skip
            return
        super().emit(name, parent, start_ns, end_ns, attributes, events, status)

    def end(
        self,
        span: StartedSpan,
        end_ns: int,
        attributes: Attributes,
        events: Sequence[SpanEventData],
        status: Status,
    ) -> None:
        if span.recording:
            self._deliver(ReadableSpan(
                span.name, span.context, span.parent, self.resource, attributes,
                [SpanEvent(label, attrs, at) for label, at, attrs in events] if events else (),
                (), _INTERNAL, None, status, span.start_ns, max(end_ns, span.start_ns), self.scope,
            ))  # fmt: skip


class ProcessorSpans(DirectSpans):
    """Finished spans to the span processors of an SDK ``TracerProvider`` (its tracer's sampler,
    id generator and resource)."""

    def __init__(self, tracer: Tracer, scope: InstrumentationScope) -> None:
        self.processor = tracer.span_processor
        super().__init__(self.processor.on_end, tracer.resource, tracer.sampler, tracer.id_generator, scope)

    def force_flush(self, timeout_millis: int) -> bool:
        return self.processor.force_flush(timeout_millis)


class ExportedSpans(DirectSpans):
    """Finished spans batched here (at most ``max_batch`` a batch) and exported through
    ``exporter`` by ``sender``'s thread: a batch goes when it fills, and the rest when the worker
    has drained its events. ``sampler``, ``ids``: the tracer provider's when it is the SDK's (so
    its sampling applies), else those the SDK configures from the environment. The exporter
    stays the caller's."""

    def __init__(
        self,
        exporter: SpanExporter,
        sender: BackgroundSender,
        resource: Resource,
        sampler: Sampler,
        ids: IdGenerator,
        scope: InstrumentationScope,
        *,
        max_batch: int = 512,
    ) -> None:
        self.exporter = exporter
        self.sender = sender
        self.max_batch = max_batch
        self.batch: list[ReadableSpan] = []
        super().__init__(self._add, resource, sampler, ids, scope)

    def _add(self, span: ReadableSpan) -> None:
        batch = self.batch
        batch.append(span)
        if len(batch) >= self.max_batch:  # few spans alive at a time: the collector's work stays small
            self.drained()

    def drained(self) -> None:
        batch = self.batch
        if batch:
            self.batch = []
            self.sender.submit(partial(self._export, batch), len(batch))

    def _export(self, batch: list[ReadableSpan]) -> bool:
        return self.exporter.export(batch) is SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int) -> bool:
        ok = self.sender.wait(timeout_millis / 1000.0)
        return self.exporter.force_flush(timeout_millis) is not False and ok  # the base class says None


class TracerSpans(SpanMaker):
    """Spans through the API's tracer: works with any OpenTelemetry implementation."""

    def __init__(self, tracer: trace_api.Tracer, provider: Any) -> None:
        self.tracer = tracer
        self.provider = provider

    def start(self, name: str, parent: SpanContext | None, start_ns: int) -> StartedSpan:
        # An explicit context: never the worker thread's current one.
        context = (
            trace_api.set_span_in_context(trace_api.NonRecordingSpan(parent))
            if parent is not None and parent.is_valid
            else Context()
        )
        live = self.tracer.start_span(name, context=context, kind=_INTERNAL, start_time=start_ns)
        return StartedSpan(name, live.get_span_context(), parent, start_ns, live.is_recording(), live)

    def end(
        self,
        span: StartedSpan,
        end_ns: int,
        attributes: Attributes,
        events: Sequence[SpanEventData],
        status: Status,
    ) -> None:
        live = span.live
        assert live is not None
        if span.recording:
            live.set_attributes(attributes)
            for name, at, attrs in events:
                live.add_event(name, attrs, at)
            live.set_status(status)
        live.end(max(end_ns, span.start_ns))

    def force_flush(self, timeout_millis: int) -> bool:
        flush = getattr(self.provider, "force_flush", None)  # the API's provider has none
        return bool(flush(timeout_millis)) if flush is not None else True


def _as_known(sampler: Sampler) -> Sampler:
    """``DEFAULT_ON`` or ``ALWAYS_ON`` for a sampler that decides as they do (a ``TracerProvider``
    makes its own copy of the default), so that the decision is taken without a call."""
    description = sampler.get_description()
    for known in (DEFAULT_ON, ALWAYS_ON):
        if description == known.get_description():
            return known
    return sampler


def span_maker(provider: trace_api.TracerProvider, scope: InstrumentationScope, direct: bool) -> SpanMaker:
    """The fastest way ``provider`` supports: :class:`ProcessorSpans` for the SDK's, else
    :class:`TracerSpans`."""
    tracer = provider.get_tracer(scope.name, scope.version, scope.schema_url)
    if direct and isinstance(tracer, Tracer):
        return ProcessorSpans(tracer, scope)
    return TracerSpans(tracer, provider)


__all__ = [
    "DirectSpans",
    "ExportedSpans",
    "ProcessorSpans",
    "SpanEventData",
    "SpanMaker",
    "StartedSpan",
    "TracerSpans",
    "span_maker",
]
