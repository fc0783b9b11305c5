"""LangGraph adapter: :class:`TripwireToolNode`, a drop-in for LangGraph's ``ToolNode``.

The tool calls of the last AI message run as ONE tripwire turn (through
:class:`~engine.llm.ToolCallExecutor`): each langchain tool is registered in the engine under its
name, so manifests, retries, timeouts, breakers and the turn's deadline apply, and every call id
gets exactly one ``ToolMessage``, in the calls' order — a failed one with ``status="error"`` and
the seed-003 text — whatever happens (the missing tool messages of langgraph#6486). Calls the
model could not even write (``AIMessage.invalid_tool_calls``) are answered too, after the others.

Needs the ``[langgraph]`` extra (``pip install 'tripwire[langgraph]'``: langgraph, langchain-core).
Import it by name; ``import engine`` never loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
import anyio.from_thread
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import msg_content_output
from pydantic import BaseModel

from engine.llm import (
    DEFAULT_MAX_ERROR_CHARS,
    LLMToolCall,
    ToolBatch,
    ToolCallExecutor,
    ToolErrorRegistry,
    parse_openai_tool_calls,
)

if TYPE_CHECKING:
    from engine import Engine

__all__ = ["TripwireToolNode"]

_Shape = Literal["list", "dict", "tool_calls"]
"""How the node's input came (as ``ToolNode`` names it): the output takes the same shape."""

_Content = str | list[str | dict[Any, Any]]
"""A ``ToolMessage``'s content."""

_CONFIG: ContextVar[RunnableConfig | None] = ContextVar("tripwire_langgraph_config", default=None)
"""The node run's config, for the tools it calls (callbacks, tags): the engine passes only arguments."""

_ARTIFACT_CALL_ID = "tripwire"
"""The id a content-and-artifact tool is invoked with: only a tool call gets the artifact back."""


class _GuardedTool:
    """A langchain tool as the engine calls it: keyword arguments in, through the tool's own
    ``ainvoke`` (its schema validation, its callbacks), under the node run's config."""

    __slots__ = ("artifact", "tool")

    def __init__(self, tool: BaseTool) -> None:
        self.tool = tool
        self.artifact = tool.response_format == "content_and_artifact"

    async def __call__(self, **arguments: Any) -> Any:
        tool = self.tool
        if self.artifact:  # its ToolMessage carries the artifact; the node re-addresses it
            call = {"type": "tool_call", "id": _ARTIFACT_CALL_ID, "name": tool.name, "args": arguments}
            return await tool.ainvoke(call, _CONFIG.get())
        return await tool.ainvoke(arguments, _CONFIG.get())


class _Offered(Collection[str]):
    """The node's tools the engine still has: what a call may name (a live view)."""

    __slots__ = ("engine_tools", "node_tools")

    def __init__(self, node_tools: Collection[str], engine_tools: Collection[str]) -> None:
        self.node_tools = node_tools
        self.engine_tools = engine_tools

    def __contains__(self, name: object) -> bool:
        return name in self.node_tools and name in self.engine_tools

    def __iter__(self) -> Iterator[str]:
        return (name for name in self.node_tools if name in self.engine_tools)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class TripwireToolNode(ToolNode):
    """``ToolNode`` whose tool calls run as one tripwire turn, with one ``ToolMessage`` per call id.

    Built like ``ToolNode`` — a list of langchain tools or plain callables, ``name``, ``tags``,
    ``messages_key`` — plus the ``engine`` that guards them: each tool is registered in it under
    its name (manifests apply by name; a name already registered is refused). It takes the same
    inputs (a state with ``messages``, a list of messages, a list of tool calls, a ``Send`` of one)
    and answers in the same shape, invoked asynchronously (``ainvoke``/``astream``) or
    synchronously. ``deadline_s``, ``secret_fields``, ``max_error_chars`` and ``registry`` are
    :class:`~engine.llm.ToolCallExecutor`'s. Tool failures never raise: they are the model's to read.

    Unlike ``ToolNode``: tools taking injected arguments (``InjectedState``, ``InjectedStore``,
    ``ToolRuntime``, an injected tool call id) are refused, and so are ``handle_tool_errors`` and
    ``wrap_tool_call`` — the engine's policies and error handler take their place; a tool's
    ``interrupt()`` does not reach the graph (it reads as the tool's failure).
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        engine: Engine,
        name: str = "tools",
        tags: list[str] | None = None,
        messages_key: str = "messages",
        deadline_s: float | None = 120.0,
        secret_fields: Iterable[str] = (),
        max_error_chars: int = DEFAULT_MAX_ERROR_CHARS,
        registry: ToolErrorRegistry | None = None,
    ) -> None:
        super().__init__(tools, name=name, tags=tags, messages_key=messages_key)
        for tool_name, injected in self._injected_args.items():
            if injected.all_injected_keys or injected.state or injected.store or injected.runtime:
                raise TypeError(
                    f"tool {tool_name!r} takes injected arguments, which TripwireToolNode does not pass"
                )
        self.engine = engine
        """The engine guarding the tools."""
        self.executor = ToolCallExecutor(
            engine, tools=_Offered(self.tools_by_name.keys(), engine.tool_ids), deadline_s=deadline_s,
            secret_fields=secret_fields, max_error_chars=max_error_chars, registry=registry,
        )  # fmt: skip
        """Runs each AI message's calls; its ``registry`` counts the failures."""
        registered: list[str] = []
        try:
            for tool in self.tools_by_name.values():
                engine.register(tool.name, _GuardedTool(tool))
                registered.append(tool.name)
        except ValueError:  # a name taken or not a valid tool id: leave the engine as it was
            for tool_name in registered:
                engine.unregister(tool_name)
            raise

    async def _afunc(  # type: ignore[override]  # no runtime: the node needs none, in a graph or not
        self, input: list[AnyMessage] | dict[str, Any] | BaseModel, config: RunnableConfig
    ) -> Any:
        calls, shape = self._tool_calls(input)
        return self._answer(await self._run(calls, config), shape)

    def _func(  # type: ignore[override]  # as _afunc
        self, input: list[AnyMessage] | dict[str, Any] | BaseModel, config: RunnableConfig
    ) -> Any:
        calls, shape = self._tool_calls(input)
        return self._answer(self._run_blocking(calls, config), shape)

    async def _run(self, calls: list[LLMToolCall], config: RunnableConfig) -> ToolBatch:
        child: RunnableConfig = {**config}
        child.pop("run_id", None)  # the node's run: each tool starts a run of its own
        token = _CONFIG.set(child)  # the turn's calls start from here and inherit it
        try:
            return await self.executor.run(calls)
        finally:
            _CONFIG.reset(token)

    def _run_blocking(self, calls: list[LLMToolCall], config: RunnableConfig) -> ToolBatch:
        """The turn, from synchronous code: on the host loop from one of its AnyIO worker threads,
        else on a loop of its own — unless the engine runs on another loop already."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("TripwireToolNode invoked synchronously on a running event loop: use ainvoke")
        try:
            return anyio.from_thread.run(self._run, calls, config)
        except anyio.NoEventLoopError:  # not an AnyIO worker thread: no host loop to go back to
            pass
        if self.engine.timeouts.running:
            raise RuntimeError(
                "the engine runs on an event loop (async with engine): invoke this node with ainvoke "
                "there, or synchronously from one of its worker threads (anyio.to_thread.run_sync)"
            )
        # asyncio.run, not anyio.run: a context copied from an AnyIO task still says "asyncio" to
        # anyio.run's check, though no loop runs in this thread
        return asyncio.run(self._run(calls, config))

    def _tool_calls(
        self, input: list[AnyMessage] | dict[str, Any] | BaseModel
    ) -> tuple[list[LLMToolCall], _Shape]:
        """The calls to answer and the input's shape, read as ``ToolNode`` reads them — and the
        calls the model wrote unparseably (``invalid_tool_calls``, which ``ToolNode`` skips)."""
        messages: Any
        shape: _Shape
        if isinstance(input, list):
            last = input[-1] if input else None
            if isinstance(last, dict) and last.get("type") == "tool_call":
                return _calls(input), "tool_calls"
            messages, shape = input, "list"
        elif isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
            return _calls([input["tool_call"]]), "tool_calls"  # one call, sent on its own
        elif isinstance(input, dict):
            messages, shape = input.get(self._messages_key), "dict"
        else:
            messages, shape = getattr(input, self._messages_key, None), "dict"
        if not messages:
            raise ValueError("No message found in input")
        message = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if message is None:
            raise ValueError("No AIMessage found in input")
        calls = _calls(message.tool_calls)
        if message.invalid_tool_calls:
            start = len(calls)
            calls += [_invalid_call(call, start + i) for i, call in enumerate(message.invalid_tool_calls)]
        return calls, shape

    def _answer(self, batch: ToolBatch, shape: _Shape) -> Any:
        """One ``ToolMessage`` per call, in order, shaped as the input was."""
        outcomes = batch.turn.outcomes if batch.turn is not None else {}
        messages: list[ToolMessage] = []
        append = messages.append
        for item in batch.items:
            if item.is_error:
                append(
                    ToolMessage(item.content, name=item.tool_name, tool_call_id=item.call_id, status="error")
                )
                continue
            value = outcomes[item.call_id].value
            if isinstance(value, ToolMessage):  # a content-and-artifact tool's, invoked as a tool call
                append(
                    ToolMessage(
                        _content(value.content), artifact=value.artifact, name=item.tool_name,
                        tool_call_id=item.call_id, status=value.status,
                    )
                )  # fmt: skip
                continue
            # The executor's text (JSON but for strings), except that content blocks stay a list
            content = _content(value) if type(value) is list else item.content
            append(ToolMessage(content, name=item.tool_name, tool_call_id=item.call_id))
        return messages if shape == "list" else {self._messages_key: messages}


def _content(value: Any) -> _Content:
    """A tool's value as ``ToolNode`` makes it a message's content (content blocks kept, else JSON)."""
    return cast("_Content", msg_content_output(value))


def _call_id(call: Any, index: int) -> str:
    call_id = call.get("id")
    if not call_id:
        raise ValueError(f"tool call #{index} has no id: it cannot be answered")
    return str(call_id)


def _calls(tool_calls: Sequence[Any]) -> list[LLMToolCall]:
    """langchain ``ToolCall``s (``{"name", "args", "id"}``) as the executor takes them."""
    calls: list[LLMToolCall] = []
    for index, call in enumerate(tool_calls):
        call_id, name, args = call.get("id"), call.get("name"), call.get("args")
        if type(call_id) is str and call_id and type(name) is str and type(args) is dict:  # as a rule
            calls.append(LLMToolCall(call_id, name, args))
        elif args is None or isinstance(args, dict):
            calls.append(LLMToolCall(_call_id(call, index), str(name or ""), args or {}))
        else:
            problem = "arguments must be a JSON object"
            calls.append(LLMToolCall(_call_id(call, index), str(name or ""), None, None, problem))
    return calls


def _invalid_call(call: Any, index: int) -> LLMToolCall:
    """An ``InvalidToolCall``: answered as the executor answers arguments that do not parse."""
    call_id, name, raw = _call_id(call, index), str(call.get("name") or ""), call.get("args")
    openai = {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw or ""}}
    problem = parse_openai_tool_calls([openai])[0].problem
    if problem is None:  # it parses here, yet the provider's parser refused it: say why it did
        problem = str(call.get("error") or "the tool call could not be parsed")
    return LLMToolCall(call_id, name, None, raw, problem)
