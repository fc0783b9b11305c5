"""Deterministic fault injection: a YAML fault plan decides, attempt by attempt, what a tool does.

```yaml
fault_plan:
  name: demo outage
  steps:
    - match: {tool: flight_search}             # the tool's attempts in order, across its calls
      sequence:
        - {type: connection_reset}
        - {type: http_error, status_code: 503, headers: {Retry-After: "1"}}
        - {type: ok}                           # a success: the real tool runs
    - match: {tool: hotel_search, call: 2}     # only the tool's 2nd call, its attempts in order
      sequence: [{type: timeout, after_ms: 40000}]
      repeat: true                             # after the sequence ends, repeat its last step
    - match: {turn: plan-trip, call_id: hotels}  # one call of one turn, its attempts in order
      sequence: [{type: hang}]
  chaos:                                       # optional, for soak runs
    seed: 42
    rates: {connection_reset: 0.05, http_error: 0.02}
    defaults: {http_error: {status_code: 503}}
```

For every attempt the engine asks :meth:`FaultInjector.pick` with the ordinals it assigned
(the tool's call number, the attempt within the call, the turn and call id); nothing is
counted from timing, so the same plan fires the same faults on every run. The most specific
matching step wins (``turn`` + ``call_id`` + ``tool``, ``turn`` + ``call_id``, then ``tool``
+ ``call``, then ``tool``); only the winner's sequence advances. A ``{tool}`` step takes one
element per attempt in ``pick()`` order; the others index their sequence by attempt. Chaos
applies when no step matched or the matched sequence ran out without ``repeat``; each draw
is a hash of (seed, tool, call, attempt, turn, call id), so it does not depend on the order
in which concurrent calls are picked.

``pick()`` returns None when nothing applies (run the tool as usual) and an
:class:`OkFault` for an explicit ``{type: ok}`` step (``fault.is_ok``; it just runs the tool).

The engine awaits :meth:`BaseFault.run` inside the attempt's timeout scope in place of the
tool. Faults raise exceptions shaped like the real ones (class names, status codes, headers,
bodies), so they travel the same classification, retry, breaker and fallback paths.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, NoReturn, Protocol, TypeVar, get_args

import anyio
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from engine.config import ConfigError, ConfigIssue, nearest_line, read_yaml
from engine.errors import ToolError
from engine.kinds import ErrorKind
from engine.manifest import TOOL_ID_PATTERN

__all__ = [
    "CHAOS_FAULT_TYPES",
    "FAULT_TYPES",
    "INJECTED_ATTR",
    "APIStatusError",
    "AuthenticationError",
    "BadRequestError",
    "BaseFault",
    "ChaosConfig",
    "ConflictError",
    "ConnectionResetFault",
    "Fault",
    "FaultInjector",
    "FaultPlan",
    "FaultPlanError",
    "FaultResponse",
    "FaultStep",
    "FiredFault",
    "HangFault",
    "Headers",
    "HttpErrorFault",
    "InternalServerError",
    "InvalidParametersFault",
    "LatencyFault",
    "LengthFinishReasonError",
    "MalformedResponseFault",
    "NotFoundError",
    "OkFault",
    "PartialResponseFault",
    "PermissionDeniedError",
    "RateLimitError",
    "RemoteProtocolError",
    "StepMatch",
    "StreamTruncateFault",
    "TimeoutFault",
    "ToolCallFault",
    "UnprocessableEntityError",
    "chaos_unit",
    "corrupt_tool_call",
    "load_fault_plan",
]

Invoke = Callable[[], Awaitable[Any]]
"""Runs the real tool for this attempt."""

T = TypeVar("T")

INJECTED_ATTR = "injected_fault"
"""Every exception a fault raises carries its fault type under this attribute."""


def _mark(exc: Exception, fault_type: str) -> Exception:
    setattr(exc, INJECTED_ATTR, fault_type)
    return exc


# --- exceptions shaped like the real ones -----------------------------------------------


class Headers(Mapping[str, str]):
    """Case-insensitive response headers, like ``httpx.Headers``; iterates the names as given."""

    __slots__ = ("_items", "_lower")

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items = dict(items or {})
        self._lower = {k.lower(): v for k, v in self._items.items()}

    def __getitem__(self, key: str) -> str:
        return self._lower[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._lower

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


@dataclass(frozen=True, slots=True)
class FaultResponse:
    """The HTTP response an :class:`APIStatusError` carries (the parts of ``httpx.Response`` used)."""

    status_code: int
    headers: Headers
    content: bytes = b""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    @property
    def reason_phrase(self) -> str:
        try:
            return HTTPStatus(self.status_code).phrase
        except ValueError:
            return ""

    def json(self) -> Any:
        return json.loads(self.content)


class APIStatusError(Exception):
    """An HTTP error response, shaped like the provider SDKs' ``APIStatusError``.

    ``status_code``, ``headers`` (case-insensitive), ``body`` (parsed JSON when the body is
    JSON) and ``response`` (with ``status_code`` and ``headers``) are what the classifier reads.
    """

    def __init__(self, message: str, *, response: FaultResponse, body: object | None) -> None:
        super().__init__(message)
        self.message = message
        self.response = response
        self.status_code = response.status_code
        self.headers = response.headers
        self.body = body


class BadRequestError(APIStatusError):
    """400."""


class AuthenticationError(APIStatusError):
    """401."""


class PermissionDeniedError(APIStatusError):
    """403."""


class NotFoundError(APIStatusError):
    """404."""


class ConflictError(APIStatusError):
    """409."""


class UnprocessableEntityError(APIStatusError):
    """422."""


class RateLimitError(APIStatusError):
    """429."""


class InternalServerError(APIStatusError):
    """Any 5xx."""


_STATUS_ERRORS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def _status_error_class(status_code: int) -> type[APIStatusError]:
    if status_code >= 500:
        return InternalServerError
    return _STATUS_ERRORS.get(status_code, APIStatusError)


class LengthFinishReasonError(Exception):
    """The model stopped at its length limit: ``completion`` has ``finish_reason: "length"``."""

    def __init__(self, *, completion: dict[str, Any]) -> None:
        self.completion = completion
        super().__init__(
            f"Could not parse response content as the length limit was reached - {completion['usage']}"
        )


class RemoteProtocolError(Exception):
    """The peer broke the protocol mid-response, shaped like ``httpx.RemoteProtocolError``."""


_STREAM_ERRORS: dict[str, Callable[[int], Exception]] = {
    "ConnectionError": lambda n: ConnectionError(f"Connection lost after {n} chunks"),
    "ConnectionResetError": lambda n: ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    "TimeoutError": lambda n: TimeoutError(f"Stream read timed out after {n} chunks"),
    "RemoteProtocolError": lambda n: RemoteProtocolError(
        "peer closed connection without sending complete message body (incomplete chunked read)"
    ),
}


# --- the faults ---------------------------------------------------------------------------


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
        return _mark(TimeoutError(f"Timed out after {self.after_ms / 1000.0:g}s"), self.type)

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
        error_class = _status_error_class(self.status_code)
        return _mark(
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
            return _mark(exc, self.type)
        raise AssertionError("raw parses as JSON")  # pragma: no cover - rejected on load


StreamError = Literal["ConnectionError", "ConnectionResetError", "TimeoutError", "RemoteProtocolError"]


class StreamTruncateFault(BaseFault):
    """A stream cut off after ``after_chunks`` chunks by the exception named in ``raise``.

    Used on a non-streaming attempt it raises at once (the tool does not run); streaming
    callers wrap the real stream with :meth:`wrap_stream`.
    """

    type: Literal["stream_truncate"] = "stream_truncate"
    after_chunks: int = Field(ge=0)
    raise_: StreamError = Field(default="ConnectionError", alias="raise")

    def exception(self) -> Exception:
        return _mark(_STREAM_ERRORS[self.raise_](self.after_chunks), self.type)

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
        return _mark(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), self.type)


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
        return _mark(LengthFinishReasonError(completion=completion), self.type)


class InvalidParametersFault(BaseFault):
    """The arguments are rejected: ``ToolError(invalid_parameters, message)``."""

    type: Literal["invalid_parameters"] = "invalid_parameters"
    message: str | None = None

    def exception(self) -> Exception:
        return _mark(ToolError(ErrorKind.INVALID_PARAMETERS, self.message), self.type)


ToolCallFaultMode = Literal["malformed_arguments", "unknown_tool", "missing_arguments"]

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
        return _mark(ToolError(ErrorKind.INVALID_PARAMETERS, message), self.type)


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
CHAOS_FAULT_TYPES: tuple[str, ...] = get_args(ChaosFaultType)
"""The types chaos can draw (every fault but ``ok``), in the order draws are resolved."""
assert set(CHAOS_FAULT_TYPES) == set(FAULT_TYPES) - {"ok"}

_FIELDS_BY_TYPE: dict[str, tuple[str, ...]] = {
    cls.model_fields["type"].default: tuple(
        info.alias or name for name, info in cls.model_fields.items() if name != "type"
    )
    for cls in _FAULT_CLASSES
}


# --- the plan -----------------------------------------------------------------------------

MatchLevel = Literal["call_id", "call", "tool"]


class StepMatch(BaseModel):
    """Which attempts a step governs: ``{tool}``, ``{tool, call}`` or ``{turn, call_id}``.

    A ``{turn, call_id}`` match may also name a ``tool``: without one it governs every tool
    that serves the call (an alternative included), with one only that tool.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str | None = Field(default=None, pattern=TOOL_ID_PATTERN)
    call: int | None = Field(default=None, ge=1)
    """The tool's call ordinal, 1-based, as the engine assigns it at launch."""
    turn: str | None = Field(default=None, min_length=1)
    call_id: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_shape(self) -> StepMatch:
        shapes = "give {tool}, {tool, call} or {turn, call_id} (optionally with tool)"
        if self.tool is None and self.call is None and self.turn is None and self.call_id is None:
            raise ValueError(f"empty match: {shapes}")
        if (self.turn is None) != (self.call_id is None):
            raise ValueError(f"turn and call_id go together: {shapes}")
        if self.turn is not None and self.call is not None:
            raise ValueError(f"a {{turn, call_id}} match takes no call ordinal: {shapes}")
        if self.call is not None and self.tool is None:
            raise ValueError(f"call needs tool: {shapes}")
        return self

    @property
    def level(self) -> MatchLevel:
        """How specific the match is; ``call_id`` beats ``call`` beats ``tool``."""
        if self.call_id is not None:
            return "call_id"
        return "call" if self.call is not None else "tool"

    def describe(self) -> str:
        if self.call_id is not None:
            tool = f", tool: {self.tool}" if self.tool is not None else ""
            return f"{{turn: {self.turn}, call_id: {self.call_id}{tool}}}"
        if self.call is not None:
            return f"{{tool: {self.tool}, call: {self.call}}}"
        return f"{{tool: {self.tool}}}"


class FaultStep(BaseModel):
    """A match and the sequence of faults (or successes) for the attempts it governs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    match: StepMatch
    sequence: tuple[Fault, ...] = Field(min_length=1)
    repeat: bool = False
    """After the sequence ends, repeat its last element (default: the real tool, or chaos)."""


Rate = Annotated[float, Field(ge=0.0, le=1.0)]


class ChaosConfig(BaseModel):
    """Seeded random faults for soak runs: a probability per attempt for each fault type.

    Fault parameters come from ``defaults``; a rated type whose parameters are required
    (``http_error``'s status code, ``timeout``'s ``after_ms``…) must have them there.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    rates: dict[ChaosFaultType, Rate]
    defaults: dict[ChaosFaultType, Fault] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _defaults_per_rated_type(cls, data: Any) -> Any:
        """Every rated type gets a defaults entry, and each entry its ``type`` (the key)."""
        if not isinstance(data, Mapping):
            return data
        rates, defaults = data.get("rates"), data.get("defaults")
        if defaults is None:
            defaults = {}
        if not isinstance(rates, Mapping) or not isinstance(defaults, Mapping):
            return data
        filled = dict(defaults)
        for fault_type in rates:
            if fault_type in CHAOS_FAULT_TYPES and fault_type not in filled:
                filled[fault_type] = {}
        for key, value in filled.items():
            if key in CHAOS_FAULT_TYPES and isinstance(value, Mapping) and "type" not in value:
                filled[key] = {**value, "type": key}
        return {**data, "defaults": filled}

    @field_validator("rates")
    @classmethod
    def _rates_add_up(cls, rates: dict[str, float]) -> dict[str, float]:
        total = sum(rates.values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"rates add up to {total:g}; one draw per attempt needs at most 1")
        return rates

    @field_validator("defaults")
    @classmethod
    def _defaults_match_rates(
        cls, defaults: dict[str, BaseFault], info: ValidationInfo
    ) -> dict[str, BaseFault]:
        for key, fault in defaults.items():
            if fault.type != key:
                raise ValueError(f"{key}: type {fault.type!r} differs from its key (leave type out)")
            if "rates" in info.data and key not in info.data["rates"]:
                raise ValueError(f"{key} has no rate in chaos.rates")
        return defaults


class FaultPlan(BaseModel):
    """A validated fault plan; load one with :func:`load_fault_plan` or :meth:`from_dict`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    steps: tuple[FaultStep, ...] = ()
    chaos: ChaosConfig | None = None

    @model_validator(mode="after")
    def _distinct_matches(self) -> FaultPlan:
        first: dict[StepMatch, int] = {}
        for index, step in enumerate(self.steps):
            if step.match in first:
                raise PydanticCustomError(
                    "duplicate_match",
                    "same match as steps[{first}] ({match}): one step per tool, call or call id",
                    {"step": index, "first": first[step.match], "match": step.match.describe()},
                )
            first[step.match] = index
        return self

    @property
    def tools(self) -> frozenset[str]:
        """Tool ids named by the plan's steps (to check against the registered tools)."""
        return frozenset(s.match.tool for s in self.steps if s.match.tool is not None)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<inline>") -> FaultPlan:
        """Validate a plan: the file's mapping (``{"fault_plan": {...}}``) or the plan itself.

        Raises :class:`FaultPlanError` naming ``source``, the step and the field.
        """
        if not (isinstance(data, Mapping) and "fault_plan" in data):
            data = {"fault_plan": data}
        return _validate(data, source, {})


class _PlanFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fault_plan: FaultPlan


class FaultPlanError(ConfigError):
    """Problems in a fault plan; each is one line: ``file:line: steps[1].sequence[0].field: message``."""

    what = "fault plan"


def load_fault_plan(path: str | Path) -> FaultPlan:
    """Load and validate a fault plan file (safe YAML); raises :class:`FaultPlanError`."""
    path = Path(path)
    try:
        parsed = read_yaml(path, "fault_plan", FaultPlanError)
    except FaultPlanError as exc:
        raise FaultPlanError(
            replace(issue, field=_YAML_INDEX.sub(r"[\1]", issue.field.removeprefix("fault_plan.")))
            for issue in exc.issues
        ) from None
    return _validate(parsed.raw, str(path), parsed.lines)


Loc = tuple[str | int, ...]
_YAML_INDEX = re.compile(r"\.(\d+)(?=\.|$)")
"""``steps.1.match`` as the YAML line index spells a path: shown as ``steps[1].match``."""


def _validate(data: Any, source: str, lines: Mapping[Loc, int]) -> FaultPlan:
    try:
        return _PlanFile.model_validate(data).fault_plan
    except ValidationError as exc:
        raise FaultPlanError(_issues(exc, source, lines)) from None


def _strip_tags(loc: Loc) -> tuple[Loc, str | None]:
    """Drop pydantic's union tags (``sequence.0.http_error.status_code``); return the fault type."""
    out: list[str | int] = []
    tag = None
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        previous = loc[i - 1] if i else None
        is_tag = (
            isinstance(part, str)
            and part in FAULT_TYPES
            and (isinstance(previous, int) or (previous == part and i >= 2 and loc[i - 2] == "defaults"))
        )
        if is_tag:
            tag = str(part)
        else:
            out.append(part)
    return tuple(out), tag


def _field_name(loc: Loc) -> str:
    shown = loc[1:] if len(loc) > 1 and loc[0] == "fault_plan" else loc
    text = ""
    for part in shown:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _line_of(loc: Loc, lines: Mapping[Loc, int]) -> int | None:
    if loc[:3] == ("fault_plan", "chaos", "defaults") and len(loc) >= 4 and loc[:4] not in lines:
        # defaults filled in for a rated type: point at its rate
        rate_line = lines.get(("fault_plan", "chaos", "rates", loc[3]))
        if rate_line is not None:
            return rate_line
    return nearest_line(loc, lines)


def _issues(exc: ValidationError, source: str, lines: Mapping[Loc, int]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    seen: set[str] = set()
    expected = ", ".join(FAULT_TYPES)
    errors = exc.errors()
    failed = [tuple(err["loc"]) for err in errors]
    for err in errors:
        raw_loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        kind = err["type"]
        if kind == "too_short" and any(
            len(f) > len(raw_loc) and f[: len(raw_loc)] == raw_loc for f in failed
        ):
            continue  # pydantic counts only the valid items: the items' own errors say it all
        loc, tag = _strip_tags(raw_loc)
        message = err["msg"].removeprefix("Value error, ")
        if kind == "duplicate_match":
            loc = (*loc, "steps", err["ctx"]["step"], "match")
        elif kind == "extra_forbidden":
            valid = _FIELDS_BY_TYPE.get(tag or "")
            message = (
                f"unknown key ({tag} takes {', '.join(valid) or 'no parameters'})"
                if valid is not None
                else "unknown key"
            )
        elif kind == "missing":
            message = "required"
        elif kind == "union_tag_invalid":
            message = f"unknown fault type {err['ctx']['tag']!r}; expected one of: {expected}"
            loc = (*loc, "type")
        elif kind == "union_tag_not_found":
            message = f"missing 'type'; expected one of: {expected}"
        elif kind == "model_attributes_type" and len(loc) >= 2 and loc[-2] == "sequence":
            message = f"a fault is a mapping with a 'type' (one of: {expected})"
        field_name = _field_name(loc)
        if field_name in seen:
            continue  # e.g. an unknown chaos type fails as a key and as a value
        seen.add(field_name)
        issues.append(ConfigIssue(source, _line_of(loc, lines), field_name, message))
    return issues


# --- the injector -------------------------------------------------------------------------


def chaos_unit(
    seed: int, tool_id: str, call: int, attempt: int, turn_id: str | None, call_id: str | None
) -> float:
    """The chaos draw in [0, 1) for one attempt: a hash of its identity, never of the pick order."""
    key = json.dumps([seed, tool_id, call, attempt, turn_id, call_id])
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@dataclass(frozen=True, slots=True)
class FiredFault:
    """One injected fault, for the trace."""

    tool_id: str
    call: int
    attempt: int
    turn_id: str | None
    call_id: str | None
    fault_type: str
    source: str
    """Where it came from: ``steps[0].sequence[1]`` or ``chaos``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class InjectedAttempt(Protocol):
    """What an attempt does instead of (or around) the tool: a fault, or a replayed outcome."""

    @property
    def fault_type(self) -> str | None: ...

    @property
    def is_ok(self) -> bool: ...

    async def run(self, invoke: Invoke) -> Any: ...


class AttemptInjector(Protocol):
    """Consulted by the engine before every attempt; ordinals come from the engine, never timing."""

    def pick(
        self,
        tool_id: str,
        *,
        call: int,
        attempt: int,
        turn_id: str | None = None,
        call_id: str | None = None,
    ) -> InjectedAttempt | None: ...


class FaultInjector:
    """Answers, for each attempt, which fault of a :class:`FaultPlan` applies.

    ``counters`` counts injected faults per type and ``fired`` lists them (``ok`` steps are
    neither). A ``{tool}`` step consumes one element per attempt it governs, in ``pick()``
    order; ``{tool, call}`` and ``{turn, call_id}`` steps index their sequence by attempt.
    """

    _NO_STEP: ClassVar[int] = -1

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.counters: dict[str, int] = {}
        self.fired: list[FiredFault] = []
        self._by_call_id: dict[tuple[str, str, str | None], int] = {}
        self._by_call: dict[tuple[str, int], int] = {}
        self._by_tool: dict[str, int] = {}
        for index, step in enumerate(plan.steps):
            m = step.match
            if m.turn is not None and m.call_id is not None:
                self._by_call_id[(m.turn, m.call_id, m.tool)] = index
            elif m.tool is not None and m.call is not None:
                self._by_call[(m.tool, m.call)] = index
            elif m.tool is not None:
                self._by_tool[m.tool] = index
        self._cursors = [0] * len(plan.steps)
        self._chaos: list[tuple[float, Fault]] = []
        if plan.chaos is not None:
            total = 0.0
            rated = sorted(plan.chaos.rates.items(), key=lambda item: CHAOS_FAULT_TYPES.index(item[0]))
            for fault_type, rate in rated:
                if rate > 0:
                    total += rate
                    self._chaos.append((total, plan.chaos.defaults[fault_type]))

    def reset(self) -> None:
        """Start over: sequence cursors, counters and the fired list (the plan is kept)."""
        self._cursors = [0] * len(self.plan.steps)
        self.counters = {}
        self.fired = []

    def pick(
        self,
        tool_id: str,
        *,
        call: int,
        attempt: int,
        turn_id: str | None = None,
        call_id: str | None = None,
    ) -> Fault | None:
        """The fault for this attempt, an ``ok`` step, or None (no plan applies: run the tool).

        ``call`` is the tool's 1-based call ordinal assigned at launch; ``attempt`` the
        1-based attempt within that call.
        """
        if call < 1 or attempt < 1:
            raise ValueError(f"call and attempt are 1-based (got call={call}, attempt={attempt})")
        fault: Fault | None = None
        source = "chaos"
        index = self._step_for(tool_id, call, turn_id, call_id)
        if index != self._NO_STEP:
            step = self.plan.steps[index]
            if step.match.level == "tool":
                position = self._cursors[index]
                self._cursors[index] = position + 1
            else:
                position = attempt - 1
            if position >= len(step.sequence) and step.repeat:
                position = len(step.sequence) - 1
            if position < len(step.sequence):
                fault = step.sequence[position]
                source = f"steps[{index}].sequence[{position}]"
        if fault is None and self._chaos:
            fault = self._draw(tool_id, call, attempt, turn_id, call_id)
        if fault is not None and not fault.is_ok:
            self._fired(FiredFault(tool_id, call, attempt, turn_id, call_id, fault.fault_type, source))
        return fault

    def tool_call_fault(
        self, tool_id: str, *, turn_id: str | None, call_id: str | None
    ) -> ToolCallFault | None:
        """Before a model's tool call runs: a ``tool_call_fault`` a step puts first for it.

        Only ``{turn, call_id}`` and ``{tool}`` steps can say (the call has no ordinal yet).
        A fault found is consumed, counted and recorded (as attempt 0) like any other.
        """
        index = self._step_for(tool_id, 0, turn_id, call_id)
        if index == self._NO_STEP:
            return None
        step = self.plan.steps[index]
        # call 0 matches no {tool, call} step (ordinals are 1-based): a {tool} or {turn, call_id} one
        position = self._cursors[index] if step.match.level == "tool" else 0
        if position >= len(step.sequence):
            return None
        fault = step.sequence[position]
        if not isinstance(fault, ToolCallFault):
            return None
        if step.match.level == "tool":
            self._cursors[index] = position + 1
        source = f"steps[{index}].sequence[{position}]"
        self._fired(FiredFault(tool_id, 0, 0, turn_id, call_id, fault.fault_type, source))
        return fault

    def _fired(self, fired: FiredFault) -> None:
        """Count and record an injected fault."""
        self.counters[fired.fault_type] = self.counters.get(fired.fault_type, 0) + 1
        self.fired.append(fired)

    def _step_for(self, tool_id: str, call: int, turn_id: str | None, call_id: str | None) -> int:
        if turn_id is not None and call_id is not None and self._by_call_id:
            turn_id = turn_id.rsplit("/", 1)[-1]  # "run-2/plan-trip" is turn plan-trip of a run
            index = self._by_call_id.get((turn_id, call_id, tool_id))
            if index is None:
                index = self._by_call_id.get((turn_id, call_id, None))
            if index is not None:
                return index
        index = self._by_call.get((tool_id, call))
        if index is not None:
            return index
        return self._by_tool.get(tool_id, self._NO_STEP)

    def _draw(
        self, tool_id: str, call: int, attempt: int, turn_id: str | None, call_id: str | None
    ) -> Fault | None:
        assert self.plan.chaos is not None
        u = chaos_unit(self.plan.chaos.seed, tool_id, call, attempt, turn_id, call_id)
        for cumulative, fault in self._chaos:
            if u < cumulative:
                return fault
        return None
