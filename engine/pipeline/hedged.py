"""A hedged call: the attempts of a read-only tool race, and the first success wins.

:meth:`~engine.pipeline.runtime.Runtime.execute` hands a call here, once its first attempt is
admitted, when the tool's pipeline has hedging (one branch: every other tool's path is untouched).
Each round — the first attempt, or a retry — is a race (:func:`_race`): its first attempt starts;
whenever ``hedge_after`` passes since the attempt started last with no success yet, one more starts
beside the others (at most ``max_hedges`` per call), if the retry budget consents (spending a retry),
the breaker admits it and the admitting strategies let it through (``failure.admit_attempt``); a
refused hedge does not start and the round hedges no more. Each attempt runs in its own task under
its own timeout.

The first attempt to succeed wins: the others are cancelled — ``ABANDONED`` for the breaker, no
failure, announced as ``AttemptAbandoned``. An attempt that fails while others still run is counted
(breaker, metrics) and announced with the decision ``wait``; once none runs, the last failure goes
through :func:`~engine.pipeline.failure.after_failure` like any failure, counting the round's
attempts (so the retry policy's ``max_attempts`` counts hedges). Every attempt is numbered in one
sequence per call; ``CallSucceeded.attempts`` is the winner's number.

Metrics (:mod:`engine.metrics.counted`, unchanged): a hedge's ``AttemptStarted`` counts as a retry
(``retry_count``: the attempts after a call's first), a win by an attempt after the first as a retry
success; a cancelled attempt counts nothing. The hedging strategy's facts split hedges out.

Internal: the engine's machinery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio import CancelScope

from engine.call import CallResult, error_message, recorded_value
from engine.cancellation import is_stray_cancellation, stray_cancellation_error
from engine.events import AttemptFailed, AttemptStarted, CallSucceeded
from engine.invoke import Attempt, invoke, invoke_injected
from engine.pipeline import failure
from engine.strategies.breaker.machine import AttemptOutcome, Permit
from engine.strategies.hedging.events import AttemptAbandoned, HedgeRaceWon, HedgeRefused, HedgeStarted
from engine.strategies.hedging.strategy import HedgeSchedule, HedgingStrategy
from engine.strategies.timeout.supervisor import enter_idle_window, leave_idle_window

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup

    from engine.faults import AttemptInjector, InjectedAttempt
    from engine.invoke import WorkerThreads
    from engine.pipeline.call import Call
    from engine.protocols import CallRuntime

    class HedgingRuntime(CallRuntime, Protocol):
        """What a hedged call asks of the runtime besides what every call does."""

        @property
        def faults(self) -> AttemptInjector | None: ...

        @property
        def threads(self) -> WorkerThreads: ...

        @property
        def record(self) -> bool: ...

        @property
        def new_scope(self) -> Callable[[], CancelScope]:
            """The running backend's cancel-scope factory (faster than anyio's) while it runs."""
            ...

        @property
        def new_task_group(self) -> Callable[[], TaskGroup]: ...


WAIT = "wait"
"""The decision announced for an attempt that failed while another attempt of its call still runs."""


@dataclass(slots=True, eq=False)
class _Attempt:
    """One attempt of a race."""

    number: int
    permit: Permit
    start: float
    hedge: bool
    fault_type: str | None
    end: float = 0.0
    error: BaseException | None = None
    value: Any = None


class _Race:
    """The attempts of one round of a hedged call: those running, those failed and not yet dealt
    with, and the winner."""

    __slots__ = (
        "admitting", "call", "failed", "launched", "ordinal", "running", "runtime", "strategy", "tg", "wake",
        "winner",
    )  # fmt: skip

    def __init__(
        self, runtime: HedgingRuntime, call: Call, strategy: HedgingStrategy, ordinal: int, tg: TaskGroup
    ) -> None:
        self.runtime = runtime
        self.call = call
        self.strategy = strategy
        self.ordinal = ordinal
        self.tg = tg
        self.running: list[_Attempt] = []
        self.failed: list[_Attempt] = []
        self.launched: list[_Attempt] = []
        self.winner: _Attempt | None = None
        self.wake = anyio.Event()
        self.admitting = False
        """The host awaits a hedge's admission (it does not see ``wake``)."""


async def attempts(runtime: HedgingRuntime, call: Call, permit: Permit, now: float) -> CallResult:
    """Run the hedged call ``call`` from its admitted first attempt (``permit``) to its result;
    ``runtime`` is ``call.runtime``, seen as what a hedged call needs of it."""
    tool = call.tool
    strategy = call.pipeline.hedging
    assert strategy is not None  # the runtime's branch
    ctx = call.ctx
    if ctx is not None and ctx.call_ordinal:  # fault plans key on the call's ordinal, as execute's
        ordinal = ctx.call_ordinal
    elif runtime.faults is not None:
        tool.calls += 1
        ordinal = tool.calls
    else:
        ordinal = 0
    hedges = strategy.options.max_hedges
    number = 1
    while True:
        last = None  # stays None when the race is won (its task group cancelled)
        async with runtime.new_task_group() as tg:
            race = _Race(runtime, call, strategy, ordinal, tg)
            last = await _race(race, number, permit, now, hedges)
        hedges -= sum(1 for attempt in race.launched if attempt.hedge)
        if race.winner is not None:
            return _won(race, race.winner)
        assert last is not None  # no winner: every attempt failed
        assert last.error is not None
        call.attempt = race.launched[-1].number  # the retry policy counts every attempt made
        next_step = await failure.after_failure(
            call, last.permit, last.error, last.start, last.end, last.fault_type,
            failed_attempt=last.number,
        )  # fmt: skip
        if isinstance(next_step, CallResult):
            return next_step
        permit, now, number = next_step, call.clock(), race.launched[-1].number + 1


async def _race(race: _Race, number: int, permit: Permit, now: float, hedges: int) -> _Attempt | None:
    """Start attempt ``number`` and hedge it until one succeeds (None: the winner is set and the
    others are being cancelled) or none runs: the last failure."""
    call = race.call
    tool, clock = call.tool, call.clock
    faults = race.runtime.faults
    schedule = faults if faults is not None and isinstance(faults, HedgeSchedule) else None
    latest = _launch(race, number, permit, now, hedge=False)
    while True:
        last = _settle(race)
        if race.winner is not None or last is not None:
            return last
        if hedges > 0:
            following = latest.number + 1
            if schedule is not None:  # a replay: hedges start as recorded, and only those
                after = schedule.recorded_hedge_after_s(call.call_id, tool.name, following)
                due = math.inf if after is None else latest.start + after
            else:
                now = clock()
                after = race.strategy.hedge_after_s(tool.metrics, now)
                # No p95 yet: look again in the next engine second (when it may have one).
                due = math.floor(now) + 1.0 if after is None else latest.start + after
        else:
            following, after, due = 0, None, math.inf
        if after is not None and clock() >= due:
            hedge = await _hedge(race, following, latest, after)
            if hedge is None:
                hedges = 0  # refused: this round hedges no more
            else:
                latest, hedges = hedge, hedges - 1
            continue
        race.wake = anyio.Event()
        if race.failed or race.winner is not None:
            continue
        if due == math.inf:
            await race.wake.wait()
        else:
            with _scope(race.runtime, due):
                await race.wake.wait()


def _settle(race: _Race) -> _Attempt | None:
    """Deal with the attempts that failed since last time: each one failed while another still runs
    is counted and announced (``wait``); the last one, when none runs, is returned (the round's end)."""
    call = race.call
    runtime, tool = call.runtime, call.tool
    while race.failed:
        attempt = race.failed.pop(0)
        if not race.running and not race.failed:
            return attempt
        assert attempt.error is not None
        error, now = attempt.error, attempt.end
        classification = failure.count_failed_attempt(
            runtime, tool, attempt.permit, error, now, now - attempt.start, call.ctx, call.call_id
        )
        call.ran = call.ran or classification.kind.executed
        if call.observed:
            others = len(race.running) + len(race.failed)
            breaker = tool.breaker
            runtime.publish(
                AttemptFailed(
                    at=runtime.wall_clock(), t=now, tool_id=tool.name, call_id=call.call_id,
                    turn_id=call.turn_id, attempt=attempt.number,
                    error=call.scrub(runtime.redaction, error_message(error)),
                    error_type=type(error).__name__,
                    kind=classification.kind, classification=classification.error_class,
                    rule=classification.rule, reason=classification.reason,
                    status_code=classification.status_code, circuit_breaker_state=breaker.state,
                    retry_count=attempt.number - 1, decision=WAIT,
                    decision_reason=f"{others} other attempt(s) of the call still running",
                    latency_ms=(now - attempt.start) * 1000.0, fault_type=attempt.fault_type,
                    retryable=classification.retryable, retry_after_s=classification.retry_after_s,
                    consecutive_failures=breaker.consecutive_failures,
                ),
                call.trace,
            )  # fmt: skip
    return None


async def _hedge(race: _Race, number: int, latest: _Attempt, after_s: float) -> _Attempt | None:
    """Start hedge ``number`` if the retry budget, the breaker and the admitting strategies let it
    (each as for a retry); None, announced, when one refuses."""
    call = race.call
    runtime, tool, strategy = call.runtime, call.tool, race.strategy
    previous, call.attempt = call.attempt, number
    reason = failure.retry_refusal(call) if call.pipeline.retry_refusal else None
    permit = None
    if reason is None:
        now = call.clock()
        permit = tool.breaker.acquire(now)
        if permit is None:
            reason = f"circuit breaker for {tool.name} is {tool.breaker.state}"
        else:
            if permit.half_opened is not None:
                runtime.transitioned(permit.half_opened, call.ctx, call.call_id)
            if call.pipeline.admit and not failure.admitted_now(call):
                race.admitting = True  # a win now cancels the wait
                try:
                    refusal = await failure.admit_attempt(call, permit)
                finally:
                    race.admitting = False
                if refusal is not None:
                    reason = refusal.reason
    now = call.clock()
    if reason is not None or race.winner is not None:
        call.attempt = previous
        if reason is None:  # admitted as the race was won: give it all back
            assert permit is not None
            failure.let_go(call, call.pipeline.admit)
            tool.breaker.record(permit, AttemptOutcome.ABANDONED, now)
            return None
        strategy.state.refused += 1
        if call.observed:
            runtime.publish(
                HedgeRefused(
                    at=runtime.wall_clock(), t=now, tool_id=tool.name, call_id=call.call_id,
                    turn_id=call.turn_id, attempt=number, reason=reason,
                ),
                call.trace,
            )  # fmt: skip
        return None
    assert permit is not None
    strategy.state.started += 1
    tool.metrics.on_retry(now)  # as its AttemptStarted (engine.metrics.counted): an attempt after the first
    if call.observed:
        runtime.publish(
            HedgeStarted(
                at=runtime.wall_clock(), t=now, tool_id=tool.name, call_id=call.call_id, turn_id=call.turn_id,
                attempt=number, after_attempt=latest.number, after_ms=after_s * 1000.0,
                in_flight=len(race.running),
            ),
            call.trace,
        )  # fmt: skip
    return _launch(race, number, permit, now, hedge=True)


def _launch(race: _Race, number: int, permit: Permit, now: float, *, hedge: bool) -> _Attempt:
    """Announce attempt ``number`` (admitted with ``permit``) and start it in the race's task group."""
    call, runtime = race.call, race.runtime
    tool, manifest = call.tool, call.manifest
    call.attempt = number
    fault = None
    if runtime.faults is not None:
        fault = runtime.faults.pick(
            tool.name, call=race.ordinal, attempt=number, turn_id=call.turn_id, call_id=call.call_id
        )
    fault_type = None if fault is None or fault.is_ok else fault.fault_type
    attempt = _Attempt(number, permit, now, hedge, fault_type)
    if call.observed:
        cutoff, deadline = now + manifest.timeout_ms / 1000.0, call.deadline
        runtime.publish(
            AttemptStarted(
                at=runtime.wall_clock(), t=now, tool_id=tool.name, call_id=call.call_id, turn_id=call.turn_id,
                attempt=number, timeout_ms=manifest.timeout_ms,
                deadline=cutoff if deadline is None or cutoff < deadline else deadline,
                probe=permit.probe, fault_type=fault_type,
            ),
            call.trace,
        )  # fmt: skip
    race.running.append(attempt)
    race.launched.append(attempt)
    race.tg.start_soon(_run, race, attempt, fault)
    return attempt


async def _run(race: _Race, attempt: _Attempt, fault: InjectedAttempt | None) -> None:
    """One attempt under its own timeout: its outcome handed to the race."""
    call, runtime = race.call, race.runtime
    tool, manifest, clock = call.tool, call.manifest, call.clock
    cutoff = attempt.start + manifest.timeout_ms / 1000.0
    idle_ms = manifest.idle_timeout_ms
    error: BaseException | None = None
    value: Any = None
    if idle_ms is not None:  # its own deadline, pushed back by progress (see the supervisor)
        scope = enter_idle_window(runtime.new_scope(), attempt.start, idle_ms / 1000.0, cutoff, clock)
    else:
        scope = _scope(runtime, cutoff)
    try:
        with scope:
            try:
                this = Attempt(tool.name, call.call_id, call.turn_id, attempt.number)
                how = invoke if fault is None else partial(invoke_injected, fault)
                value = await how(tool, call.args, False, threads=runtime.threads, attempt=this)
            except Exception as exc:
                error = exc
            except BaseException as exc:
                if not is_stray_cancellation(exc):
                    raise
                error = stray_cancellation_error(exc, tool.name)
    except BaseException:  # cancelled: by the race's winner, or from outside (no evidence either way)
        _abandon(race, attempt)
        raise
    finally:
        if idle_ms is not None:
            leave_idle_window()
        race.running.remove(attempt)
        for strategy in call.pipeline.ended:  # the last admitted first
            strategy.attempt_ended(call)
    now = clock()
    if race.winner is not None:  # ended at the instant another won: it lost all the same
        _abandon(race, attempt)
        return
    if error is None and not scope.cancelled_caught:
        attempt.value, attempt.end = value, now
        race.winner = attempt
        if race.running or race.admitting:  # the others are cancelled
            race.tg.cancel_scope.cancel()
        else:  # alone (no hedge started): the host just wakes, cheaper than a cancellation
            race.wake.set()
        return
    if error is None:  # its deadline cut it off (before the hard cutoff: idle)
        error = failure.timed_out(call, attempt.number, now, idle_ms if scope.deadline < cutoff else None)
    attempt.error, attempt.end = error, now
    race.failed.append(attempt)
    race.wake.set()


def _scope(runtime: HedgingRuntime, deadline: float) -> CancelScope:
    scope = runtime.new_scope()
    scope.deadline = deadline
    return scope


def _abandon(race: _Race, attempt: _Attempt) -> None:
    """``attempt`` ended without an outcome: no evidence for the breaker; announced when another
    attempt's win ended it (a cancellation from outside is the turn's or the engine's to tell)."""
    call = race.call
    runtime, tool = call.runtime, call.tool
    now = call.clock()
    tool.breaker.record(attempt.permit, AttemptOutcome.ABANDONED, now)
    winner = race.winner
    if winner is None:
        return
    race.strategy.state.cancelled += 1
    if call.observed:
        runtime.publish(
            AttemptAbandoned(
                at=runtime.wall_clock(), t=now, tool_id=tool.name, call_id=call.call_id, turn_id=call.turn_id,
                attempt=attempt.number, won_by=winner.number, latency_ms=(now - attempt.start) * 1000.0,
            ),
            call.trace,
        )  # fmt: skip


def _won(race: _Race, winner: _Attempt) -> CallResult:
    """The call's success: counted and announced as the plain path does, with the race's outcome."""
    call, runtime = race.call, race.runtime
    tool = call.tool
    now, attempt_s = winner.end, winner.end - winner.start
    transition = tool.breaker.record(winner.permit, AttemptOutcome.SUCCEEDED, now)
    if transition is not None:  # a probe closed the breaker
        runtime.transitioned(transition, call.ctx, call.call_id)
    tool.metrics.on_success(now, attempt_s, retried=winner.number > 1)
    raced = len(race.launched) > 1
    if raced and winner.hedge:
        race.strategy.state.won += 1
    if call.observed:
        at = runtime.wall_clock()
        if raced:
            cancelled = tuple(a.number for a in race.launched if a is not winner and a.error is None)
            runtime.publish(
                HedgeRaceWon(
                    at=at, t=now, tool_id=tool.name, call_id=call.call_id, turn_id=call.turn_id,
                    attempt=winner.number, hedge=winner.hedge, cancelled=cancelled,
                    attempt_ms=attempt_s * 1000.0,
                ),
                call.trace,
            )  # fmt: skip
        value = (
            recorded_value(runtime.redaction, call.manifest, call.args, winner.value)
            if runtime.record
            else None
        )
        runtime.publish(
            CallSucceeded(
                at=at, t=now, tool_id=tool.name, call_id=call.call_id, turn_id=call.turn_id,
                attempts=winner.number, latency_ms=(now - call.start) * 1000.0, attempt_ms=attempt_s * 1000.0,
                value=value,
            ),
            call.trace,
        )  # fmt: skip
    return CallResult(tool.name, winner.value, None, winner.number)
