"""Runs an assistant message's tool calls as one engine turn: exactly one result per call id, in order.

Whatever happens (malformed JSON, an unknown tool, arguments that do not bind, a duplicate id, an
open circuit, a tool timeout, the turn's deadline, a stop), every call gets exactly one result. A
failed call's text (:mod:`engine.llm.model_text`) is redacted by the engine's policy
(:mod:`engine.redaction`), extended by the executor's ``secret_fields`` and the tool's manifest —
the same redacted text the trace keeps.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

import anyio

from engine.errors import ToolError, TurnNotPersisted, jsonable
from engine.events import Event, ToolResultSent
from engine.faults import FaultInjector
from engine.kinds import ErrorKind
from engine.llm.failure_text import alternative_for, retryable_for_model
from engine.llm.model_text import (
    CANCELED_ERROR_TYPE,
    DEFAULT_MAX_ERROR_CHARS,
    MIN_ERROR_CHARS,
    TURN_DEADLINE_ERROR_TYPE,
    format_tool_error_for_llm,
    is_plain_json,
    success_content,
)
from engine.llm.parsing import (
    LLMToolCall,
    parse_anthropic_tool_uses,
    parse_arguments,
    parse_openai_tool_calls,
)
from engine.llm.results import ToolBatch, ToolResultItem
from engine.llm.tool_errors import ToolErrorRegistry, ToolExecutionError, root_error_type
from engine.outcomes import CallOutcome, CallStatus, TurnResult
from engine.redaction import RedactionPolicy
from engine.strategies.idempotency import keying
from engine.strategies.idempotency.keys import key_call
from engine.turn import ToolCall, Turn

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.strategies.idempotency import IdempotencyOptions

log = logging.getLogger("tripwire.llm")

_BINDINGS_LIMIT = 4096

_REFUSED: dict[ErrorKind, str] = {
    ErrorKind.UNKNOWN_TOOL: "no tool of that name is offered: not run",
    ErrorKind.INVALID_PARAMETERS: "the call cannot be passed to the tool as written: not run",
}
"""Why the executor refused a call, by the kind it answered the model with."""


class ToolCallExecutor:
    """Runs an assistant message's tool calls as one engine turn; one result per call, in order.

    Counters ``calls_total`` and ``executed_total`` span every run (a session); ``failed`` applies
    spec-map kinds.turn-failed to the session. Every failed call is recorded in ``registry``.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        deadline_s: float | None = 120.0,
        secret_fields: Iterable[str] = (),
        max_error_chars: int = DEFAULT_MAX_ERROR_CHARS,
        registry: ToolErrorRegistry | None = None,
        tools: Collection[str] | None = None,
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
        self.tools = tools
        """The tools a model may call through this executor (a live collection is read per batch);
        None: every tool the engine has. Any other name is refused as an unknown tool."""
        self.calls_total = 0
        self.executed_total = 0
        self._bindings: dict[tuple[str, tuple[Any, ...]], str | None] = {}
        """Why arguments of these names do not bind to the tool (None: they do), by tool and names."""
        self._bindings_engine: Engine | None = None
        """The engine whose tools ``_bindings`` describes."""

    @property
    def failed(self) -> bool:
        """Over the session: calls were made and none of them executed (spec-map kinds.turn-failed)."""
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
        engine = self.engine
        if self._bindings_engine is not engine:
            self._bindings.clear()
            self._bindings_engine = engine
        turn_id = turn_id if turn_id is not None else engine.runtime.next_turn_id()
        injector = engine.faults
        if isinstance(injector, FaultInjector):
            calls = [self._as_faulted(call, turn_id, injector) for call in calls]
        else:
            calls = list(calls)
        tools = engine.tool_ids if self.tools is None else self.tools
        refused: dict[int, tuple[ErrorKind, str]] = {}
        runnable: list[ToolCall] = []
        seen: set[str] = set()
        for index, call in enumerate(calls):
            why = self._refusal(call, tools, seen)
            seen.add(call.id)
            if why is not None:
                refused[index] = why
            else:
                # A keyed tool's key is the model's tool-call id: re-running the same message re-sends
                # the same key, whatever turn runs it.
                key = call.id if self._keying(call.name) is not None else None
                runnable.append(ToolCall(call.id, call.name, dict(call.arguments or {}), idempotency_key=key))
        result: TurnResult | None = None
        crash: Exception | None = None
        if runnable:
            try:
                turn = Turn(runnable, id=turn_id, deadline_s=self.deadline_s)
                result = await engine.run_turn(turn, stop=stop)
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
        self._announce(items, calls, turn_id, result, refused)
        batch = ToolBatch(items, result)
        self.calls_total += len(items)
        self.executed_total += batch.executed
        return batch

    def _announce(
        self,
        items: list[ToolResultItem],
        calls: list[LLMToolCall],
        turn_id: str,
        result: TurnResult | None,
        refused: dict[int, tuple[ErrorKind, str]],
    ) -> None:
        """What the model receives, as events: an error's exact text (already redacted and capped); a
        result's text made from the result redacted — the model itself gets the tool's own result.
        A call refused before the engine ran it is first refused by the engine (:meth:`Engine.refuse`),
        as an engine call is: counted and announced as ``CallFailed`` with no attempt."""
        engine = self.engine
        trace = result.trace.events if result is not None else None
        at, t = engine.wall_clock(), anyio.current_time()
        redacting = self.redaction.enabled
        policies: dict[str, RedactionPolicy] = {}
        for index, (item, call) in enumerate(zip(items, calls, strict=True)):
            if refused and index in refused:
                self._refuse(item, call, turn_id, result, trace)
            error_type = item.error.error_type if item.error is not None else None
            content = item.content
            outcome = result.outcomes.get(call.id) if result is not None and not item.is_error else None
            if outcome is not None and redacting:
                policy = policies.get(call.name)
                if policy is None:
                    policy = policies[call.name] = self._policy(call.name)
                value = outcome.value
                secrets = policy.secrets_in(call.arguments)
                if is_plain_json(value):
                    # Its JSON copy would be equal and give the same text: the model's text stands
                    # unless redaction changed something — a copy of equal strings changed nothing.
                    # No copy and no second json.dumps: 20 → 16 µs per call in the executor.
                    redacted = policy.value(value, secrets)
                    if redacted is not value and redacted != value:
                        content = success_content(redacted)
                else:  # an object's repr is text to look into too
                    content = success_content(policy.value(jsonable(value), secrets))
            engine.runtime.publish(
                ToolResultSent(
                    at=at, t=t, tool_id=item.tool_name, call_id=item.call_id, turn_id=turn_id,
                    content=content, is_error=item.is_error, status=item.status, error_type=error_type,
                    kind=item.kind,
                ),
                trace,
            )  # fmt: skip

    def _refuse(
        self,
        item: ToolResultItem,
        call: LLMToolCall,
        turn_id: str,
        result: TurnResult | None,
        trace: list[Event] | None,
    ) -> None:
        """The engine's refusal of a call the executor did not run, in the words the model got. A call
        repeating the id of one the turn ran is refused outside the turn: it is not that call."""
        assert item.kind is not None
        assert item.error is not None
        reason = _REFUSED[item.kind]
        in_turn = result is None or call.id not in result.outcomes
        self.engine.refuse(
            call.name, item.kind, item.error.message, reason, args=item.error.tool_input, call_id=call.id,
            turn_id=turn_id if in_turn else None, trace=trace,
        )  # fmt: skip

    def _policy(self, tool: str) -> RedactionPolicy:
        """The executor's policy, extended by the tool manifest's ``secret_fields``."""
        if tool in self.engine.tool_ids:
            fields = self.engine.manifest(tool).secret_fields
            if fields:
                return self.redaction.with_fields(fields)
        return self.redaction

    def _as_faulted(self, call: LLMToolCall, turn_id: str, injector: FaultInjector) -> LLMToolCall:
        """The call as a fault plan's ``tool_call_fault`` corrupts it, or as the model sent it."""
        fault = injector.tool_call_fault(call.name, turn_id=turn_id, call_id=call.id)
        if fault is None:
            return call
        raw = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments or {})
        name, corrupted = fault.corrupt_tool_call(call.name, raw)
        arguments, raw_text, problem = parse_arguments(corrupted, "arguments")
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
        arguments = call.arguments or {}
        options = self._keying(call.name)
        if options is not None:  # bound as the tool is sent them: with its key, if an argument
            arguments = key_call(arguments, options.argument, call.id, None, call.id, self.engine.rng).args
        reason = self._binding_problem(call.name, arguments)
        if reason is not None:
            return ErrorKind.INVALID_PARAMETERS, f"invalid arguments: {reason}"
        return None

    def _keying(self, name: str) -> IdempotencyOptions | None:
        """The tool's ``idempotency`` section, or None (an unknown or unkeyed tool)."""
        tool = self.engine.runtime.tools.get(name)
        return keying(tool.manifest.strategies) if tool is not None else None

    def _binding_problem(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """``engine.check_arguments``, remembered per tool and argument names.

        Binding keyword arguments depends on their names and order only, never on their values, and
        a registered tool never changes: one ``inspect.Signature.bind`` per shape of call, not one
        per call (``bind`` was 10 % of the executor's cost per call)."""
        key = (tool, tuple(arguments))
        try:
            return self._bindings[key]
        except KeyError:
            pass
        reason = self.engine.check_arguments(tool, dict(arguments))
        if len(self._bindings) >= _BINDINGS_LIMIT:
            self._bindings.clear()
        self._bindings[key] = reason
        return reason

    def _from_outcome(self, call: LLMToolCall, outcome: CallOutcome) -> ToolResultItem:
        status = str(outcome.status)
        if outcome.ok:
            content = success_content(outcome.value)
            return ToolResultItem(call.id, call.name, content, False, None, True, None, None, status)
        executed = outcome.executed
        error = outcome.error
        if outcome.status is CallStatus.FAILED and error is not None:
            return self._failure(
                call, error.kind, root_error_type(error), error.message, retryable_for_model(error),
                outcome.served_by, status, executed, error,
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
        alternative = alternative_for(self.engine, call.name, kind, tried)
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
