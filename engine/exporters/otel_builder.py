"""Engine events made into OpenTelemetry spans and duration measurements: what each event means
for the span of its call and of its turn, following the GenAI semantic conventions.

Needs the ``[otel]`` extra. :class:`SpanBuilder` is fed events in the order the engine emitted
them, on :class:`~engine.exporters.otel.OtelExporter`'s worker thread (with the caller's
OpenTelemetry context for the events that start a trace); it makes each span once its end is known
through a :class:`~engine.exporters.otel_spans.SpanMaker` and records each finished call's
duration in :class:`~engine.exporters.otel_metrics.Durations`. A call's span runs from its start to
its end event, its start taken from that event's ``latency_ms`` (the engine's clock).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
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
    BulkheadQueued,
    BulkheadRejected,
    CallEscalated,
    CallFailed,
    CallRejected,
    CallSkipped,
    CallSucceeded,
    CooldownEnded,
    CooldownStarted,
    DefaultUsed,
    Event,
    HandlerFailed,
    RateLimitRejected,
    RateLimitWaited,
    RetryBudgetSpent,
    ToolTimedOut,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnInterrupted,
    TurnStarted,
)
from engine.exporters.otel_metrics import EXECUTE_TOOL, Durations
from engine.exporters.otel_spans import Attributes, SpanEventData, SpanMaker, StartedSpan

TURN_SPAN: Final = "tripwire.turn"

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


Handler = Callable[[Any, Context | None], None]
"""What is done with one kind of event: given the event and the caller's context, if noted."""


class SpanBuilder:
    """Events in, spans and durations out (see the module docstring). ``capture_content``: put
    calls' arguments and results (as the engine redacted them) on the spans. Not thread-safe:
    one thread feeds it."""

    def __init__(self, spans: SpanMaker, durations: Durations, *, capture_content: bool = False) -> None:
        self._spans = spans
        self._durations = durations
        self.capture_content = capture_content
        self._calls: dict[tuple[str | None, str], _Call | tuple[AttemptStarted, Context | None]] = {}
        self._turns: dict[str, _Turn] = {}
        self._recent_turns: OrderedDict[str, SpanContext] = OrderedDict()
        """Turns ended lately: the LLM executor's refusals of calls it did not run follow ``TurnFinished``."""
        self.handlers: dict[type[Event], Handler] = {
            AttemptStarted: self._attempt_started, CallSucceeded: self._succeeded,
            AttemptFailed: self._attempt_failed, ToolTimedOut: self._timed_out, CallFailed: self._failed,
            CallRejected: self._rejected, HandlerFailed: self._handler_failed,
            AlternativeUsed: self._alternative_used, CallSkipped: self._blocked,
            CallEscalated: self._blocked, DefaultUsed: self._default_used, TurnStarted: self._turn_started,
            TurnFinished: self._turn_finished, TurnDeadlineExceeded: self._turn_note,
            TurnCanceled: self._turn_note, TurnInterrupted: self._turn_note,
            BulkheadQueued: self._bulkhead_queued, BulkheadRejected: self._bulkhead_rejected,
            RetryBudgetSpent: self._retry_budget_spent, RateLimitWaited: self._rate_limit_waited,
            RateLimitRejected: self._rate_limit_rejected, CooldownStarted: self._cooldown_started,
            CooldownEnded: self._cooldown_ended,
        }  # fmt: skip
        """Each kind of event the spans need, and what is done with it."""
        for cls in _breaker_classes():
            self.handlers[cls] = self._breaker
        self.abandoned = 0
        """Open spans given up because their end never came (see ``_MAX_OPEN``)."""

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
        event gives it, dates its start (its first event may have come later: a failed attempt),
        never after its first event (an alternative's span starts with its original's failure)."""
        self._calls.pop((call.turn_id, call.call_id), None)
        start_ns = call.start_ns if latency_ms is None else min(call.start_ns, _ns(at - latency_ms / 1000.0))
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
        extra: dict[str, Any] = {
            "tripwire.attempts": e.attempts, "tripwire.error.class": str(e.classification)
        }  # fmt: skip
        if not e.attempts:  # refused before any attempt: an unknown tool, arguments that cannot be passed
            extra["tripwire.call.status"] = "not_run"
        self._end(call, e.at, str(e.kind), e.error, extra, e.latency_ms)
        if e.attempts:  # the tool ran: its execution had a duration
            self._durations.record(e.latency_ms / 1000.0, (e.tool_id, str(e.kind)))

    def _rejected(self, e: CallRejected, context: Context | None) -> None:
        # Refused before any attempt: by the breaker (circuit_open) or a strategy (bulkhead_full).
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        kind = str(e.kind)
        attributes = {ERROR_TYPE: kind, "tripwire.breaker.state": str(e.state), "tripwire.reason": e.reason}
        call.events.append(("tripwire.call.rejected", _ns(e.at), attributes))
        self._end(call, e.at, kind, e.reason, {"tripwire.attempts": 0, "tripwire.call.status": "not_run"})

    def _bulkhead_queued(self, e: BulkheadQueued, context: Context | None) -> None:
        # An attempt queued; a first attempt's is its call's first event: the span starts with the wait.
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: Attributes = {
            "tripwire.attempt": e.attempt, "tripwire.bulkhead.in_flight": e.in_flight,
            "tripwire.bulkhead.queued": e.queued,
        }  # fmt: skip
        call.events.append(("tripwire.bulkhead.queued", _ns(e.at), attributes))

    def _bulkhead_rejected(self, e: BulkheadRejected, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: Attributes = {
            "tripwire.attempt": e.attempt, "tripwire.reason": e.reason,
            "tripwire.bulkhead.in_flight": e.in_flight, "tripwire.bulkhead.queued": e.queued,
            "tripwire.bulkhead.waited_ms": e.waited_ms,
        }  # fmt: skip
        call.events.append(("tripwire.bulkhead.rejected", _ns(e.at), attributes))

    def _retry_budget_spent(self, e: RetryBudgetSpent, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: Attributes = {
            "tripwire.attempt": e.attempt, "tripwire.reason": e.reason,
            "tripwire.retry_budget.retries": e.retries, "tripwire.retry_budget.calls": e.calls,
            "tripwire.retry_budget.window_s": e.window_s, "tripwire.retry_budget.shared": e.shared,
        }  # fmt: skip
        call.events.append(("tripwire.retry_budget.spent", _ns(e.at), attributes))

    def _rate_limit_waited(self, e: RateLimitWaited, context: Context | None) -> None:
        # Announced as the wait ended; a first attempt's is its call's first event: the span starts
        # with the wait.
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at - e.waited_ms / 1000.0, context)
        attributes: Attributes = {"tripwire.attempt": e.attempt, "tripwire.rate_limit.waited_ms": e.waited_ms}
        call.events.append(("tripwire.rate_limit.waited", _ns(e.at), attributes))

    def _rate_limit_rejected(self, e: RateLimitRejected, context: Context | None) -> None:
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at - e.waited_ms / 1000.0, context)
        attributes: Attributes = {
            "tripwire.attempt": e.attempt, "tripwire.reason": e.reason,
            "tripwire.rate_limit.wait_needed_ms": e.wait_needed_ms,
            "tripwire.rate_limit.cooldown_ms": e.cooldown_ms, "tripwire.rate_limit.waited_ms": e.waited_ms,
        }  # fmt: skip
        call.events.append(("tripwire.rate_limit.rejected", _ns(e.at), attributes))

    def _cooldown_started(self, e: CooldownStarted, context: Context | None) -> None:
        # On the span of the call whose rate-limit error (a 429) paused the tool for every caller.
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)
        attributes: dict[str, Any] = {
            "tripwire.attempt": e.attempt, "tripwire.cooldown.s": e.cooldown_s,
            "tripwire.cooldown.extended": e.extended,
        }  # fmt: skip
        if e.retry_after_s is not None:  # None: the manifest's cooldown_ms
            attributes["tripwire.cooldown.retry_after_s"] = e.retry_after_s
        call.events.append(("tripwire.cooldown.started", _ns(e.at), attributes))

    def _cooldown_ended(self, e: CooldownEnded, context: Context | None) -> None:
        if e.call_id is None:  # an operator's reset: no call's trace
            return
        call = self._open(e.tool_id, e.call_id, e.turn_id, e.at, context)  # the call that found it over
        attributes: dict[str, Any] = {"tripwire.cooldown.how": e.how}
        if e.started_by is not None:
            attributes["tripwire.cooldown.started_by"] = e.started_by
        call.events.append(("tripwire.cooldown.ended", _ns(e.at), attributes))

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


__all__ = ["TURN_SPAN", "Handler", "SpanBuilder"]
