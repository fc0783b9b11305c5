"""Internal: the retry budget as a strategy of a tool's pipeline. Import it from
:mod:`engine.strategies.budget`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from engine.strategies.base import SHARED, CallView, Strategy
from engine.strategies.budget.events import RetryBudgetSpent
from engine.strategies.budget.options import RetryBudgetOptions
from engine.strategies.budget.window import RetryBudgetWindow

SHARED_TOOL_ID = SHARED
"""The ``tool_id`` of the one instance every tool shares (``retry_budget`` in ``defaults.yaml``)."""


class RetryBudgetStrategy(Strategy[RetryBudgetOptions]):
    """Counts every call and refuses a retry once the window's retries reach its allowance."""

    section = "retry_budget"
    options_type = RetryBudgetOptions
    shared_section = True

    def __init__(self, tool_id: str, options: RetryBudgetOptions) -> None:
        super().__init__(tool_id, options)
        self.window = RetryBudgetWindow(options)

    @property
    def shared(self) -> bool:
        """Whether this is the engine-wide budget rather than one tool's."""
        return self.tool_id == SHARED_TOOL_ID

    def handover(self, previous: Strategy[RetryBudgetOptions]) -> None:
        """Keep the previous budget's window (its counts and refusals) under the new options."""
        if isinstance(previous, RetryBudgetStrategy):
            previous.window.reconfigure(self.options)
            self.window = previous.window

    def call_started(self, call: CallView) -> None:
        self.window.call_started(call.start)

    def retry_refusal(self, call: CallView) -> str | None:
        now = call.now
        reason = self.window.try_spend(now)
        if reason is not None and call.observed:
            facts = self.window.snapshot(now)
            call.announce(
                RetryBudgetSpent(
                    at=call.wall_clock(),
                    t=now,
                    tool_id=call.tool_id,
                    call_id=call.call_id,
                    turn_id=call.turn_id,
                    attempt=call.attempt,
                    retries=facts.retries,
                    calls=facts.calls,
                    window_s=facts.window_s,
                    reason=reason,
                    shared=self.shared,
                )
            )
        return reason

    def facts(self, now: float) -> dict[str, Any]:
        return {**asdict(self.window.snapshot(now)), "shared": self.shared}
