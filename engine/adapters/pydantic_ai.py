"""pydantic-ai under tripwire: :class:`GuardedToolset` guards every tool of a pydantic-ai toolset.

Needs the ``[pydantic-ai]`` extra (``pip install 'tripwire[pydantic-ai]'``, pydantic-ai-slim ≥ 1.0);
import it by name (``from engine.adapters.pydantic_ai import GuardedToolset``): ``import engine``
never imports pydantic-ai.

Wrap any toolset — a ``FunctionToolset``, an MCP server, a prefixed or filtered one — and give the
wrapper to the ``Agent``. Each of its tools is registered in the engine under its own name, so the
tool's manifest (timeout, retries, breaker, alternatives, secret fields) applies, and every call
the model makes is one guarded call (:meth:`engine.Engine.try_call`) whose guarded function is the
wrapped toolset's ``call_tool``. What the model gets back:

- a value (or a partial result): the tool's return, as without tripwire;
- a failure of a kind in ``retry_kinds`` (``invalid_parameters`` by default: the arguments were
  wrong, seed 004's router case): ``ModelRetry`` with the seed-003 text, so the model fixes the
  arguments and calls again (it uses the tool's pydantic-ai retry budget, as any bad call does);
- any other final failure — transient ones the engine already retried, permanent ones, a call
  refused by an open breaker: ``ToolFailed`` with the seed-003 text.
  ``ToolFailed`` is pydantic-ai's channel for a failed call the model sees and adapts to: the
  result is marked ``outcome='failed'`` (not a success whose text happens to describe an error),
  it does not consume the retry budget (the engine has already decided about retrying; an
  exhausted budget would end the whole run with ``UnexpectedModelBehavior``), and the run
  carries on. Raising the engine's ``ToolError`` instead would end the run.

The text is :func:`engine.llm.format_tool_error_for_llm`'s, with the message redacted by the
engine's policy and the tool manifest's ``secret_fields``, as :class:`engine.ToolCallExecutor`
answers an LLM.

pydantic-ai's own signals raised by a tool (``ModelRetry``, ``ToolFailed``, ``CallDeferred``,
``ApprovalRequired``) are the tool's answer, not its failure: never retried, never counted against
the breaker (recorded as permanent: ``invalid_parameters`` for ``ModelRetry``, ``canceled`` —
not run here — for a deferral), and passed on to pydantic-ai unchanged. Except from pydantic-ai's
own MCP toolset (``pydantic_ai.mcp.MCPToolset``, which needs ``fastmcp``): it reports every MCP
error — an ``isError`` result, a JSON-RPC error — as ``ModelRetry`` or ``ToolFailed`` (its
``tool_error_behavior``), so there they are the server's failure, raised as
:class:`MCPErrorResult` and classified as any MCP error result is
(:mod:`engine.adapters.mcp_errors`): an "HTTP 503" is retried, an "Invalid airport code" goes back
to the model as bad arguments.

pydantic-ai validates the model's arguments before it calls a toolset: a call the tool's schema
refuses is answered by pydantic-ai, and refused by the engine as well (:meth:`engine.Engine.refuse`),
so it is counted as any refused call.

Each run step, the toolset leaves out the tools whose breaker does not admit a call
(:meth:`engine.Engine.available_tools`): a tool whose breaker is open is not offered to the
model, and is offered again once the breaker half-opens.

When the engine routes a failing call to an alternative tool of the manifest, the alternative
must be a tool of the same wrapped toolset; it receives the same arguments.

A tool whose manifest sets ``idempotency`` (a side-effecting tool) is keyed by pydantic-ai's
tool-call id (``RunContext.tool_call_id``, the model's): every attempt sends the same key — as the
keyed argument, or through :func:`engine.idempotency_key` — so a re-send after a timeout is safe.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Final
from weakref import WeakKeyDictionary

from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolFailed
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from pydantic_ai.toolsets.abstract import SchemaValidatorProt
from pydantic_core import SchemaValidator, ValidationError

from engine.call import CallContext
from engine.classify import Classification, Rule
from engine.engine import Engine
from engine.errors import ToolError
from engine.kinds import ErrorClass, ErrorKind
from engine.llm import DEFAULT_MAX_ERROR_CHARS, MIN_ERROR_CHARS, failure_text

__all__ = ["DEFAULT_RETRY_KINDS", "GuardedToolset", "MCPErrorResult"]

log = logging.getLogger("tripwire.pydantic_ai")

DEFAULT_RETRY_KINDS: Final = frozenset({ErrorKind.INVALID_PARAMETERS})
"""The failures that become ``ModelRetry``: the model's arguments were wrong and it can fix them."""

_SIGNALS: Final = (ModelRetry, ToolFailed, CallDeferred, ApprovalRequired)

_Call = tuple[AbstractToolset[Any], RunContext[Any], str, ToolsetTool[Any]]
_CURRENT: ContextVar[_Call] = ContextVar("tripwire_pydantic_ai_call")
"""The call in progress: the wrapped toolset, the run context, the tool's name and its ToolsetTool.
The engine awaits a tool in the caller's task (retries too), so the relay finds it here."""

_RELAYS: WeakKeyDictionary[Engine, dict[str, _Relay]] = WeakKeyDictionary()
"""The tools each engine guards for pydantic-ai toolsets, by name: shared by every wrapper of an
engine (a relay holds no toolset, so two wrappers of the same tool name share it safely)."""


class _Relay:
    """The function the engine guards for one tool: the wrapped toolset's ``call_tool``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    async def __call__(self, **tool_args: Any) -> Any:
        try:
            toolset, ctx, name, tool = _CURRENT.get()
        except LookupError:
            raise ToolError(
                ErrorKind.NOT_PERMITTED,
                f"tool {self.name!r} runs through its pydantic-ai toolset (GuardedToolset.call_tool), "
                "not directly",
                tool_id=self.name,
            ) from None
        if name != self.name:  # the engine routed the call to this alternative
            alternative = (await toolset.get_tools(ctx)).get(self.name)
            if alternative is None:
                raise ToolError(
                    ErrorKind.UNKNOWN_TOOL,
                    f"alternative {self.name!r} is not a tool of the toolset that has {name!r}",
                    tool_id=self.name,
                )
            tool = alternative
        try:
            return await toolset.call_tool(self.name, tool_args, ctx, tool)
        except _SIGNALS as signal:
            raise _answered(self.name, signal) from signal


class MCPErrorResult(Exception):
    """An MCP error that pydantic-ai's MCP toolset reported as ``ModelRetry`` or ``ToolFailed``, for
    the engine to classify as any MCP error result (:class:`engine.adapters.mcp_errors.MCPToolError`):
    a plain ``Exception`` whose text — the result's — the classifier's message patterns read, raised
    from the signal, so a JSON-RPC error the signal was raised from decides by its code."""

    def __init__(self, tool: str, text: str) -> None:
        super().__init__(text or f"MCP tool {tool!r} reported an error")
        self.tool = tool


@dataclass
class _MCPErrorsRaised(WrapperToolset[AgentDepsT]):
    """pydantic-ai's MCP toolset, its error answers raised as :class:`MCPErrorResult`."""

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        try:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        except (ModelRetry, ToolFailed) as signal:
            raise MCPErrorResult(name, signal.message) from signal

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[AgentDepsT]], AbstractToolset[AgentDepsT]]
    ) -> AbstractToolset[AgentDepsT]:
        replaced = self.wrapped.visit_and_replace(visitor)
        if isinstance(replaced, _MCPErrorsRaised):  # wrapped again (a GuardedToolset re-made): once is enough
            return replaced
        return replace(self, wrapped=replaced)


def _is_mcp(toolset: AbstractToolset[Any]) -> bool:
    """Is this pydantic-ai's MCP toolset? Never imported here (it needs fastmcp): one exists only
    once its module is loaded."""
    mcp_toolset = getattr(sys.modules.get("pydantic_ai.mcp"), "MCPToolset", None)
    return mcp_toolset is not None and isinstance(toolset, mcp_toolset)


def _mcp_errors_raised(toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
    """A leaf toolset, pydantic-ai's MCP toolset wrapped in :class:`_MCPErrorsRaised`."""
    return _MCPErrorsRaised(toolset) if _is_mcp(toolset) else toolset


def _with_mcp_errors_raised(toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
    """``toolset`` with every MCP toolset within (prefixed, combined…) wrapped; itself if it has none."""
    leaves: list[AbstractToolset[Any]] = []
    toolset.apply(leaves.append)
    return toolset.visit_and_replace(_mcp_errors_raised) if any(map(_is_mcp, leaves)) else toolset


class _RefusalsCounted:
    """A tool's argument validator whose refusals the engine counts: pydantic-ai validates the model's
    arguments before it calls the toolset, so a call the tool's schema refuses would reach no figure.
    The engine refuses it (:meth:`engine.Engine.refuse`); pydantic-ai still answers the model."""

    __slots__ = ("engine", "inner", "name")

    def __init__(self, engine: Engine, name: str, inner: SchemaValidator | SchemaValidatorProt) -> None:
        self.engine = engine
        self.name = name
        self.inner = inner

    def validate_json(
        self, input: str | bytes | bytearray, *, allow_partial: Any = False, **kwargs: Any
    ) -> Any:
        try:
            return self.inner.validate_json(input, allow_partial=allow_partial, **kwargs)
        except ValidationError as refused:
            self._refused(refused, allow_partial)
            raise

    def validate_python(self, input: Any, *, allow_partial: Any = False, **kwargs: Any) -> Any:
        try:
            return self.inner.validate_python(input, allow_partial=allow_partial, **kwargs)
        except ValidationError as refused:
            self._refused(refused, allow_partial)
            raise

    def _refused(self, refused: ValidationError, allow_partial: Any) -> None:
        if allow_partial not in (False, "off"):  # arguments still streaming in: not the model's last word
            return
        problems = "; ".join(
            f"{'.'.join(map(str, problem['loc'])) or 'arguments'}: {problem['msg']}"
            for problem in refused.errors(include_url=False, include_input=False)
        )  # the problems, never the values (they may hold secrets)
        message = f"the tool's schema refuses the arguments: {problems}"
        try:
            self.engine.refuse(self.name, ErrorKind.INVALID_PARAMETERS, message, _SCHEMA_REFUSED)
        except RuntimeError:  # validated off the event loop (no engine time): pydantic-ai's answer stands
            log.warning("a call of %s refused by its schema off the event loop is not counted", self.name)


_SCHEMA_REFUSED: Final = "pydantic-ai refused the model's arguments by the tool's schema: not run"
"""Why a call the tool's schema refuses is refused (``CallFailed.reason``)."""


def _answered(name: str, signal: Exception) -> ToolError:
    """A pydantic-ai signal as the engine records it: permanent, so never retried nor counted."""
    if isinstance(signal, ModelRetry):
        kind, why = ErrorKind.INVALID_PARAMETERS, "the tool asked the model to fix its call (ModelRetry)"
    elif isinstance(signal, ToolFailed):
        kind, why = ErrorKind.EXECUTION_ERROR, "the tool reported a terminal failure (ToolFailed)"
    else:
        kind, why = ErrorKind.CANCELED, f"the tool deferred the call ({type(signal).__name__}): not run here"
    message = getattr(signal, "message", None) or why
    classification = Classification(
        kind, ErrorClass.PERMANENT, False, Rule.TOOL_ERROR, f"pydantic-ai signal: {why}",
        error_type=type(signal).__name__,
    )  # fmt: skip
    return ToolError(kind, message, tool_id=name, original_error=signal, classification=classification)


def _signal_in(error: BaseException) -> BaseException | None:
    """The pydantic-ai signal a tool raised, at the root of the engine's error, or None."""
    link: BaseException | None = error
    while isinstance(link, ToolError):
        link = link.original_error
    return link if isinstance(link, _SIGNALS) else None


@dataclass
class GuardedToolset(WrapperToolset[AgentDepsT]):
    """A pydantic-ai toolset whose every tool call is a guarded call of ``engine``.

    ``GuardedToolset(toolset, engine)``; give it to ``Agent(toolsets=[...])``. Tools are registered
    in the engine by name the first time the toolset lists them (a name the engine already has
    from elsewhere is refused: wrap the toolset in a ``PrefixedToolset``). Failures reach the model
    as the seed-003 text: ``ModelRetry`` for the kinds in ``retry_kinds``, ``ToolFailed`` for the
    rest (see the module's docstring); ``max_error_chars`` caps that text.
    """

    engine: Engine
    retry_kinds: frozenset[ErrorKind] = DEFAULT_RETRY_KINDS
    max_error_chars: int = DEFAULT_MAX_ERROR_CHARS
    _relays: dict[str, _Relay] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_error_chars < MIN_ERROR_CHARS:
            raise ValueError(
                f"max_error_chars must be at least {MIN_ERROR_CHARS}, got {self.max_error_chars}"
            )
        self._relays = _RELAYS.setdefault(self.engine, {})
        # pydantic-ai's MCP toolsets within raise MCP errors for the engine to classify, rather than
        # answer them to the model unretried.
        self.wrapped = _with_mcp_errors_raised(self.wrapped)

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        """The wrapped toolset's tools whose breaker admits a call now (each registered in the engine)."""
        tools = await self.wrapped.get_tools(ctx)
        for name in tools:
            self.guard(name)
        admitted = set(self.engine.available_tools())
        return {
            name: replace(tool, args_validator=_RefusalsCounted(self.engine, name, tool.args_validator))
            for name, tool in tools.items()
            if name in admitted
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        """One guarded call of the wrapped toolset's tool: its value, or ``ModelRetry``/``ToolFailed``."""
        engine = self.engine
        if name not in self._relays or name not in engine.tool_ids:
            self.guard(name)
        token = _CURRENT.set((self.wrapped, ctx, name, tool))
        runtime = engine.runtime
        # pydantic-ai's tool-call id (the model's) keys a keyed tool's call: re-running the same model
        # response re-sends the same key.
        call = CallContext(runtime.new_call_id(), idempotency_key=ctx.tool_call_id or None)
        try:
            result = await runtime.execute(name, tool_args, call)
        finally:
            _CURRENT.reset(token)
        error = result.error
        if error is None or result.partial:
            return result.value
        raise self.for_model(name, tool_args, error, result.served_by) from error

    def guard(self, name: str) -> None:
        """Register tool ``name`` in the engine (once; again after an ``engine.unregister``)."""
        engine = self.engine
        if name in engine.tool_ids:
            if name in self._relays:
                return
            raise ValueError(
                f"tool {name!r} is already registered in the engine by something other than a "
                "GuardedToolset: rename one of them (a pydantic-ai PrefixedToolset adds a prefix)"
            )
        relay = _Relay(name)
        engine.register(name, relay)
        self._relays[name] = relay

    def for_model(
        self, name: str, tool_args: dict[str, Any], error: ToolError, served_by: str | None = None
    ) -> Exception:
        """What a failed call raises to pydantic-ai: the tool's own signal, else ``ModelRetry`` or
        ``ToolFailed`` with the seed-003 text (redacted, capped, with guidance and any alternative)."""
        signal = _signal_in(error)
        if signal is not None:
            assert isinstance(signal, Exception)
            return signal
        text = failure_text(
            self.engine, name, error, arguments=tool_args, served_by=served_by, max_chars=self.max_error_chars
        )
        return ModelRetry(text) if error.kind in self.retry_kinds else ToolFailed(text)
