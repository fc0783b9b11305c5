"""Turns as the dependency view shows them: each call under what it depends on, with its outcome."""

from __future__ import annotations

from dataclasses import dataclass

from engine.events import TurnStarted

TURNS_KEPT = 30
"""Turns the model keeps for the dependency view, the newest."""


@dataclass(slots=True)
class CallNode:
    call_id: str
    tool_id: str
    depends_on: tuple[str, ...]
    optional: bool
    has_default: bool
    status: str = "pending"
    """pending, running, then a ``CallStatus`` value: succeeded, partial, failed, skipped,
    escalated, timed_out or canceled."""
    reason: str = ""
    attempts: int = 0
    served_by: str | None = None
    used_default: bool = False
    rejected: bool = False

    @property
    def label(self) -> str:
        """The outcome as the dependency view names it."""
        if self.status in ("succeeded", "partial") and self.served_by:
            return "alternative used"
        if self.status in ("succeeded", "partial") and self.used_default:
            return "defaulted"
        if self.status == "failed" and self.rejected:
            return "rejected"
        return self.status.replace("_", " ")


@dataclass(slots=True)
class TurnView:
    turn_id: str
    t: float
    at: float
    deadline_ms: float | None
    calls: dict[str, CallNode]
    outcome: str = "running"
    summary: str = ""
    duration_ms: float | None = None
    version: int = 0

    @property
    def finished(self) -> bool:
        return self.outcome != "running"

    def roots(self) -> list[CallNode]:
        return [c for c in self.calls.values() if not c.depends_on]

    def dependants(self, call_id: str) -> list[CallNode]:
        return [c for c in self.calls.values() if call_id in c.depends_on]


def call_nodes(event: TurnStarted) -> dict[str, CallNode]:
    """A started turn's calls, pending, from its spec (or only their ids, stored without it)."""
    spec = event.spec or {}
    nodes: dict[str, CallNode] = {}
    for call in spec.get("calls", ()):
        call_id = str(call.get("id"))
        nodes[call_id] = CallNode(
            call_id, str(call.get("tool", "?")), tuple(call.get("depends_on") or ()),
            bool(call.get("optional", False)), "default" in call,
        )  # fmt: skip
    for call_id in event.calls:  # a turn stored without its spec still lists its calls
        nodes.setdefault(call_id, CallNode(call_id, "?", (), False, False))
    return nodes
