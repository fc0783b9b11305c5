"""The pydantic-ai adapter against the real library: a scripted ``FunctionModel`` drives a real
``Agent.run`` over a ``GuardedToolset``.

Bad arguments come back as ``ModelRetry`` with the seed-003 text and the model's corrected call
succeeds (seed 004's router case); transient failures are retried inside one tool call; other
final failures reach the model as ``ToolFailed``; a tool whose breaker is open is not offered on
the next step; pydantic-ai's own signals pass through; every call is a guarded call.

asyncio only: pydantic-ai's ``Agent`` starts its own tasks with ``asyncio.create_task``
(``pydantic_ai._utils``), so it does not run on trio even through anyio (``RuntimeError: no
running event loop``). Both engine modes still run, on asyncio's virtual clock (looptime).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, RunContext
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage

from engine import BreakerConfig, BreakerState, ErrorClass, ErrorKind, RetryPolicy, ToolError, ToolManifest
from engine import idempotency_key as current_key
from engine.adapters.pydantic_ai import GuardedToolset
from engine.llm import LLMToolCall, ToolCallExecutor
from tests.conftest import virtual_time_backend
from tests.engine.conftest import Recorder, new_engine, recorded
from tests.engine.integrations.test_refusals import Counted
from tests.readme_examples import readme_example

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    # asyncio only: pydantic-ai's Agent calls asyncio.create_task itself (see the module docstring).
    return virtual_time_backend("asyncio")


Step = list[ModelResponsePart] | str | Callable[[], Awaitable[list[ModelResponsePart] | str]]


class ScriptedModel:
    """A model that answers each request with the next step of its script (tool calls, or final
    text), and remembers what it was offered and what each request brought back."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.offered: list[list[str]] = []
        self.returns: list[list[ToolReturnPart]] = []

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.offered.append(sorted(tool.name for tool in info.function_tools))
        self.returns.append([part for part in messages[-1].parts if isinstance(part, ToolReturnPart)])
        step = self.steps[len(self.offered) - 1]
        if callable(step):
            step = await step()
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=step)


def call(tool: str, call_id: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool, args, tool_call_id=call_id)


async def run(model: ScriptedModel, toolset: GuardedToolset[None], prompt: str = "go") -> str:
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    result = await agent.run(prompt)
    return str(result.output)


def guarded_calls(events: Recorder) -> list[tuple[str, str]]:
    """Each guarded call's tool and how it ended, in order."""
    ends = ("CallSucceeded", "CallFailed", "CallRejected")
    return [(e.to_dict()["tool_id"], e.event_type) for e in events if e.event_type in ends]


# --- bad arguments: ModelRetry, corrected by the model (seed 004's router case) --------------


async def test_bad_arguments_come_back_as_model_retry_and_the_corrected_call_succeeds() -> None:
    engine = await new_engine()
    events = recorded(engine)
    invoked: list[str] = []
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def handoff(agent: str) -> str:
        invoked.append(agent)
        if agent not in ("sales", "support"):  # the router refuses the model's arguments
            raise ToolError(ErrorKind.INVALID_PARAMETERS, f"unknown agent {agent!r}; agents: sales, support")
        return f"handed off to {agent}"

    model = ScriptedModel(
        [call("handoff", "c1", agent="billing")], [call("handoff", "c2", agent="sales")], "done"
    )
    assert await run(model, GuardedToolset(tools, engine)) == "done"

    retried, succeeded = model.returns[1][0], model.returns[2][0]
    assert retried.outcome == "retried"  # pydantic-ai's ModelRetry channel: the model fixes its call
    assert retried.content == (
        "Tool Execution Failed\nTool: handoff\nError Type: invalid_parameters\n"
        "Message: unknown agent 'billing'; agents: sales, support\n\n"
        "Fix the arguments and call the tool again."
    )
    assert (succeeded.outcome, succeeded.content) == ("success", "handed off to sales")
    assert invoked == ["billing", "sales"]  # a permanent error is not retried by the engine
    assert guarded_calls(events) == [("handoff", "CallFailed"), ("handoff", "CallSucceeded")]
    assert events.of("CallFailed")[0].kind is ErrorKind.INVALID_PARAMETERS


async def test_a_value_error_is_bad_arguments_too() -> None:
    engine = await new_engine()
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    def convert(amount: float) -> float:  # a plain function: the engine runs it in a worker thread
        if amount < 0:
            raise ValueError("amount must not be negative")
        return amount * 2

    model = ScriptedModel([call("convert", "c1", amount=-1)], [call("convert", "c2", amount=3)], "ok")
    await run(model, GuardedToolset(tools, engine))
    assert model.returns[1][0].outcome == "retried"
    assert "Error Type: ValueError\nMessage: amount must not be negative" in str(model.returns[1][0].content)
    assert model.returns[2][0].content == 6.0


# --- transient failures: retried inside one tool call ----------------------------------------


async def test_transient_failures_and_timeouts_are_retried_inside_one_tool_call() -> None:
    # The manifest applies by the tool's name: a 1 s timeout cuts the hanging first attempt off.
    engine = await new_engine(ToolManifest(id="search", timeout_ms=1_000))
    events = recorded(engine)
    attempts: list[float] = []
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def search(query: str) -> list[str]:
        attempts.append(anyio.current_time())
        if len(attempts) == 1:
            await anyio.sleep(60)  # hangs: cut off by the manifest's timeout
        if len(attempts) == 2:
            raise ConnectionResetError("upstream dropped the connection")
        return [f"{query}: 3 results"]

    model = ScriptedModel([call("search", "c1", query="flights")], "found")
    assert await run(model, GuardedToolset(tools, engine)) == "found"

    [answer] = model.returns[1]
    assert (answer.outcome, answer.content) == ("success", ["flights: 3 results"])
    assert len(model.offered) == 2  # one model step for the tool call: the retries are the engine's
    assert len(attempts) == 3
    assert attempts[1] - attempts[0] >= 1.0  # the timeout, then the backoff
    assert len(events.of("ToolTimeout")) == 1
    assert [e.kind for e in events.of("ToolError")] == [ErrorKind.TIMEOUT, ErrorKind.CONNECTION_RESET]
    [done] = events.of("CallSucceeded")
    assert done.attempts == 3


async def test_a_final_failure_reaches_the_model_as_tool_failed_redacted_and_the_run_goes_on() -> None:
    engine = await new_engine(ToolManifest(id="quote", retry_policy=RetryPolicy(max_attempts=2)))
    events = recorded(engine)
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def quote(symbol: str, api_key: str) -> float:
        raise ConnectionError(f"503 from upstream for {symbol} with key {api_key}")

    key = "sk-live-0123456789abcdef"
    model = ScriptedModel(
        [call("quote", "c1", symbol="ACME", api_key=key)],
        [call("quote", "c2", symbol="ACME", api_key=key)],  # ToolFailed spends no retry budget
        "sorry",
    )
    assert await run(model, GuardedToolset(tools, engine)) == "sorry"

    # The LLM executor's answer to the same call of the same function on an engine of the same
    # manifest: the adapter's text is the same, byte for byte.
    plain = await new_engine(
        ToolManifest(id="quote", retry_policy=RetryPolicy(max_attempts=2)), redaction=engine.redaction
    )
    plain.register("quote", quote)
    executor = ToolCallExecutor(plain)
    [expected] = (await executor.run([LLMToolCall("c3", "quote", {"symbol": "ACME", "api_key": key})])).items
    assert expected.content.startswith("Tool Execution Failed\nTool: quote\nError Type: ConnectionError\n")
    assert expected.content.endswith("\n\nThis is temporary: retrying later may help.")
    assert key not in expected.content
    for [failed] in model.returns[1:]:
        assert failed.outcome == "failed"  # ToolFailed: a failure the model sees, not a success
        assert failed.content == expected.content
    assert [e.attempts for e in events.of("CallFailed")] == [2, 2]  # retried by the engine first


async def test_the_engine_routes_a_failing_call_to_its_alternative_in_the_same_toolset() -> None:
    engine = await new_engine(
        ToolManifest(id="quote", retry_policy=RetryPolicy(max_attempts=2), alternatives=("quote_backup",)),
        ToolManifest(id="quote_backup"),
    )
    events = recorded(engine)
    tools: FunctionToolset[None] = FunctionToolset()
    backup_args: list[str] = []

    @tools.tool_plain
    async def quote(symbol: str) -> float:
        raise ConnectionError("503 from upstream")

    @tools.tool_plain
    async def quote_backup(symbol: str) -> float:
        backup_args.append(symbol)
        return 12.5

    model = ScriptedModel([call("quote", "c1", symbol="ACME")], "ok")
    await run(model, GuardedToolset(tools, engine))

    [answer] = model.returns[1]
    assert (answer.outcome, answer.content) == ("success", 12.5)
    assert backup_args == ["ACME"]  # the alternative's own function, the same arguments
    assert [e.tool_id for e in events.of("AttemptStarted")] == ["quote", "quote", "quote_backup"]
    assert [e.alternative for e in events.of("AlternativeUsed")] == ["quote_backup"]


# --- breakers: a tool whose breaker is open is not offered ------------------------------------


async def test_a_tool_whose_breaker_opened_is_not_offered_until_it_half_opens() -> None:
    engine = await new_engine(
        ToolManifest(
            id="flaky",
            retry_policy=RetryPolicy(max_attempts=2),
            circuit_breaker=BreakerConfig(failure_threshold=2, timeout_ms=30_000),
        )
    )
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def flaky() -> str:
        raise TimeoutError("upstream timed out")

    @tools.tool_plain
    async def steady() -> str:
        return "fine"

    async def after_the_open_period() -> list[ModelResponsePart]:
        await anyio.sleep(31)
        return [call("steady", "c3")]

    model = ScriptedModel([call("flaky", "c1")], [call("steady", "c2")], after_the_open_period, "end")
    await run(model, GuardedToolset(tools, engine))

    assert model.offered[0] == ["flaky", "steady"]
    assert model.returns[1][0].outcome == "failed"
    assert engine.state("flaky") is BreakerState.HALF_OPEN  # after the 31 s the script slept
    assert model.offered[1] == ["steady"]  # open: left out of the next step
    assert model.offered[2] == ["steady"]
    # The step after the open period: the breaker admits a probe, so the tool is offered again.
    assert model.offered[3] == ["flaky", "steady"]


async def test_a_call_refused_by_an_open_breaker_says_so_in_the_seed_003_text() -> None:
    engine = await new_engine()
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def lookup(key: str) -> str:
        return key

    guarded: GuardedToolset[None] = GuardedToolset(tools, engine)
    ctx = RunContext(deps=None, model=FunctionModel(ScriptedModel()), usage=RunUsage())
    tool = (await guarded.get_tools(ctx))["lookup"]
    engine.trip("lookup", reason="maintenance")
    assert await guarded.get_tools(ctx) == {}
    with pytest.raises(ToolFailed) as raised:
        await guarded.call_tool("lookup", {"key": "a"}, ctx, tool)
    assert raised.value.message.endswith(
        "\n\nThe tool is disabled for now after repeated failures: do not call it again in this turn."
    )
    assert "Error Type: circuit_open" in raised.value.message


# --- pydantic-ai's own signals pass through --------------------------------------------------


async def test_a_tools_own_model_retry_and_tool_failed_pass_through_unretried() -> None:
    engine = await new_engine()
    events = recorded(engine)
    tools: FunctionToolset[None] = FunctionToolset()
    invoked: list[str] = []

    @tools.tool_plain
    async def book(date: str) -> str:
        invoked.append(date)
        if date == "tomorrow":
            raise ModelRetry("give the date as YYYY-MM-DD")
        if date == "2020-01-01":
            raise ToolFailed("that date is in the past")
        return f"booked {date}"

    model = ScriptedModel(
        [call("book", "c1", date="tomorrow")],
        [call("book", "c2", date="2020-01-01")],
        [call("book", "c3", date="2030-01-01")],
        "ok",
    )
    await run(model, GuardedToolset(tools, engine))

    assert [(r[0].outcome, r[0].content) for r in model.returns[1:]] == [
        ("retried", "give the date as YYYY-MM-DD"),
        ("failed", "that date is in the past"),
        ("success", "booked 2030-01-01"),
    ]
    assert invoked == ["tomorrow", "2020-01-01", "2030-01-01"]  # the engine retried neither signal
    assert [e.kind for e in events.of("CallFailed")] == [
        ErrorKind.INVALID_PARAMETERS,
        ErrorKind.EXECUTION_ERROR,
    ]
    assert engine.breaker("book").consecutive_failures == 0  # never counted against the breaker


async def test_a_deferred_call_passes_through_to_the_runs_deferred_requests() -> None:
    engine = await new_engine()
    events = recorded(engine)
    tools: FunctionToolset[None] = FunctionToolset()
    invoked: list[str] = []

    @tools.tool_plain
    async def transfer(amount: int) -> str:
        invoked.append("transfer")
        raise CallDeferred(metadata={"queue": "payments"})  # run outside the agent, later

    agent = Agent(
        FunctionModel(ScriptedModel([call("transfer", "c1", amount=5)])),
        toolsets=[GuardedToolset(tools, engine)],
        output_type=[str, DeferredToolRequests],
    )
    output = (await agent.run("pay")).output
    assert isinstance(output, DeferredToolRequests)
    assert [c.tool_call_id for c in output.calls] == ["c1"]
    assert output.metadata == {"c1": {"queue": "payments"}}
    assert invoked == ["transfer"]  # not retried
    [ended] = events.of("CallFailed")
    assert ended.kind is ErrorKind.CANCELED  # not run here: neither executed nor counted
    assert engine.breaker("transfer").consecutive_failures == 0


# --- a call pydantic-ai refuses by the tool's schema is counted as any refused call ----------------


async def test_arguments_the_tools_schema_refuses_are_counted_as_a_refused_engine_call_is() -> None:
    engine = await new_engine()
    counted = Counted(engine)
    tools: FunctionToolset[None] = FunctionToolset()
    invoked: list[str] = []

    @tools.tool_plain
    async def weather(city: str) -> str:
        invoked.append(city)
        return f"sunny in {city}"

    model = ScriptedModel([call("weather", "c1", town="Paris")], [call("weather", "c2", city="Paris")], "ok")
    assert await run(model, GuardedToolset(tools, engine)) == "ok"

    assert invoked == ["Paris"]  # the refused call never ran
    assert model.returns[2][0].content == "sunny in Paris"
    assert counted.failed("weather", "invalid_parameters") == (1, 1)
    life = counted.life("weather")  # engine.stats(), and the console agrees
    assert (life.calls, life.successes, life.failures, life.error_count) == (2, 1, 1, 0)
    (refused,) = counted.refused()
    assert refused.error == (
        "the tool's schema refuses the arguments: city: Field required; town: Extra inputs are not permitted"
    )
    counted.not_run(refused.call_id, "invalid_parameters")
    counted.close()


# --- pydantic-ai's own MCP toolset: its MCP errors classified as any MCP error result --------------

MCP_SERVER = Path(__file__).with_name("mcp_server.py")
"""A real MCP server (built with the SDK), run as a subprocess by pydantic-ai's own MCPToolset."""
FAST = RetryPolicy(initial_delay_ms=1, max_delay_ms=2, max_attempts=3, max_total_time_ms=10_000)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a real clock: the server is a real process
@pytest.mark.parametrize("behavior", ["retry", "failed"])
async def test_mcp_errors_of_pydantic_ais_mcp_toolset_are_retried_or_sent_back_as_any_mcp_error(
    behavior: Literal["retry", "failed"],
) -> None:
    engine = await new_engine(
        ToolManifest(id="flaky", retry_policy=FAST), ToolManifest(id="rpc_error", retry_policy=FAST)
    )
    events = recorded(engine)
    key = uuid.uuid4().hex[:12]
    # pydantic-ai answers each MCP error to the model as ModelRetry ("retry") or ToolFailed ("failed")
    server = MCPToolset(MCP_SERVER, tool_error_behavior=behavior, max_retries=2, init_timeout=30)
    model = ScriptedModel(
        [call("flaky", "c1", key=key, failures=2)],  # "HTTP 503: Service Unavailable" twice, then ok
        [call("airport", "c2", code="XYZ")],  # "Invalid airport code: XYZ": the model's mistake
        [call("airport", "c3", code="CDG")],
        [call("rpc_error", "c4", code=-32603)],  # a JSON-RPC internal error: by its code, transient
        "done",
    )
    with anyio.fail_after(60):  # the server's start-up and the calls, bounded
        assert await run(model, GuardedToolset(server, engine)) == "done"

    flaky, airport, corrected, internal = (step[0] for step in model.returns[1:])
    assert (flaky.outcome, flaky.content) == ("success", "ok after 3")  # a transient error retried
    assert airport.outcome == "retried"  # bad arguments: back to the model, never retried
    assert airport.content == (
        "Tool Execution Failed\nTool: airport\nError Type: MCPErrorResult\n"
        "Message: Invalid airport code: XYZ\n\nFix the arguments and call the tool again."
    )
    assert (corrected.outcome, corrected.content) == ("success", "CDG: open")
    assert internal.outcome == "failed"  # retried, then a final failure the model adapts to
    assert str(internal.content).startswith("Tool Execution Failed\nTool: rpc_error\nError Type: MCPError")
    assert guarded_calls(events) == [
        ("flaky", "CallSucceeded"), ("airport", "CallFailed"), ("airport", "CallSucceeded"),
        ("rpc_error", "CallFailed"),
    ]  # fmt: skip
    failures = [(e.tool_id, e.kind, e.classification) for e in events.of("ToolError")]
    assert failures == [
        *[("flaky", ErrorKind.SERVICE_UNAVAILABLE, ErrorClass.TRANSIENT)] * 2,
        ("airport", ErrorKind.INVALID_PARAMETERS, ErrorClass.PERMANENT),
        *[("rpc_error", ErrorKind.EXECUTION_ERROR, ErrorClass.TRANSIENT)] * 3,
    ]
    assert events.of("CallSucceeded")[0].attempts == 3


# --- every call is guarded; registration --------------------------------------------------


async def test_every_call_the_model_makes_is_one_guarded_call() -> None:
    engine = await new_engine()
    events = recorded(engine)
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def echo(text: str) -> str:
        return text

    model = ScriptedModel(
        [call("echo", "c1", text="a"), call("echo", "c2", text="b")], [call("echo", "c3", text="c")], "ok"
    )
    await run(model, GuardedToolset(tools, engine))
    assert engine.tools == ["echo"]
    assert guarded_calls(events) == [("echo", "CallSucceeded")] * 3
    assert sorted(str(r.content) for step in model.returns for r in step) == ["a", "b", "c"]
    assert engine.stats()["echo"].life.calls == 3


async def test_a_name_the_engine_has_from_elsewhere_is_refused_and_a_relay_is_not_callable_directly() -> None:
    engine = await new_engine()
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def search(query: str) -> str:
        return query

    async def mine(query: str) -> str:
        return query

    ctx = RunContext(deps=None, model=FunctionModel(ScriptedModel()), usage=RunUsage())
    engine.register("search", mine)
    with pytest.raises(ValueError, match="already registered in the engine by something other"):
        await GuardedToolset(tools, engine).get_tools(ctx)

    other = await new_engine()
    await GuardedToolset(tools, other).get_tools(ctx)
    result = await other.try_call("search", query="x")  # not through the toolset: refused, not run
    assert result.error is not None
    assert result.error.kind is ErrorKind.NOT_PERMITTED


# --- README ------------------------------------------------------------------------------------

README_EXAMPLE = readme_example("### pydantic-ai")


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(README_EXAMPLE, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == (
        "Tool Execution Failed\nTool: handoff\nError Type: ValueError\n"
        "Message: unknown agent 'billing'; agents: sales, support\n\n"
        "Fix the arguments and call the tool again.\n"
        "handed off to sales\n"
    )


# --- idempotency keys -------------------------------------------------------------------------


async def test_a_keyed_tool_receives_the_tool_call_id_as_its_key_on_every_attempt() -> None:
    keyed = {"side_effect": "side_effecting", "timeout_ms": 100, "retry_policy": RetryPolicy(max_attempts=3)}
    engine = await new_engine(
        ToolManifest(id="book", idempotency={"key": "idempotency_key"}, **keyed),
        ToolManifest(id="pay", idempotency={"key": "context"}, **keyed),
    )
    booked: list[str] = []
    paid: list[str | None] = []
    tools: FunctionToolset[None] = FunctionToolset()

    @tools.tool_plain
    async def book(flight: str, idempotency_key: str = "") -> str:
        booked.append(idempotency_key)
        if len(booked) == 1:
            await anyio.sleep_forever()  # a timeout: ambiguous, re-sent under the same key
        return f"booked {flight}"

    @tools.tool_plain
    async def pay(amount: int) -> str:
        paid.append(current_key())
        return "paid"

    model = ScriptedModel([call("book", "tc_1", flight="AF1"), call("pay", "tc_2", amount=5)], "done")
    assert await run(model, GuardedToolset(tools, engine)) == "done"
    assert [part.content for part in model.returns[1]] == ["booked AF1", "paid"]
    assert booked == ["tc_1", "tc_1"]
    assert paid == ["tc_2"]
