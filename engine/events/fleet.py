"""Internal: the fleet's shared state lost and found again (:mod:`engine.fleet`). Import them
from :mod:`engine.events`."""

from __future__ import annotations

from dataclasses import dataclass

from engine.event import Event


@dataclass(slots=True, kw_only=True)
class FleetUnavailable(Event):
    """The fleet's Redis is unreachable: this process decides alone, or keeps ``forced_open`` open."""

    namespace: str
    server: str
    """``host:port/db``: never a password."""
    error: str
    policy: str
    forced_open: tuple[str, ...] = ()

    def describe(self) -> str:
        then = f"forced open: {', '.join(self.forced_open)}" if self.forced_open else "running locally"
        return f"FLEET UNAVAILABLE ({self.namespace}): Redis {self.server} unreachable ({self.error}); {then}"


@dataclass(slots=True, kw_only=True)
class FleetRestored(Event):
    """The fleet's Redis answers again: shared state is read anew, tools forced open are restored."""

    namespace: str
    server: str
    down_s: float

    def describe(self) -> str:
        return f"fleet {self.namespace} restored: Redis {self.server} answers after {self.down_s:.1f}s"


@dataclass(slots=True, kw_only=True)
class FleetRateFellBack(Event):
    """Redis is away: a ``scope: fleet`` rate limit runs on this process's share of the fleet's rate.

    The share is ``rate_per_s / members``, the members alive at the last round trip."""

    tool_id: str
    rate_per_s: float
    share_per_s: float
    members: int

    def describe(self) -> str:
        return (
            f"{self.tool_id} fleet rate {self.rate_per_s:g}/s: Redis away, this process runs on its share "
            f"{self.share_per_s:g}/s ({self.members} members)"
        )


@dataclass(slots=True, kw_only=True)
class FleetRateRecovered(Event):
    """Redis answers again: a ``scope: fleet`` rate limit leases from the fleet's bucket again."""

    tool_id: str
    rate_per_s: float
    fallback_s: float
    """How long it ran on its share."""

    def describe(self) -> str:
        return (
            f"{self.tool_id} fleet rate {self.rate_per_s:g}/s shared again after {self.fallback_s:.1f}s"
            " on its share"
        )
