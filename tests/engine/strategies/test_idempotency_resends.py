"""Idempotent re-sends counted (issue 24, "For every strategy": metrics of idempotent re-sends): a
keyed tool's facts — in ``engine.stats()`` and ``FailureContext.strategies`` — count the calls
keyed and the attempts re-sent under a key after an ambiguous failure, and only those sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine
from engine.errors import ToolError
from engine.handler import Decision, FailureContext
from engine.kinds import ErrorKind
from tests.engine.conftest import new_engine, recorded
from tests.engine.strategies.test_idempotency import RETRIES, Booking, booking

pytestmark = pytest.mark.anyio


def facts(engine: Any, tool: str = "book") -> dict[str, Any]:
    return dict(engine.stats()[tool].strategies["idempotency"])


async def test_each_re_send_after_an_ambiguous_failure_is_counted_with_the_calls_keyed() -> None:
    engine = await new_engine(booking())
    engine.register("book", Booking(hangs=2))
    events = recorded(engine)
    assert facts(engine) == {"keyed_calls": 0, "resends": 0, "passed_as": "idempotency_key"}
    assert (await engine.try_call("book", flight="AF1")).attempts == 3
    assert facts(engine) == {"keyed_calls": 1, "resends": 2, "passed_as": "idempotency_key"}
    # The count agrees with the events: each retry decided after an ambiguous failure was sent.
    failed = [e for e in events.of("ToolError") if e.decision is Decision.RETRY]
    assert [e.kind for e in failed] == [ErrorKind.TIMEOUT, ErrorKind.TIMEOUT]
    assert len(events.of("AttemptStarted")) == 1 + facts(engine)["resends"]


async def test_a_retry_after_a_failure_that_was_not_ambiguous_is_no_re_send() -> None:
    engine = await new_engine(booking("context"))
    unavailable = ToolError(ErrorKind.SERVICE_UNAVAILABLE, "503 service unavailable")
    reset = ConnectionResetError("connection reset by peer")
    script = iter([unavailable, reset, None])

    async def book(flight: str) -> str:
        error = next(script)
        if error is not None:
            raise error
        return flight

    engine.register("book", book)
    assert await engine.call("book", flight="AF1") == "AF1"
    # Three attempts: the 503 never reached the service (a plain retry), the reset may have.
    assert facts(engine) == {"keyed_calls": 1, "resends": 1, "passed_as": "context"}


async def test_a_retry_refused_after_the_strategies_consented_is_not_counted() -> None:
    # A retry the budget and the key consented to is refused as it is due: the breaker was
    # tripped during the backoff. Nothing was re-sent, so nothing is counted.
    slow = RETRIES.model_copy(update={"initial_delay_ms": 500, "max_delay_ms": 500})
    engine = await new_engine(booking(retry_policy=slow, retry_budget={"min_retries_per_s": 10}))
    tool = Booking(hangs=5)
    engine.register("book", tool)
    outcome: list[Any] = []

    async def book() -> None:
        outcome.append(await engine.try_call("book", flight="AF1"))

    async with anyio.create_task_group() as group:
        group.start_soon(book)
        await anyio.sleep(0.3)  # attempt 1 timed out at 0.1 s; the retry is due at 0.6 s
        engine.trip("book")
    [result] = outcome
    assert not result.ok and "retry refused" in result.reason
    assert len(tool.keys) == 1
    assert facts(engine)["resends"] == 0
    assert engine.stats()["book"].strategies["retry_budget"]["retries"] == 1, "the budget consented"


async def test_a_custom_handler_sees_the_re_sends_so_far() -> None:
    seen: list[int] = []

    def handler(failure: FailureContext) -> None:
        seen.append(failure.strategies["idempotency"]["resends"])

    engine = await new_engine(booking(), handler=handler)
    engine.register("book", Booking(hangs=2))
    await engine.call("book", flight="AF1")
    assert seen == [0, 1], "asked after attempts 1 and 2: the re-sends made before each"


async def test_a_reload_keeps_the_counts(tmp_path: Path) -> None:
    path = tmp_path / "book.yaml"
    tool = "tool:\n  id: book\n  side_effect: side_effecting\n  timeout_ms: 100\n"
    path.write_text(tool + "  idempotency: {key: idempotency_key}\n")
    engine = Engine(tmp_path)  # a directory to reload from (the manifests, not the engine mode, matter here)
    engine.register("book", Booking(hangs=1))
    await engine.call("book", flight="AF1")
    assert facts(engine)["resends"] == 1
    path.write_text(tool + "  idempotency: {key: context}\n")
    engine.reload_manifests()
    assert facts(engine) == {"keyed_calls": 1, "resends": 1, "passed_as": "context"}
