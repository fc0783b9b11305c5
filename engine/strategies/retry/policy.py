"""Retry policy (spec-map retry): exponential backoff with jitter inside a total time budget.

Everything here is pure: the caller passes elapsed time, the attempt count and a
``random.Random``, so the math is tested without clocks.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.config import DAY_MS, NOT_BOOL

MAX_ATTEMPTS = 100
MAX_MULTIPLIER = 10.0
_EXP_LIMIT = 700.0
"""Under ``log(sys.float_info.max)`` (~709.8): ``multiplier ** n`` is finite while
``n × log(multiplier)`` is below it."""


class RetryPolicy(BaseModel):
    """The defaults of spec-map retry.defaults; every field can be overridden per tool (retry.overrides).

    Numbers are bounded (durations ≤ 24 h, attempts ≤ 100, multiplier ≤ 10), finite, and never
    booleans, so no policy can make the backoff math overflow.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    strategy: Literal["exponential_backoff", "fixed"] = "exponential_backoff"
    initial_delay_ms: Annotated[float, NOT_BOOL] = Field(default=100.0, ge=0, le=DAY_MS)
    multiplier: Annotated[float, NOT_BOOL] = Field(default=2.0, ge=1.0, le=MAX_MULTIPLIER)
    max_delay_ms: Annotated[float, NOT_BOOL] = Field(default=800.0, ge=0, le=DAY_MS)
    jitter_percent: Annotated[float, NOT_BOOL] = Field(default=10.0, ge=0, le=100)
    max_attempts: Annotated[int, NOT_BOOL] = Field(default=5, ge=1, le=MAX_ATTEMPTS)
    """Total attempts, the first included."""
    max_total_time_ms: Annotated[float, NOT_BOOL] = Field(default=2000.0, gt=0, le=DAY_MS)
    """No retry starts later than this after the first attempt started."""

    def base_delay_ms(self, retry: int) -> float:
        """Delay before retry number ``retry`` (1 = the second attempt), before jitter.

        ``exponential_backoff``: ``initial_delay_ms × multiplier^(retry−1)``, every delay capped at
        ``max_delay_ms`` — the first included, as tenacity's ``wait_exponential(max=…)`` caps it, so
        an initial delay above the cap is the cap (spec-map retry.backoff). ``fixed``:
        ``initial_delay_ms`` every time, whatever ``max_delay_ms`` says.
        """
        initial, cap = self.initial_delay_ms, self.max_delay_ms
        if self.strategy == "fixed":
            return initial
        if retry <= 1 or initial == 0 or self.multiplier == 1.0 or initial >= cap:
            return min(initial, cap)
        # Cap before multiplying: once the exponent reaches the cap (compared in log space, each
        # side's own log: ``cap / initial`` overflows for a subnormal initial delay),
        # ``multiplier ** n`` is never computed, so no retry number can overflow it.
        growth = (retry - 1) * math.log(self.multiplier)
        if growth >= math.log(cap) - math.log(initial):
            return cap
        if growth > _EXP_LIMIT:  # a tiny initial delay: the power alone would overflow
            return min(math.exp(math.log(initial) + growth), cap)
        return min(initial * self.multiplier ** (retry - 1), cap)

    def delay_s(self, retry: int, rng: random.Random) -> float:
        """Jittered delay: capped first, then ±jitter (800 ms ± 80 ms; spec-map retry.jitter)."""
        base = self.base_delay_ms(retry)
        spread = self.jitter_percent / 100.0
        if spread:
            base *= 1.0 + rng.uniform(-spread, spread)
        return base / 1000.0


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """Whether to retry, after how long, and why."""

    retry: bool
    delay_s: float
    reason: str


def plan_retry(
    policy: RetryPolicy,
    *,
    attempts_made: int,
    elapsed_s: float,
    rng: random.Random,
    retry_after_s: float | None = None,
    remaining_s: float | None = None,
) -> RetryPlan:
    """Decide the next retry after a transient failure.

    ``elapsed_s`` counts from the first attempt's start: a retry that cannot start within
    ``max_total_time_ms`` is not made (spec-map retry.total-time). ``remaining_s`` is an outer budget (the
    turn's deadline): a retry is only made if it would start with time left to run.
    """
    if attempts_made >= policy.max_attempts:
        return RetryPlan(False, 0.0, f"max attempts ({policy.max_attempts}) reached")
    delay_s = policy.delay_s(attempts_made, rng)
    retry_left_s = policy.max_total_time_ms / 1000.0 - elapsed_s
    if (
        retry_after_s is None
        and retry_left_s > 0
        and delay_s <= retry_left_s
        and (remaining_s is None or (remaining_s > 0 and delay_s < remaining_s))
    ):  # the usual case: within every budget
        return _retry_plan(attempts_made, delay_s, "backoff")
    # (name, seconds left, whether the retry must also start before it ends); a name of None is
    # the policy's own budget, named only if a message needs it.
    budgets: tuple[tuple[str | None, float, bool], ...] = ((None, retry_left_s, False),)
    if remaining_s is not None:
        budgets += (("turn", remaining_s, True),)
    if retry_after_s is not None:
        for name, left_s, _ in budgets:
            if retry_after_s > left_s:
                return RetryPlan(
                    False,
                    0.0,
                    f"server asked to retry after {retry_after_s:g}s, beyond the remaining "
                    f"{name or _retry_budget(policy)} budget of {max(left_s, 0.0):.3g}s",
                )
        delay_s = max(delay_s, retry_after_s)
    for name, left_s, must_finish in budgets:
        if left_s <= 0:
            return RetryPlan(False, 0.0, f"the {name or _retry_budget(policy)} time budget is spent")
        if delay_s > left_s or (must_finish and delay_s >= left_s):
            return RetryPlan(
                False,
                0.0,
                f"retry {attempts_made} would start in {delay_s * 1000:.0f} ms, past the "
                f"remaining {name or _retry_budget(policy)} budget of {left_s * 1000:.0f} ms",
            )
    why = "server Retry-After" if retry_after_s is not None and delay_s == retry_after_s else "backoff"
    return _retry_plan(attempts_made, delay_s, why)


def _retry_plan(attempts_made: int, delay_s: float, why: str) -> RetryPlan:
    return RetryPlan(True, delay_s, f"retry {attempts_made} in {delay_s * 1000:.0f} ms ({why})")


def _retry_budget(policy: RetryPolicy) -> str:
    return f"{policy.max_total_time_ms:g} ms retry"
