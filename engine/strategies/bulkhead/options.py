"""Internal: the ``bulkhead`` manifest section. Import it from :mod:`engine.strategies.bulkhead`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from engine.config import DAY_MS, NOT_BOOL
from engine.strategies.base import StrategyOptions

MAX_CONCURRENT = 100_000
MAX_QUEUED = 1_000_000


class BulkheadOptions(StrategyOptions):
    """How many attempts of one tool may be in flight at once, and how many may wait for a slot.

    Numbers are bounded, finite and never booleans (``true`` is not 1).
    """

    max_concurrent: Annotated[int, NOT_BOOL] = Field(ge=1, le=MAX_CONCURRENT)
    """Attempts of the tool in flight at once; one more waits in the queue, or is refused."""
    max_queued: Annotated[int, NOT_BOOL] = Field(default=0, ge=0, le=MAX_QUEUED)
    """Attempts that may wait for a slot, first come first served; 0: refuse at once when full."""
    queue_timeout_ms: Annotated[float, NOT_BOOL] = Field(default=1000.0, ge=0, le=DAY_MS)
    """The longest an attempt waits in the queue (never past the turn's deadline); 0: never wait."""
