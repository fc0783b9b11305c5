"""Circuit breaker per tool (spec-map breaker): a pure state machine; the caller passes the time.

CLOSED ─(failure_threshold consecutive transient failures)→ OPEN
OPEN ─(timeout_ms elapsed)→ HALF_OPEN, which admits one probe at a time
HALF_OPEN ─(probe fails or times out)→ OPEN, timer restarted
HALF_OPEN ─(success_threshold consecutive probe successes)→ CLOSED
operators: trip → FORCED_OPEN (until reset), reset → CLOSED, disable → DISABLED

Permanent errors from a service that answered are proof it is up: they never count as
failures and they end the streak (spec-map breaker.permanent-not-counted).

Every operation that changes the state returns the :class:`Transition` it made (a probe
:class:`Permit` carries the one its admission made): the caller announces it, naming the call
that caused it. ``on_transition`` also sees every transition, for a breaker used on its own.

A fleet of processes (:mod:`engine.fleet`) shares two decisions through two hooks: ``probe_gate``,
consulted only once the open period is over (never on a CLOSED breaker's path), says whether
this process may admit the fleet's one probe; :meth:`CircuitBreaker.fleet_open` and
:meth:`CircuitBreaker.fleet_close` apply what the fleet decided (a quorum opened the tool, the
probe's holder saw it succeed or fail).

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from engine.config import DAY_MS, NOT_BOOL

MAX_THRESHOLD = 1_000_000


class BreakerState(StrEnum):
    """A breaker's state (the machine is in this module's docstring); FORCED_OPEN and DISABLED
    are the operators'."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"
    FORCED_OPEN = "FORCED_OPEN"
    DISABLED = "DISABLED"


class BreakerConfig(BaseModel):
    """Thresholds are counts (1 to a million, never booleans); the open timeout is at most 24 h."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    failure_threshold: Annotated[int, NOT_BOOL] = Field(default=5, ge=1, le=MAX_THRESHOLD)
    success_threshold: Annotated[int, NOT_BOOL] = Field(default=1, ge=1, le=MAX_THRESHOLD)
    timeout_ms: Annotated[float, NOT_BOOL] = Field(default=30_000.0, gt=0, le=DAY_MS)


class AttemptOutcome(Enum):
    """What one attempt says about the service's health."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """A transient failure: counts toward opening."""
    ANSWERED = "answered"
    """A permanent error returned by the invoked tool: the service is up, not a failure."""
    ABANDONED = "abandoned"
    """No evidence either way: the attempt was cancelled from outside."""


@dataclass(frozen=True, slots=True)
class Transition:
    tool_id: str
    from_state: BreakerState
    to_state: BreakerState
    reason: str
    actor: str
    """``engine`` for automatic transitions, else the operator who acted."""
    t: float
    consecutive_failures: int
    half_open_at: float | None
    """When an OPEN breaker will admit a probe (engine time); None in other states."""


@dataclass(frozen=True, slots=True)
class Permit:
    """Admission to make one attempt; results of stale permits never move the state."""

    generation: int
    probe: bool
    half_opened: Transition | None = None
    """OPEN → HALF_OPEN, when this admission found the open period over: the caller's to announce."""


_FIRST_PERMIT = Permit(0, probe=False)
"""Every new breaker's standing permit (frozen, so shared: one allocation fewer per tool)."""


def rejection_reason(tool_id: str, state: BreakerState) -> str:
    """Why a breaker in ``state`` rejects a call: the one text a rejected call's reason gives,
    whoever decides about the rejection (the default rules or a custom handler deferring)."""
    if state is BreakerState.HALF_OPEN:
        return f"circuit breaker for {tool_id} is HALF_OPEN and its one probe is in flight"
    return f"circuit breaker open for {tool_id} ({state}): no attempt made"


class CircuitBreaker:
    """One per tool, shared by every call and every retry of that tool."""

    __slots__ = (
        "_permit",
        "_rejection",
        "config",
        "consecutive_failures",
        "consecutive_successes",
        "generation",
        "half_open_at",
        "on_transition",
        "opened_at",
        "opens",
        "probe_gate",
        "probe_in_flight",
        "state",
        "tool_id",
    )

    def __init__(
        self,
        tool_id: str,
        config: BreakerConfig | None = None,
        on_transition: Callable[[Transition], None] | None = None,
    ) -> None:
        self.tool_id = tool_id
        self.config = config or BreakerConfig()
        self.on_transition = on_transition
        self.state = BreakerState.CLOSED
        self.consecutive_failures = 0
        self.consecutive_successes = 0
        self.opened_at: float | None = None
        self.half_open_at: float | None = None
        self.probe_in_flight = False
        self.opens = 0
        self.generation = 0
        self._permit = _FIRST_PERMIT
        self._rejection: tuple[int, str] | None = None
        self.probe_gate: Callable[[], bool] | None = None
        """Set by a fleet: whether this process may admit the probe now (it holds the fleet's
        probe lease). While it says no, an open period that is over does not half-open here:
        the engine's timer (or ``engine.state``) half-opens and announces it."""

    # --- admission ---------------------------------------------------------------------

    def acquire(self, now: float) -> Permit | None:
        """A permit to attempt a call now, or None to reject it at once.

        An OPEN breaker whose open period is over half-opens here: the probe permit carries
        that transition (``half_opened``).
        """
        state = self.state
        if state is BreakerState.CLOSED or state is BreakerState.DISABLED:
            return self._permit
        half_opened = None
        if state is BreakerState.OPEN:
            half_open_at = self.half_open_at
            if half_open_at is None or now < half_open_at:
                return None
            gate = self.probe_gate
            if gate is not None and not gate():
                return None
            half_opened = self.poll(now)
        if self.state is BreakerState.HALF_OPEN and not self.probe_in_flight:
            gate = self.probe_gate
            if half_opened is None and gate is not None and not gate():
                return None
            self.probe_in_flight = True
            return Permit(self.generation, True, half_opened)
        return None

    def would_admit(self, now: float) -> bool:
        """Whether :meth:`acquire` would admit a call now, without changing anything."""
        state = self.state
        if state is BreakerState.CLOSED or state is BreakerState.DISABLED:
            return True
        gate = self.probe_gate
        if state is BreakerState.OPEN:
            due = self.half_open_at is not None and now >= self.half_open_at
            return due and (gate is None or gate())
        return state is BreakerState.HALF_OPEN and not self.probe_in_flight and (gate is None or gate())

    def poll(self, now: float) -> Transition | None:
        """Move OPEN to HALF_OPEN if its timer is due (the transition made, or None); the
        engine's timer calls this too."""
        if self.state is BreakerState.OPEN and self.half_open_at is not None and now >= self.half_open_at:
            return self._move(
                BreakerState.HALF_OPEN,
                now,
                f"open for {self.config.timeout_ms / 1000:g}s: admitting one probe",
            )
        return None

    def rejection_reason(self) -> str:
        """Why a call is rejected now (:func:`rejection_reason`); built once per state change."""
        if self._rejection is None or self._rejection[0] != self.generation:
            self._rejection = (self.generation, rejection_reason(self.tool_id, self.state))
        return self._rejection[1]

    # --- outcomes ----------------------------------------------------------------------

    def record(self, permit: Permit, outcome: AttemptOutcome, now: float) -> Transition | None:
        """Count an attempt's outcome; the transition it made, or None."""
        if permit.generation != self.generation:
            return None  # admitted before the last transition: old news
        state = self.state
        if permit.probe:
            self.probe_in_flight = False
        if outcome is AttemptOutcome.ABANDONED:
            return None
        failed = outcome is AttemptOutcome.FAILED
        if state is BreakerState.CLOSED or state is BreakerState.DISABLED:
            if not failed:
                self.consecutive_failures = 0
                return None
            self.consecutive_failures += 1
            if state is BreakerState.CLOSED and self.consecutive_failures >= self.config.failure_threshold:
                return self._open(now, f"{self.consecutive_failures} consecutive transient failures")
        elif state is BreakerState.HALF_OPEN and permit.probe:
            if failed:
                self.consecutive_failures += 1
                return self._open(now, "half-open probe failed")
            self.consecutive_successes += 1
            if self.consecutive_successes >= self.config.success_threshold:
                return self._move(
                    BreakerState.CLOSED,
                    now,
                    f"{self.consecutive_successes} consecutive probe success"
                    f"{'es' if self.consecutive_successes > 1 else ''}",
                )
        return None

    def standing_permit(self) -> Permit:
        """A permit of the current generation, for a failure outside any attempt's permit (a stream
        cut after its opening attempt succeeded): it counts against the state the breaker is in."""
        return self._permit

    # --- snapshots -----------------------------------------------------------------------

    def snapshot(self, now: float) -> dict[str, Any]:
        """The state as data (for recordings and consoles); ``half_open_in_s`` is relative."""
        return {
            "state": self.state.value,
            "consecutive_failures": self.consecutive_failures,
            "consecutive_successes": self.consecutive_successes,
            "half_open_in_s": max(self.half_open_at - now, 0.0) if self.half_open_at is not None else None,
            "opens": self.opens,
        }

    def restore(self, snapshot: dict[str, Any], now: float) -> None:
        """Put the breaker back in a recorded state (replay); no transition is announced."""
        self.state = BreakerState(snapshot["state"])
        self.consecutive_failures = int(snapshot.get("consecutive_failures") or 0)
        self.consecutive_successes = int(snapshot.get("consecutive_successes") or 0)
        self.opens = int(snapshot.get("opens") or 0)
        half_open_in = snapshot.get("half_open_in_s")
        self.half_open_at = now + float(half_open_in) if half_open_in is not None else None
        self.opened_at = now if self.state in (BreakerState.OPEN, BreakerState.FORCED_OPEN) else None
        self.probe_in_flight = False
        self.generation += 1
        self._permit = Permit(self.generation, probe=False)

    # --- operator controls -------------------------------------------------------------

    def trip(self, now: float, *, actor: str, reason: str = "") -> Transition:
        return self._move(BreakerState.FORCED_OPEN, now, reason or "tripped by operator", actor)

    def reset(self, now: float, *, actor: str, reason: str = "") -> Transition:
        return self._move(BreakerState.CLOSED, now, reason or "reset by operator", actor)

    def disable(self, now: float, *, actor: str, reason: str = "") -> Transition:
        return self._move(BreakerState.DISABLED, now, reason or "disabled by operator", actor)

    # --- the fleet's decisions -----------------------------------------------------------

    def fleet_open(self, now: float, reason: str) -> Transition | None:
        """Open because the fleet decided so (a quorum of processes opened the tool, or the
        fleet's probe failed): from CLOSED or HALF_OPEN only; None when nothing changed (already
        OPEN, or an operator's state, which the fleet never overrides)."""
        if self.state is BreakerState.CLOSED or self.state is BreakerState.HALF_OPEN:
            return self._open(now, reason)
        return None

    def fleet_close(self, now: float, reason: str) -> Transition | None:
        """Close because the fleet's probe succeeded: from OPEN or HALF_OPEN only; None when
        nothing changed."""
        if self.state is BreakerState.OPEN or self.state is BreakerState.HALF_OPEN:
            return self._move(BreakerState.CLOSED, now, reason)
        return None

    # --- transitions -------------------------------------------------------------------

    def _open(self, now: float, reason: str) -> Transition:
        self.opens += 1
        return self._move(BreakerState.OPEN, now, reason)

    def _move(self, to: BreakerState, now: float, reason: str, actor: str = "engine") -> Transition:
        previous = self.state
        failures = self.consecutive_failures
        self.state = to
        self.generation += 1
        self._permit = Permit(self.generation, probe=False)
        self.probe_in_flight = False
        self.consecutive_successes = 0
        if to is BreakerState.OPEN:
            self.opened_at = now
            self.half_open_at = now + self.config.timeout_ms / 1000.0
        else:
            self.half_open_at = None
            if to is not BreakerState.HALF_OPEN:
                self.opened_at = None if to is not BreakerState.FORCED_OPEN else now
        if to is BreakerState.CLOSED:
            self.consecutive_failures = 0
        transition = Transition(self.tool_id, previous, to, reason, actor, now, failures, self.half_open_at)
        if self.on_transition is not None:
            self.on_transition(transition)
        return transition
