"""Internal: what a tool's rate limit did. Import them from :mod:`engine.strategies.rate_limit`."""

from __future__ import annotations

from dataclasses import dataclass

from engine.event import Event, ToolEvent


@dataclass(slots=True, kw_only=True)
class RateLimitWaited(ToolEvent):
    """An attempt waited for its turn under the tool's rate limit, then went ahead.

    Its turn: a token of the bucket, or the end of a cooldown."""

    attempt: int
    waited_ms: float

    def describe(self) -> str:
        return f"{self.tool_id} attempt {self.attempt} waited {self.waited_ms:.0f} ms for the rate limit"


@dataclass(slots=True, kw_only=True)
class RateLimitRejected(ToolEvent):
    """The tool's rate limit refused an attempt, which was not made: it could not wait its turn.

    Its turn would have come after its max wait or its turn's deadline."""

    attempt: int
    reason: str
    wait_needed_ms: float
    """The wait it would have needed, from the moment it was refused."""
    cooldown_ms: float
    """Of that, the cooldown left (0: none)."""
    waited_ms: float
    """How long it waited before (0: refused at once; more when a cooldown began meanwhile)."""

    def describe(self) -> str:
        return f"{self.tool_id} attempt {self.attempt} rejected: {self.reason}"


@dataclass(slots=True, kw_only=True)
class CooldownStarted(ToolEvent):
    """A rate-limit error paused the tool for every caller until ``until`` (or paused it longer).

    The error: a 429, a ``Retry-After``, a provider's rate-limit body. ``call_id`` is the call whose
    attempt failed with it."""

    attempt: int
    """The attempt whose error asked for it."""
    until: float
    """Engine time at which the tool may be called again."""
    cooldown_s: float
    retry_after_s: float | None
    """What the error asked for; None: the manifest's ``cooldown_ms``."""
    extended: bool
    """A cooldown stood already and this one ends later."""
    started_by: str | None = None
    """None: a call of this process. From a fleet: the member (``host:pid:random``) whose call
    (``call_id``) started it; this process learnt it on a sync round trip."""

    def describe(self) -> str:
        what = "extended" if self.extended else "started"
        by = f" (fleet-wide, from {self.started_by})" if self.started_by else ""
        error = f"{self.call_id}'s rate-limit error{by}"
        return f"{self.tool_id} cooldown {what} for {self.cooldown_s:g} s by {error}"


@dataclass(slots=True, kw_only=True)
class CooldownEnded(Event):
    """A tool's cooldown ended: it ran out (``expired``), or an operator reset the tool.

    One that ran out is announced by the first attempt that finds it over (as that call's event:
    ``call_id``), its end being ``until``; a reset at once, by its ``actor``."""

    tool_id: str
    started_by: str | None
    """Who had set its end (a call id; from a fleet, a process)."""
    until: float
    """Engine time it was to end at."""
    how: str
    """``expired`` or ``reset``."""
    actor: str | None = None
    """Who reset it (None when it expired)."""
    call_id: str | None = None
    """The call that found it over (None for a reset)."""
    turn_id: str | None = None

    def describe(self) -> str:
        how = "expired" if self.how == "expired" else f"reset by {self.actor}"
        return f"{self.tool_id} cooldown ended ({how})"
