"""Internal: a retry budget's arithmetic — calls and retries counted in a sliding window of time
buckets. Pure: no clock is read and nothing waits; engine time comes in as ``now``. Import the
names from :mod:`engine.strategies.budget`.

The window is :data:`BUCKETS` buckets of ``window_s / BUCKETS`` seconds, the current one included,
so it covers between ``window_s − window_s / BUCKETS`` and ``window_s`` of the most recent time and
slides a bucket at a time. The current bucket's counts are two plain integers: counting a call is
one compare and one add until the bucket ends; only then are the buckets rotated (at most
:data:`BUCKETS` steps, however long the pause).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.strategies.budget.options import RetryBudgetOptions

BUCKETS = 10
"""Buckets per window: the window slides a tenth of itself at a time."""
MIN_BUCKET_S = 1e-9
"""The narrowest bucket: a window under 10 ns counts as 10 ns, so ``now / width`` stays finite."""
_NEVER = -(2**62)
"""The epoch before the first call: so far back that the first call clears every bucket."""


@dataclass(frozen=True, slots=True)
class RetryBudgetFacts:
    """A retry budget's window at one moment."""

    calls: int
    """Calls started in the window."""
    retries: int
    """Retries spent in the window."""
    allowed: int
    """The most retries the window allows now, those already spent included: ``allowed − retries``
    more may still be spent."""
    refused: int
    """Retries refused since the budget began; a reload keeps counting."""
    window_s: float


class RetryBudgetWindow:
    """Calls and retries in the last ``window_s``, and whether one more retry fits.

    The rule: retries in the window ≤ ``max(budget_percent / 100 × calls, min_retries_per_s ×
    window_s)``, rounded down. Memory is fixed: two rings of :data:`BUCKETS` integers.
    Engine time is expected not to go back; if it does (another event loop's clock), the next
    :meth:`try_spend` starts the window afresh.
    """

    __slots__ = (
        "_bucket_end",
        "_bucket_start",
        "_calls",
        "_epoch",
        "_floor",
        "_past_calls",
        "_past_retries",
        "_percent",
        "_retries",
        "_ring_calls",
        "_ring_retries",
        "_width",
        "options",
        "refused",
    )

    def __init__(self, options: RetryBudgetOptions) -> None:
        self._epoch = _NEVER  # the current bucket's index: floor(now / width)
        self._bucket_start = -math.inf
        self._bucket_end = -math.inf
        self._calls = 0  # the current bucket's counts
        self._retries = 0
        self._past_calls = 0  # the older buckets' counts still in the window
        self._past_retries = 0
        self._ring_calls = [0] * BUCKETS  # an older bucket's counts, at slot epoch % BUCKETS
        self._ring_retries = [0] * BUCKETS
        self.refused = 0
        """Retries refused since the window began (kept by :meth:`reconfigure`)."""
        self._configure(options)

    def _configure(self, options: RetryBudgetOptions) -> None:
        self.options = options
        self._width = max(options.window_s / BUCKETS, MIN_BUCKET_S)
        self._percent = options.budget_percent
        # Rounded first: 0.7 × 10 is 7.000000000000001 and 0.29 × 100 is 28.999999999999996.
        self._floor = math.floor(round(options.min_retries_per_s * options.window_s, 6))

    def allowance(self, calls: int) -> int:
        """The most retries a window with ``calls`` calls allows."""
        return max(math.floor(self._percent * calls / 100), self._floor)

    def call_started(self, now: float) -> None:
        """Count a call that started at engine time ``now``."""
        if now >= self._bucket_end:
            self._roll(now)
        self._calls += 1

    def try_spend(self, now: float) -> str | None:
        """Spend one retry at ``now`` if the window allows it (None), else say why not."""
        if not self._bucket_start <= now < self._bucket_end:
            self._roll(now)
        retries = self._past_retries + self._retries
        calls = self._past_calls + self._calls
        # retries + 1 ≤ floor(x) exactly when retries + 1 ≤ x: the same rule as allowance().
        if retries < self._floor or retries + 1 <= self._percent * calls / 100:
            self._retries += 1
            return None
        self.refused += 1
        return f"retry budget spent: {retries} retries over {calls} calls in {self.options.window_s:g} s"

    def snapshot(self, now: float) -> RetryBudgetFacts:
        """The window as it stands at ``now``; reading it changes nothing."""
        calls, retries = self._counts_at(now)
        return RetryBudgetFacts(
            calls=calls,
            retries=retries,
            allowed=self.allowance(calls),
            refused=self.refused,
            window_s=self.options.window_s,
        )

    def reconfigure(self, options: RetryBudgetOptions) -> None:
        """Apply new options (a reload) keeping the counts already in the window.

        A new ``window_s`` changes the buckets' width: each bucket keeps its counts and its age in
        buckets, and the current one becomes the new-width bucket holding the current one's start
        (so no later ``now`` is ever before it). A longer window therefore keeps recent counts a
        little longer than their times alone would; a shorter one lets them age out sooner.
        """
        old_width, old_epoch = self._width, self._epoch
        self._configure(options)
        if self._width == old_width or old_epoch == _NEVER:
            return
        epoch = math.floor(self._bucket_start / self._width)
        for ring in (self._ring_calls, self._ring_retries):
            aged = [ring[(old_epoch - age) % BUCKETS] for age in range(BUCKETS)]
            for age, count in enumerate(aged):
                ring[(epoch - age) % BUCKETS] = count
        self._set_bucket(epoch)

    def _set_bucket(self, epoch: int) -> None:
        self._epoch = epoch
        self._bucket_start = epoch * self._width
        self._bucket_end = (epoch + 1) * self._width

    def _roll(self, now: float) -> None:
        """Make the bucket holding ``now`` the current one, dropping buckets that left the window."""
        epoch = math.floor(now / self._width)
        old = self._epoch
        if epoch > old and epoch - old < BUCKETS:
            ring_calls, ring_retries = self._ring_calls, self._ring_retries
            slot = old % BUCKETS  # emptied when ``old`` became current
            ring_calls[slot], ring_retries[slot] = self._calls, self._retries
            past_calls = self._past_calls + self._calls
            past_retries = self._past_retries + self._retries
            for passed in range(old + 1, epoch + 1):
                slot = passed % BUCKETS  # holds bucket passed − BUCKETS, now out of the window
                past_calls -= ring_calls[slot]
                past_retries -= ring_retries[slot]
                ring_calls[slot] = ring_retries[slot] = 0
            self._past_calls, self._past_retries = past_calls, past_retries
            self._calls = self._retries = 0
        elif epoch != old:
            # A whole window passed with nothing counted, or time went back (another clock):
            # nothing counted so far is in the window that ends at ``now``.
            self._ring_calls[:] = self._ring_retries[:] = [0] * BUCKETS
            self._past_calls = self._past_retries = self._calls = self._retries = 0
        self._set_bucket(epoch)

    def _counts_at(self, now: float) -> tuple[int, int]:
        """Calls and retries in the window ending at ``now``, as :meth:`_roll` would leave them."""
        if self._bucket_start <= now < self._bucket_end:
            return self._past_calls + self._calls, self._past_retries + self._retries
        age = math.floor(now / self._width) - self._epoch
        if age == 0:  # ``now`` on a bucket edge that rounding put on either side
            return self._past_calls + self._calls, self._past_retries + self._retries
        if not 0 < age < BUCKETS:
            return 0, 0
        calls, retries = self._calls, self._retries
        for older in range(1, BUCKETS - age):
            slot = (self._epoch - older) % BUCKETS
            calls += self._ring_calls[slot]
            retries += self._ring_retries[slot]
        return calls, retries
