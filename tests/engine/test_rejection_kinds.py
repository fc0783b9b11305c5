"""A call rejected before any attempt is the breaker's (``circuit_open``) or a full bulkhead's
(``bulkhead_full``): ``CallRejected.kind`` says which, and the engine's consumers of a rejection
tell them apart (issue 23) — replay's decision facts, the default rules' reason when a custom
handler defers or an alternative takes over, and what the model is told."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from engine import ToolManifest
from engine.errors import ToolError
from engine.events import CallRejected
from engine.handler import FailureContext, HandlerDecision
from engine.kinds import ErrorKind
from engine.llm import ToolCallExecutor, failure_text
from engine.llm.model_text import GUIDANCE_CIRCUIT_OPEN, GUIDANCE_PERMANENT, GUIDANCE_TRANSIENT
from engine.llm.parsing import parse_openai_tool_calls
from engine.replay import decisions
from engine.strategies.breaker.machine import BreakerState
from engine.strategies.retry.policy import RetryPolicy
from tests.engine.conftest import WALL, Scripted, new_engine, recorded

pytestmark = pytest.mark.anyio

FULL = "bulkhead full: 1 in flight, 0 queued"


def one_slot(**fields: Any) -> ToolManifest:
    """Tool ``t``'s manifest: one attempt a call, one slot, no queue."""
    sections: dict[str, Any] = {"bulkhead": {"max_concurrent": 1, "max_queued": 0}}  # not in the signature
    return ToolManifest(id="t", retry_policy=RetryPolicy(max_attempts=1), **sections, **fields)


async def while_busy(engine: Any, refused: Callable[[], Awaitable[Any]]) -> Any:
    """``refused()``'s result, awaited while another call of ``t`` holds the only slot."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.try_call, "t")
        await anyio.sleep(0.1)
        return await refused()


class Deferring:
    """A custom handler that leaves every decision to the default rules."""

    def decide(self, failure: FailureContext) -> HandlerDecision | None:
        return None


def test_replay_tells_a_bulkhead_rejection_from_the_breakers() -> None:
    def rejected(kind: ErrorKind) -> CallRejected:
        return CallRejected(
            at=WALL, t=1.0, tool_id="t", call_id="c1", turn_id="turn-1", state=BreakerState.HALF_OPEN,
            reason="no", kind=kind,
        )  # fmt: skip

    by_breaker = decisions([rejected(ErrorKind.CIRCUIT_OPEN)])["c1/t end"]
    by_bulkhead = decisions([rejected(ErrorKind.BULKHEAD_FULL)])["c1/t end"]
    assert by_bulkhead.what == "rejected bulkhead_full (HALF_OPEN)"
    assert not by_bulkhead.matches(by_breaker, 1.0), "a replay rejected by the other would not match"


async def test_a_deferring_handler_gets_the_bulkheads_reason_as_the_default_rules_give_it() -> None:
    plain = await new_engine(one_slot())
    plain.register("t", Scripted("ok", duration=1.0))
    handled = await new_engine(one_slot(), handler=Deferring())
    handled.register("t", Scripted("ok", duration=1.0))

    without = await while_busy(plain, lambda: plain.try_call("t"))
    deferred = await while_busy(handled, lambda: handled.try_call("t"))

    assert without.error.kind is deferred.error.kind is ErrorKind.BULKHEAD_FULL
    assert without.reason == FULL
    assert (deferred.decision, deferred.reason) == (without.decision, FULL), (
        "not a breaker's or a generic text"
    )


async def test_an_alternative_taken_after_a_bulkhead_rejection_says_why() -> None:
    engine = await new_engine(one_slot(alternatives=["u"]), ToolManifest(id="u"))
    engine.register("t", Scripted("ok", duration=1.0))
    engine.register("u", Scripted("alternative"))
    events = recorded(engine)

    result = await while_busy(engine, lambda: engine.try_call("t"))

    assert (result.value, result.served_by) == ("alternative", "u")
    [used] = events.of("AlternativeUsed")
    assert used.reason == f"{FULL}; using u"


async def test_the_executor_tells_the_model_a_full_bulkhead_is_temporary() -> None:
    engine = await new_engine(one_slot())
    engine.register("t", Scripted("ok", duration=1.0))
    message = {
        "role": "assistant",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
    }

    batch = await while_busy(engine, lambda: ToolCallExecutor(engine).run(parse_openai_tool_calls(message)))

    (item,) = batch.items
    assert item.kind is ErrorKind.BULKHEAD_FULL and not item.executed
    assert item.retryable is True
    assert item.content.endswith(GUIDANCE_TRANSIENT)
    assert GUIDANCE_PERMANENT not in item.content


async def test_failure_text_says_a_full_bulkhead_is_temporary_and_an_open_breaker_is_not() -> None:
    engine = await new_engine(one_slot())
    engine.register("t", Scripted("ok", duration=1.0))

    refused = await while_busy(engine, lambda: engine.try_call("t"))

    assert refused.error is not None and refused.error.kind is ErrorKind.BULKHEAD_FULL
    assert failure_text(engine, "t", refused.error).endswith(GUIDANCE_TRANSIENT)
    opened = ToolError(ErrorKind.CIRCUIT_OPEN, "circuit open", tool_id="t")
    assert failure_text(engine, "t", opened).endswith(GUIDANCE_CIRCUIT_OPEN)
