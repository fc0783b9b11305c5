"""Turns (the issue): DAG validation, concurrency, cascades, alternatives, partial results,
deadlines, stop, pluggable handlers, counting (spec-map kinds.turn-failed), determinism, summaries and traces.

Everything runs on trio's MockClock: sleeping 300 virtual seconds is free.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from engine import (
    BreakerConfig,
    BreakerState,
    Decision,
    ErrorKind,
    FailureContext,
    HandlerDecision,
    RetryPolicy,
    SideEffect,
    ToolError,
    ToolManifest,
)
from engine.events import ToolEvent
from engine.outcomes import CallOutcome, CallStatus, summarize
from engine.turn import ToolCall, Turn, TurnError, validate
from tests.engine.conftest import Scripted, after, hang, make_engine, new_engine

pytestmark = pytest.mark.anyio

BACKUP = "flight_search_backup"


async def engine_with(
    *names: str, manifests: tuple[ToolManifest, ...] = (), **kwargs: Any
) -> tuple[Any, dict]:
    """An engine with a Scripted tool per name (``"<name> result"``); returns the tools too."""
    engine = await new_engine(*manifests, **kwargs)
    tools = {name: engine.register(name, Scripted(f"{name} result")) for name in names}
    return engine, tools


# --- validation ---------------------------------------------------------------------------


async def rejected(turn: Turn, *names: str) -> tuple[TurnError, dict[str, Scripted]]:
    engine, tools = await engine_with(*(names or ("flight_search", "hotel_search")))
    with pytest.raises(TurnError) as info:
        await engine.run_turn(turn)
    assert all(tool.calls == 0 for tool in tools.values()), "nothing ran"
    return info.value, tools


def invalid(calls: list[ToolCall], **kwargs: Any) -> TurnError:
    """A turn with a structural problem cannot even be made."""
    with pytest.raises(TurnError) as info:
        Turn(calls, **kwargs)
    return info.value


def test_a_turn_with_duplicate_ids_cannot_be_made() -> None:
    error = invalid([ToolCall("a", "flight_search"), ToolCall("a", "hotel_search")])
    assert error.problems == ("turn: call id 'a' is used twice",)


async def test_validation_rejects_unknown_tool_listing_known_tools() -> None:
    error, _ = await rejected(Turn([ToolCall("a", "flight_search"), ToolCall("b", "car_rental")], id="trip"))
    (problem,) = error.problems
    assert "call 'b' uses unknown tool 'car_rental'" in problem
    assert problem.startswith("turn trip:")
    assert "(known: flight_search, hotel_search)" in problem


def test_validate_checks_the_tools_of_a_well_formed_turn() -> None:
    turn = Turn([ToolCall("a", "flight_search")])
    validate(turn, ["flight_search"])
    with pytest.raises(TurnError, match="uses unknown tool 'flight_search'"):
        validate(turn, ["hotel_search"])


def test_a_turn_with_a_dangling_dependency_cannot_be_made() -> None:
    error = invalid([ToolCall("a", "flight_search", depends_on=("ghost",))])
    assert error.problems == ("turn: call 'a' depends on 'ghost', which is not in the turn",)


def test_a_turn_with_a_self_dependency_cannot_be_made() -> None:
    error = invalid([ToolCall("a", "flight_search", depends_on=("a",))])
    assert error.problems == ("turn: call 'a' depends on itself",)


def test_a_turn_with_a_three_call_cycle_cannot_be_made() -> None:
    error = invalid(
        [
            ToolCall("a", "flight_search", depends_on=("b",)),
            ToolCall("b", "hotel_search", depends_on=("c",)),
            ToolCall("c", "flight_search", depends_on=("a",)),
        ]
    )
    (problem,) = error.problems
    assert "dependency cycle a → b → c → a" in problem


def test_a_turn_taking_inputs_from_a_non_dependency_cannot_be_made() -> None:
    error = invalid(
        [
            ToolCall("a", "flight_search"),
            ToolCall("b", "hotel_search"),
            ToolCall("c", "flight_search", depends_on=("a",), inputs={"hotels": "b"}),
        ]
    )
    assert error.problems == ("turn: call 'c' takes input 'hotels' from 'b', not a dependency",)


@pytest.mark.parametrize("deadline", [0, -5.0])
def test_a_turn_with_a_non_positive_deadline_cannot_be_made(deadline: float) -> None:
    error = invalid([ToolCall("a", "flight_search")], deadline_s=deadline)
    assert error.problems == (f"turn: deadline_s must be positive, got {deadline!r}",)


def test_turn_error_is_one_line_with_a_count_of_the_rest() -> None:
    error = invalid(
        [
            ToolCall("a", "flight_search"),
            ToolCall("a", "car_rental"),
            ToolCall("b", "hotel_search", depends_on=("b",)),
        ],
        deadline_s=0,
    )
    assert len(error.problems) == 3
    assert str(error) == f"{error.problems[0]} (and 2 more)"
    assert "\n" not in str(error)


# --- concurrency --------------------------------------------------------------------------


async def test_independent_calls_start_at_the_same_time() -> None:
    engine = await new_engine()
    tools = [engine.register(n, Scripted(n, duration=d)) for n, d in (("f", 5), ("h", 2), ("a", 9))]
    start = anyio.current_time()
    result = await engine.run_turn(Turn([ToolCall("f", "f"), ToolCall("h", "h"), ToolCall("a", "a")]))
    assert [t.started for t in tools] == [[start]] * 3
    assert anyio.current_time() - start == pytest.approx(9.0), "concurrent, not 5 + 2 + 9"
    assert result.results == {"f": "f", "h": "h", "a": "a"}


async def test_dependant_starts_after_all_dependencies_and_receives_outputs_by_id() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(["UA1"], duration=2))
    engine.register("hotel_search", Scripted(["Ritz"], duration=5))
    compare = engine.register("compare_prices", Scripted("cheapest"))
    turn = Turn(
        [
            ToolCall("flights", "flight_search"),
            ToolCall("hotels", "hotel_search"),
            ToolCall("compare", "compare_prices", args={"currency": "EUR"}, depends_on=("flights", "hotels")),
        ]
    )
    start = anyio.current_time()
    result = await engine.run_turn(turn)
    assert compare.started == [pytest.approx(start + 5.0)], "waits for the slower dependency"
    assert compare.args == [{"currency": "EUR", "flights": ["UA1"], "hotels": ["Ritz"]}]
    assert result.outcomes["compare"].value == "cheapest"


async def test_custom_inputs_map_dependency_outputs_to_parameters() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(["UA1"]))
    engine.register("hotel_search", Scripted(["Ritz"]))
    compare = engine.register("compare_prices", Scripted("cheapest"))
    turn = Turn(
        [
            ToolCall("f", "flight_search"),
            ToolCall("h", "hotel_search"),
            ToolCall("c", "compare_prices", depends_on=("f", "h"), inputs={"flights": "f", "hotels": "h"}),
        ]
    )
    await engine.run_turn(turn)
    assert compare.args == [{"flights": ["UA1"], "hotels": ["Ritz"]}]


async def test_empty_inputs_make_dependencies_ordering_only() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(["UA1"], duration=3))
    itinerary = engine.register("create_itinerary", Scripted("itinerary"))
    turn = Turn(
        [
            ToolCall("f", "flight_search"),
            ToolCall("i", "create_itinerary", args={"title": "trip"}, depends_on=("f",), inputs={}),
        ]
    )
    start = anyio.current_time()
    await engine.run_turn(turn)
    assert itinerary.args == [{"title": "trip"}], "no dependency output passed"
    assert itinerary.started == [pytest.approx(start + 3.0)], "but it still waited"


async def test_a_dependency_named_twice_is_waited_for_once() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(["UA1"], duration=2))
    compare = engine.register("compare_prices", Scripted("cheapest"))
    turn = Turn([ToolCall("f", "flight_search"), ToolCall("c", "compare_prices", depends_on=("f", "f"))])
    result = await engine.run_turn(turn)
    assert compare.calls == 1, "released once, run once"
    assert compare.args == [{"f": ["UA1"]}]
    assert turn.dependants["f"] == ("c",) and turn.blockers == {"c": 1}
    assert result.outcomes["c"].status is CallStatus.SUCCEEDED


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_turns_on_asyncio_with_the_engine_running() -> None:
    """The running engine reads the loop's clock and makes its own task groups; traces stay canonical."""
    engine = make_engine(
        *(ToolManifest(id=n, retry_policy=RetryPolicy(initial_delay_ms=0, max_delay_ms=0)) for n in "abcde")
    )
    for name in "abcde":
        engine.register(name, Scripted(ConnectionResetError("reset"), name))  # fails once, then succeeds
    turn = Turn(
        [
            ToolCall("a", "a"),
            ToolCall("b", "b"),
            ToolCall("c", "c"),
            ToolCall("d", "d", depends_on=("a", "b"), inputs={}),
            ToolCall("e", "e", depends_on=("c",), inputs={}),
        ]
    )
    async with engine:
        assert engine.runtime.clock() == pytest.approx(anyio.current_time(), abs=0.5)
        results = [await engine.run_turn(turn) for _ in range(3)]
    assert engine.runtime.clock is anyio.current_time, "restored when the engine stops"

    def canonical(event: Any) -> tuple[float, int, int]:  # time, then (depth, position) of the call
        if event.event_type == "TurnStarted":
            return (event.t, -1, 0)
        return (event.t, *turn.ranks.get(getattr(event, "call_id", None) or "", (1 << 30, 0)))

    for result in results:
        assert result.outcome == "ok" and result.results == {n: n for n in "abcde"}
        events = result.trace.events
        assert events == sorted(events, key=canonical)
        assert events[0].event_type == "TurnStarted" and events[-1].event_type == "TurnFinished"
    first = results[0].trace.events
    assert sum(e.event_type == "ToolError" for e in first) == 5, "each call failed once and was retried"


# --- cascades -----------------------------------------------------------------------------

CASCADE_TOOLS = ("flight_search", "hotel_search", "compare_prices", "create_itinerary", "book_trip")


async def failing_flights(**kwargs: Any) -> tuple[Any, dict]:
    engine, tools = await engine_with(*CASCADE_TOOLS[1:], **kwargs)
    tools["flight_search"] = engine.register(
        "flight_search", Scripted(ValueError("Invalid airport code: XYZ"))
    )
    return engine, tools


async def test_optional_chain_is_skipped_transitively() -> None:
    engine, tools = await failing_flights()
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("B", "compare_prices", depends_on=("A",), optional=True),
            ToolCall("C", "create_itinerary", depends_on=("B",), optional=True),
            ToolCall("D", "book_trip", depends_on=("C",), optional=True),
            ToolCall("H", "hotel_search"),
        ]
    )
    result = await engine.run_turn(turn)
    statuses = {cid: o.status for cid, o in result.outcomes.items()}
    assert statuses == {
        "A": CallStatus.FAILED,
        "B": CallStatus.SKIPPED,
        "C": CallStatus.SKIPPED,
        "D": CallStatus.SKIPPED,
        "H": CallStatus.SUCCEEDED,
    }
    assert [tools[t].calls for t in ("compare_prices", "create_itinerary", "book_trip")] == [0, 0, 0]
    skipped = result.trace.of("CallSkipped")
    assert [(e.call_id, e.blocked_by) for e in skipped] == [("B", ("A",)), ("C", ("B",)), ("D", ("C",))]
    assert result.outcomes["D"].reason == "optional; dependency did not succeed (C skipped)"


async def test_required_call_after_skipped_optional_is_escalated() -> None:
    engine, tools = await failing_flights()
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("B", "compare_prices", depends_on=("A",), optional=True),
            ToolCall("C", "create_itinerary", depends_on=("B",)),
        ]
    )
    result = await engine.run_turn(turn)
    assert result.outcomes["B"].status is CallStatus.SKIPPED
    assert result.outcomes["C"].status is CallStatus.ESCALATED
    assert tools["create_itinerary"].calls == 0
    (event,) = result.trace.of("CallEscalated")
    assert event.call_id == "C" and event.blocked_by == ("B",)
    assert event.reason == "required but missing input (B skipped)"
    assert [o.call_id for o in result.escalations] == ["A", "C"]


async def test_default_wins_over_optional_and_mixes_with_real_outputs() -> None:
    engine, tools = await failing_flights()
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("H", "hotel_search"),
            ToolCall("C", "compare_prices", depends_on=("A", "H"), optional=True, default=[]),
        ]
    )
    result = await engine.run_turn(turn)
    assert tools["compare_prices"].args == [{"A": [], "H": "hotel_search result"}]
    outcome = result.outcomes["C"]
    assert outcome.status is CallStatus.SUCCEEDED and outcome.used_default
    assert not result.trace.of("CallSkipped"), "the default wins: not skipped"
    (event,) = result.trace.of("DefaultUsed")
    assert event.call_id == "C" and event.blocked_by == ("A",)
    assert "compare prices (with a default input)" in result.summary


async def test_cascade_events_carry_blocked_by_and_reason() -> None:
    engine, _ = await failing_flights()
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("B", "compare_prices", depends_on=("A",), optional=True),
            ToolCall("C", "create_itinerary", depends_on=("A",)),
        ]
    )
    result = await engine.run_turn(turn)
    (skipped,) = result.trace.of("CallSkipped")
    (escalated,) = result.trace.of("CallEscalated")
    assert (skipped.blocked_by, skipped.reason) == (("A",), "optional; dependency did not succeed (A failed)")
    assert (escalated.blocked_by, escalated.reason) == (("A",), "required but missing input (A failed)")


async def test_default_used_event_carries_blocked_by_and_reason() -> None:
    engine, _ = await failing_flights()
    turn = Turn(
        [ToolCall("A", "flight_search"), ToolCall("C", "compare_prices", depends_on=("A",), default=[])]
    )
    result = await engine.run_turn(turn)
    (event,) = result.trace.of("DefaultUsed")
    assert getattr(event, "blocked_by", None) == ("A",)
    assert "A failed" in getattr(event, "reason", "")


async def test_skipped_and_escalated_calls_are_counted_in_metrics() -> None:
    engine, _ = await failing_flights()
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("B", "compare_prices", depends_on=("A",), optional=True),
            ToolCall("C", "create_itinerary", depends_on=("A",)),
            ToolCall("D", "create_itinerary", depends_on=("B",), optional=True),
        ]
    )
    await engine.run_turn(turn)
    stats = engine.stats()
    assert stats["compare_prices"].life.skipped == 1
    assert stats["create_itinerary"].life.skipped == 2, "one escalated, one skipped"
    assert stats["create_itinerary"].life.calls == 0, "never run"
    assert stats["flight_search"].life.skipped == 0


# --- alternatives -------------------------------------------------------------------------


async def with_backup(
    primary: Scripted, backup: Scripted, *, alternatives: tuple[str, ...] = (BACKUP,)
) -> Any:
    manifest = ToolManifest(
        id="flight_search", alternatives=alternatives, retry_policy=RetryPolicy(max_attempts=3)
    )
    engine = await new_engine(manifest)
    engine.register("flight_search", primary)
    engine.register(BACKUP, backup)
    return engine


async def test_alternative_used_after_retries_are_exhausted() -> None:
    primary, backup = Scripted(ConnectionResetError("reset")), Scripted("backup flights")
    engine = await with_backup(primary, backup)
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search", args={"origin": "SFO"})]))
    assert (primary.calls, backup.calls) == (3, 1)
    assert backup.args == [{"origin": "SFO"}], "the alternative gets the same arguments"
    outcome = result.outcomes["f"]
    assert outcome.status is CallStatus.SUCCEEDED and outcome.value == "backup flights"
    assert outcome.served_by == BACKUP
    (used,) = result.trace.of("AlternativeUsed")
    assert used.alternative == BACKUP
    assert used.reason == f"max attempts (3) reached; using {BACKUP}"


async def test_alternative_used_on_permanent_error() -> None:
    primary, backup = Scripted(NotImplementedError("route not supported")), Scripted("backup flights")
    engine = await with_backup(primary, backup)
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert (primary.calls, backup.calls) == (1, 1)
    assert result.outcomes["f"].served_by == BACKUP
    assert result.trace.of("ToolError")[0].decision == "alternative"


async def test_alternative_used_when_primary_circuit_is_open() -> None:
    primary, backup = Scripted("primary"), Scripted("backup flights")
    engine = await with_backup(primary, backup)
    engine.trip("flight_search", reason="maintenance")
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert primary.calls == 0 and backup.calls == 1
    types = [e.event_type for e in result.trace.for_call("f")]
    assert types.index("CallRejected") < types.index("AlternativeUsed")
    assert result.trace.of("AlternativeUsed")[0].reason.startswith("circuit breaker open")
    assert result.outcomes["f"].value == "backup flights"
    assert result.outcomes["f"].served_by == BACKUP


async def test_no_alternative_for_invalid_parameters() -> None:
    primary = Scripted(ToolError(ErrorKind.INVALID_PARAMETERS, "origin must be an IATA code"))
    backup = Scripted("backup flights")
    engine = await with_backup(primary, backup)
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert backup.calls == 0, "another tool would get the same bad call"
    assert result.outcomes["f"].status is CallStatus.FAILED
    assert result.outcomes["f"].decision is Decision.ESCALATE
    assert not result.trace.of("AlternativeUsed")


async def test_alternative_with_open_breaker_is_passed_over() -> None:
    manifest = ToolManifest(id="flight_search", alternatives=("backup_one", "backup_two"))
    engine = await new_engine(manifest)
    engine.register("flight_search", Scripted(NotImplementedError("nope")))
    one = engine.register("backup_one", Scripted("one"))
    two = engine.register("backup_two", Scripted("two"))
    engine.trip("backup_one")
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert (one.calls, two.calls) == (0, 1)
    assert result.outcomes["f"].served_by == "backup_two"
    assert result.outcomes["f"].value == "two"


async def test_alternatives_never_loop() -> None:
    engine = await new_engine(
        ToolManifest(id="tool_a", alternatives=("tool_b",)),
        ToolManifest(id="tool_b", alternatives=("tool_a",)),
    )
    a = engine.register("tool_a", Scripted(NotImplementedError("a cannot")))
    b = engine.register("tool_b", Scripted(NotImplementedError("b cannot")))
    with anyio.fail_after(60):
        result = await engine.run_turn(Turn([ToolCall("x", "tool_a")]))
    assert (a.calls, b.calls) == (1, 1)
    assert len(result.trace.of("AlternativeUsed")) == 1
    assert result.outcomes["x"].status is CallStatus.FAILED


async def test_standalone_call_uses_alternatives() -> None:
    primary, backup = Scripted(NotImplementedError("nope")), Scripted("backup flights")
    engine = await with_backup(primary, backup)
    result = await engine.try_call("flight_search", origin="SFO")
    assert result.ok and result.value == "backup flights"
    assert result.served_by == BACKUP
    assert await engine.call("flight_search", origin="LHR") == "backup flights"
    assert backup.args == [{"origin": "SFO"}, {"origin": "LHR"}]


# --- side effects ---------------------------------------------------------------------------


async def side_effecting(tool: Scripted, **policy: Any) -> Any:
    engine = await new_engine(ToolManifest(id="book_trip", side_effect=SideEffect.SIDE_EFFECTING, **policy))
    engine.register("book_trip", tool)
    return engine


async def test_side_effecting_call_not_retried_after_ambiguous_failure() -> None:
    tool = Scripted(ConnectionResetError("reset"), "booked")
    result = await (await side_effecting(tool)).run_turn(Turn([ToolCall("b", "book_trip")]))
    assert tool.calls == 1
    assert result.outcomes["b"].status is CallStatus.FAILED
    (failure,) = result.trace.of("ToolError")
    assert failure.decision_reason.startswith("side-effecting tool: not re-sent after an ambiguous")


async def test_side_effecting_call_retried_when_manifest_allows_it() -> None:
    tool = Scripted(ConnectionResetError("reset"), "booked")
    result = await (await side_effecting(tool, retry_ambiguous=True)).run_turn(
        Turn([ToolCall("b", "book_trip")])
    )
    assert tool.calls == 2 and result.outcomes["b"].value == "booked"


async def test_side_effecting_call_retried_after_unambiguous_failure() -> None:
    tool = Scripted(ToolError(ErrorKind.SERVICE_UNAVAILABLE, "503"), "booked")
    result = await (await side_effecting(tool)).run_turn(Turn([ToolCall("b", "book_trip")]))
    assert tool.calls == 2 and result.outcomes["b"].value == "booked"


async def test_side_effecting_ambiguous_failure_is_not_routed_to_an_alternative() -> None:
    engine = await new_engine(
        ToolManifest(
            id="book_trip", side_effect=SideEffect.SIDE_EFFECTING, alternatives=("book_trip_backup",)
        )
    )
    engine.register("book_trip", Scripted(ConnectionResetError("reset after sending")))
    backup = engine.register("book_trip_backup", Scripted("booked twice"))
    result = await engine.run_turn(Turn([ToolCall("b", "book_trip")]))
    assert backup.calls == 0, "the first booking may have gone through"
    assert result.outcomes["b"].decision is Decision.ESCALATE


# --- partial success ----------------------------------------------------------------------


async def test_partial_result_kept_after_retries_and_passed_on() -> None:
    manifest = ToolManifest(id="flight_search", retry_policy=RetryPolicy(max_attempts=3))
    engine = await new_engine(manifest)
    flights = engine.register(
        "flight_search",
        Scripted(ToolError(ErrorKind.PARTIAL_RESULT, "cut short", partial_result={"rows": 3})),
    )
    compare = engine.register("compare_prices", Scripted("compared"))
    turn = Turn([ToolCall("f", "flight_search"), ToolCall("c", "compare_prices", depends_on=("f",))])
    result = await engine.run_turn(turn)
    outcome = result.outcomes["f"]
    assert flights.calls == 3, "retried first"
    assert outcome.status is CallStatus.PARTIAL and outcome.ok
    assert outcome.value == {"rows": 3}
    assert outcome.decision is Decision.PARTIAL_SUCCESS
    assert compare.args == [{"f": {"rows": 3}}], "the dependant runs with the partial result"
    assert result.outcomes["c"].status is CallStatus.SUCCEEDED
    assert result.summary == "Completed flight search (partial) and compare prices."


# --- deadlines ----------------------------------------------------------------------------


async def test_retry_not_started_when_backoff_passes_turn_deadline() -> None:
    engine = await new_engine()
    tool = engine.register("flight_search", Scripted(after(0.95, ConnectionResetError("reset")), "flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")], deadline_s=1.0))
    assert tool.calls == 1, "a ~100 ms backoff does not fit in the 50 ms left"
    (failure,) = result.trace.of("ToolError")
    assert failure.decision != "retry"
    assert "turn budget" in failure.decision_reason
    assert result.outcomes["f"].status is CallStatus.FAILED
    assert not result.timed_out


async def test_attempt_deadline_is_turn_deadline_when_earlier() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", timeout_ms=30_000))
    engine.register("flight_search", Scripted(hang))
    engine.register("hotel_search", Scripted(hang))
    start = anyio.current_time()
    result = await engine.run_turn(
        Turn([ToolCall("f", "flight_search"), ToolCall("h", "hotel_search")], deadline_s=10)
    )
    started = {e.call_id: e for e in result.trace.of("AttemptStarted")}
    assert started["f"].deadline == pytest.approx(start + 10.0), "the turn's deadline comes first"
    assert started["f"].timeout_ms == 30_000
    assert result.outcomes["f"].status is CallStatus.TIMED_OUT


async def test_attempt_deadline_is_tool_timeout_when_earlier() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", timeout_ms=5_000))
    engine.register("flight_search", Scripted("flights"))
    start = anyio.current_time()
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")], deadline_s=60))
    (started,) = result.trace.of("AttemptStarted")
    assert started.deadline == pytest.approx(start + 5.0)


async def test_dependant_that_never_started_is_timed_out_not_executed() -> None:
    engine = make_engine(ToolManifest(id="flight_search", timeout_ms=400_000))
    flights = engine.register("flight_search", Scripted(hang))
    compare = engine.register("compare_prices", Scripted("compared"))
    turn = Turn(
        [ToolCall("f", "flight_search"), ToolCall("c", "compare_prices", depends_on=("f",))], deadline_s=20
    )
    async with engine:  # the timeout supervisor enforces attempt deadlines
        start = anyio.current_time()
        result = await engine.run_turn(turn)
        assert anyio.current_time() - start == pytest.approx(20.0)
    running, waiting = result.outcomes["f"], result.outcomes["c"]
    assert running.status is CallStatus.TIMED_OUT and running.launched and running.executed
    assert running.reason == "cut off by the turn's 20s deadline"
    assert flights.cancelled == 1
    assert waiting.status is CallStatus.TIMED_OUT
    assert waiting.reason.startswith("never started")
    assert not waiting.launched and not waiting.executed
    assert compare.calls == 0
    assert result.timed_out
    (exceeded,) = result.trace.of("TurnDeadlineExceeded")
    assert exceeded.unfinished == ("f", "c")
    assert result.executed == 1


async def test_no_retry_starts_after_the_turn_deadline() -> None:
    policy = RetryPolicy(max_attempts=100, max_total_time_ms=600_000)
    manifest = ToolManifest(
        id="flight_search", retry_policy=policy, circuit_breaker=BreakerConfig(failure_threshold=1000)
    )
    engine = await new_engine(manifest)
    tool = engine.register("flight_search", Scripted(after(3, ConnectionResetError("reset"))))
    start = anyio.current_time()
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")], deadline_s=10))
    await anyio.sleep(120)  # nothing keeps retrying in the background
    assert tool.calls == 4, "starts at ~0, ~3.1, ~6.3 and ~9.7 s"
    assert all(t - start < 10.0 for t in tool.started)
    assert tool.cancelled == 1, "the attempt running at the deadline was cancelled"
    assert all(e.t - start < 10.0 for e in result.trace.of("AttemptStarted"))
    assert result.outcomes["f"].status is CallStatus.TIMED_OUT


# --- stop ---------------------------------------------------------------------------------


async def test_stop_cancels_unfinished_calls() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", timeout_ms=60_000))
    flights = engine.register("flight_search", Scripted(hang))
    engine.register("hotel_search", Scripted("hotels", duration=1))
    compare = engine.register("compare_prices", Scripted("compared"))
    turn = Turn(
        [
            ToolCall("f", "flight_search"),
            ToolCall("h", "hotel_search"),
            ToolCall("c", "compare_prices", depends_on=("f",)),
        ]
    )
    stop = anyio.Event()

    async def press_stop() -> None:
        await anyio.sleep(5)
        stop.set()

    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(press_stop)
        result = await engine.run_turn(turn, stop=stop)
    assert anyio.current_time() - start == pytest.approx(5.0)
    assert result.canceled and not result.timed_out
    statuses = {cid: o.status for cid, o in result.outcomes.items()}
    assert statuses == {"f": CallStatus.CANCELED, "h": CallStatus.SUCCEEDED, "c": CallStatus.CANCELED}
    assert flights.cancelled == 1 and compare.calls == 0
    (canceled,) = result.trace.of("TurnCanceled")
    assert canceled.unfinished == ("f", "c")
    assert engine.breaker("flight_search").consecutive_failures == 0, "a stop is not a tool failure"
    assert engine.state("flight_search") is BreakerState.CLOSED
    assert engine.stats()["flight_search"].life.error_count == 0


# --- custom handlers ----------------------------------------------------------------------


class Graceful:
    """A handler class: every failure is dropped gracefully."""

    seen: list[FailureContext] = []  # noqa: RUF012 - shared on purpose: the engine instantiates it

    def decide(self, failure: FailureContext) -> HandlerDecision:
        Graceful.seen.append(failure)
        return HandlerDecision(Decision.FAIL_GRACEFULLY, "flights are a nice-to-have")


async def test_handler_class_with_decide() -> None:
    Graceful.seen = []
    engine = await new_engine(handler=Graceful)  # a class is instantiated
    tool = engine.register("flight_search", Scripted(ConnectionResetError("reset"), "flights"))
    engine.register("compare_prices", Scripted("compared"))
    turn = Turn(
        [ToolCall("f", "flight_search"), ToolCall("c", "compare_prices", depends_on=("f",), optional=True)]
    )
    result = await engine.run_turn(turn, handler=None)
    (failure,) = Graceful.seen
    assert failure.dependants == ("c",) and failure.remaining_s == pytest.approx(300.0)
    assert tool.calls == 1, "no retry: the handler decided"
    outcome = result.outcomes["f"]
    assert outcome.status is CallStatus.FAILED and outcome.decision is Decision.FAIL_GRACEFULLY
    assert "flights are a nice-to-have" in outcome.reason
    assert result.escalations == []


async def test_handler_plain_callable_escalates() -> None:
    def escalate(failure: FailureContext) -> HandlerDecision:
        return HandlerDecision(Decision.ESCALATE, "ask the user")

    engine = await new_engine(handler=escalate)
    tool = engine.register("flight_search", Scripted(ConnectionResetError("reset"), "flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert tool.calls == 1
    assert result.outcomes["f"].decision is Decision.ESCALATE
    assert [o.call_id for o in result.escalations] == ["f"]
    assert result.trace.of("ToolError")[0].decision_reason == "ask the user"


async def test_handler_returning_none_defers_to_default() -> None:
    seen: list[str] = []

    def observe(failure: FailureContext) -> None:
        seen.append(failure.call_id)

    engine = await new_engine(handler=observe)
    tool = engine.register("flight_search", Scripted(ConnectionResetError("reset"), "flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert seen == ["f"]
    assert tool.calls == 2 and result.outcomes["f"].value == "flights"
    assert result.trace.of("ToolError")[0].decision == "retry"


async def test_handler_that_raises_is_recorded_and_default_applies() -> None:
    def broken(failure: FailureContext) -> HandlerDecision:
        raise RuntimeError("boom")

    engine = await new_engine(handler=broken)
    tool = engine.register("flight_search", Scripted(ConnectionResetError("reset"), "flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    (failed,) = result.trace.of("HandlerFailed")
    assert failed.error == "RuntimeError: boom"
    assert failed.fallback == "retry"
    assert failed.call_id == "f" and failed.turn_id == result.turn_id
    assert tool.calls == 2 and result.outcomes["f"].value == "flights"


async def test_handler_retry_beyond_max_attempts_is_refused() -> None:
    def insist(failure: FailureContext) -> HandlerDecision:
        return HandlerDecision(Decision.RETRY, "try again", delay_s=0.01)

    engine = await new_engine(
        ToolManifest(id="flight_search", retry_policy=RetryPolicy(max_attempts=2)), handler=insist
    )
    tool = engine.register("flight_search", Scripted(ConnectionResetError("reset")))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert tool.calls == 2
    first, last = result.trace.of("ToolError")
    assert first.decision == "retry" and first.decision_reason == "try again"
    assert last.decision == "escalate"
    assert last.decision_reason.startswith("handler's retry refused")
    assert result.outcomes["f"].status is CallStatus.FAILED


async def test_handler_unavailable_alternative_is_refused() -> None:
    def elsewhere(failure: FailureContext) -> HandlerDecision:
        return HandlerDecision(Decision.ALTERNATIVE, "go elsewhere", alternative="nowhere")

    engine = await new_engine(handler=elsewhere)
    tool = engine.register("flight_search", Scripted(ConnectionResetError("reset"), "flights"))
    engine.register("nowhere", Scripted("unlisted"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    (failure,) = result.trace.of("ToolError")
    assert failure.decision == "retry", "the default decision applies"
    assert failure.decision_reason.startswith("handler's alternative 'nowhere' refused")
    assert tool.calls == 2 and result.outcomes["f"].served_by is None
    assert not result.trace.of("AlternativeUsed")


async def test_per_turn_handler_overrides_engine_handler() -> None:
    engine_seen: list[str] = []

    def engine_handler(failure: FailureContext) -> HandlerDecision:
        engine_seen.append(failure.tool_id)
        return HandlerDecision(Decision.ESCALATE, "engine says escalate")

    def turn_handler(failure: FailureContext) -> HandlerDecision:
        return HandlerDecision(Decision.FAIL_GRACEFULLY, "turn says carry on")

    engine = await new_engine(handler=engine_handler)
    engine.register("flight_search", Scripted(ConnectionResetError("reset")))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]), handler=turn_handler)
    assert engine_seen == []
    assert result.outcomes["f"].decision is Decision.FAIL_GRACEFULLY
    assert result.escalations == []


async def test_per_turn_handler_also_decides_for_the_alternative() -> None:
    engine_seen: list[str] = []
    turn_seen: list[str] = []

    def engine_handler(failure: FailureContext) -> None:
        engine_seen.append(failure.tool_id)

    def turn_handler(failure: FailureContext) -> None:
        turn_seen.append(failure.tool_id)

    engine = await new_engine(
        ToolManifest(id="flight_search", alternatives=(BACKUP,)), handler=engine_handler
    )
    engine.register("flight_search", Scripted(NotImplementedError("nope")))
    engine.register(BACKUP, Scripted(ConnectionResetError("reset"), "backup flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]), handler=turn_handler)
    assert result.outcomes["f"].value == "backup flights"
    assert turn_seen == ["flight_search", BACKUP]
    assert engine_seen == []


# --- executed-tool counting (spec-map kinds.turn-failed) ----------------------------------


async def test_turn_with_only_invalid_parameters_failures_is_failed() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(ToolError(ErrorKind.INVALID_PARAMETERS, "origin must be IATA")))
    engine.register("hotel_search", Scripted(ToolError(ErrorKind.INVALID_PARAMETERS, "city is required")))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search"), ToolCall("h", "hotel_search")]))
    assert [o.executed for o in result.outcomes.values()] == [False, False]
    assert result.executed == 0
    assert result.failed
    assert result.trace.of("TurnFinished")[0].executed == 0


async def test_turn_with_a_tool_timeout_counts_as_executed() -> None:
    engine = await new_engine(
        ToolManifest(id="flight_search", timeout_ms=1_000, retry_policy=RetryPolicy(max_attempts=1))
    )
    engine.register("flight_search", Scripted(hang))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    outcome = result.outcomes["f"]
    assert outcome.status is CallStatus.FAILED and outcome.error is not None
    assert outcome.error.kind is ErrorKind.TIMEOUT
    assert outcome.executed
    assert result.executed == 1 and not result.failed


async def test_turn_with_only_skipped_and_escalated_after_unexecuted_failure_is_failed() -> None:
    engine, _ = await engine_with("compare_prices", "create_itinerary")
    engine.register("flight_search", Scripted(ToolError(ErrorKind.INVALID_PARAMETERS, "origin must be IATA")))
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("B", "compare_prices", depends_on=("A",), optional=True),
            ToolCall("C", "create_itinerary", depends_on=("A",)),
        ]
    )
    result = await engine.run_turn(turn)
    statuses = [o.status for o in result.outcomes.values()]
    assert statuses == [CallStatus.FAILED, CallStatus.SKIPPED, CallStatus.ESCALATED]
    assert result.executed == 0 and result.failed


# --- determinism --------------------------------------------------------------------------

JITTER_TOOLS = ("flight_search", "hotel_search", "activity_search", "compare_prices")


async def retry_delays(seed: int) -> dict[tuple[str, int], float]:
    manifests = [ToolManifest(id=name, retry_policy=RetryPolicy(max_attempts=4)) for name in JITTER_TOOLS]
    engine = await new_engine(*manifests, seed=seed)
    for name in JITTER_TOOLS:
        engine.register(name, Scripted(*[ConnectionResetError("reset")] * 3, "ok"))
    result = await engine.run_turn(Turn([ToolCall(f"c{i}", name) for i, name in enumerate(JITTER_TOOLS)]))
    assert result.ok
    return {(e.call_id, e.attempt): e.delay_ms for e in result.trace.of("ToolError")}


async def test_retry_delays_are_deterministic_for_a_seed() -> None:
    first = await retry_delays(11)
    assert len(first) == 12
    assert len(set(first.values())) == 12, "jitter differs per call and attempt"
    for _ in range(5):
        assert await retry_delays(11) == first
    assert await retry_delays(12) != first, "the seed matters"


# --- summary wording ----------------------------------------------------------------------


async def test_summary_all_succeed() -> None:
    engine, _ = await engine_with("flight_search", "hotel_search")
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search"), ToolCall("h", "hotel_search")]))
    assert result.summary == "Completed flight search and hotel search."
    assert result.ok


async def test_summary_nothing_succeeds() -> None:
    engine, _ = await failing_flights()
    turn = Turn(
        [ToolCall("A", "flight_search"), ToolCall("B", "compare_prices", depends_on=("A",), optional=True)]
    )
    result = await engine.run_turn(turn)
    assert result.summary == "Flight search failed and compare prices was skipped."


async def test_summary_names_the_alternative() -> None:
    engine = await with_backup(Scripted(NotImplementedError("nope")), Scripted("backup flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert result.summary == "Completed flight search (via flight search backup)."


async def test_summary_of_empty_turn() -> None:
    engine = await new_engine()
    result = await engine.run_turn(Turn([]))
    assert result.summary == "Nothing to do."
    assert result.outcomes == {} and not result.failed
    assert [e.event_type for e in result.trace] == ["TurnStarted", "TurnFinished"]


# --- trace --------------------------------------------------------------------------------


async def test_trace_is_framed_tagged_and_serialisable() -> None:
    engine = await with_backup(Scripted(after(4, NotImplementedError("nope"))), Scripted("backup flights"))
    engine.register("hotel_search", Scripted(ValueError("Invalid city")))
    engine.register("compare_prices", Scripted("compared"))
    turn = Turn(
        [
            ToolCall("f", "flight_search"),
            ToolCall("h", "hotel_search"),
            ToolCall("c", "compare_prices", depends_on=("h",), optional=True),
        ],
        id="trip-1",
    )
    result = await engine.run_turn(turn)
    events = list(result.trace)
    assert result.turn_id == result.trace.turn_id == "trip-1"
    assert events[0].event_type == "TurnStarted" and events[0].calls == ("f", "h", "c")
    assert events[-1].event_type == "TurnFinished"
    assert sum(e.event_type in ("TurnStarted", "TurnFinished") for e in events) == 2
    statuses = events[-1].statuses
    assert list(statuses) == ["f", "h", "c"], "turn order, not finishing order"
    assert statuses == {"f": "succeeded", "h": "failed", "c": "skipped"}
    tool_events = [e for e in events if isinstance(e, ToolEvent)]
    assert {"AttemptStarted", "AlternativeUsed", "CallSkipped", "CallFailed"} <= {
        e.event_type for e in tool_events
    }
    assert all(e.turn_id == "trip-1" for e in tool_events)
    data = json.loads(result.trace.to_json())
    assert data["turn_id"] == "trip-1"
    assert [e["event_type"] for e in data["events"]] == [e.event_type for e in events]


def test_summary_agrees_in_number() -> None:
    outcomes = [
        CallOutcome("a", "flight_search", CallStatus.SUCCEEDED),
        CallOutcome("b", "hotel_search", CallStatus.SKIPPED),
        CallOutcome("c", "activity_search", CallStatus.SKIPPED),
    ]
    expected = "Completed flight search, but hotel search and activity search were skipped."
    assert summarize(outcomes) == expected
