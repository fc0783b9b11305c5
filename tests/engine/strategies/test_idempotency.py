"""Idempotency keys (issue 24 §3): one key per logical call, passed to every attempt, making a
side-effecting tool safe to re-send after an ambiguous failure; without a key, never re-sent."""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine, ManifestError, ToolManifest
from engine import idempotency_key as current_key
from engine.handler import Decision, FailureContext
from engine.manifest import load_manifest
from engine.replay import Recording, replay
from engine.strategies.retry.policy import RetryPolicy
from engine.turn import ToolCall, Turn
from tests.engine.conftest import make_engine, new_engine, recorded

pytestmark = pytest.mark.anyio

RETRIES = RetryPolicy(initial_delay_ms=100, max_delay_ms=100, jitter_percent=0, max_attempts=3)


def booking(key: str | None = "idempotency_key", **fields: Any) -> ToolManifest:
    sections: dict[str, Any] = {} if key is None else {"idempotency": {"key": key}}
    fields = {
        "id": "book",
        "side_effect": "side_effecting",
        "timeout_ms": 100,
        "retry_policy": RETRIES,
        **fields,
    }
    return ToolManifest(**sections, **fields)


class Booking:
    """Hangs (a timeout: ambiguous) on its first ``hangs`` attempts, then books; notes each key."""

    def __init__(self, hangs: int = 1, *, error: BaseException | None = None) -> None:
        self.hangs = hangs
        self.error = error
        self.keys: list[str | None] = []
        self.context_keys: list[str | None] = []

    async def __call__(self, flight: str, idempotency_key: str | None = None) -> str:
        self.keys.append(idempotency_key)
        self.context_keys.append(current_key())
        if len(self.keys) <= self.hangs:
            if self.error is not None:
                raise self.error
            await anyio.sleep_forever()
        return f"booked {flight}"


async def busy(call: Awaitable[Any]) -> Any:
    """Await ``call`` while the event loop stays busy: a worker thread runs in real time, and the
    virtual clock must not jump to the attempt's timeout meanwhile."""
    finished = False

    async def spin() -> None:
        while not finished:
            await anyio.sleep(0)

    async with anyio.create_task_group() as group:
        group.start_soon(spin)
        try:
            return await call
        finally:
            finished = True


async def test_a_keyed_tool_is_re_sent_after_a_timeout_with_the_same_key_each_time() -> None:
    engine = await new_engine(booking())
    tool = Booking(hangs=2)
    engine.register("book", tool)
    events = recorded(engine)
    args = {"flight": "AF1"}
    result = await engine.try_call("book", **args)
    assert result.value == "booked AF1"
    assert result.attempts == 3
    [key] = set(tool.keys)
    assert key is not None and len(tool.keys) == 3
    assert tool.context_keys == tool.keys, "the key is also the attempt's context"
    assert args == {"flight": "AF1"}, "the caller's arguments are never changed"
    assert current_key() is None, "the caller's context is left as it was"
    failed = events.of("ToolError")
    assert [e.decision for e in failed] == [Decision.RETRY, Decision.RETRY]
    assert failed[0].decision_reason.startswith(
        f"ambiguous timeout, re-sent safely under idempotency key {key}"
    )
    [assigned] = events.of("IdempotencyKeyAssigned")
    assert (assigned.key, assigned.source, assigned.argument) == (key, "generated", "idempotency_key")


async def test_without_a_key_a_side_effecting_tool_is_never_re_sent_after_a_timeout() -> None:
    engine = await new_engine(booking(None))
    tool = Booking(hangs=2)
    engine.register("book", tool)
    events = recorded(engine)
    result = await engine.try_call("book", flight="AF1")
    assert tool.keys == [None], "sent once"
    assert result.error is not None and result.error.executed
    assert result.reason == "side-effecting tool: not re-sent after an ambiguous timeout"
    assert events.of("IdempotencyKeyAssigned") == []


async def test_a_keyed_tool_is_retried_after_a_reset_and_not_after_a_permanent_error() -> None:
    engine = await new_engine(booking())
    reset = Booking(hangs=1, error=ConnectionResetError("connection reset by peer"))
    engine.register("book", reset)
    assert (await engine.try_call("book", flight="AF1")).ok
    assert len(reset.keys) == 2 and len(set(reset.keys)) == 1
    engine.unregister("book")
    refused = Booking(hangs=5, error=PermissionError("403 Forbidden: not allowed"))
    engine.register("book", refused)
    assert not (await engine.try_call("book", flight="AF1")).ok
    assert len(refused.keys) == 1, "a key makes a re-send safe, not useful: permanent errors stay final"


async def test_a_context_keyed_tool_reads_its_key_and_a_plain_function_in_its_thread() -> None:
    engine = await new_engine(booking("context"), booking("context", id="sync_book"))
    seen: list[str | None] = []
    attempts = 0

    async def book(flight: str) -> str:
        nonlocal attempts
        attempts += 1
        seen.append(current_key())
        if attempts == 1:
            raise ConnectionResetError("reset")
        return flight

    def sync_book(flight: str) -> str:
        seen.append(current_key())
        return flight

    engine.register("book", book)
    engine.register("sync_book", sync_book)
    assert await engine.call("book", flight="AF1") == "AF1"
    assert seen[0] == seen[1] and len(seen) == 2 and seen[0] is not None
    assert await busy(engine.call("sync_book", flight="AF2")) == "AF2"
    assert len(seen) == 3 and seen[2] not in (None, seen[0]), "another call, another key"
    # A caller's own key for a context-keyed tool: the idempotency_key keyword, never passed on.
    assert await busy(engine.call("sync_book", flight="AF3", idempotency_key="order-42")) == "AF3"
    assert seen[3:] == ["order-42"]


async def test_a_caller_gives_its_own_key_as_the_keyed_argument() -> None:
    engine = await new_engine(booking())
    tool = Booking(hangs=1)
    engine.register("book", tool)
    events = recorded(engine)
    await engine.call("book", flight="AF1", idempotency_key="order-42")
    assert tool.keys == ["order-42", "order-42"]
    assert events.of("IdempotencyKeyAssigned")[0].source == "argument"


async def test_a_turn_call_is_keyed_by_its_turn_and_call_ids_or_its_own_key() -> None:
    engine = await new_engine(booking())
    tool = Booking(hangs=1)
    engine.register("book", tool)
    turn = Turn([ToolCall("b1", "book", {"flight": "AF1"}), ToolCall("b2", "book", {"flight": "AF2"},
                 idempotency_key="order-7")], id="t1")  # fmt: skip
    result = await engine.run_turn(turn)
    assert result.outcomes["b1"].value == "booked AF1"
    assert set(tool.keys) == {"order-7", "t1:b1"}
    assert len(tool.keys) == 3, "the hung one was re-sent, under its own key"
    assert Turn.from_spec(turn.spec) == turn, "a turn's own keys are in its spec (replays)"


async def test_generated_keys_are_unique_per_call_and_reproducible_with_a_seed() -> None:
    keys: list[list[str | None]] = []
    for _ in range(2):
        engine = make_engine(booking(), seed=11)
        tool = Booking(hangs=0)
        engine.register("book", tool)
        for flight in ("AF1", "AF2"):
            await engine.call("book", flight=flight)
        keys.append(tool.keys)
    assert keys[0] == keys[1]
    assert keys[0][0] != keys[0][1]


async def test_an_alternative_keeps_the_key_and_an_unkeyed_one_is_not_used_after_an_ambiguous_failure() -> (
    None
):
    primary = booking(alternatives=("backup", "unkeyed"), retry_policy=RetryPolicy(max_attempts=1))
    engine = await new_engine(primary, booking(id="backup"), booking(None, id="unkeyed"))
    tool, backup, unkeyed = Booking(hangs=5), Booking(hangs=0), Booking(hangs=0)
    engine.register("book", tool)
    engine.register("backup", backup)
    engine.register("unkeyed", unkeyed)
    result = await engine.try_call("book", flight="AF1")
    assert result.served_by == "backup"
    assert backup.keys == tool.keys and tool.keys[0] is not None
    # The keyed backup is off: nothing that would repeat the effect without the key is tried.
    engine.trip("backup")
    result = await engine.try_call("book", flight="AF2")
    assert not result.ok and unkeyed.keys == []
    assert "not re-sent" not in result.reason


async def test_a_custom_handler_sees_the_key_and_may_retry_an_ambiguous_failure() -> None:
    seen: list[FailureContext] = []

    def handler(failure: FailureContext) -> None:
        seen.append(failure)

    engine = await new_engine(booking(), booking(None, id="plain"), handler=handler)
    engine.register("book", Booking(hangs=1))
    engine.register("plain", Booking(hangs=1))
    await engine.call("book", flight="AF1", idempotency_key="k-1")
    assert not (await engine.try_call("plain", flight="AF1")).ok
    keyed, plain = seen
    assert keyed.idempotency_key == "k-1" and not keyed.resend_unsafe
    assert plain.idempotency_key is None and plain.resend_unsafe


async def test_a_replay_derives_the_recorded_key() -> None:
    engine = make_engine(booking(), record=True)
    engine.register("book", Booking(hangs=1))
    result = await engine.run_turn(Turn([ToolCall("b", "book", {"flight": "AF1"})]))
    [assigned] = [e for e in result.trace.events if e.event_type == "IdempotencyKeyAssigned"]
    contents = {engine.manifests.digest("book"): engine.manifest("book").model_dump(mode="json")}
    report = await replay(Recording.from_events(result.trace.events, contents.get))
    assert report.matches, report.mismatches
    assert report.result is not None
    [again] = [e for e in report.result.trace.events if e.event_type == "IdempotencyKeyAssigned"]
    assert again.key == assigned.key == f"{result.turn_id}:b"


def test_only_a_side_effecting_tool_may_have_the_section(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  idempotency:\n    key: context\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert (
        str(caught.value)
        == f"{path}:4: tool.idempotency: only for side_effecting tools (side_effect is read_only)"
    )
    path.write_text("tool:\n  id: t\n  side_effect: side_effecting\n  idempotency: {key: ''}\n")
    with pytest.raises(ManifestError, match=r":4: tool\.idempotency\.key: "):
        load_manifest(path)
    path.write_text("tool:\n  id: t\n  side_effect: side_effecting\n  idempotency: {key: request_id}\n")
    assert load_manifest(path).strategies["idempotency"].model_dump() == {"key": "request_id"}


async def test_nothing_configured_changes_nothing() -> None:
    engine: Engine = await new_engine(booking(None, side_effect="idempotent"))
    tool = Booking(hangs=1)
    engine.register("book", tool)
    events = recorded(engine)
    assert (await engine.try_call("book", flight="AF1")).ok
    assert tool.keys == [None, None] and tool.context_keys == [None, None]
    assert "IdempotencyKeyAssigned" not in events.types()


async def test_concurrent_calls_queued_by_a_bulkhead_each_see_their_own_key() -> None:
    engine = await new_engine(booking("context", bulkhead={"max_concurrent": 1, "max_queued": 5}))
    seen: dict[str, list[str | None]] = {}

    async def book(flight: str) -> str:
        seen.setdefault(flight, []).append(current_key())
        await anyio.sleep(0.01)
        seen[flight].append(current_key())  # still its own after others ran meanwhile
        return flight

    engine.register("book", book)
    async with anyio.create_task_group() as group:
        for flight in ("AF1", "AF2", "AF3"):
            group.start_soon(partial(engine.call, "book", flight=flight))
    keys = {flight: set(found) for flight, found in seen.items()}
    assert all(len(found) == 1 and None not in found for found in keys.values())
    assert len(set.union(*keys.values())) == 3
    assert current_key() is None
