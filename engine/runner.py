"""How a turn runs: its calls in dependency order, under its deadline, with cascades.

Independent calls run concurrently; a call starts when its dependencies have succeeded and
receives their outputs as arguments. When a dependency fails, a dependant runs with its
declared ``default`` if it has one, is skipped when optional, and is escalated when required
(spec-map cascade) — transitively. At the turn's deadline the turn returns at once with what it has:
unfinished calls are cancelled and reported as timed out (spec-map timeout.turn-deadline).
A caller cancelled mid-turn leaves it ``interrupted``. Nothing recurses per call.

Internal: :meth:`Engine.run_turn <engine.Engine.run_turn>` runs turns through it.
"""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import anyio

from engine.call import CallContext
from engine.errors import TurnNotPersisted
from engine.events import (
    CallEscalated,
    CallSkipped,
    DefaultUsed,
    DependencyBlocked,
    Event,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnInterrupted,
    TurnStarted,
    allocate,
)
from engine.handler import MISSING, ErrorHandler
from engine.outcomes import CallOutcome, CallStatus, TurnResult, summarize
from engine.trace import TurnTrace
from engine.traced_spec import traced_spec
from engine.turn import ToolCall, Turn, validate

if TYPE_CHECKING:
    import asyncio

    from engine.call import CallResult
    from engine.protocols import EngineForTurns
    from engine.strategies.timeout.supervisor import Bucket

_SUCCEEDED = CallStatus.SUCCEEDED.value
_time_of = operator.attrgetter("t")
_LANE_TASK = f"{__name__}.TurnRunner._lane"
"""The name anyio gives a lane's task: given, it is not worked out again for every task."""


@dataclass(slots=True)
class _Ready:
    """A call whose dependencies are settled, with the arguments it will run with."""

    call: ToolCall
    args: dict[str, Any]
    used_default: bool = False


class TurnRunner:
    """Runs one turn on an engine; see :meth:`engine.Engine.run_turn`."""

    __slots__ = (
        "_closing",
        "_errors",
        "_idle",
        "_lane_scopes",
        "_lanes",
        "_loop",
        "_scope",
        "_tasks",
        "calls",
        "deadline",
        "dependants",
        "engine",
        "handler",
        "launched",
        "outcomes",
        "seed",
        "stop",
        "stopped",
        "succeeded",
        "trace",
        "turn",
        "turn_id",
        "waiting",
    )

    def __init__(
        self,
        engine: EngineForTurns,
        turn: Turn,
        *,
        stop: anyio.Event | None = None,
        handler: ErrorHandler | None = None,
        seed: str | None = None,
    ) -> None:
        validate(turn, engine.tool_ids)  # the structure was checked when the turn was made
        self.engine = engine
        self.turn = turn
        self.stop = stop
        self.handler = handler
        self.calls = turn.by_id
        self.dependants = turn.dependants
        self.outcomes: dict[str, CallOutcome] = {}
        self.succeeded = 0
        """How many outcomes simply succeeded (no alternative, default or partial result)."""
        self.launched: set[str] = set()
        self.waiting = dict(turn.blockers)
        """Call id → how many of its dependencies are not final yet."""
        self.stopped = False
        self.turn_id = turn.id or engine.next_turn_id()
        self.trace = TurnTrace(self.turn_id)
        # One draw per turn seeds every call's jitter: retries never depend on task scheduling.
        self.seed = seed or f"{engine.rng.getrandbits(64):x}"
        self.deadline: float | None = None
        self._scope: anyio.CancelScope | None = None  # the turn's: its deadline, a stop, a lane's error
        self._tasks: anyio.abc.TaskGroup | None = None  # the lanes', on backends other than asyncio
        # asyncio: lanes are the loop's own tasks, joined and cancelled by this runner (see _join).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lanes = 0  # launched and not ended yet
        self._lane_scopes: set[anyio.CancelScope] = set()  # of the lanes running
        self._idle: asyncio.Future[None] | None = None  # done when the last lane ends
        self._errors: list[BaseException] = []  # the lanes' unexpected errors
        self._closing = False  # the lanes are being cancelled: one starting now is cancelled too

    async def run(self) -> TurnResult:
        engine, turn, turn_id = self.engine, self.turn, self.turn_id
        clock = engine.clock
        start = clock()
        self.deadline = start + turn.deadline_s if turn.deadline_s is not None else None
        breakers, manifests = (
            engine.starting_state((c.tool for c in turn.calls), start) if engine.record else (None, None)
        )
        started = allocate(TurnStarted)
        TurnStarted.__init__(
            started, at=engine.wall_clock(), t=start, turn_id=turn_id, calls=turn.ids,
            deadline_ms=turn.deadline_s * 1000.0 if turn.deadline_s is not None else None,
            spec=traced_spec(engine, turn.spec), seed=self.seed, breakers=breakers, manifests=manifests,
        )  # fmt: skip
        self._publish(started)
        try:
            if self.stop is None:
                cut = await self._run_calls()
            else:
                async with anyio.create_task_group() as watcher:
                    watcher.start_soon(self._watch_stop, self.stop)
                    cut = await self._run_calls()
                    watcher.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():  # the caller was cancelled: the engine or host stops
            self._interrupted(start)
            raise
        now = clock()
        stopped = self.stopped
        unfinished: tuple[str, ...] = ()
        if len(self.outcomes) < len(turn.ids):  # cut off by the deadline or a stop
            unfinished = tuple(cid for cid in turn.ids if cid not in self.outcomes)
        timed_out = cut and not stopped
        for cid in unfinished:
            self._cut_off(self.calls[cid], stopped=stopped)
        if unfinished and stopped:
            self._publish(TurnCanceled(at=engine.wall_clock(), t=now, turn_id=turn_id, unfinished=unfinished))
        elif timed_out:
            assert turn.deadline_s is not None
            self._publish(
                TurnDeadlineExceeded(
                    at=engine.wall_clock(), t=now, turn_id=turn_id, deadline_ms=turn.deadline_s * 1000.0,
                    unfinished=unfinished,
                )
            )  # fmt: skip
        self._sort_trace()
        outcomes = {cid: self.outcomes[cid] for cid in turn.ids}
        if self.succeeded == len(outcomes):  # nearly every turn: nothing to look into
            summary = turn.success_summary
            statuses = dict.fromkeys(turn.ids, _SUCCEEDED)
            executed, ok = len(outcomes), True
        else:
            summary = summarize(outcomes.values())
            statuses = {cid: o.status.value for cid, o in outcomes.items()}
            executed = sum(o.executed for o in outcomes.values())
            ok = all(o.ok for o in outcomes.values())
        result = TurnResult(
            turn_id, outcomes, self.trace, summary, timed_out, stopped and bool(unfinished), now - start
        )
        finished = allocate(TurnFinished)
        TurnFinished.__init__(
            finished, at=engine.wall_clock(), t=now, turn_id=turn_id, summary=summary, statuses=statuses,
            executed=executed, duration_ms=(now - start) * 1000.0, outcome=result._outcome(executed, ok),
        )  # fmt: skip
        self._publish(finished)
        if engine.recorder is not None:  # durable when run_turn returns, or it says it is not
            problem = await engine.recorder.turn_finished(turn_id)
            if problem is not None:
                raise TurnNotPersisted(problem.path, problem.problem, result)
        return result

    def _interrupted(self, start: float) -> None:
        """End the turn's record as ``interrupted``: its caller was cancelled mid-turn.

        Nothing can be awaited any more; the events are published so that a recorder stores
        the turn as finished, with the calls that were in flight, instead of running for ever.
        """
        engine, turn = self.engine, self.turn
        now = engine.clock()
        unfinished = tuple(cid for cid in turn.ids if cid not in self.outcomes)
        in_flight = tuple(cid for cid in unfinished if cid in self.launched)
        self._publish(
            TurnInterrupted(
                at=engine.wall_clock(),
                t=now,
                turn_id=self.turn_id,
                in_flight=in_flight,
                unfinished=unfinished,
            )
        )
        outcomes = dict(self.outcomes)
        for cid in unfinished:
            call = self.calls[cid]
            launched = cid in self.launched
            reason = "in flight when the turn's caller was cancelled" if launched else "never started"
            outcomes[cid] = CallOutcome(
                cid, call.tool, CallStatus.INTERRUPTED, reason=reason, launched=launched
            )
        ordered = [outcomes[cid] for cid in turn.ids]
        self._publish(
            TurnFinished(
                at=engine.wall_clock(), t=now, turn_id=self.turn_id,
                statuses={o.call_id: o.status.value for o in ordered}, summary=summarize(ordered),
                executed=sum(o.executed for o in ordered), duration_ms=(now - start) * 1000.0,
                outcome="interrupted",
            )
        )  # fmt: skip

    def _sort_trace(self) -> None:
        """Put the trace in canonical order (see :meth:`_trace_order`).

        Events are appended as they happen, so the trace is nearly always in that order
        already: one pass checks it, and only a trace that is not gets sorted.
        """
        events = self.trace.events
        times = list(map(_time_of, events))
        if all(map(operator.lt, times, times[1:])):  # no two at the same instant: in order
            return
        key = self._trace_order
        for before, after in pairwise(events):
            if after.t < before.t or (after.t == before.t and key(after) < key(before)):
                events.sort(key=key)
                return

    def _trace_order(self, event: Event) -> tuple[float, int, int]:
        """Time, then — for events at the same instant — the call's rank.

        Task scheduling decides how simultaneous events of different calls interleave; the
        trace does not depend on it. A call ranks by dependency depth, then turn order, so
        a dependant never comes before what released it; a call's own events keep their order.
        """
        if isinstance(event, TurnStarted):
            return (event.t, -1, 0)
        call_id = getattr(event, "call_id", None)
        rank = self.turn.ranks.get(call_id, (1 << 30, 0)) if call_id is not None else (1 << 30, 0)
        return (event.t, *rank)

    async def _run_calls(self) -> bool:
        """Run the turn's calls under one cancel scope, the turn's deadline; whether it (or a stop)
        cut the turn off."""
        timeouts = self.engine.timeouts
        bucket = None
        aio = sys.modules.get("asyncio")  # not imported for this: its loop runs only if it was imported
        self._loop = aio._get_running_loop() if aio is not None else None  # None: anyio's task group
        try:
            if self._loop is None:
                async with self.engine.new_task_group() as self._tasks:
                    scope = self._scope = self._tasks.cancel_scope
                    bucket = self._arm(scope)
                    await self._start()
            else:
                with _new_scope() as scope:
                    self._scope = scope
                    bucket = self._arm(scope)
                    await self._join()
        finally:
            # Only once every call has ended: the first call's end is not the turn's.
            if bucket is not None:
                timeouts.done(bucket, scope)
        return scope.cancelled_caught

    def _arm(self, scope: anyio.CancelScope) -> Bucket | None:
        """Give the turn's scope its deadline and a stop that came first; the supervisor's bucket."""
        if self.stopped:  # the stop came before the calls started
            scope.cancel()
        if self.deadline is None or self.turn.deadline_s is None:
            return None
        timeouts = self.engine.timeouts
        if timeouts.running:  # one supervisor enforces every deadline: no timer per turn
            return timeouts.watch(self.turn.deadline_s, scope, self.deadline)
        scope.deadline = self.deadline
        return None

    async def _join(self) -> None:
        """asyncio: run the turn's calls, then wait for every lane; the way out cancels them all.

        A lane is a plain loop task with a cancel scope of its own, joined and cancelled here as
        anyio's task group would (shields inside a lane hold; an unexpected error in a lane
        cancels the turn and is raised in a group). anyio's spawn wraps each task in a handle, a
        cancel scope, an event and a closure: a call of a fan of 50 took 29.6 µs and 20 garbage
        collections per 1,000 calls with it, 19.5 µs and 0.1 without (bench/turns.py, measured).
        """
        loop = self._loop
        assert loop is not None
        try:
            await self._start()
            while self._lanes:
                self._idle = loop.create_future()
                await self._idle
        except BaseException as exc:
            self._cancel_lanes()
            with anyio.CancelScope(shield=True):
                while self._lanes:
                    self._idle = loop.create_future()
                    await self._idle
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                self._errors.insert(0, exc)
            if self._errors:
                raise BaseExceptionGroup("unhandled errors in a TaskGroup", self._errors) from None
            raise
        if self._errors:
            raise BaseExceptionGroup("unhandled errors in a TaskGroup", self._errors)

    def _spawn(self, call: ToolCall, args: dict[str, Any], used_default: bool) -> None:
        """Launch a call in a lane of its own."""
        ordinal = self._claim(call)
        loop = self._loop
        if loop is None:
            assert self._tasks is not None
            self._tasks.start_soon(self._lane, call, args, used_default, ordinal, name=_LANE_TASK)
            return
        # The task is held by the loop until it starts, then by its scope in _lane_scopes.
        loop.create_task(self._own_lane(call, args, used_default, ordinal), name=_LANE_TASK)
        self._lanes += 1

    async def _own_lane(self, call: ToolCall, args: dict[str, Any], used_default: bool, ordinal: int) -> None:
        """asyncio: a lane task of :meth:`_spawn`'s, in a cancel scope of its own; it reports its
        end itself (a done callback costs a bound method and a loop pass per lane)."""
        scopes = self._lane_scopes
        try:
            with _new_scope() as scope:
                if self._closing:  # the turn is ending: the lane still runs its first step, as under anyio
                    scope.cancel()
                elif not self.engine.timeouts.running and self.deadline is not None:
                    scope.deadline = self.deadline  # its tools see the turn's deadline, as under anyio
                scopes.add(scope)
                try:
                    await self._lane(call, args, used_default, ordinal)
                except BaseException as exc:
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        raise
                    self._lane_failed(exc, scope)  # the turn raises it: the task itself ends quietly
                finally:
                    scopes.discard(scope)
        finally:
            self._lanes -= 1
            idle = self._idle
            if not self._lanes and idle is not None and not idle.done():
                idle.set_result(None)

    def _cancel_lanes(self, but: anyio.CancelScope | None = None) -> None:
        """Cancel every lane (``but`` the one ending); one not started yet starts, then is cancelled."""
        self._closing = True
        for scope in self._lane_scopes:
            if scope is not but:
                scope.cancel()

    def _lane_failed(self, error: BaseException, scope: anyio.CancelScope) -> None:
        """A lane raised unexpectedly: as in anyio's task group, the turn is cancelled and raises it."""
        self._errors.append(error)
        if self._scope is not None:
            self._scope.cancel()
        self._cancel_lanes(but=scope)

    async def _watch_stop(self, stop: anyio.Event) -> None:
        await stop.wait()
        self.stopped = True
        if self._scope is not None:
            self._scope.cancel()

    def _publish(self, event: Any) -> None:
        self.engine.publish(event, self.trace.events)

    async def _start(self) -> None:
        """Run the turn's first calls: all but the first in new lanes, the first in this task."""
        roots = self.turn.roots
        if roots:
            first = roots[0]
            ordinal = self._claim(first)
            spawn = self._spawn
            for call in roots[1:]:
                spawn(call, dict(call.args), False)
            await self._lane(first, dict(first.args), False, ordinal)

    def _launch(self, ready: list[_Ready]) -> int:
        """Launch all but the first ready call in new lanes; returns the first's call ordinal, for
        this task to run it.

        Launch order (and so call ordinals) is decided here, synchronously: deterministic
        whatever order the tasks then run in. A lane gets its call's fields, not an object
        holding them: a wide launch allocates little that outlives the lane's first step.
        """
        ordinal = self._claim(ready[0].call)
        spawn = self._spawn
        for item in ready[1:]:
            spawn(item.call, item.args, item.used_default)
        return ordinal

    async def _lane(self, call: ToolCall, args: dict[str, Any], used_default: bool, ordinal: int) -> None:
        """Run a call; then carry on in this task with what it released (a task saved per edge).

        A loop, not recursion: a chain of any length runs in one task at constant stack depth.
        """
        execute, handler, dependants = self.engine.execute, self.handler, self.dependants
        turn_id, deadline, trace, seed = self.turn_id, self.deadline, self.trace.events, self.seed
        while True:
            # Made as the call starts, not at its launch: a wide launch holds less. Positional:
            # keywords would cost a dict per call.
            ctx = CallContext(
                call.id, turn_id, deadline, call.optional, dependants[call.id], trace, seed, ordinal,
                (), call.idempotency_key,
            )  # fmt: skip
            result = await execute(call.tool, args, ctx, handler)
            outcome = self.outcomes[call.id] = _outcome_of(call, result, used_default)
            if outcome.status is CallStatus.SUCCEEDED and not outcome.served_by and not used_default:
                self.succeeded += 1
            if not dependants[call.id]:
                return
            ready: list[_Ready] = []
            self._settle(call.id, ready)
            if not ready:
                return
            item = ready[0]
            call, args, used_default = item.call, item.args, item.used_default
            ordinal = self._launch(ready) if len(ready) > 1 else self._claim(call)

    def _claim(self, call: ToolCall) -> int:
        """The call is launched: its tool's next call ordinal."""
        self.launched.add(call.id)
        return self.engine.next_call_ordinal(call.tool)

    def _settle(self, call_id: str, ready: list[_Ready]) -> None:
        """A call is final: resolve the dependants that were waiting only for it, transitively.

        Depth-first like the recursion it replaces (so launch order is unchanged), on an explicit
        stack: a cascade through 10,000 calls costs no Python recursion.
        """
        waiting, dependants, calls = self.waiting, self.dependants, self.calls
        stack = [iter(dependants[call_id])]
        while stack:
            dependant = next(stack[-1], None)
            if dependant is None:
                stack.pop()
                continue
            waiting[dependant] -= 1
            if not waiting[dependant] and self._resolve(calls[dependant], ready):
                stack.append(iter(dependants[dependant]))  # blocked: final too, its dependants next

    def _resolve(self, call: ToolCall, ready: list[_Ready]) -> bool:
        """Every dependency of ``call`` is final: run it, run it with its default, or cascade.

        Returns whether the call was blocked (skipped or escalated): final without running.
        """
        outcomes = self.outcomes
        failed: tuple[str, ...] = ()
        for dep in call.depends_on:
            if not outcomes[dep].ok:
                failed += (dep,)
        args = dict(call.args)
        for param, dep in self.turn.sources[call.id]:
            outcome = outcomes[dep]
            args[param] = outcome.value if outcome.ok else call.default
        if not failed:
            ready.append(_Ready(call, args))
            return False
        now = self.engine.clock()
        engine = self.engine
        why = "; ".join(f"{d} {self.outcomes[d].status.replace('_', ' ')}" for d in failed)
        if call.default is not MISSING:
            self._publish(
                DefaultUsed(
                    at=engine.wall_clock(), t=now, tool_id=call.tool, call_id=call.id, turn_id=self.turn_id,
                    blocked_by=failed, reason=f"dependency did not succeed ({why}); ran with its default",
                )
            )  # fmt: skip
            ready.append(_Ready(call, args, used_default=True))
            return False
        engine.metrics.tool(call.tool).on_skipped(now)
        status = CallStatus.SKIPPED if call.optional else CallStatus.ESCALATED
        if call.optional:
            reason = f"optional; dependency did not succeed ({why})"
        else:
            reason = f"required but missing input ({why})"
        event_type: type[DependencyBlocked] = CallSkipped if call.optional else CallEscalated
        self._publish(
            event_type(
                at=engine.wall_clock(), t=now, tool_id=call.tool, call_id=call.id, turn_id=self.turn_id,
                blocked_by=failed, reason=reason,
            )
        )  # fmt: skip
        self.outcomes[call.id] = CallOutcome(call.id, call.tool, status, reason=reason)
        return True

    def _cut_off(self, call: ToolCall, *, stopped: bool) -> None:
        launched = call.id in self.launched
        if stopped:
            status, reason = CallStatus.CANCELED, "the turn was stopped"
        elif launched:
            status = CallStatus.TIMED_OUT
            reason = f"cut off by the turn's {self.turn.deadline_s:g}s deadline"
        else:
            status = CallStatus.TIMED_OUT
            reason = f"never started: the turn's {self.turn.deadline_s:g}s deadline came first"
        self.outcomes[call.id] = CallOutcome(call.id, call.tool, status, reason=reason, launched=launched)


_ASYNCIO_SCOPE: list[type[anyio.CancelScope]] = []
"""asyncio's own cancel-scope class, once found."""


def _new_scope() -> anyio.CancelScope:
    """asyncio: a cancel scope from its backend's class (0.4 µs; ``anyio.CancelScope()``: 1.6)."""
    if not _ASYNCIO_SCOPE:
        _ASYNCIO_SCOPE.append(type(anyio.CancelScope()))
    return _ASYNCIO_SCOPE[0]()


def _outcome_of(call: ToolCall, result: CallResult, used_default: bool) -> CallOutcome:
    error, reason = result.error, result.reason
    if result.partial:
        status = CallStatus.PARTIAL
    elif error is None:
        status = CallStatus.SUCCEEDED
    else:
        status = CallStatus.FAILED
        reason = f"{error.kind}: {error.message} → {result.decision}: {reason}"
    # Positional: every call of a turn makes one.
    return CallOutcome(
        call.id, call.tool, status, result.value, error, reason, result.attempts, result.served_by,
        used_default, result.decision, True,
    )  # fmt: skip
