"""Backoff math and the retry decision, without clocks."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from engine.config import DAY_MS
from engine.engine import Engine
from engine.manifest import ToolManifest
from engine.strategies.breaker.machine import BreakerConfig
from engine.strategies.retry.policy import MAX_ATTEMPTS, MAX_MULTIPLIER, RetryPolicy, plan_retry


def test_spec_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.initial_delay_ms, policy.multiplier, policy.max_delay_ms) == (100, 2, 800)
    assert (policy.jitter_percent, policy.max_attempts, policy.max_total_time_ms) == (10, 5, 2000)


def test_base_delays_double_up_to_the_cap() -> None:
    policy = RetryPolicy()
    assert [policy.base_delay_ms(r) for r in range(1, 7)] == [100, 200, 400, 800, 800, 800]


def test_fixed_strategy_keeps_the_initial_delay() -> None:
    policy = RetryPolicy(strategy="fixed", initial_delay_ms=250, max_delay_ms=250)
    assert [policy.base_delay_ms(r) for r in range(1, 4)] == [250, 250, 250]


@given(seed=st.integers(), retry=st.integers(min_value=1, max_value=12), jitter=st.floats(0, 100))
def test_jitter_stays_within_its_percentage_of_the_capped_delay(seed: int, retry: int, jitter: float) -> None:
    policy = RetryPolicy(jitter_percent=jitter)
    base = policy.base_delay_ms(retry) / 1000
    delay = policy.delay_s(retry, random.Random(seed))
    assert base * (1 - jitter / 100) - 1e-12 <= delay <= base * (1 + jitter / 100) + 1e-12


def test_same_seed_same_delays() -> None:
    policy = RetryPolicy()
    first = [policy.delay_s(r, random.Random(42)) for r in range(1, 5)]
    assert first == [policy.delay_s(r, random.Random(42)) for r in range(1, 5)]


def test_zero_jitter_is_exact() -> None:
    assert RetryPolicy(jitter_percent=0).delay_s(3, random.Random()) == pytest.approx(0.4)


def test_an_initial_delay_above_the_cap_is_capped_like_every_later_one() -> None:
    """As tenacity's ``wait_exponential(max=…)``: the first delay is capped too (it was refused)."""
    policy = RetryPolicy(initial_delay_ms=1000, max_delay_ms=800, jitter_percent=0)
    assert [policy.base_delay_ms(r) for r in range(1, 4)] == [800, 800, 800]
    assert policy.delay_s(1, random.Random(0)) == pytest.approx(0.8)
    assert RetryPolicy(initial_delay_ms=5, max_delay_ms=0).base_delay_ms(1) == 0


def test_a_fixed_delay_is_any_delay_the_cap_plays_no_part() -> None:
    policy = RetryPolicy(strategy="fixed", initial_delay_ms=1000, max_delay_ms=800)
    assert [policy.base_delay_ms(r) for r in range(1, 4)] == [1000, 1000, 1000]


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError):
        RetryPolicy(max_retries=3)  # type: ignore[call-arg]


def plan(**kw: float) -> tuple[bool, float, str]:
    defaults: dict[str, float] = {"attempts_made": 1, "elapsed_s": 0.0}
    args = {**defaults, **kw}
    policy = RetryPolicy(jitter_percent=0)
    result = plan_retry(policy, rng=random.Random(0), **args)  # type: ignore[arg-type]
    return result.retry, result.delay_s, result.reason


def test_retries_with_backoff_while_attempts_and_budget_remain() -> None:
    assert plan(attempts_made=1) == (True, pytest.approx(0.1), "retry 1 in 100 ms (backoff)")
    assert plan(attempts_made=3, elapsed_s=0.5)[:2] == (True, pytest.approx(0.4))


def test_stops_at_max_attempts() -> None:
    retry, _, reason = plan(attempts_made=5)
    assert not retry
    assert reason == "max attempts (5) reached"


def test_a_retry_that_cannot_start_within_the_total_budget_is_not_made() -> None:
    assert plan(attempts_made=4, elapsed_s=1.1)[0], "starts at 1.9 s: inside the 2 s budget"
    retry, _, reason = plan(attempts_made=4, elapsed_s=1.3)
    assert not retry
    assert "past the remaining 2000 ms retry budget of 700 ms" in reason


def test_spent_budget_says_so() -> None:
    retry, _, reason = plan(elapsed_s=30.0)
    assert not retry
    assert reason == "the 2000 ms retry time budget is spent"


def test_retry_after_is_honoured_when_it_fits() -> None:
    retry, delay, reason = plan(retry_after_s=1.5)
    assert retry
    assert delay == pytest.approx(1.5)
    assert "server Retry-After" in reason


def test_retry_after_beyond_the_budget_gives_up_at_once_and_says_why() -> None:
    retry, delay, reason = plan(retry_after_s=30.0, elapsed_s=0.2)
    assert (retry, delay) == (False, 0.0)
    assert reason == "server asked to retry after 30s, beyond the remaining 2000 ms retry budget of 1.8s"


def test_short_retry_after_does_not_shorten_the_backoff() -> None:
    assert plan(attempts_made=3, retry_after_s=0.01)[1] == pytest.approx(0.4)


def test_turn_budget_caps_retries_more_tightly() -> None:
    retry, _, reason = plan(remaining_s=0.1)
    assert not retry, "a retry starting exactly at the turn deadline could not finish"
    assert "turn" in reason
    assert plan(remaining_s=0.5)[0]


# --- validation at the edges and backoff that cannot overflow ---------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"max_attempts": True},
        {"max_attempts": 2000},
        {"max_attempts": 10**21},
        {"initial_delay_ms": False},
        {"initial_delay_ms": math.inf, "max_delay_ms": math.inf},
        {"max_delay_ms": 1e308},
        {"max_total_time_ms": 1e308},
        {"multiplier": 1e300},
        {"multiplier": True},
    ],
    ids=repr,
)
def test_booleans_infinities_and_huge_numbers_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy(**bad)


def test_the_largest_policy_is_accepted() -> None:
    policy = RetryPolicy(
        initial_delay_ms=DAY_MS,
        max_delay_ms=DAY_MS,
        multiplier=10,
        max_attempts=100,
        max_total_time_ms=DAY_MS,
    )
    assert policy.base_delay_ms(99) == DAY_MS


def test_backoff_caps_before_it_multiplies() -> None:
    """``2.0 ** 1024`` used to raise OverflowError: 1,025 attempts of a 0 ms backoff did."""
    assert RetryPolicy().base_delay_ms(5000) == 800
    assert RetryPolicy(multiplier=10).base_delay_ms(10**9) == 800
    assert RetryPolicy(initial_delay_ms=0).base_delay_ms(5000) == 0
    assert RetryPolicy(multiplier=1).base_delay_ms(5000) == 100


_bounded_ms = st.floats(0, DAY_MS)
_policies = st.builds(
    lambda strategy, a, b, multiplier, jitter, attempts, budget: RetryPolicy(
        strategy=strategy,
        initial_delay_ms=a,
        max_delay_ms=b,
        multiplier=multiplier,
        jitter_percent=jitter,
        max_attempts=attempts,
        max_total_time_ms=budget,
    ),
    st.sampled_from(["exponential_backoff", "fixed"]),
    _bounded_ms,
    _bounded_ms,
    st.floats(1, MAX_MULTIPLIER),
    st.floats(0, 100),
    st.integers(1, MAX_ATTEMPTS),
    st.floats(0.001, DAY_MS),
)


@given(
    policy=_policies,
    attempts_made=st.integers(1, MAX_ATTEMPTS),
    elapsed_s=st.floats(0, 2 * DAY_MS / 1000),
    retry_after_s=st.none() | st.floats(0, 1e9),
    remaining_s=st.none() | st.floats(-1, 1e9),
    seed=st.integers(),
)
def test_plan_retry_never_raises_and_delays_are_finite_and_capped(
    policy: RetryPolicy,
    attempts_made: int,
    elapsed_s: float,
    retry_after_s: float | None,
    remaining_s: float | None,
    seed: int,
) -> None:
    plan = plan_retry(
        policy,
        attempts_made=attempts_made,
        elapsed_s=elapsed_s,
        rng=random.Random(seed),
        retry_after_s=retry_after_s,
        remaining_s=remaining_s,
    )
    assert math.isfinite(plan.delay_s)
    longest_ms = policy.initial_delay_ms if policy.strategy == "fixed" else policy.max_delay_ms
    cap_s = longest_ms * (1 + policy.jitter_percent / 100) / 1000
    assert 0 <= plan.delay_s <= max(cap_s, retry_after_s or 0) + 1e-9
    assert plan.reason
    if plan.retry:
        assert attempts_made < policy.max_attempts


def test_a_subnormal_initial_delay_grows_without_overflow() -> None:
    """Found by hypothesis: ``cap / initial`` overflowed to inf, so the cap check never held and
    ``8 ** 342`` overflowed."""
    policy = RetryPolicy(initial_delay_ms=5e-324, max_delay_ms=1.0, multiplier=8.0, jitter_percent=0)
    assert policy.base_delay_ms(343) == pytest.approx(2.0**-1074 * 8.0**171 * 8.0**171, rel=1e-9)
    assert policy.base_delay_ms(400) == 1.0


@given(policy=_policies, retry=st.integers(1, 10 * MAX_ATTEMPTS))
def test_the_backoff_rule(policy: RetryPolicy, retry: int) -> None:
    """``fixed``: the initial delay, always. Exponential: ``initial × multiplier^(retry−1)`` capped at
    ``max_delay_ms`` — the first delay too — so never above the cap and never shrinking."""
    base = policy.base_delay_ms(retry)
    if policy.strategy == "fixed":
        assert base == policy.initial_delay_ms
        return
    initial, cap = policy.initial_delay_ms, policy.max_delay_ms
    if initial == 0 or cap == 0:
        expected = 0.0
    else:  # in log space: the uncapped delay may be far past any float
        exponent = math.log(initial) + (retry - 1) * math.log(policy.multiplier)
        expected = cap if exponent >= math.log(cap) else math.exp(exponent)
    assert base == pytest.approx(expected, rel=1e-9)
    assert base <= policy.max_delay_ms
    assert policy.base_delay_ms(retry + 1) >= base


@pytest.mark.anyio
@pytest.mark.parametrize(
    "policy",
    [
        RetryPolicy(initial_delay_ms=0, max_attempts=MAX_ATTEMPTS),
        RetryPolicy(
            initial_delay_ms=1,
            multiplier=MAX_MULTIPLIER,
            max_delay_ms=DAY_MS,
            max_attempts=MAX_ATTEMPTS,
            max_total_time_ms=DAY_MS,
        ),
    ],
    ids=["zero-backoff", "largest-backoff"],
)
async def test_try_call_never_raises_at_the_limits(policy: RetryPolicy) -> None:
    calls: list[int] = []

    async def down() -> None:
        calls.append(1)
        raise ConnectionError("connection reset by peer")

    manifest = ToolManifest(
        id="down", retry_policy=policy, circuit_breaker=BreakerConfig(failure_threshold=1000)
    )
    engine = Engine([manifest], rng=random.Random(0))
    engine.register("down", down)

    result = await engine.try_call("down")

    assert not result.ok
    assert result.attempts == len(calls) >= 2
    if policy.initial_delay_ms == 0:
        assert result.attempts == MAX_ATTEMPTS
