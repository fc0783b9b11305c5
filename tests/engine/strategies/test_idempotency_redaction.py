"""A secret idempotency key (its keyed argument is a secret field: the manifest's ``secret_fields``)
never appears in clear in what the engine records — ``IdempotencyKeyAssigned``, the retry's reason,
a handler's reason, an error text that quotes it, the turn's spec — while the tool and a custom
handler still get the key itself, and a replay of the recording still matches."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from engine import ToolManifest
from engine import idempotency_key as current_key
from engine.events import Event
from engine.handler import Decision, FailureContext, HandlerDecision
from engine.redaction import MARKER
from engine.replay import Recording, replay
from engine.strategies.idempotency import CALLER_KEYWORD, CONTEXT
from engine.turn import ToolCall, Turn
from tests.engine.conftest import new_engine, recorded
from tests.engine.strategies.test_idempotency import RETRIES

pytestmark = pytest.mark.anyio

GIVEN = "order-4242-given"
PASSED = "order-7777-passed"


def booking(*, secret: bool = True, key: str = "request_id") -> ToolManifest:
    """Keyed by ``key``; with ``secret``, its argument — for ``key: context``, the caller's keyword
    ``idempotency_key`` — listed in the manifest's ``secret_fields``."""
    field = CALLER_KEYWORD if key == CONTEXT else key
    return ToolManifest(
        id="book", side_effect="side_effecting", timeout_ms=100, retry_policy=RETRIES,
        idempotency={"key": key}, secret_fields=(field,) if secret else (),
        circuit_breaker={"failure_threshold": 20},  # a turn's three calls fail six times in all
    )  # fmt: skip


class Booking:
    """Fails each call twice ambiguously — a hang (a timeout), then a reset whose message quotes
    the key — then books, answering with the key; notes the keys it was sent."""

    def __init__(self) -> None:
        self.keys: list[str | None] = []

    async def __call__(self, flight: str, request_id: str | None = None) -> str:
        key = request_id if request_id is not None else current_key()
        self.keys.append(key)
        sent = self.keys.count(key)  # the calls of a turn run at once: each key its own script
        if sent == 1:
            await anyio.sleep_forever()
        if sent == 2:
            raise ConnectionResetError(f"reset while booking {key}")
        return f"booked {flight} under {key}"


def dumped(events: list[Event]) -> str:
    """Everything the events hold, as consumers (the store, the console) see it."""
    texts = [json.dumps([e.to_dict() for e in events], ensure_ascii=False, default=str)]
    return "\n".join(texts + [e.describe() for e in events])


async def run_keyed_turn(engine: Any) -> Any:
    turn = Turn(
        [
            ToolCall("given", "book", {"flight": "AF1"}, idempotency_key=GIVEN),
            ToolCall("passed", "book", {"flight": "AF2", "request_id": PASSED}),
            ToolCall("derived", "book", {"flight": "AF3"}),
        ],
        id="t1",
    )
    return await engine.run_turn(turn)


async def test_a_secret_key_is_masked_in_every_event_of_the_recorded_trace() -> None:
    engine = await new_engine(booking(), record=True)
    tool = Booking()
    engine.register("book", tool)
    events = recorded(engine)
    result = await run_keyed_turn(engine)
    assert all(o.ok for o in result.outcomes.values())
    assert sorted(set(tool.keys)) == sorted([GIVEN, PASSED, "t1:derived"]), "the tool gets the key itself"
    assert len(tool.keys) == 9
    generated = await engine.try_call("book", flight="AF4")  # outside a turn: a key from the rng
    assert generated.ok
    keys = set(tool.keys)
    assert len(keys) == 4

    for text in (dumped(events), result.trace.to_json()):
        shown = [k for k in keys if k in text]
        assert not shown, f"idempotency keys in clear: {shown}"
    assigned = events.of("IdempotencyKeyAssigned")
    assert len(assigned) == 4
    assert all(MARKER.fullmatch(e.key) for e in assigned)
    policy = engine.redaction_for("book")
    assert {e.key for e in assigned} == {policy.mask(k) for k in keys}, "one mask per key: they correlate"
    retried = [e for e in events.of("ToolError") if e.decision is Decision.RETRY]
    assert len(retried) == 8
    assert all("re-sent safely under idempotency key [REDACTED:" in e.decision_reason for e in retried)
    assert all(
        e.error.startswith("reset while booking [REDACTED:") for e in retried if e.kind == "connection_reset"
    )
    values = [e.value for e in events.of("CallSucceeded")]
    assert len(values) == 4 and all(v.startswith("booked AF") and MARKER.search(v) for v in values)
    [started] = events.of("TurnStarted")
    given = started.spec["calls"][0]
    assert given["idempotency_key"] == policy.mask(GIVEN), "the turn's own key, masked in its spec"
    assert MARKER.fullmatch(started.spec["calls"][1]["args"]["request_id"])


async def test_a_custom_handlers_reason_quoting_the_key_is_scrubbed_while_it_sees_the_key() -> None:
    seen: list[str | None] = []

    def handler(failure: FailureContext) -> HandlerDecision | None:
        seen.append(failure.idempotency_key)
        if failure.attempt == 1:
            return HandlerDecision(Decision.RETRY, f"retrying under {failure.idempotency_key}")
        return None  # the default rules: their reason quotes the key as well

    engine = await new_engine(booking(key="context"), handler=handler)
    tool = Booking()
    engine.register("book", tool)
    events = recorded(engine)
    assert (await engine.try_call("book", flight="AF1", idempotency_key=GIVEN)).ok
    assert seen == [GIVEN, GIVEN], "the handler is given the key itself"
    assert tool.keys == [GIVEN] * 3
    assert GIVEN not in dumped(events)
    reasons = [e.decision_reason for e in events.of("ToolError")]
    mask = engine.redaction_for("book").mask(GIVEN)
    assert reasons[0] == f"retrying under {mask}"
    assert reasons[1].startswith(f"ambiguous connection_reset, re-sent safely under idempotency key {mask}")


async def test_a_key_under_no_secret_field_is_shown_as_it_is() -> None:
    engine = await new_engine(booking(secret=False))
    engine.register("book", Booking())
    events = recorded(engine)
    assert (await engine.try_call("book", flight="AF1", request_id=PASSED)).ok
    assert [e.key for e in events.of("IdempotencyKeyAssigned")] == [PASSED]
    assert f"re-sent safely under idempotency key {PASSED}" in events.of("ToolError")[0].decision_reason


async def test_a_recording_with_secret_keys_replays_as_matching() -> None:
    engine = await new_engine(booking(), record=True)
    engine.register("book", Booking())
    result = await run_keyed_turn(engine)
    contents = {engine.manifests.digest("book"): engine.manifest("book").model_dump(mode="json")}
    report = await replay(Recording.from_events(result.trace.events, contents.get))
    assert report.matches, report.mismatches


async def test_a_context_key_the_tool_answers_with_is_masked_in_the_recorded_result() -> None:
    engine = await new_engine(booking(key=CONTEXT), record=True)
    engine.register("book", Booking())
    events = recorded(engine)
    result = await engine.try_call("book", flight="AF1", idempotency_key=GIVEN)
    assert result.value == f"booked AF1 under {GIVEN}", "the caller gets the answer as it was"
    assert GIVEN not in dumped(events)
    [succeeded] = events.of("CallSucceeded")
    assert succeeded.value == f"booked AF1 under {engine.redaction_for('book').mask(GIVEN)}"
