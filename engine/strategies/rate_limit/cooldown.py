"""Internal: a tool's cooldown after a rate-limit error — when it ends and who started it. Pure
values. Import them from :mod:`engine.strategies.rate_limit`.

A :class:`Cooldown` is the one object a fleet's sync sets on a process's limiter (a cooldown
another process started): :meth:`~engine.strategies.rate_limit.RateLimiter.extend_cooldown`
takes it, and only ever moves the end later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cooldown:
    """Every caller of the tool waits until ``until`` (engine time): the advice of one error."""

    until: float
    """Engine time at which the tool may be called again: absolute, so a reload keeps it as is."""
    started_by: str | None = None
    """Who set this end: the call whose error asked for it (its call id), or, from a fleet, the
    process that did."""
    started_at: float = -math.inf
    retry_after_s: float | None = None
    """What the error asked for (its ``Retry-After``); None: the manifest's ``cooldown_ms``."""

    @property
    def active(self) -> bool:
        return self is not NO_COOLDOWN

    def remaining(self, now: float) -> float:
        """Seconds left at ``now`` (0 once it is over)."""
        return max(0.0, self.until - now)

    def later_than(self, other: Cooldown) -> bool:
        """Whether this one ends after ``other``: only a later end replaces a cooldown."""
        return self.until > other.until


NO_COOLDOWN = Cooldown(-math.inf)
"""The tool is not cooling down (the one instance: a limiter checks for it by identity)."""
