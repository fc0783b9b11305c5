"""The OpenAI Agents SDK adapter against the real SDK: a scripted ``Model`` drives the real
``Runner.run`` over tools from ``guard_tools``.

Transient failures are retried inside one invocation; a final failure reaches the model as the
seed-003 text (the LLM executor's, byte for byte) through the SDK's own failure hook; a tool whose
breaker is open is not offered on the next model request, and is offered again once a probe is
due; every invocation is one guarded call.

asyncio only: the Agents SDK is written for asyncio (``asyncio.create_task``, ``asyncio.to_thread``,
``asyncio.wait_for`` in ``agents.run_internal`` and ``agents.tool``) and does not run on trio.
Both engine modes still run, on asyncio's virtual clock (looptime). Tracing is off: the SDK would
export traces to OpenAI's servers, and the tests have no network.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    RunContextWrapper,
    Runner,
    Tool,
    Usage,
    function_tool,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import UserError
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.testing import assistant_message, function_call
from agents.tool import set_function_tool_failure_error_function
from agents.tracing import Span, Trace, TracingProcessor
from openai.types.responses.response_prompt_param import ResponsePromptParam

from engine import BreakerConfig, BreakerState, ErrorKind, RetryPolicy, ToolError, ToolManifest
from engine import idempotency_key as current_key
from engine.adapters.openai_agents import ToolCallFailed, guard_tool, guard_tools
from engine.llm import LLMToolCall, ToolCallExecutor
from tests.conftest import virtual_time_backend
from tests.engine.conftest import Recorder, make_engine, new_engine, recorded
from tests.engine.integrations.test_refusals import Counted
from tests.readme_examples import readme_example

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    # asyncio only: the Agents SDK is asyncio-only (see the module docstring).
    return virtual_time_backend("asyncio")


@pytest.fixture(autouse=True)
def no_trace_export() -> Iterator[None]:
    """No trace leaves the process: the SDK's default processor exports to OpenAI's servers."""
    set_trace_processors([])
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(True)


Step = list[TResponseOutputItem] | str


class ScriptedModel(Model):
    """A model that answers each request with the next step of its script (tool calls, or final
    text), and remembers which tools each request offered and the input it brought."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.offered: list[list[str]] = []
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        self.offered.append(sorted(tool.name for tool in tools))
        self.inputs.append([] if isinstance(input, str) else list(input))
        step = self.steps[len(self.offered) - 1]
        output = [assistant_message(step)] if isinstance(step, str) else step
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests run the model without streaming")

    def outputs(self, request: int) -> dict[str, str]:
        """The tool outputs that the model's ``request``-th request (from 0) brought, by call id:
        the ones its input holds that the request before did not (an input is the whole history)."""
        earlier = _outputs(self.inputs[request - 1]) if request else {}
        return {k: v for k, v in _outputs(self.inputs[request]).items() if k not in earlier}


def _outputs(items: list[TResponseInputItem]) -> dict[str, str]:
    outputs: dict[str, str] = {}
    for item in items:
        fields = cast(dict[str, Any], item)
        if fields.get("type") == "function_call_output":
            outputs[str(fields["call_id"])] = str(fields["output"])
    return outputs


def call(tool: str, call_id: str, arguments: str | dict[str, Any] | None = None) -> TResponseOutputItem:
    return function_call(tool, {} if arguments is None else arguments, call_id=call_id)


async def run(model: ScriptedModel, tools: list[Tool]) -> str:
    result = await Runner.run(Agent(name="agent", model=model, tools=tools), "go")
    return str(result.final_output)


def guarded_calls(events: Recorder) -> list[tuple[str, str]]:
    """Each guarded call's tool and how it ended, in order."""
    ends = ("CallSucceeded", "CallFailed", "CallRejected")
    return [(e.to_dict()["tool_id"], e.event_type) for e in events if e.event_type in ends]


# --- retries inside one invocation ---------------------------------------------------------------


async def test_a_transient_failure_is_retried_inside_one_invocation_and_the_model_gets_the_value() -> None:
    # The manifest applies by the tool's name: a 1 s timeout cuts the hanging first attempt off.
    engine = await new_engine(ToolManifest(id="search", timeout_ms=1_000))
    events = recorded(engine)
    attempts: list[float] = []

    async def search(query: str) -> str:
        """Search the web."""
        attempts.append(anyio.current_time())
        if len(attempts) == 1:
            await anyio.sleep(60)  # hangs: cut off by the manifest's timeout
        if len(attempts) == 2:
            raise ConnectionResetError("upstream dropped the connection")
        return f"{query}: 3 results"

    model = ScriptedModel([call("search", "c1", {"query": "flights"})], "found")
    assert await run(model, guard_tools([search], engine)) == "found"

    assert model.outputs(1) == {"c1": "flights: 3 results"}
    assert len(model.offered) == 2  # one model request for the call: the retries are the engine's
    assert len(attempts) == 3 and attempts[1] - attempts[0] >= 1.0
    assert [e.kind for e in events.of("ToolError")] == [ErrorKind.TIMEOUT, ErrorKind.CONNECTION_RESET]
    assert guarded_calls(events) == [("search", "CallSucceeded")]  # one guarded call, three attempts
    assert events.of("CallSucceeded")[0].attempts == 3


async def test_every_invocation_is_one_guarded_call_parallel_ones_too() -> None:
    engine = await new_engine()
    events = recorded(engine)

    @function_tool
    async def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    model = ScriptedModel(
        [call("double", "c1", {"n": 1}), call("double", "c2", {"n": 2})],  # one response, two calls
        [call("double", "c3", {"n": 3})],
        "done",
    )
    assert await run(model, guard_tools([double], engine)) == "done"

    assert model.outputs(1) == {"c1": "2", "c2": "4"}
    assert model.outputs(2) == {"c3": "6"}
    assert guarded_calls(events) == [("double", "CallSucceeded")] * 3
    assert len(events.of("AttemptStarted")) == 3


# --- a final failure: the seed-003 text, through the SDK's failure hook --------------------------


async def quote(symbol: str, api_key: str) -> float:
    """A stock quote."""
    raise ConnectionError(f"503 from upstream for {symbol} with key {api_key}")


KEY = "sk-live-0123456789abcdef"


async def test_a_final_failure_reaches_the_model_as_the_executors_text_redacted() -> None:
    policy = ToolManifest(id="quote", retry_policy=RetryPolicy(max_attempts=2), secret_fields=("api_key",))
    engine = await new_engine(policy)
    events = recorded(engine)
    model = ScriptedModel(
        [call("quote", "c1", {"symbol": "ACME", "api_key": KEY})],
        [call("quote", "c2", {"symbol": "ACME", "api_key": KEY})],  # the run goes on
        "sorry",
    )
    assert await run(model, guard_tools([quote], engine)) == "sorry"

    # The LLM executor's answer to the same call of the same function on an engine of the same
    # manifest: the adapter's text is the same, byte for byte.
    plain = await new_engine(policy, redaction=engine.redaction)
    plain.register("quote", quote)
    [expected] = (
        await ToolCallExecutor(plain).run([LLMToolCall("c9", "quote", {"symbol": "ACME", "api_key": KEY})])
    ).items
    assert re.fullmatch(
        r"Tool Execution Failed\nTool: quote\nError Type: ConnectionError\n"
        r"Message: 503 from upstream for ACME with key sk-\[REDACTED:[0-9a-f]{8}\]\n\n"
        r"This is temporary: retrying later may help\.",
        expected.content,
    )
    assert model.outputs(1) == {"c1": expected.content}
    assert model.outputs(2) == {"c2": expected.content}
    assert [e.attempts for e in events.of("CallFailed")] == [2, 2]  # retried by the engine first


async def test_the_text_comes_through_the_sdks_own_failure_hook() -> None:
    engine = await new_engine(ToolManifest(id="quote", retry_policy=RetryPolicy(max_attempts=1)))
    tool = guard_tool(quote, engine)
    set_function_tool_failure_error_function(tool, None)  # the SDK's hook off: the failure ends the run
    model = ScriptedModel([call("quote", "c1", {"symbol": "ACME", "api_key": "k"})], "unreached")

    with pytest.raises(UserError, match=r"^Error running tool quote") as raised:
        await run(model, [tool])
    failed = raised.value.__cause__
    assert isinstance(failed, ToolCallFailed)
    assert isinstance(failed.__cause__, ToolError)  # the engine's error
    assert failed.error is failed.__cause__ and failed.error.kind is ErrorKind.NETWORK_ERROR
    assert str(failed).startswith("Tool Execution Failed\nTool: quote\nError Type: ConnectionError\n")


async def test_arguments_the_model_got_wrong_are_not_retried_nor_counted() -> None:
    engine = await new_engine(ToolManifest(id="weather", circuit_breaker=BreakerConfig(failure_threshold=1)))
    events = recorded(engine)
    runs: list[str] = []

    async def weather(city: str) -> str:
        """Today's weather in a city."""
        runs.append(city)
        return f"sunny in {city}"

    model = ScriptedModel(
        [
            call("weather", "c1", '{"city": '),  # broken JSON: refused before the engine
            call("weather", "c2", {"city": 5}),  # refused by the tool's schema, inside the call
        ],
        [call("weather", "c3", {"city": "Oslo"})],
        "done",
    )
    assert await run(model, guard_tools([weather], engine)) == "done"

    outputs = model.outputs(1)
    assert outputs["c1"] == (
        "Tool Execution Failed\nTool: weather\nError Type: invalid_parameters\n"
        "Message: arguments are not valid JSON (Expecting value: line 1 column 10 (char 9))\n\n"
        "Fix the arguments and call the tool again."
    )
    assert outputs["c2"] == (  # the SDK's message: it keeps tool data out of messages by default
        "Tool Execution Failed\nTool: weather\nError Type: invalid_parameters\n"
        "Message: Invalid JSON input for tool weather\n\nFix the arguments and call the tool again."
    )
    assert model.offered[1] == ["weather"]  # the model's mistakes do not open the breaker
    assert model.outputs(2) == {"c3": "sunny in Oslo"}
    assert runs == ["Oslo"]
    # c1 refused before any attempt (as the LLM executor refuses it), c2 failed its one attempt
    assert guarded_calls(events) == [("weather", "CallFailed")] * 2 + [("weather", "CallSucceeded")]
    assert [e.attempts for e in events.of("CallFailed")] == [0, 1]
    assert len(events.of("AttemptStarted")) == 2


async def test_a_call_whose_arguments_do_not_parse_is_counted_as_a_refused_engine_call_is() -> None:
    engine = await new_engine()
    counted = Counted(engine)

    async def weather(city: str) -> str:
        """Today's weather in a city."""
        return f"sunny in {city}"

    model = ScriptedModel([call("weather", "call_1", '{"city": ')], "done")
    assert await run(model, guard_tools([weather], engine)) == "done"

    assert model.outputs(1)["call_1"].startswith("Tool Execution Failed\nTool: weather\nError Type: invalid")
    assert counted.failed("weather", "invalid_parameters") == (1, 1)
    life = counted.life("weather")  # engine.stats(), and the console agrees
    assert (life.calls, life.failures, life.error_count) == (1, 1, 0)
    (refused,) = counted.refused()
    counted.not_run(refused.call_id, "invalid_parameters")
    counted.close()


# --- breakers: a tool whose breaker is open is not offered ---------------------------------------


async def test_a_tool_whose_breaker_opened_is_not_offered_until_a_probe_is_due() -> None:
    engine = await new_engine(
        ToolManifest(
            id="flaky",
            retry_policy=RetryPolicy(max_attempts=1),
            circuit_breaker=BreakerConfig(failure_threshold=2, timeout_ms=30_000),
        )
    )
    events = recorded(engine)

    async def flaky() -> str:
        """Often down."""
        raise TimeoutError("upstream timed out")

    async def steady() -> str:
        """Always up."""
        return "fine"

    tools = guard_tools([flaky, steady], engine)
    model = ScriptedModel(
        [call("flaky", "c1")], [call("flaky", "c2")], [call("steady", "c3")], "gave up on flaky"
    )
    assert await run(model, tools) == "gave up on flaky"

    assert model.offered == [["flaky", "steady"], ["flaky", "steady"], ["steady"], ["steady"]]
    assert engine.state("flaky") is BreakerState.OPEN
    assert guarded_calls(events) == [
        ("flaky", "CallFailed"), ("flaky", "CallFailed"), ("steady", "CallSucceeded")
    ]  # fmt: skip

    await anyio.sleep(30)  # the breaker's open timeout: one probe is due, the tool is offered again
    model = ScriptedModel("ok")
    await run(model, tools)
    assert model.offered == [["flaky", "steady"]]


async def test_a_call_refused_by_an_open_breaker_reaches_the_model_as_the_executors_text() -> None:
    engine = await new_engine()
    events = recorded(engine)

    async def maintenance() -> str:
        """Start maintenance."""
        engine.trip("lookup", reason="maintenance")
        return "started"

    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    # The model calls lookup in the response whose first call trips its breaker: it was offered.
    model = ScriptedModel([call("maintenance", "c1"), call("lookup", "c2", {"key": "a"})], "done")
    assert await run(model, guard_tools([maintenance, lookup], engine)) == "done"

    assert model.offered == [["lookup", "maintenance"], ["maintenance"]]
    assert model.outputs(1)["c2"] == (
        "Tool Execution Failed\nTool: lookup\nError Type: circuit_open\n"
        "Message: circuit breaker open for lookup (FORCED_OPEN): no attempt made\n\n"
        "The tool is disabled for now after repeated failures: do not call it again in this turn."
    )
    assert guarded_calls(events) == [("maintenance", "CallSucceeded"), ("lookup", "CallRejected")]


async def test_the_tools_own_is_enabled_still_applies() -> None:
    engine = await new_engine()
    asked: list[str] = []

    async def allowed(ctx: RunContextWrapper[Any], agent: Any) -> bool:
        asked.append(agent.name)
        return bool(ctx.context["admin"])

    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    tools = guard_tools(
        [function_tool(lookup, name_override="hidden", is_enabled=False),
         function_tool(lookup, name_override="admin_lookup", is_enabled=allowed), lookup],
        engine,
    )  # fmt: skip
    for admin, offered in ((False, ["lookup"]), (True, ["admin_lookup", "lookup"])):
        model = ScriptedModel("done")
        await Runner.run(Agent(name="agent", model=model, tools=tools), "go", context={"admin": admin})
        assert model.offered == [offered]
    assert set(asked) == {"agent"}  # the tool's own function got the run's context and agent


async def test_a_tool_retired_from_the_engine_is_not_offered() -> None:
    engine = await new_engine()

    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    tools = guard_tools([lookup], engine)
    engine.unregister("lookup")
    model = ScriptedModel("done")
    await run(model, tools)
    assert model.offered == [[]]


# --- alternatives, context, registration ---------------------------------------------------------


async def test_the_engine_routes_a_failing_call_to_its_guarded_alternative_with_the_run_context() -> None:
    engine = await new_engine(
        ToolManifest(id="quote", retry_policy=RetryPolicy(max_attempts=2), alternatives=("quote_backup",)),
        ToolManifest(id="quote_backup"),
    )
    events = recorded(engine)
    seen: list[tuple[str, str]] = []

    @function_tool
    async def quote_backup(ctx: RunContextWrapper[dict[str, str]], symbol: str) -> float:
        """A stock quote from the backup feed."""
        seen.append((ctx.context["user"], symbol))  # the SDK's context injection, through the engine
        return 12.5

    model = ScriptedModel([call("quote", "c1", {"symbol": "ACME", "api_key": "k"})], "ok")
    agent = Agent(name="agent", model=model, tools=guard_tools([quote, quote_backup], engine))
    await Runner.run(agent, "go", context={"user": "ann"})

    assert model.outputs(1) == {"c1": "12.5"}
    assert seen == [("ann", "ACME")]  # the alternative's own function, the same arguments
    assert [e.tool_id for e in events.of("AttemptStarted")] == ["quote", "quote", "quote_backup"]
    assert [e.alternative for e in events.of("AlternativeUsed")] == ["quote_backup"]
    # One guarded call of quote, which the engine served by a call of its alternative.
    assert guarded_calls(events) == [("quote", "CallFailed"), ("quote_backup", "CallSucceeded")]


async def test_a_guarded_tool_runs_only_through_its_function_tool() -> None:
    engine = await new_engine()

    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    guard_tools([lookup], engine)
    result = await engine.try_call("lookup", key="a")  # no SDK context to run the tool with
    assert result.error is not None and result.error.kind is ErrorKind.NOT_PERMITTED
    assert "runs through its guarded Agents SDK FunctionTool" in result.error.message


def test_a_taken_name_is_refused_and_nothing_is_registered() -> None:
    engine = make_engine()
    engine.register("lookup", lambda key: key)

    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    async def other() -> str:
        """Other."""
        return ""

    with pytest.raises(ValueError, match="'lookup' is already registered"):
        guard_tools([other, lookup], engine)
    with pytest.raises(ValueError, match="two tools are named 'other'"):
        guard_tools([other, other], engine)
    with pytest.raises(ValueError, match="'my other' must match"):
        guard_tools([other, function_tool(other, name_override="my other")], engine)
    with pytest.raises(ValueError, match="max_error_chars must be at least 512"):
        guard_tools([other], engine, max_error_chars=100)
    assert engine.tools == ["lookup"]


async def test_a_failure_of_the_engine_itself_still_reaches_the_model_as_the_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = await new_engine()

    async def lookup(key: str) -> str:
        """Look a key up."""
        return key

    tools = guard_tools([lookup], engine)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(engine.runtime, "execute", broken)  # an engine bug: not the tool's failure
    model = ScriptedModel([call("lookup", "c1", {"key": "a"})], "done")
    assert await run(model, tools) == "done"
    assert model.outputs(1) == {
        "c1": "Tool Execution Failed\nTool: lookup\nError Type: RuntimeError\n"
        "Message: the engine failed while running this call: RuntimeError: engine bug\n\n"
        "The tool failed and cannot be used for this request."
    }


class Spans(TracingProcessor):
    """Keeps the SDK's finished spans: a processor in the process, no exporter."""

    def __init__(self) -> None:
        self.ended: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None: ...
    def on_trace_end(self, trace: Trace) -> None: ...
    def on_span_start(self, span: Span[Any]) -> None: ...

    def on_span_end(self, span: Span[Any]) -> None:
        self.ended.append(span)

    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


async def test_the_sdks_trace_shows_the_failure_as_the_model_was_told_it() -> None:
    engine = await new_engine(
        ToolManifest(id="quote", retry_policy=RetryPolicy(max_attempts=1), secret_fields=("api_key",))
    )
    spans = Spans()
    set_trace_processors([spans])  # in the process only; the fixture turns tracing off again
    set_tracing_disabled(False)
    model = ScriptedModel([call("quote", "c1", {"symbol": "ACME", "api_key": KEY})], "sorry")
    await run(model, guard_tools([quote], engine))

    [tool_span] = [s for s in spans.ended if s.span_data.type == "function"]
    assert tool_span.error is not None
    assert tool_span.error["message"] == "Error running tool (non-fatal)"
    assert tool_span.error["data"] == {"tool_name": "quote", "error": model.outputs(1)["c1"]}
    assert KEY not in json.dumps(tool_span.error)  # the text is redacted: the key is a secret


def test_a_plain_sync_function_runs_in_a_worker_thread_as_one_guarded_call() -> None:
    # The real clock, on a loop of its own: a worker thread's time is not virtual.
    engine = make_engine()
    events = recorded(engine)
    threads: list[int] = []

    def convert(amount: float) -> float:
        """Convert an amount."""
        threads.append(threading.get_ident())
        return amount * 2

    model = ScriptedModel([call("convert", "c1", {"amount": 3})], "done")

    async def main() -> None:
        async with engine:
            assert await run(model, guard_tools([convert], engine)) == "done"

    anyio.run(main)
    assert model.outputs(1) == {"c1": "6.0"}
    assert threads and threads[0] != threading.get_ident()  # the SDK's own to_thread, not the loop
    assert guarded_calls(events) == [("convert", "CallSucceeded")]


# --- the README example ---------------------------------------------------------------------------

EXAMPLE = readme_example("### OpenAI Agents SDK")


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(EXAMPLE, "README.md", "exec"), {"__name__": "readme"})  # its own loop, on the real clock
    assert capsys.readouterr().out.splitlines() == [
        "call_1 'sunny in Paris'",
        "call_2 'Tool Execution Failed\\nTool: weather\\nError Type: ValueError\\nMessage: Unknown city:"
        " Atlantis\\n\\nFix the arguments and call the tool again.'",
        "Sunny in Paris; I could not check Atlantis.",
    ]


# --- idempotency keys -----------------------------------------------------------------------------


async def test_a_keyed_tool_receives_the_tool_call_id_as_its_key_on_every_attempt() -> None:
    keyed = {"side_effect": "side_effecting", "timeout_ms": 100, "retry_policy": RetryPolicy(max_attempts=3)}
    engine = await new_engine(
        ToolManifest(id="book", idempotency={"key": "idempotency_key"}, **keyed),
        ToolManifest(id="pay", idempotency={"key": "context"}, **keyed),
    )
    booked: list[str] = []
    paid: list[str | None] = []

    async def book(flight: str, idempotency_key: str = "") -> str:
        """Book a flight."""
        booked.append(idempotency_key)
        if len(booked) == 1:
            await anyio.sleep_forever()  # a timeout: ambiguous, re-sent under the same key
        return f"booked {flight}"

    def pay(amount: int) -> str:
        """Pay (a plain function: the SDK runs it in a thread)."""
        paid.append(current_key())
        return "paid"

    model = ScriptedModel(
        [call("book", "tc_1", {"flight": "AF1"}), call("pay", "tc_2", {"amount": 5})], "done"
    )
    assert await run(model, guard_tools([book, pay], engine)) == "done"
    assert model.outputs(1) == {"tc_1": "booked AF1", "tc_2": "paid"}
    assert booked == ["tc_1", "tc_1"]
    assert paid[-1:] == ["tc_2"] and set(paid) == {"tc_2"}
