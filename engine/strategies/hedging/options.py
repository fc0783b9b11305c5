"""Internal: the ``hedging`` manifest section. Import it from :mod:`engine.strategies.hedging`."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator

from engine.config import DAY_MS, NOT_BOOL
from engine.strategies.base import StrategyOptions

MAX_HEDGES = 10
P95 = "p95"


def _hedge_after(value: Any) -> float | str:
    """A number of milliseconds in (0, 24 h], or ``"p95"``: one message for anything else (a union
    would report each of its options' errors)."""
    if value == P95:
        return P95
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f'must be a number of milliseconds or "p95", not {value!r}')
    if not (0 < value <= DAY_MS) or math.isnan(value):
        raise ValueError(f"must be more than 0 and at most {DAY_MS:g} ms, not {value!r}")
    return float(value)


class HedgingOptions(StrategyOptions):
    """When a read-only tool's slow attempt is raced by another one, and how many times a call may be.

    Numbers are bounded, finite and never booleans (``true`` is not 1).
    """

    hedge_after_ms: Annotated[float | Literal["p95"], PlainValidator(_hedge_after)]
    """How long an attempt runs before one more starts beside it: milliseconds, or ``"p95"`` — the
    tool's live p95 attempt latency over its metrics window (no hedge while the window has none)."""
    max_hedges: Annotated[int, NOT_BOOL] = Field(default=1, ge=1, le=MAX_HEDGES)
    """Hedges one call may start, over all its attempts (each one more attempt in flight)."""
