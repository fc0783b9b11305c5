"""MCP tools under tripwire (issue 16 §1), against the real ``mcp`` SDK: a real server subprocess over
stdio (``mcp_server.py``, built with the SDK's ``MCPServer``), calls through the engine.

The server is a real process, so these tests run on real clocks (a virtual clock would jump past
every deadline while the loop waits on the server's pipes) and bound every wait. One server per
module and backend, shared by the tests (its start costs half a second), except where a test kills
it; each test builds its own engine with ``new_engine`` (not started and started) and keys its
server-side state with a fresh id.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.types import CallToolResult, ToolListChangedNotification

from engine import (
    BreakerConfig,
    BreakerState,
    CallStatus,
    ErrorClass,
    ErrorKind,
    RetryPolicy,
    SideEffect,
    ToolCall,
    ToolCallExecutor,
    ToolManifest,
    Turn,
)
from engine.adapters.mcp import MCPNotSent, MCPToolError, MCPToolset, tripwire_name
from engine.engine import Engine
from tests.engine.conftest import new_engine, recorded
from tests.polling import eventually
from tests.readme_examples import readme_example

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("mcp_server.py")
FAST = RetryPolicy(initial_delay_ms=1, max_delay_ms=2, max_attempts=3, max_total_time_ms=10_000)
ONCE = RetryPolicy(max_attempts=1)
TOOLS = {
    "airport",
    "book",
    "booked",
    "crawl",
    "die",
    "echo",
    "flaky",
    "grow",
    "hang",
    "received",
    "rpc_error",
    "shrink",
}


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real clocks, module-wide (so the server fixture can span the module's tests)."""
    backend: str = request.param
    return backend


class Connection:
    """A client session to one server process; its messages go to whichever toolset is current."""

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.handler: MessageHandlerFnT | None = None

    async def dispatch(self, message: IncomingMessage) -> None:
        if self.handler is not None:
            await self.handler(message)

    @property
    def live(self) -> ClientSession:
        assert self.session is not None
        return self.session

    async def received(self, key: str) -> int:
        """How many requests with ``key`` reached the server (asked directly, not through tripwire)."""
        result = await self.live.call_tool("received", {"key": key})
        return int(result.structured_content["result"])  # type: ignore[index]


@asynccontextmanager
async def connect() -> AsyncIterator[Connection]:
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)], cwd=str(SERVER.parent))
    connection = Connection()
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, message_handler=connection.dispatch) as session,
        ):
            with anyio.fail_after(20):  # start-up, bounded
                await session.initialize()
            connection.session = session
            yield connection


@pytest.fixture(scope="module")
async def server(anyio_backend: str) -> AsyncIterator[Connection]:
    async with connect() as connection:
        yield connection


@asynccontextmanager
async def mcp_tools(connection: Connection, engine: Engine, **options: Any) -> AsyncIterator[MCPToolset]:
    toolset = MCPToolset(engine, prefix="fl.", **options)
    connection.handler = toolset.message_handler
    try:
        async with toolset.attach(connection.live):
            yield toolset
    finally:
        connection.handler = None


def key() -> str:
    return uuid.uuid4().hex[:12]


# --- registration ---------------------------------------------------------------------------


async def test_every_tool_is_registered_under_its_prefix_and_retired_on_exit(server: Connection) -> None:
    engine = await new_engine()
    async with mcp_tools(server, engine) as toolset:
        assert toolset.names == {f"fl.{name}": name for name in TOOLS}
        assert set(engine.tools) == {f"fl.{name}" for name in TOOLS}
        assert "text" in toolset.tools["fl.echo"].input_schema["properties"]
        assert await engine.call("fl.echo", text="hello") == "hello"
    assert engine.tools == []
    result = await engine.try_call("fl.echo", text="hello")
    assert result.error is not None and result.error.kind is ErrorKind.UNKNOWN_TOOL


async def test_a_call_returns_the_text_the_structured_content_or_the_whole_result(server: Connection) -> None:
    engine = await new_engine()
    async with mcp_tools(server, engine, returns="structured"):
        assert await engine.call("fl.received", key=key()) == {"result": 0}
    async with mcp_tools(server, engine, returns="result") as toolset:
        result = await engine.call("fl.echo", text="raw")
        assert isinstance(result, CallToolResult) and result.structured_content == {"result": "raw"}
        toolset.close()
        assert engine.tools == []


def test_names_tripwire_cannot_take_are_made_valid() -> None:
    assert tripwire_name("fl.", "search") == "fl.search"
    assert tripwire_name("", "flights/search now") == "flights_search_now"
    assert tripwire_name("", "_private") == "private"
    assert tripwire_name("", "日本") == "tool"


# --- errors ---------------------------------------------------------------------------------


async def test_an_is_error_answer_is_retried_until_the_tool_succeeds(server: Connection) -> None:
    engine = await new_engine(ToolManifest(id="fl.flaky", retry_policy=FAST))
    events = recorded(engine)
    k = key()
    async with mcp_tools(server, engine):
        result = await engine.try_call("fl.flaky", key=k, failures=2)
    assert result.ok and result.value == "ok after 3" and result.attempts == 3
    failures = events.of("ToolError")
    assert [(e.kind, e.classification, e.error) for e in failures] == 2 * [
        (ErrorKind.SERVICE_UNAVAILABLE, ErrorClass.TRANSIENT, "HTTP 503: Service Unavailable")
    ]
    assert {e.error_type for e in failures} == {"MCPToolError"}
    assert await server.received(k) == 3


async def test_is_error_text_is_classified_like_any_tool_error(server: Connection) -> None:
    engine = await new_engine(ToolManifest(id="fl.airport", retry_policy=FAST))
    async with mcp_tools(server, engine):
        result = await engine.try_call("fl.airport", code="XYZ")
        assert await engine.call("fl.airport", code="CDG") == "CDG: open"
    error = result.error
    assert error is not None and result.attempts == 1  # permanent: never retried
    assert (error.kind, error.message, error.executed) == (
        ErrorKind.INVALID_PARAMETERS,
        "Invalid airport code: XYZ",
        False,
    )
    assert isinstance(error.original_error, MCPToolError)
    assert error.original_error.result.is_error


@pytest.mark.parametrize(
    ("code", "kind", "attempts"),
    [
        (-32602, ErrorKind.INVALID_PARAMETERS, 1),  # invalid params: the caller must fix them
        (-32601, ErrorKind.UNKNOWN_TOOL, 1),  # method not found
        (-32603, ErrorKind.EXECUTION_ERROR, 3),  # internal error: transient, retried
        (-32001, ErrorKind.TIMEOUT, 3),  # the SDK's request timeout
    ],
)
async def test_json_rpc_errors_map_by_code(
    server: Connection, code: int, kind: ErrorKind, attempts: int
) -> None:
    engine = await new_engine(ToolManifest(id="fl.rpc_error", retry_policy=FAST))
    async with mcp_tools(server, engine):
        result = await engine.try_call("fl.rpc_error", code=code)
    assert result.error is not None
    assert (result.error.kind, result.attempts) == (kind, attempts)
    assert result.error.classification is not None
    assert result.error.classification.reason == f"JSON-RPC error code {code} means {kind}"


async def test_a_breaker_opens_after_repeated_failures_and_then_sends_nothing(server: Connection) -> None:
    engine = await new_engine(
        ToolManifest(id="fl.flaky", retry_policy=ONCE, circuit_breaker=BreakerConfig(failure_threshold=3))
    )
    k = key()
    async with mcp_tools(server, engine):
        for _ in range(3):
            failed = await engine.try_call("fl.flaky", key=k, failures=100)
            assert failed.error is not None and failed.error.kind is ErrorKind.SERVICE_UNAVAILABLE
        assert engine.state("fl.flaky") is BreakerState.OPEN
        assert "fl.flaky" not in engine.available_tools()
        rejected = await engine.try_call("fl.flaky", key=k, failures=100)
        assert rejected.error is not None and rejected.error.kind is ErrorKind.CIRCUIT_OPEN
        assert rejected.attempts == 0
        assert await server.received(k) == 3  # the rejected call never reached the server


# --- turns and LLM tool calls ---------------------------------------------------------------


async def test_a_turn_cascades_when_an_mcp_tool_fails_for_good(server: Connection) -> None:
    engine = await new_engine(ToolManifest(id="fl.airport", retry_policy=FAST))
    turn = Turn([
        ToolCall("where", "fl.airport", {"code": "XYZ"}),
        ToolCall("confirm", "fl.echo", {"text": "booked"}, depends_on=["where"], inputs={}),
        ToolCall("note", "fl.echo", {"text": "noted"}, depends_on=["where"], inputs={}, optional=True),
        ToolCall("weather", "fl.echo", {"text": "sunny"}),
    ])  # fmt: skip
    async with mcp_tools(server, engine):
        result = await engine.run_turn(turn)
    statuses = {call_id: outcome.status for call_id, outcome in result.outcomes.items()}
    assert statuses == {
        "where": CallStatus.FAILED,
        "confirm": CallStatus.ESCALATED,
        "note": CallStatus.SKIPPED,
        "weather": CallStatus.SUCCEEDED,
    }
    assert result.outcomes["weather"].value == "sunny"


async def test_the_llm_executor_answers_every_call_id_once(server: Connection) -> None:
    engine = await new_engine(ToolManifest(id="fl.airport", retry_policy=FAST))
    calls = [
        ("call_1", "fl.echo", {"text": "hi"}),
        ("call_2", "fl.airport", {"code": "XYZ"}),
        ("call_3", "fl.nope", {}),
        ("call_4", "fl.airport", {"code": "JFK"}),
    ]
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }
    async with mcp_tools(server, engine):
        answers = await ToolCallExecutor(engine, deadline_s=30).run_openai(message)
    assert [a["tool_call_id"] for a in answers] == ["call_1", "call_2", "call_3", "call_4"]
    assert answers[0]["content"] == "hi" and answers[3]["content"] == "JFK: open"
    assert "Invalid airport code: XYZ" in answers[1]["content"]
    assert answers[1]["content"].startswith(
        "Tool Execution Failed\nTool: fl.airport\nError Type: MCPToolError"
    )


# --- progress and timeouts ------------------------------------------------------------------


async def test_progress_notifications_extend_the_idle_timeout(server: Connection) -> None:
    engine = await new_engine(
        ToolManifest(id="fl.crawl", timeout_ms=5_000, idle_timeout_ms=300, retry_policy=ONCE),
        ToolManifest(id="fl.hang", timeout_ms=5_000, idle_timeout_ms=300, retry_policy=ONCE),
    )
    events = recorded(engine)
    async with mcp_tools(server, engine):
        start = anyio.current_time()
        assert await engine.call("fl.crawl", steps=8, interval=0.05) == "crawled 8"  # 0.4 s > 0.3 s idle
        crawled = anyio.current_time() - start
        start = anyio.current_time()
        silent = await engine.try_call("fl.hang")
        waited = anyio.current_time() - start
    assert crawled >= 0.4
    assert silent.error is not None and silent.error.kind is ErrorKind.TIMEOUT
    assert silent.error.message == "Tool idle timeout: no progress for 0.3s"
    assert 0.3 <= waited < 2.5  # the idle window, far from the 5 s hard cap
    [timed_out] = events.of("ToolTimeout")
    assert (timed_out.tool_id, timed_out.idle_ms) == ("fl.hang", 300)


async def test_a_server_killed_mid_call_is_a_transport_error_and_later_calls_are_not_sent() -> None:
    engine = await new_engine(
        ToolManifest(id="fl.die", side_effect=SideEffect.SIDE_EFFECTING, retry_policy=FAST),
        ToolManifest(id="fl.echo", retry_policy=FAST),
    )
    async with connect() as connection, mcp_tools(connection, engine):
        died = await engine.try_call("fl.die")
        after = await engine.try_call("fl.echo", text="anyone?")
    assert died.error is not None
    # The request reached the server, which may have acted on it: ambiguous, so not sent again.
    assert (died.error.kind, died.error.executed, died.attempts) == (ErrorKind.TRANSPORT_ERROR, True, 1)
    assert after.error is not None and isinstance(after.error.original_error, MCPNotSent)
    # Never sent: transient and unambiguous, so retried (each attempt refused before sending).
    assert (after.error.kind, after.attempts) == (ErrorKind.NETWORK_ERROR, 3)
    assert "not sent" in after.error.message


# --- tools/list_changed ---------------------------------------------------------------------


async def test_list_changed_registers_new_tools_and_retires_vanished_ones(server: Connection) -> None:
    engine = await new_engine()
    k = key()
    added, clash = f"double_{k}", f"double/{k}"  # the second one's name is made the first one's
    forwarded: list[IncomingMessage] = []

    async def handler(message: IncomingMessage) -> None:
        forwarded.append(message)

    async with mcp_tools(server, engine, message_handler=handler) as toolset:
        assert await engine.call("fl.grow", name=added) == f"added {added}"
        await eventually(lambda: f"fl.{added}" in engine.tools, "the added tool registered")
        assert await engine.call(f"fl.{added}", x=21) == "42"
        await engine.call("fl.grow", name=clash)
        await eventually(lambda: f"fl.{added}_2" in engine.tools, "the clashing name registered")
        assert toolset.names[f"fl.{added}_2"] == clash
        await engine.call("fl.shrink", name=added)
        await engine.call("fl.shrink", name=clash)
        await eventually(lambda: not {f"fl.{added}", f"fl.{added}_2"} & set(engine.tools), "both retired")
        gone = await engine.try_call(f"fl.{added}", x=1)
        assert gone.error is not None and gone.error.kind is ErrorKind.UNKNOWN_TOOL
        assert set(toolset.names.values()) == TOOLS
        # The user's handler gets every notification too; the last may follow the re-listing it caused.
        await eventually(
            lambda: sum(isinstance(m, ToolListChangedNotification) for m in forwarded) == 4,
            "all four notifications forwarded",
        )


# --- README -----------------------------------------------------------------------------------

README_EXAMPLE = readme_example("### MCP servers")
"""The example of the README's MCP section, as README shows it (tests/test_readme.py runs it there)."""


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}
    failed: list[BaseException] = []

    def run() -> None:  # a thread of its own: this module's event loop may still be open in this one
        try:
            exec(compile(README_EXAMPLE, "README.md", "exec"), namespace)
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive() and failed == []
    assert capsys.readouterr().out == "CDG-JFK 08:15\n"


# --- idempotency keys -------------------------------------------------------------------------


async def test_a_keyed_tool_sends_the_same_key_in_meta_when_re_sent_after_a_timeout(
    server: Connection,
) -> None:
    manifest = ToolManifest(
        id="fl.book", side_effect=SideEffect.SIDE_EFFECTING, timeout_ms=300, retry_policy=FAST,
        idempotency={"key": "context"},
    )  # fmt: skip
    engine = await new_engine(manifest, ToolManifest(id="fl.booked"))
    k = key()
    async with mcp_tools(server, engine, returns="structured"):
        result = await engine.try_call("fl.book", key=k, hangs=1)
        assert result.ok and result.attempts == 2, result.reason
        received = await engine.call("fl.booked", key=k)
        turn = await engine.run_turn(Turn([ToolCall("b", "fl.book", {"key": k + "t", "hangs": 0})], id="t9"))
        assert turn.outcomes["b"].ok
        in_turn = await engine.call("fl.booked", key=k + "t")
    [sent] = set(received["result"])
    assert len(received["result"]) == 2 and sent, "the server received the same key on both requests"
    assert in_turn == {"result": ["t9:b"]}
