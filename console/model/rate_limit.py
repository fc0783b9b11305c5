"""A tool's rate limit as the console folds it from events: its tokens, its waits and refusals, and
the cooldown every caller shares.

Events only, as the bulkhead's occupancy is, so the board reads the same live, attached and
replayed (the console never asks its engine for ``engine.stats()``):

- the rate, burst, max wait and scope come from the manifest in force (``rate_limit``);
- the tokens are the engine's own :class:`~engine.strategies.rate_limit.TokenBucket`, full at first,
  fed a token for each attempt the rate limit let through: at its ``RateLimitWaited`` (a waiter's
  token is handed to it then) or else at its first later event (``BulkheadQueued``,
  ``BulkheadRejected``, ``AttemptStarted``: the rate limit runs before the bulkhead, in the same
  instant when nothing waits). An attached console starts with a full bucket: it is right again
  once the replayed events have drained it;
- waits, refusals and cooldowns are counted from ``RateLimitWaited``, ``RateLimitRejected`` and
  ``CooldownStarted``; a cooldown stands from its ``CooldownStarted`` to its ``until`` (engine
  time) or its ``CooldownEnded``, whichever comes first (an expired one is announced only by the
  next attempt);
- attempts waiting for their turn now are not known: the engine announces a wait when it ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from console.model.counting import RollingCount
from engine.events import CooldownEnded, CooldownStarted, RateLimitRejected, RateLimitWaited
from engine.strategies.rate_limit import RateLimitOptions, TokenBucket

CallKey = tuple[str | None, str]


@dataclass(frozen=True, slots=True)
class CooldownSeen:
    """A cooldown in force: every caller of the tool waits until ``until`` (engine time)."""

    until: float
    started_by: str | None
    """The call whose rate-limit error asked for it (from a fleet: a process)."""
    started_at: float
    retry_after_s: float | None
    """What the error asked for (its ``Retry-After``); None: the manifest's ``cooldown_ms``."""

    def remaining(self, now: float) -> float:
        return max(0.0, self.until - now)


@dataclass(frozen=True, slots=True)
class CooldownEndSeen:
    """How the last cooldown ended: ``expired`` or ``reset`` (by ``actor``)."""

    t: float
    how: str
    actor: str | None
    started_by: str | None


@dataclass(frozen=True, slots=True)
class RateLimitFigures:
    """A tool's rate limit at one moment, with the names ``engine.stats()`` gives its facts."""

    rate_per_s: float | None
    burst: int | None
    tokens: float | None
    """Tokens in the bucket (None: no rate, only the cooldown)."""
    max_wait_ms: float
    scope: str
    waited: int
    """Attempts let through after waiting, since the console began following."""
    rejected: int
    """Attempts refused as ``throttled``, since the console began following."""
    cooldowns: int
    """Cooldowns started or extended."""
    cooldown: CooldownSeen | None
    """The cooldown in force (None: none; one whose end has passed reads 0 s left)."""
    last_end: CooldownEndSeen | None
    waited_recent: int
    """Waits in the board's window."""
    rejected_recent: int
    """Refusals in the board's window."""

    def cooldown_remaining_s(self, now: float) -> float:
        """Seconds the tool still pauses for at ``now`` (0: none), as the engine's facts say."""
        return self.cooldown.remaining(now) if self.cooldown is not None else 0.0

    def cooldown_started_by(self, now: float) -> str | None:
        """Who set the cooldown in force at ``now`` (None without one), as the engine's facts say."""
        cooldown = self.cooldown
        return cooldown.started_by if cooldown is not None and cooldown.remaining(now) > 0 else None


def rate_limit_options(content: Mapping[str, Any] | None) -> RateLimitOptions | None:
    """The manifest's ``rate_limit`` section as the engine reads it, or None (absent, or odd)."""
    value = content.get("rate_limit") if content is not None else None
    if not isinstance(value, Mapping):
        return None
    try:
        return RateLimitOptions.model_validate(value)
    except ValueError:  # pydantic's ValidationError is one
        return None


class RateLimitFold:
    """The fold of one tool's rate-limit events (see the module docstring)."""

    __slots__ = (
        "_took",
        "bucket",
        "cooldown",
        "cooldowns",
        "last_end",
        "options",
        "rejected",
        "rejected_recent",
        "waited",
        "waited_recent",
    )

    def __init__(self, options: RateLimitOptions, window_s: int) -> None:
        self.options = options
        rate = options.rate_per_s
        self.bucket = TokenBucket(rate, options.bucket_size) if rate is not None else None
        self.cooldown: CooldownSeen | None = None
        self.last_end: CooldownEndSeen | None = None
        self.waited = self.rejected = self.cooldowns = 0
        self.waited_recent = RollingCount(window_s)
        self.rejected_recent = RollingCount(window_s)
        self._took: dict[CallKey, int] = {}
        """The attempt of each call whose token was taken at its ``RateLimitWaited``."""

    def reconfigure(self, options: RateLimitOptions) -> None:
        """A reload: the engine keeps the tokens (at most the new burst) and the cooldown."""
        rate = options.rate_per_s
        if rate is None:
            self.bucket = None
        elif self.bucket is None:
            self.bucket = TokenBucket(rate, options.bucket_size)
        else:
            self.bucket.reconfigure(rate, options.bucket_size)
        self.options = options

    # --- events ------------------------------------------------------------------------------

    def admitted(self, key: CallKey, attempt: int, t: float) -> bool:
        """An attempt's first event past the rate limit (queued or refused by the bulkhead, or
        started): it took a token then, unless it took it as its wait ended. True when this is
        the call's first event (its first attempt, which did not wait)."""
        if self._took.pop(key, None) == attempt:
            return False
        if self.bucket is not None:
            self.bucket.take(t)
        return attempt == 1

    def waited_for(self, e: RateLimitWaited) -> None:
        if self.bucket is not None:
            self.bucket.take(e.t)
        self._took[(e.turn_id, e.call_id)] = e.attempt
        self.waited += 1
        self.waited_recent.add(e.t)

    def refused(self, e: RateLimitRejected) -> None:
        self.rejected += 1
        self.rejected_recent.add(e.t)

    def cooldown_started(self, e: CooldownStarted) -> None:
        self.cooldowns += 1
        if self.cooldown is None or e.until > self.cooldown.until:  # extended, never shortened
            self.cooldown = CooldownSeen(e.until, e.call_id, e.t, e.retry_after_s)

    def cooldown_ended(self, e: CooldownEnded) -> None:
        self.cooldown = None
        self.last_end = CooldownEndSeen(e.t, e.how, e.actor, e.started_by)

    def call_ended(self, key: CallKey) -> None:
        if self._took:
            self._took.pop(key, None)

    def clear(self) -> None:
        """The engine restarted: its limiter starts afresh (full, no cooldown, nothing counted)."""
        options = self.options
        self.bucket = TokenBucket(options.rate_per_s, options.bucket_size) if options.rate_per_s else None
        self.cooldown, self.last_end = None, None
        self.waited = self.rejected = self.cooldowns = 0
        self.waited_recent.clear()
        self.rejected_recent.clear()
        self._took.clear()

    # --- reading -----------------------------------------------------------------------------

    def figures(self, now: float) -> RateLimitFigures:
        bucket, options = self.bucket, self.options
        return RateLimitFigures(
            rate_per_s=bucket.rate if bucket is not None else None,
            burst=bucket.burst if bucket is not None else None,
            tokens=round(bucket.level(now), 6) if bucket is not None else None,
            max_wait_ms=options.max_wait_ms, scope=options.scope, waited=self.waited,
            rejected=self.rejected, cooldowns=self.cooldowns, cooldown=self.cooldown,
            last_end=self.last_end, waited_recent=self.waited_recent.total(now),
            rejected_recent=self.rejected_recent.total(now),
        )  # fmt: skip
