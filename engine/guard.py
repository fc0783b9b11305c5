"""The guarded call: breaker check → attempt under the tool's timeout → classify → decide.

:class:`CallGuard` runs one call through its tool's breaker, timeout, retries and error
handler, and announces every step as an event. :class:`~engine.engine.Engine` builds on it
(tools, manifests, background services, operator controls, turns and streams).

Every breaker operation returns the transition it made; :meth:`CallGuard._transitioned`
announces it naming the call that caused it (none for timers, state queries and operators).

Time comes only from anyio (``current_time``, ``sleep``, cancel scopes), wall-clock stamps
from the injectable ``wall_clock`` and jitter from the injectable ``rng``, so the whole
engine runs on a virtual clock in tests.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from anyio import CancelScope, current_time

from engine.bus import EventBus
from engine.call import (
    CallContext,
    CallResult,
    CallRun,
    RegisteredTool,
    error_message,
    partial_result_of,
    recorded_value,
)
from engine.cancellation import is_stray_cancellation, stray_cancellation_error
from engine.classify import Classification, Rule, classify
from engine.decide import decide, refused_retry
from engine.errors import ToolError
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
from engine.handler import (
    MISSING,
    OPTIONAL_CONTINUES,
    Decision,
    ErrorHandler,
    HandlerDecision,
    HandlerLike,
    as_handler,
)
from engine.invoke import Attempt, WorkerThreads, invoke, invoke_injected
from engine.kinds import ErrorClass, ErrorKind
from engine.metrics import MetricsRegistry
from engine.redaction import RedactionPolicy
from engine.strategies.breaker.machine import AttemptOutcome, BreakerState, Permit, Transition
from engine.strategies.timeout.supervisor import (
    TimeoutSupervisor,
    enter_idle_window,
    leave_idle_window,
    timeout_error,
)

if TYPE_CHECKING:
    from engine.faults import AttemptInjector
    from engine.manifest import ToolManifest

log = logging.getLogger("tripwire.engine")

_CIRCUIT_OPEN = Classification(
    ErrorKind.CIRCUIT_OPEN, ErrorClass.TRANSIENT, False, Rule.TOOL_ERROR,
    "rejected by an open circuit breaker; no attempt was made",
)  # fmt: skip


class CallGuard:
    """Runs guarded calls of the registered tools; see :meth:`execute`."""

    def __init__(
        self,
        *,
        wall_clock: Callable[[], float],
        rng: random.Random,
        handler: ErrorHandler | None,
        faults: AttemptInjector | None,
        record: bool,
        redaction: RedactionPolicy,
    ) -> None:
        self.wall_clock = wall_clock
        self.rng = rng
        self.handler = handler
        self.faults = faults
        self.record = record
        """Recording mode: results go into ``CallSucceeded.value`` and turns note the breakers
        and manifests they started with, so a stored turn can be replayed."""
        self.redaction = redaction
        """Applied where events are made: every consumer of an event sees the same redacted value."""
        self.metrics = MetricsRegistry()
        self.timeouts = TimeoutSupervisor()
        self.threads = WorkerThreads()
        """Plain-function attempts running in worker threads: what a stopping process leaves behind."""
        self.clock: Callable[[], float] = current_time
        """Engine time: ``anyio.current_time``, or the same clock read directly while the engine runs."""
        self._new_scope: Callable[[], CancelScope] = CancelScope
        self._bus = EventBus()
        self._tools: dict[str, RegisteredTool] = {}
        self._call_ids = itertools.count(1)
        self._timer_wakeup: anyio.Event | None = None
        """Set while the engine's half-open timer waits: a breaker opening wakes it to re-plan."""

    # --- events --------------------------------------------------------------------------

    def publish(self, event: Event, trace: list[Event] | None = None) -> None:
        """Deliver ``event`` to subscribers and, when given, to a turn's trace."""
        if trace is not None:
            trace.append(event)
        if self._bus.active:
            self._bus.emit(event)

    def _transitioned(self, tr: Transition, ctx: CallContext | None, call_id: str | None) -> None:
        """Announce a breaker transition, naming the call that caused it (None: no call did)."""
        if tr.to_state is BreakerState.OPEN:
            self._tools[tr.tool_id].metrics.on_breaker_opened(tr.t)
            if self._timer_wakeup is not None:
                self._timer_wakeup.set()
        trace = ctx.trace if ctx is not None else None
        if not self._bus.active and trace is None:
            return
        event_type = breaker_event_type(tr.to_state, tr.actor)
        self.publish(
            event_type(
                at=self.wall_clock(), t=tr.t, tool_id=tr.tool_id, from_state=tr.from_state,
                to_state=tr.to_state, reason=tr.reason, actor=tr.actor,
                consecutive_failures=tr.consecutive_failures, half_open_at=tr.half_open_at,
                call_id=call_id, turn_id=ctx.turn_id if ctx is not None else None,
            ),
            trace,
        )  # fmt: skip

    def _scrub_reason(self, run: CallRun, reason: str) -> str:
        """A decision's reason: the engine's own words are safe; a custom handler's are scrubbed."""
        return reason if run.handler is None and self.handler is None else run.scrub(self.redaction, reason)

    # --- the call ------------------------------------------------------------------------

    def new_call_id(self) -> str:
        return f"c{next(self._call_ids)}"

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

        The success path runs inline here (it is the hot path); a failure is
        :meth:`_after_failure`'s, a rejection :meth:`_rejected`'s.
        """
        # Which call, of which tool.
        if ctx is None:
            call_id, turn_id, trace, deadline = self.new_call_id(), None, None, None
        else:
            call_id, turn_id, trace, deadline = ctx.call_id, ctx.turn_id, ctx.trace, ctx.deadline
        tool = self._tools.get(tool_id)
        if tool is None:
            unknown = (ErrorKind.UNKNOWN_TOOL, f"unknown tool {tool_id!r}", "the tool does not exist")
            return self.refuse(tool_id, *unknown, args=args, call_id=call_id, turn_id=turn_id, trace=trace)
        breaker = tool.breaker
        metrics = tool.metrics
        clock = self.clock
        start = now = clock()
        metrics.on_call(now)
        # Admission: the tool's breaker.
        permit = breaker.acquire(now)
        manifest = tool.manifest  # in force for the whole call, even across reloads
        run: CallRun | None = None
        if permit is None:
            rejected = self._rejected(tool, args, ctx, call_id, turn_id, trace, now)
            if not manifest.alternatives and handler is None and self.handler is None:
                return rejected  # nothing could change the outcome: skip the handler
            run = CallRun(tool, manifest, args, ctx, call_id, turn_id, trace, start, as_handler(handler))
            return await self._after_rejection(run, rejected, now)
        if permit.half_opened is not None:  # this call found the open period over
            self._transitioned(permit.half_opened, ctx, call_id)
        # Attempts, until one succeeds or the handler decides anything but a retry.
        bus = self._bus
        faults = self.faults
        # Fault plans key on the call's ordinal: a turn's call has it from its launch.
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
        idle_ms = manifest.idle_timeout_ms  # None on the hot path: no idle window
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
            # The attempt, under the tool's timeout: one supervisor watches it while the engine runs.
            error: Exception | None = None
            if (
                idle_ms is not None
            ):  # its own deadline, pushed back by progress (see engine.strategies.timeout.supervisor)
                scope, bucket = enter_idle_window(new_scope(), now, idle_ms / 1000.0, cutoff, clock), None
            elif timeouts.running:
                scope = new_scope()
                bucket = timeouts.watch(timeout_s, scope, cutoff)
            else:
                scope, bucket = CancelScope(deadline=cutoff), None
            try:
                with scope:
                    try:
                        if fault is None and tool.is_async:  # the hot path
                            value = await tool.fn(**args)
                        else:  # a fault, a stream, or a plain function (listed while its thread runs)
                            this = Attempt(tool_id, call_id, turn_id, attempt)
                            how = invoke if fault is None else partial(invoke_injected, fault)
                            value = await how(tool, args, opening_stream, threads=self.threads, attempt=this)
                    except Exception as exc:
                        error = exc
                    except BaseException as exc:
                        if not is_stray_cancellation(exc):
                            raise
                        error = stray_cancellation_error(exc, tool_id)
            except BaseException:  # cancelled from outside (the turn's deadline, a stop): no evidence
                breaker.record(permit, AttemptOutcome.ABANDONED, current_time())  # never a transition
                raise
            finally:
                if bucket is not None:
                    timeouts.done(bucket, scope)
                elif idle_ms is not None:
                    leave_idle_window()
            now = clock()
            if error is None and not scope.cancelled_caught:
                transition = breaker.record(permit, AttemptOutcome.SUCCEEDED, now)
                if transition is not None:  # a probe closed the breaker
                    self._transitioned(transition, ctx, call_id)
                metrics.on_success(now, now - attempt_start, retried=attempt > 1)
                if observed:
                    succeeded = allocate(CallSucceeded)
                    CallSucceeded.__init__(
                        succeeded, at=self.wall_clock(), t=now, tool_id=tool_id, call_id=call_id,
                        turn_id=turn_id, attempts=attempt, latency_ms=(now - start) * 1000.0,
                        attempt_ms=(now - attempt_start) * 1000.0,
                        value=recorded_value(self.redaction, manifest, args, value) if self.record else None,
                    )  # fmt: skip
                    if trace is not None:
                        trace.append(succeeded)
                    if bus.active:
                        bus.emit(succeeded)
                return CallResult(tool_id, value, None, attempt)

            if run is None:  # built once the call needs a decision
                run = CallRun(tool, manifest, args, ctx, call_id, turn_id, trace, start, as_handler(handler))
            if error is None:  # the deadline cut the attempt off (before the hard cutoff: idle)
                error = self._timed_out(run, attempt, now, idle_ms if scope.deadline < cutoff else None)
            next_step = await self._after_failure(run, permit, error, attempt, attempt_start, now, fault_type)
            if isinstance(next_step, CallResult):
                return next_step
            permit, now = next_step, clock()  # admitted to retry

    # --- failed attempts -----------------------------------------------------------------

    def _timed_out(self, run: CallRun, attempt: int, now: float, idle_ms: float | None) -> TimeoutError:
        """The error of an attempt cut off by its timeout or idle window (``idle_ms``), announced."""
        if run.trace is not None or self._bus.active:
            self.publish(
                ToolTimedOut(
                    at=self.wall_clock(), t=now, tool_id=run.tool.name, call_id=run.call_id, idle_ms=idle_ms,
                    turn_id=run.turn_id, attempt=attempt, timeout_ms=run.manifest.timeout_ms,
                ),
                run.trace,
            )  # fmt: skip
        return timeout_error(run.manifest.timeout_ms, idle_ms)

    def _failed_attempt(
        self,
        tool: RegisteredTool,
        manifest: ToolManifest,
        permit: Permit,
        error: BaseException,
        now: float,
        latency_s: float,
        ctx: CallContext | None,
        call_id: str,
        timed_out: bool | None = None,
    ) -> Classification:
        """A failed attempt's bookkeeping, for calls and streams alike: classify the error, count
        it on the breaker (announcing a transition as this call's) and in the metrics.

        ``timed_out`` (for the metrics): by default, whether the error is classified a timeout.
        """
        classification = classify(error, manifest, now=self.wall_clock)
        transient = classification.transient
        # The tool was invoked: a permanent error is its answer, so the service is up.
        outcome = AttemptOutcome.FAILED if transient else AttemptOutcome.ANSWERED
        transition = tool.breaker.record(permit, outcome, now)
        if transition is not None:
            self._transitioned(transition, ctx, call_id)
        if timed_out is None:
            timed_out = classification.kind is ErrorKind.TIMEOUT
        tool.metrics.on_attempt_failed(now, latency_s, transient=transient, timed_out=timed_out)
        return classification

    def failed_after_opening(
        self, tool_id: str, error: BaseException, ctx: CallContext | None, call_id: str, *, timed_out: bool
    ) -> Classification:
        """A failure once the call's attempt has succeeded — a stream cut after it opened: counted
        like a failed attempt, against the state the tool's breaker is in now."""
        tool = self._tools[tool_id]
        breaker = tool.breaker
        return self._failed_attempt(
            tool, tool.manifest, breaker.standing_permit(), error, self.clock(), 0.0, ctx, call_id, timed_out
        )

    async def _after_failure(
        self,
        run: CallRun,
        permit: Permit,
        error: BaseException,
        attempt: int,
        attempt_start: float,
        now: float,
        fault_type: str | None,
    ) -> CallResult | Permit:
        """Count a failed attempt, decide about it and announce both; then the call's result, or
        — to retry — the permit for the next attempt, once the decided delay has passed."""
        tool, trace, breaker = run.tool, run.trace, run.tool.breaker
        classification = self._failed_attempt(
            tool, run.manifest, permit, error, now, now - attempt_start, run.ctx, run.call_id
        )
        run.ran = run.ran or classification.kind.executed
        partial_result = partial_result_of(error)
        decided = self._decide(run, error, classification, attempt, now, partial_result)
        if trace is not None or self._bus.active:
            failed = allocate(AttemptFailed)
            AttemptFailed.__init__(
                failed, at=self.wall_clock(), t=now, tool_id=tool.name, call_id=run.call_id,
                turn_id=run.turn_id, attempt=attempt, error=run.scrub(self.redaction, error_message(error)),
                error_type=type(error).__name__, kind=classification.kind,
                classification=classification.error_class, rule=classification.rule,
                reason=classification.reason, status_code=classification.status_code,
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
        now = self.clock()
        retry = breaker.acquire(now)
        if retry is None:  # the breaker opened during the backoff: the call ends on its last attempt
            refusal = f"circuit breaker for {tool.name} is {breaker.state}"
            refused = refused_retry(run, classification, refusal, now, partial_result, tools=self._tools)
            return await self._conclude(run, now, attempt, error, classification, refused, partial_result)
        if retry.half_opened is not None:
            self._transitioned(retry.half_opened, run.ctx, run.call_id)
        tool.metrics.on_retry(now)
        return retry

    # --- decisions -----------------------------------------------------------------------

    def _decide(
        self,
        run: CallRun,
        error: BaseException,
        classification: Classification,
        attempt: int,
        now: float,
        partial_result: Any,
    ) -> HandlerDecision:
        """Ask the handler what to do about a failure (see :func:`engine.decide.decide`); a custom
        handler that raised is logged and announced."""
        custom = run.handler or self.handler
        decided, raised = decide(
            run, error, classification, attempt, now, partial_result,
            rng=self.rng, custom=custom, tools=self._tools,
        )  # fmt: skip
        if raised is not None:
            problem = run.scrub(self.redaction, f"{type(raised).__name__}: {raised}")
            log.warning("error handler %r failed: %s", custom, problem)
            self.publish(
                HandlerFailed(
                    at=self.wall_clock(), t=now, tool_id=run.tool.name, call_id=run.call_id,
                    turn_id=run.turn_id, error=problem, fallback=decided.decision,
                ),
                run.trace,
            )  # fmt: skip
        return decided

    # --- how a call ends when it did not simply succeed ----------------------------------

    async def _conclude(
        self,
        run: CallRun,
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
            classification.kind, error_message(error), tool_id=tool.name, original_error=error,
            tool_input=run.args, status_code=classification.status_code,
            retry_after_s=classification.retry_after_s, at=self.wall_clock(),
            classification=classification, attempts=attempts, executed=run.ran,
        )  # fmt: skip
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
                    error=run.scrub(self.redaction, final.message),
                    reason=self._scrub_reason(run, decided.reason),
                    latency_ms=(now - start) * 1000.0,
                    decision=decided.decision,
                ),
                trace,
            )  # fmt: skip
        if decided.decision is Decision.ALTERNATIVE and decided.alternative is not None:
            return await self._use_alternative(run, decided, now)
        return CallResult(tool.name, None, final, attempts, None, decided.decision, decided.reason)

    async def _use_alternative(self, run: CallRun, decided: HandlerDecision, now: float) -> CallResult:
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
        if run.ran and result.error is not None:  # this tool ran, whatever became of the alternative
            result.error.executed = True
        return result

    def next_call_ordinal(self, tool_id: str) -> int:
        """Number a call of ``tool_id`` as it is launched (fault plans key on it)."""
        tool = self._tools.get(tool_id) or self._tool(tool_id)
        tool.calls += 1
        return tool.calls

    def _tool(self, tool_id: str) -> RegisteredTool:
        tool = self._tools.get(tool_id)
        if tool is None:
            raise LookupError(f"unknown tool {tool_id!r}; registered: {', '.join(self._tools) or 'none'}")
        return tool

    def _rejected(
        self,
        tool: RegisteredTool,
        args: dict[str, Any],
        ctx: CallContext | None,
        call_id: str,
        turn_id: str | None,
        trace: list[Event] | None,
        now: float,
    ) -> CallResult:
        """Short-circuited before any attempt: the cheap path, synchronous, nothing raised.

        Decided as the default rules would (an optional call is given up gracefully), in the
        same words: :meth:`_after_rejection` asks the handler when it could decide otherwise.
        """
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
        if ctx is not None and ctx.optional:
            return CallResult(
                tool.name, None, error, 0, None, Decision.FAIL_GRACEFULLY, reason + OPTIONAL_CONTINUES
            )
        return CallResult(tool.name, None, error, 0, None, Decision.ESCALATE, reason)

    async def _after_rejection(self, run: CallRun, rejected: CallResult, now: float) -> CallResult:
        """Let the handler decide about a rejection: it may route the call to an alternative."""
        assert rejected.error is not None
        # The error is the circuit-open ToolError _rejected just built: it carries no partial result.
        decided = self._decide(run, rejected.error, _CIRCUIT_OPEN, 0, now, MISSING)
        if decided.decision is Decision.ALTERNATIVE and decided.alternative is not None:
            return await self._use_alternative(run, decided, now)
        rejected.decision, rejected.reason = decided.decision, decided.reason
        return rejected

    def refuse(
        self, tool_id: str, kind: ErrorKind, message: str, reason: str, *, args: Any = None,
        call_id: str | None = None, turn_id: str | None = None, trace: list[Event] | None = None,
    ) -> CallResult:  # fmt: skip
        """Refuse a call before any attempt (an unknown tool, arguments an LLM executor or adapter cannot
        pass): a permanent ``kind`` failure, counted and announced as ``CallFailed`` with no attempt."""
        now = current_time()
        error = ToolError(kind, message, tool_id=tool_id, tool_input=args, at=self.wall_clock())
        error.classification = classify(error)
        failed = CallFailed(
            at=error.at or 0.0, t=now, tool_id=tool_id, call_id=call_id or self.new_call_id(),
            turn_id=turn_id, attempts=0, kind=kind, classification=error.classification.error_class,
            error=self.redaction.text(message), reason=reason, latency_ms=0.0, decision=Decision.ESCALATE,
            known_tool=tool_id in self._tools,
        )  # fmt: skip
        self.metrics.tool(failed.counted_tool).on_refused(now)
        self.publish(failed, trace)
        return CallResult(tool_id, None, error, 0, None, Decision.ESCALATE, reason)
