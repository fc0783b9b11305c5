"""The LLM executor's shortcuts give what the long way gives (bench/llm_executor.py measures them).

Arguments are bound once per tool and argument names (not per call), and a plain result's
announced text is not rebuilt when redaction changes nothing: the refusals, the texts the model
receives and the texts the trace keeps are the same as without the shortcuts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine import Engine, ToolManifest
from engine.errors import jsonable
from engine.events import ToolResultSent
from engine.llm import ToolCallExecutor, parse_anthropic_tool_uses, parse_openai_tool_calls, success_content
from engine.llm.model_text import is_plain_json
from engine.llm.parsing import parse_arguments
from tests.engine.conftest import new_engine

pytestmark = pytest.mark.anyio


def call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def message(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": list(calls)}


async def search(q: str, limit: int = 5, *, lang: str = "en") -> dict[str, Any]:
    return {"q": q, "limit": limit, "lang": lang}


def counting(engine: Engine) -> list[tuple[str, dict[str, Any]]]:
    """Every ``engine.check_arguments`` the executor makes, recorded (the engine still answers)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    check = engine.check_arguments

    def recorded(tool_id: str, args: dict[str, Any]) -> str | None:
        seen.append((tool_id, dict(args)))
        return check(tool_id, args)

    engine.check_arguments = recorded  # type: ignore[method-assign]
    return seen


async def test_arguments_are_bound_once_per_tool_and_names_not_per_call() -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", search)
    checks = counting(engine)
    executor = ToolCallExecutor(engine)
    first = message(*(call(f"c{i}", "search", {"q": f"python {i}"}) for i in range(5)))
    second = message(call("d1", "search", {"q": "trio", "limit": 2}), call("d2", "search", {"q": "x"}))
    await executor.run_openai(first)
    await executor.run_openai(second)
    assert [(tool, list(args)) for tool, args in checks] == [("search", ["q"]), ("search", ["q", "limit"])]


async def test_a_remembered_refusal_reads_exactly_as_the_engine_says_it() -> None:
    engine = await new_engine(ToolManifest(id="search"))
    engine.register("search", search)
    executor = ToolCallExecutor(engine)
    cases: list[dict[str, Any]] = [{}, {"q": "a", "x": 1, "y": 2}, {"q": "a", "y": 2, "x": 1}, {"lang": "de"}]
    for round_ in range(2):  # the second round answers from what was remembered
        calls = [call(f"r{round_}{i}", "search", arguments) for i, arguments in enumerate(cases)]
        batch = await executor.run_openai(message(*calls))
        for item, arguments in zip(batch, cases, strict=True):
            reason = engine.check_arguments("search", dict(arguments))
            assert reason is not None and f"Message: invalid arguments: {reason}\n" in item["content"]
    # The first unexpected name is the one named: the names' order is part of what is remembered.
    assert "'x'" in str(engine.check_arguments("search", {"q": "a", "x": 1, "y": 2}))
    assert "'y'" in str(engine.check_arguments("search", {"q": "a", "y": 2, "x": 1}))


async def test_another_engine_is_checked_afresh() -> None:
    first = await new_engine(ToolManifest(id="search"))
    first.register("search", search)
    executor = ToolCallExecutor(first)
    (answer,) = await executor.run_openai(message(call("a", "search", {"q": "x"})))
    assert not answer["content"].startswith("Tool Execution Failed")

    async def search_by_city(city: str) -> str:
        return city

    second = await new_engine(ToolManifest(id="search"))
    second.register("search", search_by_city)
    executor.engine = second
    (answer,) = await executor.run_openai(message(call("b", "search", {"q": "x"})))
    assert "invalid arguments: missing a required argument: 'city'" in answer["content"]


PLAIN: list[Any] = [
    "text",
    7,
    2.5,
    True,
    None,
    {"a": [1, "b", {"c": None}], "d": (1, 2)},
    [],
    {},
]
NOT_PLAIN: list[Any] = [
    {1: "int key"},
    {"s": {1, 2}},
    {"b": b"bytes"},
    [object()],
    {"e": ValueError("x")},
]


@pytest.mark.parametrize("value", PLAIN)
def test_plain_json_gives_the_same_text_as_its_json_copy(value: Any) -> None:
    assert is_plain_json(value)
    assert success_content(value) == success_content(jsonable(value))


@pytest.mark.parametrize("value", NOT_PLAIN)
def test_anything_else_is_not_plain(value: Any) -> None:
    assert not is_plain_json(value)


def test_deep_or_circular_values_are_not_plain() -> None:
    deep: list[Any] = []
    for _ in range(100):
        deep = [deep]
    circular: dict[str, Any] = {}
    circular["self"] = circular
    assert not is_plain_json(deep)
    assert not is_plain_json(circular)


RESULTS: list[Any] = [
    {"city": "Paris", "temperature_c": 21.5},  # nothing to redact
    {"city": "Paris", "api_key": "sk-live-1234567890abcdef"},  # a secret field
    {"note": "use Bearer abcdefghijklmnop1234 to call"},  # a credential shape in text
    ["Paris", ("Rome", 3)],  # a tuple becomes a list
    {1: "one", "s": {"x"}},  # not plain: the JSON copy's text
    "plain text",
]


@pytest.mark.parametrize("result", RESULTS)
async def test_the_trace_keeps_the_result_redacted_as_the_long_way_makes_it(result: Any) -> None:
    engine = await new_engine(ToolManifest(id="lookup"))

    async def lookup(city: str) -> Any:
        return result

    engine.register("lookup", lookup)
    executor = ToolCallExecutor(engine)
    batch = await executor.run(parse_openai_tool_calls(message(call("a", "lookup", {"city": "Paris"}))))
    assert batch.turn is not None
    (sent,) = [e for e in batch.turn.trace.events if isinstance(e, ToolResultSent)]
    long_way = success_content(engine.redaction.value(jsonable(result), ()))
    assert sent.content == long_way
    assert batch.items[0].content == success_content(result), "the model gets the tool's own result"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"q": 1}', ({"q": 1}, '{"q": 1}', None)),
        ("  ", ({}, "  ", None)),
        (None, ({}, None, None)),
        ({"q": 1}, ({"q": 1}, None, None)),
        (b'{"q": 1}', ({"q": 1}, '{"q": 1}', None)),
        ("[1]", (None, "[1]", "arguments must be a JSON object, not array")),
        (3, (None, None, "arguments must be a JSON object, not number")),
    ],
)
def test_arguments_parse_as_before(raw: Any, expected: tuple[Any, ...]) -> None:
    assert parse_arguments(raw, "arguments") == expected


def test_sdk_objects_parse_like_dicts() -> None:
    class Block:
        type = "tool_use"
        id = "toolu_1"
        name = "search"
        input = {"q": "x"}  # noqa: RUF012 - a stand-in for an SDK object

    (parsed,) = parse_anthropic_tool_uses([Block()])
    assert (parsed.id, parsed.name, parsed.arguments) == ("toolu_1", "search", {"q": "x"})
