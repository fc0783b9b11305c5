"""Internal: hedging as a strategy of a tool's pipeline — its options, counts and the delay before a
hedge. The race itself is :mod:`engine.pipeline.hedged`'s. Import it from :mod:`engine.strategies.hedging`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engine.side_effect import SideEffect
from engine.strategies.base import PolicyView, Strategy
from engine.strategies.hedging.options import HedgingOptions

if TYPE_CHECKING:
    from engine.metrics import ToolMetrics


@runtime_checkable
class HedgeSchedule(Protocol):
    """When hedges start in a replay: a fault injector that has this replays recorded hedges only."""

    def recorded_hedge_after_s(self, call_id: str, tool_id: str, attempt: int) -> float | None:
        """How long after the attempt started before it hedge ``attempt`` started, or None: none did."""
        ...


@dataclass(frozen=True, slots=True)
class HedgingFacts:
    """A tool's hedging at one moment, as ``engine.stats()`` and error handlers see it."""

    hedges_started: int
    hedges_won: int
    """Races a hedge won (the others' attempts cancelled)."""
    attempts_cancelled: int
    """Attempts cancelled because another attempt of their call won (hedges or not)."""
    hedges_refused: int
    """Hedges due that did not start (retry budget, breaker, bulkhead, rate limit)."""
    hedge_after_ms: float | None
    """The delay in force now: fixed, or the live p95 (None: no p95 yet, so no hedge)."""


class HedgeCounts:
    """What a tool's hedges did: kept across reloads."""

    __slots__ = ("cancelled", "p95_at", "p95_s", "refused", "started", "won")

    def __init__(self) -> None:
        self.started = self.won = self.cancelled = self.refused = 0
        self.p95_at = -math.inf  # the engine second the cached p95 was read in
        self.p95_s: float | None = None


class HedgingStrategy(Strategy[HedgingOptions]):
    """Races a slow attempt of a read-only tool with another after ``hedge_after_ms`` (fixed or the
    live p95), at most ``max_hedges`` per call: the first success wins and the others are cancelled
    (no failure, no breaker evidence). It has no hook of its own: a pipeline with it runs its calls
    through :mod:`engine.pipeline.hedged`."""

    section = "hedging"
    options_type = HedgingOptions

    def __init__(self, tool_id: str, options: HedgingOptions) -> None:
        super().__init__(tool_id, options)
        self.state = HedgeCounts()

    @classmethod
    def refuse_policy(cls, options: Any, policy: PolicyView) -> str | None:
        if getattr(policy, "id", None) is None:  # defaults.yaml's: a default for the read-only tools
            return None
        if policy.side_effect is not SideEffect.READ_ONLY:
            why = "hedging re-sends a call while it runs: only for read_only tools"
            return f"{why} (side_effect is {policy.side_effect.value})"
        return None

    def handover(self, previous: Strategy[HedgingOptions]) -> None:
        if isinstance(previous, HedgingStrategy):
            self.state = previous.state

    def hedge_after_s(self, metrics: ToolMetrics, now: float) -> float | None:
        """How long an attempt runs before a hedge starts beside it; None: no hedge (p95 mode before
        the tool's metrics window holds a latency). The p95 is read at most once per engine second."""
        after = self.options.hedge_after_ms
        if after != "p95":
            return after / 1000.0
        state = self.state
        second = math.floor(now)
        if second != state.p95_at:
            p95_ms = metrics.snapshot(now).window.p95_ms
            state.p95_at, state.p95_s = second, None if p95_ms is None else p95_ms / 1000.0
        return state.p95_s

    def facts(self, now: float) -> Mapping[str, Any]:
        state = self.state
        after = self.options.hedge_after_ms
        after_ms = (None if state.p95_s is None else state.p95_s * 1000.0) if after == "p95" else after
        return asdict(HedgingFacts(state.started, state.won, state.cancelled, state.refused, after_ms))
