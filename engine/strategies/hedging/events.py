"""Internal: what hedging did to a call's attempts. Import them from :mod:`engine.strategies.hedging`.

Each hedge is an attempt with its own ``AttemptStarted`` (after its ``HedgeStarted``); every attempt
of a race ends visibly — ``CallSucceeded`` (the winner), ``ToolError`` (failed), or
:class:`AttemptAbandoned` (cancelled because another won) — so a timeline can draw them side by side
from their start and end times (``t``)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.event import ToolEvent


@dataclass(slots=True, kw_only=True)
class HedgeStarted(ToolEvent):
    """A slow attempt was raced: one more attempt of the call started beside it."""

    attempt: int
    """The hedge's own attempt number (its ``AttemptStarted`` follows)."""
    after_attempt: int
    """The attempt started last before it, whose ``after_ms`` ran out."""
    after_ms: float
    """How long after that attempt's start the hedge was due (fixed, or the p95 then)."""
    in_flight: int
    """Attempts of the call running beside it."""

    def describe(self) -> str:
        return (
            f"{self.tool_id} attempt {self.attempt} started as a hedge, "
            f"{self.after_ms:.0f} ms after attempt {self.after_attempt} ({self.in_flight} in flight)"
        )


@dataclass(slots=True, kw_only=True)
class HedgeRefused(ToolEvent):
    """A hedge was due but did not start (retry budget, breaker, bulkhead, rate limit said no)."""

    attempt: int
    """The number the hedge would have had."""
    reason: str

    def describe(self) -> str:
        return f"{self.tool_id} hedge (attempt {self.attempt}) not started: {self.reason}"


@dataclass(slots=True, kw_only=True)
class AttemptAbandoned(ToolEvent):
    """An attempt still running was cancelled because another attempt of its call won: no failure."""

    attempt: int
    won_by: int
    """The attempt whose success ended it."""
    latency_ms: float
    """How long it had run (from its ``AttemptStarted`` to now)."""

    def describe(self) -> str:
        ran = f"{self.latency_ms:.0f} ms"
        return f"{self.tool_id} attempt {self.attempt} cancelled after {ran}: attempt {self.won_by} won"


@dataclass(slots=True, kw_only=True)
class HedgeRaceWon(ToolEvent):
    """An attempt of a hedged call succeeded first; the attempts still running were cancelled."""

    attempt: int
    """The winner (``CallSucceeded.attempts`` says the same)."""
    hedge: bool
    """Whether the winner was a hedge (not the call's first attempt or a retry)."""
    cancelled: tuple[int, ...]
    """The attempts cancelled by the win (each ended with ``AttemptAbandoned``)."""
    attempt_ms: float

    def describe(self) -> str:
        who = "a hedge" if self.hedge else "not a hedge"
        lost = ", ".join(map(str, self.cancelled)) or "none"
        took = f"{self.attempt_ms:.0f} ms"
        return f"{self.tool_id} attempt {self.attempt} ({who}) won in {took}; cancelled: {lost}"
