"""A real MCP server for the adapter's tests, built with the SDK's own ``MCPServer`` and run as a
subprocess over stdio: ``python tests/engine/integrations/mcp_server.py``.

Its tools misbehave on request: fail N times then succeed (the count kept in this process, per
key), hang, report progress, answer ``isError``, raise JSON-RPC errors, die mid-call, and add or
remove a tool and say so with ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import os
from collections import Counter

import anyio
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent

server = MCPServer("tripwire-test", log_level="CRITICAL")
calls: Counter[str] = Counter()
"""Requests received, by key: what a test reads to know whether a request reached the server."""
idempotency_keys: dict[str, list[str | None]] = {}
"""The idempotency key in each ``book`` request's ``_meta``, by key."""
IDEMPOTENCY_META_KEY = "tripwire/idempotency-key"


def answer(text: str, *, is_error: bool = False) -> CallToolResult:
    """A result with exactly this text (a raised error would get the SDK's "Error executing tool" prefix)."""
    return CallToolResult(content=[TextContent(text=text)], is_error=is_error)


@server.tool()
async def echo(text: str) -> str:
    """Return ``text``."""
    return text


@server.tool()
async def flaky(key: str, failures: int, error: str = "HTTP 503: Service Unavailable") -> CallToolResult:
    """Answer ``isError`` with ``error`` for the first ``failures`` calls with ``key``, then succeed."""
    calls[key] += 1
    if calls[key] <= failures:
        return answer(error, is_error=True)
    return answer(f"ok after {calls[key]}")


@server.tool()
async def received(key: str) -> int:
    """How many requests with ``key`` reached this server."""
    return calls[key]


@server.tool()
async def airport(code: str) -> CallToolResult:
    """Look up an airport: anything but CDG and JFK is refused as the caller's mistake."""
    if code not in ("CDG", "JFK"):
        return answer(f"Invalid airport code: {code}", is_error=True)
    return answer(f"{code}: open")


@server.tool()
async def rpc_error(code: int) -> str:
    """Fail with a JSON-RPC error of ``code`` instead of a result."""
    raise MCPError(code, f"JSON-RPC error {code}")


@server.tool()
async def hang(key: str = "") -> str:
    """Never answer (until the client cancels)."""
    calls[key] += 1
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
async def book(key: str, hangs: int, ctx: Context) -> str:
    """Note the request's idempotency key (``_meta``); hang on the first ``hangs`` requests with ``key``."""
    meta = ctx.request_context.meta or {}
    seen = idempotency_keys.setdefault(key, [])
    seen.append(meta.get(IDEMPOTENCY_META_KEY))
    if len(seen) <= hangs:
        await anyio.sleep_forever()
    return f"booked after {len(seen)}"


@server.tool()
async def booked(key: str) -> list[str | None]:
    """The idempotency keys of the ``book`` requests with ``key``, in order."""
    return idempotency_keys.get(key, [])


@server.tool()
async def crawl(steps: int, interval: float, ctx: Context) -> str:
    """Report progress every ``interval`` seconds, ``steps`` times, then answer."""
    for step in range(steps):
        await anyio.sleep(interval)
        await ctx.report_progress(step + 1, steps)
    return f"crawled {steps}"


@server.tool()
async def die(key: str = "") -> str:
    """Kill this server process in the middle of the call."""
    calls[key] += 1
    os._exit(1)


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called ``name`` (it doubles a number) and notify the client."""

    async def doubled(x: int) -> int:
        return 2 * x

    server.add_tool(doubled, name=name, description="Double x.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def shrink(name: str, ctx: Context) -> str:
    """Remove the tool called ``name`` and notify the client."""
    server.remove_tool(name)
    await ctx.session.send_tool_list_changed()
    return f"removed {name}"


if __name__ == "__main__":
    server.run()
