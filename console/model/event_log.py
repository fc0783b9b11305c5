"""The event log's lines: an engine event as one coloured line, made only when shown."""

from __future__ import annotations

from dataclasses import dataclass

from engine.events import Event

EVENTS_KEPT = 5_000
"""Events the model keeps for the event log, the newest."""


@dataclass(frozen=True, slots=True)
class EventRow:
    seq: int
    t: float
    at: float
    event_type: str
    tool_id: str | None
    turn_id: str | None
    severity: str
    """error, warning, success or info: how the event log colours the line."""
    text: str


_SEVERITY: dict[str, str] = {
    "CallFailed": "error", "BreakerOpened": "error", "BreakerTripped": "error",
    "ManifestRejected": "error", "TurnDeadlineExceeded": "error", "HandlerFailed": "error",
    "ManifestRefused": "warning",
    "ToolError": "warning", "ToolTimeout": "warning", "CallRejected": "warning",
    "CallSkipped": "warning", "CallEscalated": "warning", "BreakerHalfOpened": "warning",
    "AlternativeUsed": "warning", "DefaultUsed": "warning", "TurnCanceled": "warning",
    "TurnInterrupted": "warning", "BulkheadRejected": "warning", "RetryBudgetSpent": "warning",
    "BreakerDisabled": "warning", "ManifestRemoved": "warning",
    "CallSucceeded": "success", "BreakerClosed": "success", "BreakerReset": "success",
}  # fmt: skip


def event_row(event: Event, seq: int) -> EventRow:
    """How the event log shows an event."""
    event_type = event.event_type
    return EventRow(
        seq, event.t, event.at, event_type, getattr(event, "tool_id", None), getattr(event, "turn_id", None),
        _SEVERITY.get(event_type, "info"), event.describe(),
    )  # fmt: skip
