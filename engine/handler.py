"""The error handler (spec-map handler): on every failure it decides what happens next, and why.

The engine builds a :class:`FailureContext` — the error, its classification, the tool, the
attempt, the breaker's state and the turn's context — and asks the handler for a
:class:`HandlerDecision`. :class:`DefaultErrorHandler` implements the rules of spec-map handler; users plug
in their own, a class with ``decide`` or a plain callable, returning ``None`` to defer to the
default. The engine keeps the hard limits (:func:`within_hard_limits`): no retry beyond
``max_attempts`` or past the turn's deadline, no alternative that is unknown or already tried.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engine.classify import Rule
from engine.kinds import KIND_INFO, ErrorKind
from engine.side_effect import SideEffect
from engine.strategies.breaker.machine import BreakerState, rejection_reason

if TYPE_CHECKING:
    from engine.classify import Classification
    from engine.manifest import ToolManifest
    from engine.strategies.retry.policy import RetryPlan


class Decision(StrEnum):
    """What happens next to a failed call, as a :class:`HandlerDecision` says."""

    RETRY = "retry"
    """Try the same tool again after a delay."""
    ALTERNATIVE = "alternative"
    """Run the call on another tool."""
    PARTIAL_SUCCESS = "partial_success"
    """Keep the partial result the tool returned before failing, and carry on."""
    ESCALATE = "escalate"
    """The failure needs the user's (or the model's) attention."""
    FAIL_GRACEFULLY = "fail_gracefully"
    """No recovery and nothing to escalate: continue without this call."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()
"""Marks an absent value where ``None`` is a legitimate one (defaults, partial results)."""

CALLER_FAULT_KINDS = frozenset(
    {
        ErrorKind.INVALID_PARAMETERS,
        ErrorKind.NOT_PERMITTED,
        ErrorKind.LIMIT_EXCEEDED,
        ErrorKind.CANCELED,
        ErrorKind.UNKNOWN_TOOL,
    }
)
"""The call itself is wrong: another tool would get the same bad call."""

OPTIONAL_CONTINUES = "; optional call, the turn continues"
"""How the reason of an optional call given up on ends."""

_REJECTING = frozenset({BreakerState.OPEN, BreakerState.FORCED_OPEN, BreakerState.HALF_OPEN})


@dataclass(frozen=True, slots=True)
class FailureContext:
    """Everything the handler may use to decide (spec-map handler.notified)."""

    tool_id: str
    call_id: str
    turn_id: str | None
    attempt: int
    error: BaseException
    classification: Classification
    breaker_state: BreakerState
    manifest: ToolManifest
    retry_plan: RetryPlan
    """What the retry policy allows next (attempts, time budget, turn deadline, Retry-After)."""
    elapsed_s: float
    remaining_s: float | None
    """Time left in the turn, or None outside a turn."""
    optional: bool
    dependants: tuple[str, ...]
    alternatives: tuple[str, ...]
    """The manifest's alternatives whose breakers admit a call now, in manifest order."""
    partial_result: Any = MISSING
    strategies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """What the tool's other strategies say of their state, by section: ``retry_budget`` (calls,
    retries, allowed, refused, window_s, shared), ``bulkhead`` (in_flight, max_concurrent, queued,
    max_queued, rejected_full, rejected_timeout, wait_p95_ms), ``rate_limit`` (rate_per_s, burst,
    tokens, waiting, waited, rejected, cooldowns, cooldown_remaining_s, cooldown_started_by,
    max_wait_ms, scope; the cooldown is ``cooldown_remaining_s`` and ``cooldown_started_by``),
    ``idempotency`` (keyed_calls, resends, passed_as), ``hedging`` (hedges_started, hedges_won,
    attempts_cancelled, hedges_refused, hedge_after_ms); an engine-wide shared one under
    ``shared.<section>``."""
    idempotency_key: str | None = None
    """The call's idempotency key when its tool is keyed (the manifest's ``idempotency``): the same
    on every attempt, so re-sending the call is safe even after an ambiguous failure. The key
    itself, even when secret: a reason that quotes it is scrubbed before an event holds it."""
    hedges: int = 0
    """How many of this call's attempts so far started as hedges (a ``hedging`` tool's)."""
    attempts_running: int = 0
    """Other attempts of this call still running as the handler decides (hedges racing the failed
    one); 0 when none is."""

    @property
    def message(self) -> str:
        return str(self.error) or type(self.error).__name__

    @property
    def resend_unsafe(self) -> bool:
        """A side-effecting call failed ambiguously: sending it again could repeat its effect
        (never when the call has an idempotency key: the service recognises a re-send)."""
        return self.idempotency_key is None and resend_unsafe(self.manifest, self.classification.kind)


def resend_unsafe(manifest: ToolManifest, kind: ErrorKind) -> bool:
    """Whether a failure of ``kind`` makes re-sending the call unsafe (see ``FailureContext``)."""
    return (
        manifest.side_effect is SideEffect.SIDE_EFFECTING
        and KIND_INFO[kind].ambiguous
        and not manifest.retry_ambiguous
    )


@dataclass(frozen=True, slots=True)
class HandlerDecision:
    decision: Decision
    reason: str
    delay_s: float = 0.0
    alternative: str | None = None


@runtime_checkable
class ErrorHandler(Protocol):
    """A custom handler: a :class:`HandlerDecision` for a failure, or ``None`` to defer to the default."""

    def decide(self, failure: FailureContext) -> HandlerDecision | None: ...


HandlerLike = ErrorHandler | Callable[[FailureContext], HandlerDecision | None]


class DefaultErrorHandler:
    """The recovery rules of spec-map handler, in order."""

    def decide(self, failure: FailureContext) -> HandlerDecision:
        return self.decide_on(
            tool_id=failure.tool_id,
            classification=failure.classification,
            retry_plan=failure.retry_plan,
            breaker_state=failure.breaker_state,
            resend_unsafe=failure.resend_unsafe,
            partial_result=failure.partial_result,
            alternatives=failure.alternatives,
            optional=failure.optional,
            idempotency_key=failure.idempotency_key,
        )

    def decide_on(
        self,
        *,
        tool_id: str,
        classification: Classification,
        retry_plan: RetryPlan,
        breaker_state: BreakerState,
        resend_unsafe: bool,
        partial_result: Any,
        alternatives: tuple[str, ...],
        optional: bool,
        idempotency_key: str | None = None,
    ) -> HandlerDecision:
        """:meth:`decide` from just the facts its rules read: the engine's path when no custom
        handler needs a whole :class:`FailureContext` (building one costs a few µs per failure)."""
        c = classification
        kind = c.kind
        plan = retry_plan
        if resend_unsafe:
            # The request may have been processed: neither a retry nor an alternative may repeat it.
            why = f"side-effecting tool: not re-sent after an ambiguous {kind}"
            return self._give_up(optional, why)
        if c.retryable:
            if not plan.retry:
                why = plan.reason
            elif breaker_state in (BreakerState.OPEN, BreakerState.FORCED_OPEN):
                why = f"circuit breaker for {tool_id} is {breaker_state}"
            elif idempotency_key is not None and KIND_INFO[kind].ambiguous:
                why = f"ambiguous {kind}, re-sent safely under idempotency key {idempotency_key}"
                return HandlerDecision(Decision.RETRY, f"{why}: {plan.reason}", plan.delay_s)
            else:
                return HandlerDecision(
                    Decision.RETRY, f"{c.error_class} error, circuit closed: {plan.reason}", plan.delay_s
                )
        elif kind is ErrorKind.CIRCUIT_OPEN:
            # A rejection by the tool's breaker: in the breaker's words, as without a custom handler.
            if breaker_state in _REJECTING:
                why = rejection_reason(tool_id, breaker_state)
            else:  # raised by the tool itself
                why = "circuit breaker open: no attempt made"
        elif c.rule is Rule.REFUSAL:
            # Refused by one of the tool's strategies (a full bulkhead): in its own words, as
            # without a custom handler.
            why = c.reason
        else:
            why = f"{c.error_class} error ({kind}): retrying will not help"
        return self.without_retry(
            why, kind=kind, partial_result=partial_result, alternatives=alternatives, optional=optional
        )

    def without_retry(
        self, why: str, *, kind: ErrorKind, partial_result: Any, alternatives: tuple[str, ...], optional: bool
    ) -> HandlerDecision:
        """The rules once the same tool will not be tried again (``why``): keep a partial result,
        else use the first alternative, else give up — gracefully when the call is optional."""
        if partial_result is not MISSING:
            return HandlerDecision(Decision.PARTIAL_SUCCESS, f"{why}; keeping the partial result")
        if alternatives and kind not in CALLER_FAULT_KINDS:
            alternative = alternatives[0]
            return HandlerDecision(
                Decision.ALTERNATIVE, f"{why}; using {alternative}", alternative=alternative
            )
        return self._give_up(optional, why)

    @staticmethod
    def _give_up(optional: bool, why: str) -> HandlerDecision:
        if optional:
            return HandlerDecision(Decision.FAIL_GRACEFULLY, f"{why}{OPTIONAL_CONTINUES}")
        return HandlerDecision(Decision.ESCALATE, why)


DEFAULT_HANDLER = DefaultErrorHandler()


def within_hard_limits(decided: HandlerDecision, failure: FailureContext) -> HandlerDecision:
    """A custom handler's decision as the engine carries it out: as decided, or — when it breaks
    one of the engine's hard limits — the default rules' decision, saying what was refused."""
    refusal = _refusal(decided, failure)
    if not refusal:
        return decided
    default = DEFAULT_HANDLER.decide(failure)
    return HandlerDecision(
        default.decision, f"{refusal}; {default.reason}", default.delay_s, default.alternative
    )


def _refusal(decided: HandlerDecision, failure: FailureContext) -> str:
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


def as_handler(handler: HandlerLike | None) -> ErrorHandler | None:
    """Accept a handler object, a handler class, or a plain callable."""
    if handler is None:
        return None
    if isinstance(handler, type):
        handler = handler()
    if isinstance(handler, ErrorHandler):
        return handler
    if callable(handler):
        return _CallableHandler(handler)
    raise TypeError(f"an error handler needs a decide(failure) method or must be callable, not {handler!r}")


class _CallableHandler:
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[FailureContext], HandlerDecision | None]) -> None:
        self.fn = fn

    def decide(self, failure: FailureContext) -> HandlerDecision | None:
        return self.fn(failure)

    def __repr__(self) -> str:
        return f"handler {getattr(self.fn, '__qualname__', self.fn)!r}"
