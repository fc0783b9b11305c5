"""A rate limit: attempts of one tool start at most ``rate_per_s`` a second (``burst`` at once),
and none while the tool cools down after a rate-limit error — a cooldown every caller shares.

A token bucket is applied before each attempt: an attempt that finds no token waits for one —
first come first served — within ``max_wait_ms`` and its turn's deadline, or is refused at once,
unsent, as ``throttled`` when the wait it would need is longer (``rate limit: next token in
1.2 s, max wait 0.5 s``). When an attempt fails with a rate-limit error (a 429, a provider's
rate-limit body; or any transient error with a ``Retry-After``), the tool pauses for every
caller until the time the error asked for (``cooldown_ms`` when it asked for none, at most
``max_cooldown_ms``), instead of each caller discovering the limit on its own: attempts during
the cooldown wait for its end or are refused at once with what is left of it. A later error
extends the cooldown, never shortens it; ``engine.reset(tool)`` ends it. In a manifest::

    rate_limit: {rate_per_s: 5, burst: 10, max_wait_ms: 2000, scope: process}

A hot reload keeps the tokens (at most the new burst), the cooldown's absolute end and the
waiters. ``scope: fleet`` is accepted; until a fleet is attached it behaves as ``process`` (each
process its own bucket and cooldown). The arithmetic is pure and apart (:class:`TokenBucket`,
:class:`Cooldown`): a fleet sets a cooldown with :meth:`RateLimiter.extend_cooldown`.
"""

from engine.strategies.rate_limit.bucket import TokenBucket
from engine.strategies.rate_limit.cooldown import NO_COOLDOWN, Cooldown
from engine.strategies.rate_limit.events import (
    CooldownEnded,
    CooldownStarted,
    RateLimitRejected,
    RateLimitWaited,
)
from engine.strategies.rate_limit.limiter import Denial, RateLimiter, RateLimitFacts
from engine.strategies.rate_limit.options import RateLimitOptions
from engine.strategies.rate_limit.strategy import RateLimitStrategy

__all__ = [
    "NO_COOLDOWN",
    "Cooldown",
    "CooldownEnded",
    "CooldownStarted",
    "Denial",
    "RateLimitFacts",
    "RateLimitOptions",
    "RateLimitRejected",
    "RateLimitStrategy",
    "RateLimitWaited",
    "RateLimiter",
    "TokenBucket",
]
