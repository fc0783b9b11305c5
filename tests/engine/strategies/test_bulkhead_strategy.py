"""The bulkhead strategy's hooks with a fake call (the turn's deadline cuts the wait, events only when
observed, a reload hands the state over), its options and its events."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from engine.events import Event, event_from_dict
from engine.kinds import ErrorKind
from engine.strategies.base import Refusal, Strategy, overrides
from engine.strategies.bulkhead import BulkheadOptions, BulkheadQueued, BulkheadRejected, BulkheadStrategy
from tests.engine.conftest import WALL

on_both_backends = pytest.mark.anyio


def options(**limits: float) -> BulkheadOptions:
    """One slot and a queue of 100 unless told otherwise."""
    return BulkheadOptions.model_validate({"max_concurrent": 1, "max_queued": 100} | limits)


async def settle() -> None:
    """Let every task that can run, run (no virtual time passes)."""
    for _ in range(5):
        await anyio.sleep(0)


# --- the strategy -------------------------------------------------------------------------


@dataclass
class FakeCall:
    """A CallView: the call a pipeline would show the strategy."""

    deadline: float | None = None
    observed: bool = True
    attempt: int = 1
    tool_id: str = "flight_search"
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
        return lambda: WALL + anyio.current_time()

    def announce(self, event: Event) -> None:
        self.events.append(event)


def strategy(**kwargs: Any) -> BulkheadStrategy:
    return BulkheadStrategy("flight_search", options(**kwargs))


def test_the_strategy_overrides_only_the_hooks_it_needs() -> None:
    bulkhead_strategy = strategy()
    assert BulkheadStrategy.section == "bulkhead" and BulkheadStrategy.options_type is BulkheadOptions
    assert overrides(bulkhead_strategy, "admit") and overrides(bulkhead_strategy, "attempt_ended")
    assert not overrides(bulkhead_strategy, "call_started")
    assert not overrides(bulkhead_strategy, "retry_refusal")


@on_both_backends
async def test_admit_takes_a_free_slot_and_attempt_ended_gives_it_back() -> None:
    bulkhead_strategy = strategy(max_concurrent=2)
    call = FakeCall()
    assert await bulkhead_strategy.admit(call) is None
    assert await bulkhead_strategy.admit(call) is None
    assert bulkhead_strategy.state.in_flight == 2
    bulkhead_strategy.attempt_ended(call)
    assert bulkhead_strategy.state.in_flight == 1
    assert call.events == []  # nothing to tell when nobody waited


@on_both_backends
async def test_admit_refuses_when_full_and_says_so_when_observed() -> None:
    bulkhead_strategy = strategy(max_concurrent=1, max_queued=0)
    call = FakeCall(attempt=2)
    assert await bulkhead_strategy.admit(call) is None
    refusal = await bulkhead_strategy.admit(call)
    assert refusal == Refusal(ErrorKind.BULKHEAD_FULL, "bulkhead full: 1 in flight, 0 queued", "bulkhead")
    assert not refusal.kind.executed and refusal.kind.transient
    (rejected,) = call.events
    assert rejected == BulkheadRejected(
        at=WALL, t=0.0, tool_id="flight_search", call_id="c1", turn_id="t1", attempt=2,
        reason="bulkhead full: 1 in flight, 0 queued", in_flight=1, queued=0, waited_ms=0.0,
    )  # fmt: skip
    unobserved = FakeCall(observed=False)
    assert await bulkhead_strategy.admit(unobserved) == refusal
    assert unobserved.events == []
    assert bulkhead_strategy.facts(0.0)["rejected_full"] == 2


@on_both_backends
async def test_the_turns_deadline_cuts_the_wait_by_cancelling_it_not_by_a_refusal() -> None:
    bulkhead_strategy = strategy(max_concurrent=1, queue_timeout_ms=1000)
    assert await bulkhead_strategy.admit(FakeCall()) is None
    await anyio.sleep(1.0)
    call = FakeCall(deadline=1.25)
    with anyio.move_on_after(0.25) as turn:  # the turn's deadline, as its runner enforces it
        await bulkhead_strategy.admit(call)
    assert turn.cancelled_caught
    assert anyio.current_time() == 1.25
    [queued] = call.events
    assert isinstance(queued, BulkheadQueued) and (queued.in_flight, queued.queued, queued.t) == (1, 1, 1.0)
    facts = bulkhead_strategy.facts(anyio.current_time())
    assert (facts["queued"], facts["rejected_timeout"]) == (0, 0), (
        "cut by the turn: no refusal, nobody left queued"
    )


@on_both_backends
async def test_without_a_deadline_the_queue_timeout_bounds_the_wait() -> None:
    bulkhead_strategy = strategy(max_concurrent=1, queue_timeout_ms=400)
    assert await bulkhead_strategy.admit(FakeCall()) is None
    refusal = await bulkhead_strategy.admit(FakeCall(deadline=None))
    assert anyio.current_time() == pytest.approx(0.4)
    assert refusal is not None and refusal.reason.startswith("bulkhead queue wait ran out after 0.4 s")
    # A deadline later than the queue timeout does not lengthen the wait.
    refusal = await bulkhead_strategy.admit(FakeCall(deadline=anyio.current_time() + 30))
    assert refusal is not None and anyio.current_time() == pytest.approx(0.8)


@on_both_backends
async def test_no_wait_when_the_deadline_has_passed_or_the_timeout_is_zero() -> None:
    for call, timeout_ms in ((FakeCall(deadline=-1.0), 1000.0), (FakeCall(), 0.0)):
        bulkhead_strategy = strategy(max_concurrent=1, queue_timeout_ms=timeout_ms)
        assert await bulkhead_strategy.admit(FakeCall()) is None
        refusal = await bulkhead_strategy.admit(call)
        assert refusal is not None and refusal.reason == "bulkhead full: 1 in flight, 0 queued"
        assert [type(e) for e in call.events] == [BulkheadRejected]  # never queued
    assert anyio.current_time() == 0.0


@on_both_backends
async def test_a_waiting_attempt_is_admitted_when_a_slot_frees() -> None:
    bulkhead_strategy = strategy(max_concurrent=1)
    first, second, unobserved = FakeCall(call_id="c1"), FakeCall(call_id="c2"), FakeCall(observed=False)
    assert await bulkhead_strategy.admit(first) is None
    results: list[Refusal | None] = []

    async def wait(call: FakeCall) -> None:
        results.append(await bulkhead_strategy.admit(call))

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, second)
        await settle()
        tg.start_soon(wait, unobserved)
        await anyio.sleep(0.3)
        bulkhead_strategy.attempt_ended(first)
    assert results[0] is None  # the first waiter, at 0.3 s
    assert isinstance(results[1], Refusal)  # the second ran out at 1 s: the slot stayed taken
    assert [type(e) for e in second.events] == [BulkheadQueued] and unobserved.events == []
    assert anyio.current_time() == 1.0
    assert bulkhead_strategy.state.in_flight == 1


@on_both_backends
async def test_a_reload_hands_the_occupants_and_the_queue_to_the_new_strategy() -> None:
    old = strategy(max_concurrent=1)
    assert await old.admit(FakeCall()) is None
    results: list[Refusal | None] = []

    async def wait(on: BulkheadStrategy) -> None:
        results.append(await on.admit(FakeCall()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, old)
        tg.start_soon(wait, old)
        await settle()
        new = strategy(max_concurrent=2, max_queued=5)
        new.handover(old)
        assert new.state is old.state
        assert (new.state.in_flight, new.state.queued, new.state.max_queued) == (2, 1, 5)
        old.attempt_ended(FakeCall())  # an attempt the old pipeline admitted ends
    assert results == [None, None]
    facts = new.facts(anyio.current_time())
    assert facts == {
        "in_flight": 2, "max_concurrent": 2, "queued": 0, "max_queued": 5, "rejected_full": 0,
        "rejected_timeout": 0, "wait_p95_ms": 0.0,
    }  # fmt: skip
    assert json.loads(json.dumps(facts)) == facts


def test_a_handover_from_another_kind_of_strategy_keeps_a_fresh_state() -> None:
    new = strategy()
    fresh = new.state
    new.handover(Strategy("flight_search", options()))
    assert new.state is fresh


# --- options and events -------------------------------------------------------------------


def test_options_defaults_and_bounds() -> None:
    assert BulkheadOptions(max_concurrent=4) == BulkheadOptions(
        max_concurrent=4, max_queued=0, queue_timeout_ms=1000.0
    )
    BulkheadOptions(max_concurrent=100_000, max_queued=1_000_000, queue_timeout_ms=86_400_000)
    BulkheadOptions(max_concurrent=1, queue_timeout_ms=0)


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"max_concurrent": 0},
        {"max_concurrent": 100_001},
        {"max_concurrent": True},
        {"max_concurrent": 2.5},
        {"max_concurrent": 4, "max_queued": -1},
        {"max_concurrent": 4, "max_queued": 1_000_001},
        {"max_concurrent": 4, "max_queued": False},
        {"max_concurrent": 4, "queue_timeout_ms": -1},
        {"max_concurrent": 4, "queue_timeout_ms": 86_400_001},
        {"max_concurrent": 4, "queue_timeout_ms": math.inf},
        {"max_concurrent": 4, "queue_timeout_ms": math.nan},
        {"max_concurrent": 4, "queue_timeout_ms": True},
        {"max_concurrent": 4, "queue_size": 3},
    ],
)
def test_options_refuse_what_is_not_a_bulkhead(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        BulkheadOptions(**bad)


def test_options_are_frozen() -> None:
    with pytest.raises(ValidationError):
        BulkheadOptions(max_concurrent=4).max_concurrent = 5  # type: ignore[misc]


def test_events_describe_themselves_and_survive_json() -> None:
    queued = BulkheadQueued(
        at=WALL, t=1.0, tool_id="flight_search", call_id="c1", turn_id="t1", attempt=2, in_flight=4,
        queued=3,
    )  # fmt: skip
    rejected = BulkheadRejected(
        at=WALL, t=2.0, tool_id="flight_search", call_id="c1", turn_id=None, attempt=2,
        reason="bulkhead full: 4 in flight, 8 queued", in_flight=4, queued=8, waited_ms=0.0,
    )  # fmt: skip
    assert queued.describe() == "flight_search attempt 2 queued by the bulkhead (4 in flight, 3 queued)"
    assert rejected.describe() == "flight_search attempt 2 rejected: bulkhead full: 4 in flight, 8 queued"
    for event in (queued, rejected):
        data = json.loads(json.dumps(event.to_dict()))
        assert data["event_type"] == type(event).__name__
        assert event_from_dict(data) == event
