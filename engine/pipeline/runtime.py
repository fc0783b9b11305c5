"""The engine's runtime: runs guarded calls through their tools' pipelines and announces every step.

:meth:`Runtime.execute` is one call: its tool's breaker admits it, each attempt goes through the
admitting strategies and the tool's timeout, a failure is classified and decided
(:mod:`engine.pipeline.failure`). With nothing but the backbone configured (breaker, timeout,
retry, classify, decide) the loop takes its fused path: no :class:`~engine.pipeline.call.Call` is
built and no hook is called until an attempt fails; every other strategy only adds its hooks to
the same loop, so both paths are one code path (the test suite runs against both).

Every breaker operation returns the transition it made; :meth:`Runtime.transitioned` announces it
naming the call that caused it (none for timers, state queries and operators). Time comes only
from anyio, wall-clock stamps from the injectable ``wall_clock`` and jitter from the injectable
``rng``, so the whole engine runs on a virtual clock in tests.

:class:`~engine.engine.Engine` owns one (``engine.runtime``): turns, streams, adapters and stores
work through it; users call the engine's verbs.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from anyio import CancelScope, current_time
from anyio.abc import TaskGroup

from engine.bus import EventBus
from engine.call import CallContext, CallResult, RegisteredTool, recorded_value
from engine.cancellation import is_stray_cancellation, stray_cancellation_error
from engine.classify import Classification, classify
from engine.clock import backend_cancel_scope
from engine.errors import ToolError
from engine.events import AttemptStarted, CallFailed, CallSucceeded, Event, allocate, breaker_event_type
from engine.handler import Decision, ErrorHandler, HandlerLike, as_handler
from engine.invoke import Attempt, WorkerThreads, invoke, invoke_injected
from engine.kinds import ErrorKind
from engine.metrics import MetricsRegistry
from engine.pipeline import failure, hedged
from engine.pipeline.call import Call
from engine.pipeline.compiled import Pipeline, compile_pipeline, compile_shared
from engine.redaction import RedactionPolicy
from engine.strategies.breaker.machine import AttemptOutcome, BreakerState, Transition
from engine.strategies.timeout.supervisor import TimeoutSupervisor, enter_idle_window, leave_idle_window

if TYPE_CHECKING:
    from engine.faults import AttemptInjector
    from engine.manifest import ManifestRegistry
    from engine.policy import ToolManifest, ToolPolicy
    from engine.protocols import TurnRecorder
    from engine.strategies.base import Strategy


class Runtime:
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
        manifests: ManifestRegistry,
    ) -> None:
        self.manifests = manifests
        """The manifests in force (the engine's registry)."""
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
        self.new_scope: Callable[[], CancelScope] = CancelScope
        self.new_task_group: Callable[[], TaskGroup] = anyio.create_task_group
        """Makes turns' task groups: the running backend's own factory while the engine runs."""
        self.recorder: TurnRecorder | None = None
        """Set by a trace recorder that makes each turn durable before ``run_turn`` returns."""
        self.bus = EventBus()
        self.tools: dict[str, RegisteredTool] = {}
        self.shared: dict[str, Strategy[Any]] = {}
        """Engine-wide strategies (``defaults.yaml``'s top-level sections), in every tool's pipeline."""
        self.timer_wakeup: anyio.Event | None = None
        """Set while the engine's half-open timer waits: a breaker opening wakes it to re-plan."""
        self._call_ids = itertools.count(1)
        self._adopted_scope: Callable[[], CancelScope] = CancelScope

    # --- events --------------------------------------------------------------------------

    def publish(self, event: Event, trace: list[Event] | None = None) -> None:
        """Deliver ``event`` to subscribers and, when given, to a turn's trace."""
        if trace is not None:
            trace.append(event)
        if self.bus.active:
            self.bus.emit(event)

    def transitioned(self, tr: Transition, ctx: CallContext | None, call_id: str | None) -> None:
        """Announce a breaker transition, naming the call that caused it (None: no call did)."""
        if tr.to_state is BreakerState.OPEN:
            self.tools[tr.tool_id].metrics.on_breaker_opened(tr.t)
            if self.timer_wakeup is not None:
                self.timer_wakeup.set()
        trace = ctx.trace if ctx is not None else None
        if not self.bus.active and trace is None:
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

    # --- pipelines -----------------------------------------------------------------------

    def compile(self, tool_id: str, policy: ToolPolicy, previous: Pipeline | None = None) -> Pipeline:
        """``tool_id``'s pipeline under ``policy``, taking over ``previous``'s live state."""
        return compile_pipeline(tool_id, policy, shared=self.shared, previous=previous)

    def recompile(self, shared_options: Mapping[str, Any]) -> None:
        """Give every tool the manifest in force and swap its pipeline for one compiled from it (a
        reload): between calls, each strategy handed its predecessor's state — the breaker keeps
        its state and counts under its new config — while calls in flight keep what they began with."""
        self.shared = compile_shared(shared_options, self.shared)
        for tool in self.tools.values():
            manifest = self.manifests.get(tool.name)
            tool.manifest, tool.breaker.config = manifest, manifest.circuit_breaker
            tool.pipeline = self.compile(tool.name, manifest, tool.pipeline)

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

        The success path runs inline here (it is the hot path); a failure goes on in
        :func:`~engine.pipeline.failure.after_failure`, a rejection in ``failure.after_rejection``.
        """
        # Which call, of which tool.
        if ctx is None:
            call_id, turn_id, trace, deadline = self.new_call_id(), None, None, None
        else:
            call_id, turn_id, trace, deadline = ctx.call_id, ctx.turn_id, ctx.trace, ctx.deadline
        tool = self.tools.get(tool_id)
        if tool is None:
            unknown = (ErrorKind.UNKNOWN_TOOL, f"unknown tool {tool_id!r}", "the tool does not exist")
            return self.refuse(tool_id, *unknown, args=args, call_id=call_id, turn_id=turn_id, trace=trace)
        breaker = tool.breaker
        metrics = tool.metrics
        timeouts = self.timeouts
        if timeouts.running:  # started: the backend's own clock, scopes and the supervisor
            clock, new_scope, supervised = self.clock, self.new_scope, True
        else:
            clock, new_scope, supervised = self._unstarted()
        start = now = clock()
        manifest = tool.manifest  # in force for the whole call, even across reloads
        pipeline = tool.pipeline  # likewise
        call: Call | None = None
        if pipeline.general:  # the hooks are handed the call: it exists from the start
            call = Call(self, tool, manifest, args, ctx, call_id, turn_id, trace, start,
                        as_handler(handler), pipeline, clock)  # fmt: skip
            for strategy in pipeline.call_started:
                strategy.call_started(call)
            if call.sent_args is not None:  # a strategy added to a copy (the idempotency key)
                args = call.sent_args
        # Admission: the tool's breaker, then the admitting strategies.
        permit = breaker.acquire(now)
        if permit is None:
            rejected = failure.rejection(self, tool, args, ctx, call_id, trace, now)
            if not manifest.alternatives and handler is None and self.handler is None:
                return rejected  # nothing could change the outcome: skip the handler
            if call is None:
                call = Call(self, tool, manifest, args, ctx, call_id, turn_id, trace, start,
                            as_handler(handler), pipeline, clock)  # fmt: skip
            return await failure.after_rejection(call, rejected, now)
        if permit.half_opened is not None:  # this call found the open period over
            self.transitioned(permit.half_opened, ctx, call_id)
        admitting = pipeline.admit
        if admitting:
            assert call is not None  # a general pipeline's: built above
            call.attempt = 1
            refusal = None if failure.admitted_now(call) else await failure.admit_attempt(call, permit)
            if refusal is not None:
                now = clock()
                rejected = failure.rejection(self, tool, args, ctx, call_id, trace, now, refusal)
                if not manifest.alternatives and handler is None and self.handler is None:
                    return rejected
                return await failure.after_rejection(call, rejected, now)
            now = clock()
        # Attempts, until one succeeds or the handler decides anything but a retry.
        metrics.on_call(now)  # as its first AttemptStarted (engine.metrics.counted)
        if call is not None and pipeline.hedging is not None and not opening_stream:  # attempts race
            return await hedged.attempts(self, call, permit, now)
        bus = self.bus
        faults = self.faults
        # Fault plans key on the call's ordinal: a turn's call has it from its launch.
        if ctx is not None and ctx.call_ordinal:
            ordinal = ctx.call_ordinal
        elif faults is not None:
            tool.calls += 1
            ordinal = tool.calls
        else:
            ordinal = 0
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
            if idle_ms is not None:  # its own deadline, pushed back by progress (see the supervisor)
                scope, bucket = enter_idle_window(new_scope(), now, idle_ms / 1000.0, cutoff, clock), None
            elif supervised:
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
                if admitting:  # the last admitted first
                    for strategy in pipeline.ended:
                        strategy.attempt_ended(call)  # type: ignore[arg-type]  # built when admitting
            now = clock()
            if error is None and not scope.cancelled_caught:
                transition = breaker.record(permit, AttemptOutcome.SUCCEEDED, now)
                if transition is not None:  # a probe closed the breaker
                    self.transitioned(transition, ctx, call_id)
                metrics.on_success(now, now - attempt_start, retried=attempt > 1)
                if observed:
                    succeeded = allocate(CallSucceeded)
                    CallSucceeded.__init__(
                        succeeded, at=self.wall_clock(), t=now, tool_id=tool_id, call_id=call_id,
                        turn_id=turn_id, attempts=attempt, latency_ms=(now - start) * 1000.0,
                        attempt_ms=(now - attempt_start) * 1000.0,
                        value=self._recorded(manifest, args, value, call) if self.record else None,
                    )  # fmt: skip
                    if trace is not None:
                        trace.append(succeeded)
                    if bus.active:
                        bus.emit(succeeded)
                return CallResult(tool_id, value, None, attempt)

            if call is None:  # built once the call needs a decision
                call = Call(self, tool, manifest, args, ctx, call_id, turn_id, trace, start,
                            as_handler(handler), pipeline, clock)  # fmt: skip
            call.attempt = attempt
            if error is None:  # the deadline cut the attempt off (before the hard cutoff: idle)
                error = failure.timed_out(call, attempt, now, idle_ms if scope.deadline < cutoff else None)
            next_step = await failure.after_failure(call, permit, error, attempt_start, now, fault_type)
            if isinstance(next_step, CallResult):
                return next_step
            permit, now = next_step, clock()  # admitted to retry

    def _recorded(self, manifest: ToolManifest, args: dict[str, Any], value: Any, call: Call | None) -> Any:
        """A result as recording mode keeps it: redacted, a secret idempotency key included."""
        return recorded_value(
            self.redaction, manifest, args, value, call.secret_key if call is not None else None
        )

    def _unstarted(self) -> tuple[Callable[[], float], Callable[[], CancelScope], bool]:
        """A call's clock, scope factory and supervision while the engine is not started: on
        asyncio the running loop's own (the supervisor adopts it once per loop: its timers need no
        task), elsewhere anyio's, each scope with its own deadline."""
        loop = asyncio._get_running_loop()
        if loop is None:
            return current_time, CancelScope, False
        if self.timeouts.adopted is not loop:
            self.timeouts.adopt(loop)
            self._adopted_scope = backend_cancel_scope()
        return loop.time, self._adopted_scope, True

    def failed_after_opening(
        self, tool_id: str, error: BaseException, ctx: CallContext | None, call_id: str, *, timed_out: bool
    ) -> Classification:
        """A failure once the call's attempt has succeeded — a stream cut after it opened: counted
        like a failed attempt, against the state the tool's breaker is in now."""
        tool = self.tools[tool_id]
        permit = tool.breaker.standing_permit()
        return failure.count_failed_attempt(
            self, tool, permit, error, self.clock(), None, ctx, call_id, timed_out
        )

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
            known_tool=tool_id in self.tools,
        )  # fmt: skip
        self.metrics.tool(failed.counted_tool).on_refused(now)
        self.publish(failed, trace)
        return CallResult(tool_id, None, error, 0, None, Decision.ESCALATE, reason)

    # --- what turns and streams ask ------------------------------------------------------

    def manifest(self, tool_id: str) -> ToolManifest:
        tool = self.tools.get(tool_id)
        return tool.manifest if tool is not None else self.manifests.get(tool_id)

    def redaction_for(self, tool_id: str) -> RedactionPolicy:
        """The engine's redaction policy extended by the tool manifest's ``secret_fields``."""
        tool = self.tools.get(tool_id)
        if tool is None or not tool.manifest.secret_fields:
            return self.redaction
        return self.redaction.with_fields(tool.manifest.secret_fields)

    def next_call_ordinal(self, tool_id: str) -> int:
        """Number a call of ``tool_id`` as it is launched (fault plans key on it)."""
        tool = self.tool(tool_id)
        tool.calls += 1
        return tool.calls

    def tool(self, tool_id: str) -> RegisteredTool:
        tool = self.tools.get(tool_id)
        if tool is None:
            raise LookupError(f"unknown tool {tool_id!r}; registered: {', '.join(self.tools) or 'none'}")
        return tool

    @property
    def tool_ids(self) -> Collection[str]:
        """A live, read-only view of the registered tool ids (cheap membership tests)."""
        return self.tools.keys()

    def next_turn_id(self) -> str:
        """A fresh turn id, unique across runs (drawn from ``rng``: reproducible when it is seeded)."""
        return f"t{self.rng.getrandbits(48):012x}"

    def starting_state(self, tool_ids: Iterable[str], now: float) -> tuple[dict[str, Any], dict[str, str]]:
        """Breaker snapshots and manifest digests of ``tool_ids`` and their alternatives."""
        seen: dict[str, None] = {}
        pending = list(tool_ids)
        while pending:
            name = pending.pop()
            if name in seen or name not in self.tools:
                continue
            seen[name] = None
            pending += self.tools[name].manifest.alternatives
        breakers = {name: self.tools[name].breaker.snapshot(now) for name in seen}
        manifests = {name: self.manifests.digest(name) for name in seen}
        return breakers, manifests
