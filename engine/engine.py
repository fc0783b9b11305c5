"""The guarded call: breaker check → attempt under the tool's timeout → classify → decide.

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
from collections.abc import Callable, Collection, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

import anyio
from anyio import CancelScope, current_time
from anyio.abc import TaskGroup

from engine.breaker import AttemptOutcome, BreakerState, CircuitBreaker, Transition
from engine.bus import EventBus, Subscriber
from engine.cancellation import is_stray_cancellation, stray_cancellation_error
from engine.classify import Classification, Rule, classify
from engine.clock import backend_cancel_scope, backend_clock, backend_task_group
from engine.errors import ToolError, TraceStoreError, jsonable
from engine.events import (
    AlternativeUsed,
    AttemptFailed,
    AttemptStarted,
    CallFailed,
    CallRejected,
    CallSucceeded,
    Event,
    HandlerFailed,
    ToolTimedOut,
    allocate,
    breaker_event_type,
)
from engine.faults import StreamTruncateFault
from engine.handler import (
    MISSING,
    Decision,
    DefaultErrorHandler,
    ErrorHandler,
    FailureContext,
    HandlerDecision,
    HandlerLike,
    as_handler,
    resend_unsafe,
)
from engine.kinds import ErrorClass, ErrorKind
from engine.manifest import MAX_MANIFEST_BYTES, TOOL_ID_PATTERN, ManifestFile, ManifestRegistry, ToolManifest
from engine.metrics import MetricsRegistry, ToolMetrics, ToolStats
from engine.redaction import RedactionPolicy
from engine.retry import RetryPlan, plan_retry
from engine.streams import ToolStream, collect, open_stream
from engine.timeouts import TimeoutSupervisor
from engine.watch import DEFAULT_SETTLE_MS, ManifestWatcher

if TYPE_CHECKING:
    from engine.faults import AttemptInjector, InjectedAttempt
    from engine.outcomes import TurnResult
    from engine.runner import TurnRunner
    from engine.turn import Turn

log = logging.getLogger("tripwire.engine")

ToolFn = Callable[..., Any]
TOOL_ID = re.compile(TOOL_ID_PATTERN)


class TurnRecorder(Protocol):
    async def turn_finished(self, turn_id: str) -> TraceStoreError | None:
        """Wait until the turn is durable; the store's error (naming its real cause) when it cannot be."""
        ...


@dataclass(slots=True)
class CallResult:
    """The outcome of a guarded call.

    ``value`` on success; ``error`` (a :class:`ToolError`) when the call failed. A partial
    success has both: the partial value and the error that cut it short.
    """

    tool_id: str
    value: Any = None
    error: ToolError | None = None
    attempts: int = 0
    served_by: str | None = None
    """The alternative tool that produced the result, when the handler routed the call."""
    decision: Decision | None = None
    """The handler's final decision when the call did not simply succeed."""
    reason: str = ""
    """Why that decision was taken."""

    @property
    def ok(self) -> bool:
        return self.error is None or self.decision is Decision.PARTIAL_SUCCESS

    @property
    def partial(self) -> bool:
        return self.decision is Decision.PARTIAL_SUCCESS

    def unwrap(self) -> Any:
        if self.error is not None and not self.partial:
            raise self.error
        return self.value


@dataclass(slots=True)
class CallContext:
    """What a turn knows about one of its calls; standalone calls run without one."""

    call_id: str
    turn_id: str | None = None
    deadline: float | None = None
    """Engine time at which the turn ends."""
    optional: bool = False
    dependants: tuple[str, ...] = ()
    trace: list[Event] | None = None
    """Where this call's events are recorded, besides the bus."""
    seed: str | None = None
    """With the call id, seeds this call's jitter: retries never depend on scheduling order."""
    call_ordinal: int = 0
    """The tool's call number, assigned at launch (fault plans key on it)."""
    tried: tuple[str, ...] = ()
    """Tools already tried for this call (alternatives never loop)."""
    _rng: random.Random | None = field(default=None, repr=False)

    def rng(self, fallback: random.Random) -> random.Random:
        if self.seed is None:
            return fallback
        if self._rng is None:
            self._rng = random.Random(f"{self.seed}:{self.call_id}")
        return self._rng


@dataclass(slots=True)
class _Tool:
    name: str
    fn: ToolFn
    is_async: bool
    """A coroutine function: awaited directly (the hot path)."""
    is_stream: bool
    breaker: CircuitBreaker
    metrics: ToolMetrics
    manifest: ToolManifest
    """The manifest in force; replaced (never mutated) on reload."""
    calls: int = 0
    """Calls launched so far (the call ordinal of the next one, minus one)."""
    signature: inspect.Signature | None = None


@dataclass(slots=True)
class _CallRun:
    """One call's state once it needs a decision (a failure or a rejection).

    Built only then: the success path allocates nothing beyond its result.
    """

    tool: _Tool
    manifest: ToolManifest
    args: dict[str, Any]
    ctx: CallContext | None
    call_id: str
    turn_id: str | None
    trace: list[Event] | None
    start: float
    handler: ErrorHandler | None
    """The call's own handler, normalized (see :func:`as_handler`); None defers to the engine's."""
    secrets: tuple[str, ...] | None = None
    """The values of the call's secret arguments, looked for in its error texts; found when first needed."""
    scrubbed: tuple[str, str] = ("", "")
    """The last text scrubbed and what it became: the last attempt's error and the call's are one."""


_Cause = tuple[list[Event] | None, str | None, str | None]
"""The call behind a breaker operation: its turn's trace, call id and turn id."""
_NO_CAUSE: _Cause = (None, None, None)

_CIRCUIT_OPEN = Classification(
    ErrorKind.CIRCUIT_OPEN, ErrorClass.TRANSIENT, False, Rule.TOOL_ERROR,
    "rejected by an open circuit breaker; no attempt was made",
)  # fmt: skip
_NO_RETRY = RetryPlan(False, 0.0, "not retryable")
_DEFAULT_HANDLER = DefaultErrorHandler()


class Engine:
    """Runs tool calls with timeouts, retries, a circuit breaker per tool and an error handler.

    ``manifests`` is a directory of YAML manifests, a :class:`ManifestRegistry`, or an
    iterable of :class:`ToolManifest`. ``async with engine:`` starts the background services
    (the timeout supervisor, the half-open timer and, with ``watch=True``, manifest hot
    reload); calls also work outside it, with breakers half-opening lazily on the next call.
    ``handler`` replaces the default error handler; ``faults`` injects a fault plan.
    ``watch_settle_ms``: how long a changed manifest must stay the same before it applies;
    ``manifest_max_bytes``: manifest files larger than this are refused unread. ``redaction``
    decides what events may not hold (see :mod:`engine.redaction`; a fresh default policy unless
    given, extended by each tool manifest's ``secret_fields``); ``RedactionPolicy.off()`` is logged.
    """

    def __init__(
        self,
        manifests: str | Path | ManifestRegistry | Iterable[ToolManifest] | None = None,
        *,
        watch: bool = False,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        handler: HandlerLike | None = None,
        faults: AttemptInjector | None = None,
        record: bool = False,
        watch_debounce_ms: int = 100,
        watch_settle_ms: float = DEFAULT_SETTLE_MS,
        manifest_max_bytes: int = MAX_MANIFEST_BYTES,
        redaction: RedactionPolicy | None = None,
    ) -> None:
        self.wall_clock = wall_clock
        self.redaction = redaction if redaction is not None else RedactionPolicy()
        """Applied where events are made: every consumer of an event sees the same redacted value."""
        if not self.redaction.enabled:
            log.warning(
                "redaction is off: secrets in arguments, errors and results are recorded in plain text"
            )
        self.rng = rng if rng is not None else random.Random()
        if isinstance(manifests, ManifestRegistry):
            self.manifests = manifests
        elif isinstance(manifests, str | Path):
            self.manifests = ManifestRegistry.from_directory(
                manifests, at=wall_clock(), max_bytes=manifest_max_bytes
            )
        else:
            self.manifests = ManifestRegistry.from_manifests(manifests or (), at=wall_clock())
        self.handler = as_handler(handler)
        self.faults = faults
        self.recorder: TurnRecorder | None = None
        """Set by a trace recorder that makes each turn durable before ``run_turn`` returns."""
        self.record = record
        """Recording mode: results go into ``CallSucceeded.value`` and turns note the breakers
        and manifests they started with, so a stored turn can be replayed."""
        self.metrics = MetricsRegistry()
        self._watch = watch
        self._watch_debounce_ms = watch_debounce_ms
        self._watch_settle_ms = watch_settle_ms
        self._bus = EventBus()
        self._tools: dict[str, _Tool] = {}
        self._call_ids = itertools.count(1)
        # The call whose breaker operation is under way: its trace gets the transition, and the
        # transition names it. Set only around breaker operations, which never await.
        self._cause: _Cause | None = None
        self._timer_wakeup: anyio.Event | None = None
        self.timeouts = TimeoutSupervisor()
        self.clock: Callable[[], float] = current_time
        """Engine time: ``anyio.current_time``, or the same clock read directly while the engine runs."""
        self.new_task_group: Callable[[], TaskGroup] = anyio.create_task_group
        """Makes turns' task groups: the running backend's own factory while the engine runs."""
        self._new_scope: Callable[[], CancelScope] = CancelScope
        self._stack: AsyncExitStack | None = None
        from engine.runner import TurnRunner  # turns build on the guarded call: imported late

        self._turn_runner: type[TurnRunner] = TurnRunner

    # --- tools ---------------------------------------------------------------------------

    def register(self, name: str, fn: ToolFn) -> ToolFn:
        """Register ``fn`` as tool ``name``; plain functions run in a worker thread."""
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        if not TOOL_ID.match(name):
            raise ValueError(f"tool name {name!r} must match {TOOL_ID.pattern}")
        call = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count too
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
        is_stream = inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(call)
        manifest = self.manifests.get(name)
        breaker = CircuitBreaker(name, manifest.circuit_breaker, self._on_transition)
        self._tools[name] = _Tool(name, fn, is_async, is_stream, breaker, self.metrics.tool(name), manifest)
        return fn

    @property
    def tools(self) -> list[str]:
        return list(self._tools)

    @property
    def tool_ids(self) -> Collection[str]:
        """A live, read-only view of the registered tool ids (cheap membership tests)."""
        return self._tools.keys()

    def breaker(self, tool_id: str) -> CircuitBreaker:
        return self._tool(tool_id).breaker

    def state(self, tool_id: str) -> BreakerState:
        """The breaker's state now, applying a half-open transition that has come due."""
        breaker = self._tool(tool_id).breaker
        breaker.poll(current_time())
        return breaker.state

    def manifest(self, tool_id: str) -> ToolManifest:
        tool = self._tools.get(tool_id)
        return tool.manifest if tool is not None else self.manifests.get(tool_id)

    def stats(self, now: float | None = None) -> dict[str, ToolStats]:
        """Per-tool metrics over the engine's life and the rolling window: one snapshot.

        ``now`` is engine time; by default the running loop's clock.
        """
        return self.metrics.snapshot(current_time() if now is None else now)

    def check_arguments(self, tool_id: str, args: dict[str, Any]) -> str | None:
        """Why ``args`` cannot be passed to the tool, on one line, or None if they can."""
        tool = self._tool(tool_id)
        if tool.signature is None:
            try:
                tool.signature = inspect.signature(tool.fn)
            except (TypeError, ValueError):  # some builtins have no signature: let the call decide
                return None
        try:
            tool.signature.bind(**args)
        except TypeError as exc:
            return str(exc)
        return None

    def next_call_ordinal(self, tool_id: str) -> int:
        """Number a call of ``tool_id`` as it is launched (fault plans key on it)."""
        tool = self._tools.get(tool_id) or self._tool(tool_id)
        tool.calls += 1
        return tool.calls

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

    def redaction_for(self, tool_id: str) -> RedactionPolicy:
        """The engine's redaction policy extended by the tool manifest's ``secret_fields``."""
        tool = self._tools.get(tool_id)
        if tool is None or not tool.manifest.secret_fields:
            return self.redaction
        return self.redaction.with_fields(tool.manifest.secret_fields)

    def _scrub(self, run: _CallRun, text: str) -> str:
        """A call's free text (an error, a handler's reason) as its events may hold it."""
        policy = self.redaction
        if not policy.enabled:
            return text
        if run.manifest.secret_fields:
            policy = policy.with_fields(run.manifest.secret_fields)
        if run.scrubbed[0] == text:
            return run.scrubbed[1]
        if run.secrets is None:
            run.secrets = policy.secrets_in(run.args) if run.args else ()
        clean = policy.text(text, run.secrets)
        run.scrubbed = (text, clean)
        return clean

    def _scrub_reason(self, run: _CallRun, reason: str) -> str:
        """A decision's reason: the engine's own words are safe; a custom handler's are scrubbed."""
        return reason if run.handler is None and self.handler is None else self._scrub(run, reason)

    def publish(self, event: Event, trace: list[Event] | None = None) -> None:
        """Deliver ``event`` to subscribers and, when given, to a turn's trace."""
        if trace is not None:
            trace.append(event)
        if self._bus.active:
            self._bus.emit(event)

    def _on_transition(self, tr: Transition) -> None:
        if tr.to_state is BreakerState.OPEN:
            self._tools[tr.tool_id].metrics.on_breaker_opened(tr.t)
            if self._timer_wakeup is not None:
                self._timer_wakeup.set()
        trace, call_id, turn_id = self._cause or _NO_CAUSE
        if not self._bus.active and trace is None:
            return
        event_type = breaker_event_type(tr.to_state, tr.actor)
        self.publish(
            event_type(
                at=self.wall_clock(),
                t=tr.t,
                tool_id=tr.tool_id,
                from_state=tr.from_state,
                to_state=tr.to_state,
                reason=tr.reason,
                actor=tr.actor,
                consecutive_failures=tr.consecutive_failures,
                half_open_at=tr.half_open_at,
                call_id=call_id,
                turn_id=turn_id,
            ),
            trace,
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

    # --- calls and turns -----------------------------------------------------------------

    async def call(self, tool_id: str, /, **args: Any) -> Any:
        """Call a tool; returns its value (or a partial result) or raises :class:`ToolError`."""
        return (await self.execute(tool_id, args)).unwrap()

    async def try_call(self, tool_id: str, /, **args: Any) -> CallResult:
        """Like :meth:`call`, but returns a :class:`CallResult` instead of raising."""
        return await self.execute(tool_id, args)

    async def run_turn(
        self,
        turn: Turn,
        *,
        stop: anyio.Event | None = None,
        handler: HandlerLike | None = None,
        seed: str | None = None,
    ) -> TurnResult:
        """Run a turn's calls in dependency order; see :mod:`engine.runner`.

        ``seed`` fixes the calls' jitter (a replay passes the recorded one).
        """
        return await self._turn_runner(self, turn, stop=stop, handler=as_handler(handler), seed=seed).run()

    def starting_state(self, tool_ids: Iterable[str], now: float) -> tuple[dict[str, Any], dict[str, str]]:
        """Breaker snapshots and manifest digests of ``tool_ids`` and their alternatives."""
        seen: dict[str, None] = {}
        pending = list(tool_ids)
        while pending:
            name = pending.pop()
            if name in seen or name not in self._tools:
                continue
            seen[name] = None
            pending += self._tools[name].manifest.alternatives
        breakers = {name: self._tools[name].breaker.snapshot(now) for name in seen}
        manifests = {name: self.manifests.digest(name) for name in seen}
        return breakers, manifests

    def next_turn_id(self) -> str:
        """A fresh turn id, unique across runs (drawn from ``rng``: reproducible when it is seeded)."""
        return f"t{self.rng.getrandbits(48):012x}"

    async def execute(
        self,
        tool_id: str,
        args: dict[str, Any],
        ctx: CallContext | None = None,
        handler: HandlerLike | None = None,
        *,
        opening_stream: bool = False,
    ) -> CallResult:
        """Run one guarded call, within a turn's :class:`CallContext` when given.

        A streaming tool's chunks are collected into a list, unless ``opening_stream``: then
        the result is the open stream with its first chunk (see :mod:`engine.streams`).
        """
        if ctx is None:
            call_id, turn_id, trace, deadline = self.new_call_id(), None, None, None
        else:
            call_id, turn_id, trace, deadline = ctx.call_id, ctx.turn_id, ctx.trace, ctx.deadline
        tool = self._tools.get(tool_id)
        if tool is None:
            return self._unknown_tool(tool_id, args, call_id, turn_id, trace)
        cause = (trace, call_id, turn_id)
        breaker = tool.breaker
        metrics = tool.metrics
        clock = self.clock
        start = now = clock()
        metrics.on_call(now)
        if trace is None:
            permit = breaker.acquire(now)
        else:  # a transition here belongs in the turn's trace too
            self._cause = cause
            permit = breaker.acquire(now)
            self._cause = None
        manifest = tool.manifest  # in force for the whole call, even across reloads
        if permit is None:
            rejected = self._rejected(tool, args, ctx, call_id, turn_id, trace, now)
            if not manifest.alternatives and handler is None and self.handler is None:
                return rejected  # nothing could change the outcome: skip the handler
            state = _CallRun(tool, manifest, args, ctx, call_id, turn_id, trace, start, as_handler(handler))
            return await self._after_rejection(state, rejected, now)
        bus = self._bus
        faults = self.faults
        if ctx is not None and ctx.call_ordinal:
            ordinal = ctx.call_ordinal
        elif faults is not None:
            tool.calls += 1
            ordinal = tool.calls
        else:
            ordinal = 0
        timeouts = self.timeouts
        new_scope = self._new_scope
        timeout_s = manifest.timeout_ms / 1000.0
        run: _CallRun | None = None
        attempt = 0
        while True:
            attempt += 1
            attempt_start = now
            cutoff = now + timeout_s
            observed = trace is not None or bus.active
            fault = None
            if faults is not None:
                fault = faults.pick(tool_id, call=ordinal, attempt=attempt, turn_id=turn_id, call_id=call_id)
            fault_type = None if fault is None or fault.is_ok else fault.fault_type
            if observed:
                event = allocate(AttemptStarted)
                AttemptStarted.__init__(
                    event, at=self.wall_clock(), t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                    attempt=attempt, timeout_ms=manifest.timeout_ms,
                    deadline=cutoff if deadline is None or cutoff < deadline else deadline,
                    probe=permit.probe, fault_type=fault_type,
                )  # fmt: skip
                if trace is not None:
                    trace.append(event)
                if bus.active:
                    bus.emit(event)
            error: Exception | None = None
            if timeouts.running:
                scope = new_scope()
                bucket = timeouts.watch(timeout_s, scope, cutoff)
            else:
                scope, bucket = CancelScope(deadline=cutoff), None
            try:
                with scope:
                    try:
                        if fault is not None and not (
                            tool.is_stream and isinstance(fault, StreamTruncateFault)
                        ):
                            value = await fault.run(partial(self._invoke, tool, args, opening_stream))
                        elif tool.is_async:
                            value = await tool.fn(**args)
                        else:  # plain, streaming, or a stream cut short by a stream_truncate fault
                            value = await self._invoke(tool, args, opening_stream, fault)
                    except Exception as exc:
                        error = exc
                    except BaseException as exc:
                        if not is_stray_cancellation(exc):
                            raise
                        error = stray_cancellation_error(exc, tool_id)
            except BaseException:  # cancelled from outside (the turn's deadline, a stop): no evidence
                breaker.record(permit, AttemptOutcome.ABANDONED, current_time())
                raise
            finally:
                if bucket is not None:
                    bucket.pop(scope, None)
            now = clock()
            if error is None and not scope.cancelled_caught:
                if trace is None:
                    breaker.record(permit, AttemptOutcome.SUCCEEDED, now)
                else:
                    self._cause = cause
                    breaker.record(permit, AttemptOutcome.SUCCEEDED, now)
                    self._cause = None
                metrics.on_success(now, now - attempt_start, retried=attempt > 1)
                if observed:
                    succeeded = allocate(CallSucceeded)
                    CallSucceeded.__init__(
                        succeeded, at=self.wall_clock(), t=now, tool_id=tool_id, call_id=call_id,
                        turn_id=turn_id, attempts=attempt, latency_ms=(now - start) * 1000.0,
                        attempt_ms=(now - attempt_start) * 1000.0,
                        value=self._recorded(manifest, args, value) if self.record else None,
                    )  # fmt: skip
                    if trace is not None:
                        trace.append(succeeded)
                    if bus.active:
                        bus.emit(succeeded)
                return CallResult(tool_id, value, None, attempt)

            if error is None:  # the deadline cut the attempt off
                error = TimeoutError(f"Tool timeout after {timeout_s:g}s")
                if observed:
                    self.publish(
                        ToolTimedOut(
                            at=self.wall_clock(), t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                            attempt=attempt, timeout_ms=manifest.timeout_ms,
                        ),
                        trace,
                    )  # fmt: skip
            classification = classify(error, manifest, now=self.wall_clock)
            transient = classification.transient
            self._cause = cause
            # The tool was invoked: a permanent error is its answer, so the service is up.
            breaker.record(permit, AttemptOutcome.FAILED if transient else AttemptOutcome.ANSWERED, now)
            self._cause = None
            metrics.on_attempt_failed(
                now,
                now - attempt_start,
                transient=transient,
                timed_out=classification.kind is ErrorKind.TIMEOUT,
            )
            if run is None:
                run = _CallRun(tool, manifest, args, ctx, call_id, turn_id, trace, start, as_handler(handler))
            partial_result = _partial_result_of(error)
            decided = self._decide(run, error, classification, attempt, now, partial_result)
            if observed:
                failed = allocate(AttemptFailed)
                AttemptFailed.__init__(
                    failed, at=self.wall_clock(), t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id,
                    attempt=attempt, error=self._scrub(run, _message(error)), error_type=type(error).__name__,
                    kind=classification.kind, classification=classification.error_class,
                    rule=classification.rule, reason=classification.reason,
                    status_code=classification.status_code,
                    circuit_breaker_state=breaker.state, retry_count=attempt - 1,
                    decision=decided.decision, decision_reason=self._scrub_reason(run, decided.reason),
                    delay_ms=decided.delay_s * 1000.0 if decided.decision is Decision.RETRY else None,
                    latency_ms=(now - attempt_start) * 1000.0, fault_type=fault_type,
                    retryable=classification.retryable, retry_after_s=classification.retry_after_s,
                    has_partial=partial_result is not MISSING,
                    consecutive_failures=breaker.consecutive_failures,
                )  # fmt: skip
                self.publish(failed, trace)
            if decided.decision is not Decision.RETRY:
                return await self._conclude(run, now, attempt, error, classification, decided, partial_result)
            if decided.delay_s > 0:
                await anyio.sleep(decided.delay_s)
            now = clock()
            self._cause = cause
            permit = breaker.acquire(now)
            self._cause = None
            if permit is None:
                reason = f"retry short-circuited: {breaker.rejection_reason()}"
                shorted = HandlerDecision(Decision.ESCALATE, reason)
                return await self._conclude(run, now, attempt, error, _CIRCUIT_OPEN, shorted, partial_result)
            metrics.on_retry(now)

    async def _invoke(
        self,
        tool: _Tool,
        args: dict[str, Any],
        opening_stream: bool = False,
        fault: InjectedAttempt | None = None,
    ) -> Any:
        if tool.is_stream:
            chunks = tool.fn(**args)
            if isinstance(fault, StreamTruncateFault):
                chunks = fault.wrap_stream(chunks)
            return await (open_stream(chunks) if opening_stream else collect(chunks))
        if tool.is_async:
            return await tool.fn(**args)
        return await anyio.to_thread.run_sync(partial(tool.fn, **args), abandon_on_cancel=True)

    def _recorded(self, manifest: ToolManifest, args: dict[str, Any], value: Any) -> Any:
        """A result as ``CallSucceeded.value`` records it: JSON-safe and redacted (arguments' secret
        values included, wherever they show)."""
        policy = self.redaction
        if not policy.enabled:
            return jsonable(value)
        if manifest.secret_fields:
            policy = policy.with_fields(manifest.secret_fields)
        return policy.value(jsonable(value), policy.secrets_in(args))

    def stream(self, tool_id: str, /, **args: Any) -> ToolStream:
        """Consume a streaming tool chunk by chunk: ``async with engine.stream(...) as chunks``."""
        tool = self._tool(tool_id)
        if not tool.is_stream:
            raise TypeError(
                f"tool {tool_id!r} is not a streaming tool (register an async generator function)"
            )
        return ToolStream(self, tool_id, args, CallContext(self.new_call_id()))

    def new_call_id(self) -> str:
        return f"c{next(self._call_ids)}"

    # --- decisions -----------------------------------------------------------------------

    def _decide(
        self,
        run: _CallRun,
        error: BaseException,
        classification: Classification,
        attempt: int,
        now: float,
        partial_result: Any,
    ) -> HandlerDecision:
        """Ask the handler what to do about a failure; ``partial_result`` is what ``error`` carries."""
        ctx, manifest, tool = run.ctx, run.manifest, run.tool
        elapsed_s = now - run.start
        deadline = ctx.deadline if ctx is not None else None
        remaining = deadline - now if deadline is not None else None
        if classification.retryable:
            policy = manifest.retry_policy
            # A call's own Random costs ~5 µs to seed, and the policy draws from it only to jitter.
            rng = ctx.rng(self.rng) if ctx is not None and policy.jitter_percent else self.rng
            plan = plan_retry(
                policy,
                attempts_made=attempt,
                elapsed_s=elapsed_s,
                rng=rng,
                retry_after_s=classification.retry_after_s,
                remaining_s=remaining,
            )
        else:
            plan = _NO_RETRY
        optional = ctx.optional if ctx is not None else False
        alternatives = self._available_alternatives(manifest, ctx, now) if manifest.alternatives else ()
        custom = run.handler or self.handler
        if custom is None:  # the default rules alone: no FailureContext to build
            return _DEFAULT_HANDLER.decide_on(
                tool_id=tool.name,
                classification=classification,
                retry_plan=plan,
                breaker_state=tool.breaker.state,
                resend_unsafe=resend_unsafe(manifest, classification.kind),
                partial_result=partial_result,
                alternatives=alternatives,
                optional=optional,
            )
        failure = FailureContext(
            tool_id=tool.name,
            call_id=run.call_id,
            turn_id=run.turn_id,
            attempt=attempt,
            error=error,
            classification=classification,
            breaker_state=tool.breaker.state,
            manifest=manifest,
            retry_plan=plan,
            elapsed_s=elapsed_s,
            remaining_s=remaining,
            optional=optional,
            dependants=ctx.dependants if ctx is not None else (),
            alternatives=alternatives,
            partial_result=partial_result,
        )
        return self._ask_handler(failure, custom, run, now)

    def _ask_handler(
        self, failure: FailureContext, custom: ErrorHandler, run: _CallRun, now: float
    ) -> HandlerDecision:
        """The custom handler's decision within the engine's hard limits, else the default's."""
        try:
            decided = custom.decide(failure)
        except Exception as exc:
            problem = self._scrub(run, f"{type(exc).__name__}: {exc}")
            log.warning("error handler %r failed: %s", custom, problem)
            default = _DEFAULT_HANDLER.decide(failure)
            self.publish(
                HandlerFailed(
                    at=self.wall_clock(), t=now, tool_id=failure.tool_id, call_id=failure.call_id,
                    turn_id=failure.turn_id, error=problem, fallback=default.decision,
                ),
                run.trace,
            )  # fmt: skip
            return default
        if decided is None:
            return _DEFAULT_HANDLER.decide(failure)
        refusal = self._refuse(decided, failure)
        if refusal:
            default = _DEFAULT_HANDLER.decide(failure)
            return HandlerDecision(
                default.decision, f"{refusal}; {default.reason}", default.delay_s, default.alternative
            )
        return decided

    def _refuse(self, decided: HandlerDecision, failure: FailureContext) -> str:
        """Why the engine overrules a custom decision, or '' when it stands."""
        resending = decided.decision in (Decision.RETRY, Decision.ALTERNATIVE)
        if resending and failure.resend_unsafe:
            return f"handler's {decided.decision} refused: side-effecting call after an ambiguous failure"
        if decided.decision is Decision.RETRY:
            policy = failure.manifest.retry_policy
            if failure.attempt >= policy.max_attempts:
                return f"handler's retry refused: max_attempts ({policy.max_attempts}) reached"
            if failure.remaining_s is not None and decided.delay_s >= failure.remaining_s:
                return "handler's retry refused: it would start after the turn's deadline"
        if decided.decision is Decision.ALTERNATIVE and decided.alternative not in failure.alternatives:
            return f"handler's alternative {decided.alternative!r} refused: not an available alternative"
        if decided.decision is Decision.PARTIAL_SUCCESS and failure.partial_result is MISSING:
            return "handler's partial success refused: the error carries no partial result"
        return ""

    def _available_alternatives(
        self, manifest: ToolManifest, ctx: CallContext | None, now: float
    ) -> tuple[str, ...]:
        """The manifest's alternatives not yet tried whose breakers admit a call; callers skip
        manifests without alternatives."""
        tried = (*ctx.tried, manifest.id) if ctx is not None else (manifest.id,)
        return tuple(
            name
            for name in manifest.alternatives
            if name not in tried and name in self._tools and self._tools[name].breaker.would_admit(now)
        )

    async def _conclude(
        self,
        run: _CallRun,
        now: float,
        attempts: int,
        error: BaseException,
        classification: Classification,
        decided: HandlerDecision,
        partial_result: Any,
    ) -> CallResult:
        """Carry out a decision other than retry; ``partial_result`` is what ``error`` carries."""
        tool, call_id, turn_id, trace, start = run.tool, run.call_id, run.turn_id, run.trace, run.start
        final = ToolError(
            classification.kind,
            _message(error),
            tool_id=tool.name,
            original_error=error,
            tool_input=run.args,
            status_code=classification.status_code,
            retry_after_s=classification.retry_after_s,
            at=self.wall_clock(),
            classification=classification,
            attempts=attempts,
        )
        observed = trace is not None or self._bus.active
        if decided.decision is Decision.PARTIAL_SUCCESS:
            tool.metrics.on_partial_success(now)
            if observed:
                self.publish(
                    CallSucceeded(
                        at=final.at or 0.0, t=now, tool_id=tool.name, call_id=call_id, turn_id=turn_id,
                        attempts=attempts, latency_ms=(now - start) * 1000.0, partial=True,
                    ),
                    trace,
                )  # fmt: skip
            return CallResult(
                tool.name, partial_result, final, attempts, None, decided.decision, decided.reason
            )
        tool.metrics.on_failure(now)
        if observed:
            self.publish(
                CallFailed(
                    at=final.at or 0.0, t=now, tool_id=tool.name, call_id=call_id, turn_id=turn_id,
                    attempts=attempts, kind=classification.kind, classification=classification.error_class,
                    error=self._scrub(run, final.message), reason=self._scrub_reason(run, decided.reason),
                    latency_ms=(now - start) * 1000.0,
                    decision=decided.decision,
                ),
                trace,
            )  # fmt: skip
        if decided.decision is Decision.ALTERNATIVE and decided.alternative is not None:
            return await self._use_alternative(run, decided, now)
        return CallResult(tool.name, None, final, attempts, None, decided.decision, decided.reason)

    async def _use_alternative(self, run: _CallRun, decided: HandlerDecision, now: float) -> CallResult:
        tool_id, ctx, call_id = run.tool.name, run.ctx, run.call_id
        alternative = decided.alternative
        assert alternative is not None
        self.publish(
            AlternativeUsed(
                at=self.wall_clock(), t=now, tool_id=tool_id, call_id=call_id, turn_id=run.turn_id,
                alternative=alternative, reason=self._scrub_reason(run, decided.reason),
            ),
            run.trace,
        )  # fmt: skip
        alt_ctx = (
            replace(ctx, tried=(*ctx.tried, tool_id), call_ordinal=self.next_call_ordinal(alternative))
            if ctx is not None
            else CallContext(call_id, tried=(tool_id,))
        )
        result = await self.execute(alternative, run.args, alt_ctx, run.handler)
        result.served_by = result.served_by or alternative
        return result

    def _rejected(
        self,
        tool: _Tool,
        args: dict[str, Any],
        ctx: CallContext | None,
        call_id: str,
        turn_id: str | None,
        trace: list[Event] | None,
        now: float,
    ) -> CallResult:
        """Short-circuited before any attempt: the cheap path, synchronous, nothing raised."""
        breaker = tool.breaker
        reason = breaker.rejection_reason()
        tool.metrics.on_rejected(now)
        at = self.wall_clock()
        if trace is not None or self._bus.active:
            self.publish(
                CallRejected(
                    at=at, t=now, tool_id=tool.name, call_id=call_id, turn_id=turn_id,
                    state=breaker.state, reason=reason,
                ),
                trace,
            )  # fmt: skip
        error = ToolError(
            ErrorKind.CIRCUIT_OPEN, reason, tool_id=tool.name, tool_input=args,
            at=at, classification=_CIRCUIT_OPEN,
        )  # fmt: skip
        decision = Decision.FAIL_GRACEFULLY if ctx is not None and ctx.optional else Decision.ESCALATE
        return CallResult(tool.name, None, error, 0, None, decision, reason)

    async def _after_rejection(self, run: _CallRun, rejected: CallResult, now: float) -> CallResult:
        """Let the handler decide about a rejection: it may route the call to an alternative."""
        assert rejected.error is not None
        # The error is the circuit-open ToolError _rejected just built: it carries no partial result.
        decided = self._decide(run, rejected.error, _CIRCUIT_OPEN, 0, now, MISSING)
        if decided.decision is Decision.ALTERNATIVE and decided.alternative is not None:
            return await self._use_alternative(run, decided, now)
        rejected.decision, rejected.reason = decided.decision, decided.reason
        return rejected

    def _unknown_tool(
        self, tool_id: str, args: dict[str, Any], call_id: str, turn_id: str | None, trace: list[Event] | None
    ) -> CallResult:
        now = current_time()
        error = ToolError(
            ErrorKind.UNKNOWN_TOOL,
            f"unknown tool {tool_id!r}",
            tool_id=tool_id,
            tool_input=args,
            at=self.wall_clock(),
        )
        error.classification = classify(error)
        self.publish(
            CallFailed(
                at=error.at or 0.0, t=now, tool_id=tool_id, call_id=call_id, turn_id=turn_id, attempts=0,
                kind=ErrorKind.UNKNOWN_TOOL, classification=ErrorClass.PERMANENT,
                error=self.redaction.text(error.message),
                reason="the tool does not exist", latency_ms=0.0, decision=Decision.ESCALATE,
            ),
            trace,
        )  # fmt: skip
        return CallResult(tool_id, None, error, 0, None, Decision.ESCALATE, "the tool does not exist")

    # --- background services -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError("this engine is already started (async with engine: is entered once)")
        try:
            async with AsyncExitStack() as stack:  # unwound if any service fails to start
                self.clock, self._new_scope = backend_clock(), backend_cancel_scope()
                self.new_task_group = backend_task_group()
                stack.callback(setattr, self, "clock", current_time)
                stack.callback(setattr, self, "_new_scope", CancelScope)
                stack.callback(setattr, self, "new_task_group", anyio.create_task_group)
                task_group = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(self._bus.flush, 5.0)
                stack.callback(task_group.cancel_scope.cancel)
                await task_group.start(self.timeouts.run)
                await task_group.start(self._half_open_timer)
                if self._watch and self.manifests.directory is not None:
                    await task_group.start(self._watch_manifests)
                self._stack = stack.pop_all()
            for event in self.manifests.refusal_events(at=self.wall_clock(), t=current_time()):
                self.publish(event)  # files skipped at start-up: said once the engine runs
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
        watcher = ManifestWatcher(
            self.manifests,
            self.reload_manifests,
            self.publish,
            wall_clock=self.wall_clock,
            settle_ms=self._watch_settle_ms,
            debounce_ms=self._watch_debounce_ms,
        )
        await watcher.run(task_status=task_status)

    def reload_manifests(self, paths: Iterable[Path | ManifestFile] | None = None) -> list[Event]:
        """Re-read manifest files (all of them by default) and apply what is valid.

        Paths are read here, on the calling thread; the watcher passes what it read in a worker
        thread (:class:`ManifestFile`), so its reloads never read or parse on the event loop.
        """
        registry = self.manifests
        try:
            events = registry.reload(
                registry.tracked_files() if paths is None else paths, at=self.wall_clock(), t=current_time()
            )
        except Exception:  # the engine never crashes on a manifest
            log.exception("manifest reload failed")
            events = []
        # Defaults changes reach tools without a file of their own: refresh every tool.
        for tool in self._tools.values():
            tool.manifest = registry.get(tool.name)
            tool.breaker.config = tool.manifest.circuit_breaker
        for event in events:
            self.publish(event)
        return events


def _message(error: BaseException) -> str:
    if isinstance(error, ToolError):
        return error.message
    text = str(error)
    return text if text else type(error).__name__


def _partial_result_of(error: BaseException) -> Any:
    """What a failed tool returned before it failed, if it says (``partial_result``/``completion``)."""
    for attr in ("partial_result", "completion"):
        value = getattr(error, attr, MISSING)
        if value is not MISSING and value is not None:
            return value
    return MISSING


__all__ = ["CallContext", "CallResult", "Engine"]
