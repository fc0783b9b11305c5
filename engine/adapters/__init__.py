"""Adapters that put tripwire under the tool calls of MCP clients and agent frameworks.

Each adapter is a module of its own, imported by name (``from engine.adapters.mcp import …``),
and needs its optional extra (``pip install 'tripwire[mcp]'``, ``[openai-agents]``,
``[pydantic-ai]``, ``[langgraph]``). Importing ``engine`` or this package imports none of them.
"""

__all__: list[str] = []
