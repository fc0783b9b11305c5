"""OpenTelemetry export: engine events as GenAI ``execute_tool`` spans and a duration histogram.

Needs the ``[otel]`` extra (``pip install 'tripwire[otel]'``: opentelemetry-api, -sdk and the
OTLP/HTTP exporter). :class:`OtelExporter` subscribes to an engine's events and turns them into
spans following the GenAI semantic conventions:

* a span per tool call, ``execute_tool {tool}``, from its first event to the one that ends it
  (``CallSucceeded``, ``CallFailed``, ``CallRejected``), timed by the events' wall clock, with
  ``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``;
  on failure ERROR status and ``error.type`` (the error kind) — also when the failure is returned
  to the model (``try_call``, :class:`~engine.llm.ToolCallExecutor`) instead of raised, and for a
  model's tool call the executor refused to run;
* retries, failed and timed-out attempts, breaker transitions (named by the call that caused
  them), handler decisions and dependency cascades as span events, with their reasons;
* a span per turn (``tripwire.turn``) parenting its calls, itself a child of the caller's current
  span when ``run_turn`` was called; a call outside a turn is a child of the caller's current span;
* arguments (``gen_ai.tool.call.arguments``, a turn's calls) and results
  (``gen_ai.tool.call.result``, recorded by ``Engine(record=True)``; the model's text for a refused
  call) only with ``capture_content=True`` — as the engine redacted them in its events;
* the histogram ``gen_ai.execute_tool.duration`` (seconds, retries included) per finished call,
  through a ``MeterProvider`` or, at a twentieth of the cost, aggregated here and sent through a
  ``MetricExporter`` (see :mod:`engine.exporters.otel_metrics`).

Off the hot path: a direct subscriber only appends each event to a deque (with the caller's
OpenTelemetry context for the events that start a trace: a turn, a call outside a turn); a worker
thread drains it in batches and builds the spans (see :mod:`engine.exporters.otel_spans`). A call's
span runs from its start to its end event, its start taken from that event's ``latency_ms`` (the
engine's clock): a call outside a turn that simply succeeds is one event here, not two.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.context import Context, get_current
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_CALL_RESULT,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import SpanContext, Status, StatusCode, get_current_span

from engine.events import (
    EVENT_TYPES,
    AlternativeUsed,
    AttemptFailed,
    AttemptStarted,
    BreakerTransitioned,
    CallEscalated,
    CallFailed,
    CallRejected,
    CallSkipped,
    CallSucceeded,
    DefaultUsed,
    Event,
    HandlerFailed,
    ToolResultSent,
    ToolTimedOut,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnInterrupted,
    TurnStarted,
)
from engine.exporters.otel_metrics import (
    DURATION_BUCKETS,
    EXECUTE_TOOL,
    GEN_AI_EXECUTE_TOOL_DURATION,
    Durations,
    ExportedDurations,
    MeterDurations,
)
from engine.exporters.otel_spans import (
    Attributes,
    ExportedSpans,
    SpanEventData,
    SpanMaker,
    StartedSpan,
    span_maker,
)

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.otel")

TURN_SPAN: Final = "tripwire.turn"

_SCOPE = InstrumentationScope("tripwire")
_UNSET = Status(StatusCode.UNSET)
_TURN_ERRORS = {"failed": "failed", "timed_out": "timeout", "interrupted": "interrupted"}
"""Turn outcomes that are errors, and their ``error.type``."""
_CUT_OFF = {"timed_out": "timeout", "canceled": "canceled", "interrupted": "interrupted"}
"""Why a call that was still running when its turn ended did not finish (``error.type``)."""
_TURN_NOTES: dict[type[Event], str] = {
    TurnDeadlineExceeded: "tripwire.turn.deadline_exceeded",
    TurnCanceled: "tripwire.turn.canceled",
    TurnInterrupted: "tripwire.turn.interrupted",
}
_EXPORT_TIMEOUT_MS = 10_000
"""How long the worker's periodic histogram export may take."""
_RECENT_TURNS = 256
_MAX_OPEN = 10_000
"""Open spans kept at most, of calls and of turns: one whose end never comes (its caller was
cancelled outside a turn, or its events were dropped) is given up, oldest first, past this."""


def _ns(at: float) -> int:
    return int(at * 1e9)


@dataclass(slots=True)
class _Call:
    """A call whose span is open: when it started, the caller's context, its events so far.

    Its span is made in one go when it ends (a call's span has no children). Until a second
    event comes, a call is kept as its ``AttemptStarted`` and context: the common case, a call that
    simply succeeds, never makes this object.
    """

    tool: str
    call_id: str
    turn_id: str | None
    start_ns: int
    context: Context | None
    events: list[SpanEventData] = field(default_factory=list)


@dataclass(slots=True)
class _Turn:
    span: StartedSpan
    arguments: dict[str, Any] | None
    events: list[SpanEventData] = field(default_factory=list)


class OtelExporter:
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
    ``interval_s``; at most ``max_pending`` events wait for it (past that the oldest are dropped).
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
        resource = getattr(provider, "resource", None)  # the SDK's: the same service everywhere
        if not isinstance(resource, Resource):
            resource = Resource.create()
        self._spans: SpanMaker
        if span_exporter is not None:
            self._spans = ExportedSpans(span_exporter, resource, _SCOPE)
        else:
            self._spans = span_maker(provider, _SCOPE, direct_spans)
        self._durations: Durations
        if metric_exporter is not None:
            self._durations = ExportedDurations(
                metric_exporter, resource, _SCOPE, interval_s=metric_interval_s
            )
        else:
            self._durations = MeterDurations(meter_provider or metrics_api.get_meter_provider(), _SCOPE)
        self._pending: deque[Event | tuple[Event, Context]] = deque(maxlen=max_pending)
        self._calls: dict[tuple[str | None, str], _Call | tuple[AttemptStarted, Context | None]] = {}
        self._turns: dict[str, _Turn] = {}
        self._recent_turns: OrderedDict[str, SpanContext] = OrderedDict()
        """Turns ended lately: the executor's answers to refused calls come after ``TurnFinished``."""
        self._handlers: dict[type[Event], Callable[[Any, Context | None], None]] = {
            AttemptStarted: self._attempt_started, CallSucceeded: self._succeeded,
            AttemptFailed: self._attempt_failed, ToolTimedOut: self._timed_out, CallFailed: self._failed,
            CallRejected: self._rejected, HandlerFailed: self._handler_failed,
            AlternativeUsed: self._alternative_used, CallSkipped: self._blocked,
            CallEscalated: self._blocked, DefaultUsed: self._default_used,
            ToolResultSent: self._result_sent, TurnStarted: self._turn_started,
            TurnFinished: self._turn_finished, TurnDeadlineExceeded: self._turn_note,
            TurnCanceled: self._turn_note, TurnInterrupted: self._turn_note,
        }  # fmt: skip
        for cls in _breaker_classes():
            self._handlers[cls] = self._breaker
        self.handle_failures = 0
        """Events the worker failed on (logged)."""
        self.abandoned = 0
        """Open spans given up because their end never came (see ``_MAX_OPEN``)."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._worker = threading.Thread(target=self._work, name="tripwire-otel", daemon=True)
        self._worker.start()
        self._unsubscribe: Callable[[], None] | None = engine.subscribe(self._subscriber(), direct=True)

    # --- the hot path: append, and note the caller's context where a trace may start ---------

    def _subscriber(self) -> Callable[[Event], None]:
        append = self._pending.append
        started_type, succeeded_type = AttemptStarted, CallSucceeded

        def on_event(event: Event) -> None:
            kind = type(event)
            if kind is started_type:
                if event.turn_id is not None or event.attempt > 1:  # type: ignore[attr-defined]
                    append(event)  # a turn's (cut off by its deadline, it still has a span) or a retry
                elif event.probe:  # type: ignore[attr-defined]
                    append((event, get_current()))
                # else the first attempt of a call outside a turn: its span is dated from its end
            elif kind is succeeded_type:
                context = get_current() if event.turn_id is None else None  # type: ignore[attr-defined]
                # In a turn its turn's span is its parent; with no context (empty), it is a root.
                append((event, context) if context else event)
            else:  # a turn's start, a call's first event outside a turn, or rare events
                append((event, get_current()))

        return on_event

    # --- the worker ------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stopping:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self._drain()
            with self._lock:
                self._spans.drained()
                if self._durations.due():
                    self._durations.flush(_EXPORT_TIMEOUT_MS)

    def _drain(self) -> None:
        with self._lock:
            pending, handlers = self._pending, self._handlers
            popleft = pending.popleft
            started_type, succeeded_type = AttemptStarted, CallSucceeded
            started, succeeded = self._attempt_started, self._succeeded
            while pending:
                item = popleft()
                kind = type(item)
                try:
                    if kind is succeeded_type:  # nearly every call: a turn's, or one under no span
                        succeeded(item, None)  # type: ignore[arg-type]
                    elif kind is started_type:
                        started(item, None)  # type: ignore[arg-type]
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
        """Turn every event emitted so far into spans and push them (and the metric) to the exporters."""
        self._drain()
        millis = int(timeout_s * 1000)
        with self._lock:
            ok = self._spans.force_flush(millis)
            return self._durations.flush(millis) and ok

    def close(self) -> None:
        """Stop listening to the engine, export what is pending and stop the worker."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._stopping = True
        self._wake.set()
        self._worker.join()
        self.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- spans of calls ----------------------------------------------------------------------

    def _parent(self, turn_id: str | None, context: Context | None) -> SpanContext | None:
        if turn_id is not None:
            turn = self._turns.get(turn_id)
            if turn is not None:
                return turn.span.context
            recent = self._recent_turns.get(turn_id)
            if recent is not None:
                return recent
        if context is None:
            return None
        return trace_api.get_current_span(context).get_span_context()

    def _open(
        self, tool: str, call_id: str, turn_id: str | None, at: float, context: Context | None
    ) -> _Call:
        """The call's open span, started at ``at`` if this is its first event."""
        key = (turn_id, call_id)
        calls = self._calls
        call = calls.get(key)
        if type(call) is _Call:
            return call
        if call is None:
            if len(calls) >= _MAX_OPEN:
                del calls[next(iter(calls))]
                self.abandoned += 1
            made = calls[key] = _Call(tool, call_id, turn_id, _ns(at), context)
        else:  # its attempt has started: a second event
            started, first_context = call  # type: ignore[misc]
            made = calls[key] = _Call(started.tool_id, call_id, turn_id, _ns(started.at), first_context)
        return made

    def _end(
        self,
        call: _Call,
        at: float,
        error_type: str | None = None,
        description: str | None = None,
        extra: dict[str, Any] | None = None,
        latency_ms: float | None = None,
    ) -> None:
        """End ``call``'s span at ``at``; ``latency_ms``, the call's whole duration when the end
        event gives it, dates its start (its first event may have come later: a failed attempt)."""
        self._calls.pop((call.turn_id, call.call_id), None)
        start_ns = call.start_ns if latency_ms is None else _ns(at - latency_ms / 1000.0)
        self._emit(
            call.tool, call.call_id, call.turn_id, start_ns, call.context, call.events, at,
            error_type, description, extra,
        )  # fmt: skip

    def _emit(
        self,
        tool: str,
        call_id: str,
        turn_id: str | None,
        start_ns: int,
        context: Context | None,
        events: list[SpanEventData],
        at: float,
        error_type: str | None,
        description: str | None,
        extra: dict[str, Any] | None,
    ) -> None:
        """The call's span, from ``start_ns`` to ``at``."""
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: EXECUTE_TOOL, GEN_AI_TOOL_NAME: tool, GEN_AI_TOOL_CALL_ID: call_id,
            GEN_AI_TOOL_TYPE: "function",
        }  # fmt: skip
        if turn_id is not None:
            attributes["tripwire.turn.id"] = turn_id
            if self.capture_content:
                turn = self._turns.get(turn_id)
                if turn is not None and turn.arguments is not None and call_id in turn.arguments:
                    attributes[GEN_AI_TOOL_CALL_ARGUMENTS] = _json(turn.arguments[call_id])
        if extra:
            attributes.update(extra)
        status = _UNSET
        if error_type is not None:
            attributes[ERROR_TYPE] = error_type
            status = Status(StatusCode.ERROR, description)
        name = f"{EXECUTE_TOOL} {tool}"
        self._spans.emit(name, self._parent(turn_id, context), start_ns, _ns(at), attributes, events, status)

    def _attempt_started(self, e: AttemptStarted, context: Context | None) -> None:
        key = (e.turn_id, e.call_id)
        if e.attempt == 1 and not e.probe and key not in self._calls:  # kept as is until a second event
            if len(self._calls) >= _MAX_OPEN:
                del self._calls[next(iter(self._calls))]
                self.abandoned += 1
            self._calls[key] = (e, context)
            return
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        if e.attempt > 1:
            call.events.append(
                ("tripwire.retry", _ns(e.at), {"tripwire.attempt": e.attempt, "tripwire.probe": e.probe})
            )
        elif e.probe:
            call.events.append(("tripwire.breaker.probe", _ns(e.at), {"tripwire.attempt": e.attempt}))

    def _succeeded(self, e: CallSucceeded, context: Context | None) -> None:
        tool, call_id, turn_id = e.tool_id, e.call_id, e.turn_id
        calls = self._calls
        call = calls.pop((turn_id, call_id), None) if calls else None
        end_ns = int(e.at * 1e9)
        start_ns = end_ns - int(e.latency_ms * 1e6)
        if call is None and turn_id is None and not e.partial and not self.capture_content:
            # Nearly every call, made as cheaply as it can be: it simply succeeded, outside a turn.
            parent = get_current_span(context).get_span_context() if context else None  # {}: no span
            attributes: Attributes = {
                GEN_AI_OPERATION_NAME: EXECUTE_TOOL, GEN_AI_TOOL_NAME: tool, GEN_AI_TOOL_CALL_ID: call_id,
                GEN_AI_TOOL_TYPE: "function", "tripwire.attempts": e.attempts,
            }  # fmt: skip
            self._spans.emit(f"{EXECUTE_TOOL} {tool}", parent, start_ns, end_ns, attributes, (), _UNSET)
        else:
            extra: dict[str, Any] = {"tripwire.attempts": e.attempts}
            if e.partial:
                extra["tripwire.partial"] = True
            if self.capture_content and e.value is not None:
                extra[GEN_AI_TOOL_CALL_RESULT] = _json(e.value)
            if isinstance(call, _Call):
                self._end(call, e.at, extra=extra, latency_ms=e.latency_ms)
            else:  # nothing but its start (a turn's call, a probe) or nothing at all came before
                first_context = call[1] if call is not None else context
                self._emit(tool, call_id, turn_id, start_ns, first_context, [], e.at, None, None, extra)
        self._durations.record(e.latency_ms / 1000.0, (tool, None))

    def _attempt_failed(self, e: AttemptFailed, context: Context | None) -> None:
        attributes: dict[str, Any] = {
            "tripwire.attempt": e.attempt, ERROR_TYPE: str(e.kind), "exception.type": e.error_type,
            "exception.message": e.error, "tripwire.error.class": str(e.classification),
            "tripwire.error.reason": e.reason, "tripwire.decision": str(e.decision),
            "tripwire.decision.reason": e.decision_reason,
            "tripwire.breaker.state": str(e.circuit_breaker_state),
        }  # fmt: skip
        if e.delay_ms is not None:
            attributes["tripwire.retry.delay_ms"] = e.delay_ms
        if e.status_code is not None:
            attributes["http.response.status_code"] = e.status_code
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        call.events.append(("tripwire.attempt.failed", _ns(e.at), attributes))

    def _timed_out(self, e: ToolTimedOut, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: dict[str, Any] = {"tripwire.attempt": e.attempt, "tripwire.timeout_ms": e.timeout_ms}
        idle_ms = getattr(e, "idle_ms", None)  # an idle window (progress-extended timeouts) ran out
        if idle_ms is not None:
            attributes["tripwire.idle_ms"] = idle_ms
        call.events.append(("tripwire.attempt.timed_out", _ns(e.at), attributes))

    def _failed(self, e: CallFailed, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes = {"tripwire.decision": str(e.decision), "tripwire.decision.reason": e.reason}
        call.events.append(("tripwire.decision", _ns(e.at), attributes))
        extra = {"tripwire.attempts": e.attempts, "tripwire.error.class": str(e.classification)}
        self._end(call, e.at, str(e.kind), e.error, extra, e.latency_ms)
        if e.attempts:  # the tool ran: its execution had a duration
            self._durations.record(e.latency_ms / 1000.0, (e.tool_id, str(e.kind)))

    def _rejected(self, e: CallRejected, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes = {"tripwire.breaker.state": str(e.state), "tripwire.reason": e.reason}
        call.events.append(("tripwire.call.rejected", _ns(e.at), attributes))
        self._end(call, e.at, "circuit_open", e.reason, {"tripwire.attempts": 0})

    def _breaker(self, e: BreakerTransitioned, context: Context | None) -> None:
        if e.call_id is None:  # the half-open timer, a state query or an operator: no call's trace
            return
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: Attributes = {
            "tripwire.breaker.from": str(e.from_state), "tripwire.breaker.to": str(e.to_state),
            "tripwire.reason": e.reason, "tripwire.breaker.actor": e.actor,
            "tripwire.breaker.consecutive_failures": e.consecutive_failures,
        }  # fmt: skip
        call.events.append((f"tripwire.breaker.{e.to_state}", _ns(e.at), attributes))

    def _handler_failed(self, e: HandlerFailed, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes = {"exception.message": e.error, "tripwire.decision": str(e.fallback)}
        call.events.append(("tripwire.handler.failed", _ns(e.at), attributes))

    def _alternative_used(self, e: AlternativeUsed, context: Context | None) -> None:
        # The original call's span has ended (CallFailed/CallRejected): the alternative gets its own.
        call = self._open(e.alternative, e.call_id, e.turn_id, e.at, context)
        attributes = {"tripwire.alternative.for": e.tool_id, "tripwire.reason": e.reason}
        call.events.append(("tripwire.alternative.used", _ns(e.at), attributes))

    def _blocked(self, e: CallSkipped | CallEscalated, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: Attributes = {"tripwire.blocked_by": list(e.blocked_by), "tripwire.reason": e.reason}
        call.events.append(("tripwire.dependency.blocked", _ns(e.at), attributes))
        if isinstance(e, CallSkipped):
            self._end(call, e.at, extra={"tripwire.call.status": "skipped", "tripwire.attempts": 0})
        else:
            self._end(
                call,
                e.at,
                "escalated",
                e.reason,
                {"tripwire.call.status": "escalated", "tripwire.attempts": 0},
            )

    def _default_used(self, e: DefaultUsed, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: Attributes = {"tripwire.blocked_by": list(e.blocked_by), "tripwire.reason": e.reason}
        call.events.append(("tripwire.dependency.default_used", _ns(e.at), attributes))

    def _result_sent(self, e: ToolResultSent, context: Context | None) -> None:
        """The executor's answer to a call; one it refused to run never reached the engine."""
        if e.status != "not_run":
            return  # an executed call's span ended with its CallSucceeded/CallFailed
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        extra: dict[str, Any] = {"tripwire.call.status": "not_run", "tripwire.attempts": 0}
        if self.capture_content:
            extra[GEN_AI_TOOL_CALL_RESULT] = e.content
        self._end(call, e.at, str(e.kind) if e.kind is not None else e.error_type or "refused", None, extra)

    # --- spans of turns ------------------------------------------------------------------------

    def _turn_started(self, e: TurnStarted, context: Context | None) -> None:
        span = self._spans.start(TURN_SPAN, self._parent(None, context), _ns(e.at))
        arguments = None
        if self.capture_content and e.spec is not None:
            arguments = {c["id"]: c.get("args") for c in e.spec.get("calls", ())}
        turns = self._turns
        if len(turns) >= _MAX_OPEN:
            del turns[next(iter(turns))]
            self.abandoned += 1
        turns[e.turn_id] = _Turn(span, arguments)

    def _turn_note(
        self, e: TurnDeadlineExceeded | TurnCanceled | TurnInterrupted, context: Context | None
    ) -> None:
        turn = self._turns.get(e.turn_id)
        if turn is not None:
            attributes = {"tripwire.unfinished": list(e.unfinished)}
            turn.events.append((_TURN_NOTES[type(e)], _ns(e.at), attributes))

    def _turn_finished(self, e: TurnFinished, context: Context | None) -> None:
        # Calls still open were cut off by the deadline, a stop or the caller's cancellation.
        for call_id, final in e.statuses.items():
            if (e.turn_id, call_id) in self._calls:
                call = self._open("", call_id, e.turn_id, e.at, None)
                self._end(call, e.at, _CUT_OFF.get(final, final), f"{call_id} {final.replace('_', ' ')}")
        turn = self._turns.pop(e.turn_id, None)
        if turn is None:
            return
        attributes: dict[str, Any] = {
            "tripwire.turn.id": e.turn_id, "tripwire.turn.outcome": e.outcome,
            "tripwire.turn.calls": len(e.statuses), "tripwire.turn.executed": e.executed,
        }  # fmt: skip
        status = _UNSET
        turn_error = _TURN_ERRORS.get(e.outcome)
        if turn_error is not None:
            attributes[ERROR_TYPE] = turn_error
            status = Status(StatusCode.ERROR, e.summary)
        self._spans.end(turn.span, _ns(e.at), attributes, turn.events, status)
        recent = self._recent_turns
        recent[e.turn_id] = turn.span.context
        if len(recent) > _RECENT_TURNS:
            recent.popitem(last=False)


def _breaker_classes() -> list[type[Event]]:
    return [cls for cls in EVENT_TYPES.values() if issubclass(cls, BreakerTransitioned)]


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)


__all__ = ["DURATION_BUCKETS", "GEN_AI_EXECUTE_TOOL_DURATION", "OtelExporter"]
