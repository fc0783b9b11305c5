"""The LangGraph adapter: ``TripwireToolNode`` in real ``StateGraph``s driven by langchain-core's fake
chat model — one ``ToolMessage`` per call id, in order, whatever the calls come to (langgraph#6486).

asyncio only: LangGraph's async runner and langchain-core's ``ainvoke`` are asyncio code (tasks,
futures, ``run_in_executor``); neither runs on trio. Virtual time is looptime's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import InjectedState, create_react_agent, tools_condition

from engine import BreakerConfig, ErrorKind, RetryPolicy, ToolManifest
from engine import idempotency_key as current_key
from engine.adapters.langgraph import TripwireToolNode
from engine.exporters.prometheus import UNKNOWN_TOOL_LABEL
from engine.llm import TURN_DEADLINE_ERROR_TYPE, format_tool_error_for_llm
from engine.llm.model_text import GUIDANCE_CIRCUIT_OPEN, GUIDANCE_DEADLINE, GUIDANCE_FIX_ARGUMENTS
from tests.conftest import virtual_time_backend
from tests.engine.conftest import make_engine, new_engine
from tests.engine.integrations.test_refusals import Counted
from tests.readme_examples import readme_example

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[3]


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return virtual_time_backend("asyncio")  # LangGraph and langchain-core run on asyncio only


class Tools:
    """Tools as langchain ``@tool``s, counting their invocations."""

    def __init__(self) -> None:
        self.invoked: dict[str, int] = {}
        self.resets = 2

    def count(self, name: str) -> None:
        self.invoked[name] = self.invoked.get(name, 0) + 1

    def all(self) -> list[BaseTool]:
        @tool
        async def lookup(city: str) -> str:
            """Today's weather in a city."""
            self.count("lookup")
            return f"sunny in {city}"

        @tool
        async def flaky(city: str) -> str:
            """Drops the connection ``resets`` times, then answers."""
            self.count("flaky")
            if self.resets:
                self.resets -= 1
                raise ConnectionResetError("upstream dropped the connection")
            return f"cloudy in {city}"

        @tool
        async def broken(code: str) -> str:
            """Refuses every code: a permanent failure."""
            self.count("broken")
            raise ValueError(f"Invalid airport code: {code}")

        @tool
        async def slow(city: str) -> str:
            """Never answers."""
            self.count("slow")
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        return [lookup, flaky, broken, slow]


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def agent_graph(
    node: TripwireToolNode, *replies: AIMessage
) -> tuple[CompiledStateGraph[Any], list[list[BaseMessage]]]:
    """agent ⇄ tools until the scripted model stops calling tools; and what the model was shown."""
    model = GenericFakeChatModel(messages=iter(replies))
    shown: list[list[BaseMessage]] = []

    async def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
        shown.append(list(state["messages"]))
        # invoke, not ainvoke: the fake model's async path runs on a worker thread, where
        # looptime's clock would step in real time
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(), shown


def tool_messages(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def text(message: BaseMessage) -> str:
    """A message's content, which the node always makes text."""
    assert isinstance(message.content, str)
    return message.content


def manifests() -> list[ToolManifest]:
    return [
        ToolManifest(id="lookup"),
        ToolManifest(id="flaky", retry_policy=RetryPolicy(initial_delay_ms=100, jitter_percent=0)),
        ToolManifest(id="broken"),
        ToolManifest(id="slow", timeout_ms=1_000, retry_policy=RetryPolicy(max_attempts=2, jitter_percent=0)),
    ]


async def test_one_message_of_mixed_calls_gets_one_tool_message_per_id_in_order() -> None:
    engine = await new_engine(*manifests())
    tools = Tools()
    node = TripwireToolNode(tools.all(), engine=engine)
    calls = AIMessage(
        "",
        tool_calls=[
            call("c1", "lookup", city="Paris"),
            call("c2", "flaky", city="Oslo"),
            call("c3", "broken", code="XYZ"),
            call("c4", "teleport", to="Mars"),
            call("c5", "slow", city="Rome"),
            call("c6", "lookup", town="Paris"),  # the tool's own schema refuses it
        ],
        invalid_tool_calls=[
            {"type": "invalid_tool_call", "id": "c7", "name": "lookup", "args": '{"city": ', "error": None}
        ],
    )
    app, shown = agent_graph(node, calls, AIMessage("Paris is sunny."))
    start = anyio.current_time()
    state = await app.ainvoke({"messages": [HumanMessage("Weather?")]})

    answers = tool_messages(state["messages"])
    assert [m.tool_call_id for m in answers] == ["c1", "c2", "c3", "c4", "c5", "c6", "c7"]
    assert [m.status for m in answers] == ["success", "success", "error", "error", "error", "error", "error"]
    assert [m.content for m in answers[:2]] == ["sunny in Paris", "cloudy in Oslo"]
    assert tools.invoked == {"lookup": 1, "flaky": 3, "broken": 1, "slow": 2}  # c6 never got past the schema
    broken, unknown, slow, refused, unparsed = (text(m) for m in answers[2:])
    assert broken == format_tool_error_for_llm(
        "broken", "ValueError", "Invalid airport code: XYZ", kind=ErrorKind.INVALID_PARAMETERS
    )
    assert unknown == format_tool_error_for_llm(
        "teleport", "unknown_tool", "unknown tool 'teleport'; available tools: broken, flaky, lookup, slow",
        kind=ErrorKind.UNKNOWN_TOOL,
    )  # fmt: skip
    assert slow.startswith("Tool Execution Failed\nTool: slow\nError Type: TimeoutError\nMessage: ")
    assert slow.endswith("This is temporary: retrying later may help.")
    assert refused.startswith("Tool Execution Failed\nTool: lookup\nError Type: ValidationError\nMessage: ")
    assert "city\n  Field required" in refused and refused.endswith(GUIDANCE_FIX_ARGUMENTS)
    assert unparsed.startswith("Tool Execution Failed\nTool: lookup\nError Type: invalid_parameters\n")
    assert "arguments are not valid JSON" in unparsed
    # The model's next step sees the whole transcript: nothing is missing for the provider to refuse.
    assert tool_messages(shown[1]) == answers and state["messages"][-1].content == "Paris is sunny."
    assert 2.0 < anyio.current_time() - start < 3.0  # two 1 s timeouts and a backoff, on virtual time


async def test_the_turn_deadline_cuts_a_hanging_tool_and_it_still_gets_its_message() -> None:
    engine = await new_engine(ToolManifest(id="lookup"), ToolManifest(id="slow", timeout_ms=60_000))
    tools = Tools()
    node = TripwireToolNode(tools.all()[::3], engine=engine, deadline_s=5)
    app, _ = agent_graph(
        node,
        AIMessage("", tool_calls=[call("a", "slow", city="Rome"), call("b", "lookup", city="Oslo")]),
        AIMessage("ok"),
    )
    start = anyio.current_time()
    state = await app.ainvoke({"messages": [HumanMessage("Weather?")]})

    assert anyio.current_time() - start == pytest.approx(5.0, abs=0.01)
    cut, done = tool_messages(state["messages"])
    assert (cut.tool_call_id, cut.status, done.tool_call_id, done.content) == (
        "a",
        "error",
        "b",
        "sunny in Oslo",
    )
    assert text(cut).startswith(
        f"Tool Execution Failed\nTool: slow\nError Type: {TURN_DEADLINE_ERROR_TYPE}\n"
    )
    assert "deadline" in text(cut) and text(cut).endswith(GUIDANCE_DEADLINE)


async def test_an_open_breaker_shows_in_the_rejection_text_on_the_next_step() -> None:
    engine = await new_engine(
        ToolManifest(
            id="flaky",
            retry_policy=RetryPolicy(max_attempts=1),
            circuit_breaker=BreakerConfig(failure_threshold=2),
        ),
        ToolManifest(id="lookup"),
    )
    tools = Tools()
    node = TripwireToolNode(tools.all()[:2], engine=engine)
    first = AIMessage("", tool_calls=[call("f1", "flaky", city="Oslo"), call("f2", "flaky", city="Rome")])
    second = AIMessage("", tool_calls=[call("f3", "flaky", city="Oslo"), call("l1", "lookup", city="Oslo")])
    app, _ = agent_graph(node, first, second, AIMessage("done"))
    state = await app.ainvoke({"messages": [HumanMessage("Weather?")]})

    answers = tool_messages(state["messages"])
    assert [(m.tool_call_id, m.status) for m in answers] == [
        ("f1", "error"), ("f2", "error"), ("f3", "error"), ("l1", "success"),
    ]  # fmt: skip
    rejected = text(answers[2])
    assert "Message: circuit breaker open for flaky (OPEN): no attempt made\n" in rejected
    assert rejected.endswith(GUIDANCE_CIRCUIT_OPEN)
    assert tools.invoked == {"flaky": 2, "lookup": 1}  # the third call never reached the tool
    assert "flaky" not in engine.available_tools()


async def test_every_call_the_node_refuses_is_counted_as_a_refused_engine_call_is() -> None:
    engine = await new_engine(*manifests())
    engine.register("read_secrets", lambda: "the keys")  # guarded, but not a tool of the node
    counted = Counted(engine)
    node = TripwireToolNode(Tools().all(), engine=engine)
    calls = AIMessage(
        "",
        tool_calls=[call("c1", "lookup", city="Paris"), call("c2", "teleport"), call("c3", "read_secrets")],
        invalid_tool_calls=[
            {"type": "invalid_tool_call", "id": "c4", "name": "lookup", "args": '{"city": ', "error": None}
        ],
    )
    app, _ = agent_graph(node, calls, AIMessage("done"))
    state = await app.ainvoke({"messages": [HumanMessage("Weather?")]})

    answers = tool_messages(state["messages"])
    assert [(m.tool_call_id, m.status) for m in answers] == [
        ("c1", "success"), ("c2", "error"), ("c3", "error"), ("c4", "error"),
    ]  # fmt: skip
    assert counted.failed(UNKNOWN_TOOL_LABEL, "unknown_tool") == (2, 2)  # never a name the model made up
    assert counted.failed("lookup", "invalid_parameters") == (1, 1)
    lookup = counted.life("lookup")  # engine.stats(), and the console agrees
    assert (lookup.calls, lookup.successes, lookup.failures) == (2, 1, 1)
    assert counted.life(UNKNOWN_TOOL_LABEL).failures == 2
    counted.not_run("c2", "unknown_tool")
    counted.not_run("c3", "unknown_tool")
    counted.not_run("c4", "invalid_parameters")
    counted.close()


async def test_the_node_runs_only_its_own_tools_even_when_the_engine_guards_more() -> None:
    engine = await new_engine(ToolManifest(id="lookup"))
    secrets: list[dict[str, Any]] = []

    async def read_secrets(**args: Any) -> str:
        secrets.append(args)
        return "the keys"

    engine.register("read_secrets", read_secrets)
    node = TripwireToolNode(Tools().all()[:1], engine=engine)
    result = await node.ainvoke(
        [AIMessage("", tool_calls=[call("s", "read_secrets")])]
    )  # a list in, a list out

    assert secrets == [] and len(result) == 1 and result[0].status == "error"
    assert result[0].content == format_tool_error_for_llm(
        "read_secrets", "unknown_tool", "unknown tool 'read_secrets'; available tools: lookup",
        kind=ErrorKind.UNKNOWN_TOOL,
    )  # fmt: skip


async def test_inputs_take_toolnode_shapes_and_tools_run_under_the_node_config() -> None:
    engine = await new_engine(ToolManifest(id="lookup"))
    node = TripwireToolNode(Tools().all()[:1], engine=engine)
    started: list[tuple[str, Any]] = []

    class Watcher(AsyncCallbackHandler):
        async def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
            started.append((serialized["name"], kwargs.get("tags")))

    config: Any = {"callbacks": [Watcher()], "tags": ["trip"]}
    as_calls = await node.ainvoke([call("x", "lookup", city="Oslo")], config)
    as_state = await node.ainvoke(
        {"messages": [AIMessage("", tool_calls=[call("y", "lookup", city="Rome")])]}, config
    )

    assert [(m.tool_call_id, m.content) for m in as_calls["messages"]] == [("x", "sunny in Oslo")]
    assert [(m.tool_call_id, m.content) for m in as_state["messages"]] == [("y", "sunny in Rome")]
    assert started == [("lookup", ["trip"]), ("lookup", ["trip"])]


async def test_a_content_and_artifact_tool_keeps_its_artifact() -> None:
    engine = await new_engine(ToolManifest(id="search"))

    @tool(response_format="content_and_artifact")
    async def search(query: str) -> tuple[str, dict[str, Any]]:
        """Search, with the raw hits as an artifact."""
        return f"2 hits for {query}", {"hits": [1, 2]}

    node = TripwireToolNode([search], engine=engine)
    (message,) = await node.ainvoke([AIMessage("", tool_calls=[call("q", "search", query="tripwire")])])
    assert (message.tool_call_id, message.content, message.artifact) == (
        "q",
        "2 hits for tripwire",
        {"hits": [1, 2]},
    )


class ScriptedModel(FakeMessagesListChatModel):
    """langchain-core's scripted model, accepting tools as a real one does (it ignores them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # create_react_agent moved to langchain
async def test_create_react_agent_takes_it_for_a_toolnode_and_sends_it_one_call_at_a_time() -> None:
    engine = await new_engine(*manifests())
    calls = AIMessage("", tool_calls=[call("a", "lookup", city="Oslo"), call("b", "broken", code="XYZ")])
    model = ScriptedModel(responses=[calls, AIMessage("done")])
    agent = create_react_agent(model, TripwireToolNode(Tools().all(), engine=engine), version="v2")
    state = await agent.ainvoke({"messages": [HumanMessage("Weather?")]})

    answers = tool_messages(state["messages"])
    assert [(m.tool_call_id, m.status) for m in answers] == [("a", "success"), ("b", "error")]
    assert text(answers[1]).startswith("Tool Execution Failed\nTool: broken\nError Type: ValueError\n")


def sync_graph(node: TripwireToolNode) -> CompiledStateGraph[Any]:
    model = GenericFakeChatModel(
        messages=iter([AIMessage("", tool_calls=[call("s1", "lookup", city="Oslo")]), AIMessage("ok")])
    )
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


async def test_a_synchronous_graph_runs_its_turn_on_the_host_loop_from_a_worker_thread() -> None:
    engine = await new_engine(ToolManifest(id="lookup"))
    app = sync_graph(TripwireToolNode(Tools().all()[:1], engine=engine))
    state = await anyio.to_thread.run_sync(app.invoke, {"messages": [HumanMessage("Weather?")]})
    assert [(m.tool_call_id, m.content) for m in tool_messages(state["messages"])] == [
        ("s1", "sunny in Oslo")
    ]
    assert engine.stats()["lookup"].life.calls == 1  # guarded, not run by ToolNode's own path


async def test_a_synchronous_graph_elsewhere_runs_on_a_loop_of_its_own_unless_the_engine_runs(
    engine_mode: str,
) -> None:
    engine = await new_engine(ToolManifest(id="lookup"))
    app = sync_graph(TripwireToolNode(Tools().all()[:1], engine=engine))
    invoke = asyncio.to_thread(app.invoke, {"messages": [HumanMessage("Weather?")]})  # not an AnyIO thread
    if engine_mode == "started":  # its services live on this loop: the node says where to call it
        with pytest.raises(RuntimeError, match="the engine runs on an event loop"):
            await invoke
        return
    state = await invoke
    assert [(m.tool_call_id, m.content) for m in tool_messages(state["messages"])] == [
        ("s1", "sunny in Oslo")
    ]
    assert engine.stats()["lookup"].life.calls == 1


def test_tools_taking_injected_arguments_are_refused() -> None:
    @tool
    def with_state(city: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Reads the graph state."""
        return city

    engine = make_engine()
    with pytest.raises(TypeError, match="'with_state' takes injected arguments"):
        TripwireToolNode([with_state], engine=engine)
    assert engine.tools == []


def test_a_taken_name_leaves_the_engine_as_it_was() -> None:
    engine = make_engine()
    engine.register("slow", lambda: None)
    with pytest.raises(ValueError, match="'slow' is already registered"):
        TripwireToolNode(Tools().all(), engine=engine)  # lookup, flaky, broken register first
    assert engine.tools == ["slow"]


# --- the README example ---------------------------------------------------------------------------

EXAMPLE = readme_example("### LangGraph")


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(EXAMPLE, "README.md", "exec"), {"__name__": "readme"})  # its own loop, on the real clock
    assert capsys.readouterr().out.splitlines() == [
        "call_1 success 'sunny in Paris'",
        "call_2 error 'Tool Execution Failed\\nTool: weather\\nError Type: ValueError"
        "\\nMessage: Unknown city: Atlantis\\n\\nFix the arguments and call the tool again.'",
    ]


async def test_a_keyed_tool_receives_the_tool_call_id_as_its_key_on_every_attempt() -> None:
    keyed = {"side_effect": "side_effecting", "timeout_ms": 100, "retry_policy": RetryPolicy(max_attempts=3)}
    engine = await new_engine(
        ToolManifest(id="book", idempotency={"key": "idempotency_key"}, **keyed),
        ToolManifest(id="pay", idempotency={"key": "context"}, **keyed),
    )
    booked: list[str] = []
    paid: list[str | None] = []

    @tool
    async def book(flight: str, idempotency_key: str = "") -> str:
        """Book a flight."""
        booked.append(idempotency_key)
        if len(booked) == 1:
            await anyio.sleep_forever()  # a timeout: ambiguous, re-sent under the same key
        return f"booked {flight}"

    @tool
    async def pay(amount: int) -> str:
        """Pay."""
        paid.append(current_key())
        return "paid"

    node = TripwireToolNode([book, pay], engine=engine)
    calls = AIMessage("", tool_calls=[call("tc_1", "book", flight="AF1"), call("tc_2", "pay", amount=5)])
    app, _ = agent_graph(node, calls, AIMessage("Booked and paid."))
    state = await app.ainvoke({"messages": [HumanMessage("Book AF1")]})
    assert [text(m) for m in tool_messages(state["messages"])] == ["booked AF1", "paid"]
    assert booked == ["tc_1", "tc_1"]
    assert paid == ["tc_2"]
