"""A tool's strategies as the console folds them from events: its bulkhead's occupancy, queue and
refusals, its retry budget's window and refusals, and its rate limit (:mod:`.rate_limit`).

Events only, like the rest of the model, so the board reads the same live, attached and replayed:

- the bulkhead's limits come from the manifest in force (``bulkhead`` in its content); its
  attempts in flight are the tool's running attempts (an attempt holds a slot from its
  ``AttemptStarted`` to its end); its queue is the attempts announced by ``BulkheadQueued`` and
  not yet started, refused or cut off; its refusals and queue waits are counted from
  ``BulkheadRejected`` and the queued attempts that started, with the engine's own p95 rule;
- a tool's own retry budget is the engine's :class:`~engine.strategies.budget.RetryBudgetWindow`,
  fed what the engine feeds it: a call as it starts (its first event), a retry when a failed
  attempt's decision is ``retry`` (the budget consented then); refusals are the
  ``RetryBudgetSpent`` events;
- the engine-wide budget (``defaults.yaml``): its options come from ``RecordingStarted`` and
  ``SharedStrategiesChanged`` (or the engine itself, own-engine); its window
  (:class:`EngineBudget`, one for the model) is fed every tool's calls and retries, as the engine
  feeds it; each tool also counts its refusals and keeps the figures of the last one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from console.model.counting import RollingCount
from console.model.rate_limit import RateLimitFigures, RateLimitFold, rate_limit_options
from engine.events import (
    BulkheadQueued,
    BulkheadRejected,
    CallRejected,
    CooldownEnded,
    CooldownStarted,
    RateLimitRejected,
    RateLimitWaited,
    RetryBudgetSpent,
)
from engine.kinds import ErrorKind
from engine.strategies.budget import RetryBudgetFacts, RetryBudgetOptions, RetryBudgetWindow
from engine.strategies.bulkhead import BulkheadFacts, BulkheadOptions
from engine.strategies.bulkhead.limiter import WAIT_RECORD_SIZE, wait_p95_s

CallKey = tuple[str | None, str]
"""A call by (turn, call), as the tool's in-flight attempts are kept."""
BULKHEAD_FULL = "bulkhead full"
"""How the engine's reason for a refusal without a wait begins (else the wait ran out)."""


@dataclass(frozen=True, slots=True)
class Queued:
    """An attempt waiting in the bulkhead's queue."""

    call_id: str
    turn_id: str | None
    attempt: int
    since: float
    until: float
    """When its wait runs out at the latest (the queue timeout then in force)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A strategy refused an attempt: the newest one, to say why on screen."""

    t: float
    at: float
    call_id: str
    turn_id: str | None
    attempt: int
    """The attempt refused (a bulkhead's), or the one whose retry was (a budget's)."""
    by: str
    """``bulkhead``, ``rate limit``, ``retry budget`` or ``engine-wide retry budget``."""
    retry: bool
    """A retry was refused (the call ended on its last attempt), not the call's first attempt."""
    reason: str
    """The strategy's words: ``bulkhead full: 2 in flight, 1 queued``, ``rate limit: cooling down
    for 27 s more, max wait 2 s``, ``retry budget spent: 0 retries over 1 calls in 10 s`` (the
    call's reason says ``retry refused: …`` before a retry's)."""


@dataclass(frozen=True, slots=True)
class SharedBudgetSeen:
    """The engine-wide retry budget, as far as this tool's refusals show it."""

    refused: int
    """This tool's retries it refused."""
    retries: int
    calls: int
    window_s: float
    """Its window at the last refusal: retries spent over calls started in ``window_s``."""
    t: float
    """When that was (engine time)."""


@dataclass(frozen=True, slots=True)
class EngineBudgetFigures:
    """The engine-wide retry budget: its options in force and its window (every tool's calls)."""

    options: RetryBudgetOptions
    window: RetryBudgetFacts


class EngineBudget:
    """The engine-wide retry budget as the console folds it: one for the model, every tool's
    :class:`ToolStrategies` feeding it (see the module docstring)."""

    __slots__ = ("options", "window")

    def __init__(self) -> None:
        self.options: RetryBudgetOptions | None = None
        self.window: RetryBudgetWindow | None = None

    def configure(self, strategies: Mapping[str, Any] | None, *, restart: bool = False) -> None:
        """``defaults.yaml``'s engine-wide sections in force (by section, as data): a changed
        budget keeps its window, as the engine's does; ``restart``: a new engine, a new window."""
        options = _options(strategies, "retry_budget", RetryBudgetOptions)
        if options is None or restart:
            self.window = None
        if options is not None:
            if self.window is None:
                self.window = RetryBudgetWindow(options)
            elif options != self.options:
                self.window.reconfigure(options)
        self.options = options

    def figures(self, now: float) -> EngineBudgetFigures | None:
        if self.options is None or self.window is None:
            return None
        return EngineBudgetFigures(self.options, self.window.snapshot(now))


@dataclass(frozen=True, slots=True)
class StrategyFigures:
    """A tool's strategies at one moment, for its board row and its detail."""

    bulkhead: BulkheadFacts | None
    """The engine's own figures (``engine.stats()[tool].strategies["bulkhead"]``); refusals since
    the console began following."""
    bulkhead_refused: int
    """Attempts the bulkhead refused in the board's window."""
    retry_budget: RetryBudgetFacts | None
    """The tool's own budget's window, as ``engine.stats()`` has it."""
    shared_budget: SharedBudgetSeen | None
    budget_refused: int
    """Retries a budget (its own or the engine-wide one) refused in the board's window."""
    last_refusal: Refusal | None
    engine_budget: EngineBudgetFigures | None = None
    """The engine-wide budget in force, whatever this tool's refusals (None: none, or not known)."""
    rate_limit: RateLimitFigures | None = None
    """The tool's rate limit: tokens, waits, refusals and cooldown (None: no ``rate_limit``)."""

    @property
    def budgeted(self) -> bool:
        return (
            self.retry_budget is not None or self.shared_budget is not None or self.engine_budget is not None
        )


def _options(content: Mapping[str, Any] | None, section: str, model: type[Any]) -> Any:
    """A manifest section as the engine's options, or None (absent, or written oddly elsewhere)."""
    value = content.get(section) if content is not None else None
    if not isinstance(value, Mapping):
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


class ToolStrategies:
    """The fold of one tool's strategy events (see the module docstring)."""

    __slots__ = (
        "_waits",
        "_window_s",
        "budget",
        "budget_options",
        "budget_refused",
        "bulkhead",
        "bulkhead_refused",
        "engine_budget",
        "last_refusal",
        "queued",
        "rate_limit",
        "refused",
        "rejected_full",
        "rejected_timeout",
        "shared",
        "shared_refused",
    )

    def __init__(self, window_s: int) -> None:
        self.bulkhead: BulkheadOptions | None = None
        self.budget_options: RetryBudgetOptions | None = None
        self.budget: RetryBudgetWindow | None = None
        self.queued: dict[CallKey, Queued] = {}
        self.rejected_full = 0
        self.rejected_timeout = 0
        self._waits: deque[tuple[float, float]] | None = None  # (ended, waited s), made on first use
        self.bulkhead_refused = RollingCount(window_s)
        self.refused = 0
        """Retries the tool's own budget refused, since it was set (a reload keeps counting)."""
        self.shared_refused = 0
        self.shared: RetryBudgetSpent | None = None
        """The last refusal by the engine-wide budget."""
        self.budget_refused = RollingCount(window_s)
        self.last_refusal: Refusal | None = None
        self.engine_budget: EngineBudget | None = None
        """The model's engine-wide budget, fed this tool's calls and retries."""
        self.rate_limit: RateLimitFold | None = None
        self._window_s = window_s

    @property
    def active(self) -> bool:
        """Anything to show: a section in the manifest, or refusals by the engine-wide budget."""
        return (
            self.bulkhead is not None
            or self.budget is not None
            or self.shared is not None
            or self.rate_limit is not None
        )

    def configure(self, content: Mapping[str, Any] | None) -> None:
        """The manifest in force changed: take its sections, keeping what the engine keeps across
        a reload (the queue and counts of a bulkhead still set, a budget's window)."""
        bulkhead = _options(content, "bulkhead", BulkheadOptions)
        if bulkhead is None and self.bulkhead is not None:  # its state leaves with it
            self.queued.clear()
            self._waits = None
            self.rejected_full = self.rejected_timeout = 0
        self.bulkhead = bulkhead
        budget = _options(content, "retry_budget", RetryBudgetOptions)
        if budget is None:
            self.budget, self.refused = None, 0
        elif self.budget is None:
            self.budget = RetryBudgetWindow(budget)
        elif budget != self.budget_options:
            self.budget.reconfigure(budget)
        self.budget_options = budget
        rate_limit = rate_limit_options(content)
        if rate_limit is None:
            self.rate_limit = None
        elif self.rate_limit is None:
            self.rate_limit = RateLimitFold(rate_limit, self._window_s)
        elif rate_limit != self.rate_limit.options:  # tokens and cooldown kept, as the engine's
            self.rate_limit.reconfigure(rate_limit)

    def restart(self) -> None:
        """The engine restarted (a new recording): its strategies start afresh."""
        content = {
            "bulkhead": self.bulkhead.model_dump() if self.bulkhead else None,
            "retry_budget": self.budget_options.model_dump() if self.budget_options else None,
        }
        self.configure(None)
        self.shared, self.shared_refused, self.last_refusal = None, 0, None
        self.bulkhead_refused.clear()
        self.budget_refused.clear()
        rate_limit = self.rate_limit
        self.configure(content)
        if rate_limit is not None:
            rate_limit.clear()
            self.rate_limit = rate_limit

    # --- events ------------------------------------------------------------------------------

    def _call_started(self, t: float) -> None:
        if self.budget is not None:
            self.budget.call_started(t)
        engine_budget = self.engine_budget
        if engine_budget is not None and engine_budget.window is not None:
            engine_budget.window.call_started(t)

    def _past_rate_limit(self, key: CallKey, attempt: int, t: float) -> bool:
        """An attempt's first event past the rate limit: True when it is its call's first event."""
        if self.rate_limit is not None:
            return self.rate_limit.admitted(key, attempt, t)
        return attempt == 1

    def attempt_queued(self, e: BulkheadQueued) -> None:
        if self._past_rate_limit((e.turn_id, e.call_id), e.attempt, e.t):  # the engine counted it then
            self._call_started(e.t)
        timeout_s = self.bulkhead.queue_timeout_ms / 1000.0 if self.bulkhead is not None else math.inf
        self.queued[(e.turn_id, e.call_id)] = Queued(e.call_id, e.turn_id, e.attempt, e.t, e.t + timeout_s)

    def attempt_started(self, key: CallKey, attempt: int, t: float) -> None:
        waited = self.queued.pop(key, None) if self.queued else None
        if waited is not None:
            self._wait_ended(t, t - waited.since)
        elif self._past_rate_limit(key, attempt, t):
            self._call_started(t)

    def attempt_refused(self, e: BulkheadRejected) -> None:
        key = (e.turn_id, e.call_id)
        waited = self.queued.pop(key, None)
        if waited is None and self._past_rate_limit(key, e.attempt, e.t):  # refused at once: its first
            self._call_started(e.t)
        if e.reason.startswith(BULKHEAD_FULL):
            self.rejected_full += 1
        else:  # its wait ran out: the engine records the wait
            self.rejected_timeout += 1
            self._wait_ended(e.t, e.waited_ms / 1000.0)
        self.bulkhead_refused.add(e.t)
        self.last_refusal = Refusal(
            e.t, e.at, e.call_id, e.turn_id, e.attempt, "bulkhead", e.attempt > 1, e.reason
        )

    def call_rejected(self, e: CallRejected) -> None:
        # A strategy's refusal (bulkhead full, throttled) came first and counted the call; the
        # breaker's is the call's first and last event.
        if e.kind is not ErrorKind.BULKHEAD_FULL and e.kind is not ErrorKind.THROTTLED:
            self._call_started(e.t)

    def rate_limit_waited(self, e: RateLimitWaited) -> None:
        if e.attempt == 1:  # the call's first event: its wait was announced as it ended
            self._call_started(e.t - e.waited_ms / 1000.0)
        if self.rate_limit is not None:
            self.rate_limit.waited_for(e)

    def rate_limit_refused(self, e: RateLimitRejected) -> None:
        if e.attempt == 1:  # the call's first event
            self._call_started(e.t - e.waited_ms / 1000.0)
        if self.rate_limit is not None:
            self.rate_limit.refused(e)
        self.last_refusal = Refusal(
            e.t, e.at, e.call_id, e.turn_id, e.attempt, "rate limit", e.attempt > 1, e.reason
        )

    def cooldown_started(self, e: CooldownStarted) -> None:
        if self.rate_limit is not None:
            self.rate_limit.cooldown_started(e)

    def cooldown_ended(self, e: CooldownEnded) -> None:
        if self.rate_limit is not None:
            self.rate_limit.cooldown_ended(e)

    def call_ended(self, key: CallKey) -> None:
        """A call's attempt ended: a queued attempt's end was lost if it is still listed."""
        if self.queued:
            self.queued.pop(key, None)
        if self.rate_limit is not None:
            self.rate_limit.call_ended(key)

    def retry_decided(self, t: float) -> None:
        """A failed attempt's decision is to retry: the budgets consented, and spent one each."""
        if self.budget is not None:
            self.budget.try_spend(t)
        engine_budget = self.engine_budget
        if engine_budget is not None and engine_budget.window is not None:
            engine_budget.window.try_spend(t)

    def budget_spent(self, e: RetryBudgetSpent) -> None:
        if e.shared:
            self.shared_refused += 1
            self.shared = e
            if self.budget is not None:  # the tool's own budget, asked first, had consented
                self.budget.try_spend(e.t)
            engine_budget = self.engine_budget
            if engine_budget is not None and engine_budget.window is not None:
                engine_budget.window.refused += 1  # the engine's refused: so does ours, whatever it counts
            by = "engine-wide retry budget"
        else:
            self.refused += 1
            by = "retry budget"
        self.budget_refused.add(e.t)
        self.last_refusal = Refusal(e.t, e.at, e.call_id, e.turn_id, e.attempt, by, True, e.reason)

    def _wait_ended(self, t: float, waited_s: float) -> None:
        if self._waits is None:
            self._waits = deque(maxlen=WAIT_RECORD_SIZE)
        self._waits.append((t, waited_s))

    def expire(self, now: float, grace_s: float) -> bool:
        """Drop queued attempts whose wait ran out ``grace_s`` ago unseen (their end was lost)."""
        stale = [key for key, q in self.queued.items() if q.until + grace_s < now]
        for key in stale:
            del self.queued[key]
        return bool(stale)

    # --- reading -----------------------------------------------------------------------------

    def wait_p95_ms(self, now: float) -> float:
        """The engine's rule (:func:`engine.strategies.bulkhead.limiter.wait_p95_s`)."""
        return wait_p95_s(self._waits or (), now) * 1000.0

    def figures(self, now: float, in_flight: int) -> StrategyFigures:
        bulkhead = None
        if self.bulkhead is not None:
            bulkhead = BulkheadFacts(
                in_flight=in_flight,
                max_concurrent=self.bulkhead.max_concurrent,
                queued=len(self.queued),
                max_queued=self.bulkhead.max_queued,
                rejected_full=self.rejected_full,
                rejected_timeout=self.rejected_timeout,
                wait_p95_ms=self.wait_p95_ms(now),
            )
        budget = None
        if self.budget is not None:
            window = self.budget.snapshot(now)
            budget = RetryBudgetFacts(
                window.calls, window.retries, window.allowed, self.refused, window.window_s
            )
        shared = None
        if self.shared is not None:
            e = self.shared
            shared = SharedBudgetSeen(self.shared_refused, e.retries, e.calls, e.window_s, e.t)
        engine_budget = self.engine_budget.figures(now) if self.engine_budget is not None else None
        rate_limit = self.rate_limit.figures(now) if self.rate_limit is not None else None
        return StrategyFigures(
            bulkhead, self.bulkhead_refused.total(now), budget, shared, self.budget_refused.total(now),
            self.last_refusal, engine_budget, rate_limit,
        )  # fmt: skip
