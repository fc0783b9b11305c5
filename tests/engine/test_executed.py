"""Executed means the tool ran (spec-map kinds.count-executed): a call's kind and ``executed`` come from
its attempts, and a retry refused when it is due — by a breaker that opened during the backoff — is
the reason of the decision, never the call's kind (issue 22 §8)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from engine import BreakerConfig, Decision, ErrorKind, RetryPolicy, ToolError, ToolManifest
from engine.events import CallFailed
from engine.handler import OPTIONAL_CONTINUES
from engine.llm import LLMToolCall, ToolCallExecutor
from engine.llm.model_text import GUIDANCE_CIRCUIT_OPEN, GUIDANCE_TRANSIENT
from engine.outcomes import CallStatus, TurnResult
from engine.replay import Recording, replay
from engine.store import TraceRecorder, TraceStore
from engine.turn import ToolCall, Turn
from tests.engine.conftest import Scripted, hang, make_engine, new_engine, recorded

pytestmark = pytest.mark.anyio

# The tool: three attempts, no jitter, a breaker that opens on the second failure.
SVC = ToolManifest(
    id="svc",
    retry_policy=RetryPolicy(max_attempts=3, jitter_percent=0),
    circuit_breaker=BreakerConfig(failure_threshold=2),
)
REFUSED = "retry refused: circuit breaker for svc is OPEN"


class Broken(Exception):
    """What the tool raises: a bare ``Exception`` of its own (classified ``execution_error``)."""


async def test_a_retry_refused_by_a_breaker_that_opened_in_its_backoff_ends_on_its_last_attempt() -> None:
    engine = await new_engine(SVC)
    error = Broken()
    tool = engine.register("svc", Scripted(error))
    events = recorded(engine)
    results = []

    async def caller() -> None:
        results.append(await engine.try_call("svc"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        tg.start_soon(caller)

    assert tool.calls == 2, "both ran once; the second failure opened the breaker"
    for result in results:
        assert result.error is not None
        assert (result.error.kind, result.error.executed, result.attempts) == (
            ErrorKind.EXECUTION_ERROR,
            True,
            1,
        )
        assert result.error.original_error is error
        assert result.error.to_dict()["executed"] is True
    refused = next(r for r in results if r.reason.startswith("retry refused"))
    assert (refused.decision, refused.reason) == (Decision.ESCALATE, REFUSED)
    assert [(e.kind, e.reason) for e in events.of("CallFailed") if e.reason == REFUSED] == [
        (ErrorKind.EXECUTION_ERROR, REFUSED)
    ]
    assert not events.of("CallRejected"), "no call was rejected: both were admitted and ran"


async def test_a_turn_of_two_such_calls_counts_both_as_executed() -> None:
    engine = await new_engine(SVC)
    engine.register("svc", Scripted(Broken()))
    result = await engine.run_turn(Turn([ToolCall("a", "svc"), ToolCall("b", "svc")]))
    assert [o.status for o in result.outcomes.values()] == [CallStatus.FAILED, CallStatus.FAILED]
    assert [o.executed for o in result.outcomes.values()] == [True, True]
    assert result.executed == 2 and result.outcome == "degraded"
    assert result.trace.of("TurnFinished")[0].executed == 2
    assert sorted(str(e.kind) for e in result.trace.of("CallFailed")) == ["execution_error"] * 2


async def tripped_in_the_backoff(
    turn: Turn, *, alternatives: tuple[str, ...] = ()
) -> tuple[TurnResult, Scripted]:
    """Run ``turn`` (calls of ``svc``, which fails once and would retry after 100 ms) while an
    operator trips the breaker 50 ms in: the retry is refused when it is due."""
    manifest = ToolManifest(
        id="svc", retry_policy=RetryPolicy(max_attempts=3, jitter_percent=0), alternatives=alternatives
    )
    engine = await new_engine(manifest)
    tool = Scripted(Broken("svc is down"))
    engine.register("svc", tool)
    engine.register("backup", Scripted("from the backup"))
    results: list[TurnResult] = []

    async def run() -> None:
        results.append(await engine.run_turn(turn))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0.05)
        engine.trip("svc", reason="maintenance")
    return results[0], tool


async def test_a_turn_whose_only_call_ends_this_way_ran_a_tool_so_it_has_not_failed() -> None:
    """Seed 004, decision B: a turn fails only when no tool ran; this one's did."""
    result, tool = await tripped_in_the_backoff(Turn([ToolCall("a", "svc")]))
    outcome = result.outcomes["a"]
    assert tool.calls == 1
    assert outcome.error is not None and outcome.error.kind is ErrorKind.EXECUTION_ERROR and outcome.executed
    assert outcome.decision is Decision.ESCALATE
    assert outcome.reason.endswith("→ escalate: retry refused: circuit breaker for svc is FORCED_OPEN")
    assert result.executed == 1 and not result.failed and result.outcome == "degraded"


async def test_the_default_rules_decide_without_the_refused_retry() -> None:
    """Optional: given up gracefully; with an alternative: served by it (before: always escalated)."""
    optional, _ = await tripped_in_the_backoff(Turn([ToolCall("a", "svc", optional=True)]))
    outcome = optional.outcomes["a"]
    assert outcome.decision is Decision.FAIL_GRACEFULLY
    assert outcome.reason.endswith(
        f"retry refused: circuit breaker for svc is FORCED_OPEN{OPTIONAL_CONTINUES}"
    )

    routed, _ = await tripped_in_the_backoff(Turn([ToolCall("a", "svc")]), alternatives=("backup",))
    outcome = routed.outcomes["a"]
    assert (outcome.status, outcome.value, outcome.served_by) == (
        CallStatus.SUCCEEDED,
        "from the backup",
        "backup",
    )
    (used,) = routed.trace.of("AlternativeUsed")
    assert used.reason == "retry refused: circuit breaker for svc is FORCED_OPEN; using backup"


async def test_a_call_that_ran_stays_executed_whatever_its_last_kind() -> None:
    """An attempt timed out (the tool ran), the next found nobody listening (``network_error``, not
    executed): the call ran."""
    manifest = ToolManifest(id="svc", timeout_ms=1_000, retry_policy=RetryPolicy(max_attempts=2))
    engine = await new_engine(manifest)
    engine.register("svc", Scripted(hang, ConnectionRefusedError("connection refused")))
    result = await engine.run_turn(Turn([ToolCall("a", "svc")]))
    outcome = result.outcomes["a"]
    assert outcome.error is not None and outcome.error.kind is ErrorKind.NETWORK_ERROR
    assert outcome.error.executed and outcome.executed
    assert result.executed == 1 and not result.failed


async def test_a_call_that_ran_stays_executed_when_its_alternative_never_runs() -> None:
    manifest = ToolManifest(id="svc", retry_policy=RetryPolicy(max_attempts=1), alternatives=("backup",))
    engine = await new_engine(manifest)
    engine.register("svc", Scripted(Broken("svc is down")))
    engine.register("backup", Scripted(ToolError(ErrorKind.INVALID_PARAMETERS, "backup wants a city")))
    result = await engine.run_turn(Turn([ToolCall("a", "svc")]))
    outcome = result.outcomes["a"]
    assert outcome.served_by == "backup"
    assert outcome.error is not None and outcome.error.kind is ErrorKind.INVALID_PARAMETERS
    assert outcome.executed, "svc ran before the call was handed to its backup"
    assert not result.failed


async def test_the_model_is_told_the_tool_ran_and_failed_not_that_it_never_ran() -> None:
    engine = await new_engine(SVC)
    engine.register("svc", Scripted(Broken("svc is down")))
    executor = ToolCallExecutor(engine, deadline_s=60)
    batch = await executor.run([LLMToolCall("a", "svc", {}), LLMToolCall("b", "svc", {})])
    assert [(i.kind, i.executed) for i in batch.items] == [(ErrorKind.EXECUTION_ERROR, True)] * 2
    assert batch.executed == 2 and not batch.failed
    for item in batch.items:
        assert item.error is not None and item.error.executed
        assert "Error Type: Broken\nMessage: svc is down\n" in item.content
        assert item.content.endswith(GUIDANCE_TRANSIENT)
        assert GUIDANCE_CIRCUIT_OPEN not in item.content


async def test_a_stored_turn_with_a_refused_retry_replays_identically(tmp_path: Path) -> None:
    engine = make_engine(SVC, record=True)
    engine.register("svc", Scripted(Broken()))
    with TraceStore(tmp_path / "traces.db") as store:
        recorder = TraceRecorder(store).attach(engine)
        async with engine:
            await engine.run_turn(Turn([ToolCall("a", "svc"), ToolCall("b", "svc")], id="trip"))
        recorder.close()
        stored = store.load_turn("trip")
        recording = Recording.from_events(stored.events, store.manifest)
    assert stored.row.executed == 2 and stored.row.outcome == "degraded"
    assert [(e.kind, e.reason) for e in stored.events if isinstance(e, CallFailed)][-1] == (
        ErrorKind.EXECUTION_ERROR,
        REFUSED,
    )
    report = await replay(recording)
    assert report.matches, (report.mismatches, report.unmatched, report.unused)
    assert report.result is not None and report.result.executed == 2
    refused = [o for o in report.result.outcomes.values() if o.reason.endswith(REFUSED)]
    assert len(refused) == 1 and refused[0].error is not None
    assert refused[0].error.kind is ErrorKind.EXECUTION_ERROR
