"""The guarded call: breaker check → attempt under the tool's timeout → classify → retry.

Time comes only from anyio (``current_time``, ``sleep``, cancel scopes), wall-clock stamps
from the injectable ``wall_clock`` and jitter from the injectable ``rng``, so the whole
engine runs on a virtual clock in tests.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import random
import re
import time
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
from anyio import CancelScope, current_time

from engine.breaker import AttemptOutcome, BreakerState, CircuitBreaker, Permit, Transition
from engine.bus import EventBus, Subscriber
from engine.classify import Classification, Rule, classify
from engine.errors import ToolError
from engine.events import (
    AttemptFailed,
    AttemptStarted,
    CallFailed,
    CallRejected,
    CallSucceeded,
    Event,
    ToolTimedOut,
    breaker_event_type,
)
from engine.handler import Decision
from engine.kinds import ErrorClass, ErrorKind
from engine.manifest import TOOL_ID_PATTERN, ManifestRegistry, SideEffect, ToolManifest
from engine.retry import plan_retry
from engine.timeouts import TimeoutSupervisor, backend_clock

log = logging.getLogger("tripwire.engine")

ToolFn = Callable[..., Any]
TOOL_ID = re.compile(TOOL_ID_PATTERN)


@dataclass(slots=True)
class CallResult:
    """The outcome of a guarded call: a value, or the :class:`ToolError` that ended it."""

    tool_id: str
    value: Any = None
    error: ToolError | None = None
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


@dataclass(slots=True)
class _Tool:
    name: str
    fn: ToolFn
    is_async: bool
    breaker: CircuitBreaker


_CIRCUIT_OPEN = Classification(
    ErrorKind.CIRCUIT_OPEN, ErrorClass.TRANSIENT, False, Rule.TOOL_ERROR,
    "rejected by an open circuit breaker; no attempt was made",
)  # fmt: skip


class Engine:
    """Runs tool calls with timeouts, retries and a circuit breaker per tool.

    ``manifests`` is a directory of YAML manifests, a :class:`ManifestRegistry`, or an
    iterable of :class:`ToolManifest`. ``async with engine:`` starts the background services
    (the half-open timer and, with ``watch=True``, manifest hot reload); calls also work
    outside it, with breakers half-opening lazily on the next call.
    """

    def __init__(
        self,
        manifests: str | Path | ManifestRegistry | Iterable[ToolManifest] | None = None,
        *,
        watch: bool = False,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        watch_debounce_ms: int = 100,
    ) -> None:
        self._wall = wall_clock
        self.rng = rng if rng is not None else random.Random()
        if isinstance(manifests, ManifestRegistry):
            self.manifests = manifests
        elif isinstance(manifests, str | Path):
            self.manifests = ManifestRegistry.from_directory(manifests, at=wall_clock())
        else:
            self.manifests = ManifestRegistry.from_manifests(manifests or (), at=wall_clock())
        self._watch = watch
        self._watch_debounce_ms = watch_debounce_ms
        self._bus = EventBus()
        self._tools: dict[str, _Tool] = {}
        self._call_ids = itertools.count(1)
        self._timer_wakeup: anyio.Event | None = None
        self._timeouts = TimeoutSupervisor()
        self._now: Callable[[], float] = current_time
        self._stack: AsyncExitStack | None = None

    # --- tools ---------------------------------------------------------------------------

    def register(self, name: str, fn: ToolFn) -> ToolFn:
        """Register ``fn`` as tool ``name``; plain functions run in a worker thread."""
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        if not TOOL_ID.match(name):
            raise ValueError(f"tool name {name!r} must match {TOOL_ID.pattern}")
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )
        breaker = CircuitBreaker(name, self.manifests.get(name).circuit_breaker, self._on_transition)
        self._tools[name] = _Tool(name, fn, is_async, breaker)
        return fn

    @property
    def tools(self) -> list[str]:
        return list(self._tools)

    def breaker(self, tool_id: str) -> CircuitBreaker:
        return self._tool(tool_id).breaker

    def state(self, tool_id: str) -> BreakerState:
        """The breaker's state now, applying a half-open transition that has come due."""
        breaker = self._tool(tool_id).breaker
        breaker.poll(current_time())
        return breaker.state

    def manifest(self, tool_id: str) -> ToolManifest:
        return self.manifests.get(tool_id)

    def _tool(self, tool_id: str) -> _Tool:
        tool = self._tools.get(tool_id)
        if tool is None:
            raise LookupError(f"unknown tool {tool_id!r}; registered: {', '.join(self._tools) or 'none'}")
        return tool

    # --- events --------------------------------------------------------------------------

    def subscribe(
        self, callback: Subscriber, *, direct: bool = False, maxlen: int = 10_000
    ) -> Callable[[], None]:
        """Receive every event; see :class:`engine.bus.EventBus`. Returns an unsubscribe function."""
        return self._bus.subscribe(callback, direct=direct, maxlen=maxlen)

    @property
    def bus(self) -> EventBus:
        return self._bus

    def _emit(self, event: Event) -> None:
        self._bus.emit(event)

    def _on_transition(self, tr: Transition) -> None:
        if tr.to_state is BreakerState.OPEN and self._timer_wakeup is not None:
            self._timer_wakeup.set()
        if not self._bus.active:
            return
        event_type = breaker_event_type(tr.to_state, tr.actor)
        self._bus.emit(
            event_type(
                at=self._wall(),
                t=tr.t,
                tool_id=tr.tool_id,
                from_state=tr.from_state,
                to_state=tr.to_state,
                reason=tr.reason,
                actor=tr.actor,
                consecutive_failures=tr.consecutive_failures,
                half_open_at=tr.half_open_at,
            )
        )

    # --- operator controls ---------------------------------------------------------------

    def trip(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> None:
        """Force the breaker open until reset."""
        self._tool(tool_id).breaker.trip(current_time(), actor=actor, reason=reason)

    def reset(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> None:
        """Close the breaker and clear its counts."""
        self._tool(tool_id).breaker.reset(current_time(), actor=actor, reason=reason)

    def disable(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> None:
        """Admit every call while still counting failures."""
        self._tool(tool_id).breaker.disable(current_time(), actor=actor, reason=reason)

    # --- the guarded call ----------------------------------------------------------------

    async def call(self, tool_id: str, /, **args: Any) -> Any:
        """Call a tool; returns its value or raises :class:`ToolError`."""
        result = await self._run(tool_id, args, None, None)
        if result.error is not None:
            raise result.error
        return result.value

    async def try_call(self, tool_id: str, /, **args: Any) -> CallResult:
        """Like :meth:`call`, but returns a :class:`CallResult` instead of raising."""
        return await self._run(tool_id, args, None, None)

    async def _run(
        self, tool_id: str, args: dict[str, Any], call_id: str | None, turn_id: str | None
    ) -> CallResult:
        if call_id is None:
            call_id = f"c{next(self._call_ids)}"
        tool = self._tools.get(tool_id)
        if tool is None:
            return self._unknown_tool(tool_id, args, call_id, turn_id)
        breaker = tool.breaker
        clock = self._now
        start = now = clock()
        permit = breaker.acquire(now)
        if permit is None:
            return self._rejected(tool, args, call_id, turn_id, now)
        manifest = self.manifests.get(tool_id)  # in force for the whole call, even across reloads
        bus = self._bus
        timeouts = self._timeouts
        timeout_s = manifest.timeout_ms / 1000.0
        attempt = 0
        while True:
            attempt += 1
            attempt_start = now
            deadline = now + timeout_s
            if bus.active:
                bus.emit(AttemptStarted(
                    at=self._wall(), t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                    attempt=attempt, timeout_ms=manifest.timeout_ms, deadline=deadline,
                    probe=permit.probe,
                ))  # fmt: skip
            error: Exception | None = None
            if timeouts.running:
                scope = CancelScope()
                bucket = timeouts.watch(timeout_s, scope, deadline)
            else:
                scope, bucket = CancelScope(deadline=deadline), None
            try:
                with scope:
                    try:
                        if tool.is_async:
                            value = await tool.fn(**args)
                        else:
                            value = await anyio.to_thread.run_sync(
                                partial(tool.fn, **args), abandon_on_cancel=True
                            )
                    except Exception as exc:
                        error = exc
            except BaseException:
                breaker.record(permit, AttemptOutcome.ABANDONED, current_time())  # cancelled from outside
                raise
            finally:
                if bucket is not None:
                    bucket.pop(scope, None)
            now = clock()
            if error is None and not scope.cancelled_caught:
                breaker.record(permit, AttemptOutcome.SUCCEEDED, now)
                if bus.active:
                    bus.emit(CallSucceeded(
                        at=self._wall(), t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                        attempts=attempt, latency_ms=(now - start) * 1000.0,
                    ))  # fmt: skip
                return CallResult(tool_id, value, None, attempt)

            if error is None:  # the deadline cut the attempt off
                error = TimeoutError(f"Tool timeout after {timeout_s:g}s")
                if bus.active:
                    bus.emit(ToolTimedOut(
                        at=self._wall(), t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                        attempt=attempt, timeout_ms=manifest.timeout_ms,
                    ))  # fmt: skip
            classification = classify(error, manifest, now=self._wall)
            breaker.record(permit, _outcome(classification), now)
            decision, reason, delay_s = self._decide(classification, manifest, breaker, attempt, now - start)
            if bus.active:
                bus.emit(AttemptFailed(
                    at=self._wall(), t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                    attempt=attempt, error=_message(error), error_type=type(error).__name__,
                    kind=classification.kind, classification=classification.error_class,
                    rule=classification.rule, reason=classification.reason,
                    status_code=classification.status_code,
                    circuit_breaker_state=breaker.state, retry_count=attempt - 1,
                    decision=decision, decision_reason=reason,
                    delay_ms=delay_s * 1000.0 if decision is Decision.RETRY else None,
                    latency_ms=(now - attempt_start) * 1000.0,
                ))  # fmt: skip
            if decision is not Decision.RETRY:
                return self._failed(
                    tool_id, args, call_id, turn_id, now, attempt, error, classification, reason, start
                )
            await anyio.sleep(delay_s)
            now = clock()
            permit = breaker.acquire(now)
            if permit is None:
                reason = f"retry short-circuited: {breaker.rejection_reason()}"
                return self._failed(
                    tool_id, args, call_id, turn_id, now, attempt, error, _CIRCUIT_OPEN, reason, start
                )

    def _decide(
        self,
        classification: Classification,
        manifest: ToolManifest,
        breaker: CircuitBreaker,
        attempt: int,
        elapsed_s: float,
    ) -> tuple[Decision, str, float]:
        if not classification.retryable:
            return Decision.ESCALATE, f"{classification.error_class} error: not retried", 0.0
        if (
            manifest.side_effect is SideEffect.SIDE_EFFECTING
            and classification.kind.info.ambiguous
            and not manifest.retry_ambiguous
        ):
            return (
                Decision.ESCALATE,
                f"side-effecting tool: not retried after an ambiguous {classification.kind}",
                0.0,
            )
        plan = plan_retry(
            manifest.retry_policy,
            attempts_made=attempt,
            elapsed_s=elapsed_s,
            rng=self.rng,
            retry_after_s=classification.retry_after_s,
        )
        if not plan.retry:
            return Decision.ESCALATE, plan.reason, 0.0
        if breaker.state is BreakerState.OPEN or breaker.state is BreakerState.FORCED_OPEN:
            return Decision.ESCALATE, f"circuit breaker for {breaker.tool_id} is {breaker.state}", 0.0
        return Decision.RETRY, plan.reason, plan.delay_s

    def _failed(
        self,
        tool_id: str,
        args: dict[str, Any],
        call_id: str,
        turn_id: str | None,
        now: float,
        attempts: int,
        error: BaseException,
        classification: Classification,
        reason: str,
        start: float,
    ) -> CallResult:
        final = ToolError(
            classification.kind,
            _message(error),
            tool_id=tool_id,
            original_error=error,
            tool_input=args,
            status_code=classification.status_code,
            retry_after_s=classification.retry_after_s,
            timestamp=self._wall(),
            classification=classification,
            attempts=attempts,
        )
        if self._bus.active:
            self._bus.emit(CallFailed(
                at=final.timestamp or 0.0, t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                attempts=attempts, kind=classification.kind, classification=classification.error_class,
                error=final.message, reason=reason, latency_ms=(now - start) * 1000.0,
            ))  # fmt: skip
        return CallResult(tool_id, None, final, attempts)

    def _rejected(
        self, tool: _Tool, args: dict[str, Any], call_id: str, turn_id: str | None, now: float
    ) -> CallResult:
        """Short-circuited before any attempt: the cheap path, no exception raised."""
        breaker = tool.breaker
        reason = breaker.rejection_reason()
        at = self._wall()
        if self._bus.active:
            self._bus.emit(CallRejected(
                at=at, t=now, tool_id=tool.name, call_id=call_id, turn_id=turn_id,
                state=breaker.state, reason=reason,
            ))  # fmt: skip
        error = ToolError(
            ErrorKind.CIRCUIT_OPEN, reason, tool_id=tool.name, tool_input=args,
            timestamp=at, classification=_CIRCUIT_OPEN,
        )  # fmt: skip
        return CallResult(tool.name, None, error, 0)

    def _unknown_tool(
        self, tool_id: str, args: dict[str, Any], call_id: str, turn_id: str | None
    ) -> CallResult:
        error = ToolError(
            ErrorKind.UNKNOWN_TOOL, f"unknown tool {tool_id!r}", tool_id=tool_id, tool_input=args
        )
        classification = classify(error)
        return self._failed(
            tool_id, args, call_id, turn_id, current_time(), 0, error, classification,
            "the tool does not exist", current_time(),
        )  # fmt: skip

    # --- background services -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            async with AsyncExitStack() as stack:  # unwound if any service fails to start
                self._now = backend_clock()
                stack.callback(setattr, self, "_now", current_time)
                task_group = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(self._bus.flush, 5.0)
                stack.callback(task_group.cancel_scope.cancel)
                await task_group.start(self._timeouts.run)
                await task_group.start(self._half_open_timer)
                if self._watch and self.manifests.directory is not None:
                    await task_group.start(self._watch_manifests)
                self._stack = stack.pop_all()
        except ExceptionGroup as group:  # one service failed to start: raise its own error
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    def close(self) -> None:
        """Stop subscriber threads. The engine object stays usable for inspection."""
        self._bus.close()

    async def _half_open_timer(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Announce HALF_OPEN when a breaker's timer is due, even if no call arrives."""
        task_status.started()
        try:
            while True:
                self._timer_wakeup = wakeup = anyio.Event()
                now = current_time()
                due = None
                for tool in self._tools.values():
                    breaker = tool.breaker
                    breaker.poll(now)
                    if breaker.state is BreakerState.OPEN and breaker.half_open_at is not None:
                        due = breaker.half_open_at if due is None else min(due, breaker.half_open_at)
                with CancelScope(deadline=due if due is not None else float("inf")):
                    await wakeup.wait()
        finally:
            self._timer_wakeup = None

    async def _watch_manifests(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        import watchfiles  # only needed when hot reload is on

        directory = self.manifests.directory
        assert directory is not None
        started = False
        async for changes in watchfiles.awatch(
            directory,
            debounce=self._watch_debounce_ms,
            step=20,
            rust_timeout=100,
            yield_on_timeout=True,
            recursive=False,
        ):
            if not started:
                started = True
                task_status.started()
            paths = {Path(p) for _, p in changes}
            paths = {p for p in paths if self.manifests.is_manifest_file(p)}
            if paths:
                self.reload_manifests(paths)

    def reload_manifests(self, paths: Iterable[Path] | None = None) -> list[Event]:
        """Re-read manifest files (all of them by default) and apply what is valid."""
        registry = self.manifests
        if paths is None:
            known = {Path(e.path) for e in registry.entries.values() if e.path != "<code>"}
            paths = set(registry.manifest_files()) | known | {Path(p) for p in registry.rejected}
        try:
            events = registry.reload(paths, at=self._wall(), t=current_time())
        except Exception:  # the engine never crashes on a manifest
            log.exception("manifest reload failed")
            events = []
        # Defaults changes reach tools without a file of their own: refresh every breaker.
        for tool in self._tools.values():
            tool.breaker.config = registry.get(tool.name).circuit_breaker
        for event in events:
            self._emit(event)
        return events


def _outcome(classification: Classification) -> AttemptOutcome:
    # The tool was invoked: a permanent error is its answer, so the service is up.
    return AttemptOutcome.FAILED if classification.transient else AttemptOutcome.ANSWERED


def _message(error: BaseException) -> str:
    if isinstance(error, ToolError):
        return error.message
    text = str(error)
    return text if text else type(error).__name__


__all__ = ["CallResult", "Engine", "Permit"]
