"""The rate limit's parts without an engine: the pure token bucket (refill, burst, and a property:
never more than ``burst + rate × d`` tokens over any ``d`` seconds), the cooldown value, the limiter's
line (FIFO, waits known up front, cancellation without a lost token, a cooldown re-planning the line,
a reload keeping tokens and the cooldown's end), the strategy's hooks with a fake call, and the
section's options with their one-line errors. Virtual time, both backends."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from engine import ManifestError, load_manifest
from engine.classify import Classification, Rule
from engine.events import Event, event_from_dict
from engine.kinds import ErrorClass, ErrorKind
from engine.strategies.base import Strategy, overrides
from engine.strategies.rate_limit import (
    NO_COOLDOWN,
    Cooldown,
    CooldownEnded,
    CooldownStarted,
    RateLimiter,
    RateLimitOptions,
    RateLimitRejected,
    RateLimitStrategy,
    RateLimitWaited,
    TokenBucket,
)
from engine.strategies.rate_limit.bucket import EPSILON
from tests.engine.conftest import WALL

on_both_backends = pytest.mark.anyio


def limiter(**options: Any) -> RateLimiter:
    return RateLimiter(RateLimitOptions.model_validate(options))


async def settle() -> None:
    """Let every task that can run, run (no virtual time passes)."""
    for _ in range(5):
        await anyio.sleep(0)


# --- the bucket (pure) ------------------------------------------------------------------------


def test_a_full_bucket_gives_its_burst_at_once_then_refills_at_its_rate() -> None:
    bucket = TokenBucket(2.0, 3)
    assert [bucket.take(10.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.take(10.49)
    assert bucket.take(10.5), "a token every 1/rate seconds"
    assert not bucket.take(10.5)
    assert bucket.level(100.0) == 3.0, "never more than the burst, however long it rests"


def test_ready_at_counts_the_waiters_ahead_and_a_cooldowns_end() -> None:
    bucket = TokenBucket(4.0, 2)
    assert bucket.ready_at(0.0, 1) == 0.0
    assert bucket.ready_at(0.0, 2) == 0.0
    assert bucket.ready_at(0.0, 3) == pytest.approx(0.25)
    assert bucket.ready_at(0.0, 5) == pytest.approx(0.75)
    # A cooldown to 30 s: the bucket is full by then, so two go at 30 and the rest 1/rate apart.
    assert bucket.ready_at(0.0, 1, not_before=30.0) == 30.0
    assert bucket.ready_at(0.0, 2, not_before=30.0) == 30.0
    assert bucket.ready_at(0.0, 4, not_before=30.0) == pytest.approx(30.5)


def test_a_token_given_back_is_there_again_but_never_past_the_burst() -> None:
    bucket = TokenBucket(1.0, 1)
    assert bucket.take(0.0)
    bucket.give_back(0.0)
    assert bucket.take(0.0)
    bucket.give_back(5.0)
    assert bucket.level(5.0) == 1.0


def test_reconfigure_keeps_the_tokens_at_most_the_new_burst() -> None:
    bucket = TokenBucket(1.0, 5)
    bucket.take(0.0)
    bucket.reconfigure(1.0, 2)
    assert bucket.level(0.0) == 2.0
    for _ in range(2):
        assert bucket.take(0.0)
    bucket.reconfigure(0.5, 10)
    assert bucket.level(0.0) == 0.0, "a larger burst does not refill the bucket"
    assert bucket.ready_at(0.0, 1) == pytest.approx(2.0), "the new rate"


@st.composite
def bucket_histories(draw: st.DrawFn) -> tuple[float, int, list[float]]:
    rate = draw(st.floats(min_value=0.1, max_value=1000.0))
    burst = draw(st.integers(min_value=1, max_value=20))
    gaps = draw(st.lists(st.floats(min_value=0.0, max_value=3.0 / rate), min_size=1, max_size=200))
    times = list(itertools_accumulate(gaps))
    return rate, burst, times


def itertools_accumulate(gaps: list[float]) -> list[float]:
    out, now = [], 0.0
    for gap in gaps:
        now += gap
        out.append(now)
    return out


@settings(max_examples=300, deadline=None)
@given(bucket_histories())
def test_never_more_than_burst_plus_rate_times_the_interval(history: tuple[float, int, list[float]]) -> None:
    rate, burst, times = history
    bucket = TokenBucket(rate, burst)
    granted = [t for t in times if bucket.take(t)]
    # Over any interval [a, b] holding grants, at most burst + rate × (b − a) of them.
    for i, start in enumerate(granted):
        for j in range(i, len(granted)):
            count = j - i + 1
            assert count <= burst + rate * (granted[j] - start) + 1e-6, (i, j)


@settings(max_examples=200, deadline=None)
@given(bucket_histories(), st.integers(min_value=1, max_value=30))
def test_ready_at_is_when_take_first_succeeds(history: tuple[float, int, list[float]], count: int) -> None:
    rate, burst, times = history
    bucket = TokenBucket(rate, burst)
    for t in times[:-1]:
        bucket.take(t)
    now = times[-1]
    ready = bucket.ready_at(now, 1)
    assert ready >= now
    if ready > now:
        assert bucket.level(now) < 1.0 - EPSILON
    assert bucket.level(ready) >= 1.0 - EPSILON
    assert bucket.ready_at(now, count + 1) >= bucket.ready_at(now, count), "later in line, later turn"


# --- the cooldown (a value) -------------------------------------------------------------------


def test_a_cooldown_is_a_value_with_its_end_and_who_set_it() -> None:
    assert not NO_COOLDOWN.active
    cooldown = Cooldown(30.0, "c1", 0.0, 30.0)
    assert cooldown.active
    assert cooldown.remaining(10.0) == 20.0
    assert cooldown.remaining(31.0) == 0.0
    assert cooldown.later_than(NO_COOLDOWN)
    assert not Cooldown(20.0, "c2").later_than(cooldown)


def test_a_cooldown_is_extended_never_shortened() -> None:
    state = limiter(rate_per_s=1.0)
    assert state.extend_cooldown(Cooldown(30.0, "c1"), 0.0)
    assert not state.extend_cooldown(Cooldown(10.0, "c2"), 1.0)
    assert state.cooldown.started_by == "c1"
    assert state.extend_cooldown(Cooldown(60.0, "c3"), 2.0)
    assert (state.cooldown.until, state.cooldown.started_by, state.cooldowns) == (60.0, "c3", 2)
    assert not state.extend_cooldown(Cooldown(1.0, "c4"), 2.0), "one already over changes nothing"
    assert state.expire_cooldown(59.0) is None
    ended = state.expire_cooldown(60.0)
    assert ended is not None and ended.started_by == "c3"
    assert state.expire_cooldown(61.0) is None, "found over once"
    assert state.cooldown is NO_COOLDOWN


# --- the limiter's line -----------------------------------------------------------------------


@on_both_backends
async def test_waiters_get_their_tokens_in_arrival_order_at_the_rate() -> None:
    state = limiter(rate_per_s=10.0, burst=1)
    assert state.try_acquire(anyio.current_time())
    assert not state.try_acquire(anyio.current_time())
    got: list[tuple[int, float]] = []

    async def wait(n: int) -> None:
        now = anyio.current_time()
        assert await state.acquire(now, now + 10.0, anyio.current_time) is None
        got.append((n, anyio.current_time()))

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(wait, n)
            await settle()
        assert state.waiting == 5
        assert not state.try_acquire(anyio.current_time()), "no newcomer overtakes the line"
    assert [n for n, _ in got] == [0, 1, 2, 3, 4]
    assert [t for _, t in got] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5], abs=1e-4)
    assert (state.waited, state.rejected, state.waiting) == (5, 0, 0)


@on_both_backends
async def test_a_wait_longer_than_allowed_is_refused_at_once_with_what_it_needed() -> None:
    state = limiter(rate_per_s=2.0, burst=1)
    now = anyio.current_time()
    assert state.try_acquire(now)
    denial = await state.acquire(now, now + 0.2, anyio.current_time)
    assert denial is not None
    assert (denial.wait_s, denial.cooldown_s, denial.waited_s) == (pytest.approx(0.5), 0.0, 0.0)
    assert anyio.current_time() == now, "refused without waiting"
    assert state.acquire is not None and state.rejected == 1 and state.waiting == 0


@on_both_backends
async def test_a_cancelled_waiter_leaves_the_line_and_the_next_moves_up() -> None:
    state = limiter(rate_per_s=1.0, burst=1)
    start = anyio.current_time()
    state.try_acquire(start)
    got: list[float] = []

    async def wait(cut_after: float | None) -> None:
        now = anyio.current_time()
        with anyio.move_on_after(cut_after if cut_after is not None else math.inf):
            await state.acquire(now, now + 10.0, anyio.current_time)
            got.append(anyio.current_time() - start)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, 0.5)  # first in line, due at 1 s: cut at 0.5 s
        await settle()
        tg.start_soon(wait, None)  # second, due at 2 s: moves up to 1 s
        await settle()
    assert got == [pytest.approx(1.0, abs=1e-4)]
    assert state.waiting == 0


@on_both_backends
async def test_a_waiter_cancelled_as_it_is_handed_a_token_gives_it_back() -> None:
    state = limiter(rate_per_s=1.0, burst=2)
    start = anyio.current_time()
    state.extend_cooldown(Cooldown(start + 30.0, "c1"), start)
    got: dict[str, float] = {}

    async def wait(name: str, scope: anyio.CancelScope) -> None:
        now = anyio.current_time()
        with scope:
            assert await state.acquire(now, now + 60.0, anyio.current_time) is None
            got[name] = anyio.current_time() - start

    first = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        for name, scope in (("a", first), ("b", anyio.CancelScope()), ("c", anyio.CancelScope())):
            tg.start_soon(wait, name, scope)
            await settle()
        await anyio.sleep(5.0)
        first.cancel()  # a is cancelled, and before it resumes…
        state.end_cooldown(anyio.current_time())  # …a and b are handed the bucket's two tokens
    assert got == {"b": pytest.approx(5.0), "c": pytest.approx(5.0)}, "a's token went to c at once"
    assert state.waiting == 0


@on_both_backends
async def test_a_cooldown_holds_the_line_and_refuses_at_once_who_cannot_wait_for_it() -> None:
    state = limiter(rate_per_s=1.0, burst=1)
    start = anyio.current_time()
    state.try_acquire(start)
    outcomes: dict[str, Any] = {}

    async def wait(name: str, limit: float) -> None:
        now = anyio.current_time()
        outcomes[name] = await state.acquire(now, now + limit, anyio.current_time)
        outcomes[name + "@"] = anyio.current_time() - start

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, "patient", 60.0)
        await settle()
        tg.start_soon(wait, "hasty", 5.0)
        await settle()
        await anyio.sleep(0.5)
        assert state.extend_cooldown(Cooldown(start + 30.5, "c9"), anyio.current_time())
        await settle()
        assert outcomes["hasty"] is not None, "refused as soon as the cooldown began"
        assert outcomes["hasty@"] == pytest.approx(0.5)
        assert outcomes["hasty"].cooldown_s == pytest.approx(30.0)
        assert outcomes["hasty"].waited_s == pytest.approx(0.5)
    assert outcomes["patient"] is None
    assert outcomes["patient@"] == pytest.approx(30.5, abs=1e-4)


@on_both_backends
async def test_an_operator_reset_lets_the_line_go_at_once() -> None:
    state = limiter()
    start = anyio.current_time()
    state.extend_cooldown(Cooldown(start + 30.0, "c1"), start)
    got: list[float] = []

    async def wait() -> None:
        now = anyio.current_time()
        assert await state.acquire(now, now + 60.0, anyio.current_time) is None
        got.append(anyio.current_time() - start)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(wait)
        await anyio.sleep(5.0)
        ended = state.end_cooldown(anyio.current_time())
        assert ended is not None and ended.started_by == "c1"
    assert got == [pytest.approx(5.0)] * 3, "no rate of its own: all at once"


@on_both_backends
async def test_a_reload_keeps_the_tokens_the_cooldown_and_the_line() -> None:
    state = limiter(rate_per_s=0.1, burst=5, max_wait_ms=60_000)
    start = anyio.current_time()
    for _ in range(5):
        assert state.try_acquire(start)
    state.extend_cooldown(Cooldown(start + 30.0, "c1"), start)
    got: list[float] = []

    async def wait() -> None:
        now = anyio.current_time()
        await state.acquire(now, now + 100.0, anyio.current_time)
        got.append(anyio.current_time() - start)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.sleep(10.0)
        state.reconfigure(RateLimitOptions(rate_per_s=0.1, burst=2, cooldown_ms=5000))
        assert state.cooldown.until == start + 30.0, "the absolute end, not re-armed, not lost"
        assert state.snapshot(anyio.current_time()).tokens == pytest.approx(1.0), "not refilled"
        assert state.waiting == 1
    assert got == [pytest.approx(30.0, abs=1e-4)]


# --- the strategy's hooks ---------------------------------------------------------------------


@dataclass
class FakeCall:
    """A CallView: the call a pipeline would show the strategy."""

    deadline: float | None = None
    observed: bool = True
    attempt: int = 1
    tool_id: str = "quotes"
    call_id: str = "c1"
    turn_id: str | None = "t1"
    events: list[Event] = field(default_factory=list)

    @property
    def now(self) -> float:
        return anyio.current_time()

    @property
    def start(self) -> float:
        return anyio.current_time()

    @property
    def clock(self) -> Callable[[], float]:
        return anyio.current_time

    @property
    def wall_clock(self) -> Callable[[], float]:
        return lambda: WALL

    def announce(self, event: Event) -> None:
        self.events.append(event)


def rate_limited(
    retry_after_s: float | None = None, kind: ErrorKind = ErrorKind.RATE_LIMIT
) -> Classification:
    return Classification(
        kind, kind.default_class, True, Rule.STATUS_CODE, "HTTP 429", 429, retry_after_s, "HTTPError"
    )


def test_the_strategy_has_the_hooks_it_needs_and_no_others() -> None:
    strategy = RateLimitStrategy("t", RateLimitOptions(rate_per_s=1.0))
    hooks = ("admit_now", "admit", "attempt_failed", "operator_reset", "facts", "handover")
    assert all(overrides(strategy, hook) for hook in hooks)
    assert not overrides(strategy, "attempt_ended"), "a token is spent, never given back by an attempt"
    assert not overrides(strategy, "retry_refusal")
    assert not overrides(strategy, "call_started")


@on_both_backends
async def test_admit_refuses_as_throttled_naming_the_wait_and_announces_when_observed() -> None:
    strategy = RateLimitStrategy("quotes", RateLimitOptions(rate_per_s=1.0, burst=1, max_wait_ms=500))
    call = FakeCall()
    assert strategy.admit_now(call)
    refusal = await strategy.admit(call)
    assert refusal is not None
    assert refusal.kind is ErrorKind.THROTTLED and not refusal.kind.executed
    assert refusal.reason == "rate limit: next token in 1 s, max wait 0.5 s"
    assert refusal.strategy == "rate_limit"
    [event] = call.events
    assert isinstance(event, RateLimitRejected)
    assert (event.wait_needed_ms, event.cooldown_ms, event.waited_ms) == (pytest.approx(1000.0), 0.0, 0.0)
    assert event_from_dict(event.to_dict()) == event
    quiet = FakeCall(observed=False)
    assert await strategy.admit(quiet) is not None and quiet.events == []


@on_both_backends
async def test_a_wait_the_turn_cannot_afford_is_refused_at_once_naming_the_turn() -> None:
    strategy = RateLimitStrategy("quotes", RateLimitOptions(rate_per_s=1.0, burst=1, max_wait_ms=5000))
    strategy.admit_now(FakeCall())
    call = FakeCall(deadline=anyio.current_time() + 0.4)
    refusal = await strategy.admit(call)
    assert refusal is not None
    assert refusal.reason == "rate limit: next token in 1 s, the turn ends in 0.4 s"
    at_the_deadline = FakeCall(deadline=anyio.current_time())
    assert await strategy.admit(at_the_deadline) is not None, "no time left: no wait"


@on_both_backends
async def test_a_wait_that_fits_is_announced_once_it_ends() -> None:
    strategy = RateLimitStrategy("quotes", RateLimitOptions(rate_per_s=4.0, burst=1, max_wait_ms=1000))
    strategy.admit_now(FakeCall())
    call = FakeCall()
    assert await strategy.admit(call) is None
    [event] = call.events
    assert isinstance(event, RateLimitWaited)
    assert event.waited_ms == pytest.approx(250.0)
    assert strategy.facts(anyio.current_time())["waited"] == 1


@on_both_backends
async def test_a_rate_limit_error_starts_a_cooldown_everyone_waits_for() -> None:
    strategy = RateLimitStrategy("quotes", RateLimitOptions(max_wait_ms=1000))
    failed = FakeCall(call_id="c7", attempt=2)
    strategy.attempt_failed(failed, rate_limited(retry_after_s=30.0))
    [started] = failed.events
    assert isinstance(started, CooldownStarted)
    assert (started.call_id, started.attempt, started.cooldown_s, started.retry_after_s) == (
        "c7",
        2,
        30.0,
        30.0,
    )
    assert not started.extended
    facts = strategy.facts(anyio.current_time())
    assert (facts["cooldown_remaining_s"], facts["cooldown_started_by"]) == (30.0, "c7")
    other = FakeCall(call_id="c8")
    assert not strategy.admit_now(other)
    refusal = await strategy.admit(other)
    assert refusal is not None and refusal.reason == "rate limit: cooling down for 30 s more, max wait 1 s"
    await anyio.sleep(30.0)
    later = FakeCall(call_id="c9")
    assert await strategy.admit(later) is None
    [ended] = later.events
    assert isinstance(ended, CooldownEnded)
    assert (ended.how, ended.started_by, ended.call_id) == ("expired", "c7", "c9")
    assert strategy.admit_now(FakeCall()), "the fast path again"


def test_which_failures_pause_the_tool_and_for_how_long() -> None:
    strategy = RateLimitStrategy("t", RateLimitOptions(cooldown_ms=2000, max_cooldown_ms=60_000))
    assert strategy.cooldown_for(rate_limited(None)) == 2.0, "no advice: cooldown_ms"
    assert strategy.cooldown_for(rate_limited(30.0)) == 30.0
    assert strategy.cooldown_for(rate_limited(86_400.0)) == 60.0, "capped"
    assert strategy.cooldown_for(rate_limited(0.0)) is None, "retry at once: no pause"
    unavailable = rate_limited(10.0, ErrorKind.SERVICE_UNAVAILABLE)
    assert strategy.cooldown_for(unavailable) == 10.0, "a 503 that says when to come back"
    assert strategy.cooldown_for(rate_limited(None, ErrorKind.SERVICE_UNAVAILABLE)) is None
    permanent = Classification(
        ErrorKind.QUOTA_EXCEEDED, ErrorClass.PERMANENT, False, Rule.BODY_TYPE, "quota", None, 10.0
    )
    assert strategy.cooldown_for(permanent) is None
    never = RateLimitStrategy("t", RateLimitOptions(max_cooldown_ms=0))
    assert never.cooldown_for(rate_limited(30.0)) is None


@on_both_backends
async def test_operator_reset_ends_the_cooldown_and_says_who() -> None:
    strategy = RateLimitStrategy("quotes", RateLimitOptions())
    now = anyio.current_time()
    assert strategy.operator_reset(now, WALL, "ops") is None, "nothing to end"
    strategy.attempt_failed(FakeCall(call_id="c3"), rate_limited(30.0))
    ended = strategy.operator_reset(now, WALL, "ops")
    assert isinstance(ended, CooldownEnded)
    assert (ended.how, ended.actor, ended.started_by, ended.tool_id) == ("reset", "ops", "c3", "quotes")
    assert strategy.admit_now(FakeCall())


@on_both_backends
async def test_handover_keeps_the_limiter() -> None:
    old = RateLimitStrategy("t", RateLimitOptions(rate_per_s=1.0, burst=4))
    old.attempt_failed(FakeCall(), rate_limited(30.0))
    new = RateLimitStrategy("t", RateLimitOptions(rate_per_s=2.0, burst=2, scope="fleet"))
    new.handover(old)
    assert new.state is old.state
    facts = new.facts(anyio.current_time())
    assert (facts["burst"], facts["tokens"], facts["rate_per_s"], facts["scope"]) == (2, 2.0, 2.0, "fleet")
    assert facts["cooldown_remaining_s"] == 30.0
    stateless: Strategy[Any] = Strategy("t", RateLimitOptions())
    new.handover(stateless)  # another strategy type: nothing to take over
    assert new.state is old.state


# --- options ----------------------------------------------------------------------------------


def test_options_defaults_and_bounds() -> None:
    defaults = RateLimitOptions()
    assert (defaults.rate_per_s, defaults.burst, defaults.max_wait_ms, defaults.scope) == (
        None, None, 1000.0, "process",
    )  # fmt: skip
    assert (defaults.cooldown_ms, defaults.max_cooldown_ms) == (1000.0, 300_000.0)
    assert RateLimitOptions(rate_per_s=2.5).bucket_size == 3, "a second's worth"
    assert RateLimitOptions(rate_per_s=0.2).bucket_size == 1
    assert RateLimitOptions(rate_per_s=5, burst=1).bucket_size == 1
    for bad in (
        {"rate_per_s": 0},
        {"rate_per_s": True},
        {"rate_per_s": math.inf},
        {"burst": 0, "rate_per_s": 1},
        {"burst": 2.5, "rate_per_s": 1},
        {"burst": 2},
        {"max_wait_ms": -1},
        {"max_wait_ms": 86_400_001},
        {"scope": "cluster"},
        {"cooldown_ms": -1},
        {"rate": 5},
    ):
        with pytest.raises(ValidationError):
            RateLimitOptions.model_validate(bad)


def test_a_bad_section_is_one_line_naming_the_file_the_line_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "quotes.yaml"
    head = "tool:\n  id: quotes\n  side_effect: read_only\n"
    path.write_text(head + "  rate_limit:\n    rate_per_s: 0\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(caught.value) == f"{path}:5: tool.rate_limit.rate_per_s: Input should be greater than 0"
    path.write_text(head + "  rate_limit: {rate_per_s: 5, scope: cluster}\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(caught.value).startswith(
        f"{path}:4: tool.rate_limit.scope: Input should be 'process' or 'fleet'"
    )
    path.write_text(head + "  rate_limit: {burst: 5}\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(caught.value) == f"{path}:4: tool.rate_limit: burst needs rate_per_s"
    path.write_text(head + "  rate_limit: {rate_per_s: 5, burst: 10, max_wait_ms: 2000, scope: fleet}\n")
    options = load_manifest(path).strategies["rate_limit"]
    assert options == RateLimitOptions(rate_per_s=5, burst=10, max_wait_ms=2000, scope="fleet")


@on_both_backends
@pytest.mark.parametrize("seed", range(12))
async def test_random_arrivals_cancellations_and_cooldowns_keep_the_rules(seed: int) -> None:
    rng = random.Random(seed)
    rate, burst = rng.choice([1.0, 5.0, 20.0]), rng.randint(1, 4)
    state = limiter(rate_per_s=rate, burst=burst)
    start = anyio.current_time()
    used: list[tuple[float, int]] = []  # (when, arrival number) of each token an attempt got
    pauses: list[tuple[float, float]] = []  # (from, until) of each cooldown

    async def caller(n: int, limit: float, cut_after: float) -> None:
        now = anyio.current_time()
        with anyio.move_on_after(cut_after):
            if state.try_acquire(now) or await state.acquire(now, now + limit, anyio.current_time) is None:
                used.append((anyio.current_time(), n))

    async with anyio.create_task_group() as tg:
        for n in range(60):
            await anyio.sleep(rng.expovariate(2 * rate))
            if rng.random() < 0.05:
                now = anyio.current_time()
                until = now + rng.uniform(0.1, 3.0)
                if state.extend_cooldown(Cooldown(until, f"c{n}"), now):
                    pauses.append((now, until))
            tg.start_soon(caller, n, rng.uniform(0.0, 5.0), rng.choice([0.2, 1.0, 100.0]))
    assert state.waiting == 0, "nobody left in line"
    times = [t for t, _ in used]
    for i, first in enumerate(times):  # the bucket's bound over every interval of tokens used
        for j in range(i, len(times)):
            assert j - i + 1 <= burst + rate * (times[j] - first) + 1e-6
    for t, _ in used:
        assert not any(begun <= t < until - 1e-9 for begun, until in pauses), "no token during a cooldown"
    by_arrival = [t for t, _ in sorted(used, key=lambda entry: entry[1])]
    assert by_arrival == sorted(by_arrival), "tokens in arrival order (trio resumes ties in any order)"
    assert start <= min(times, default=start)
