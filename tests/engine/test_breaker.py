"""The circuit breaker as a pure state machine: time is passed in, nothing sleeps."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine.strategies.breaker.machine import (
    AttemptOutcome,
    BreakerConfig,
    BreakerState,
    CircuitBreaker,
    Permit,
    Transition,
)

OK, FAIL, ANSWERED, ABANDONED = (
    AttemptOutcome.SUCCEEDED,
    AttemptOutcome.FAILED,
    AttemptOutcome.ANSWERED,
    AttemptOutcome.ABANDONED,
)


def make(**config: float) -> tuple[CircuitBreaker, list[Transition]]:
    transitions: list[Transition] = []
    breaker = CircuitBreaker("flight_search", BreakerConfig(**config), transitions.append)  # type: ignore[arg-type]
    return breaker, transitions


def fail(breaker: CircuitBreaker, now: float, times: int = 1) -> None:
    for _ in range(times):
        permit = breaker.acquire(now)
        assert permit is not None
        breaker.record(permit, FAIL, now)


def open_breaker(now: float = 0.0, **config: float) -> tuple[CircuitBreaker, list[Transition]]:
    breaker, transitions = make(**config)
    fail(breaker, now, breaker.config.failure_threshold)
    assert breaker.state is BreakerState.OPEN
    return breaker, transitions


def test_opens_after_threshold_consecutive_transient_failures() -> None:
    breaker, transitions = make()
    fail(breaker, 0.0, 4)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 4
    fail(breaker, 0.0)
    assert breaker.state is BreakerState.OPEN
    assert breaker.opens == 1
    assert [(t.from_state, t.to_state) for t in transitions] == [(BreakerState.CLOSED, BreakerState.OPEN)]
    assert transitions[0].reason == "5 consecutive transient failures"
    assert transitions[0].actor == "engine"


def test_success_and_answered_errors_end_the_streak_but_abandoned_does_not() -> None:
    breaker, _ = make()
    fail(breaker, 0.0, 3)
    breaker.record(breaker.acquire(0.0) or Permit(-1, False), ABANDONED, 0.0)
    assert breaker.consecutive_failures == 3
    breaker.record(breaker.acquire(0.0) or Permit(-1, False), ANSWERED, 0.0)
    assert breaker.consecutive_failures == 0
    fail(breaker, 0.0, 2)
    breaker.record(breaker.acquire(0.0) or Permit(-1, False), OK, 0.0)
    assert breaker.consecutive_failures == 0
    assert breaker.state is BreakerState.CLOSED


def test_open_rejects_until_timeout_then_admits_exactly_one_probe() -> None:
    breaker, transitions = open_breaker(now=10.0, timeout_ms=30_000)
    assert breaker.half_open_at == pytest.approx(40.0)
    assert breaker.acquire(10.0) is None
    assert breaker.acquire(39.999) is None
    probe = breaker.acquire(40.0)
    assert probe is not None and probe.probe
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.acquire(40.0) is None, "a second caller must be rejected while the probe runs"
    assert transitions[-1].to_state is BreakerState.HALF_OPEN
    assert "probe is in flight" in breaker.rejection_reason()


def test_poll_moves_to_half_open_without_a_call() -> None:
    breaker, transitions = open_breaker(timeout_ms=30_000)
    assert not breaker.poll(29.9)
    assert breaker.poll(30.0)
    assert breaker.state is BreakerState.HALF_OPEN
    assert not breaker.probe_in_flight
    assert transitions[-1].to_state is BreakerState.HALF_OPEN


def test_probe_success_closes_and_resets_counts() -> None:
    breaker, transitions = open_breaker(timeout_ms=1000)
    probe = breaker.acquire(1.0)
    assert probe is not None
    breaker.record(probe, OK, 1.0)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 0
    assert transitions[-1].reason == "1 consecutive probe success"


def test_probe_failure_reopens_and_restarts_the_timer() -> None:
    breaker, _ = open_breaker(timeout_ms=1000)
    probe = breaker.acquire(1.5)
    assert probe is not None
    breaker.record(probe, FAIL, 1.7)
    assert breaker.state is BreakerState.OPEN
    assert breaker.opened_at == pytest.approx(1.7)
    assert breaker.half_open_at == pytest.approx(2.7)
    assert breaker.opens == 2
    assert breaker.acquire(2.6) is None


def test_success_threshold_two_needs_two_consecutive_probe_successes() -> None:
    breaker, _ = open_breaker(timeout_ms=1000, success_threshold=2)
    first = breaker.acquire(1.0)
    assert first is not None
    breaker.record(first, OK, 1.0)
    assert breaker.state is BreakerState.HALF_OPEN
    second = breaker.acquire(1.0)
    assert second is not None and second.probe
    breaker.record(second, OK, 1.0)
    assert breaker.state is BreakerState.CLOSED


def test_abandoned_probe_frees_the_slot_without_changing_state() -> None:
    breaker, _ = open_breaker(timeout_ms=1000)
    probe = breaker.acquire(1.0)
    assert probe is not None
    breaker.record(probe, ABANDONED, 1.0)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.acquire(1.0) is not None


def test_answered_probe_counts_as_the_service_being_up() -> None:
    breaker, _ = open_breaker(timeout_ms=1000)
    probe = breaker.acquire(1.0)
    assert probe is not None
    breaker.record(probe, ANSWERED, 1.0)
    assert breaker.state is BreakerState.CLOSED


def test_results_of_permits_from_before_a_transition_are_ignored() -> None:
    breaker, _ = make(failure_threshold=2)
    stale = [breaker.acquire(0.0) for _ in range(5)]
    for permit in stale[:2]:
        assert permit is not None
        breaker.record(permit, FAIL, 0.0)
    assert breaker.state is BreakerState.OPEN
    for permit in stale[2:]:
        assert permit is not None
        breaker.record(permit, OK, 0.0)
    assert breaker.state is BreakerState.OPEN, "a late success must not close a breaker that opened since"


def test_trip_forces_open_until_reset_whatever_the_timer() -> None:
    breaker, transitions = make(timeout_ms=1000)
    breaker.trip(0.0, actor="alice", reason="vendor incident")
    assert breaker.state is BreakerState.FORCED_OPEN
    assert breaker.acquire(1_000_000.0) is None
    assert (transitions[-1].actor, transitions[-1].reason) == ("alice", "vendor incident")
    breaker.reset(5.0, actor="bob")
    assert breaker.state is BreakerState.CLOSED
    assert transitions[-1].actor == "bob"
    assert transitions[-1].reason == "reset by operator"
    assert breaker.acquire(5.0) is not None


def test_disabled_admits_everything_and_keeps_counting() -> None:
    breaker, _ = make(failure_threshold=2)
    breaker.disable(0.0, actor="ops", reason="debugging")
    fail(breaker, 0.0, 10)
    assert breaker.state is BreakerState.DISABLED
    assert breaker.consecutive_failures == 10
    breaker.reset(1.0, actor="ops")
    assert breaker.consecutive_failures == 0
    fail(breaker, 1.0, 2)
    assert breaker.state is BreakerState.OPEN


def test_new_config_applies_to_later_transitions() -> None:
    breaker, _ = make(failure_threshold=5)
    fail(breaker, 0.0, 2)
    breaker.config = BreakerConfig(failure_threshold=3)
    fail(breaker, 0.0)
    assert breaker.state is BreakerState.OPEN


class BreakerMachine(RuleBasedStateMachine):
    """Random traffic, outcomes, clock jumps and operator actions never break the invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.breaker, self.transitions = make(failure_threshold=3, success_threshold=2, timeout_ms=1000)
        self.now = 0.0
        self.permits: list[Permit] = []

    @rule()
    def acquire(self) -> None:
        permit = self.breaker.acquire(self.now)
        if permit is not None:
            self.permits.append(permit)

    @precondition(lambda self: self.permits)
    @rule(index=st.integers(min_value=0), outcome=st.sampled_from(list(AttemptOutcome)))
    def finish(self, index: int, outcome: AttemptOutcome) -> None:
        permit = self.permits.pop(index % len(self.permits))
        self.breaker.record(permit, outcome, self.now)

    @rule(seconds=st.floats(min_value=0, max_value=2))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.breaker.poll(self.now)

    @rule(action=st.sampled_from(["trip", "reset", "disable"]))
    def operate(self, action: str) -> None:
        getattr(self.breaker, action)(self.now, actor="op")

    @invariant()
    def consistent(self) -> None:
        b = self.breaker
        assert (b.half_open_at is not None) == (b.state is BreakerState.OPEN)
        if b.probe_in_flight:
            assert b.state is BreakerState.HALF_OPEN
            live = [p for p in self.permits if p.probe and p.generation == b.generation]
            assert len(live) == 1, "exactly one probe is out while the slot is taken"
        if b.state is BreakerState.CLOSED:
            assert b.consecutive_failures < b.config.failure_threshold
        for previous, following in zip(self.transitions, self.transitions[1:], strict=False):
            assert previous.to_state is following.from_state


TestBreakerMachine = BreakerMachine.TestCase
TestBreakerMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
