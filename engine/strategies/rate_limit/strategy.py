"""Internal: the rate limit as a strategy of a tool's pipeline. Import it from
:mod:`engine.strategies.rate_limit`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from engine.kinds import ErrorKind
from engine.strategies.base import CallView, Refusal, Strategy
from engine.strategies.rate_limit.cooldown import Cooldown
from engine.strategies.rate_limit.events import (
    CooldownEnded,
    CooldownStarted,
    RateLimitRejected,
    RateLimitWaited,
)
from engine.strategies.rate_limit.limiter import Denial, RateLimiter
from engine.strategies.rate_limit.options import RateLimitOptions

if TYPE_CHECKING:
    from engine.classify import Classification
    from engine.events import Event


def _s(seconds: float) -> str:
    return f"{round(seconds, 3):g} s"


class RateLimitStrategy(Strategy[RateLimitOptions]):
    """Attempts of the tool start at most ``rate_per_s`` a second (``burst`` at once), and none
    while the tool cools down after a rate-limit error; an attempt waits for its turn, first come
    first served, up to ``max_wait_ms`` and its turn's deadline, or is refused unsent as
    ``throttled`` at once. ``scope: fleet`` behaves as ``process`` until a fleet is attached."""

    section = "rate_limit"
    options_type = RateLimitOptions

    def __init__(self, tool_id: str, options: RateLimitOptions) -> None:
        super().__init__(tool_id, options)
        self.state = RateLimiter(options)
        """The bucket, the cooldown and the line: handed from strategy to strategy across reloads."""

    def handover(self, previous: Strategy[RateLimitOptions]) -> None:
        """Keep the previous limiter — its tokens (at most the new burst), its cooldown's absolute
        end and its waiters — under the new options."""
        if isinstance(previous, RateLimitStrategy):
            previous.state.reconfigure(self.options)
            self.state = previous.state

    def admit_now(self, call: CallView) -> bool:
        return self.state.try_acquire(call.clock())

    async def admit(self, call: CallView) -> Refusal | None:
        limiter = self.state
        now = call.clock()
        self._notice_cooldown_end(call, now)
        if limiter.try_acquire(now):
            return None
        until = now + self.options.max_wait_ms / 1000.0
        deadline = call.deadline
        by_turn = deadline is not None and deadline < until
        if by_turn:
            assert deadline is not None
            until = deadline
        denial = await limiter.acquire(now, until, call.clock)
        if denial is not None:
            return self._refused(call, denial, by_turn)
        later = call.clock()
        if later > now:
            self._notice_cooldown_end(call, later)
            if call.observed:
                call.announce(
                    RateLimitWaited(
                        at=call.wall_clock(), t=later, tool_id=call.tool_id, call_id=call.call_id,
                        turn_id=call.turn_id, attempt=call.attempt, waited_ms=(later - now) * 1000.0,
                    )
                )  # fmt: skip
        return None

    def attempt_failed(self, call: CallView, classification: Classification) -> None:
        cooldown_s = self.cooldown_for(classification)
        if cooldown_s is None:
            return
        limiter = self.state
        now = call.clock()
        extended = limiter.cooldown.active and limiter.cooldown.until > now
        retry_after_s = classification.retry_after_s
        cooldown = Cooldown(now + cooldown_s, call.call_id, now, retry_after_s)
        if limiter.extend_cooldown(cooldown, now) and call.observed:
            call.announce(
                CooldownStarted(
                    at=call.wall_clock(), t=now, tool_id=call.tool_id, call_id=call.call_id,
                    turn_id=call.turn_id, attempt=call.attempt, until=cooldown.until,
                    cooldown_s=cooldown_s, retry_after_s=retry_after_s, extended=extended,
                )
            )  # fmt: skip

    def cooldown_for(self, classification: Classification) -> float | None:
        """How long a failure pauses the tool: a rate-limit error for what it asked (its
        ``Retry-After``) or else ``cooldown_ms``; any other transient failure that asked to be
        retried later (a 503 with a ``Retry-After``) for what it asked; at most
        ``max_cooldown_ms``. None: it does not."""
        options = self.options
        retry_after_s = classification.retry_after_s
        if classification.kind is ErrorKind.RATE_LIMIT:
            seconds = options.cooldown_ms / 1000.0 if retry_after_s is None else retry_after_s
        elif retry_after_s is not None and classification.transient:
            seconds = retry_after_s
        else:
            return None
        seconds = min(seconds, options.max_cooldown_ms / 1000.0)
        return seconds if seconds > 0 else None

    def operator_reset(self, now: float, at: float, actor: str) -> Event | None:
        ended = self.state.end_cooldown(now)
        if ended is None:
            return None
        return CooldownEnded(
            at=at, t=now, tool_id=self.tool_id, started_by=ended.started_by, until=ended.until,
            how="reset", actor=actor,
        )  # fmt: skip

    def facts(self, now: float) -> Mapping[str, Any]:
        facts = {
            **asdict(self.state.snapshot(now)),
            "max_wait_ms": self.options.max_wait_ms,
            "scope": self.options.scope,
        }
        shared = self.state.bucket.shared_facts() if self.state.bucket is not None else None
        if shared is not None:  # a fleet's lease: its mode (lease or fallback) and share
            facts["fleet_rate"] = dict(shared)
        return facts

    def _notice_cooldown_end(self, call: CallView, now: float) -> None:
        ended = self.state.expire_cooldown(now)
        if ended is not None and call.observed:
            call.announce(
                CooldownEnded(
                    at=call.wall_clock(), t=now, tool_id=call.tool_id, started_by=ended.started_by,
                    until=ended.until, how="expired", call_id=call.call_id, turn_id=call.turn_id,
                )
            )  # fmt: skip

    def _refused(self, call: CallView, denial: Denial, by_turn: bool) -> Refusal:
        now = call.clock()
        deadline = call.deadline
        if by_turn and deadline is not None:
            limit = f"the turn ends in {_s(max(0.0, deadline - now))}"
        else:
            limit = f"max wait {_s(self.options.max_wait_ms / 1000.0)}"
        if denial.cooldown_s > 0:
            reason = f"rate limit: cooling down for {_s(denial.cooldown_s)} more"
            if denial.wait_s - denial.cooldown_s > 0.001:
                reason += f" (next token in {_s(denial.wait_s)})"
        else:
            reason = f"rate limit: next token in {_s(denial.wait_s)}"
        reason = f"{reason}, {limit}"
        if call.observed:
            call.announce(
                RateLimitRejected(
                    at=call.wall_clock(), t=now, tool_id=call.tool_id, call_id=call.call_id,
                    turn_id=call.turn_id, attempt=call.attempt, reason=reason,
                    wait_needed_ms=denial.wait_s * 1000.0, cooldown_ms=denial.cooldown_s * 1000.0,
                    waited_ms=denial.waited_s * 1000.0,
                )
            )  # fmt: skip
        return Refusal(ErrorKind.THROTTLED, reason, self.section)
