"""Conditions of docs/spec-map.md that no other test proved, each through the public API.

``classify.text-only-at-entrance``, ``timeout.hard-stop`` (a blocking plain function),
``cascade.retry-first``, ``handler.fail-gracefully`` under the default handler, and
``handler.hard-limits`` (a retry past the turn's deadline, a partial success with nothing partial,
a re-send of an ambiguous side effect). Virtual time throughout, as in test_turns.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from engine import (
    ClassificationOverride,
    Decision,
    Engine,
    ErrorClass,
    ErrorKind,
    FailureContext,
    HandlerDecision,
    RetryPolicy,
    SideEffect,
    ToolCallExecutor,
    ToolError,
    ToolManifest,
    classify,
)
from engine.llm import LLMToolCall, guidance_for
from engine.outcomes import CallStatus, TurnResult
from engine.turn import ToolCall, Turn
from tests.engine.conftest import Scripted, after, new_engine, recorded

pytestmark = pytest.mark.anyio

OPTIONAL_CONTINUES = "; optional call, the turn continues"


def registered(engine: Engine, name: str, tool: Scripted) -> Scripted:
    engine.register(name, tool)
    return tool


def events_of(result: TurnResult, *event_types: str) -> list[Any]:
    """The turn's events of those types (typed loosely: each type has its own fields)."""
    return result.trace.of(*event_types)


# --- classify.text-only-at-entrance -------------------------------------------------------

RATE_LIMIT_TEXT = "Too many requests: rate limit exceeded, slow down"
PERMANENT_TEXT = "invalid parameter: permission denied"


class VendorFault(Exception):
    """An exception no class rule knows: without an override, only its text could classify it."""


@dataclass(frozen=True)
class Contradiction:
    """A failure whose text alone would classify as ``text_kind``, decided at the entrance as ``kind``."""

    make_error: Callable[[], Exception]
    """A fresh exception for each use: a raised exception keeps its traceback and context."""
    kind: ErrorKind
    text_kind: ErrorKind
    overrides: tuple[ClassificationOverride, ...] = ()


CONTRADICTIONS = [
    pytest.param(
        Contradiction(
            lambda: ToolError(ErrorKind.NOT_FOUND, RATE_LIMIT_TEXT), ErrorKind.NOT_FOUND, ErrorKind.RATE_LIMIT
        ),
        id="explicit-permanent-kind-with-transient-text",
    ),
    pytest.param(
        Contradiction(
            lambda: ToolError(ErrorKind.SERVICE_UNAVAILABLE, PERMANENT_TEXT),
            ErrorKind.SERVICE_UNAVAILABLE,
            ErrorKind.AUTH_ERROR,
        ),
        id="explicit-transient-kind-with-permanent-text",
    ),
    pytest.param(
        Contradiction(
            lambda: VendorFault(RATE_LIMIT_TEXT),
            ErrorKind.NOT_FOUND,
            ErrorKind.RATE_LIMIT,
            (
                ClassificationOverride(
                    exception="VendorFault", treat_as=ErrorClass.PERMANENT, as_kind=ErrorKind.NOT_FOUND
                ),
            ),
        ),
        id="manifest-override-against-the-text",
    ),
]


async def test_the_kind_decided_at_the_entrance_is_carried_unchanged_whatever_the_text_says(
    case: Contradiction,
) -> None:
    """Retries, breaker counting, the handler, events, the call's error, the turn and the text
    the model reads all follow the entrance's kind: no later stage reads the message again."""
    # The premise: the message alone classifies differently from the entrance.
    message = str(case.make_error())
    assert classify(Exception(message)).kind is case.text_kind
    assert case.text_kind.transient is not case.kind.transient
    transient = case.kind.transient
    attempts = 3 if transient else 1
    manifest = ToolManifest(
        id="vendor", retry_policy=RetryPolicy(max_attempts=3), classification=case.overrides
    )

    # A single call, with a handler that only looks (and defers to the default rules).
    seen: list[FailureContext] = []
    engine = await new_engine(manifest, handler=seen.append)
    tool = registered(engine, "vendor", Scripted(case.make_error()))
    events = recorded(engine)
    result = await engine.try_call("vendor")
    assert tool.calls == attempts == result.attempts, "retried as the kind says, not as the text says"
    assert [f.classification.kind for f in seen] == [case.kind] * attempts
    assert result.error is not None and result.error.kind is case.kind
    assert result.error.classification is not None and result.error.classification.kind is case.kind
    assert result.error.message == message
    assert [e.kind for e in events.of("ToolError")] == [case.kind] * attempts
    assert [e.kind for e in events.of("CallFailed")] == [case.kind]
    # A transient failure counts against the breaker; a permanent one is the service's answer.
    assert engine.breaker("vendor").consecutive_failures == (attempts if transient else 0)

    # The same failure in an LLM batch, under the default rules alone.
    engine = await new_engine(manifest)
    engine.register("vendor", Scripted(case.make_error()))
    executor = ToolCallExecutor(engine)
    batch = await executor.run([LLMToolCall("call_1", "vendor", {})], turn_id="t1")
    (item,) = batch.items
    assert item.kind is case.kind and item.retryable is transient
    assert item.error is not None and item.error.kind is case.kind
    assert guidance_for(case.kind, transient) in item.content
    assert guidance_for(case.text_kind) not in item.content, "the model is told what the kind means"
    assert batch.turn is not None
    outcome = batch.turn.outcomes["call_1"]
    assert outcome.error is not None and outcome.error.kind is case.kind
    assert outcome.attempts == attempts
    (sent,) = events_of(batch.turn, "ToolResultSent")
    assert sent.kind is case.kind


@pytest.fixture(params=CONTRADICTIONS)
def case(request: pytest.FixtureRequest) -> Contradiction:
    contradiction: Contradiction = request.param
    return contradiction


# --- timeout.hard-stop: a blocking plain function -----------------------------------------


class Blocking:
    """A plain (not async) tool: every invocation blocks its worker thread until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.finished = threading.Semaphore(0)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        self.release.wait(10)  # a safety bound only: the test releases it
        self.finished.release()
        return "late"

    def join(self, invocations: int) -> bool:
        """Wait (in a thread) until ``invocations`` invocations have returned."""
        return all(self.finished.acquire(timeout=10) for _ in range(invocations))


class TimeHeldWhileThreadsStart:
    """Keeps virtual time still from each attempt's start until its function runs in its thread.

    A virtual clock jumps as soon as every task waits, a thread that is still starting included;
    and an attempt cut off before its thread picks it up never runs the function at all.
    """

    def __init__(self, engine: Engine, tool: Blocking) -> None:
        self.tool = tool
        self.attempts = 0
        self.started = anyio.Event()
        engine.subscribe(self._on_event, direct=True)  # before the call: its first attempt counts

    def _on_event(self, event: Any) -> None:
        if event.event_type == "AttemptStarted":
            self.attempts += 1
            self.started.set()

    async def run(self) -> None:
        while True:
            await self.started.wait()
            self.started = anyio.Event()
            while self.tool.calls < self.attempts:
                await anyio.sleep(0)  # a checkpoint that lets no virtual time pass


async def test_a_blocking_plain_function_is_abandoned_at_its_timeout_and_the_call_moves_on() -> None:
    policy = RetryPolicy(max_attempts=2, max_total_time_ms=60_000)
    engine = await new_engine(ToolManifest(id="blocking", timeout_ms=2000, retry_policy=policy))
    tool = Blocking()
    engine.register("blocking", tool)
    events = recorded(engine)
    start = anyio.current_time()
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(TimeHeldWhileThreadsStart(engine, tool).run)
            with anyio.fail_after(30):  # virtual time: fails only if the call waited for a thread
                result = await engine.try_call("blocking")
            took = anyio.current_time() - start
            none_returned = not tool.finished.acquire(blocking=False)
            tasks.cancel_scope.cancel()
    finally:
        tool.release.set()
    assert tool.calls == 2, "each attempt ran the function in its own thread"
    assert none_returned, "the call ended while both threads were still blocked"
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
    assert result.error.message == "Tool timeout after 2s" and result.attempts == 2
    first, second = events.of("ToolTimeout")
    assert first.t - start == pytest.approx(2.0), "ended at the tool's timeout"
    assert second.t - first.t == pytest.approx(2.0 + 0.1, rel=0.01), "retried meanwhile, in a new thread"
    assert [e.decision for e in events.of("ToolError")] == ["retry", "escalate"]
    assert took == pytest.approx(second.t - start)
    # The abandoned threads finish in the background; their late values are not used.
    assert await anyio.to_thread.run_sync(tool.join, 2)
    assert result.value is None


# --- cascade.retry-first ------------------------------------------------------------------


async def test_dependants_wait_for_a_dependency_that_recovers_on_a_retry() -> None:
    engine = await new_engine(
        ToolManifest(id="flight_search", retry_policy=RetryPolicy(max_attempts=3, max_total_time_ms=60_000))
    )
    flights = registered(
        engine,
        "flight_search",
        Scripted(after(2, ConnectionResetError("reset")), after(2, TimeoutError("slow")), after(2, ["UA1"])),
    )
    compare = registered(engine, "compare_prices", Scripted("cheapest"))
    weather = registered(engine, "weather", Scripted("sunny"))
    hotels = registered(engine, "hotel_search", Scripted(["Ritz"]))
    turn = Turn(
        [
            ToolCall("f", "flight_search"),
            ToolCall("c", "compare_prices", depends_on=("f",)),
            ToolCall("w", "weather", depends_on=("f",), optional=True),
            ToolCall("h", "hotel_search", depends_on=("f",), default="no flights"),
        ]
    )
    result = await engine.run_turn(turn)
    assert flights.calls == 3, "failed twice, recovered on the second retry"
    (recovered,) = events_of(result, "CallSucceeded")[:1]
    assert recovered.call_id == "f" and recovered.attempts == 3
    for dependant in (compare, weather, hotels):
        assert dependant.started == [pytest.approx(recovered.t)], "started once, after the recovery"
        assert dependant.args == [{"f": ["UA1"]}], "with the recovered output, not a default"
    assert not events_of(result, "CallSkipped", "CallEscalated", "DefaultUsed")
    assert {cid: o.status for cid, o in result.outcomes.items()} == dict.fromkeys(
        "fcwh", CallStatus.SUCCEEDED
    )
    assert result.ok and result.escalations == []
    # Nothing of the dependants happened before the dependency's final outcome.
    retries = [e for e in events_of(result, "ToolError") if e.call_id == "f"]
    assert [e.decision for e in retries] == ["retry", "retry"]
    dependant_events = [e for e in result.trace.events if getattr(e, "call_id", None) in ("c", "w", "h")]
    assert dependant_events and min(e.t for e in dependant_events) >= recovered.t


# --- handler.fail-gracefully (the default handler) ----------------------------------------


async def _optional_failure(cause: str, *, optional: bool) -> tuple[TurnResult, Scripted, Scripted]:
    """A turn whose call ``x`` cannot recover (for ``cause``) beside a required chain ``f`` → ``c``
    still running; the engine uses the default handler."""
    retry = RetryPolicy(max_attempts=2)
    if cause == "permanent":
        manifest, failing = ToolManifest(id="extras"), Scripted(ToolError(ErrorKind.NOT_FOUND, "no extras"))
    elif cause == "retries-exhausted":
        manifest, failing = (
            ToolManifest(id="extras", retry_policy=retry),
            Scripted(ConnectionResetError("reset")),
        )
    elif cause == "ambiguous-side-effect":
        manifest = ToolManifest(id="extras", side_effect=SideEffect.SIDE_EFFECTING)
        failing = Scripted(ConnectionResetError("reset after sending"), "booked twice")
    else:
        assert cause == "circuit-open"
        manifest, failing = ToolManifest(id="extras"), Scripted("extras")
    engine = await new_engine(manifest)
    engine.register("extras", failing)
    if cause == "circuit-open":
        engine.trip("extras", reason="vendor outage")
    flights = registered(engine, "flight_search", Scripted(["UA1"], duration=3))
    compare = registered(engine, "compare_prices", Scripted("cheapest"))
    turn = Turn(
        [
            ToolCall("x", "extras", optional=optional),
            ToolCall("f", "flight_search"),
            ToolCall("c", "compare_prices", depends_on=("f",)),
        ]
    )
    result = await engine.run_turn(turn)
    assert flights.calls == 1
    return result, failing, compare


CAUSES = ("permanent", "retries-exhausted", "circuit-open", "ambiguous-side-effect")


@pytest.mark.parametrize("cause", CAUSES)
async def test_default_handler_fails_an_unrecoverable_optional_call_gracefully_and_the_turn_continues(
    cause: str,
) -> None:
    result, failing, compare = await _optional_failure(cause, optional=True)
    outcome = result.outcomes["x"]
    assert outcome.status is CallStatus.FAILED and not outcome.ok
    assert outcome.decision is Decision.FAIL_GRACEFULLY
    assert outcome.reason.endswith(OPTIONAL_CONTINUES)
    attempts = {"permanent": 1, "retries-exhausted": 2, "circuit-open": 0, "ambiguous-side-effect": 1}
    assert failing.calls == attempts[cause]
    assert result.escalations == [], "nothing for the user: the optional call is dropped"
    assert compare.calls == 1 and result.results == {"f": ["UA1"], "c": "cheapest"}
    assert result.outcome == "degraded" and not result.failed and not result.timed_out
    # The control: the same failure of a required call is escalated.
    required, _, _ = await _optional_failure(cause, optional=False)
    assert required.outcomes["x"].decision is Decision.ESCALATE
    assert [o.call_id for o in required.escalations] == ["x"]


# --- handler.hard-limits ------------------------------------------------------------------


def _insisting(
    decision: Decision, *, delay_s: float = 0.0, alternative: str | None = None
) -> Callable[[FailureContext], HandlerDecision]:
    """A custom handler that always decides ``decision``."""

    def handler(failure: FailureContext) -> HandlerDecision:
        return HandlerDecision(decision, f"handler insists on {decision}", delay_s, alternative)

    return handler


@pytest.mark.parametrize(("delay_s", "refused"), [(20.0, True), (10.0, True), (5.0, False)])
async def test_handler_retry_past_the_turn_deadline_is_refused(delay_s: float, refused: bool) -> None:
    engine = await new_engine(handler=_insisting(Decision.RETRY, delay_s=delay_s))
    tool = registered(
        engine, "flight_search", Scripted(ToolError(ErrorKind.NOT_FOUND, "no such route"), "found")
    )
    start = anyio.current_time()
    result = await engine.run_turn(Turn([ToolCall("f", "flight_search")], deadline_s=10))
    first = events_of(result, "ToolError")[0]
    outcome = result.outcomes["f"]
    assert not result.timed_out
    if refused:
        assert tool.calls == 1, "no retry was started"
        assert first.decision == "escalate", "the default decision applies"
        assert first.decision_reason.startswith(
            "handler's retry refused: it would start after the turn's deadline"
        )
        assert outcome.status is CallStatus.FAILED and outcome.decision is Decision.ESCALATE
        assert anyio.current_time() - start == pytest.approx(0.0), "nothing waited for the refused delay"
    else:  # the control: a retry that starts before the deadline stands
        assert first.decision == "retry" and first.decision_reason == "handler insists on retry"
        assert tool.started[1] - start == pytest.approx(delay_s)
        assert outcome.value == "found"


@pytest.mark.parametrize("has_partial", [False, True], ids=["no-partial-result", "partial-result"])
async def test_handler_partial_success_without_a_partial_result_is_refused(has_partial: bool) -> None:
    partial = {"rows": 2} if has_partial else None
    engine = await new_engine(handler=_insisting(Decision.PARTIAL_SUCCESS))
    engine.register("flight_search", Scripted(ToolError(ErrorKind.NOT_FOUND, "gone", partial_result=partial)))
    compare = registered(engine, "compare_prices", Scripted("cheapest"))
    turn = Turn([ToolCall("f", "flight_search"), ToolCall("c", "compare_prices", depends_on=("f",))])
    result = await engine.run_turn(turn)
    outcome = result.outcomes["f"]
    (failure,) = events_of(result, "ToolError")
    if not has_partial:
        assert failure.decision == "escalate"
        assert failure.decision_reason.startswith(
            "handler's partial success refused: the error carries no partial result"
        )
        assert outcome.status is CallStatus.FAILED and not outcome.ok and outcome.value is None
        assert compare.calls == 0, "no made-up partial result reaches the dependant"
        assert result.outcomes["c"].status is CallStatus.ESCALATED
    else:  # the control: with a partial result, the handler's decision stands
        assert failure.decision == "partial_success"
        assert failure.decision_reason == "handler insists on partial_success"
        assert outcome.status is CallStatus.PARTIAL and outcome.value == {"rows": 2}
        assert compare.args == [{"f": {"rows": 2}}]


@pytest.mark.parametrize("retry_ambiguous", [False, True], ids=["ambiguous", "manifest-allows-resend"])
@pytest.mark.parametrize("decision", [Decision.RETRY, Decision.ALTERNATIVE])
async def test_handler_resend_of_an_ambiguous_side_effect_is_refused(
    decision: Decision, retry_ambiguous: bool
) -> None:
    engine = await new_engine(
        ToolManifest(
            id="book_trip",
            side_effect=SideEffect.SIDE_EFFECTING,
            retry_ambiguous=retry_ambiguous,
            alternatives=("book_trip_backup",),
        ),
        handler=_insisting(decision, delay_s=0.1, alternative="book_trip_backup"),
    )
    book = registered(engine, "book_trip", Scripted(ConnectionResetError("reset after sending"), "booked"))
    backup = registered(engine, "book_trip_backup", Scripted("booked by backup"))
    result = await engine.run_turn(Turn([ToolCall("b", "book_trip")]))
    outcome = result.outcomes["b"]
    failure = events_of(result, "ToolError")[0]
    if not retry_ambiguous:
        assert (book.calls, backup.calls) == (1, 0), "the booking may have gone through: never sent again"
        assert failure.decision == "escalate"
        assert failure.decision_reason.startswith(
            f"handler's {decision} refused: side-effecting call after an ambiguous failure"
        )
        assert outcome.status is CallStatus.FAILED and outcome.decision is Decision.ESCALATE
        assert not events_of(result, "AlternativeUsed")
    elif decision is Decision.RETRY:  # the controls: the manifest allows a re-send
        assert (book.calls, backup.calls) == (2, 0) and outcome.value == "booked"
    else:
        assert (book.calls, backup.calls) == (1, 1) and outcome.served_by == "book_trip_backup"
