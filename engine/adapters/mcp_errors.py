"""What an MCP tool call's failures become for tripwire's classifier (the ``mcp`` extra).

Three ways an MCP call fails, and what each becomes:

- the tool ran and answered ``isError: true``: :class:`MCPToolError`, whose message is the result's
  text, so the classifier's message patterns decide (seed 004: "Invalid airport code: XYZ" is
  permanent bad arguments, "HTTP 503" a transient outage);
- the server answered with a JSON-RPC error: the SDK's ``MCPError`` is raised as it is, and the
  classifier maps its code (-32602 invalid params and -32601 method not found are permanent,
  -32603 internal error transient, -32001 the SDK's request timeout a timeout, -32000 the SDK's
  "connection closed" a transport error: the request may have been processed);
- the connection was already gone before the request could be written (the server process died,
  the session closed): :class:`MCPNotSent`, a transient error whose kind says the peer could not
  be reached — a side-effecting call may be sent again, as it was not sent at all.

Imported by :mod:`engine.adapters.mcp`; no engine module imports it.
"""

from __future__ import annotations

from typing import Any

from mcp import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult, TextContent

from engine.errors import ToolError
from engine.kinds import ErrorKind

__all__ = ["NOT_SENT_KIND", "MCPNotSent", "MCPToolError", "connection_closed", "content_value", "result_text"]

NOT_SENT_KIND = ErrorKind.NETWORK_ERROR
"""The kind of a call whose request never left: transient, and not ambiguous (nothing was sent)."""


class MCPToolError(Exception):
    """An MCP tool answered ``isError: true``: ``str()`` is its text, for the classifier to read.

    ``result`` is the whole ``CallToolResult``. Deliberately a plain ``Exception`` with a name no
    classifier table knows: the message decides, as for any tool's error text."""

    def __init__(self, tool: str, result: CallToolResult) -> None:
        self.tool = tool
        self.result = result
        super().__init__(result_text(result) or f"MCP tool {tool!r} reported an error")


class MCPNotSent(ToolError):
    """The MCP connection was closed before the request was written: the server never saw it."""

    def __init__(self, tool: str, why: str) -> None:
        super().__init__(NOT_SENT_KIND, f"MCP call of {tool!r} not sent: {why}")


def connection_closed(error: BaseException) -> bool:
    """The SDK's "connection closed" error (no response came; the connection is gone for good)."""
    return isinstance(error, MCPError) and error.code == CONNECTION_CLOSED


def result_text(result: CallToolResult) -> str:
    """The text blocks of a tool result, one per line."""
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def content_value(result: CallToolResult) -> Any:
    """A successful result as a value: its text when every block is text, else the blocks as JSON."""
    blocks = result.content
    if len(blocks) == 1 and type(blocks[0]) is TextContent:  # the usual answer: one text block
        return blocks[0].text
    if all(isinstance(block, TextContent) for block in blocks):
        return result_text(result)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]
