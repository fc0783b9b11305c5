"""LLM tool calls in, tool-result messages out: exactly one per call id, in input order.

An assistant message's tool calls — OpenAI ``tool_calls`` or Anthropic ``tool_use`` blocks —
are parsed into :class:`LLMToolCall` and run by :class:`ToolCallExecutor` as one engine turn.
Whatever happens (malformed JSON, an unknown tool, arguments that do not bind, a duplicate
id, an open circuit, a tool timeout, the turn's deadline, a stop), every call gets exactly
one result. A failed call's text follows seed 003's format ("Tool Execution Failed / Tool /
Error Type / Message") plus one line of guidance, is stable (no timestamps or ids),
length-capped, and redacted by the engine's policy (:mod:`engine.redaction`), extended by the
executor's ``secret_fields`` and the tool's manifest — the same redacted text the trace keeps.
Executed-tool counting follows
seed 004: only kinds with ``executed=True`` count, and a batch fails only when it had calls
and none executed.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import anyio

from engine.breaker import BreakerState
from engine.classify import classify
from engine.errors import ToolError, TurnNotPersisted, jsonable
from engine.events import ToolResultSent
from engine.faults import FaultInjector
from engine.handler import CALLER_FAULT_KINDS
from engine.kinds import ErrorKind
from engine.outcomes import CallOutcome, CallStatus, TurnResult
from engine.redaction import RedactionPolicy
from engine.turn import ToolCall, Turn

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.llm")

TRUNCATED: Final = "… [truncated]"
DEFAULT_MAX_ERROR_CHARS: Final = 2000
MIN_ERROR_CHARS: Final = 512
"""The smallest cap that always fits the header, the guidance and an alternative."""
TURN_DEADLINE_ERROR_TYPE: Final = "TurnDeadlineExceeded"
CANCELED_ERROR_TYPE: Final = "Canceled"

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
_OPEN_STATES = (BreakerState.OPEN, BreakerState.FORCED_OPEN)


# --- parsing ------------------------------------------------------------------------------


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
        arguments, raw, problem = _parse_arguments(_field(function, "arguments"), "arguments")
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
        arguments, raw, problem = _parse_arguments(_field(block, "input"), "input")
        calls.append(
            LLMToolCall(_call_id(block, index), _name(_field(block, "name")), arguments, raw, problem)
        )
    return calls


def _field(obj: Any, name: str) -> Any:
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


def _parse_arguments(raw: Any, what: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(arguments, raw text, problem): JSON text is decoded; it must hold an object."""
    if raw is None:
        return {}, None, None
    if isinstance(raw, Mapping):
        return dict(raw), None, None
    if isinstance(raw, bytes | bytearray):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str):
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


# --- the text for the model ---------------------------------------------------------------

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
    """Seed 003's block, then a guidance line (and an alternative); at most ``max_chars`` long.

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


# --- errors -------------------------------------------------------------------------------


def _root_error_type(error: BaseException) -> str:
    """The class name of the exception at the root; a bare ToolError names its kind."""
    link: BaseException = error
    while type(link) is ToolError and link.original_error is not None:
        link = link.original_error
    if type(link) is ToolError:
        return str(link.kind)
    if isinstance(link, ToolExecutionError):
        return link.error_type
    return type(link).__name__


class ToolExecutionError(ToolError):
    """Seed 003's structured tool failure; its kind comes from :func:`engine.classify`."""

    def __init__(
        self,
        tool_name: str,
        original_error: BaseException,
        tool_input: Any = None,
        message: str | None = None,
        *,
        error_type: str | None = None,
        at: float | None = None,
    ) -> None:
        classification = classify(original_error)
        inner = original_error if isinstance(original_error, ToolError) else None
        if not message:
            message = inner.message if inner is not None else str(original_error)
        if at is None:
            at = inner.at if inner is not None and inner.at is not None else time.time()
        super().__init__(
            classification.kind,
            message or type(original_error).__name__,
            tool_id=tool_name,
            original_error=original_error,
            tool_input=tool_input,
            status_code=classification.status_code,
            retry_after_s=classification.retry_after_s,
            at=at,
            classification=classification,
            attempts=inner.attempts if inner is not None else 0,
        )
        self._error_type = error_type or _root_error_type(original_error)

    @property
    def error_type(self) -> str:
        """The original exception's class name (seed 003), or the kind for calls that never ran."""
        return self._error_type

    def to_dict(self) -> dict[str, Any]:
        return {"tool_name": self.tool_name, **super().to_dict()}

    def __repr__(self) -> str:
        return f"ToolExecutionError({self.tool_name!r}, {self.error_type}, {self.message!r})"


class ToolErrorRegistry:
    """Seed 003's error registry: entries by ``"tool:ErrorType"``, with counts.

    Counts are exact; at most ``max_entries`` of the newest entries are kept per key.
    """

    def __init__(self, *, max_entries: int = 1000) -> None:
        self.max_entries = max_entries
        self._counts: dict[str, int] = {}
        self._entries: dict[str, deque[dict[str, str]]] = {}
        self._keys_by_tool: dict[str, dict[str, None]] = {}

    def record_error(self, tool_name: str, error: BaseException) -> None:
        """Record one failure: ``{timestamp (ISO), error_type, error_message}``."""
        error_type = _root_error_type(error)
        key = f"{tool_name}:{error_type}"
        at = error.timestamp if isinstance(error, ToolError) else None
        entry = {
            "timestamp": (at or datetime.now(UTC)).isoformat(),
            "error_type": error_type,
            "error_message": str(error),
        }
        self._counts[key] = self._counts.get(key, 0) + 1
        self._entries.setdefault(key, deque(maxlen=self.max_entries)).append(entry)
        self._keys_by_tool.setdefault(tool_name, {})[key] = None

    def get_error_summary(self) -> dict[str, int]:
        """``{"tool:ErrorType": count}`` in first-seen order."""
        return dict(self._counts)

    def get_errors_for_tool(self, tool_name: str) -> dict[str, list[dict[str, str]]]:
        """``{"tool:ErrorType": [entries]}`` for one tool."""
        return {key: list(self._entries[key]) for key in self._keys_by_tool.get(tool_name, {})}

    def clear(self) -> None:
        self._counts.clear()
        self._entries.clear()
        self._keys_by_tool.clear()


# --- results ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolResultItem:
    """The one result for one call id."""

    call_id: str
    tool_name: str
    content: str
    is_error: bool
    kind: ErrorKind | None
    executed: bool
    """Seed 004: did the tool run? Only kinds with ``executed=True`` count."""
    retryable: bool | None
    alternative: str | None
    status: str
    """A :class:`CallStatus` value, or ``"not_run"`` when the executor refused the call."""
    error: ToolExecutionError | None = None

    def to_openai_message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}

    def to_anthropic_block(self) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": self.call_id,
            "content": self.content,
            "is_error": self.is_error,
        }


@dataclass(slots=True)
class ToolBatch:
    """The results of one assistant message's tool calls, in the calls' order."""

    items: list[ToolResultItem]
    turn: TurnResult | None = None

    @property
    def executed(self) -> int:
        return sum(item.executed for item in self.items)

    @property
    def failed(self) -> bool:
        """Seed 004: failed only when there were calls and none of them executed."""
        return bool(self.items) and self.executed == 0

    def to_openai_messages(self) -> list[dict[str, Any]]:
        return [item.to_openai_message() for item in self.items]

    def to_anthropic_message(self) -> dict[str, Any]:
        return {"role": "user", "content": [item.to_anthropic_block() for item in self.items]}


def success_content(value: Any) -> str:
    """A tool's value as text for the model: strings as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):  # circular or non-string keys
        return str(value)


# --- the executor -------------------------------------------------------------------------


class ToolCallExecutor:
    """Runs an assistant message's tool calls as one engine turn; one result per call, in order.

    Counters ``calls_total`` and ``executed_total`` span every run (a session); ``failed`` applies
    seed 004's rule to the session. Every failed call is recorded in ``registry``.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        deadline_s: float | None = 120.0,
        secret_fields: Iterable[str] = (),
        max_error_chars: int = DEFAULT_MAX_ERROR_CHARS,
        registry: ToolErrorRegistry | None = None,
    ) -> None:
        if deadline_s is not None and not deadline_s > 0:
            raise ValueError(f"deadline_s must be positive or None, got {deadline_s!r}")
        if max_error_chars < MIN_ERROR_CHARS:
            raise ValueError(f"max_error_chars must be at least {MIN_ERROR_CHARS}, got {max_error_chars}")
        self.engine = engine
        self.deadline_s = deadline_s
        self.redaction = engine.redaction.with_fields(sorted(secret_fields))
        """The engine's policy, extended by ``secret_fields`` (and, per call, by its tool's manifest)."""
        self.max_error_chars = max_error_chars
        self.registry = registry if registry is not None else ToolErrorRegistry()
        self.calls_total = 0
        self.executed_total = 0

    @property
    def failed(self) -> bool:
        """Seed 004 over the session: calls were made and none of them executed."""
        return self.calls_total > 0 and self.executed_total == 0

    async def run_openai(self, message: Any, *, stop: anyio.Event | None = None) -> list[dict[str, Any]]:
        """``[{"role": "tool", "tool_call_id": …, "content": …}]``, one per call, in order."""
        return (await self.run(parse_openai_tool_calls(message), stop=stop)).to_openai_messages()

    async def run_anthropic(
        self, message_or_blocks: Any, *, stop: anyio.Event | None = None
    ) -> dict[str, Any]:
        """A user message whose content is one ``tool_result`` block per ``tool_use``, in order."""
        calls = parse_anthropic_tool_uses(message_or_blocks)
        return (await self.run(calls, stop=stop)).to_anthropic_message()

    async def run(
        self, calls: Iterable[LLMToolCall], *, stop: anyio.Event | None = None, turn_id: str | None = None
    ) -> ToolBatch:
        """Refuse what cannot run, run the rest as one turn, and answer every call in order.

        ``turn_id`` names the turn (a fresh id by default)."""
        turn_id = turn_id if turn_id is not None else self.engine.next_turn_id()
        calls = [self._as_faulted(call, turn_id) for call in calls]
        tools = self.engine.tool_ids
        refused: dict[int, tuple[ErrorKind, str]] = {}
        runnable: list[ToolCall] = []
        seen: set[str] = set()
        for index, call in enumerate(calls):
            why = self._refusal(call, tools, seen)
            seen.add(call.id)
            if why is not None:
                refused[index] = why
            else:
                runnable.append(ToolCall(call.id, call.name, dict(call.arguments or {})))
        result: TurnResult | None = None
        crash: Exception | None = None
        if runnable:
            try:
                turn = Turn(runnable, id=turn_id, deadline_s=self.deadline_s)
                result = await self.engine.run_turn(turn, stop=stop)
            except TurnNotPersisted:  # the turn ran but is not durable: the caller asked to know
                raise
            except Exception as exc:  # an engine bug must not break the transcript
                log.exception("the engine failed while running %d tool call(s)", len(runnable))
                crash = exc
        items: list[ToolResultItem] = []
        for index, call in enumerate(calls):
            if index in refused:
                kind, reason = refused[index]
                items.append(
                    self._failure(call, kind, str(kind), reason, False, None, "not_run", False, None)
                )
            elif result is not None:
                items.append(self._from_outcome(call, result.outcomes[call.id]))
            else:
                assert crash is not None
                message = f"the engine failed while running this call: {type(crash).__name__}: {crash}"
                items.append(
                    self._failure(
                        call, ErrorKind.INTERNAL_ERROR, type(crash).__name__, message, False, None,
                        str(CallStatus.FAILED), False,
                        ToolError(ErrorKind.INTERNAL_ERROR, message, tool_id=call.name, original_error=crash),
                    )
                )  # fmt: skip
        self._announce(items, calls, turn_id, result)
        batch = ToolBatch(items, result)
        self.calls_total += len(items)
        self.executed_total += batch.executed
        return batch

    def _announce(
        self, items: list[ToolResultItem], calls: list[LLMToolCall], turn_id: str, result: TurnResult | None
    ) -> None:
        """What the model receives, as events: an error's exact text (already redacted and capped); a
        result's text made from the result redacted — the model itself gets the tool's own result."""
        engine = self.engine
        trace = result.trace.events if result is not None else None
        at, t = engine.wall_clock(), anyio.current_time()
        for item, call in zip(items, calls, strict=True):
            error_type = item.error.error_type if item.error is not None else None
            content = item.content
            outcome = result.outcomes.get(call.id) if result is not None and not item.is_error else None
            if outcome is not None and self.redaction.enabled:
                policy = self._policy(call.name)
                result_value = jsonable(outcome.value)  # an object's repr is text to look into too
                content = success_content(policy.value(result_value, policy.secrets_in(call.arguments)))
            engine.publish(
                ToolResultSent(
                    at=at, t=t, tool_id=item.tool_name, call_id=item.call_id, turn_id=turn_id,
                    content=content, is_error=item.is_error, status=item.status, error_type=error_type,
                    kind=item.kind,
                ),
                trace,
            )  # fmt: skip

    def _policy(self, tool: str) -> RedactionPolicy:
        """The executor's policy, extended by the tool manifest's ``secret_fields``."""
        if tool in self.engine.tool_ids:
            fields = self.engine.manifest(tool).secret_fields
            if fields:
                return self.redaction.with_fields(fields)
        return self.redaction

    def _as_faulted(self, call: LLMToolCall, turn_id: str) -> LLMToolCall:
        """The call as a fault plan's ``tool_call_fault`` corrupts it, or as the model sent it."""
        injector = self.engine.faults
        if not isinstance(injector, FaultInjector):
            return call
        fault = injector.tool_call_fault(call.name, turn_id=turn_id, call_id=call.id)
        if fault is None:
            return call
        raw = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments or {})
        name, corrupted = fault.corrupt_tool_call(call.name, raw)
        arguments, raw_text, problem = _parse_arguments(corrupted, "arguments")
        return LLMToolCall(call.id, name, arguments, raw_text, problem)

    def _refusal(
        self, call: LLMToolCall, tools: Collection[str], seen: set[str]
    ) -> tuple[ErrorKind, str] | None:
        """Why ``call`` must not run (kind, one-line message), or None."""
        if call.id in seen:
            return ErrorKind.INVALID_PARAMETERS, (
                "this call repeats the id of an earlier call in the same message and was not run"
            )
        if call.problem is not None:
            return ErrorKind.INVALID_PARAMETERS, call.problem
        if call.name not in tools:
            known = ", ".join(sorted(tools)) or "none"
            return ErrorKind.UNKNOWN_TOOL, f"unknown tool {call.name!r}; available tools: {known}"
        reason = self.engine.check_arguments(call.name, dict(call.arguments or {}))
        if reason is not None:
            return ErrorKind.INVALID_PARAMETERS, f"invalid arguments: {reason}"
        return None

    def _from_outcome(self, call: LLMToolCall, outcome: CallOutcome) -> ToolResultItem:
        status = str(outcome.status)
        if outcome.ok:
            content = success_content(outcome.value)
            return ToolResultItem(call.id, call.name, content, False, None, True, None, None, status)
        executed = outcome.executed
        error = outcome.error
        if outcome.status is CallStatus.FAILED and error is not None:
            retryable = error.classification.retryable if error.classification is not None else None
            if error.kind is ErrorKind.CIRCUIT_OPEN:
                retryable = False
            return self._failure(
                call, error.kind, _root_error_type(error), error.message, retryable, outcome.served_by,
                status, executed, error,
            )  # fmt: skip
        if outcome.status is CallStatus.TIMED_OUT:
            original: BaseException = TimeoutError(outcome.reason)
            return self._failure(
                call, ErrorKind.TIMEOUT, TURN_DEADLINE_ERROR_TYPE, outcome.reason, True, None, status,
                executed, original,
            )  # fmt: skip
        if outcome.status is CallStatus.CANCELED:
            original = ToolError(ErrorKind.CANCELED, outcome.reason, tool_id=call.name)
            return self._failure(
                call, ErrorKind.CANCELED, CANCELED_ERROR_TYPE, outcome.reason, None, None, status, executed,
                original,
            )  # fmt: skip
        # Skipped or escalated (only with dependencies, which LLM calls never have).
        message = outcome.reason or status.replace("_", " ")
        original = ToolError(ErrorKind.EXECUTION_ERROR, message, tool_id=call.name)
        return self._failure(call, None, status, message, None, None, status, executed, original)

    def _failure(
        self,
        call: LLMToolCall,
        kind: ErrorKind | None,
        error_type: str,
        message: str,
        retryable: bool | None,
        tried: str | None,
        status: str,
        executed: bool,
        original: BaseException | None,
    ) -> ToolResultItem:
        policy = self._policy(call.name)
        clean = policy.text(message, policy.secrets_in(call.arguments))
        alternative = self._alternative(call.name, kind, tried)
        content = format_tool_error_for_llm(
            call.name, error_type, clean, kind=kind, retryable=retryable, alternative=alternative,
            max_chars=self.max_error_chars,
        )  # fmt: skip
        if original is None:
            original = ToolError(kind or ErrorKind.EXECUTION_ERROR, clean, tool_id=call.name)
        tool_input = call.arguments if call.arguments is not None else call.raw_arguments
        stamped = isinstance(original, ToolError) and original.at is not None
        error = ToolExecutionError(
            call.name, original, policy.value(tool_input), clean, error_type=error_type,
            at=None if stamped else self.engine.wall_clock(),
        )  # fmt: skip
        self.registry.record_error(call.name, error)
        return ToolResultItem(
            call.id, call.name, content, True, kind, executed, retryable, alternative, status, error
        )

    def _alternative(self, tool: str, kind: ErrorKind | None, tried: str | None) -> str | None:
        """The first alternative not yet tried whose breaker is not open, for tool-side failures."""
        if kind is None or kind in CALLER_FAULT_KINDS:
            return None
        engine = self.engine
        registered = engine.tool_ids
        if tool not in registered:
            return None
        for name in engine.manifest(tool).alternatives:
            if name in (tool, tried) or name not in registered:
                continue
            if engine.state(name) not in _OPEN_STATES:
                return name
        return None


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
    "format_tool_error_for_llm",
    "guidance_for",
    "parse_anthropic_tool_uses",
    "parse_openai_tool_calls",
    "success_content",
]
