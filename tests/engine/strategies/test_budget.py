"""The retry budget: its window's arithmetic, its options, and its hooks, without clocks."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from engine.events import Event, event_from_dict
from engine.strategies.base import Strategy, overrides
from engine.strategies.budget import (
    BUCKETS,
    SHARED_TOOL_ID,
    RetryBudgetFacts,
    RetryBudgetOptions,
    RetryBudgetSpent,
    RetryBudgetStrategy,
    RetryBudgetWindow,
)

WALL = 1_762_338_645.0


def window(percent: float = 20.0, per_s: float = 0.0, window_s: float = 10.0) -> RetryBudgetWindow:
    return RetryBudgetWindow(
        RetryBudgetOptions(budget_percent=percent, min_retries_per_s=per_s, window_s=window_s)
    )


def spend(budget: RetryBudgetWindow, now: float, times: int) -> list[str | None]:
    return [budget.try_spend(now) for _ in range(times)]


def start_calls(budget: RetryBudgetWindow, now: float, calls: int) -> None:
    for _ in range(calls):
        budget.call_started(now)


# The window's rule


def test_a_share_of_the_calls_may_be_retried_and_the_next_retry_is_refused_with_its_numbers() -> None:
    budget = window(percent=20)
    start_calls(budget, 1.0, 150)
    assert spend(budget, 2.0, 30) == [None] * 30
    assert budget.try_spend(2.5) == "retry budget spent: 30 retries over 150 calls in 10 s"
    assert budget.snapshot(3.0) == RetryBudgetFacts(
        calls=150, retries=30, allowed=30, refused=1, window_s=10.0
    )


def test_a_refused_retry_is_not_counted_as_spent() -> None:
    budget = window(percent=50)
    start_calls(budget, 0.0, 2)
    assert budget.try_spend(0.0) is None
    assert spend(budget, 0.0, 3) == ["retry budget spent: 1 retries over 2 calls in 10 s"] * 3
    budget.call_started(0.1)
    budget.call_started(0.1)  # 4 calls: a second retry fits; the refusals took none of it
    assert budget.try_spend(0.2) is None
    assert budget.snapshot(0.2) == RetryBudgetFacts(calls=4, retries=2, allowed=2, refused=3, window_s=10.0)


def test_the_floor_lets_a_quiet_tool_retry_and_the_share_takes_over_when_larger() -> None:
    quiet = window(percent=20, per_s=3)
    assert spend(quiet, 0.0, 30) == [None] * 30  # 3/s × 10 s, no calls at all
    assert quiet.try_spend(0.0) == "retry budget spent: 30 retries over 0 calls in 10 s"

    busy = window(percent=20, per_s=3)
    start_calls(busy, 0.0, 200)
    assert spend(busy, 0.0, 40) == [None] * 40  # 20 % of 200 beats the floor's 30
    assert busy.try_spend(0.0) == "retry budget spent: 40 retries over 200 calls in 10 s"


def test_allowances_round_down_without_float_noise() -> None:
    assert window(percent=29).allowance(100) == 29  # 0.29 × 100 is 28.999999999999996
    assert window(percent=20).allowance(7) == 1
    assert window(percent=0, per_s=0.29, window_s=100).allowance(0) == 29  # 28.999999999999996
    assert window(percent=0, per_s=0.57, window_s=100).allowance(0) == 57  # 56.99999999999999
    assert window(percent=0, per_s=0.05).allowance(0) == 0  # half a retry is none
    assert window(percent=250).allowance(10) == 25  # above 100 %: more retries than calls


def test_a_zero_budget_refuses_every_retry() -> None:
    budget = window(percent=0, per_s=0)
    start_calls(budget, 0.0, 1000)
    assert budget.try_spend(0.0) == "retry budget spent: 0 retries over 1000 calls in 10 s"


def test_a_fractional_window_is_written_as_it_was_configured() -> None:
    budget = window(percent=0, per_s=0, window_s=2.5)
    assert budget.try_spend(0.0) == "retry budget spent: 0 retries over 0 calls in 2.5 s"


# Sliding


def test_calls_and_retries_leave_the_window_a_bucket_at_a_time() -> None:
    budget = window(percent=100)  # buckets of 1 s
    start_calls(budget, 0.5, 4)  # bucket 0
    start_calls(budget, 3.5, 6)  # bucket 3
    assert spend(budget, 3.5, 10) == [None] * 10
    assert budget.try_spend(9.99) is not None
    assert budget.snapshot(9.99).calls == 10
    # At 10 s bucket 0 leaves: its 4 calls no longer count, so 10 retries are over 6 calls.
    assert budget.snapshot(10.0) == RetryBudgetFacts(calls=6, retries=10, allowed=6, refused=1, window_s=10.0)
    # At 13 s bucket 3 leaves with every call and retry in the window.
    assert budget.snapshot(13.0).calls == budget.snapshot(13.0).retries == 0
    budget.call_started(13.0)
    assert budget.try_spend(13.0) is None


def test_retries_spent_long_ago_no_longer_count() -> None:
    budget = window(percent=0, per_s=3)
    assert spend(budget, 0.0, 30) == [None] * 30
    assert budget.try_spend(9.9) is not None
    assert spend(budget, 10.0, 30) == [None] * 30  # the floor's 30 again, a window later
    assert budget.try_spend(10.0) is not None
    assert spend(budget, 1000.0, 30) == [None] * 30  # after a long pause: nothing left of before


def test_a_snapshot_reads_the_window_at_its_time_without_moving_it() -> None:
    budget = window(percent=100)
    for second in range(10):
        start_calls(budget, second + 0.5, second + 1)  # 1 call at 0.5 s … 10 calls at 9.5 s
    before = budget.snapshot(9.5)
    assert before.calls == 55
    assert [budget.snapshot(10 + s).calls for s in range(10)] == [
        55 - sum(range(1, s + 2)) for s in range(10)
    ]
    assert budget.snapshot(9.5) == before  # reading later times moved nothing
    assert budget.try_spend(12.0) is None  # rolling to 12 s leaves what the snapshot said
    assert budget.snapshot(12.0).calls == 55 - 6 and budget.snapshot(12.0).retries == 1


def test_time_going_back_starts_the_window_afresh() -> None:
    budget = window(percent=0, per_s=1)
    assert spend(budget, 5000.0, 10) == [None] * 10
    assert budget.try_spend(5000.0) is not None
    # Another event loop's clock: what was counted on the old one says nothing about now.
    assert budget.snapshot(3.0).retries == 0
    assert spend(budget, 3.0, 10) == [None] * 10
    assert budget.snapshot(3.0).refused == 1


# Reconfiguring (a hot reload)


def test_a_new_percentage_keeps_the_window() -> None:
    budget = window(percent=20)
    start_calls(budget, 1.0, 100)
    assert spend(budget, 1.0, 21)[-1] is not None
    budget.reconfigure(RetryBudgetOptions(budget_percent=50, min_retries_per_s=0, window_s=10))
    assert budget.snapshot(1.0) == RetryBudgetFacts(calls=100, retries=20, allowed=50, refused=1, window_s=10)
    assert spend(budget, 1.0, 30) == [None] * 30
    assert budget.try_spend(1.0) == "retry budget spent: 50 retries over 100 calls in 10 s"


@pytest.mark.parametrize("new_window_s", [2.0, 10.0, 60.0])
def test_a_new_window_keeps_the_counts_in_it(new_window_s: float) -> None:
    budget = window(percent=100)
    start_calls(budget, 3.0, 5)
    start_calls(budget, 7.0, 5)
    assert spend(budget, 7.0, 4) == [None] * 4
    budget.reconfigure(RetryBudgetOptions(budget_percent=100, min_retries_per_s=0, window_s=new_window_s))
    facts = budget.snapshot(7.0)
    assert (facts.calls, facts.retries, facts.window_s) == (10, 4, new_window_s)
    assert spend(budget, 7.0, 6) == [None] * 6
    assert budget.try_spend(7.0) == f"retry budget spent: 10 retries over 10 calls in {new_window_s:g} s"
    # The counts leave with the new window's buckets: within a new window from now, all gone.
    assert budget.snapshot(7.0 + new_window_s).calls == 0


def test_a_longer_window_keeps_counts_longer() -> None:
    budget = window(percent=100)
    start_calls(budget, 5.0, 10)
    budget.reconfigure(RetryBudgetOptions(budget_percent=100, min_retries_per_s=0, window_s=60))
    assert budget.snapshot(30.0).calls == 10  # a 10 s window would have dropped them at 15 s
    assert budget.snapshot(70.0).calls == 0


@pytest.mark.parametrize(
    ("new_window_s", "older_leaves_at", "newer_leaves_at"),
    [(20.0, 18.0, 26.0), (5.0, 10.0, 12.0)],
)
def test_buckets_keep_their_order_and_age_under_a_new_window(
    new_window_s: float, older_leaves_at: float, newer_leaves_at: float
) -> None:
    budget = window(percent=100)
    start_calls(budget, 3.0, 5)  # 4 buckets before the current one, at 7 s
    start_calls(budget, 7.0, 2)
    budget.reconfigure(RetryBudgetOptions(budget_percent=100, min_retries_per_s=0, window_s=new_window_s))
    # The current bucket becomes the new-width one holding 7 s; the older one is still 4 buckets
    # before it, so it leaves the window 4 new buckets sooner.
    assert budget.snapshot(older_leaves_at - 0.01).calls == 7
    assert budget.snapshot(older_leaves_at).calls == 2
    assert budget.snapshot(newer_leaves_at - 0.01).calls == 2
    assert budget.snapshot(newer_leaves_at).calls == 0
    budget.call_started(older_leaves_at)  # rolling agrees with reading
    assert budget.snapshot(older_leaves_at).calls == 3


def test_reconfiguring_an_unused_window_keeps_it_empty() -> None:
    budget = window()
    budget.reconfigure(RetryBudgetOptions(window_s=1))
    assert budget.snapshot(123.0) == RetryBudgetFacts(calls=0, retries=0, allowed=3, refused=0, window_s=1)


# What the window guarantees, for any sequence of calls and retries
#
# Time is cut into buckets of w = window_s / BUCKETS; a retry at time t is granted exactly when
# the retries counted in the buckets floor(t/w) − BUCKETS + 1 … floor(t/w) (the tracked span: between
# window_s − w and window_s long) stay within the allowance of the calls counted in the same
# buckets. Hence, at every granted retry at time t:
#     retries in (t − window_s, t] ≤ allowance(calls in (t − window_s, t]) + retries in
#                                     (t − window_s, t − window_s + w]   (one bucket's slack)
# because the tracked span lies within (t − window_s, t] and holds all of (t − window_s + w, t].
# Bucket widths and times below are binary fractions, so float arithmetic is exact and the
# reference counts below use the same buckets as the window.

Op = tuple[int, str]  # (ticks since the previous operation, "call" | "retry" | "look")


@st.composite
def histories(draw: st.DrawFn) -> tuple[float, int, float, list[Op]]:
    window_s = draw(st.sampled_from([1.25, 2.5, 5.0, 10.0]))
    percent = draw(st.integers(min_value=0, max_value=300))
    per_s = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0, 3.0]))
    gaps = st.one_of(st.just(0), st.integers(0, 4), st.integers(0, 6 * BUCKETS * 4))
    ops = draw(st.lists(st.tuples(gaps, st.sampled_from(["call", "call", "retry", "look"])), max_size=250))
    return window_s, percent, per_s, ops


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_window_grants_exactly_what_its_rule_allows_and_bounds_any_trailing_window(
    history: tuple[float, int, float, list[Op]],
) -> None:
    window_s, percent, per_s, ops = history
    budget = window(percent=percent, per_s=per_s, window_s=window_s)
    width = window_s / BUCKETS
    floor = math.floor(Fraction(str(per_s)) * Fraction(window_s))

    def allowance(calls: int) -> int:
        return max(percent * calls // 100, floor)

    calls: list[float] = []
    granted: list[float] = []
    refused = 0
    now = 0.0
    for gap, op in ops:
        now += gap * width / 4
        if op == "call":
            budget.call_started(now)
            calls.append(now)
            continue
        first_bucket = math.floor(now / width) - BUCKETS + 1
        tracked_calls = sum(math.floor(c / width) >= first_bucket for c in calls)
        tracked_retries = sum(math.floor(r / width) >= first_bucket for r in granted)
        if op == "look":
            facts = budget.snapshot(now)
            assert (facts.calls, facts.retries, facts.refused) == (tracked_calls, tracked_retries, refused)
            assert facts.allowed == allowance(tracked_calls)
        else:
            reason = budget.try_spend(now)
            fits = tracked_retries + 1 <= allowance(tracked_calls)
            assert (reason is None) == fits, (reason, tracked_retries, tracked_calls)
            if reason is None:
                granted.append(now)
                in_window = sum(now - window_s < r <= now for r in granted)
                window_calls = sum(now - window_s < c <= now for c in calls)
                slack = sum(now - window_s < r <= now - window_s + width for r in granted)
                assert in_window <= allowance(window_calls) + slack
            else:
                refused += 1
                numbers = f"{tracked_retries} retries over {tracked_calls} calls in {window_s:g} s"
                assert reason == f"retry budget spent: {numbers}"


# A retry storm


@dataclass
class FakeCall:
    """The pipeline's view of a call, as a strategy sees it (:class:`CallView`)."""

    tool_id: str = "flight_search"
    call_id: str = "c-1"
    turn_id: str | None = "t-1"
    deadline: float | None = None
    attempt: int = 1
    now: float = 0.0
    wall_clock: Callable[[], float] = lambda: WALL
    observed: bool = True
    announced: list[Event] = field(default_factory=list)

    @property
    def start(self) -> float:  # these fake calls begin when they are seen
        return self.now

    def announce(self, event: Event) -> None:
        self.announced.append(event)


def storm(strategy: RetryBudgetStrategy | None, seed: int = 7) -> tuple[int, int]:
    """1000 calls over 100 s; every attempt fails half the time; up to 5 attempts a call.
    Returns (calls, attempts)."""
    rng = random.Random(seed)
    attempts = 0
    calls = 1000
    for i in range(calls):
        call = FakeCall(call_id=f"c-{i}", now=i * 0.1, observed=False)
        if strategy:
            strategy.call_started(call)
        for attempt in range(1, 6):
            attempts += 1
            call.attempt = attempt
            if rng.random() >= 0.5 or attempt == 5:
                break
            if strategy and strategy.retry_refusal(call) is not None:
                break
    return calls, attempts


def test_a_storm_of_failures_makes_at_most_the_budgets_share_of_retries() -> None:
    calls, unbudgeted = storm(None)
    assert unbudgeted > 1.8 * calls  # without a budget: 1 + ½ + ¼ + ⅛ + 1/16 attempts a call

    options = RetryBudgetOptions()  # 20 %, 3 retries/s, 10 s
    duration_s = 100.0
    floor_allowance = options.min_retries_per_s * (duration_s + options.window_s)
    calls, attempts = storm(RetryBudgetStrategy("flight_search", options))
    assert attempts <= (1 + 0.2) * calls + floor_allowance  # 1530
    # At 10 calls/s the floor dominates (30 > 20 % of 100): 30 retries per 10 s, no more.
    assert calls + 30 * 9 <= attempts <= calls + 30 * 11

    share_only = RetryBudgetOptions(min_retries_per_s=0)
    calls, attempts = storm(RetryBudgetStrategy("flight_search", share_only))
    assert attempts <= (1 + 0.2) * calls
    assert attempts >= (1 + 0.18) * calls  # the budget, not the failures, is what stops retries


# Options


def test_options_default_to_envoys_budget() -> None:
    options = RetryBudgetOptions()
    assert (options.budget_percent, options.min_retries_per_s, options.window_s) == (20.0, 3.0, 10.0)


@pytest.mark.parametrize("name", ["budget_percent", "min_retries_per_s", "window_s"])
@pytest.mark.parametrize("value", [True, False, -1, math.inf, -math.inf, math.nan, "inf", 1e9])
def test_options_refuse_booleans_negatives_non_finite_and_huge_numbers(name: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=name):
        RetryBudgetOptions.model_validate({name: value})


def test_options_bounds() -> None:
    edge = RetryBudgetOptions(budget_percent=1000, min_retries_per_s=10_000, window_s=3600)
    assert (edge.budget_percent, edge.min_retries_per_s, edge.window_s) == (1000, 10_000, 3600)
    assert RetryBudgetOptions(budget_percent=0, min_retries_per_s=0).budget_percent == 0
    for bad in (
        {"budget_percent": 1000.5},
        {"min_retries_per_s": 10_000.5},
        {"window_s": 3600.5},
        {"window_s": 0},
    ):
        with pytest.raises(ValidationError):
            RetryBudgetOptions.model_validate(bad)


def test_options_refuse_unknown_keys_and_stay_frozen() -> None:
    with pytest.raises(ValidationError, match="budget_percnt"):
        RetryBudgetOptions.model_validate({"budget_percnt": 20})
    options = RetryBudgetOptions()
    with pytest.raises(ValidationError):
        options.window_s = 1  # type: ignore[misc]


def test_a_tiny_window_still_counts() -> None:
    budget = window(percent=100, window_s=5e-324)
    budget.call_started(1e6)
    assert budget.try_spend(1e6) is None
    assert budget.try_spend(1e6) is not None


# The strategy's hooks


def test_the_strategy_uses_only_the_hooks_that_never_wait() -> None:
    strategy = RetryBudgetStrategy("flight_search", RetryBudgetOptions())
    hooks = {h: overrides(strategy, h) for h in ("call_started", "admit", "attempt_ended", "retry_refusal")}
    assert hooks == {"call_started": True, "admit": False, "attempt_ended": False, "retry_refusal": True}
    assert (RetryBudgetStrategy.section, RetryBudgetStrategy.options_type) == (
        "retry_budget",
        RetryBudgetOptions,
    )
    assert RetryBudgetStrategy.shared_section


def test_a_refused_retry_is_announced_when_observed() -> None:
    strategy = RetryBudgetStrategy(
        "flight_search", RetryBudgetOptions(budget_percent=50, min_retries_per_s=0)
    )
    first = FakeCall(now=1.0)
    strategy.call_started(first)
    strategy.call_started(FakeCall(call_id="c-2", now=1.5))
    first.attempt, first.now = 1, 2.0
    assert strategy.retry_refusal(first) is None
    first.attempt = 2
    reason = strategy.retry_refusal(first)
    assert reason == "retry budget spent: 1 retries over 2 calls in 10 s"
    assert first.announced == [
        RetryBudgetSpent(
            at=WALL,
            t=2.0,
            tool_id="flight_search",
            call_id="c-1",
            turn_id="t-1",
            attempt=2,
            retries=1,
            calls=2,
            window_s=10.0,
            reason=reason,
            shared=False,
        )
    ]
    event = first.announced[0]
    assert event.describe() == (
        "flight_search retry after attempt 2 refused by the retry budget: 1 retries over 2 calls in 10 s"
    )
    assert event_from_dict(json.loads(json.dumps(event.to_dict()))) == event


def test_nothing_is_announced_when_nobody_observes_but_the_refusal_stands() -> None:
    strategy = RetryBudgetStrategy("flight_search", RetryBudgetOptions(budget_percent=0, min_retries_per_s=0))
    call = FakeCall(now=1.0, observed=False)
    strategy.call_started(call)
    assert strategy.retry_refusal(call) == "retry budget spent: 0 retries over 1 calls in 10 s"
    assert call.announced == []
    assert strategy.facts(1.0)["refused"] == 1


def test_the_shared_budget_counts_every_tools_calls_and_says_it_is_shared() -> None:
    strategy = RetryBudgetStrategy(
        SHARED_TOOL_ID, RetryBudgetOptions(budget_percent=100, min_retries_per_s=0)
    )
    flights, hotels = FakeCall(tool_id="flight_search", now=1.0), FakeCall(tool_id="hotel_search", now=1.0)
    strategy.call_started(flights)
    strategy.call_started(hotels)
    assert strategy.retry_refusal(flights) is None
    assert strategy.retry_refusal(flights) is None  # the hotel's call paid for it
    assert strategy.retry_refusal(hotels) is not None
    event = hotels.announced[0]
    assert isinstance(event, RetryBudgetSpent)
    assert (event.tool_id, event.shared) == ("hotel_search", True)
    assert "engine-wide retry budget" in event.describe()
    assert strategy.facts(1.0) == {
        "calls": 2,
        "retries": 2,
        "allowed": 2,
        "refused": 1,
        "window_s": 10.0,
        "shared": True,
    }


def test_facts_are_flat_and_json_safe() -> None:
    strategy = RetryBudgetStrategy("flight_search", RetryBudgetOptions())
    strategy.call_started(FakeCall(now=0.0))
    facts = strategy.facts(0.0)
    assert json.loads(json.dumps(facts)) == facts
    assert facts == {"calls": 1, "retries": 0, "allowed": 30, "refused": 0, "window_s": 10.0, "shared": False}


def test_a_reload_hands_the_window_over_under_the_new_options() -> None:
    old = RetryBudgetStrategy("flight_search", RetryBudgetOptions(budget_percent=10, min_retries_per_s=0))
    for i in range(20):
        old.call_started(FakeCall(call_id=f"c-{i}", now=1.0))
    call = FakeCall(now=2.0)
    assert [old.retry_refusal(call) for _ in range(3)][-1] is not None

    previous: Strategy[RetryBudgetOptions] = old
    new = RetryBudgetStrategy("flight_search", RetryBudgetOptions(budget_percent=25, min_retries_per_s=0))
    new.handover(previous)
    assert new.window is old.window
    assert new.facts(2.0) == {
        "calls": 20,
        "retries": 2,
        "allowed": 5,
        "refused": 1,
        "window_s": 10.0,
        "shared": False,
    }
    spent = "retry budget spent: 5 retries over 20 calls in 10 s"
    assert [new.retry_refusal(call) for _ in range(4)] == [None, None, None, spent]
