"""The text the model reads for each tool call: a success's value, or a failure's block.

A failed call's text follows spec-map llm.error-block ("Tool Execution Failed / Tool / Error Type /
Message") plus one line of guidance (and an alternative tool, when one is free), is stable (no
timestamps or ids) and length-capped. Redaction is the caller's: the executor redacts the message
with :mod:`engine.redaction` before it is formatted here.
"""

from __future__ import annotations

import json
from typing import Any, Final

from engine.kinds import ErrorKind

TRUNCATED: Final = "… [truncated]"
"""How a failure's message ends when it was cut to fit the cap."""
DEFAULT_MAX_ERROR_CHARS: Final = 2000
"""The default cap on a failure's text, header and guidance included."""
MIN_ERROR_CHARS: Final = 512
"""The smallest cap that always fits the header, the guidance and an alternative."""
TURN_DEADLINE_ERROR_TYPE: Final = "TurnDeadlineExceeded"
"""The error type shown for a call the turn's deadline stopped."""
CANCELED_ERROR_TYPE: Final = "Canceled"
"""The error type shown for a call that was canceled (a stop) before it finished."""

GUIDANCE_FIX_ARGUMENTS: Final = "Fix the arguments and call the tool again."
GUIDANCE_TRANSIENT: Final = "This is temporary: retrying later may help."
GUIDANCE_CIRCUIT_OPEN: Final = (
    "The tool is disabled for now after repeated failures: do not call it again in this turn."
)
GUIDANCE_PERMANENT: Final = "The tool failed and cannot be used for this request."
GUIDANCE_DEADLINE: Final = "The turn ran out of time before this call finished."
GUIDANCE_CANCELED: Final = "The call was canceled before it finished."
GUIDANCE_UNKNOWN_TOOL: Final = "No tool by that name exists."
GUIDANCE_NOT_PERMITTED: Final = "The tool is not permitted here: do not call it again."
GUIDANCE_LIMIT_EXCEEDED: Final = "The tool-call limit for this turn was reached: do not call more tools now."
GUIDANCE_NOT_FOUND: Final = "The requested resource does not exist: check the arguments before calling again."

_HEADER_VALUE_CAP = 100

_GUIDANCE_BY_KIND: Final[dict[ErrorKind, str]] = {
    ErrorKind.CANCELED: GUIDANCE_CANCELED,
    ErrorKind.UNKNOWN_TOOL: GUIDANCE_UNKNOWN_TOOL,
    ErrorKind.INVALID_PARAMETERS: GUIDANCE_FIX_ARGUMENTS,
    ErrorKind.CIRCUIT_OPEN: GUIDANCE_CIRCUIT_OPEN,
    ErrorKind.NOT_PERMITTED: GUIDANCE_NOT_PERMITTED,
    ErrorKind.LIMIT_EXCEEDED: GUIDANCE_LIMIT_EXCEEDED,
    ErrorKind.NOT_FOUND: GUIDANCE_NOT_FOUND,
}
"""Kinds with guidance of their own; the others get the transient or the permanent line."""


def guidance_for(
    kind: ErrorKind | str | None, retryable: bool | None = None, error_type: str | None = None
) -> str:
    """The one line telling the model what to do about a failure."""
    k = _as_kind(kind)
    if error_type == TURN_DEADLINE_ERROR_TYPE:
        return GUIDANCE_DEADLINE
    if k is not None and k in _GUIDANCE_BY_KIND:
        return _GUIDANCE_BY_KIND[k]
    if retryable is None:
        retryable = k is not None and k.transient
    return GUIDANCE_TRANSIENT if retryable else GUIDANCE_PERMANENT


def format_tool_error_for_llm(
    tool_name: str,
    error_type: str,
    error_message: str,
    *,
    kind: ErrorKind | str | None = None,
    retryable: bool | None = None,
    alternative: str | None = None,
    max_chars: int = DEFAULT_MAX_ERROR_CHARS,
) -> str:
    """The spec-map llm.error-block, then a guidance line and any alternative; at most ``max_chars`` long.

    Only the message is ever truncated, ending in ``… [truncated]``; the header lines stay whole.
    """
    if max_chars < MIN_ERROR_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_ERROR_CHARS}, got {max_chars}")
    head = (
        f"Tool Execution Failed\nTool: {_header_value(tool_name)}\n"
        f"Error Type: {_header_value(error_type)}\nMessage: "
    )
    tail = [guidance_for(kind, retryable, error_type)]
    if alternative:
        tail.append(f"Alternative: try {_header_value(alternative)}.")
    end = "\n\n" + "\n".join(tail)
    message = str(error_message)
    room = max_chars - len(head) - len(end)
    if len(message) > room:
        message = message[: room - len(TRUNCATED)].rstrip() + TRUNCATED
    return head + message + end


def success_content(value: Any) -> str:
    """A tool's value as text for the model: strings as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):  # circular or non-string keys
        return str(value)


_JSON_LEAVES: Final = frozenset({str, int, float, bool, type(None)})
_PLAIN_DEPTH = 64


def is_plain_json(value: Any, depth: int = 0) -> bool:
    """Only dicts with string keys, lists, tuples, strings, numbers, booleans and None (exact types):
    a value whose JSON-safe copy (:func:`engine.errors.jsonable`) gives the same JSON text.

    Deeper than 64 levels (or circular) counts as not plain: the careful path handles those."""
    kind = type(value)
    if kind in _JSON_LEAVES:
        return True
    if depth >= _PLAIN_DEPTH:
        return False
    if kind is dict:
        for key in value:
            if type(key) is not str:
                return False
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return False
    return all(type(item) in _JSON_LEAVES or is_plain_json(item, depth + 1) for item in items)


def _header_value(value: object) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= _HEADER_VALUE_CAP else text[: _HEADER_VALUE_CAP - 1] + "…"


def _as_kind(kind: ErrorKind | str | None) -> ErrorKind | None:
    if kind is None or isinstance(kind, ErrorKind):
        return kind
    try:
        return ErrorKind(kind)
    except ValueError:
        return None
