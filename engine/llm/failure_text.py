"""The text a model receives for a failed tool call, for code that answers the model itself.

Internal: :func:`failure_text` and :func:`alternative_for` are exported from :mod:`engine.llm`.
The LLM executor and every framework adapter (pydantic-ai, OpenAI Agents, MCP) answer a
failure with these, so a model reads the same block, redacted the same way, whichever path ran
the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.errors import ToolError
from engine.handler import CALLER_FAULT_KINDS
from engine.kinds import ErrorKind
from engine.llm.model_text import DEFAULT_MAX_ERROR_CHARS, format_tool_error_for_llm
from engine.llm.tool_errors import root_error_type
from engine.strategies.breaker.machine import BreakerState

if TYPE_CHECKING:
    from engine.engine import Engine

_OPEN_STATES = (BreakerState.OPEN, BreakerState.FORCED_OPEN)


def alternative_for(
    engine: Engine, tool: str, kind: ErrorKind | None, tried: str | None = None
) -> str | None:
    """The alternative to name to the model: the manifest's first one not yet tried whose breaker
    is not open — only for failures that are not the caller's fault (bad arguments are never
    worth sending elsewhere)."""
    if kind is None or kind in CALLER_FAULT_KINDS:
        return None
    registered = engine.tool_ids
    if tool not in registered:
        return None
    for name in engine.manifest(tool).alternatives:
        if name in (tool, tried) or name not in registered:
            continue
        if engine.state(name) not in _OPEN_STATES:
            return name
    return None


def retryable_for_model(error: ToolError) -> bool | None:
    """Whether the model may call again later: never while the circuit is open; after a full
    bulkhead or a rate limit (``throttled``), yes — its slots free up, its tokens come back, though
    the engine does not retry a rejected call itself."""
    if error.kind is ErrorKind.CIRCUIT_OPEN:
        return False
    if error.kind is ErrorKind.BULKHEAD_FULL or error.kind is ErrorKind.THROTTLED:
        return True
    return error.classification.retryable if error.classification is not None else None


def failure_text(
    engine: Engine,
    tool: str,
    error: ToolError,
    *,
    arguments: Mapping[str, Any] | None = None,
    served_by: str | None = None,
    max_chars: int = DEFAULT_MAX_ERROR_CHARS,
) -> str:
    """What the model reads for ``error`` from ``tool`` (the seed-003 block with one line of
    guidance): its message redacted by the tool's policy and the secrets found in ``arguments``,
    whether retrying can help (never while the circuit is open), and an alternative if one is
    available; ``served_by`` is an alternative the call already tried."""
    policy = engine.redaction_for(tool)
    message = policy.text(error.message, policy.secrets_in(arguments))
    retryable = retryable_for_model(error)
    return format_tool_error_for_llm(
        tool, root_error_type(error), message, kind=error.kind, retryable=retryable,
        alternative=alternative_for(engine, tool, error.kind, served_by), max_chars=max_chars,
    )  # fmt: skip
