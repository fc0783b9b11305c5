"""How a call goes on when an attempt did not simply succeed: the one failed-attempt path of calls
and streams, the decision (retry policy, strategies, error handler), and how a call ends otherwise.

Functions of the :class:`~engine.pipeline.call.Call` they are handed; the engine they act for is
``call.runtime``.

Internal: the engine's machinery.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
from anyio import current_time

from engine.call import CallContext, CallResult, error_message, partial_result_of
from engine.classify import Classification, Rule, classify
from engine.decide import decide, refused_retry
from engine.errors import ToolError
from engine.events import (
    AlternativeUsed,
    AttemptFailed,
    CallFailed,
    CallRejected,
    CallSucceeded,
    HandlerFailed,
    ToolTimedOut,
    allocate,
)
from engine.handler import MISSING, OPTIONAL_CONTINUES, Decision, HandlerDecision
from engine.kinds import KIND_INFO, ErrorClass, ErrorKind
from engine.strategies.breaker.machine import AttemptOutcome, Permit
from engine.strategies.timeout.supervisor import timeout_error

if TYPE_CHECKING:
    from engine.call import RegisteredTool
    from engine.events import Event
    from engine.pipeline.call import Call
    from engine.protocols import CallRuntime
    from engine.strategies.base import Refusal, Strategy

log = logging.getLogger("tripwire.engine")

CIRCUIT_OPEN = Classification(
    ErrorKind.CIRCUIT_OPEN, ErrorClass.TRANSIENT, False, Rule.TOOL_ERROR,
    "rejected by an open circuit breaker; no attempt was made",
)  # fmt: skip


# --- strategies around an attempt -----------------------------------------------------------


async def admit_attempt(call: Call, permit: Permit) -> Refusal | None:
    """Let attempt ``call.attempt`` through the pipeline's admitting strategies, in order, from the
    one :func:`admitted_now` stopped at (``call.waiting_at``: it awaits that one's ``admit``, then
    each next one's ``admit_now`` or ``admit``). On a refusal, or a cancellation while one waits,
    every strategy that admitted it lets go again and the breaker's ``permit`` is given back unused
    (no evidence)."""
    admitting = call.pipeline.admit
    start, call.waiting_at = call.waiting_at, 0
    admitted: list[Strategy[Any]] = list(admitting[:start])
    breaker = call.tool.breaker
    try:
        for index in range(start, len(admitting)):
            strategy = admitting[index]
            if index == start or not strategy.admit_now(call):  # at ``start``: admit_now said no
                refusal = await strategy.admit(call)
                if refusal is not None:
                    let_go(call, admitted)
                    breaker.record(permit, AttemptOutcome.ABANDONED, call.clock())
                    return refusal
            admitted.append(strategy)
    except BaseException:  # cancelled while waiting (the turn's deadline, a stop)
        let_go(call, admitted)
        breaker.record(permit, AttemptOutcome.ABANDONED, current_time())
        raise
    return None


def admitted_now(call: Call) -> bool:
    """Whether every admitting strategy let the attempt through at once (no await). If one could
    not, those before it keep what they gave (a rate limit's token: asking again would take a second
    one) and :func:`admit_attempt` goes on from it (``call.waiting_at``)."""
    for index, strategy in enumerate(call.pipeline.admit):
        if not strategy.admit_now(call):
            call.waiting_at = index
            return False
    return True


def let_go(call: Call, admitted: Sequence[Strategy[Any]]) -> None:
    """Tell the strategies in ``admitted`` (part of an attempt's admission) the attempt is off."""
    for strategy in reversed(admitted):
        strategy.attempt_ended(call)


def retry_refusal(call: Call) -> str | None:
    """Why a decided retry may not happen (the first strategy that refuses it), or None."""
    for strategy in call.pipeline.retry_refusal:
        refusal = strategy.retry_refusal(call)
        if refusal is not None:
            return refusal
    return None


# --- failed attempts ------------------------------------------------------------------------


def timed_out(call: Call, attempt: int, now: float, idle_ms: float | None) -> TimeoutError:
    """The error of an attempt cut off by its timeout or idle window (``idle_ms``), announced."""
    runtime = call.runtime
    if call.trace is not None or runtime.bus.active:
        runtime.publish(
            ToolTimedOut(
                at=runtime.wall_clock(), t=now, tool_id=call.tool.name, call_id=call.call_id, idle_ms=idle_ms,
                turn_id=call.turn_id, attempt=attempt, timeout_ms=call.manifest.timeout_ms,
            ),
            call.trace,
        )  # fmt: skip
    return timeout_error(call.manifest.timeout_ms, idle_ms)


def count_failed_attempt(
    runtime: CallRuntime,
    tool: RegisteredTool,
    permit: Permit,
    error: BaseException,
    now: float,
    latency_s: float | None,
    ctx: CallContext | None,
    call_id: str,
    timed_out: bool | None = None,
) -> Classification:
    """A failed attempt's bookkeeping, for calls and streams alike: classify the error under the
    tool's manifest, count it on the breaker (announcing a transition as this call's) and in the
    metrics. ``timed_out`` (for the metrics): by default, whether the error is classified a timeout;
    ``latency_s`` None: a stream cut after it opened (its attempt's latency counted with its success)."""
    classification = classify(error, tool.manifest, now=runtime.wall_clock)
    transient = classification.transient
    # The tool was invoked: a permanent error is its answer, so the service is up.
    outcome = AttemptOutcome.FAILED if transient else AttemptOutcome.ANSWERED
    transition = tool.breaker.record(permit, outcome, now)
    if transition is not None:
        runtime.transitioned(transition, ctx, call_id)
    if timed_out is None:
        timed_out = classification.kind is ErrorKind.TIMEOUT
    tool.metrics.on_attempt_failed(now, latency_s, transient=transient, timed_out=timed_out)
    return classification


async def after_failure(
    call: Call,
    permit: Permit,
    error: BaseException,
    attempt_start: float,
    now: float,
    fault_type: str | None,
    failed_attempt: int | None = None,
) -> CallResult | Permit:
    """Count failed attempt ``call.attempt``, decide about it and announce both; then the call's
    result, or — to retry — the permit for the next attempt, once the decided delay has passed
    and the breaker and the admitting strategies let it through. ``failed_attempt``: the failed attempt's
    number when it is not ``call.attempt``, the attempts made (a hedged call's attempts race)."""
    runtime, tool, trace = call.runtime, call.tool, call.trace
    breaker, attempt = tool.breaker, call.attempt
    classification = count_failed_attempt(
        runtime, tool, permit, error, now, now - attempt_start, call.ctx, call.call_id
    )
    call.ran = call.ran or classification.kind.executed
    for strategy in call.pipeline.attempt_failed:  # before the decision: a 429's cooldown counts
        strategy.attempt_failed(call, classification)
    partial_result = partial_result_of(error)
    decided = decide_failure(call, error, classification, attempt, now, partial_result)
    if decided.decision is Decision.RETRY and call.pipeline.retry_refusal:
        refusal = retry_refusal(call)
        if refusal is not None:
            decided = refused_retry(call, classification, refusal, now, partial_result, tools=runtime.tools)
    if trace is not None or runtime.bus.active:
        number = attempt if failed_attempt is None else failed_attempt
        failed = allocate(AttemptFailed)
        AttemptFailed.__init__(
            failed, at=runtime.wall_clock(), t=now, tool_id=tool.name, call_id=call.call_id,
            turn_id=call.turn_id, attempt=number, error=call.scrub(runtime.redaction, error_message(error)),
            error_type=type(error).__name__, kind=classification.kind,
            classification=classification.error_class, rule=classification.rule,
            reason=classification.reason, status_code=classification.status_code,
            circuit_breaker_state=breaker.state, retry_count=number - 1,
            decision=decided.decision, decision_reason=call.scrub_reason(decided.reason),
            delay_ms=decided.delay_s * 1000.0 if decided.decision is Decision.RETRY else None,
            latency_ms=(now - attempt_start) * 1000.0, fault_type=fault_type,
            retryable=classification.retryable, retry_after_s=classification.retry_after_s,
            has_partial=partial_result is not MISSING,
            consecutive_failures=breaker.consecutive_failures,
        )  # fmt: skip
        runtime.publish(failed, trace)
    if decided.decision is not Decision.RETRY:
        return await conclude(call, now, error, classification, decided, partial_result)
    if decided.delay_s > 0:
        await anyio.sleep(decided.delay_s)
    now = call.clock()
    retry = breaker.acquire(now)
    refusal_reason = None
    if retry is None:  # the breaker opened during the backoff: the call ends on its last attempt
        refusal_reason = f"circuit breaker for {tool.name} is {breaker.state}"
    else:
        if retry.half_opened is not None:
            runtime.transitioned(retry.half_opened, call.ctx, call.call_id)
        if call.pipeline.admit:
            call.attempt = attempt + 1
            refused_by = None if admitted_now(call) else await admit_attempt(call, retry)
            if refused_by is not None:
                call.attempt, refusal_reason, now = attempt, refused_by.reason, call.clock()
    if refusal_reason is not None:
        refused = refused_retry(
            call, classification, refusal_reason, now, partial_result, tools=runtime.tools
        )
        return await conclude(call, now, error, classification, refused, partial_result)
    assert retry is not None
    tool.metrics.on_retry(now)
    return retry


def decide_failure(
    call: Call,
    error: BaseException,
    classification: Classification,
    attempt: int,
    now: float,
    partial_result: Any,
) -> HandlerDecision:
    """Ask the handler what to do about a failure (see :func:`engine.decide.decide`); a custom
    handler that raised is logged and announced."""
    runtime = call.runtime
    custom = call.handler or runtime.handler
    decided, raised = decide(
        call, error, classification, attempt, now, partial_result,
        rng=runtime.rng, custom=custom, tools=runtime.tools,
    )  # fmt: skip
    if raised is not None:
        problem = call.scrub(runtime.redaction, f"{type(raised).__name__}: {raised}")
        log.warning("error handler %r failed: %s", custom, problem)
        runtime.publish(
            HandlerFailed(
                at=runtime.wall_clock(), t=now, tool_id=call.tool.name, call_id=call.call_id,
                turn_id=call.turn_id, error=problem, fallback=decided.decision,
            ),
            call.trace,
        )  # fmt: skip
    return decided


# --- how a call ends when it did not simply succeed -------------------------------------------


async def conclude(
    call: Call,
    now: float,
    error: BaseException,
    classification: Classification,
    decided: HandlerDecision,
    partial_result: Any,
) -> CallResult:
    """Carry out a decision other than retry; ``partial_result`` is what ``error`` carries."""
    runtime, tool, attempts = call.runtime, call.tool, call.attempt
    final = ToolError(
        classification.kind, error_message(error), tool_id=tool.name, original_error=error,
        tool_input=call.args, status_code=classification.status_code,
        retry_after_s=classification.retry_after_s, at=runtime.wall_clock(),
        classification=classification, attempts=attempts, executed=call.ran,
    )  # fmt: skip
    observed = call.trace is not None or runtime.bus.active
    latency_ms = (now - call.start) * 1000.0
    if decided.decision is Decision.PARTIAL_SUCCESS:
        tool.metrics.on_partial_success(now)
        if observed:
            runtime.publish(
                CallSucceeded(
                    at=final.at or 0.0, t=now, tool_id=tool.name, call_id=call.call_id, turn_id=call.turn_id,
                    attempts=attempts, latency_ms=latency_ms, partial=True,
                ),
                call.trace,
            )  # fmt: skip
        return CallResult(tool.name, partial_result, final, attempts, None, decided.decision, decided.reason)
    tool.metrics.on_failure(now)
    if observed:
        runtime.publish(
            CallFailed(
                at=final.at or 0.0, t=now, tool_id=tool.name, call_id=call.call_id, turn_id=call.turn_id,
                attempts=attempts, kind=classification.kind, classification=classification.error_class,
                error=call.scrub(runtime.redaction, final.message), reason=call.scrub_reason(decided.reason),
                latency_ms=latency_ms, decision=decided.decision,
            ),
            call.trace,
        )  # fmt: skip
    if decided.decision is Decision.ALTERNATIVE and decided.alternative is not None:
        return await use_alternative(call, decided, now)
    return CallResult(tool.name, None, final, attempts, None, decided.decision, decided.reason)


async def use_alternative(call: Call, decided: HandlerDecision, now: float) -> CallResult:
    runtime, tool_id, ctx = call.runtime, call.tool.name, call.ctx
    alternative = decided.alternative
    assert alternative is not None
    runtime.publish(
        AlternativeUsed(
            at=runtime.wall_clock(), t=now, tool_id=tool_id, call_id=call.call_id, turn_id=call.turn_id,
            alternative=alternative, reason=call.scrub_reason(decided.reason),
        ),
        call.trace,
    )  # fmt: skip
    key = call.idempotency_key  # the logical call's: a keyed alternative sends the same one
    alt_ctx = (
        replace(
            ctx, tried=(*ctx.tried, tool_id), call_ordinal=runtime.next_call_ordinal(alternative),
            idempotency_key=key or ctx.idempotency_key,
        )
        if ctx is not None
        else CallContext(call.call_id, tried=(tool_id,), idempotency_key=key)
    )  # fmt: skip
    result = await runtime.execute(alternative, call.args, alt_ctx, call.handler)
    result.served_by = result.served_by or alternative
    if call.ran and result.error is not None:  # this tool ran, whatever became of the alternative
        result.error.executed = True
    return result


def rejection(
    runtime: CallRuntime,
    tool: RegisteredTool,
    args: dict[str, Any],
    ctx: CallContext | None,
    call_id: str,
    trace: list[Event] | None,
    now: float,
    refusal: Refusal | None = None,
) -> CallResult:
    """A call refused before any attempt — by the breaker, or by a strategy's ``refusal`` — as the
    cheap path: synchronous, nothing raised, decided as the default rules would (an optional call
    is given up gracefully); :func:`after_rejection` asks the handler when it could decide otherwise."""
    breaker = tool.breaker
    if refusal is None:
        kind, reason, classification = ErrorKind.CIRCUIT_OPEN, breaker.rejection_reason(), CIRCUIT_OPEN
    else:
        kind, reason = refusal.kind, refusal.reason
        classification = Classification(kind, KIND_INFO[kind].default_class, False, Rule.REFUSAL, reason)
    tool.metrics.on_rejected(now)
    at = runtime.wall_clock()
    turn_id = ctx.turn_id if ctx is not None else None
    if trace is not None or runtime.bus.active:
        runtime.publish(
            CallRejected(
                at=at, t=now, tool_id=tool.name, call_id=call_id, turn_id=turn_id,
                state=breaker.state, reason=reason, kind=kind,
            ),
            trace,
        )  # fmt: skip
    error = ToolError(kind, reason, tool_id=tool.name, tool_input=args, at=at, classification=classification)
    if ctx is not None and ctx.optional:
        return CallResult(
            tool.name, None, error, 0, None, Decision.FAIL_GRACEFULLY, reason + OPTIONAL_CONTINUES
        )
    return CallResult(tool.name, None, error, 0, None, Decision.ESCALATE, reason)


async def after_rejection(call: Call, rejected: CallResult, now: float) -> CallResult:
    """Let the handler decide about a rejection: it may route the call to an alternative."""
    error = rejected.error
    assert error is not None
    assert error.classification is not None
    # The error is the one rejection() just built: it carries no partial result.
    decided = decide_failure(call, error, error.classification, 0, now, MISSING)
    if decided.decision is Decision.ALTERNATIVE and decided.alternative is not None:
        return await use_alternative(call, decided, now)
    rejected.decision, rejected.reason = decided.decision, decided.reason
    return rejected
