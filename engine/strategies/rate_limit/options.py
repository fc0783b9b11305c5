"""Internal: the ``rate_limit`` manifest section. Import it from :mod:`engine.strategies.rate_limit`."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from engine.config import DAY_MS, NOT_BOOL
from engine.strategies.base import StrategyOptions

MAX_RATE_PER_S = 1_000_000.0
MAX_BURST = 1_000_000


class RateLimitOptions(StrategyOptions):
    """How fast attempts of one tool may start, how long one may wait for its turn, and how long
    the tool pauses for every caller after a rate-limit error.

    Numbers are bounded, finite and never booleans (``true`` is not 1).
    """

    rate_per_s: Annotated[float | None, NOT_BOOL] = Field(default=None, gt=0, le=MAX_RATE_PER_S)
    """Attempts the tool may start per second, on average (the bucket's refill). None: no rate of
    its own, only the cooldown after a rate-limit error."""
    burst: Annotated[int | None, NOT_BOOL] = Field(default=None, ge=1, le=MAX_BURST)
    """Attempts that may start at once after a quiet spell (the bucket's size); by default one
    second's worth of ``rate_per_s`` (at least 1)."""
    max_wait_ms: Annotated[float, NOT_BOOL] = Field(default=1000.0, ge=0, le=DAY_MS)
    """The longest an attempt waits for a token or for a cooldown to end (never past its turn's
    deadline); one that would wait longer is refused at once. 0: never wait."""
    scope: Literal["process", "fleet"] = "process"
    """``process``: each process has its own bucket and cooldown. ``fleet``: accepted for the fleet
    to share them; until a fleet is attached the limiter behaves as ``process``."""
    cooldown_ms: Annotated[float, NOT_BOOL] = Field(default=1000.0, ge=0, le=DAY_MS)
    """The pause after a rate-limit error that does not say how long to wait (no ``Retry-After``)."""
    max_cooldown_ms: Annotated[float, NOT_BOOL] = Field(default=300_000.0, ge=0, le=DAY_MS)
    """The longest pause any error may ask for (a ``Retry-After`` of a day pauses 5 min by
    default). 0: never pause the tool."""

    @model_validator(mode="after")
    def _burst_needs_a_rate(self) -> Self:
        if self.burst is not None and self.rate_per_s is None:
            raise ValueError("burst needs rate_per_s")
        return self

    @property
    def bucket_size(self) -> int:
        """``burst``, or one second's worth of ``rate_per_s`` (at least 1) when it is not given."""
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil(self.rate_per_s or 1.0))
