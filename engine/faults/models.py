"""The faults: what one attempt does instead of (or around) the tool, one model per ``type``.

:data:`Fault` is their union, discriminated by ``type``; :data:`FAULT_TYPES` lists every type
a plan may use and :data:`CHAOS_FAULT_TYPES` those chaos may draw, in draw order.
"""

from __future__ import annotations

import errno
import json
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal, NoReturn, TypeVar, get_args

import anyio
from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.errors import ToolError
from engine.faults.shapes import (
    STREAM_ERRORS,
    FaultResponse,
    Headers,
    LengthFinishReasonError,
    mark_injected,
    status_error_class,
)
from engine.kinds import ErrorKind

__all__ = [
    "CHAOS_FAULT_TYPES",
    "FAULT_TYPES",
    "FIELDS_BY_TYPE",
    "BaseFault",
    "ChaosFaultType",
    "ConnectionResetFault",
    "Fault",
    "HangFault",
    "HttpErrorFault",
    "InvalidParametersFault",
    "Invoke",
    "LatencyFault",
    "MalformedResponseFault",
    "OkFault",
    "PartialResponseFault",
    "StreamCut",
    "StreamError",
    "StreamTruncateFault",
    "TimeoutFault",
    "ToolCallFault",
    "ToolCallFaultMode",
    "corrupt_tool_call",
]

Invoke = Callable[[], Awaitable[Any]]
"""Runs the real tool for this attempt."""

StreamCut = Callable[[AsyncIterable[Any]], AsyncIterator[Any]]
"""Wraps a streaming tool's chunks to cut the stream short (see :meth:`BaseFault.stream_cut`)."""

T = TypeVar("T")


class BaseFault(BaseModel):
    """One step of a fault plan: what a single attempt does instead of (or around) the tool."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    type: str

    @property
    def fault_type(self) -> str:
        """The ``type`` string; recorded in counters and the trace."""
        return self.type

    @property
    def is_ok(self) -> bool:
        return False

    def exception(self) -> Exception | None:
        """The exception this fault raises (a fresh one per call); None when it raises nothing."""
        return None

    async def run(self, invoke: Invoke) -> Any:
        """Await in place of the tool, inside the attempt's timeout scope; ``invoke()`` runs the tool.

        By default: raise :meth:`exception` at once (the tool does not run).
        """
        exc = self.exception()
        if exc is None:
            raise NotImplementedError
        raise exc

    def stream_cut(self) -> StreamCut | None:
        """How this fault cuts a streaming tool's stream (the tool runs, its chunks wrapped), or
        None when it runs in the tool's place (:meth:`run`), streaming or not."""
        return None


class OkFault(BaseFault):
    """A success: the real tool runs."""

    type: Literal["ok"] = "ok"

    @property
    def is_ok(self) -> bool:
        return True

    async def run(self, invoke: Invoke) -> Any:
        return await invoke()


class LatencyFault(BaseFault):
    """Wait ``ms`` first, then run the real tool."""

    type: Literal["latency"] = "latency"
    ms: float = Field(ge=0)

    async def run(self, invoke: Invoke) -> Any:
        await anyio.sleep(self.ms / 1000.0)
        return await invoke()


class HangFault(BaseFault):
    """Never answer: only the tool's timeout (or a cancellation) ends the attempt."""

    type: Literal["hang"] = "hang"

    async def run(self, invoke: Invoke) -> NoReturn:
        await anyio.sleep_forever()
        raise AssertionError("sleep_forever returned")  # pragma: no cover


class TimeoutFault(BaseFault):
    """Wait ``after_ms``, then raise ``TimeoutError``; the tool's own timeout fires first if shorter."""

    type: Literal["timeout"] = "timeout"
    after_ms: float = Field(ge=0)

    def exception(self) -> Exception:
        return mark_injected(TimeoutError(f"Timed out after {self.after_ms / 1000.0:g}s"), self.type)

    async def run(self, invoke: Invoke) -> NoReturn:
        await anyio.sleep(self.after_ms / 1000.0)
        raise self.exception()


class HttpErrorFault(BaseFault):
    """An HTTP error response: ``RateLimitError`` for 429, ``InternalServerError`` for 5xx, …"""

    type: Literal["http_error"] = "http_error"
    status_code: int = Field(ge=100, le=599)
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | dict[str, Any] | list[Any] | None = None
    """Text or JSON; a string holding JSON is parsed, as an SDK does."""

    @field_validator("headers", mode="before")
    @classmethod
    def _header_values_as_text(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
                for k, v in value.items()
            }
        return value

    @field_validator("headers")
    @classmethod
    def _distinct_header_names(cls, value: dict[str, str]) -> dict[str, str]:
        seen: dict[str, str] = {}
        for name in value:
            if name.lower() in seen:
                raise ValueError(f"{name!r} repeats {seen[name.lower()]!r} (header names ignore case)")
            seen[name.lower()] = name
        return value

    def exception(self) -> Exception:
        body: Any = self.body
        if isinstance(body, str):
            text = body
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict | list):
                body = parsed
        elif body is not None:
            text = json.dumps(body)
        else:
            text = ""
        response = FaultResponse(self.status_code, Headers(self.headers), text.encode("utf-8"))
        shown = text or response.reason_phrase
        error_class = status_error_class(self.status_code)
        return mark_injected(
            error_class(f"HTTP {self.status_code}: {shown}", response=response, body=body), self.type
        )


class MalformedResponseFault(BaseFault):
    """A response that fails to parse: raises the ``json.JSONDecodeError`` of parsing ``raw``."""

    type: Literal["malformed_response"] = "malformed_response"
    raw: str = "<html><body>502 Bad Gateway</body></html>"

    @field_validator("raw")
    @classmethod
    def _must_not_parse(cls, value: str) -> str:
        try:
            json.loads(value)
        except ValueError:
            return value
        raise ValueError("is valid JSON; a malformed response needs text that fails to parse")

    def exception(self) -> Exception:
        try:
            json.loads(self.raw)
        except json.JSONDecodeError as exc:
            return mark_injected(exc, self.type)
        raise AssertionError("raw parses as JSON")  # pragma: no cover - rejected on load


StreamError = Literal["ConnectionError", "ConnectionResetError", "TimeoutError", "RemoteProtocolError"]
"""The exceptions a ``stream_truncate`` fault may cut a stream off with (its ``raise``)."""


class StreamTruncateFault(BaseFault):
    """A stream cut off after ``after_chunks`` chunks by the exception named in ``raise``.

    Used on a non-streaming attempt it raises at once (the tool does not run); streaming
    callers wrap the real stream with :meth:`wrap_stream`.
    """

    type: Literal["stream_truncate"] = "stream_truncate"
    after_chunks: int = Field(ge=0)
    raise_: StreamError = Field(default="ConnectionError", alias="raise")

    def exception(self) -> Exception:
        return mark_injected(STREAM_ERRORS[self.raise_](self.after_chunks), self.type)

    def stream_cut(self) -> StreamCut:
        return self.wrap_stream

    async def wrap_stream(self, stream: AsyncIterable[T]) -> AsyncGenerator[T, None]:
        """Yield the first ``after_chunks`` chunks of ``stream``, close it, then raise.

        A stream shorter than that is still cut: its end never arrives.
        """
        iterator = aiter(stream)
        try:
            for _ in range(self.after_chunks):
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                yield chunk
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()
        raise self.exception()


class ConnectionResetFault(BaseFault):
    """The connection drops mid-request: ``ConnectionResetError`` (ECONNRESET)."""

    type: Literal["connection_reset"] = "connection_reset"

    def exception(self) -> Exception:
        return mark_injected(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), self.type)


class PartialResponseFault(BaseFault):
    """A completion cut at the length limit: ``LengthFinishReasonError`` with zero completion tokens."""

    type: Literal["partial_response"] = "partial_response"
    content: str = ""

    def exception(self) -> Exception:
        completion = {
            "content": self.content,
            "finish_reason": "length",
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        return mark_injected(LengthFinishReasonError(completion=completion), self.type)


class InvalidParametersFault(BaseFault):
    """The arguments are rejected: ``ToolError(invalid_parameters, message)``."""

    type: Literal["invalid_parameters"] = "invalid_parameters"
    message: str | None = None

    def exception(self) -> Exception:
        return mark_injected(ToolError(ErrorKind.INVALID_PARAMETERS, self.message), self.type)


ToolCallFaultMode = Literal["malformed_arguments", "unknown_tool", "missing_arguments"]
"""How a ``tool_call_fault`` corrupts the model's tool call before it is parsed."""

_TOOL_CALL_MESSAGES: dict[str, str] = {
    "malformed_arguments": "Tool call arguments are not valid JSON",
    "unknown_tool": "The model called a tool that does not exist",
    "missing_arguments": "Tool call is missing its required arguments",
}


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def corrupt_tool_call(name: str, arguments: str, *, mode: ToolCallFaultMode) -> tuple[str, str]:
    """The model's tool call ``(name, arguments JSON)`` as ``mode`` corrupts it; pure and deterministic.

    ``malformed_arguments`` cuts the JSON short (as a truncated generation does),
    ``unknown_tool`` renames the tool to one that does not exist, ``missing_arguments``
    drops every argument.
    """
    if mode == "unknown_tool":
        return f"{name}_unknown", arguments
    if mode == "missing_arguments":
        return name, "{}"
    if mode == "malformed_arguments":
        text = arguments.strip()
        for candidate in (text[: len(text) - max(1, len(text) // 3)], '{"'):
            if candidate and not _parses(candidate):
                return name, candidate
    raise ValueError(f"unknown tool_call_fault mode {mode!r}")


class ToolCallFault(BaseFault):
    """The model's tool call is corrupted before execution (see :func:`corrupt_tool_call`).

    Applied at tool level (``run``), it raises ``ToolError(invalid_parameters)``.
    """

    type: Literal["tool_call_fault"] = "tool_call_fault"
    mode: ToolCallFaultMode = "malformed_arguments"

    def corrupt_tool_call(self, name: str, arguments: str) -> tuple[str, str]:
        return corrupt_tool_call(name, arguments, mode=self.mode)

    def exception(self) -> Exception:
        message = f"{_TOOL_CALL_MESSAGES[self.mode]} ({self.mode})"
        return mark_injected(ToolError(ErrorKind.INVALID_PARAMETERS, message), self.type)


Fault = Annotated[
    OkFault
    | LatencyFault
    | HangFault
    | TimeoutFault
    | HttpErrorFault
    | MalformedResponseFault
    | StreamTruncateFault
    | ConnectionResetFault
    | PartialResponseFault
    | InvalidParametersFault
    | ToolCallFault,
    Field(discriminator="type"),
]

_FAULT_CLASSES: tuple[type[BaseFault], ...] = get_args(get_args(Fault)[0])
FAULT_TYPES: tuple[str, ...] = tuple(cls.model_fields["type"].default for cls in _FAULT_CLASSES)
"""Every ``type`` a plan may use, ``ok`` first."""

ChaosFaultType = Literal[
    "latency",
    "hang",
    "timeout",
    "http_error",
    "malformed_response",
    "stream_truncate",
    "connection_reset",
    "partial_response",
    "invalid_parameters",
    "tool_call_fault",
]
"""A fault type chaos may draw, as a plan's ``chaos.rates`` names it."""
CHAOS_FAULT_TYPES: tuple[str, ...] = get_args(ChaosFaultType)
"""The types chaos can draw (every fault but ``ok``), in the order draws are resolved."""
assert set(CHAOS_FAULT_TYPES) == set(FAULT_TYPES) - {"ok"}

FIELDS_BY_TYPE: dict[str, tuple[str, ...]] = {
    cls.model_fields["type"].default: tuple(
        info.alias or name for name, info in cls.model_fields.items() if name != "type"
    )
    for cls in _FAULT_CLASSES
}
