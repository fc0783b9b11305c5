"""OpenAI Agents SDK under tripwire: :func:`guard_tool` and :func:`guard_tools` guard ``FunctionTool``s.

Needs the ``[openai-agents]`` extra (``pip install 'tripwire[openai-agents]'``, openai-agents ≥ 0.24);
import it by name (``from engine.adapters.openai_agents import guard_tools``): ``import engine``
never imports the SDK. The SDK runs on asyncio only, and so does this adapter.

``guard_tools([...], engine)`` takes ``FunctionTool``s (or plain functions, which the SDK's own
``function_tool`` turns into ones) and returns guarded copies to give the ``Agent``. Each tool is
registered in the engine under its name, so its manifest (timeout, retries, breaker, alternatives,
secret fields) applies, and every invocation the ``Runner`` makes is ONE guarded call
(:meth:`engine.Engine.try_call`) whose guarded function is the tool's own invoker (the SDK's
argument validation, context injection, sync tools in a thread), with the SDK's failure text
turned off so that a failure reaches the engine, which retries, times out and trips breakers.

A call that still fails raises :class:`ToolCallFailed` into the SDK's own failure hook (the
guarded tool's ``failure_error_function``), which gives the model the seed-003 text — the text
:class:`engine.ToolCallExecutor` answers an LLM with (:func:`engine.llm.failure_text`): redacted by
the engine's policy and the manifest's ``secret_fields``, capped, with guidance and any free
alternative — and the run goes on. Arguments the model wrote as broken JSON never reach the tool:
the engine refuses the call before any attempt (:meth:`engine.Engine.refuse`: counted and announced
as any refused call is) and the model gets the same text, kind ``invalid_parameters``; so do
arguments the tool's schema refuses (the SDK's ``ModelBehaviorError`` inside the call, a permanent
failed attempt: not retried nor counted by the breaker).

Each turn the SDK asks every tool whether it is enabled (``is_enabled``): a guarded tool is
enabled only while its breaker admits a call (:meth:`engine.CircuitBreaker.would_admit`, the
test of :meth:`engine.Engine.available_tools`) and the tool's own ``is_enabled`` says yes — a tool
whose breaker is open is not offered to the model on the next turn, and is offered again once a
probe is due. A tool retired by :meth:`engine.Engine.unregister` is not offered either.

A tool whose manifest sets ``idempotency`` (a side-effecting tool) is keyed by the SDK's tool-call
id (``ToolContext.tool_call_id``, the model's): every attempt sends the same key — as the keyed
argument, or through :func:`engine.idempotency_key` — so a re-send after a timeout is safe.

A guarded tool runs only through its ``FunctionTool`` (a direct ``engine.call`` of it is refused:
there is no run context to give it). When the engine routes a failing call to an alternative of
the tool's manifest, the alternative must be a guarded tool too; it gets the same arguments and
the same run context.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import Any, Final

from agents import FunctionTool, RunContextWrapper, Tool, function_tool
from agents.agent import AgentBase
from agents.exceptions import ModelBehaviorError
from agents.tool import set_function_tool_failure_error_function, with_function_tool_failure_error_handler
from agents.tool_context import ToolContext
from agents.tracing import SpanError, get_current_span
from anyio import current_time

from engine.call import CallContext
from engine.engine import TOOL_ID, Engine
from engine.errors import ToolError, TripwireError
from engine.kinds import ErrorKind
from engine.llm import DEFAULT_MAX_ERROR_CHARS, MIN_ERROR_CHARS, failure_text
from engine.llm.parsing import parse_arguments

__all__ = ["ToolCallFailed", "guard_tool", "guard_tools"]

log = logging.getLogger("tripwire.openai_agents")

_IsEnabled = bool | Callable[[RunContextWrapper[Any], AgentBase[Any]], Awaitable[bool] | bool]
"""A ``FunctionTool.is_enabled``: a flag, or a function of the run context and the agent."""

_SPAN_MESSAGE: Final = "Error running tool (non-fatal)"
"""What the SDK's own handled-error reporter calls a failed call that the model was told about."""

_NOT_JSON: Final = "the model's arguments are not a JSON object: not run"
"""Why a call whose arguments do not parse is refused (``CallFailed.reason``)."""

_CURRENT: ContextVar[tuple[ToolContext[Any], str, str, dict[str, Any]]] = ContextVar(
    "tripwire_openai_agents_call"
)
"""The invocation in progress: the SDK's tool context, the tool's name, its JSON arguments and those
parsed. The engine awaits an async tool in the caller's task (retries too), so the relay finds them here."""


class ToolCallFailed(TripwireError):
    """A guarded tool's invocation failed: what it raises into the SDK's failure hook.

    ``text`` is what the model receives (:func:`engine.llm.failure_text`: the seed-003 block,
    redacted, with guidance), also this exception's message; ``error`` is the engine's
    :class:`engine.ToolError` (also the ``__cause__`` when the engine ran the call). With the SDK's
    failure hook turned off (``failure_error_function=None``), the run ends with it.
    """

    def __init__(self, text: str, error: ToolError) -> None:
        super().__init__(text)
        self.text = text
        self.error = error


class _Relay:
    """The function the engine guards for one tool: the tool's own invoker, with the SDK's failure
    text turned off so that a failure is an exception the engine sees, retries and counts."""

    __slots__ = ("inner", "name")

    def __init__(self, tool: FunctionTool) -> None:
        self.name = tool.name
        self.inner = dataclasses.replace(tool)
        set_function_tool_failure_error_function(self.inner, None)  # raise: the engine decides

    async def __call__(self, **arguments: Any) -> Any:
        try:
            ctx, name, raw, parsed = _CURRENT.get()
        except LookupError:
            raise ToolError(
                ErrorKind.NOT_PERMITTED,
                f"tool {self.name!r} runs through its guarded Agents SDK FunctionTool, not directly",
                tool_id=self.name,
            ) from None
        if name != self.name or arguments != parsed:  # an alternative, or with an idempotency key
            raw = _json(arguments)
        try:
            return await self.inner.on_invoke_tool(ctx, raw)
        except ModelBehaviorError as exc:  # the tool's schema refused the arguments: the model's fault
            raise ToolError(ErrorKind.INVALID_PARAMETERS, str(exc), tool_id=self.name) from exc


class _Invoker:
    """The guarded tool's ``on_invoke_tool`` (wrapped in the SDK's failure handling): one guarded
    call of the engine; a failure raised as :class:`ToolCallFailed` with the seed-003 text."""

    __slots__ = ("engine", "max_chars", "name")

    def __init__(self, engine: Engine, name: str, max_chars: int) -> None:
        self.engine = engine
        self.name = name
        self.max_chars = max_chars

    async def __call__(self, ctx: ToolContext[Any], input: str) -> Any:
        name = self.name
        arguments, _, problem = parse_arguments(input, "arguments")
        if arguments is None:  # broken JSON: refused before any attempt, as the LLM executor refuses it
            assert problem is not None
            refused = self.engine.refuse(name, ErrorKind.INVALID_PARAMETERS, problem, _NOT_JSON).error
            assert refused is not None
            raise ToolCallFailed(failure_text(self.engine, name, refused, max_chars=self.max_chars), refused)
        token = _CURRENT.set((ctx, name, input, arguments))
        runtime = self.engine.runtime
        # The SDK's tool-call id (the model's) keys a keyed tool's call: re-running the same model
        # response re-sends the same key.
        call = CallContext(runtime.new_call_id(), idempotency_key=ctx.tool_call_id or None)
        try:
            result = await runtime.execute(name, arguments, call)
        finally:
            _CURRENT.reset(token)
        error = result.error
        if error is None or result.partial:
            return result.value
        text = failure_text(
            self.engine,
            name,
            error,
            arguments=arguments,
            served_by=result.served_by,
            max_chars=self.max_chars,
        )
        raise ToolCallFailed(text, error) from error


class _Answer:
    """The guarded tool's ``failure_error_function``: the text the SDK's failure hook gives the model."""

    __slots__ = ("engine", "max_chars", "name")

    def __init__(self, engine: Engine, name: str, max_chars: int) -> None:
        self.engine = engine
        self.name = name
        self.max_chars = max_chars

    def __call__(self, ctx: RunContextWrapper[Any], error: Exception) -> str:
        if isinstance(error, ToolCallFailed):
            return error.text
        # Nothing else leaves the invoker but an engine bug: as the LLM executor, the model is told.
        log.error("the engine failed while running a call of %s", self.name, exc_info=error)
        message = f"the engine failed while running this call: {type(error).__name__}: {error}"
        crash = ToolError(ErrorKind.INTERNAL_ERROR, message, tool_id=self.name, original_error=error)
        return failure_text(self.engine, self.name, crash, max_chars=self.max_chars)


class _Enabled:
    """The guarded tool's ``is_enabled``: its breaker admits a call now, and the tool's own says so."""

    __slots__ = ("engine", "name", "own")

    def __init__(self, engine: Engine, name: str, own: _IsEnabled) -> None:
        self.engine = engine
        self.name = name
        self.own = own

    def __call__(self, run_context: RunContextWrapper[Any], agent: AgentBase[Any]) -> Awaitable[bool] | bool:
        engine = self.engine
        if self.name not in engine.tool_ids or not engine.breaker(self.name).would_admit(current_time()):
            return False
        own = self.own
        if isinstance(own, bool):
            return own
        return own(run_context, agent)  # the SDK awaits it if it must


def _reported(tool: FunctionTool, error: Exception, input_json: str) -> None:
    """The SDK's handled-error report, for a failure the model was told about: an error on the
    current span (the model's text: already redacted); the engine's events hold the details."""
    span = get_current_span()
    if span is not None:
        span.set_error(SpanError(message=_SPAN_MESSAGE, data={"tool_name": tool.name, "error": str(error)}))
    log.debug("tool %s failed; the model was told: %s", tool.name, error)


def _json(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, default=str)


def guard_tool(
    tool: FunctionTool | Callable[..., Any], engine: Engine, *, max_error_chars: int = DEFAULT_MAX_ERROR_CHARS
) -> FunctionTool:
    """A copy of ``tool`` whose every invocation is a guarded call of ``engine``; give it to the ``Agent``.

    ``tool`` is a ``FunctionTool`` or a function (made one by the SDK's ``function_tool``). It is
    registered in the engine under the tool's name (a name the engine already has is refused).
    ``max_error_chars`` caps the failure text the model receives.
    The copy keeps everything else of the tool: schema, guardrails, approval, the SDK's
    ``timeout_seconds`` (over all of a call's attempts; the manifest's timeout bounds each one).
    """
    [guarded] = _guarded([tool], engine, max_error_chars)
    return guarded


def guard_tools(
    tools: Iterable[FunctionTool | Callable[..., Any]],
    engine: Engine,
    *,
    max_error_chars: int = DEFAULT_MAX_ERROR_CHARS,
) -> list[Tool]:
    """:func:`guard_tool` for each tool, in order: the ``tools`` of an ``Agent``. Nothing is
    registered unless every tool can be."""
    return list(_guarded(tools, engine, max_error_chars))


def _guarded(
    tools: Iterable[FunctionTool | Callable[..., Any]], engine: Engine, max_chars: int
) -> list[FunctionTool]:
    as_tools = [tool if isinstance(tool, FunctionTool) else function_tool(tool) for tool in tools]
    names = [tool.name for tool in as_tools]
    for name in names:
        if name in engine.tool_ids:
            raise ValueError(f"tool {name!r} is already registered in the engine: rename one of them")
        if names.count(name) > 1:
            raise ValueError(f"two tools are named {name!r}: rename one of them")
        if not TOOL_ID.match(name):
            raise ValueError(f"tool name {name!r} must match {TOOL_ID.pattern} to be guarded")
    if max_chars < MIN_ERROR_CHARS:
        raise ValueError(f"max_error_chars must be at least {MIN_ERROR_CHARS}, got {max_chars}")
    guarded: list[FunctionTool] = []
    for tool in as_tools:
        name = tool.name
        engine.register(name, _Relay(tool))
        invoker = with_function_tool_failure_error_handler(_Invoker(engine, name, max_chars), _reported)
        enabled = _Enabled(engine, name, tool.is_enabled)
        copy = dataclasses.replace(tool, on_invoke_tool=invoker, is_enabled=enabled)
        guarded.append(set_function_tool_failure_error_function(copy, _Answer(engine, name, max_chars)))
    return guarded
