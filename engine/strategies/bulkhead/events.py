"""Internal: what a tool's bulkhead did to an attempt. Import them from
:mod:`engine.strategies.bulkhead`."""

from __future__ import annotations

from dataclasses import dataclass

from engine.event import ToolEvent


@dataclass(slots=True, kw_only=True)
class BulkheadQueued(ToolEvent):
    """An attempt found every slot of the tool's bulkhead taken and waited in its queue."""

    attempt: int
    in_flight: int
    """Attempts in flight when it joined the queue."""
    queued: int
    """Attempts waiting once it joined, itself included."""

    def describe(self) -> str:
        return (
            f"{self.tool_id} attempt {self.attempt} queued by the bulkhead "
            f"({self.in_flight} in flight, {self.queued} queued)"
        )


@dataclass(slots=True, kw_only=True)
class BulkheadRejected(ToolEvent):
    """The tool's bulkhead refused an attempt (full, or its wait ran out): it was not made."""

    attempt: int
    reason: str
    in_flight: int
    queued: int
    waited_ms: float
    """How long it waited in the queue first (0: refused at once)."""

    def describe(self) -> str:
        return f"{self.tool_id} attempt {self.attempt} rejected: {self.reason}"
