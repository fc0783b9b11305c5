"""Internal: the events of one call of one tool (attempts, outcomes, alternatives, answers to
the model). Import them from :mod:`engine.events`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.event import ToolEvent
from engine.kinds import ErrorClass, ErrorKind
from engine.metrics import UNKNOWN_TOOL_ID
from engine.strategies.breaker.machine import BreakerState


@dataclass(slots=True, kw_only=True)
class AttemptStarted(ToolEvent):
    """An attempt began, with the deadline at which it will be cut off."""

    attempt: int
    timeout_ms: float
    deadline: float
    """Engine time at which this attempt is cut off: its timeout or the turn's deadline."""
    probe: bool = False
    fault_type: str | None = None
    """Set when a fault plan injected this attempt's behaviour."""

    def describe(self) -> str:
        probe = " (half-open probe)" if self.probe else ""
        return f"{self.tool_id} attempt {self.attempt} started{probe}"


@dataclass(slots=True, kw_only=True)
class ToolTimedOut(ToolEvent, event_type="ToolTimeout"):
    """An attempt hit the tool's timeout and was terminated."""

    attempt: int
    timeout_ms: float
    idle_ms: float | None = None
    """The idle window that ran out (no progress for that long); None: the hard timeout."""

    def describe(self) -> str:
        if self.idle_ms is not None:
            idle_s = self.idle_ms / 1000
            return f"Tool idle for {idle_s:g}s without progress ({self.tool_id}, attempt {self.attempt})"
        return f"Tool timeout after {self.timeout_ms / 1000:g}s ({self.tool_id}, attempt {self.attempt})"


@dataclass(slots=True, kw_only=True)
class AttemptFailed(ToolEvent, event_type="ToolError"):
    """One failed attempt and what was decided about it (spec-map trace.decisions)."""

    attempt: int
    error: str
    error_type: str
    kind: ErrorKind
    classification: ErrorClass
    rule: str
    reason: str
    status_code: int | None
    circuit_breaker_state: BreakerState
    retry_count: int
    """Retries made before this attempt (0 for the first)."""
    decision: str
    decision_reason: str
    delay_ms: float | None = None
    latency_ms: float = 0.0
    fault_type: str | None = None
    retryable: bool = True
    retry_after_s: float | None = None
    has_partial: bool = False
    """The error carried what the tool returned before failing (a partial result)."""
    consecutive_failures: int | None = None
    """The breaker's streak of transient failures once this attempt was counted."""

    def describe(self) -> str:
        return (
            f"{self.tool_id} attempt {self.attempt} failed: {self.error} "
            f"[{self.kind}, {self.classification}] → {self.decision}: {self.decision_reason}"
        )


@dataclass(slots=True, kw_only=True)
class CallSucceeded(ToolEvent):
    """The call returned a value ("Tool succeeded on retry 2"), or kept a partial one."""

    attempts: int
    latency_ms: float
    """From the call's start, retries included."""
    partial: bool = False
    attempt_ms: float = 0.0
    """The successful attempt's own duration."""
    value: Any = None
    """The result, JSON-safe and redacted (see :mod:`engine.redaction`), when the engine records
    (``Engine(record=True)``)."""

    def describe(self) -> str:
        if self.partial:
            return f"{self.tool_id} kept a partial result after {self.attempts} attempt(s)"
        if self.attempts > 1:
            return f"Tool succeeded on retry {self.attempts} ({self.tool_id})"
        return f"{self.tool_id} succeeded in {self.latency_ms:.1f} ms"


@dataclass(slots=True, kw_only=True)
class CallFailed(ToolEvent):
    """The call ended in a ToolError: permanent, out of retries, short-circuited, or refused unrun.

    Refused: ``attempts`` 0 — an unknown tool, or arguments the LLM executor or an adapter could not
    pass to the tool (:meth:`engine.Engine.refuse`)."""

    attempts: int
    kind: ErrorKind
    classification: ErrorClass
    error: str
    reason: str
    latency_ms: float
    decision: str = "escalate"
    known_tool: bool = True
    """False: refused under a name that is no tool of the engine (a model's invention)."""

    @property
    def counted_tool(self) -> str:
        """The tool metrics count this call under: its own, or ``(unknown)`` for a call refused as
        an unknown tool or under a name no tool has — a model's inventions never become keys."""
        if self.attempts == 0 and (not self.known_tool or self.kind is ErrorKind.UNKNOWN_TOOL):
            return UNKNOWN_TOOL_ID
        return self.tool_id

    def describe(self) -> str:
        if not self.attempts:
            return f"{self.tool_id} refused, not run: {self.error} ({self.reason})"
        attempts = f"{self.attempts} attempt(s)"
        return f"{self.tool_id} failed after {attempts}: {self.error} → {self.decision} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class CallRejected(ToolEvent):
    """Refused before any attempt — by the breaker, or a strategy such as a full bulkhead (``kind``
    says which): no attempt was made."""

    state: BreakerState
    """The breaker's state then."""
    reason: str
    kind: ErrorKind = ErrorKind.CIRCUIT_OPEN

    def describe(self) -> str:
        return f"{self.tool_id} rejected: {self.reason}"


@dataclass(slots=True, kw_only=True)
class StreamEnded(ToolEvent):
    """A streaming call ended: ``completed``, ``abandoned`` by its consumer, or ``truncated``.

    A truncation is a failure after the stream opened, counted as a failed attempt of its
    ``classification`` (``timed_out``: the error was a timeout)."""

    outcome: str
    chunks: int
    error: str | None = None
    kind: ErrorKind | None = None
    classification: ErrorClass | None = None
    timed_out: bool = False

    def describe(self) -> str:
        cause = f": {self.error}" if self.error else ""
        return f"{self.tool_id} stream {self.outcome} after {self.chunks} chunk(s){cause}"


@dataclass(slots=True, kw_only=True)
class AlternativeUsed(ToolEvent):
    """The handler routed the call to an alternative tool ("Used alternative tool")."""

    alternative: str
    reason: str

    def describe(self) -> str:
        return f"Used alternative tool {self.alternative} for {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class HandlerFailed(ToolEvent):
    """A custom error handler raised; the default decision was applied instead."""

    error: str
    fallback: str

    def describe(self) -> str:
        return f"error handler failed for {self.tool_id}: {self.error}; applied default: {self.fallback}"


@dataclass(slots=True, kw_only=True)
class ToolResultSent(ToolEvent):
    """The LLM executor answered a tool call: the exact text the model received."""

    content: str
    """An error's text exactly as the model got it (redacted, capped); a result's text made from the
    result redacted — the model itself gets the tool's own result."""
    is_error: bool
    status: str
    """A call status, or ``not_run`` when the executor refused the call."""
    error_type: str | None = None
    kind: ErrorKind | None = None

    def describe(self) -> str:
        verdict = "an error" if self.is_error else "a result"
        return f"the model received {verdict} for {self.call_id} ({self.tool_id}, {len(self.content)} chars)"
