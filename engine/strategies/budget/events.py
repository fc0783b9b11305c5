"""Internal: the retry budget's event. Import it from :mod:`engine.strategies.budget`."""

from __future__ import annotations

from dataclasses import dataclass

from engine.event import ToolEvent


@dataclass(slots=True, kw_only=True)
class RetryBudgetSpent(ToolEvent):
    """A retry was refused: the retry budget of its window was spent, so the call ended there."""

    attempt: int
    """The attempt that failed and would have been retried."""
    retries: int
    """Retries spent in the window when this one was refused."""
    calls: int
    """Calls started in the window."""
    window_s: float
    reason: str
    """The refusal as the call's decision gives it:
    ``retry budget spent: 30 retries over 150 calls in 10 s``."""
    shared: bool
    """The engine-wide budget every tool shares (True) or the tool's own (False)."""

    def describe(self) -> str:
        budget = "engine-wide retry budget" if self.shared else "retry budget"
        return (
            f"{self.tool_id} retry after attempt {self.attempt} refused by the {budget}: "
            f"{self.retries} retries over {self.calls} calls in {self.window_s:g} s"
        )
