"""Internal: breaker transitions, by the engine or an operator. Import them from
:mod:`engine.events`."""

from __future__ import annotations

from dataclasses import dataclass

from engine.event import Event, when
from engine.strategies.breaker.machine import BreakerState


@dataclass(slots=True, kw_only=True)
class BreakerTransitioned(Event, abstract=True):
    """A breaker changed state."""

    tool_id: str
    from_state: BreakerState
    to_state: BreakerState
    reason: str
    actor: str
    consecutive_failures: int
    half_open_at: float | None = None
    """Engine time at which an OPEN breaker admits a probe."""
    call_id: str | None = None
    """The call that caused the transition, by its attempt or by arriving after the open period
    (None for the half-open timer, a state query and operators)."""
    turn_id: str | None = None
    """The turn of that call, when it ran in one."""

    def describe(self) -> str:
        by = "" if self.actor == "engine" else f" by {self.actor}"
        return f"{self.tool_id}: {self.from_state} → {self.to_state}{by} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class BreakerOpened(BreakerTransitioned):
    """Too many consecutive transient failures, or a failed probe: calls are rejected."""

    def describe(self) -> str:
        return f"Circuit breaker opened for {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class BreakerHalfOpened(BreakerTransitioned):
    """The open timer ran out: one probe at a time is admitted.

    ``call_id`` names the call that arrived after the open period and made the transition (it
    is the probe); None when the engine's half-open timer, or ``engine.state()``, made it first.
    """


@dataclass(slots=True, kw_only=True)
class BreakerClosed(BreakerTransitioned):
    """Enough probes succeeded: normal operation resumes.

    ``call_id`` names the probe whose success closed the breaker.
    """


@dataclass(slots=True, kw_only=True)
class BreakerTripped(BreakerTransitioned):
    """Forced open by an operator until reset."""


@dataclass(slots=True, kw_only=True)
class BreakerReset(BreakerTransitioned):
    """Closed by an operator."""


@dataclass(slots=True, kw_only=True)
class BreakerDisabled(BreakerTransitioned):
    """Admits everything while still counting, by an operator's choice."""


@dataclass(slots=True, kw_only=True)
class BreakerRestored(BreakerTransitioned):
    """An operator's standing trip or disable, kept in the store, put back on a restarted engine.

    Put back as the engine started recording or the tool was registered; ``actor`` and ``reason``
    are the operator's, ``set_at`` when they set it."""

    set_at: float
    """Wall-clock time at which the operator tripped or disabled the tool."""

    def describe(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"{self.tool_id}: {self.to_state} restored (set by {self.actor} at {when(self.set_at)}{why})"


_BREAKER_EVENTS: dict[BreakerState, type[BreakerTransitioned]] = {
    BreakerState.OPEN: BreakerOpened,
    BreakerState.HALF_OPEN: BreakerHalfOpened,
    BreakerState.CLOSED: BreakerClosed,
    BreakerState.FORCED_OPEN: BreakerTripped,
    BreakerState.DISABLED: BreakerDisabled,
}


def breaker_event_type(to_state: BreakerState, actor: str) -> type[BreakerTransitioned]:
    if to_state is BreakerState.CLOSED and actor != "engine":
        return BreakerReset
    return _BREAKER_EVENTS[to_state]
