"""Internal: one engine's run told from the next — a tool registered, recording started with every
breaker as it stood, an operator's standing overrides forgotten. Import them from
:mod:`engine.events`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.event import Event, when
from engine.strategies.breaker.machine import BreakerState


@dataclass(slots=True, kw_only=True)
class ToolRegistered(Event):
    """A tool was registered, its breaker as it started (a standing override may follow at once)."""

    tool_id: str
    state: BreakerState
    consecutive_failures: int = 0
    half_open_at: float | None = None
    """Engine time at which an OPEN breaker admits a probe."""

    def describe(self) -> str:
        return f"{self.tool_id} registered: {self.state}"


@dataclass(slots=True, kw_only=True)
class RecordingStarted(Event):
    """An engine began recording into this store, with every registered tool's breaker as it stood.

    Readers take a tool's state from here until its next transition, never from an earlier run's;
    a tool named neither here nor by a later ``ToolRegistered`` belongs to an earlier run.
    """

    host: str
    pid: int
    breakers: dict[str, dict[str, Any]]
    """By tool id: ``state``, ``consecutive_failures`` and ``half_open_at`` (engine time, or None)."""
    keeps_overrides: bool = False
    """Whether this engine keeps operators' standing overrides in the store (serve and the console
    do; scenario runs do not)."""
    shared_strategies: dict[str, Any] = field(default_factory=dict)
    """The engine-wide strategies of defaults.yaml in force, by section, as data (as
    ``SharedStrategiesChanged.strategies``); empty: none, or a store written before they were kept."""

    def describe(self) -> str:
        keeps = "; operators' overrides are kept" if self.keeps_overrides else ""
        return f"recording started: {self.host} pid {self.pid}, {len(self.breakers)} tool(s){keeps}"


@dataclass(slots=True, kw_only=True)
class OverridesForgotten(Event):
    """The operators' standing overrides kept in the store were dropped as the engine started.

    ``tripwire serve --forget-overrides``: those tools start as the engine finds them."""

    forgotten: dict[str, dict[str, Any]]
    """By tool id: the override dropped (``state``, ``actor``, ``reason``, ``set_at``)."""
    actor: str

    def describe(self) -> str:
        tools = ", ".join(
            f"{tool} {o.get('state')} (set by {o.get('actor')} at {when(o.get('set_at'))})"
            if isinstance(o, dict)
            else str(tool)
            for tool, o in self.forgotten.items()
        )
        return f"standing overrides forgotten by {self.actor}: {tools or 'none'}"
