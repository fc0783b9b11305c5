"""The LLM executor keys a keyed tool's call by the model's tool-call id (issue 24 §3): the same key on
every attempt and when an agent runs the same assistant message again."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from engine import ToolCallExecutor, ToolManifest, idempotency_key
from engine.strategies.retry.policy import RetryPolicy
from tests.engine.conftest import new_engine

pytestmark = pytest.mark.anyio

RETRIES = RetryPolicy(initial_delay_ms=100, max_delay_ms=100, jitter_percent=0, max_attempts=3)


def keyed(tool_id: str, key: str) -> ToolManifest:
    return ToolManifest(
        id=tool_id, side_effect="side_effecting", timeout_ms=100, retry_policy=RETRIES,
        idempotency={"key": key},
    )  # fmt: skip


def message(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for call_id, name, args in calls
        ],
    }


async def test_the_model_s_tool_call_id_is_the_key_across_retries_and_reruns() -> None:
    engine = await new_engine(keyed("book", "idempotency_key"), keyed("pay", "context"))
    booked: list[str] = []
    paid: list[str | None] = []

    async def book(flight: str, idempotency_key: str) -> str:  # required: the model never writes it
        booked.append(idempotency_key)
        if len(booked) == 1:
            await anyio.sleep_forever()  # a timeout: ambiguous, re-sent under the same key
        return f"booked {flight}"

    async def pay(amount: int) -> str:
        paid.append(idempotency_key())
        return "paid"

    engine.register("book", book)
    engine.register("pay", pay)
    executor = ToolCallExecutor(engine)
    # The model wrote a key of its own for book: the tool-call id takes its place.
    sent = message(
        ("call_A1", "book", {"flight": "AF1", "idempotency_key": "1234"}), ("call_P1", "pay", {"amount": 5})
    )
    answers = await executor.run_openai(sent)
    assert [a["content"] for a in answers] == ["booked AF1", "paid"]
    assert booked == ["call_A1", "call_A1"]
    assert paid == ["call_P1"]
    await executor.run_openai(sent)  # the agent runs the same message again: the same keys
    assert booked[2:] == ["call_A1"] and paid == ["call_P1", "call_P1"]
