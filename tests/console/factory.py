"""Engine events for console tests, with only what a test cares about to spell out."""

from __future__ import annotations

from typing import Any

from engine.events import (
    AlternativeUsed,
    AttemptFailed,
    AttemptStarted,
    BreakerClosed,
    BreakerHalfOpened,
    BreakerOpened,
    BreakerTripped,
    BulkheadQueued,
    BulkheadRejected,
    CallEscalated,
    CallFailed,
    CallRejected,
    CallSkipped,
    CallSucceeded,
    DefaultUsed,
    ManifestLoaded,
    ManifestRejected,
    ManifestRemoved,
    RecordingStarted,
    RetryBudgetSpent,
    ToolTimedOut,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnStarted,
)
from engine.kinds import ErrorClass, ErrorKind
from engine.strategies.breaker.machine import BreakerState

WALL = 1_762_338_645.0


def started(tool: str, call: str, t: float, *, attempt: int = 1, timeout: float = 30.0,
            turn: str | None = None, probe: bool = False) -> AttemptStarted:  # fmt: skip
    return AttemptStarted(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=attempt,
        timeout_ms=timeout * 1000, deadline=t + timeout, probe=probe,
    )  # fmt: skip


def failed_attempt(
    tool: str, call: str, t: float, *, attempt: int = 1, turn: str | None = None, transient: bool = True,
    decision: str = "retry", delay_ms: float | None = 100.0, streak: int | None = None,
    kind: ErrorKind = ErrorKind.CONNECTION_RESET, latency_ms: float = 5.0,
) -> AttemptFailed:  # fmt: skip
    return AttemptFailed(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=attempt, error="reset by peer",
        error_type="ConnectionResetError", kind=kind,
        classification=ErrorClass.TRANSIENT if transient else ErrorClass.PERMANENT, rule="exception_class",
        reason="connection reset: transient", status_code=None, circuit_breaker_state=BreakerState.CLOSED,
        retry_count=attempt - 1, decision=decision, decision_reason="", delay_ms=delay_ms,
        latency_ms=latency_ms, consecutive_failures=streak,
    )  # fmt: skip


def timed_out(tool: str, call: str, t: float, *, attempt: int = 1, turn: str | None = None) -> ToolTimedOut:
    return ToolTimedOut(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=attempt, timeout_ms=30_000
    )


def succeeded(tool: str, call: str, t: float, *, attempts: int = 1, latency_ms: float = 100.0,
              turn: str | None = None, partial: bool = False) -> CallSucceeded:  # fmt: skip
    return CallSucceeded(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempts=attempts, latency_ms=latency_ms,
        attempt_ms=latency_ms, partial=partial,
    )  # fmt: skip


def call_failed(tool: str, call: str, t: float, *, attempts: int = 1, turn: str | None = None) -> CallFailed:
    return CallFailed(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempts=attempts,
        kind=ErrorKind.CONNECTION_RESET, classification=ErrorClass.TRANSIENT, error="reset by peer",
        reason="out of retries", latency_ms=250.0,
    )  # fmt: skip


def rejected(tool: str, call: str, t: float, *, turn: str | None = None, reason: str | None = None,
             kind: ErrorKind = ErrorKind.CIRCUIT_OPEN) -> CallRejected:  # fmt: skip
    return CallRejected(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, state=BreakerState.OPEN,
        reason=reason or f"circuit open for {tool}", kind=kind,
    )  # fmt: skip


def queued(tool: str, call: str, t: float, *, attempt: int = 1, turn: str | None = None,
           in_flight: int = 2, waiting: int = 1) -> BulkheadQueued:  # fmt: skip
    return BulkheadQueued(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=attempt, in_flight=in_flight,
        queued=waiting,
    )  # fmt: skip


def bulkhead_full(tool: str, call: str, t: float, *, attempt: int = 1, turn: str | None = None,
                  waited_ms: float = 0.0) -> BulkheadRejected:  # fmt: skip
    """Refused at once (``waited_ms`` 0), or when its wait of ``waited_ms`` ran out."""
    reason = (
        f"bulkhead queue wait ran out after {waited_ms / 1000:g} s (2 in flight, 0 queued)"
        if waited_ms
        else "bulkhead full: 2 in flight, 1 queued"
    )
    return BulkheadRejected(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=attempt, reason=reason,
        in_flight=2, queued=0 if waited_ms else 1, waited_ms=waited_ms,
    )  # fmt: skip


def budget_spent(tool: str, call: str, t: float, *, attempt: int = 1, turn: str | None = None,
                 shared: bool = False, retries: int = 3, calls: int = 10) -> RetryBudgetSpent:  # fmt: skip
    return RetryBudgetSpent(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, attempt=attempt, retries=retries,
        calls=calls, window_s=10.0, shared=shared,
        reason=f"retry budget spent: {retries} retries over {calls} calls in 10 s",
    )  # fmt: skip


def recording_started(t: float, tools: tuple[str, ...]) -> RecordingStarted:
    return RecordingStarted(
        at=WALL + t, t=t, host="host", pid=1,
        breakers={tool: {"state": "CLOSED", "consecutive_failures": 0} for tool in tools},
    )  # fmt: skip


def opened(tool: str, t: float, *, timeout: float = 30.0, streak: int = 5) -> BreakerOpened:
    return BreakerOpened(
        at=WALL + t, t=t, tool_id=tool, from_state=BreakerState.CLOSED, to_state=BreakerState.OPEN,
        reason=f"{streak} consecutive transient failures", actor="engine", consecutive_failures=streak,
        half_open_at=t + timeout,
    )  # fmt: skip


def half_opened(tool: str, t: float) -> BreakerHalfOpened:
    return BreakerHalfOpened(
        at=WALL + t, t=t, tool_id=tool, from_state=BreakerState.OPEN, to_state=BreakerState.HALF_OPEN,
        reason="open timer ran out", actor="engine", consecutive_failures=5,
    )  # fmt: skip


def closed(tool: str, t: float) -> BreakerClosed:
    return BreakerClosed(
        at=WALL + t, t=t, tool_id=tool, from_state=BreakerState.HALF_OPEN, to_state=BreakerState.CLOSED,
        reason="probe succeeded", actor="engine", consecutive_failures=0,
    )  # fmt: skip


def tripped(
    tool: str, t: float, *, actor: str = "operator:alice", reason: str = "maintenance"
) -> BreakerTripped:
    return BreakerTripped(
        at=WALL + t, t=t, tool_id=tool, from_state=BreakerState.CLOSED, to_state=BreakerState.FORCED_OPEN,
        reason=reason, actor=actor, consecutive_failures=0,
    )  # fmt: skip


def turn_started(
    turn: str, t: float, calls: list[dict[str, Any]], *, deadline_ms: float | None = 60_000
) -> TurnStarted:
    return TurnStarted(
        at=WALL + t, t=t, turn_id=turn, calls=tuple(c["id"] for c in calls), deadline_ms=deadline_ms,
        spec={"id": turn, "calls": calls},
    )  # fmt: skip


def turn_finished(turn: str, t: float, statuses: dict[str, str], outcome: str = "ok") -> TurnFinished:
    return TurnFinished(
        at=WALL + t, t=t, turn_id=turn, summary=f"{turn} done", statuses=statuses, executed=len(statuses),
        duration_ms=t * 1000, outcome=outcome,
    )  # fmt: skip


def skipped(tool: str, call: str, t: float, turn: str, blocked_by: tuple[str, ...]) -> CallSkipped:
    return CallSkipped(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, blocked_by=blocked_by,
        reason=f"optional; dependency did not succeed ({', '.join(blocked_by)} failed)",
    )  # fmt: skip


def escalated(tool: str, call: str, t: float, turn: str, blocked_by: tuple[str, ...]) -> CallEscalated:
    return CallEscalated(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, blocked_by=blocked_by,
        reason=f"required but missing input ({', '.join(blocked_by)} failed)",
    )  # fmt: skip


def defaulted(tool: str, call: str, t: float, turn: str, blocked_by: tuple[str, ...]) -> DefaultUsed:
    return DefaultUsed(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, blocked_by=blocked_by,
        reason=f"used the declared default for {', '.join(blocked_by)}",
    )  # fmt: skip


def alternative(tool: str, call: str, t: float, turn: str, to: str) -> AlternativeUsed:
    return AlternativeUsed(
        at=WALL + t, t=t, tool_id=tool, call_id=call, turn_id=turn, alternative=to, reason="circuit open"
    )


def deadline_exceeded(turn: str, t: float, unfinished: tuple[str, ...]) -> TurnDeadlineExceeded:
    return TurnDeadlineExceeded(at=WALL + t, t=t, turn_id=turn, deadline_ms=5000, unfinished=unfinished)


def manifest_loaded(
    tool: str, t: float, *, version: int, digest: str, previous: str | None = None, threshold: int = 5,
    path: str | None = None, **sections: Any,
) -> ManifestLoaded:  # fmt: skip
    """``sections``: strategies' sections (``bulkhead={...}``), as the manifest's top-level keys."""
    return ManifestLoaded(
        at=WALL + t, t=t, tool_id=tool, path=path or f"manifests/{tool}.yaml", version=version, digest=digest,
        previous_digest=previous, manifest={"id": tool, "timeout_ms": 30000.0,
                                            "circuit_breaker": {"failure_threshold": threshold}, **sections},
    )  # fmt: skip


def manifest_rejected(path: str, t: float, *errors: str, kept: str | None = None) -> ManifestRejected:
    return ManifestRejected(at=WALL + t, t=t, path=path, errors=errors, kept_digest=kept)


def manifest_removed(tool: str, t: float, *, version: int) -> ManifestRemoved:
    return ManifestRemoved(at=WALL + t, t=t, tool_id=tool, path=f"manifests/{tool}.yaml", version=version)
