"""Internal: a rate limiter's state — a token bucket, a cooldown and the line of attempts waiting
for their turn. Import it from :mod:`engine.strategies.rate_limit`.

The arithmetic is pure and kept apart (:mod:`.bucket`, :mod:`.cooldown`); this module adds the
waiting. Tokens are handed out in arrival order, never raced for: :meth:`RateLimiter.try_acquire`
(the fast path, no await) never takes one while anyone waits, and only the first waiter keeps time
— it sleeps until its token is due (or the cooldown ends) and then hands out every token that is
there, first come first served; the next waiter takes over the watch. The others wait to be woken.

A waiter is let in only when its token is due within its own limit (``until``: its max wait, its
turn's deadline), so the line never holds an attempt in vain: what it would need is known at once
(the bucket's arithmetic over the waiters ahead) and a longer wait is refused before it starts. A
cooldown that begins while attempts wait (another caller's 429) re-plans the line at once: those
whose limit it passes are refused then, with what they would have needed. A waiter cancelled
(its turn's deadline, a stop) leaves the line; one cancelled as it was handed a token gives the
token back: none is lost.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from engine.strategies.rate_limit.bucket import TokenBucket
from engine.strategies.rate_limit.cooldown import NO_COOLDOWN, Cooldown
from engine.strategies.rate_limit.options import RateLimitOptions

# A waiter's states: waiting, then exactly one of the others (set synchronously, never undone).
_WAITING, _GRANTED, _REFUSED, _ABANDONED = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class Denial:
    """Why an attempt was not let through: the wait it would have needed."""

    wait_s: float
    """From the moment it was refused until its token would have been due."""
    cooldown_s: float
    """Of that, the cooldown left then (0: none)."""
    waited_s: float = 0.0
    """How long it had waited before being refused (0: refused at once)."""


@dataclass(frozen=True, slots=True)
class RateLimitFacts:
    """A rate limiter's state at one moment, as ``engine.stats()`` and error handlers see it."""

    rate_per_s: float | None
    burst: int | None
    tokens: float | None
    """Tokens in the bucket now (None: no rate, only the cooldown)."""
    waiting: int
    """Attempts waiting for their turn now."""
    waited: int
    """Attempts let through after waiting (for a token or a cooldown's end)."""
    rejected: int
    """Attempts refused: their wait would have been longer than they could wait."""
    cooldowns: int
    """Cooldowns started or extended by rate-limit errors (and a fleet's)."""
    cooldown_remaining_s: float
    """Seconds the tool still pauses for (0: none)."""
    cooldown_started_by: str | None
    """Who set the cooldown in force (a call id; from a fleet, a process); None without one."""


class _Waiter:
    __slots__ = ("denial", "event", "state", "until")

    def __init__(self, until: float) -> None:
        self.until = until
        self.event = anyio.Event()
        self.state = _WAITING
        self.denial: Denial | None = None


class RateLimiter:
    """The bucket, the cooldown and the waiters of one tool's rate limit; a reload keeps all three."""

    def __init__(self, options: RateLimitOptions) -> None:
        rate = options.rate_per_s
        self.bucket = TokenBucket(rate, options.bucket_size) if rate is not None else None
        """None: no rate of its own (only the cooldown holds attempts back)."""
        self.cooldown = NO_COOLDOWN
        """The cooldown in force (:data:`NO_COOLDOWN`: none): replaced, never changed in place."""
        self.waited = 0
        self.rejected = 0
        self.cooldowns = 0
        self._queue: deque[_Waiter] = deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    # --- admission ----------------------------------------------------------------------------

    def try_acquire(self, now: float) -> bool:
        """Take a token at once when nobody waits and no cooldown stands: the fast path."""
        if self._queue or self.cooldown is not NO_COOLDOWN:
            return False
        bucket = self.bucket
        return bucket is None or bucket.take(now)

    def ready_at(self, now: float, position: int) -> float:
        """When the ``position``-th in line (1: the first) gets its token, from ``now``."""
        not_before = self.cooldown.until
        bucket = self.bucket
        if bucket is None:
            return now if now >= not_before else not_before
        return bucket.ready_at(now, position, not_before)

    async def acquire(self, now: float, until: float, clock: Callable[[], float]) -> Denial | None:
        """Take a token, waiting in line for it until ``until`` at the latest: None when let
        through, else the :class:`Denial`. Refused at once, without awaiting, when the token would
        come after ``until``. ``clock`` is engine time (the call's)."""
        if self._queue:
            self._dispatch(now)
        ready = self.ready_at(now, len(self._queue) + 1)
        if ready <= now and not self._queue:
            bucket = self.bucket
            if bucket is None or bucket.take(now):
                return None
            ready = self.ready_at(now, 1)
        if ready > until:
            self.rejected += 1
            return Denial(ready - now, self.cooldown.remaining(now))
        waiter = _Waiter(until)
        self._queue.append(waiter)
        try:
            await self._wait(waiter, clock)
        except BaseException:
            self._give_up(waiter, clock())
            raise
        if waiter.state == _GRANTED:
            self.waited += 1
            return None
        self.rejected += 1
        denial = waiter.denial
        assert denial is not None  # set when refused
        return Denial(denial.wait_s, denial.cooldown_s, clock() - now)

    async def _wait(self, waiter: _Waiter, clock: Callable[[], float]) -> None:
        """Until ``waiter`` is let through or refused; keeping time while it is first in line."""
        while waiter.state == _WAITING:
            event = waiter.event
            if event.is_set():  # woken to take the watch, or to re-plan it
                event = waiter.event = anyio.Event()
            if self._queue[0] is not waiter:
                await event.wait()
                continue
            now = clock()
            self._dispatch(now)
            if waiter.state != _WAITING:
                return
            # Not refused here if its token comes a little after its limit: a late wake-up (a busy
            # loop) shifts every turn after it; only a cooldown or a reload re-plans the line.
            ready = self.ready_at(now, 1)
            with anyio.move_on_after(ready - now):
                await event.wait()

    def _dispatch(self, now: float) -> None:
        """Hand out the tokens there are at ``now`` to the waiters, first come first served; wake
        the new first waiter to keep time."""
        queue = self._queue
        head = queue[0] if queue else None
        bucket = self.bucket
        while queue and self.cooldown.until <= now:
            if bucket is not None and not bucket.take(now):
                break
            waiter = queue.popleft()
            waiter.state = _GRANTED
            waiter.event.set()
        if queue and queue[0] is not head:
            queue[0].event.set()

    def _refuse(self, waiter: _Waiter, now: float, ready: float) -> None:
        waiter.state = _REFUSED
        waiter.denial = Denial(ready - now, self.cooldown.remaining(now))
        waiter.event.set()

    def _replan(self, now: float) -> None:
        """The line's turns moved later (a cooldown began, a reload): refuse at once the waiters
        whose token would now come after their limit; wake the first to re-plan its watch."""
        kept: deque[_Waiter] = deque()
        for waiter in self._queue:
            ready = self.ready_at(now, len(kept) + 1)
            if ready > waiter.until:
                self._refuse(waiter, now, ready)
            else:
                kept.append(waiter)
        self._queue = kept
        if kept:
            kept[0].event.set()

    def _give_up(self, waiter: _Waiter, now: float) -> None:
        """A waiter was cancelled: out of the line, and a token it had been handed given back."""
        if waiter.state == _GRANTED:
            if self.bucket is not None:
                self.bucket.give_back(now)
            self._dispatch(now)
        elif waiter.state == _WAITING:
            waiter.state = _ABANDONED
            queue = self._queue
            first = queue[0] is waiter
            queue.remove(waiter)
            if first and queue:
                queue[0].event.set()

    def refilled(self, now: float) -> None:
        """Tokens came into the bucket from elsewhere (a fleet's lease): hand them out to the line
        now; the first waiter left re-plans its watch."""
        if self._queue:
            self._dispatch(now)
            if self._queue:
                self._queue[0].event.set()

    # --- the cooldown -------------------------------------------------------------------------

    def extend_cooldown(self, cooldown: Cooldown, now: float) -> bool:
        """Pause the tool until ``cooldown.until`` unless a later end stands already (a cooldown is
        extended, never shortened); waiters it delays past their limit are refused at once.
        True when it changed the end. A fleet's sync calls this with another process's cooldown."""
        if not cooldown.later_than(self.cooldown) or cooldown.until <= now:
            return False
        self.cooldown = cooldown
        self.cooldowns += 1
        if self._queue:
            self._replan(now)
        return True

    def expire_cooldown(self, now: float) -> Cooldown | None:
        """The cooldown that was over by ``now`` and is now cleared (once), or None."""
        cooldown = self.cooldown
        if cooldown is NO_COOLDOWN or cooldown.until > now:
            return None
        self.cooldown = NO_COOLDOWN
        return cooldown

    def end_cooldown(self, now: float) -> Cooldown | None:
        """End the cooldown at once (an operator's reset): the one it ended, or None; waiters get
        the tokens there are."""
        cooldown = self.cooldown
        if cooldown is NO_COOLDOWN:
            return None
        self.cooldown = NO_COOLDOWN
        if self._queue:
            self._dispatch(now)
            if self._queue:
                self._queue[0].event.set()  # its watch was set for the cooldown's end
        return cooldown if cooldown.until > now else None

    # --- reloads and facts --------------------------------------------------------------------

    def reconfigure(self, options: RateLimitOptions) -> None:
        """Take a new rate and burst (a hot reload), keeping the tokens (at most the new burst),
        the cooldown's absolute end and the line; waiters the change delays past their limit are
        refused at once."""
        rate = options.rate_per_s
        if rate is None:
            self.bucket = None
        elif self.bucket is None:
            self.bucket = TokenBucket(rate, options.bucket_size)
        else:
            self.bucket.reconfigure(rate, options.bucket_size)
        if self._queue:  # waiters: the reload runs on their event loop
            self._replan(anyio.current_time())

    def snapshot(self, now: float) -> RateLimitFacts:
        """The limiter's state at engine time ``now``; reading it changes nothing."""
        bucket = self.bucket
        cooldown = self.cooldown
        remaining = cooldown.remaining(now)
        return RateLimitFacts(
            rate_per_s=bucket.rate if bucket is not None else None,
            burst=bucket.burst if bucket is not None else None,
            tokens=round(bucket.level(now), 6) if bucket is not None else None,
            waiting=len(self._queue),
            waited=self.waited,
            rejected=self.rejected,
            cooldowns=self.cooldowns,
            cooldown_remaining_s=remaining,
            cooldown_started_by=cooldown.started_by if remaining > 0 else None,
        )
