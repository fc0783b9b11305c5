"""MCP tools as guarded tripwire tools: every tool of an MCP ``ClientSession`` (the ``mcp`` SDK),
registered on an :class:`~engine.Engine` (needs the ``mcp`` extra: ``pip install 'tripwire[mcp]'``).

::

    toolset = MCPToolset(engine, prefix="travel.")
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=toolset.message_handler) as session:
            await session.initialize()
            async with toolset.attach(session):          # lists the tools and registers them
                await engine.call("travel.search_flights", origin="CDG")
            # the tools are retired again here

:class:`MCPToolset` owns the registration. It is an async context manager (``async with
toolset.attach(session)``: registered on entry, retired on exit) and also has the explicit
:meth:`~MCPToolset.refresh` and :meth:`~MCPToolset.close`. Passed as the session's
``message_handler``, it follows ``notifications/tools/list_changed``: tools that appear are
registered, tools that vanish are retired (``engine.unregister``). Manifests apply by the
registered name (the prefix included); a name tripwire cannot take as it is (``/``, spaces, a
leading ``_``) is made one, and :attr:`MCPToolset.names` keeps the mapping.

Every call is a guarded call: timeouts, retries, the breaker and the error handler apply, and
failures are classified as :mod:`engine.adapters.mcp_errors` describes. When the tool's manifest
sets ``idle_timeout_ms``, the call asks the server for progress and each progress notification
pushes the attempt's idle deadline back (never past ``timeout_ms``): MCP's reset-on-progress.
When it sets ``idempotency`` (a side-effecting tool), each request carries the call's key in its
``_meta`` under :data:`IDEMPOTENCY_META_KEY` — the same on every attempt, so the server can
deduplicate a re-send (``key: context`` sends it there only; ``key: <argument>`` in the arguments too).

Nothing in the engine imports this module.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self, cast

import anyio
from mcp import ClientSession
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.types import PaginatedRequestParams, RequestParamsMeta, Tool, ToolListChangedNotification

from engine.adapters.mcp_errors import (
    MCPNotSent,
    MCPToolError,
    connection_closed,
    content_value,
)
from engine.engine import Engine
from engine.manifest import TOOL_ID_PATTERN
from engine.strategies.idempotency import idempotency_key
from engine.strategies.timeout.supervisor import IdleWindow, idle_window

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "MCPNotSent",
    "MCPToolError",
    "MCPToolset",
    "ToolsetChange",
    "tripwire_name",
]

IDEMPOTENCY_META_KEY = "tripwire/idempotency-key"
"""The ``_meta`` key of a ``tools/call`` request that carries the call's idempotency key (a tool whose
manifest has an ``idempotency`` section): the same on every attempt, for the server to deduplicate."""

log = logging.getLogger("tripwire.adapters.mcp")

Returns = Literal["content", "structured", "result"]
"""What a successful call returns: ``content`` (the text, or the content blocks as JSON when not
all are text), ``structured`` (``structuredContent`` when the server sent it, else as ``content``)
or ``result`` (the SDK's ``CallToolResult``)."""

_TOOL_ID = re.compile(TOOL_ID_PATTERN)
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9_.:-]")


def tripwire_name(prefix: str, mcp_name: str) -> str:
    """The tool name tripwire registers for ``mcp_name``: ``prefix`` + the name, with every
    character a tool id cannot hold replaced by ``_`` (and a leading one dropped)."""
    name = prefix + mcp_name
    if _TOOL_ID.match(name):
        return name
    cleaned = _NOT_IN_ID.sub("_", name).lstrip("_.:-")
    return cleaned or "tool"


@dataclass(frozen=True, slots=True)
class ToolsetChange:
    """What one :meth:`MCPToolset.refresh` did, by registered name."""

    added: tuple[str, ...] = ()
    retired: tuple[str, ...] = ()


class _Progress:
    """An MCP progress callback that pushes one attempt's idle window back."""

    __slots__ = ("window",)

    def __init__(self, window: IdleWindow) -> None:
        self.window = window

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.window.push()


class _MCPTool:
    """The function registered for one MCP tool: one ``tools/call`` per attempt."""

    __slots__ = ("mcp_name", "toolset")

    def __init__(self, toolset: MCPToolset, mcp_name: str) -> None:
        self.toolset = toolset
        self.mcp_name = mcp_name

    async def __call__(self, **arguments: Any) -> Any:
        toolset = self.toolset
        session = toolset.session
        if session is None or toolset.lost is not None:
            raise MCPNotSent(self.mcp_name, toolset.lost or "no session attached")
        window = idle_window()  # None unless the manifest sets idle_timeout_ms: no progress asked for
        key = idempotency_key()  # None unless the manifest sets idempotency
        try:
            result = await session.call_tool(
                self.mcp_name, arguments, progress_callback=None if window is None else _Progress(window),
                meta=None if key is None else cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: key}),
            )  # fmt: skip
        except Exception as error:
            if connection_closed(error):  # gone for good: later calls are known never to leave
                toolset.lost = "the connection to the MCP server is closed"
            raise
        if result.is_error:
            raise MCPToolError(self.mcp_name, result)
        returns = toolset.returns
        if returns == "content":
            return content_value(result)
        if returns == "structured":
            structured = result.structured_content
            return content_value(result) if structured is None else structured
        return result


class MCPToolset:
    """The tools of one MCP ``ClientSession``, registered on ``engine`` (see the module docstring).

    ``prefix`` is put before every tool's name; ``returns`` says what a successful call returns
    (:data:`Returns`); ``message_handler`` receives every message the session delivers, after the
    toolset has seen it (the session accepts only one handler).
    """

    def __init__(
        self,
        engine: Engine,
        session: ClientSession | None = None,
        *,
        prefix: str = "",
        returns: Returns = "content",
        message_handler: MessageHandlerFnT | None = None,
    ) -> None:
        self.engine = engine
        self.session = session
        self.prefix = prefix
        self.returns: Returns = returns
        self.lost: str | None = None
        """Why calls can no longer be sent (the connection closed, the toolset was closed), or None."""
        self._forward = message_handler
        self._names: dict[str, str] = {}
        self._tools: dict[str, Tool] = {}
        self._lock = anyio.Lock()
        self._closed = False

    # --- registration ----------------------------------------------------------------------

    @property
    def names(self) -> dict[str, str]:
        """Registered tool name → MCP tool name, for the tools registered now."""
        return dict(self._names)

    @property
    def tools(self) -> dict[str, Tool]:
        """Registered tool name → the MCP ``Tool`` (description, input schema) as last listed."""
        return dict(self._tools)

    def attach(self, session: ClientSession) -> Self:
        """Use ``session`` (initialized): ``async with toolset.attach(session)`` registers its tools."""
        self.session = session
        self.lost = None
        self._closed = False
        return self

    async def refresh(self) -> ToolsetChange:
        """List the server's tools (every page) and bring the registration in line: new tools are
        registered, vanished ones retired. A name another tool already holds raises ``ValueError``."""
        session = self.session
        if session is None:
            raise RuntimeError("no MCP session: attach one first (toolset.attach(session))")
        async with self._lock:
            listed = await _list_all(session)
            if self._closed:
                return ToolsetChange()
            by_mcp = {mcp_name: name for name, mcp_name in self._names.items()}
            retired = tuple(name for name, mcp_name in self._names.items() if mcp_name not in listed)
            for name in retired:
                self._retire(name)
            added: list[str] = []
            for mcp_name, tool in listed.items():
                known = by_mcp.get(mcp_name)
                if known is None:
                    known = self._free_name(mcp_name)
                    self.engine.register(known, _MCPTool(self, mcp_name))
                    self._names[known] = mcp_name
                    added.append(known)
                self._tools[known] = tool
        if added or retired:
            log.info("MCP tools: %d added %s, %d retired %s", len(added), added, len(retired), retired)
        return ToolsetChange(tuple(added), retired)

    def close(self) -> None:
        """Retire every tool this toolset registered (calls in flight finish); list_changed
        notifications are ignored from now on."""
        self._closed = True
        self.lost = "the MCP toolset is closed"
        for name in list(self._names):
            self._retire(name)

    async def __aenter__(self) -> Self:
        await self.refresh()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _retire(self, name: str) -> None:
        del self._names[name]
        self._tools.pop(name, None)
        if name in self.engine.tool_ids:
            self.engine.unregister(name)

    def _free_name(self, mcp_name: str) -> str:
        """``mcp_name``'s tripwire name; when cleaning it made it collide with another of this
        server's tools, the first free ``name_2``, ``name_3``…"""
        base = name = tripwire_name(self.prefix, mcp_name)
        n = 1
        while name in self._names:
            n += 1
            name = f"{base}_{n}"
        return name

    # --- notifications ---------------------------------------------------------------------

    async def message_handler(self, message: IncomingMessage) -> None:
        """The session's ``message_handler``: a tools list_changed notification refreshes the
        tools (in the session's own task, so the listing request can be answered)."""
        if isinstance(message, ToolListChangedNotification) and self.session is not None and not self._closed:
            try:
                await self.refresh()
            except Exception:  # a failed refresh must not take the session's receive loop down
                log.exception("refreshing MCP tools after tools/list_changed failed")
        if self._forward is not None:
            await self._forward(message)


_MAX_PAGES = 100
"""A server whose cursor never ends cannot hang a refresh."""


async def _list_all(session: ClientSession) -> dict[str, Tool]:
    """Every tool the server lists, following the pagination cursor."""
    tools: dict[str, Tool] = {}
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        for tool in page.tools:
            tools[tool.name] = tool
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools
