"""An assistant message's tool calls — OpenAI ``tool_calls`` or Anthropic ``tool_use`` — as data.

Parsing never fails on what the model wrote: arguments that are not valid JSON, or not a JSON
object, give an :class:`LLMToolCall` whose ``problem`` says why; the executor answers it as an
invalid-parameters failure. Only a call without an id is refused here (it cannot be answered).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LLMToolCall:
    """One tool call as the model emitted it; ``problem`` says why its arguments are unusable."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str | None = None
    problem: str | None = None


def parse_openai_tool_calls(message: Any) -> list[LLMToolCall]:
    """The tool calls of an OpenAI assistant message (a dict or an SDK object), in order."""
    raw_calls = message if isinstance(message, list | tuple) else _field(message, "tool_calls")
    calls: list[LLMToolCall] = []
    for index, raw in enumerate(raw_calls or ()):
        call_id = _call_id(raw, index)
        call_type = _field(raw, "type") or "function"
        if call_type != "function":
            payload = _field(raw, str(call_type))
            unsupported = f"unsupported tool call type {str(call_type)!r}: only function calls are supported"
            calls.append(LLMToolCall(call_id, _name(_field(payload, "name")), None, None, unsupported))
            continue
        function = _field(raw, "function")
        arguments, raw, problem = parse_arguments(_field(function, "arguments"), "arguments")
        calls.append(LLMToolCall(call_id, _name(_field(function, "name")), arguments, raw, problem))
    return calls


def parse_anthropic_tool_uses(message_or_blocks: Any) -> list[LLMToolCall]:
    """The ``tool_use`` blocks of an Anthropic message, a list of blocks, or SDK objects, in order."""
    if isinstance(message_or_blocks, list | tuple):
        blocks: Any = message_or_blocks
    else:
        blocks = _field(message_or_blocks, "content")
    if blocks is None or isinstance(blocks, str):
        return []
    calls: list[LLMToolCall] = []
    for index, block in enumerate(blocks):
        if _field(block, "type") != "tool_use":
            continue
        arguments, raw, problem = parse_arguments(_field(block, "input"), "input")
        calls.append(
            LLMToolCall(_call_id(block, index), _name(_field(block, "name")), arguments, raw, problem)
        )
    return calls


def _field(obj: Any, name: str) -> Any:
    if type(obj) is dict:  # the usual case, without the slower isinstance check on an ABC
        return obj.get(name)
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _call_id(raw: Any, index: int) -> str:
    call_id = _field(raw, "id")
    if call_id is None or call_id == "":
        raise ValueError(f"tool call #{index} has no id: it cannot be answered")
    return str(call_id)


def _name(value: Any) -> str:
    return "" if value is None else str(value)


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def parse_arguments(raw: Any, what: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(arguments, raw text, problem): JSON text is decoded; it must hold an object."""
    if type(raw) is not str:  # JSON text, the usual case, skips these checks (isinstance on an ABC is slow)
        if raw is None:
            return {}, None, None
        if isinstance(raw, Mapping):
            return dict(raw), None, None
        if isinstance(raw, bytes | bytearray):
            raw = raw.decode("utf-8", "replace")
        elif not isinstance(raw, str):
            return None, None, f"{what} must be a JSON object, not {_json_type(raw)}"
    if not raw.strip():
        return {}, raw, None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        verb = "are" if what == "arguments" else "is"
        return None, raw, f"{what} {verb} not valid JSON ({exc})"
    if not isinstance(value, dict):
        return None, raw, f"{what} must be a JSON object, not {_json_type(value)}"
    return value, raw, None
