"""Hedging in the engine (issue 24 §2), on virtual time, both backends, every engine mode: a read-only
tool's slow attempt raced by a hedge, the first success winning and the others cancelled without a
failure or breaker evidence, ``max_hedges``, hedges refused by a full bulkhead, the breaker or the
retry budget, the live p95, all attempts failing into the normal decision, a turn's deadline, a
reload that keeps the counts, and tools without the section untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import BreakerState, Engine, ToolManifest, Turn, report_progress
from engine.handler import FailureContext, HandlerDecision
from engine.kinds import ErrorKind
from engine.outcomes import CallStatus
from engine.strategies.hedging import HedgingStrategy
from engine.strategies.retry.policy import RetryPolicy
from engine.turn import ToolCall
from tests.engine.conftest import Scripted, after, hang, new_engine, recorded
from tests.engine.workload import mixed_engine, workload

pytestmark = pytest.mark.anyio

NO_RETRY = RetryPolicy(max_attempts=1)


def hedged(hedge_after_ms: float | str = 100, max_hedges: int = 1, **more: Any) -> ToolManifest:
    return ToolManifest(
        id="t",
        side_effect="read_only",
        retry_policy=more.pop("retry_policy", NO_RETRY),
        hedging={"hedge_after_ms": hedge_after_ms, "max_hedges": max_hedges},
        **more,
    )


def facts(engine: Engine) -> dict[str, Any]:
    return dict(engine.stats()["t"].strategies["hedging"])


async def test_a_hung_first_attempt_loses_to_the_hedge_and_is_cancelled_without_a_failure() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100))
    tool = Scripted(hang, after(0.05, "fast"))
    engine.register("t", tool)
    events = recorded(engine)
    start = anyio.current_time()
    result = await engine.try_call("t")
    assert result.value == "fast"
    assert result.attempts == 2, "the winner's number"
    assert anyio.current_time() - start == pytest.approx(0.15, abs=0.001), "hedge_after + the hedge's latency"
    assert tool.cancelled == 1, "the tool saw its first attempt cancelled"
    assert tool.started == pytest.approx([start, start + 0.1], abs=0.001)
    breaker = engine.breaker("t")
    assert (breaker.state, breaker.consecutive_failures) == (BreakerState.CLOSED, 0)
    assert events.types() == [
        "AttemptStarted", "HedgeStarted", "AttemptStarted",
        "AttemptAbandoned", "HedgeRaceWon", "CallSucceeded",
    ]  # fmt: skip
    [started] = events.of("HedgeStarted")
    assert (started.attempt, started.after_attempt, started.after_ms, started.in_flight) == (2, 1, 100.0, 1)
    [abandoned] = events.of("AttemptAbandoned")
    assert (abandoned.attempt, abandoned.won_by) == (1, 2)
    assert abandoned.t - start == pytest.approx(0.15, abs=0.001), "its end is visible: the timeline draws it"
    assert abandoned.latency_ms == pytest.approx(150, abs=1)
    [won] = events.of("HedgeRaceWon")
    assert (won.attempt, won.hedge, won.cancelled) == (2, True, (1,))
    assert won.attempt_ms == pytest.approx(50, abs=1)
    [succeeded] = events.of("CallSucceeded")
    assert (succeeded.attempts, succeeded.attempt_ms) == (2, pytest.approx(50, abs=1))
    stats = engine.stats()["t"].life
    assert (stats.calls, stats.successes, stats.error_count, stats.failures) == (1, 1, 0, 0)
    assert (stats.retry_count, stats.retry_successes) == (1, 1), "a hedge is an attempt after the first"
    assert facts(engine) == {
        "hedges_started": 1, "hedges_won": 1, "attempts_cancelled": 1, "hedges_refused": 0,
        "hedge_after_ms": 100.0,
    }  # fmt: skip


async def test_a_fast_first_attempt_starts_no_hedge() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100))
    tool = Scripted(after(0.09, "ok"))
    engine.register("t", tool)
    events = recorded(engine)
    assert await engine.call("t") == "ok"
    assert tool.calls == 1
    assert events.types() == ["AttemptStarted", "CallSucceeded"]
    assert facts(engine)["hedges_started"] == 0


async def test_the_first_attempt_may_win_over_its_hedge() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100))
    tool = Scripted(after(0.15, "first"), after(1.0, "hedge"))
    engine.register("t", tool)
    events = recorded(engine)
    result = await engine.try_call("t")
    assert (result.value, result.attempts) == ("first", 1)
    assert tool.cancelled == 1
    [won] = events.of("HedgeRaceWon")
    assert (won.attempt, won.hedge, won.cancelled) == (1, False, (2,))
    assert facts(engine)["hedges_won"] == 0
    assert engine.stats()["t"].life.retry_successes == 0, "the call succeeded on its first attempt"


async def test_at_most_max_hedges_start_each_after_the_one_before() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100, max_hedges=2))
    tool = Scripted(after(1.0, "a"), after(1.0, "b"), after(0.5, "c"), after(0.01, "never"))
    engine.register("t", tool)
    events = recorded(engine)
    start = anyio.current_time()
    result = await engine.try_call("t")
    assert (result.value, result.attempts) == ("c", 3)
    assert tool.calls == 3, "max_hedges 2: no fourth attempt"
    assert [t - start for t in tool.started] == pytest.approx([0.0, 0.1, 0.2], abs=0.001)
    assert anyio.current_time() - start == pytest.approx(0.7, abs=0.001)
    assert tool.cancelled == 2
    assert [e.in_flight for e in events.of("HedgeStarted")] == [1, 2]
    assert sorted(e.attempt for e in events.of("AttemptAbandoned")) == [1, 2]


async def test_a_hedge_a_full_bulkhead_refuses_does_not_start() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100, bulkhead={"max_concurrent": 1}))
    tool = Scripted(after(0.5, "slow"), after(0.01, "never"))
    engine.register("t", tool)
    events = recorded(engine)
    result = await engine.try_call("t")
    assert (result.value, result.attempts) == ("slow", 1)
    assert tool.calls == 1, "the refused hedge never reached the tool"
    [refused] = events.of("HedgeRefused")
    assert (refused.attempt, refused.reason) == (2, "bulkhead full: 1 in flight, 0 queued")
    assert [e.attempt for e in events.of("BulkheadRejected")] == [2]
    assert events.of("HedgeStarted") == [] and events.of("HedgeRaceWon") == []
    assert facts(engine)["hedges_refused"] == 1
    assert engine.stats()["t"].strategies["bulkhead"]["in_flight"] == 0
    assert engine.stats()["t"].life.retry_count == 0


async def test_a_hedge_holds_a_bulkhead_slot_and_gives_it_back_when_cancelled() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100, bulkhead={"max_concurrent": 2}))
    engine.register("t", Scripted(hang, after(0.05, "fast")))
    seen: list[int] = []

    async def watch() -> None:
        await anyio.sleep(0.12)
        seen.append(engine.stats()["t"].strategies["bulkhead"]["in_flight"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        assert await engine.call("t") == "fast"
    assert seen == [2], "both attempts held a slot while they raced"
    assert engine.stats()["t"].strategies["bulkhead"]["in_flight"] == 0


async def test_a_spent_retry_budget_refuses_the_hedge() -> None:
    spent = {"budget_percent": 0, "min_retries_per_s": 0}
    engine = await new_engine(hedged(hedge_after_ms=100, retry_budget=spent))
    tool = Scripted(after(0.3, "slow"))
    engine.register("t", tool)
    events = recorded(engine)
    assert await engine.call("t") == "slow"
    assert tool.calls == 1
    [refused] = events.of("HedgeRefused")
    assert refused.reason.startswith("retry budget spent")
    assert [e.attempt for e in events.of("RetryBudgetSpent")] == [2]


async def test_a_hedge_consents_through_the_retry_budget_and_spends_a_retry() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100, retry_budget={"budget_percent": 100}))
    engine.register("t", Scripted(hang, after(0.05, "fast")))
    assert await engine.call("t") == "fast"
    assert engine.stats()["t"].strategies["retry_budget"]["retries"] == 1


async def test_an_open_breaker_refuses_the_hedge() -> None:
    manifest = hedged(hedge_after_ms=100, circuit_breaker={"failure_threshold": 1, "timeout_ms": 60_000})
    engine = await new_engine(manifest)
    tool = Scripted(after(0.3, "slow"))
    engine.register("t", tool)
    events = recorded(engine)

    async def trip() -> None:
        await anyio.sleep(0.05)
        engine.trip("t")

    async with anyio.create_task_group() as tg:
        tg.start_soon(trip)
        assert await engine.call("t") == "slow"
    assert tool.calls == 1
    [refused] = events.of("HedgeRefused")
    assert refused.reason == "circuit breaker for t is FORCED_OPEN"


async def test_p95_mode_waits_for_a_p95_then_hedges_after_the_live_one() -> None:
    engine = await new_engine(hedged(hedge_after_ms="p95"))
    tool = Scripted(after(0.2, "cold"), *[after(0.05, "warm")] * 20, hang, after(0.01, "hedge"))
    engine.register("t", tool)
    events = recorded(engine)
    assert await engine.call("t") == "cold", "no p95 yet: no hedge"
    assert facts(engine)["hedges_started"] == 0
    for _ in range(20):
        assert await engine.call("t") == "warm"
    await anyio.sleep(1.0)  # the p95 is read once per engine second
    p95_ms = engine.stats()["t"].window.p95_ms
    assert p95_ms == pytest.approx(50, rel=0.03)
    start = anyio.current_time()
    assert await engine.call("t") == "hedge"
    [started] = events.of("HedgeStarted")
    assert started.after_ms == pytest.approx(p95_ms)
    assert started.t - start == pytest.approx(p95_ms / 1000.0, abs=1e-6)
    assert facts(engine)["hedge_after_ms"] == pytest.approx(p95_ms)


async def test_an_attempt_failing_while_another_runs_waits_for_it() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100))
    tool = Scripted(after(0.3, "first"), after(0.05, ConnectionResetError("reset")))
    engine.register("t", tool)
    events = recorded(engine)
    result = await engine.try_call("t")
    assert (result.value, result.attempts) == ("first", 1)
    [failed] = events.of("ToolError")
    assert (failed.attempt, failed.decision, failed.retry_count) == (2, "wait", 1)
    assert failed.decision_reason == "1 other attempt(s) of the call still running"
    assert engine.breaker("t").consecutive_failures == 0, "the success after it reset the streak"
    life = engine.stats()["t"].life
    assert (life.error_count, life.successes, life.failures) == (1, 1, 0)


async def test_when_every_attempt_fails_the_last_failure_is_decided_as_usual() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100, retry_policy=RetryPolicy(max_attempts=2)))
    tool = Scripted(after(0.3, ConnectionResetError("first")), after(0.05, ConnectionResetError("hedge")))
    engine.register("t", tool)
    events = recorded(engine)
    result = await engine.try_call("t")
    assert result.error is not None
    assert (result.error.kind, result.attempts) == (ErrorKind.CONNECTION_RESET, 2)
    assert [(e.attempt, e.decision) for e in events.of("ToolError")] == [(2, "wait"), (1, "escalate")]
    assert "first" in events.of("ToolError")[1].error, "the last failure is the one decided about"
    [call_failed] = events.of("CallFailed")
    assert call_failed.attempts == 2, "max_attempts counts the hedge"
    assert engine.breaker("t").consecutive_failures == 2, "real failures are evidence"


async def test_a_retry_after_every_attempt_failed_is_numbered_after_them() -> None:
    policy = RetryPolicy(max_attempts=4, initial_delay_ms=10, jitter_percent=0)
    engine = await new_engine(hedged(hedge_after_ms=100, retry_policy=policy))
    tool = Scripted(
        after(0.3, ConnectionResetError("a")), after(0.05, ConnectionResetError("b")), after(0.01, "retried")
    )
    engine.register("t", tool)
    events = recorded(engine)
    result = await engine.try_call("t")
    assert (result.value, result.attempts) == ("retried", 3)
    assert [e.attempt for e in events.of("AttemptStarted")] == [1, 2, 3]
    assert [(e.attempt, e.decision) for e in events.of("ToolError")] == [(2, "wait"), (1, "retry")]
    assert len(events.of("HedgeStarted")) == 1, "max_hedges is per call: the retry is not hedged again"
    assert engine.stats()["t"].life.retry_count == 2


async def test_a_timed_out_attempt_is_a_failure_and_the_hedge_still_wins() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100, timeout_ms=200))
    engine.register("t", Scripted(hang, after(0.15, "hedge")))
    events = recorded(engine)
    assert await engine.call("t") == "hedge"
    assert [e.attempt for e in events.of("ToolTimeout")] == [1]
    assert [(e.attempt, e.decision) for e in events.of("ToolError")] == [(1, "wait")]
    assert engine.stats()["t"].life.timeout_count == 1


async def test_a_turns_deadline_cancels_the_race_and_leaves_nothing_behind() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100, bulkhead={"max_concurrent": 4}))
    tool = Scripted(hang)
    engine.register("t", tool)
    result = await engine.run_turn(Turn([ToolCall("a", "t")], deadline_s=0.25))
    assert result.outcomes["a"].status is CallStatus.TIMED_OUT
    assert (tool.calls, tool.cancelled) == (2, 2)
    assert engine.stats()["t"].strategies["bulkhead"]["in_flight"] == 0
    assert engine.breaker("t").consecutive_failures == 0
    assert facts(engine)["attempts_cancelled"] == 0, "cancelled by the turn, not by a winner"
    assert [e.event_type for e in result.trace.events if e.event_type == "AttemptAbandoned"] == []


async def test_a_reload_keeps_the_counts_under_the_new_delay(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  hedging: {hedge_after_ms: 100}\n")
    engine = Engine(tmp_path)  # a directory to reload from (the manifests, not the engine mode, matter here)
    engine.register("t", Scripted(hang, after(0.05, "a"), hang, after(0.05, "b")))
    assert await engine.call("t") == "a"
    path.write_text(
        "tool:\n  id: t\n  side_effect: read_only\n  hedging: {hedge_after_ms: 200, max_hedges: 2}\n"
    )
    engine.reload_manifests()
    strategy = engine.runtime.tools["t"].pipeline.hedging
    assert isinstance(strategy, HedgingStrategy) and strategy.options.max_hedges == 2
    start = anyio.current_time()
    assert await engine.call("t") == "b"
    assert anyio.current_time() - start == pytest.approx(0.25, abs=0.001)
    assert facts(engine) | {"hedge_after_ms": None} == {
        "hedges_started": 2, "hedges_won": 2, "attempts_cancelled": 2, "hedges_refused": 0,
        "hedge_after_ms": None,
    }  # fmt: skip
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n")
    engine.reload_manifests()
    assert engine.runtime.tools["t"].pipeline.hedging is None


@pytest.mark.parametrize("side_effect", ["read_only", "idempotent"])
async def test_without_the_section_nothing_changes(side_effect: str) -> None:
    engine = await new_engine(
        ToolManifest(id="t", side_effect=side_effect, timeout_ms=300, retry_policy=NO_RETRY)
    )
    tool = Scripted(hang, "never")
    engine.register("t", tool)
    events = recorded(engine)
    result = await engine.try_call("t")
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
    assert tool.calls == 1
    assert events.types() == ["AttemptStarted", "ToolTimeout", "ToolError", "CallFailed"]
    assert engine.runtime.tools["t"].pipeline.hedging is None
    assert "hedging" not in engine.stats()["t"].strategies


async def test_an_opened_stream_is_not_hedged() -> None:
    engine = await new_engine(hedged(hedge_after_ms=100))

    async def feed() -> Any:
        await anyio.sleep(0.3)
        yield 1

    engine.register("t", feed)
    events = recorded(engine)
    async with engine.stream("t") as chunks:
        assert [chunk async for chunk in chunks] == [1]
    assert events.of("HedgeStarted") == []


async def test_a_hung_attempt_is_hedged_once_the_tool_has_a_p95() -> None:
    engine = await new_engine(hedged(hedge_after_ms="p95"))
    tool = Scripted(hang, after(0.05, "warm"), after(0.01, "hedge"))
    engine.register("t", tool)
    result: list[Any] = []
    start = anyio.current_time()

    async def hung() -> None:
        result.append(await engine.call("t"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(hung)  # no p95 yet: not hedged
        await anyio.sleep(0.5)
        assert await engine.call("t") == "warm"  # the tool has a p95 now (50 ms)
    assert result == ["hedge"]
    assert [t - start for t in tool.started] == pytest.approx([0.0, 0.5, 1.0], abs=0.001), "the next second"


async def test_a_hedge_waiting_for_a_bulkhead_slot_is_called_off_when_the_first_attempt_wins() -> None:
    bulkhead = {"max_concurrent": 1, "max_queued": 1, "queue_timeout_ms": 5000}
    engine = await new_engine(hedged(hedge_after_ms=100, bulkhead=bulkhead))
    tool = Scripted(after(0.3, "first"), after(0.01, "never"))
    engine.register("t", tool)
    events = recorded(engine)
    start = anyio.current_time()
    assert await engine.call("t") == "first"
    assert anyio.current_time() - start == pytest.approx(0.3, abs=0.001)
    assert tool.calls == 1
    assert [e.attempt for e in events.of("BulkheadQueued")] == [2]
    assert events.of("HedgeStarted") == [] and events.of("HedgeRefused") == []
    facts = engine.stats()["t"].strategies["bulkhead"]
    assert (facts["in_flight"], facts["queued"]) == (0, 0), "the queued hedge left nothing behind"
    assert engine.breaker("t").consecutive_failures == 0
    assert await engine.call("t") == "never", "the slot is free again"


async def test_a_hedge_waiting_for_a_slot_starts_once_the_slot_frees_and_can_win() -> None:
    bulkhead = {"max_concurrent": 1, "max_queued": 1, "queue_timeout_ms": 5000}
    engine = await new_engine(hedged(hedge_after_ms=100, bulkhead=bulkhead))
    tool = Scripted(after(0.2, ConnectionResetError("reset")), after(0.05, "hedge"))
    engine.register("t", tool)
    events = recorded(engine)
    start = anyio.current_time()
    result = await engine.try_call("t")
    assert (result.value, result.attempts) == ("hedge", 2)
    assert [t - start for t in tool.started] == pytest.approx([0.0, 0.2], abs=0.001)
    assert [(e.attempt, e.decision) for e in events.of("ToolError")] == [(1, "wait")]


async def test_each_attempt_has_its_own_idle_window() -> None:
    engine = await new_engine(hedged(hedge_after_ms=50, timeout_ms=1000, idle_timeout_ms=100))

    async def busy() -> str:
        for _ in range(4):  # 200 ms, reporting progress every 50 ms: never idle for 100 ms
            await anyio.sleep(0.05)
            report_progress()
        return "busy"

    tool = Scripted(hang, busy)
    engine.register("t", tool)
    events = recorded(engine)
    start = anyio.current_time()
    assert await engine.call("t") == "busy"
    assert anyio.current_time() - start == pytest.approx(0.25, abs=0.001)
    [timed_out] = events.of("ToolTimeout")
    assert (timed_out.attempt, timed_out.idle_ms) == (1, 100)
    assert timed_out.t - start == pytest.approx(0.1, abs=0.001), "the silent attempt's window ran out"
    assert [(e.attempt, e.decision) for e in events.of("ToolError")] == [(1, "wait")]


async def test_a_custom_handler_decides_the_last_failure_and_sees_the_hedges() -> None:
    seen: list[FailureContext] = []

    def handler(failure: FailureContext) -> HandlerDecision | None:
        seen.append(failure)
        return None

    engine = await new_engine(
        hedged(hedge_after_ms=100, retry_policy=RetryPolicy(max_attempts=2)), handler=handler
    )
    engine.register(
        "t", Scripted(after(0.3, ConnectionResetError("a")), after(0.05, ConnectionResetError("b")))
    )
    await engine.try_call("t")
    [failure] = seen  # asked once: about the last failure, not the one while another ran
    assert (failure.attempt, failure.message) == (2, "a")
    assert failure.strategies["hedging"]["hedges_started"] == 1


@pytest.mark.parametrize("seed", range(3))
async def test_in_a_generated_workload_every_hedged_attempt_ends_visibly_once(seed: int) -> None:
    engine, rng, events = await mixed_engine(seed)
    await workload(engine, rng)
    started = {
        (e.call_id, e.attempt) for e in events if e.event_type == "AttemptStarted" and e.tool_id == "mirror"
    }
    ends: dict[tuple[str, int], list[str]] = {}
    for e in events:
        if getattr(e, "tool_id", None) != "mirror":
            continue
        if e.event_type in ("ToolError", "AttemptAbandoned"):
            ends.setdefault((e.call_id, e.attempt), []).append(e.event_type)
        elif e.event_type == "CallSucceeded" and not e.partial:
            ends.setdefault((e.call_id, e.attempts), []).append(e.event_type)
    assert any(len({a for c, a in started if c == call}) > 1 for call, _ in started), "some calls raced"
    assert {key: len(kinds) for key, kinds in ends.items()} == dict.fromkeys(started, 1)
    facts = engine.stats()["mirror"].strategies["bulkhead"]
    assert (facts["in_flight"], facts["queued"]) == (0, 0)
