"""Internal: the ``retry_budget`` manifest section. Import it from :mod:`engine.strategies.budget`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from engine.config import NOT_BOOL
from engine.strategies.base import StrategyOptions


class RetryBudgetOptions(StrategyOptions):
    """How many retries a tool (or every tool, when shared) may make, relative to its calls.

    In the last ``window_s`` seconds, retries may be at most
    ``max(budget_percent / 100 × calls, min_retries_per_s × window_s)``.
    """

    budget_percent: Annotated[float, NOT_BOOL] = Field(default=20.0, ge=0, le=1000)
    """Retries allowed as a percentage of the calls started in the window: 20 lets 150 calls make
    30 retries. Above 100 lets every call retry more than once."""
    min_retries_per_s: Annotated[float, NOT_BOOL] = Field(default=3.0, ge=0, le=10_000)
    """A floor for quiet tools: the window always allows ``min_retries_per_s × window_s`` retries
    (30 in 10 s by default), however few calls it saw. 0: only the percentage counts."""
    window_s: Annotated[float, NOT_BOOL] = Field(default=10.0, gt=0, le=3600)
    """How far back calls and retries are counted, in seconds: the window slides in tenths of it."""
