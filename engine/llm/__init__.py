"""LLM tool calls in, tool-result messages out: exactly one per call id, in input order.

An assistant message's tool calls — OpenAI ``tool_calls`` or Anthropic ``tool_use`` blocks —
are parsed into :class:`LLMToolCall` (:mod:`engine.llm.parsing`) and run by
:class:`ToolCallExecutor` (:mod:`engine.llm.executor`) as one engine turn. Whatever happens, every
call gets exactly one :class:`ToolResultItem` (:mod:`engine.llm.results`). A failed call's text
follows spec-map llm.error-block plus one line of guidance (:mod:`engine.llm.model_text`), redacted by
the engine's policy (:mod:`engine.redaction`); each failure is a :class:`ToolExecutionError`
counted in a :class:`ToolErrorRegistry` (:mod:`engine.llm.tool_errors`).

Public: the names in ``__all__`` are the API; import them from ``engine.llm`` (the most used are
also exported by ``engine``). The submodules are internal.
"""

from engine.llm.executor import ToolCallExecutor
from engine.llm.failure_text import alternative_for, failure_text
from engine.llm.model_text import (
    CANCELED_ERROR_TYPE,
    DEFAULT_MAX_ERROR_CHARS,
    MIN_ERROR_CHARS,
    TRUNCATED,
    TURN_DEADLINE_ERROR_TYPE,
    format_tool_error_for_llm,
    guidance_for,
    success_content,
)
from engine.llm.parsing import LLMToolCall, parse_anthropic_tool_uses, parse_openai_tool_calls
from engine.llm.results import ToolBatch, ToolResultItem
from engine.llm.tool_errors import ToolErrorRegistry, ToolExecutionError

__all__ = [
    "CANCELED_ERROR_TYPE",
    "DEFAULT_MAX_ERROR_CHARS",
    "MIN_ERROR_CHARS",
    "TRUNCATED",
    "TURN_DEADLINE_ERROR_TYPE",
    "LLMToolCall",
    "ToolBatch",
    "ToolCallExecutor",
    "ToolErrorRegistry",
    "ToolExecutionError",
    "ToolResultItem",
    "alternative_for",
    "failure_text",
    "format_tool_error_for_llm",
    "guidance_for",
    "parse_anthropic_tool_uses",
    "parse_openai_tool_calls",
    "success_content",
]
