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
