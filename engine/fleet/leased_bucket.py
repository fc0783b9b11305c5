"""A ``scope: fleet`` rate as one process spends it: tokens leased from the fleet's bucket in Redis
once a sync round trip, spent locally — the call path never waits on Redis.

:class:`LeasedBucket` stands where the limiter's :class:`~engine.strategies.rate_limit.TokenBucket`
stands (same methods, same arithmetic for the limiter's line). Two modes:

* **lease** (Redis answers): ``tokens`` is the pool leased and not spent yet; it grows only when a
  lease comes (:meth:`lease_granted`). What to ask for next is sized to what the process used since
  the last lease (×1.25, plus the attempts waiting, plus one), doubled while it ran dry, at most
  two sync periods of the whole fleet's rate: a quiet process holds little, a busy one keeps up.
  A waiter's turn is estimated from the next lease and the fleet share. A lease overdue by
  :data:`OVERDUE_PERIODS` sync periods (Redis slow, paused, not yet known to be away) lets the pool
  refill locally at the fleet share meanwhile: calls never stall on a slow Redis.
* **fallback** (Redis away): a local token bucket at the fleet share, ``rate_per_s / live
  members`` (members alive at the last round trip), so the fleet as a whole stays near its rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from engine.strategies.rate_limit.bucket import EPSILON, TokenBucket

GROWTH = 1.25
"""A lease asks for this much more than the process used in the last period."""
PERIODS_HELD = 2.0
"""A process holds at most this many sync periods of the whole fleet's rate."""
OVERDUE_PERIODS = 2.0
"""A lease this many sync periods late: the pool refills at the fleet share until one comes."""


class LeasedBucket(TokenBucket):
    """The fleet's rate ``rate_per_s`` (``burst``) as one process spends it from ``now`` on (its
    first lease due a sync period, ``period_s``, later)."""

    __slots__ = (
        "fallback",
        "last_lease",
        "last_target",
        "members",
        "next_lease_at",
        "period_s",
        "starved",
        "used",
    )

    def __init__(self, rate_per_s: float, burst: int, period_s: float, now: float) -> None:
        super().__init__(rate_per_s, burst)
        self.period_s = max(period_s, 0.001)
        self.tokens = 0.0
        self.stamp = now
        self.members = 1
        """Live members at the last round trip: the fleet share is ``rate / members``."""
        self.fallback = False
        self.next_lease_at = now + self.period_s
        self.used = 0
        """Tokens taken since the last lease was asked for."""
        self.starved = False
        """A token was wanted and none was there since the last lease was asked for."""
        self.last_target = 1
        self.last_lease = 0

    # --- sizes ------------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """The fleet bucket's size: ``burst``, but at least one sync period of the rate (else a
        fleet leasing once a period could never reach its rate)."""
        return max(self.burst, math.ceil(self.rate * self.period_s))

    @property
    def max_lease(self) -> int:
        return max(1, math.ceil(self.rate * self.period_s * PERIODS_HELD))

    @property
    def share(self) -> float:
        """This process's share of the fleet's rate."""
        return self.rate / max(self.members, 1)

    @property
    def share_burst(self) -> int:
        return max(1, self.burst // max(self.members, 1))

    # --- the limiter's interface -----------------------------------------------------------------

    @property
    def overdue_at(self) -> float:
        """When the next lease is overdue: from then on the pool refills at the share."""
        return self.next_lease_at + OVERDUE_PERIODS * self.period_s

    def level(self, now: float) -> float:
        if self.fallback:
            since, cap = self.stamp, float(self.share_burst)
        else:
            since, cap = max(self.stamp, self.overdue_at), max(self.tokens, float(self.share_burst))
        if now <= since:
            return self.tokens
        return min(cap, self.tokens + (now - since) * self.share)

    def take(self, now: float) -> bool:
        self.tokens = self.level(now)
        self.stamp = max(self.stamp, now)
        if self.tokens >= 1.0 - EPSILON:
            self.tokens -= 1.0
            self.used += 1
            return True
        self.starved = True
        return False

    def give_back(self, now: float) -> None:
        self.tokens = self.level(now) + 1.0
        self.stamp = max(self.stamp, now)
        self.used = max(0, self.used - 1)

    def ready_at(self, now: float, count: int = 1, not_before: float = -math.inf) -> float:
        start = now if now >= not_before else not_before
        tokens = self.level(start)
        if tokens >= count - EPSILON:
            return start
        local = max(start, self.overdue_at) + (count - tokens) / self.share
        if self.fallback or start >= self.overdue_at:
            return local if not self.fallback else start + (count - tokens) / self.share
        # The next lease brings tokens (the fleet share estimates how many each brings); an overdue
        # one, the share's refill.
        base = self.next_lease_at if self.next_lease_at > start else start + self.period_s
        return min(base + max(0.0, count - tokens - 1.0) / self.share, local)

    def reconfigure(self, rate_per_s: float, burst: int) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self.tokens = min(self.tokens, float(self.max_lease))

    def shared_facts(self) -> Mapping[str, Any] | None:
        return {
            "mode": "fallback" if self.fallback else "lease",
            "members": self.members,
            "share_per_s": round(self.share, 6),
            "last_lease": self.last_lease,
            "max_lease": self.max_lease,
        }

    # --- the fleet's side -----------------------------------------------------------------------

    def wanted(self, waiting: int) -> int:
        """Tokens to ask the fleet for now (``waiting``: attempts in line), and start a new period."""
        target = math.ceil(self.used * GROWTH) + waiting + 1
        if self.starved:
            target = max(target, 2 * self.last_target)
        target = min(target, self.max_lease)
        self.last_target = target
        self.used, self.starved = 0, False
        return max(0, target - math.floor(self.tokens + EPSILON))

    def lease_granted(self, granted: int, members: int, now: float) -> None:
        """A lease came at ``now``; the next is due a sync period later."""
        self.members = max(members, 1)
        self.last_lease = granted
        self.tokens = min(self.level(now) + granted, float(self.max_lease))
        self.stamp = now
        self.next_lease_at = now + self.period_s

    def fall_back(self, now: float) -> None:
        """Redis is away: refill locally at the fleet share from ``now`` (the pool left kept)."""
        self.fallback = True
        self.tokens = min(self.tokens, float(self.share_burst))
        self.stamp = now

    def recover(self, now: float) -> None:
        """Redis answers again: back to leases (the tokens left kept, a pool's worth at most)."""
        self.tokens = min(self.level(now), float(self.max_lease))
        self.fallback = False
        self.stamp = now


__all__ = ["LeasedBucket"]
