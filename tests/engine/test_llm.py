"""The LLM tool-call executor: one result per call id, in order, whatever happens.

The error text and registry (spec-map llm), executed-tool counting and the router-handoff
harness, and the transcript invariant under generated mixes of faults, timeouts, deadlines
and stops. Everything runs on trio's MockClock: virtual time is free.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Decision, Engine, ErrorKind, FailureContext, HandlerDecision, ToolError, ToolManifest
from engine import scenario as scenario_files
from engine.demo import demo_engine
from engine.events import ToolResultSent
from engine.llm import (
    TRUNCATED,
    LLMToolCall,
    ToolBatch,
    ToolCallExecutor,
    ToolErrorRegistry,
    ToolExecutionError,
    format_tool_error_for_llm,
    parse_anthropic_tool_uses,
    parse_openai_tool_calls,
)
from engine.redaction import MARKER
from tests.engine.conftest import WALL, make_engine, new_engine

pytestmark = pytest.mark.anyio

FAILED_HEADER = "Tool Execution Failed\nTool: "

# The documented example of spec-map llm.error-block, verbatim.
SEED_003_EXAMPLE = (
    "Tool Execution Failed\n"
    "Tool: search\n"
    "Error Type: RateLimitError\n"
    "Message: Too many requests\n"
    "\n"
    "The tool failed and cannot be used for this request."
)


class RateLimitError(Exception):
    """Named like the provider SDKs' error: classified by class name."""


def oa_call(call_id: str, name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def oa_message(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def lines(text: str) -> list[str]:
    return text.split("\n")


# --- parsing -------------------------------------------------------------------------------


def test_parse_openai_dict_message() -> None:
    message = oa_message(
        oa_call("call_1", "search", {"q": "python", "filters": {"lang": "en"}}),
        oa_call("call_2", "search", '{"q": '),
        oa_call("call_3", "search", "[1, 2]"),
        oa_call("call_4", "clock", ""),
    )
    calls = parse_openai_tool_calls(message)
    assert [c.id for c in calls] == ["call_1", "call_2", "call_3", "call_4"]
    assert calls[0] == LLMToolCall(
        "call_1",
        "search",
        {"q": "python", "filters": {"lang": "en"}},
        '{"q": "python", "filters": {"lang": "en"}}',
    )
    assert calls[1].arguments is None and calls[1].raw_arguments == '{"q": '
    assert calls[1].problem is not None and calls[1].problem.startswith("arguments are not valid JSON")
    assert calls[2].arguments is None and calls[2].problem == "arguments must be a JSON object, not array"
    assert calls[3].arguments == {} and calls[3].problem is None, "empty arguments mean no arguments"
    assert parse_openai_tool_calls({"role": "assistant", "content": "hi"}) == []
    assert parse_openai_tool_calls({"role": "assistant", "tool_calls": None}) == []


def test_parse_openai_sdk_objects_and_unsupported_types() -> None:
    def sdk_call(call_id: str, name: str, arguments: str) -> SimpleNamespace:
        return SimpleNamespace(
            id=call_id, type="function", function=SimpleNamespace(name=name, arguments=arguments)
        )

    message = SimpleNamespace(
        role="assistant",
        tool_calls=[
            sdk_call("call_a", "search", '{"q": "x"}'),
            sdk_call("call_b", "search", "{oops}"),
            SimpleNamespace(
                id="call_c", type="custom", custom=SimpleNamespace(name="grep", input="free text")
            ),
        ],
    )
    calls = parse_openai_tool_calls(message)
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_a", "search", {"q": "x"}),
        ("call_b", "search", None),
        ("call_c", "grep", None),
    ]
    assert calls[1].problem is not None and "not valid JSON" in calls[1].problem
    assert calls[2].problem == "unsupported tool call type 'custom': only function calls are supported"
    with pytest.raises(ValueError, match="has no id"):
        parse_openai_tool_calls(
            oa_message({"type": "function", "function": {"name": "x", "arguments": "{}"}})
        )


def test_parse_anthropic_message_blocks_and_sdk_objects() -> None:
    blocks: list[Any] = [
        {"type": "text", "text": "Let me look that up."},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
        {"type": "tool_use", "id": "toolu_2", "name": "search", "input": ["not", "an", "object"]},
        {"type": "tool_use", "id": "toolu_3", "name": "search", "input": '{"q": "as text"}'},
        {"type": "tool_use", "id": "toolu_4", "name": "search", "input": "{broken"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    ]
    from_dict = parse_anthropic_tool_uses({"role": "assistant", "content": blocks})
    assert from_dict == parse_anthropic_tool_uses(blocks)
    assert [c.id for c in from_dict] == ["toolu_1", "toolu_2", "toolu_3", "toolu_4"], "only tool_use blocks"
    assert from_dict[0].arguments == {"q": "x"} and from_dict[0].problem is None
    assert from_dict[1].problem == "input must be a JSON object, not array"
    assert from_dict[2].arguments == {"q": "as text"}
    assert from_dict[3].problem is not None and from_dict[3].problem.startswith("input is not valid JSON")

    sdk = SimpleNamespace(
        role="assistant",
        content=[
            SimpleNamespace(type="text", text="ok"),
            SimpleNamespace(type="tool_use", id="toolu_9", name="search", input={"q": "sdk"}),
        ],
    )
    assert parse_anthropic_tool_uses(sdk) == [LLMToolCall("toolu_9", "search", {"q": "sdk"})]
    assert parse_anthropic_tool_uses({"role": "assistant", "content": "just text"}) == []


# --- the text for the model ---------------------------------------------------------------


def test_three_argument_call_is_exactly_seed_003_format() -> None:
    assert format_tool_error_for_llm("search", "RateLimitError", "Too many requests") == SEED_003_EXAMPLE


@pytest.mark.parametrize(
    ("kwargs", "error_type", "guidance"),
    [
        ({"kind": ErrorKind.INVALID_PARAMETERS, "retryable": False}, "invalid_parameters",
         "Fix the arguments and call the tool again."),
        ({"kind": ErrorKind.RATE_LIMIT, "retryable": True}, "RateLimitError",
         "This is temporary: retrying later may help."),
        ({"kind": ErrorKind.TIMEOUT}, "TimeoutError", "This is temporary: retrying later may help."),
        ({"kind": ErrorKind.CIRCUIT_OPEN, "retryable": False}, "circuit_open",
         "The tool is disabled for now after repeated failures: do not call it again in this turn."),
        ({"kind": ErrorKind.AUTH_ERROR, "retryable": False}, "PermissionError",
         "The tool failed and cannot be used for this request."),
        ({"kind": ErrorKind.TIMEOUT, "retryable": True}, "TurnDeadlineExceeded",
         "The turn ran out of time before this call finished."),
        ({"kind": ErrorKind.CANCELED}, "Canceled", "The call was canceled before it finished."),
        ({"kind": "unknown_tool"}, "unknown_tool", "No tool by that name exists."),
    ],
)  # fmt: skip
def test_guidance_line_follows_kind_and_retryability(
    kwargs: dict[str, Any], error_type: str, guidance: str
) -> None:
    text = format_tool_error_for_llm("search", error_type, "boom", **kwargs)
    assert lines(text) == [
        "Tool Execution Failed",
        "Tool: search",
        f"Error Type: {error_type}",
        "Message: boom",
        "",
        guidance,
    ]


def test_alternative_line_follows_the_guidance() -> None:
    text = format_tool_error_for_llm(
        "flight_search", "ConnectionResetError", "reset", kind=ErrorKind.CONNECTION_RESET,
        retryable=True, alternative="flight_search_backup",
    )  # fmt: skip
    assert lines(text)[-2:] == [
        "This is temporary: retrying later may help.",
        "Alternative: try flight_search_backup.",
    ]


def test_truncation_caps_length_and_never_cuts_the_header() -> None:
    text = format_tool_error_for_llm(
        "search", "RateLimitError", "x" * 5000, kind=ErrorKind.RATE_LIMIT, retryable=True, max_chars=600
    )
    assert len(text) <= 600
    head = lines(text)
    assert head[:3] == ["Tool Execution Failed", "Tool: search", "Error Type: RateLimitError"]
    assert head[3].startswith("Message: xxx") and head[3].endswith(TRUNCATED)
    assert head[-1] == "This is temporary: retrying later may help."
    assert format_tool_error_for_llm("search", "E", "short", max_chars=600).endswith("this request.")
    # Header values are single-line and bounded, so the cap always holds.
    wild = format_tool_error_for_llm("evil\nname" + "n" * 500, "E\nrror", "m" * 900, max_chars=512)
    assert len(wild) <= 512
    assert lines(wild)[1].startswith("Tool: evil name") and len(lines(wild)[1]) <= 106
    assert lines(wild)[2] == "Error Type: E rror"
    with pytest.raises(ValueError, match="at least 512"):
        format_tool_error_for_llm("search", "E", "m", max_chars=100)


# --- the exception and registry (spec-map llm.tool-execution-error, llm.registry) ---------


def test_tool_execution_error_has_seed_003_attributes() -> None:
    original = TimeoutError("Timeout")
    error = ToolExecutionError(tool_name="search", original_error=original, tool_input={"query": "test"})
    assert isinstance(error, ToolError)
    assert error.tool_name == "search"
    assert error.original_error is original
    assert error.tool_input == {"query": "test"}
    assert error.error_type == "TimeoutError"
    assert isinstance(error.timestamp, datetime)
    assert error.message == "Timeout" and str(error) == "Timeout"
    assert error.kind is ErrorKind.TIMEOUT, "the kind comes from engine.classify"
    data = error.to_dict()
    assert {k: data[k] for k in ("tool_name", "error_type", "message", "tool_input", "kind", "executed")} == {
        "tool_name": "search",
        "error_type": "TimeoutError",
        "message": "Timeout",
        "tool_input": {"query": "test"},
        "kind": "timeout",
        "executed": True,
    }
    assert data["timestamp"].endswith("Z")
    json.dumps(data)

    limited = ToolExecutionError(
        "search", RateLimitError("Too many requests"), message="Search is rate limited"
    )
    assert (limited.error_type, limited.kind, limited.message) == (
        "RateLimitError",
        ErrorKind.RATE_LIMIT,
        "Search is rate limited",
    )
    explicit = ToolExecutionError("router_handoff", ToolError(ErrorKind.INVALID_PARAMETERS, "unknown agent"))
    assert (explicit.error_type, explicit.kind, explicit.executed) == (
        "invalid_parameters",
        ErrorKind.INVALID_PARAMETERS,
        False,
    )


def test_registry_summary_exactly_like_seed_003() -> None:
    registry = ToolErrorRegistry()
    registry.record_error("search", ValueError("Bad query"))
    registry.record_error("search", TimeoutError("Timeout"))
    registry.record_error("api", ConnectionError("No connection"))
    summary = registry.get_error_summary()
    assert summary == {"search:ValueError": 1, "search:TimeoutError": 1, "api:ConnectionError": 1}
    assert list(summary) == ["search:ValueError", "search:TimeoutError", "api:ConnectionError"]
    search_errors = registry.get_errors_for_tool("search")
    assert list(search_errors) == ["search:ValueError", "search:TimeoutError"]
    entry = search_errors["search:ValueError"][0]
    assert set(entry) == {"timestamp", "error_type", "error_message"}
    assert (entry["error_type"], entry["error_message"]) == ("ValueError", "Bad query")
    datetime.fromisoformat(entry["timestamp"])
    assert registry.get_errors_for_tool("nothing") == {}
    registry.clear()
    assert registry.get_error_summary() == {}


def test_registry_keeps_exact_counts_but_bounded_entries() -> None:
    registry = ToolErrorRegistry(max_entries=2)
    for n in range(5):
        registry.record_error("api", ConnectionError(f"attempt {n}"))
    assert registry.get_error_summary() == {"api:ConnectionError": 5}
    kept = registry.get_errors_for_tool("api")["api:ConnectionError"]
    assert [e["error_message"] for e in kept] == ["attempt 3", "attempt 4"]


def test_wall_clock_stamps_recorded_errors() -> None:
    registry = ToolErrorRegistry()
    registry.record_error("search", ToolExecutionError("search", ValueError("bad"), at=WALL))
    entry = registry.get_errors_for_tool("search")["search:ValueError"][0]
    assert entry["timestamp"] == "2025-11-05T10:30:45+00:00"


# --- the executor -------------------------------------------------------------------------


@dataclass
class Tools:
    """The travel-ish tools of the executor tests, with invocation counts."""

    engine: Engine
    flaky_calls: int = 0
    lookups: int = 0

    def register(self) -> Tools:
        engine = self.engine

        async def search(q: str) -> dict[str, Any]:
            return {"hits": [q], "count": 1}

        async def flaky(q: str) -> str:
            self.flaky_calls += 1
            if self.flaky_calls == 1:
                raise ConnectionResetError("upstream dropped the connection")
            return f"flaky ok: {q}"

        async def lookup(city: str) -> str:
            self.lookups += 1
            raise PermissionError("access denied for this account")

        async def tripped(q: str) -> str:
            return "never"

        async def slowpoke(q: str) -> str:
            await anyio.sleep_forever()
            return "never"

        for fn in (search, flaky, lookup, tripped, slowpoke):
            engine.register(fn.__name__, fn)
        return self


async def travel_engine(**kwargs: Any) -> Engine:
    return await new_engine(
        ToolManifest(id="slowpoke", timeout_ms=5_000), ToolManifest(id="tripped"), **kwargs
    )


async def test_mixed_batch_one_result_per_call_id_in_order() -> None:
    engine = await travel_engine()
    tools = Tools(engine).register()
    engine.trip("tripped", reason="maintenance")
    executor = ToolCallExecutor(engine, deadline_s=60)
    message = oa_message(
        oa_call("a", "search", {"q": "python"}),
        oa_call("b", "flaky", {"q": "x"}),
        oa_call("c", "lookup", {"city": "Paris"}),
        oa_call("d", "weather", {"city": "Paris"}),
        oa_call("e", "search", '{"q": "unterminated'),
        oa_call("a", "search", {"q": "again"}),
        oa_call("g", "search", {"query": "wrong name"}),
        oa_call("h", "tripped", {"q": "x"}),
        oa_call("i", "slowpoke", {"q": "x"}),
    )
    batch = await executor.run(parse_openai_tool_calls(message))
    items = batch.items
    assert [i.call_id for i in items] == ["a", "b", "c", "d", "e", "a", "g", "h", "i"]
    assert [i.status for i in items] == [
        "succeeded", "succeeded", "failed", "not_run", "not_run", "not_run", "not_run", "failed", "failed",
    ]  # fmt: skip
    assert [i.is_error for i in items] == [False, False, True, True, True, True, True, True, True]
    assert [i.executed for i in items] == [True, True, True, False, False, False, False, False, True]
    assert [i.kind for i in items] == [
        None, None, ErrorKind.AUTH_ERROR, ErrorKind.UNKNOWN_TOOL, ErrorKind.INVALID_PARAMETERS,
        ErrorKind.INVALID_PARAMETERS, ErrorKind.INVALID_PARAMETERS, ErrorKind.CIRCUIT_OPEN, ErrorKind.TIMEOUT,
    ]  # fmt: skip

    assert items[0].content == '{"hits": ["python"], "count": 1}'
    assert items[1].content == "flaky ok: x" and tools.flaky_calls == 2, "transient, retried, then succeeded"
    assert tools.lookups == 1, "a permanent error is not retried"
    assert lines(items[2].content) == [
        "Tool Execution Failed", "Tool: lookup", "Error Type: PermissionError",
        "Message: access denied for this account", "", "The tool failed and cannot be used for this request.",
    ]  # fmt: skip
    assert lines(items[3].content)[1:4] == [
        "Tool: weather",
        "Error Type: unknown_tool",
        "Message: unknown tool 'weather'; available tools: flaky, lookup, search, slowpoke, tripped",
    ]
    assert lines(items[3].content)[-1] == "No tool by that name exists."
    assert lines(items[4].content)[3].startswith("Message: arguments are not valid JSON (")
    assert lines(items[5].content)[3] == (
        "Message: this call repeats the id of an earlier call in the same message and was not run"
    )
    assert lines(items[6].content)[3] == "Message: invalid arguments: missing a required argument: 'q'"
    for item in items[4:7]:
        assert lines(item.content)[-1] == "Fix the arguments and call the tool again."
        assert item.retryable is False
    assert lines(items[7].content)[2] == "Error Type: circuit_open"
    assert lines(items[7].content)[-1] == (
        "The tool is disabled for now after repeated failures: do not call it again in this turn."
    )
    assert lines(items[8].content)[2:4] == ["Error Type: TimeoutError", "Message: Tool timeout after 5s"]
    assert lines(items[8].content)[-1] == "This is temporary: retrying later may help."
    assert items[8].retryable is True

    assert batch.executed == 4 and not batch.failed
    assert (executor.calls_total, executor.executed_total) == (9, 4)
    assert batch.turn is not None and list(batch.turn.outcomes) == ["a", "b", "c", "h", "i"]
    assert executor.registry.get_error_summary() == {
        "lookup:PermissionError": 1,
        "weather:unknown_tool": 1,
        "search:invalid_parameters": 3,
        "tripped:circuit_open": 1,
        "slowpoke:TimeoutError": 1,
    }


async def test_the_text_each_call_returned_to_the_model_is_in_the_trace() -> None:
    engine = await travel_engine()
    Tools(engine).register()
    seen: list[ToolResultSent] = []
    engine.subscribe(lambda e: seen.append(e) if isinstance(e, ToolResultSent) else None, direct=True)
    message = oa_message(oa_call("a", "search", {"q": "python"}), oa_call("b", "lookup", {"city": "Paris"}),
                         oa_call("c", "weather", {"city": "Paris"}))  # fmt: skip
    batch = await ToolCallExecutor(engine).run(parse_openai_tool_calls(message))
    assert [(e.call_id, e.content, e.is_error, e.status) for e in seen] == [
        (i.call_id, i.content, i.is_error, i.status) for i in batch.items
    ]
    assert seen[1].error_type == "PermissionError" and seen[1].kind is ErrorKind.AUTH_ERROR
    assert batch.turn is not None
    sent = [e for e in batch.turn.trace.events if isinstance(e, ToolResultSent)]
    assert [e.call_id for e in sent] == ["a", "b", "c"], "a refused call's answer is in the trace too"
    assert all(e.turn_id == batch.turn.turn_id for e in sent)


async def test_turn_deadline_cuts_off_unfinished_calls() -> None:
    engine = await new_engine(ToolManifest(id="slowpoke", timeout_ms=60_000))
    Tools(engine).register()
    executor = ToolCallExecutor(engine, deadline_s=2)
    start = anyio.current_time()
    batch = await executor.run(
        [LLMToolCall("fast", "search", {"q": "x"}), LLMToolCall("slow", "slowpoke", {"q": "x"})]
    )
    assert anyio.current_time() - start == pytest.approx(2.0)
    fast, slow = batch.items
    assert not fast.is_error
    assert (slow.status, slow.kind, slow.executed) == ("timed_out", ErrorKind.TIMEOUT, True)
    assert lines(slow.content) == [
        "Tool Execution Failed",
        "Tool: slowpoke",
        "Error Type: TurnDeadlineExceeded",
        "Message: cut off by the turn's 2s deadline",
        "",
        "The turn ran out of time before this call finished.",
    ]


async def test_stop_cancels_unfinished_calls() -> None:
    engine = await new_engine(ToolManifest(id="slowpoke", timeout_ms=60_000))
    Tools(engine).register()
    executor = ToolCallExecutor(engine, deadline_s=30)
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def press_stop() -> None:
            await anyio.sleep(1)
            stop.set()

        tg.start_soon(press_stop)
        batch = await executor.run(
            [LLMToolCall("fast", "search", {"q": "x"}), LLMToolCall("slow", "slowpoke", {"q": "x"})],
            stop=stop,
        )
    fast, slow = batch.items
    assert not fast.is_error
    assert (slow.status, slow.kind, slow.executed, slow.retryable) == (
        "canceled",
        ErrorKind.CANCELED,
        True,  # it was running when the stop came: the tool did execute
        None,
    )
    assert lines(slow.content)[2:] == [
        "Error Type: Canceled",
        "Message: the turn was stopped",
        "",
        "The call was canceled before it finished.",
    ]
    assert batch.executed == 2


async def test_run_openai_and_run_anthropic_message_shapes() -> None:
    engine = await travel_engine()
    Tools(engine).register()
    executor = ToolCallExecutor(engine)
    replies = await executor.run_openai(
        oa_message(oa_call("call_1", "search", {"q": "a"}), oa_call("call_2", "nope", {}))
    )
    assert replies[0] == {"role": "tool", "tool_call_id": "call_1", "content": '{"hits": ["a"], "count": 1}'}
    assert replies[1]["role"] == "tool" and replies[1]["tool_call_id"] == "call_2"
    assert replies[1]["content"].startswith(FAILED_HEADER + "nope\n")

    sdk_message = SimpleNamespace(
        role="assistant",
        content=[
            SimpleNamespace(type="text", text="Checking."),
            SimpleNamespace(type="tool_use", id="toolu_1", name="search", input={"q": "b"}),
            SimpleNamespace(type="tool_use", id="toolu_2", name="lookup", input={"city": "Rome"}),
        ],
    )
    reply = await executor.run_anthropic(sdk_message)
    assert reply["role"] == "user"
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in reply["content"]] == [
        ("tool_result", "toolu_1", False),
        ("tool_result", "toolu_2", True),
    ]
    assert reply["content"][0]["content"] == '{"hits": ["b"], "count": 1}'
    assert reply["content"][1]["content"].startswith(FAILED_HEADER + "lookup\nError Type: PermissionError\n")
    assert executor.calls_total == 4


async def test_success_content_and_alternatives() -> None:
    manifests = (
        ToolManifest(id="hotel_search", alternatives=("hotel_search_backup",)),
        ToolManifest(id="hotel_search_backup"),
    )

    async def hotel_search(city: str) -> str:
        raise ConnectionResetError("reset by peer")

    async def hotel_search_backup(city: str) -> list[str]:
        return [f"Hôtel {city}", "Ibis"]

    engine = await new_engine(*manifests)
    engine.register("hotel_search", hotel_search)
    engine.register("hotel_search_backup", hotel_search_backup)
    served = (await ToolCallExecutor(engine).run([LLMToolCall("h", "hotel_search", {"city": "Lyon"})])).items[
        0
    ]
    assert not served.is_error and served.content == '["Hôtel Lyon", "Ibis"]', "just the content, unescaped"

    # When the alternative was not used (here a handler escalates), the model is told about it.
    def escalate(failure: FailureContext) -> HandlerDecision:
        return HandlerDecision(Decision.ESCALATE, "let the model decide")

    engine = await new_engine(*manifests, handler=escalate)
    engine.register("hotel_search", hotel_search)
    engine.register("hotel_search_backup", hotel_search_backup)
    executor = ToolCallExecutor(engine)
    item = (await executor.run([LLMToolCall("h", "hotel_search", {"city": "Lyon"})])).items[0]
    assert item.alternative == "hotel_search_backup"
    assert lines(item.content)[-2:] == [
        "This is temporary: retrying later may help.",
        "Alternative: try hotel_search_backup.",
    ]
    engine.trip("hotel_search_backup")
    item = (await executor.run([LLMToolCall("h", "hotel_search", {"city": "Lyon"})])).items[0]
    assert item.alternative is None, "no alternative whose breaker is open"


async def test_error_text_is_redacted_stable_and_capped() -> None:
    engine = await new_engine()
    key = "sk-live-0123456789abcdefghij"

    async def fetch(url: str, api_key: str, options: dict[str, Any] | None = None) -> str:
        raise PermissionError(
            f"key {api_key} rejected for {url}?api_key={api_key}; "
            f"password {options and options['Password']}; "
            "Authorization: Bearer abcdefghijkl12345 " + "z" * 3000
        )

    engine.register("fetch", fetch)
    executor = ToolCallExecutor(engine, max_error_chars=600)
    call = LLMToolCall(
        "c1", "fetch", {"url": "https://api.example", "api_key": key, "options": {"Password": "pw-1"}}
    )
    first = (await executor.run([call])).items[0]
    second = (await executor.run([call])).items[0]
    assert first.content == second.content, "no timestamps or ids: the same failure reads the same"
    assert len(first.content) <= 600 and TRUNCATED in first.content
    assert (
        key not in first.content and "pw-1" not in first.content and "abcdefghijkl12345" not in first.content
    )
    masked_key = engine.redaction.mask(key)
    assert MARKER.search(masked_key) and masked_key.startswith("sk-"), "the shape is kept"
    assert lines(first.content)[3].startswith(
        f"Message: key {masked_key} rejected for https://api.example?api_key={masked_key}; "
    ), "equal secrets read the same"
    assert first.error is not None
    recorded = json.dumps([executor.registry.get_errors_for_tool("fetch"), first.error.to_dict()])
    assert key not in recorded and "pw-1" not in recorded
    assert first.error.tool_input == {
        "url": "https://api.example",
        "api_key": masked_key,
        "options": {"Password": engine.redaction.mask("pw-1")},
    }


async def test_seed_004_counting_only_executed_kinds() -> None:
    engine = await travel_engine()
    Tools(engine).register()
    executor = ToolCallExecutor(engine)
    refused = await executor.run(
        [
            LLMToolCall("1", "nope", {}),
            LLMToolCall("2", "search", None, "{bad", "arguments are not valid JSON"),
            LLMToolCall("3", "search", {"query": "x"}),
        ]
    )
    assert (refused.executed, refused.failed) == (0, True), "no tool executed: the batch fails"
    assert executor.failed
    timed_out = await executor.run([LLMToolCall("4", "slowpoke", {"q": "x"})])
    assert timed_out.items[0].kind is ErrorKind.TIMEOUT
    assert (timed_out.executed, timed_out.failed) == (1, False), "a timed-out call ran: it counts"
    assert (executor.calls_total, executor.executed_total, executor.failed) == (4, 1, False)
    assert ToolBatch([]).failed is False, "no calls, no failure"


async def test_every_call_is_answered_even_if_the_engine_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = await travel_engine()
    Tools(engine).register()

    async def broken_run_turn(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(engine, "run_turn", broken_run_turn)
    batch = await ToolCallExecutor(engine).run(
        [LLMToolCall("a", "search", {"q": "x"}), LLMToolCall("b", "nope", {})]
    )
    assert [(i.call_id, i.is_error, i.kind) for i in batch.items] == [
        ("a", True, ErrorKind.INTERNAL_ERROR),
        ("b", True, ErrorKind.UNKNOWN_TOOL),
    ]
    assert lines(batch.items[0].content)[2:4] == [
        "Error Type: RuntimeError",
        "Message: the engine failed while running this call: RuntimeError: engine bug",
    ]


def test_executor_rejects_bad_settings() -> None:
    engine = make_engine()
    with pytest.raises(ValueError, match="deadline_s"):
        ToolCallExecutor(engine, deadline_s=0)
    with pytest.raises(ValueError, match="max_error_chars"):
        ToolCallExecutor(engine, max_error_chars=100)


# --- spec-map llm.router-handoff: invalid handoff → error text → corrected call → success ---


class FakeLLM:
    """A scripted model: hands off to a wrong agent, reads the error, corrects itself, answers."""

    def __init__(self) -> None:
        self.errors_read: list[str] = []

    def reply(self, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        last = transcript[-1]
        if last["role"] == "user":
            return oa_message(oa_call("call_1", "router_handoff", {"agent": "bilingual", "reason": "refund"}))
        if last["content"].startswith("Tool Execution Failed"):
            self.errors_read.append(last["content"])
            valid = re.search(r"valid: ([a-z, ]+)", last["content"])
            assert valid is not None, "the error text tells the model which agents exist"
            agent = valid.group(1).split(", ")[0]
            return oa_message(oa_call("call_2", "router_handoff", {"agent": agent, "reason": "refund"}))
        return {"role": "assistant", "content": f"Done: {last['content']}"}


async def test_seed_004_router_handoff_invalid_params_then_corrected_call() -> None:
    engine = await new_engine(ToolManifest(id="router_handoff"))
    handoffs: list[str] = []

    async def router_handoff(agent: str, reason: str) -> str:
        handoffs.append(agent)
        if agent not in ("billing", "support"):
            raise ToolError(ErrorKind.INVALID_PARAMETERS, f"unknown agent {agent!r}; valid: billing, support")
        return f"handed off to {agent}: {reason}"

    engine.register("router_handoff", router_handoff)
    executor = ToolCallExecutor(engine)
    llm = FakeLLM()
    transcript: list[dict[str, Any]] = [{"role": "user", "content": "I want my money back"}]
    batches: list[ToolBatch] = []
    for _ in range(5):
        message = llm.reply(transcript)
        transcript.append(message)
        if not message.get("tool_calls"):
            break
        batch = await executor.run(parse_openai_tool_calls(message))
        batches.append(batch)
        transcript.extend(batch.to_openai_messages())

    first, second = batches
    error_text = first.items[0].content
    assert lines(error_text) == [
        "Tool Execution Failed",
        "Tool: router_handoff",
        "Error Type: invalid_parameters",
        "Message: unknown agent 'bilingual'; valid: billing, support",
        "",
        "Fix the arguments and call the tool again.",
    ]
    assert llm.errors_read == [error_text], "the model read the error text"
    assert handoffs == ["bilingual", "billing"], "no retry of the invalid call: the tool ran once for it"
    assert (first.executed, first.failed) == (0, True), "invalid parameters are not an executed tool"
    assert second.items[0].content == "handed off to billing: refund" and not second.items[0].is_error
    assert (second.executed, second.failed) == (1, False)
    assert (executor.calls_total, executor.executed_total) == (2, 1)
    assert not executor.failed, "the session does not fail"
    assert transcript[-1] == {"role": "assistant", "content": "Done: handed off to billing: refund"}
    assert [m.get("tool_call_id") for m in transcript if m["role"] == "tool"] == ["call_1", "call_2"]
    assert executor.registry.get_error_summary() == {"router_handoff:invalid_parameters": 1}


# --- the transcript invariant -------------------------------------------------------------

BEHAVIOURS = ("ok", "flaky", "perm", "hang", "slow")
MAX_CHARS = 600


@dataclass(frozen=True)
class PlannedCall:
    call_id: str
    name: str
    args: str  # valid | malformed | not_object | unbindable
    duplicate: bool


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 8))
    planned: list[PlannedCall] = []
    for i in range(n):
        reuse = i > 0 and draw(st.sampled_from([False] * 7 + [True]))
        call_id = planned[draw(st.integers(0, i - 1))].call_id if reuse else f"call_{i}"
        name = draw(st.sampled_from([*BEHAVIOURS, "ghost"]))
        args = draw(st.sampled_from(["valid"] * 5 + ["malformed", "not_object", "unbindable"]))
        planned.append(PlannedCall(call_id, name, args, reuse))
    return {
        "calls": planned,
        "deadline_s": draw(st.floats(0.5, 20.0)),
        "stop_at": draw(st.none() | st.floats(0.1, 8.0)),
        "tripped": draw(st.sets(st.sampled_from(BEHAVIOURS), max_size=2)),
        "format": draw(st.sampled_from(["openai", "anthropic"])),
    }


def build_message(planned: list[PlannedCall], fmt: str) -> list[LLMToolCall]:
    if fmt == "openai":
        raw = {"valid": '{"q": "x"}', "malformed": '{"q": ', "not_object": "[1]", "unbindable": '{"zz": 1}'}
        return parse_openai_tool_calls(
            oa_message(*(oa_call(p.call_id, p.name, raw[p.args]) for p in planned))
        )
    inputs: dict[str, Any] = {
        "valid": {"q": "x"},
        "malformed": '{"q": ',
        "not_object": [1],
        "unbindable": {"zz": 1},
    }
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "thinking"}]
    blocks += [
        {"type": "tool_use", "id": p.call_id, "name": p.name, "input": inputs[p.args]} for p in planned
    ]
    return parse_anthropic_tool_uses({"role": "assistant", "content": blocks})


async def run_scenario(scenario: dict[str, Any]) -> ToolBatch:
    engine = await new_engine(
        ToolManifest(id="hang", timeout_ms=5_000), ToolManifest(id="slow", timeout_ms=10_000)
    )
    flaky_calls = 0

    async def ok(q: str) -> str:
        return f"ok:{q}"

    async def flaky(q: str) -> str:
        nonlocal flaky_calls
        flaky_calls += 1
        if flaky_calls == 1:
            raise ConnectionResetError("reset")
        return f"flaky:{q}"

    async def perm(q: str) -> str:
        raise PermissionError("denied")

    async def hang(q: str) -> str:
        await anyio.sleep_forever()
        return "never"

    async def slow(q: str) -> str:
        await anyio.sleep(3)
        return f"slow:{q}"

    for fn in (ok, flaky, perm, hang, slow):
        engine.register(fn.__name__, fn)
    for name in scenario["tripped"]:
        engine.trip(name)
    executor = ToolCallExecutor(engine, deadline_s=scenario["deadline_s"], max_error_chars=MAX_CHARS)
    calls = build_message(scenario["calls"], scenario["format"])
    stop = anyio.Event() if scenario["stop_at"] is not None else None
    async with anyio.create_task_group() as tg:
        if stop is not None:

            async def press_stop(event: anyio.Event, at: float) -> None:
                await anyio.sleep(at)
                event.set()

            tg.start_soon(press_stop, stop, scenario["stop_at"])
        batch = await executor.run(calls, stop=stop)
        tg.cancel_scope.cancel()
    assert (executor.calls_total, executor.executed_total) == (len(calls), batch.executed)
    assert sum(executor.registry.get_error_summary().values()) == sum(i.is_error for i in batch.items)
    return batch


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_transcript_invariant_one_result_per_call_id_in_order(scenario: dict[str, Any]) -> None:
    planned: list[PlannedCall] = scenario["calls"]
    batch: ToolBatch = anyio.run(
        run_scenario,
        scenario,
        backend="trio",
        backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)},
    )
    items = batch.items
    assert len(items) == len(planned)
    assert [i.call_id for i in items] == [p.call_id for p in planned]
    for p, item in zip(planned, items, strict=True):
        assert isinstance(item.content, str) and 0 < len(item.content) <= MAX_CHARS
        succeeded = item.status in ("succeeded", "partial")
        assert item.is_error is (not succeeded)
        if succeeded:
            assert item.content == f"{p.name}:x" and item.executed and item.kind is None
        else:
            assert item.content.startswith(f"{FAILED_HEADER}{p.name}\nError Type: ")
            assert item.kind is not None or item.status not in ("failed", "not_run")
        must_fail = (
            p.name in ("ghost", "perm") or p.args != "valid" or p.duplicate or p.name in scenario["tripped"]
        )
        if must_fail:
            assert item.is_error
        if p.name == "ghost" or p.args != "valid" or p.duplicate:
            assert item.status == "not_run" and not item.executed
        if p.name == "ok" and p.args == "valid" and not p.duplicate and p.name not in scenario["tripped"]:
            assert not item.is_error, "an instant success beats any deadline or stop"
    assert batch.executed == sum(i.executed for i in items)
    assert batch.failed is (batch.executed == 0)
    assert batch.to_openai_messages() == [
        {"role": "tool", "tool_call_id": i.call_id, "content": i.content} for i in items
    ]
    anthropic = batch.to_anthropic_message()
    assert anthropic["role"] == "user"
    assert [(b["type"], b["tool_use_id"], b["content"], b["is_error"]) for b in anthropic["content"]] == [
        ("tool_result", i.call_id, i.content, i.is_error) for i in items
    ]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("malformed_arguments", "arguments are not valid JSON"),
        ("unknown_tool", "unknown tool 'search_unknown'"),
        ("missing_arguments", "invalid arguments: missing a required argument: 'q'"),
    ],
)
async def test_a_tool_call_fault_corrupts_the_models_call_before_it_runs(mode: str, expected: str) -> None:
    from engine.faults import FaultInjector, FaultPlan

    plan = FaultPlan.from_dict(
        {"steps": [{"match": {"tool": "search"}, "sequence": [{"type": "tool_call_fault", "mode": mode}]}]}
    )
    injector = FaultInjector(plan)
    engine = await new_engine(faults=injector)
    ran: list[str] = []

    async def search(q: str) -> str:
        ran.append(q)
        return "results"

    engine.register("search", search)
    executor = ToolCallExecutor(engine)
    first = await executor.run([LLMToolCall("c1", "search", {"q": "x"}, '{"q": "x"}')])
    (item,) = first.items
    assert item.is_error and expected in item.content
    assert not item.executed and ran == []
    assert injector.counters == {"tool_call_fault": 1}
    second = await executor.run([LLMToolCall("c2", "search", {"q": "y"}, '{"q": "y"}')])
    assert not second.items[0].is_error, "the fault was consumed: the next call runs"
    assert ran == ["y"]


async def test_a_scenarios_model_turn_runs_through_the_executor(tmp_path: Any) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "scenario:\n  turns:\n    - id: ask\n      model: true\n      calls:\n"
        "        - {id: c1, tool: hotel_search, args: {city: Rome}}\n"
        "        - {id: c2, tool: no_such_tool, args: {}}\n"
    )
    engine = demo_engine("manifests")
    sent: list[ToolResultSent] = []
    engine.subscribe(lambda e: sent.append(e) if isinstance(e, ToolResultSent) else None, direct=True)
    (result,) = await scenario_files.run_scenario(engine, scenario_files.load_scenario(path), run="r1")
    assert result.turn_id == "r1/ask" and list(result.outcomes) == ["c1"]
    assert [(e.call_id, e.is_error, e.status) for e in sent] == [
        ("c1", False, "succeeded"),
        ("c2", True, "not_run"),
    ]
    assert lines(sent[1].content)[2] == "Error Type: unknown_tool"

    path.write_text(
        "scenario:\n  turns:\n    - id: ask\n      model: true\n      calls:\n"
        "        - {id: c1, tool: hotel_search}\n        - {id: c2, tool: hotel_search, depends_on: [c1]}\n"
    )
    with pytest.raises(
        scenario_files.ScenarioError, match="a model turn's calls cannot depend on each other"
    ):
        scenario_files.load_scenario(path)


async def test_an_executor_limited_to_some_tools_refuses_the_others_as_unknown_and_never_runs_them() -> None:
    engine = await new_engine()
    ran: list[str] = []

    async def search(q: str) -> str:
        ran.append("search")
        return q

    async def delete_all() -> str:
        ran.append("delete_all")
        return "gone"

    engine.register("search", search)
    engine.register("delete_all", delete_all)
    executor = ToolCallExecutor(engine, tools={"search"})
    message = {
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}},
            {"id": "2", "type": "function", "function": {"name": "delete_all", "arguments": "{}"}},
        ]
    }
    answers = await executor.run_openai(message)
    assert answers[0]["content"] == "x"
    assert "unknown tool 'delete_all'; available tools: search" in answers[1]["content"]
    assert ran == ["search"]
