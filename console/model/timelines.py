"""Calls on a time axis, attempt by attempt: what a tool's retry timeline draws.

Built from a tool's newest call events when the timeline is shown, never on every event.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.events import (
    AttemptFailed,
    AttemptStarted,
    BulkheadQueued,
    BulkheadRejected,
    CallFailed,
    CallRejected,
    CallSucceeded,
    Event,
    RateLimitRejected,
    RateLimitWaited,
    RetryBudgetSpent,
    StreamEnded,
    ToolEvent,
    ToolTimedOut,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnInterrupted,
)
from engine.kinds import ErrorKind

RECENT_CALLS = 12
"""Calls shown in a tool's retry timeline."""


@dataclass(slots=True)
class AttemptSpan:
    attempt: int
    start: float
    end: float | None = None
    outcome: str = "running"
    """running, ok, error, timeout or cut (by the turn's deadline or a stop); or, for an attempt
    the bulkhead held back, queued (waiting for a slot), refused (by the bulkhead or the rate
    limit) or dropped (cut off while queued): those three were never made."""
    kind: str | None = None
    delay_ms: float | None = None
    """The backoff planned after this attempt, when it was retried."""
    queued_at: float | None = None
    """When it began waiting in the bulkhead's queue or for the rate limit, if it did (it started,
    or was refused, at ``start``)."""
    held_by: str | None = None
    """``bulkhead`` or ``rate limit``: the strategy that held it back (made it wait, or refused it)."""

    @property
    def made(self) -> bool:
        """The attempt reached the tool (or is on its way): not one still queued, or refused."""
        return self.outcome not in ("queued", "refused", "dropped")


@dataclass(slots=True)
class CallTimeline:
    call_id: str
    turn_id: str | None
    start: float
    attempts: list[AttemptSpan] = field(default_factory=list)
    outcome: str = "running"
    """running, succeeded, partial, failed, rejected or cut."""
    end: float | None = None
    refusal: str | None = None
    """Why a strategy refused it, or its retry: ``bulkhead full: 2 in flight, 1 queued``,
    ``retry refused: retry budget spent: …`` (a breaker's rejection says nothing here: ⊘ does)."""

    @property
    def attempts_made(self) -> list[AttemptSpan]:
        return [a for a in self.attempts if a.made]


def build_timelines(events: Iterable[Event], limit: int = RECENT_CALLS) -> list[CallTimeline]:
    """Calls on a time axis from their events: attempts, the backoff planned after each, the end."""
    calls: OrderedDict[tuple[str | None, str], CallTimeline] = OrderedDict()

    def call(turn_id: str | None, call_id: str, t: float) -> CallTimeline:
        timeline = calls.get((turn_id, call_id))
        if timeline is None:
            timeline = calls[(turn_id, call_id)] = CallTimeline(call_id, turn_id, t)
        return timeline

    def span(timeline: CallTimeline, attempt: int, t: float) -> AttemptSpan:
        for existing in reversed(timeline.attempts):
            if existing.attempt == attempt:
                return existing
        created = AttemptSpan(attempt, t)
        timeline.attempts.append(created)
        return created

    def end(timeline: CallTimeline, t: float, outcome: str) -> None:
        timeline.outcome, timeline.end = outcome, t
        for attempt in timeline.attempts:
            if attempt.outcome == "queued":  # cut off while it waited for a slot
                attempt.start, attempt.end, attempt.outcome = t, t, "dropped"
            elif attempt.end is None:
                attempt.end, attempt.outcome = t, "ok" if outcome in ("succeeded", "partial") else "cut"

    for e in events:
        if isinstance(e, TurnDeadlineExceeded | TurnCanceled | TurnInterrupted):
            for call_id in e.unfinished:
                timeline = calls.get((e.turn_id, call_id))
                if timeline is not None and timeline.end is None:
                    end(timeline, e.t, "cut")
            continue
        if not isinstance(e, ToolEvent):
            continue
        timeline = call(e.turn_id, e.call_id, e.t)
        if isinstance(e, AttemptStarted):
            attempt = span(timeline, e.attempt, e.t)
            if attempt.outcome == "queued":  # its slot came: the attempt starts now
                attempt.start, attempt.outcome = e.t, "running"
        elif isinstance(e, BulkheadQueued):
            attempt = span(timeline, e.attempt, e.t)
            attempt.queued_at, attempt.outcome, attempt.held_by = e.t, "queued", "bulkhead"
        elif isinstance(e, BulkheadRejected):
            attempt = span(timeline, e.attempt, e.t)
            if attempt.queued_at is None and e.waited_ms > 0:
                attempt.queued_at = e.t - e.waited_ms / 1000.0
            attempt.start, attempt.end, attempt.outcome = e.t, e.t, "refused"
            attempt.kind, attempt.held_by = str(ErrorKind.BULKHEAD_FULL), "bulkhead"
            timeline.refusal = e.reason if e.attempt == 1 else f"retry refused: {e.reason}"
        elif isinstance(e, RateLimitWaited):  # announced as its wait ended
            attempt = span(timeline, e.attempt, e.t)
            attempt.queued_at, attempt.held_by = e.t - e.waited_ms / 1000.0, "rate limit"
            timeline.start = min(timeline.start, attempt.queued_at)
        elif isinstance(e, RateLimitRejected):
            attempt = span(timeline, e.attempt, e.t)
            if e.waited_ms > 0:
                attempt.queued_at = e.t - e.waited_ms / 1000.0
                timeline.start = min(timeline.start, attempt.queued_at)
            attempt.start, attempt.end, attempt.outcome = e.t, e.t, "refused"
            attempt.kind, attempt.held_by = str(ErrorKind.THROTTLED), "rate limit"
            timeline.refusal = e.reason if e.attempt == 1 else f"retry refused: {e.reason}"
        elif isinstance(e, RetryBudgetSpent):
            timeline.refusal = f"retry refused: {e.reason}"
        elif isinstance(e, ToolTimedOut):
            attempt = span(timeline, e.attempt, e.t)
            attempt.end, attempt.outcome, attempt.kind = e.t, "timeout", str(ErrorKind.TIMEOUT)
        elif isinstance(e, AttemptFailed):
            attempt = span(timeline, e.attempt, e.t)
            if attempt.outcome == "running":  # a timeout already ended it
                attempt.end, attempt.outcome = e.t, "error"
            attempt.kind = str(e.kind)
            if e.decision == "retry":
                attempt.delay_ms = e.delay_ms
        elif isinstance(e, CallSucceeded):
            end(timeline, e.t, "partial" if e.partial else "succeeded")
        elif isinstance(e, CallFailed):
            end(timeline, e.t, "failed")
        elif isinstance(e, CallRejected):
            end(timeline, e.t, "rejected")
        elif isinstance(e, StreamEnded) and e.outcome == "abandoned":
            end(timeline, e.t, "succeeded")
    return list(calls.values())[-limit:]
