"""The specification's turn conditions (docs/spec-map.md), one named test each, on virtual time.

Conditions 4 timeouts, 5 cascading failures, 6 the error handler, 7.3–7.4 deadlines during retries.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from engine import (
    BreakerState,
    Decision,
    ErrorClass,
    ErrorKind,
    FailureContext,
    HandlerDecision,
    RetryPolicy,
    ToolManifest,
)
from engine.outcomes import CallStatus
from engine.turn import ToolCall, Turn
from tests.engine.conftest import Scripted, after, hang, new_engine

pytestmark = pytest.mark.anyio

LONG_BUDGET = RetryPolicy(max_total_time_ms=600_000)


# --- 4 timeouts (spec-map timeout) ---------------------------------------------------------


async def test_4_1_per_tool_timeout_terminates_tool() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", timeout_ms=30_000, retry_policy=LONG_BUDGET))
    tool = engine.register("flight_search", Scripted(hang, "flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")], deadline_s=300))
    timeout, failure = result.trace.of("ToolTimeout")[0], result.trace.of("ToolError")[0]
    assert timeout.t == pytest.approx(30.0), "terminated immediately at t=30s"
    assert tool.cancelled == 1
    assert failure.error == "Tool timeout after 30s"
    assert failure.classification is ErrorClass.TRANSIENT
    assert failure.decision == "retry", "retried with backoff"
    assert tool.started[1] - tool.started[0] == pytest.approx(30.1, rel=0.01)
    assert result.outcomes["f"].value == "flights"


async def test_4_2_per_turn_timeout_collects_partial_results() -> None:
    slow = {"timeout_ms": 400_000}  # tools 2 and 3 still run at t=300s, tool 1 completes at t=50s
    engine = await new_engine(
        ToolManifest(id="flight_search", timeout_ms=60_000),
        ToolManifest(id="hotel_search", **slow),
        ToolManifest(id="activity_search", **slow),
    )
    engine.register("flight_search", Scripted(after(50, "flights")))
    hotels = engine.register("hotel_search", Scripted(hang))
    activities = engine.register("activity_search", Scripted(hang))
    turn = Turn(
        [
            ToolCall("flights", "flight_search"),
            ToolCall("hotels", "hotel_search"),
            ToolCall("tours", "activity_search"),
        ],
        deadline_s=300,
    )
    start = anyio.current_time()
    result = await engine.run_turn(turn)
    assert anyio.current_time() - start == pytest.approx(300.0)
    assert result.results == {"flights": "flights"}, "results from tool 1 collected"
    assert [result.outcomes[c].status for c in ("hotels", "tours")] == [CallStatus.TIMED_OUT] * 2
    assert hotels.cancelled == activities.cancelled == 1
    assert result.timed_out
    assert result.summary == "Completed flight search, but hotel search and activity search timed out."


async def test_4_3_timeout_treated_as_transient_error() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", timeout_ms=30_000, retry_policy=LONG_BUDGET))
    engine.register("flight_search", Scripted(hang, "ok"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    (failure,) = result.trace.of("ToolError")
    assert failure.kind is ErrorKind.TIMEOUT
    assert failure.classification is ErrorClass.TRANSIENT
    assert failure.decision == "retry"
    assert "TimeoutError" in failure.reason


async def test_4_4_timeouts_recorded_in_turn_trace() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", timeout_ms=30_000))
    engine.register("flight_search", Scripted(hang))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    (entry,) = [e for e in result.trace.to_dicts() if e["event_type"] == "ToolTimeout"]
    assert entry["tool_id"] == "flight_search"
    assert entry["timeout_ms"] == 30_000
    assert entry["timestamp"] == "2025-11-05T10:30:45.000Z"


# --- 5 cascading failures (spec-map cascade) -----------------------------------------------


async def travel_engine(**scripts: Any) -> Any:
    engine = await new_engine()
    for tool in ("flight_search", "hotel_search", "activity_search", "compare_prices", "create_itinerary"):
        engine.register(tool, scripts.get(tool, Scripted(f"{tool} result")))
    return engine


async def test_5_1_dependent_tools_skipped_when_dependency_fails() -> None:
    engine = await travel_engine(flight_search=Scripted(ValueError("Invalid airport code: XYZ")))
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("B", "compare_prices", depends_on=("A",), optional=True),
            ToolCall("C", "create_itinerary", depends_on=("B",), optional=True, inputs={}),
            ToolCall("D", "hotel_search"),
        ]
    )
    result = await engine.run_turn(turn)
    statuses = {cid: o.status for cid, o in result.outcomes.items()}
    assert statuses == {
        "A": CallStatus.FAILED,
        "B": CallStatus.SKIPPED,
        "C": CallStatus.SKIPPED,
        "D": CallStatus.SUCCEEDED,
    }
    assert "dependency did not succeed (A failed)" in result.outcomes["B"].reason
    assert "B skipped" in result.outcomes["C"].reason


async def test_5_2_optional_tools_skipped_required_tools_escalate() -> None:
    engine = await travel_engine(flight_search=Scripted(ValueError("Invalid airport code: XYZ")))
    turn = Turn(
        [
            ToolCall("A", "flight_search"),
            ToolCall("B", "compare_prices", depends_on=("A",), optional=True),
            ToolCall("C", "create_itinerary", depends_on=("A",)),
        ]
    )
    result = await engine.run_turn(turn)
    assert result.outcomes["B"].status is CallStatus.SKIPPED
    assert result.outcomes["C"].status is CallStatus.ESCALATED
    assert "Required tool skipped due to dependency failure: create_itinerary" in " ".join(
        result.trace.messages()
    )
    assert [o.call_id for o in result.escalations] == ["A", "C"]


async def test_5_3_default_values_used_when_available() -> None:
    compare = Scripted("compared")
    engine = await travel_engine(
        flight_search=Scripted(ValueError("Invalid airport code: XYZ")), compare_prices=compare
    )
    turn = Turn(
        [ToolCall("A", "flight_search"), ToolCall("B", "compare_prices", depends_on=("A",), default=[])]
    )
    result = await engine.run_turn(turn)
    assert compare.args == [{"A": []}], "B executes with the default value in place of A's output"
    assert result.outcomes["B"].status is CallStatus.SUCCEEDED
    assert result.outcomes["B"].used_default
    assert result.outcomes["B"].label == "defaulted"
    assert "Used default value for compare_prices (in place of A)" in result.trace.messages()


async def test_5_4_independent_tools_continue_despite_failures() -> None:
    engine = await travel_engine(flight_search=Scripted(ValueError("Invalid airport code: XYZ")))
    turn = Turn(
        [ToolCall("A", "flight_search"), ToolCall("B", "hotel_search"), ToolCall("C", "activity_search")]
    )
    result = await engine.run_turn(turn)
    assert result.outcomes["A"].status is CallStatus.FAILED
    assert result.results == {"B": "hotel_search result", "C": "activity_search result"}


# --- 6 the error handler (spec-map handler) ------------------------------------------------


async def test_6_1_error_handler_receives_error_notifications() -> None:
    seen: list[FailureContext] = []

    def handler(failure: FailureContext) -> None:
        seen.append(failure)  # returning None defers to the default decision

    engine = await new_engine(
        ToolManifest(id="flight_search", alternatives=("flight_search_backup",)), handler=handler
    )
    engine.register("flight_search", Scripted(TimeoutError("Connection timeout"), "ok"))
    engine.register("flight_search_backup", Scripted("backup"))
    engine.register("compare_prices", Scripted("compared"))
    turn = Turn(
        [ToolCall("f", "flight_search"), ToolCall("c", "compare_prices", depends_on=("f",))], deadline_s=60
    )
    await engine.run_turn(turn)
    (failure,) = seen
    assert failure.message == "Connection timeout"
    assert failure.tool_id == "flight_search"
    assert failure.attempt == 1
    assert failure.turn_id is not None and failure.call_id == "f"
    assert failure.remaining_s == pytest.approx(60.0)
    assert failure.dependants == ("c",)
    assert failure.alternatives == ("flight_search_backup",)
    assert failure.breaker_state is BreakerState.CLOSED


async def test_6_2_error_handler_decides_recovery_strategy() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(TimeoutError("timeout"), "ok"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    (failure,) = result.trace.of("ToolError")
    assert failure.retry_count == 0 and failure.circuit_breaker_state is BreakerState.CLOSED
    assert failure.decision == "retry"
    assert failure.decision_reason.startswith("transient error, circuit closed: retry 1 in")


async def test_6_3_retry_succeeds_after_transient_error() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(TimeoutError("timeout"), "flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert result.outcomes["f"].value == "flights"
    assert "Tool succeeded on retry 2 (flight_search)" in result.trace.messages()


async def test_6_4_alternative_tool_used_when_primary_fails() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", alternatives=("flight_search_backup",)))
    primary = engine.register("flight_search", Scripted(NotImplementedError("route not supported")))
    backup = engine.register("flight_search_backup", Scripted("backup flights"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    outcome = result.outcomes["f"]
    assert (primary.calls, backup.calls) == (1, 1)
    assert outcome.status is CallStatus.SUCCEEDED and outcome.value == "backup flights"
    assert outcome.served_by == "flight_search_backup"
    assert outcome.label == "alternative used"
    assert any(m.startswith("Used alternative tool flight_search_backup") for m in result.trace.messages())


async def test_6_5_escalation_triggered_for_permanent_errors() -> None:
    engine = await new_engine()
    engine.register("flight_search", Scripted(ValueError("Invalid input")))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    (failure,) = result.trace.of("ToolError")
    assert failure.circuit_breaker_state is BreakerState.CLOSED
    assert failure.decision == "escalate"
    assert "permanent error" in failure.decision_reason
    assert [o.call_id for o in result.escalations] == ["f"], "the user is notified"
    assert result.summary == "Flight search failed."


async def test_6_6_turn_trace_records_all_error_handling_decisions() -> None:
    engine = await new_engine(ToolManifest(id="flight_search", alternatives=("flight_search_backup",)))
    engine.register("flight_search", Scripted(Exception("Service unavailable (503)")))
    engine.register("flight_search_backup", Scripted("backup"))
    engine.register("hotel_search", Scripted(ValueError("Invalid city")))
    engine.register("activity_search", Scripted(ConnectionResetError(), "tours"))
    turn = Turn(
        [ToolCall("f", "flight_search"), ToolCall("h", "hotel_search"), ToolCall("a", "activity_search")]
    )
    result = await engine.run_turn(turn)
    errors = [e.to_dict() for e in result.trace.of("ToolError")]
    required = {"event_type", "tool_id", "error", "classification", "circuit_breaker_state", "retry_count",
                "decision", "timestamp"}  # fmt: skip
    assert all(required <= set(e) for e in errors), "the spec's JSON shape"
    decisions = {(e["tool_id"], e["decision"]) for e in errors}
    assert ("hotel_search", "escalate") in decisions
    assert ("activity_search", "retry") in decisions
    assert ("flight_search", "alternative") in decisions
    assert {e["classification"] for e in errors} == {"transient", "permanent"}
    outcomes = {e.event_type for e in result.trace}
    assert {"CallSucceeded", "CallFailed", "AlternativeUsed", "TurnStarted", "TurnFinished"} <= outcomes
    assert result.trace.of("TurnFinished")[0].statuses == {"f": "succeeded", "h": "failed", "a": "succeeded"}


# --- 7 deadlines during retries (spec-map timeout.during-retry, timeout.deadline-during-retry) ---


async def test_7_3_timeout_during_retry() -> None:
    manifest = ToolManifest(id="flight_search", timeout_ms=30_000, retry_policy=LONG_BUDGET)
    engine = await new_engine(manifest)
    tool = engine.register("flight_search", Scripted(after(25, ConnectionResetError()), hang, hang))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")], deadline_s=60))
    first, second, third = tool.started
    assert first == pytest.approx(0.0) and second == pytest.approx(25.1, rel=0.01)
    (timeout,) = result.trace.of("ToolTimeout")
    assert timeout.attempt == 2 and timeout.t == pytest.approx(second + 30), "attempt 2 terminated at ~55s"
    decisions = [e.decision for e in result.trace.of("ToolError")]
    assert decisions == ["retry", "retry"], "treated as transient, retry scheduled"
    assert third < 60, "the per-turn timeout was still active"
    assert result.outcomes["f"].status is CallStatus.TIMED_OUT
    assert result.trace.of("TurnDeadlineExceeded")[0].t == pytest.approx(60.0)


async def test_7_4_per_turn_timeout_during_retry() -> None:
    # Condition 7.4's attempt 2 still runs at t=60s, so its tool timeout is 40 s, not 30.
    manifest = ToolManifest(id="flight_search", timeout_ms=40_000, retry_policy=LONG_BUDGET)
    engine = await new_engine(manifest)
    tool = engine.register("flight_search", Scripted(after(25, ConnectionResetError()), hang))
    engine.register("hotel_search", Scripted(after(10, "hotels")))
    turn = Turn([ToolCall("f", "flight_search"), ToolCall("h", "hotel_search")], deadline_s=60)
    result = await engine.run_turn(turn)
    assert tool.calls == 2 and tool.cancelled == 1, "attempt 2 interrupted, no retry"
    assert anyio.current_time() == pytest.approx(60.0)
    assert result.outcomes["f"].status is CallStatus.TIMED_OUT
    assert result.results == {"h": "hotels"}, "partial results collected"
    assert result.summary == "Completed hotel search, but flight search timed out."
    assert engine.breaker("flight_search").consecutive_failures == 1, "the interruption is not a tool failure"


async def test_handler_decision_can_route_to_an_alternative() -> None:
    def prefer_backup(failure: FailureContext) -> HandlerDecision | None:
        if failure.alternatives:
            return HandlerDecision(
                Decision.ALTERNATIVE, "backup is cheaper", alternative=failure.alternatives[0]
            )
        return None

    engine = await new_engine(
        ToolManifest(id="flight_search", alternatives=("flight_search_backup",)), handler=prefer_backup
    )
    engine.register("flight_search", Scripted(TimeoutError()))
    engine.register("flight_search_backup", Scripted("backup"))
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")]))
    assert result.outcomes["f"].served_by == "flight_search_backup"
    assert result.trace.of("ToolError")[0].decision_reason == "backup is cheaper"
