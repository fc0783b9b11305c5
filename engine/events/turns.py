"""Internal: the events of a turn (its start, cascades, deadline, stop, interruption and end).
Import them from :mod:`engine.events`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.event import Event, ToolEvent


@dataclass(slots=True, kw_only=True)
class TurnStarted(Event):
    """A turn began: its calls, in order, and its deadline."""

    turn_id: str
    calls: tuple[str, ...]
    deadline_ms: float | None
    spec: dict[str, Any] | None = None
    """The turn as data: every call's tool, args, dependencies, optional flag and default (args and
    defaults redacted by the call's tool's policy)."""
    seed: str = ""
    """Seeds the calls' jitter: with it a replay retries exactly as the run did."""
    breakers: dict[str, dict[str, Any]] | None = None
    """When recording: each relevant breaker's state at the start (see ``CircuitBreaker.snapshot``)."""
    manifests: dict[str, str] | None = None
    """When recording: the digest of each relevant tool's manifest in force."""

    def describe(self) -> str:
        limit = f", deadline {self.deadline_ms / 1000:g}s" if self.deadline_ms is not None else ""
        return f"turn {self.turn_id} started: {len(self.calls)} call(s){limit}"


@dataclass(slots=True, kw_only=True)
class DependencyBlocked(ToolEvent, abstract=True):
    """A call's dependencies did not all succeed: what blocked it, and what was done instead."""

    blocked_by: tuple[str, ...]
    reason: str


@dataclass(slots=True, kw_only=True)
class CallSkipped(DependencyBlocked):
    """An optional call was not run because a dependency did not succeed."""

    def describe(self) -> str:
        return f"Optional tool skipped due to dependency failure: {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class CallEscalated(DependencyBlocked):
    """A required call could not run because a dependency did not succeed."""

    def describe(self) -> str:
        return f"Required tool skipped due to dependency failure: {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class DefaultUsed(DependencyBlocked):
    """A call ran with its declared default in place of a failed dependency's output."""

    def describe(self) -> str:
        return f"Used default value for {self.tool_id} (in place of {', '.join(self.blocked_by)})"


@dataclass(slots=True, kw_only=True)
class TurnDeadlineExceeded(Event):
    """The turn's deadline passed: unfinished calls were cut off and reported as timed out."""

    turn_id: str
    deadline_ms: float
    unfinished: tuple[str, ...]

    def describe(self) -> str:
        cut = ", ".join(self.unfinished) or "nothing"
        return f"turn {self.turn_id} hit its {self.deadline_ms / 1000:g}s deadline; timed out: {cut}"


@dataclass(slots=True, kw_only=True)
class TurnCanceled(Event):
    """The turn was stopped on request: unfinished calls were cancelled."""

    turn_id: str
    unfinished: tuple[str, ...]

    def describe(self) -> str:
        return f"turn {self.turn_id} stopped; canceled: {', '.join(self.unfinished) or 'nothing'}"


@dataclass(slots=True, kw_only=True)
class TurnInterrupted(Event):
    """The turn's caller was cancelled (the engine or its host stopped) before the turn ended.

    ``in_flight`` are the calls that were running then; ``unfinished`` every call without an
    outcome (in flight or never started). A ``TurnFinished`` with outcome ``interrupted`` follows.
    """

    turn_id: str
    in_flight: tuple[str, ...]
    unfinished: tuple[str, ...]
    reason: str = "the caller was cancelled"

    def describe(self) -> str:
        running = ", ".join(self.in_flight) or "nothing"
        return f"turn {self.turn_id} interrupted ({self.reason}); in flight: {running}"


@dataclass(slots=True, kw_only=True)
class TurnFinished(Event):
    """A turn ended; its summary is the plain sentence for the user."""

    turn_id: str
    summary: str
    statuses: dict[str, str]
    """Call id → final status, in turn order."""
    executed: int
    duration_ms: float
    outcome: str = "ok"
    """``ok`` (every call succeeded), ``degraded``, ``failed`` (no tool executed: spec-map kinds.turn-failed),
    ``timed_out`` (the deadline cut it), ``canceled`` (stopped) or ``interrupted`` (its caller was
    cancelled: the engine or its host stopped mid-turn)."""

    def describe(self) -> str:
        return f"turn {self.turn_id} finished in {self.duration_ms:.0f} ms: {self.summary}"
