"""What to do about a failed attempt (or a rejected call): the retry plan, then the handler's decision.

A pure step of the guarded call: the retry policy says what it allows next, then the call's
handler (its own, else the engine's) decides within the engine's hard limits, and the default
rules decide when there is no custom handler, when it defers, or when it raises.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.handler import DEFAULT_HANDLER, FailureContext, HandlerDecision, resend_unsafe, within_hard_limits
from engine.strategies.base import strategy_facts
from engine.strategies.idempotency import IdempotencyStrategy
from engine.strategies.retry.policy import RetryPlan, plan_retry

if TYPE_CHECKING:
    import random

    from engine.call import CallContext, RegisteredTool
    from engine.classify import Classification
    from engine.handler import ErrorHandler
    from engine.manifest import ToolManifest
    from engine.pipeline.call import Call

_NO_RETRY = RetryPlan(False, 0.0, "not retryable")


def decide(
    run: Call,
    error: BaseException,
    classification: Classification,
    attempt: int,
    now: float,
    partial_result: Any,
    *,
    rng: random.Random,
    custom: ErrorHandler | None,
    tools: Mapping[str, RegisteredTool],
) -> tuple[HandlerDecision, Exception | None]:
    """The decision about ``error`` after ``attempt`` attempts, and what the custom handler raised
    when it did (the default rules decided instead).

    ``partial_result`` is what ``error`` carries; ``rng`` the engine's, for jitter when the call has
    no seed; ``tools`` the registered ones, among which the call's alternatives are.
    """
    ctx, manifest, tool = run.ctx, run.manifest, run.tool
    elapsed_s = now - run.start
    deadline = ctx.deadline if ctx is not None else None
    remaining = deadline - now if deadline is not None else None
    if classification.retryable:
        policy = manifest.retry_policy
        # A call's own Random costs ~5 µs to seed, and the policy draws from it only to jitter.
        jitter = ctx.rng(rng) if ctx is not None and policy.jitter_percent else rng
        plan = plan_retry(
            policy,
            attempts_made=attempt,
            elapsed_s=elapsed_s,
            rng=jitter,
            retry_after_s=classification.retry_after_s,
            remaining_s=remaining,
        )
    else:
        plan = _NO_RETRY
    optional = ctx.optional if ctx is not None else False
    alternatives = _alternatives(run, classification, now, tools) if manifest.alternatives else ()
    key = run.idempotency_key
    if custom is None:  # the default rules alone: no FailureContext to build
        decided = DEFAULT_HANDLER.decide_on(
            tool_id=tool.name,
            classification=classification,
            retry_plan=plan,
            breaker_state=tool.breaker.state,
            resend_unsafe=key is None and resend_unsafe(manifest, classification.kind),
            partial_result=partial_result,
            alternatives=alternatives,
            optional=optional,
            idempotency_key=run.shown_key,  # in the reason: masked when secret
        )
        return decided, None
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
        strategies=strategy_facts(run.pipeline.strategies, now) if run.pipeline.general else {},
        idempotency_key=key,
        hedges=run.hedges,
        attempts_running=run.attempts_running,
    )
    try:
        custom_decision = custom.decide(failure)
    except Exception as exc:  # a broken handler never breaks the call: the default rules decide
        return DEFAULT_HANDLER.decide(failure), exc
    if custom_decision is None:
        return DEFAULT_HANDLER.decide(failure), None
    return within_hard_limits(custom_decision, failure), None


def refused_retry(
    run: Call,
    classification: Classification,
    refusal: str,
    now: float,
    partial_result: Any,
    *,
    tools: Mapping[str, RegisteredTool],
) -> HandlerDecision:
    """The decision when a retry already decided on is refused as it is due (``refusal``: the
    tool's breaker opened during the backoff; later, anything else that stops a retry).

    The one rule for every such refusal (spec-map kinds.count-executed): the call ends on its last
    attempt — that attempt's kind, and executed if any attempt ran — and the refusal is only the
    reason of the decision, never the call's kind. The default rules decide without the retry, as
    they do when the engine overrules a custom handler's (:func:`~engine.handler.within_hard_limits`).
    """
    ctx = run.ctx
    alternatives = _alternatives(run, classification, now, tools) if run.manifest.alternatives else ()
    return DEFAULT_HANDLER.without_retry(
        f"retry refused: {refusal}",
        kind=classification.kind,
        partial_result=partial_result,
        alternatives=alternatives,
        optional=ctx.optional if ctx is not None else False,
    )


def _alternatives(
    run: Call, classification: Classification, now: float, tools: Mapping[str, RegisteredTool]
) -> tuple[str, ...]:
    """The call's available alternatives; after a failure that only its idempotency key makes safe
    to re-send, only those keyed too (they send the same key; another tool would repeat the effect)."""
    alternatives = available_alternatives(run.manifest, run.ctx, now, tools)
    if run.idempotency_key is None or not resend_unsafe(run.manifest, classification.kind):
        return alternatives
    section = IdempotencyStrategy.section
    return tuple(name for name in alternatives if section in tools[name].manifest.strategies)


def available_alternatives(
    manifest: ToolManifest, ctx: CallContext | None, now: float, tools: Mapping[str, RegisteredTool]
) -> tuple[str, ...]:
    """The manifest's alternatives not yet tried whose breakers admit a call now, in manifest order."""
    tried = (*ctx.tried, manifest.id) if ctx is not None else (manifest.id,)
    return tuple(
        name
        for name in manifest.alternatives
        if name not in tried and name in tools and tools[name].breaker.would_admit(now)
    )
