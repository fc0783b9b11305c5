"""Internal: a token bucket's arithmetic. Pure: no clock is read and nothing waits; engine time
comes in as ``now``. Import it from :mod:`engine.strategies.rate_limit`.

The bucket holds at most ``burst`` tokens and gains ``rate`` tokens a second; an attempt takes one.
So over any interval of ``d`` seconds at most ``burst + rate × d`` tokens are taken. A fleet-wide
limiter can spend a lease of tokens through the same arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

EPSILON = 1e-9
"""Tokens that rounding may lose: a token due at ``t`` is there at ``t`` however the floats fall."""


class TokenBucket:
    """Tokens at engine time ``stamp``; :meth:`level` refills them on the fly."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate_per_s: float, burst: int) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate_per_s > 0 and burst ≥ 1")
        self.rate = rate_per_s
        self.burst = burst
        self.tokens = float(burst)
        """Tokens at ``stamp`` (full at first)."""
        self.stamp = -math.inf

    def level(self, now: float) -> float:
        """Tokens at ``now`` (a time before ``stamp`` reads the tokens at ``stamp``)."""
        if now <= self.stamp:
            return self.tokens
        return min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)

    def take(self, now: float) -> bool:
        """Take a token at ``now`` if there is one."""
        stamp = self.stamp
        tokens = self.tokens
        if now > stamp:
            tokens += (now - stamp) * self.rate
            if tokens > self.burst:
                tokens = float(self.burst)
            self.stamp = now
        if tokens >= 1.0 - EPSILON:
            self.tokens = tokens - 1.0
            return True
        self.tokens = tokens
        return False

    def give_back(self, now: float) -> None:
        """Return a token taken for an attempt that was never made (its waiter was cancelled)."""
        tokens = self.level(now)
        self.stamp = max(now, self.stamp)
        self.tokens = min(float(self.burst), tokens + 1.0)

    def ready_at(self, now: float, count: int = 1, not_before: float = -math.inf) -> float:
        """When the ``count``-th of a line of waiters gets its token, each taking one as soon as it
        is there and none before ``not_before`` (a cooldown's end): at once when it is there."""
        start = now if now >= not_before else not_before
        tokens = self.level(start)
        if tokens >= count - EPSILON:
            return start
        return start + (count - tokens) / self.rate

    def reconfigure(self, rate_per_s: float, burst: int) -> None:
        """New rate and size (a reload), keeping the tokens (at most the new ``burst``); the time
        since ``stamp`` refills at the new rate."""
        self.rate = rate_per_s
        self.burst = burst
        self.tokens = min(self.tokens, float(burst))

    def shared_facts(self) -> Mapping[str, Any] | None:
        """What a bucket shared with others adds to the limiter's facts (a fleet's lease); None here."""
        return None
