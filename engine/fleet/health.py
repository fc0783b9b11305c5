"""Whether the fleet may talk to Redis now: the engine's own breaker and backoff, on Redis.

A private :class:`~engine.strategies.breaker.machine.CircuitBreaker` (not a registered tool: a tool named
``_fleet_redis`` would be offered to models by ``available_tools``, shown among the user's tools
and would emit events into the very stream it feeds) opens after ``failure_threshold``
consecutive failed round trips: Redis is then *unavailable*. Reconnection attempts are that
breaker's half-open probes, spaced by a :class:`~engine.strategies.retry.policy.RetryPolicy`
backoff with jitter (250 ms doubling to 5 s), so a fleet of processes does not hammer a Redis that comes back.
"""

from __future__ import annotations

import random

from engine.errors import one_line
from engine.strategies.breaker.machine import (
    AttemptOutcome,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    Permit,
)
from engine.strategies.retry.policy import RetryPolicy

RECONNECT = RetryPolicy(initial_delay_ms=250.0, multiplier=2.0, max_delay_ms=5_000.0, jitter_percent=20.0)


class RedisHealth:
    """Redis's breaker, fed by each round trip's outcome; times are the caller's clock (seconds)."""

    def __init__(
        self, rng: random.Random, *, failure_threshold: int = 2, backoff: RetryPolicy = RECONNECT
    ) -> None:
        self.rng = rng
        self.failure_threshold = failure_threshold
        self.backoff = backoff
        self.breaker = CircuitBreaker("_fleet_redis", self._config(1))
        self.down_since: float | None = None
        """When Redis became unavailable; None while it is available."""
        self.last_error = ""
        self.reconnects = 0
        """Failed reconnection attempts in this outage: the backoff's step."""

    @property
    def available(self) -> bool:
        return self.down_since is None

    def _config(self, retry: int) -> BreakerConfig:
        delay_ms = self.backoff.delay_s(retry, self.rng) * 1000.0
        return BreakerConfig(failure_threshold=self.failure_threshold, timeout_ms=max(delay_ms, 1.0))

    def admit(self, now: float) -> Permit | None:
        """A permit for one round trip now, or None: wait for the next reconnection attempt."""
        return self.breaker.acquire(now)

    def succeeded(self, permit: Permit, now: float) -> float | None:
        """Record a round trip that worked; how long Redis was away when this ends an outage."""
        transition = self.breaker.record(permit, AttemptOutcome.SUCCEEDED, now)
        if transition is None or transition.to_state is not BreakerState.CLOSED or self.down_since is None:
            return None
        down_s, self.down_since, self.reconnects = now - self.down_since, None, 0
        self.breaker.config = self._config(1)
        return down_s

    def failed(self, permit: Permit, now: float, error: BaseException) -> bool:
        """Record a failed round trip; True when it makes Redis unavailable (the outage starts)."""
        self.last_error = one_line(f"{type(error).__name__}: {error}")[:300]
        if self.breaker.state is BreakerState.HALF_OPEN:
            self.reconnects += 1
        # The open period is fixed when the breaker opens: set the backoff's next step first.
        self.breaker.config = self._config(self.reconnects + 1)
        transition = self.breaker.record(permit, AttemptOutcome.FAILED, now)
        if transition is not None and transition.to_state is BreakerState.OPEN and self.down_since is None:
            self.down_since = now
            return True
        return False


__all__ = ["RECONNECT", "RedisHealth"]
