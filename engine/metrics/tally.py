"""Per-tool counters and latency percentiles, lifetime and rolling (spec-map metrics.per-tool).

Each ``on_*`` hook counts one fact, as :mod:`engine.metrics.counted` says which event carries it.
The engine calls the hooks on its hot path, so each one is a float compare plus a
few attribute increments on the current second's tally — no allocation once a latency
bucket exists, no locks (one event loop), no clock reads, no I/O. The rest happens once
per second per tool (``_roll`` folds the finished second into the lifetime totals) or in
``snapshot()`` (sums, histogram merges, percentiles).

Time is engine time in seconds (anyio's monotonic clock, or a virtual one). A ring of
per-second tallies holds the recent past; each tally stores its second number, so a slot
left over from an earlier lap of the ring is recognised as stale and never counted. A jump
forward of any size costs one roll, not one step per skipped second.

An idle tool costs next to nothing (~120 B: registering 10,000 tools allocated 266 MB when every
tool pre-allocated its ring): the ring, the lifetime tally and each ring slot are allocated on
first use, and until the first hook every tool shares one empty stand-in tally.

Latency precision: every attempt's latency (success or failure) goes into a histogram
whose buckets grow by ``GROWTH`` (5 %) from ``LATENCY_FLOOR_S`` (1 µs). A percentile is
the nearest-rank order statistic's bucket, reported as the bucket's geometric midpoint, so
it is within ``LATENCY_PRECISION`` (√1.05 − 1 ≈ 2.47 %) of the exact order statistic for
latencies from 1 µs to ``LATENCY_CEILING_S`` (10⁶ s). Latencies under 1 µs (a virtual
clock's instant attempts) report as 0 ms; those above the ceiling report as the top bucket.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

GROWTH = 1.05
"""Ratio between successive latency bucket edges."""
LATENCY_FLOOR_S = 1e-6
LATENCY_CEILING_S = 1e6
LATENCY_PRECISION = math.sqrt(GROWTH) - 1.0
"""Largest relative error of a reported percentile against the exact order statistic."""

_log = math.log  # module globals: one cheap lookup each on the hot path
_floor = math.floor  # a third cheaper than int() here
_SCALE = 1.0 / math.log(GROWTH)
# Puts 1 µs at bucket 0. The 1e-9 nudge (a 5e-11 relative shift of the edges) keeps rounding
# from dropping exactly 1 µs to bucket -1.
_OFFSET = -math.log(LATENCY_FLOOR_S) * _SCALE + 1e-9
_TOP = math.floor(math.log(LATENCY_CEILING_S) * _SCALE + _OFFSET)
_UNDER = -1  # below the floor: reported as 0 ms
_NEVER = -(1 << 62)  # the second number of a tally that never held a real second

UNKNOWN_TOOL_ID = "(unknown)"
"""What metrics count a call refused as an unknown tool under (not a valid tool id, so never a real
one): the names a model makes up never become metric keys."""


@dataclass(frozen=True, slots=True)
class Counts:
    """Counters and latency percentiles over one span (the engine's life or the window).

    ``calls`` counts calls that started an attempt or were refused before one (a call abandoned
    while it waited for a bulkhead's slot, before any attempt, is not counted). ``error_count``
    counts failed attempts (each is transient or permanent; a timeout is also in
    ``timeout_count``), and streams cut after they opened. ``failures`` counts calls that ended
    failed — those refused before any attempt too (an unknown tool, arguments that cannot be
    passed) —, ``rejections`` calls the breaker or another strategy (a full bulkhead) refused
    without an attempt, ``skipped`` calls a turn never ran. :mod:`engine.metrics.counted` says
    which event counts each.
    """

    calls: int = 0
    successes: int = 0
    failures: int = 0
    rejections: int = 0
    skipped: int = 0
    error_count: int = 0
    transient_error_count: int = 0
    permanent_error_count: int = 0
    timeout_count: int = 0
    retry_count: int = 0
    retry_successes: int = 0
    circuit_breaker_opens: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None

    @property
    def retry_success_rate(self) -> float | None:
        """Fraction of retry attempts that succeeded (0..1); None before any retry."""
        return self.retry_successes / self.retry_count if self.retry_count else None

    @property
    def error_percent(self) -> float | None:
        """Percent of finished calls that failed or were rejected; None before any finished."""
        bad = self.failures + self.rejections
        finished = self.successes + bad
        return 100.0 * bad / finished if finished else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["retry_success_rate"] = self.retry_success_rate
        data["error_percent"] = self.error_percent
        return data


@dataclass(frozen=True, slots=True)
class ToolStats:
    """One tool's metrics at one instant: lifetime, the rolling window and recent history."""

    tool_id: str
    life: Counts
    window: Counts
    window_s: int
    rate_per_s: float
    """Calls per second over the window: window calls / window_s."""
    sparkline: tuple[int, ...]
    """Calls per second for the last ``history_s`` seconds, oldest first, ending with the current one."""
    strategies: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """The tool's other strategies' state by section (a bulkhead's occupancy, a retry budget's
    refusals), as :attr:`engine.handler.FailureContext.strategies` has it; empty for the backbone."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "tool_id": self.tool_id,
            "life": self.life.to_dict(),
            "window": self.window.to_dict(),
            "window_s": self.window_s,
            "rate_per_s": self.rate_per_s,
            "sparkline": list(self.sparkline),
        }
        if self.strategies:
            out["strategies"] = {section: dict(facts) for section, facts in self.strategies.items()}
        return out


class _Tally:
    """Raw counters for one second (a ring slot), or the folded lifetime totals."""

    __slots__ = (
        "calls",
        "failures",
        "latency",
        "opens",
        "permanent",
        "rejections",
        "retries",
        "retry_successes",
        "sec",
        "skipped",
        "successes",
        "timeouts",
        "transient",
    )

    def __init__(self) -> None:
        self.latency: dict[int, int] = {}  # bucket index → attempts
        self.reset(_NEVER)

    def reset(self, sec: int) -> None:
        self.sec = sec
        self.calls = self.successes = self.failures = self.rejections = self.skipped = 0
        self.transient = self.permanent = self.timeouts = 0
        self.retries = self.retry_successes = self.opens = 0
        self.latency.clear()

    def add(self, other: _Tally) -> None:
        self.calls += other.calls
        self.successes += other.successes
        self.failures += other.failures
        self.rejections += other.rejections
        self.skipped += other.skipped
        self.transient += other.transient
        self.permanent += other.permanent
        self.timeouts += other.timeouts
        self.retries += other.retries
        self.retry_successes += other.retry_successes
        self.opens += other.opens
        latency = self.latency
        for bucket, n in other.latency.items():
            latency[bucket] = latency.get(bucket, 0) + n

    def counts(self) -> Counts:
        p50, p95, p99 = percentiles_ms(self.latency, (50, 95, 99))
        return Counts(
            calls=self.calls,
            successes=self.successes,
            failures=self.failures,
            rejections=self.rejections,
            skipped=self.skipped,
            error_count=self.transient + self.permanent,
            transient_error_count=self.transient,
            permanent_error_count=self.permanent,
            timeout_count=self.timeouts,
            retry_count=self.retries,
            retry_successes=self.retry_successes,
            circuit_breaker_opens=self.opens,
            p50_ms=p50,
            p95_ms=p95,
            p99_ms=p99,
        )


_EMPTY = _Tally()
"""Never written: fills the ring slots of seconds not yet lived (``sec`` is ``_NEVER``, so it
never counts) and stands in as every idle tool's current and lifetime tally — ``_edge`` starts at
−∞, so the first hook rolls away from it before counting. (A NaN time, against the contract,
would count into it; its counts are never read.)"""
_ZEROS = Counts()
"""An idle tool's lifetime and window: what an empty tally's ``counts()`` gives (frozen, shared)."""


def latency_bucket(latency_s: float) -> int:
    """The histogram bucket of a latency (the hooks inline this; kept for tests and docs)."""
    if LATENCY_FLOOR_S <= latency_s < LATENCY_CEILING_S:
        return _floor(_log(latency_s) * _SCALE + _OFFSET)
    return _TOP if latency_s >= LATENCY_CEILING_S else _UNDER


def bucket_value_s(bucket: int) -> float:
    """A bucket's representative latency: its geometric midpoint (0 below the floor)."""
    if bucket < 0:
        return 0.0
    return math.exp((bucket + 0.5 - _OFFSET) / _SCALE)  # the inverse of the bucketing, mid-bucket


def percentiles_ms(histogram: dict[int, int], ps: tuple[int, ...]) -> tuple[float | None, ...]:
    """Nearest-rank percentiles (in ms) of a bucket histogram; None for each if it is empty."""
    total = sum(histogram.values())
    if not total:
        return tuple(None for _ in ps)
    ranks = [max(1, -(-total * p // 100)) for p in ps]  # ceil(p% of n), in integers
    buckets = sorted(histogram.items())
    out: list[float | None] = [None] * len(ps)
    seen = index = 0  # attempts in buckets[:index]
    for k in sorted(range(len(ps)), key=ranks.__getitem__):  # one pass for all ranks
        while seen < ranks[k]:
            seen += buckets[index][1]
            index += 1
        out[k] = bucket_value_s(buckets[index - 1][0]) * 1000.0
    return tuple(out)


class ToolMetrics:
    """Counters and latency histograms for one tool; see the module docstring."""

    __slots__ = ("_cur", "_edge", "_life", "_ring", "history_s", "tool_id", "window_s")

    def __init__(self, tool_id: str, *, window_s: int = 10, history_s: int = 120) -> None:
        if window_s < 1 or history_s < 1:
            raise ValueError("window_s and history_s must be at least 1 second")
        self.tool_id = tool_id
        self.window_s = window_s
        self.history_s = history_s
        self._ring: list[_Tally] | None = None  # made by the first hook
        self._life = _EMPTY  # every finished second; the current one is still in _cur
        self._cur = _EMPTY  # a stand-in until the first hook rolls to a real second
        self._edge = -math.inf  # the start of the second after _cur's: reaching it rolls

    def _roll(self, now: float) -> None:
        """Move to ``now``'s second: fold the current tally into the lifetime, reuse a slot."""
        sec = math.floor(now)
        ring = self._ring
        if ring is None:  # the first hook: nothing to fold yet
            ring = self._ring = [_EMPTY] * max(self.window_s, self.history_s)
            self._life = _Tally()
        else:
            self._life.add(self._cur)
        index = sec % len(ring)
        slot = ring[index]
        if slot is _EMPTY:
            slot = ring[index] = _Tally()
        slot.reset(sec)  # seconds only grow, so the slot always holds an older second
        self._cur = slot
        self._edge = sec + 1.0

    # --- hooks: the hot path. `now < _edge` keeps a clock that stands still (or, against the
    # contract, steps back) in the current second. -------------------------------------------

    def on_call(self, now: float) -> None:
        """A call's first attempt is starting (``AttemptStarted`` with attempt 1)."""
        if now >= self._edge:
            self._roll(now)
        self._cur.calls += 1

    def on_rejected(self, now: float) -> None:
        """A call refused before any attempt by the breaker or another strategy (``CallRejected``):
        a call, and a rejected one — not also a failure."""
        if now >= self._edge:
            self._roll(now)
        cur = self._cur
        cur.calls += 1
        cur.rejections += 1

    def on_refused(self, now: float) -> None:
        """A call refused before any attempt (an unknown tool, arguments that cannot be passed):
        a call, and a failed one."""
        if now >= self._edge:
            self._roll(now)
        cur = self._cur
        cur.calls += 1
        cur.failures += 1

    def on_retry(self, now: float) -> None:
        """A retry attempt (attempt ≥ 2) is starting."""
        if now >= self._edge:
            self._roll(now)
        self._cur.retries += 1

    def on_attempt_failed(
        self, now: float, latency_s: float | None, *, transient: bool, timed_out: bool
    ) -> None:
        """An attempt failed after ``latency_s``; ``transient`` is its classification. ``latency_s``
        None: a stream cut after it opened, whose attempt's latency was counted with its success."""
        if now >= self._edge:
            self._roll(now)
        cur = self._cur
        if transient:
            cur.transient += 1
        else:
            cur.permanent += 1
        if timed_out:
            cur.timeouts += 1
        if latency_s is None:
            return
        # latency_bucket(), inlined: a function call would double the cost of this hook.
        if LATENCY_FLOOR_S <= latency_s < LATENCY_CEILING_S:
            bucket = _floor(_log(latency_s) * _SCALE + _OFFSET)
        else:
            bucket = _TOP if latency_s >= LATENCY_CEILING_S else _UNDER
        histogram = cur.latency
        histogram[bucket] = histogram.get(bucket, 0) + 1

    def on_success(self, now: float, latency_s: float, *, retried: bool) -> None:
        """The call's final attempt succeeded after ``latency_s``; ``retried``: it was a retry."""
        if now >= self._edge:
            self._roll(now)
        cur = self._cur
        cur.successes += 1
        if retried:
            cur.retry_successes += 1
        if LATENCY_FLOOR_S <= latency_s < LATENCY_CEILING_S:  # latency_bucket(), inlined
            bucket = _floor(_log(latency_s) * _SCALE + _OFFSET)
        else:
            bucket = _TOP if latency_s >= LATENCY_CEILING_S else _UNDER
        histogram = cur.latency
        histogram[bucket] = histogram.get(bucket, 0) + 1

    def on_partial_success(self, now: float) -> None:
        """The call ended keeping a partial result; its attempt's latency was already recorded."""
        if now >= self._edge:
            self._roll(now)
        self._cur.successes += 1

    def on_failure(self, now: float) -> None:
        """The call ended failed, after its last attempt."""
        if now >= self._edge:
            self._roll(now)
        self._cur.failures += 1

    def on_skipped(self, now: float) -> None:
        """A turn skipped or escalated this call without running it (not counted in calls)."""
        if now >= self._edge:
            self._roll(now)
        self._cur.skipped += 1

    def on_breaker_opened(self, now: float) -> None:
        if now >= self._edge:
            self._roll(now)
        self._cur.opens += 1

    # --- reading --------------------------------------------------------------------------

    def snapshot(self, now: float) -> ToolStats:
        """Lifetime, the last ``window_s`` seconds (including ``now``'s) and the sparkline.

        Reads only: a slot counts for second ``s`` only if it was last reset for ``s``.
        """
        ring = self._ring
        if ring is None:  # idle: no hook yet, zeros (the sums below would give the same)
            return ToolStats(
                tool_id=self.tool_id,
                life=_ZEROS,
                window=_ZEROS,
                window_s=self.window_s,
                rate_per_s=0.0,
                sparkline=(0,) * self.history_s,
            )
        sec = math.floor(now)
        size = len(ring)

        life = _Tally()
        life.add(self._life)
        life.add(self._cur)

        window = _Tally()
        for s in range(sec - self.window_s + 1, sec + 1):
            slot = ring[s % size]
            if slot.sec == s:
                window.add(slot)

        sparkline = []
        for s in range(sec - self.history_s + 1, sec + 1):
            slot = ring[s % size]
            sparkline.append(slot.calls if slot.sec == s else 0)

        return ToolStats(
            tool_id=self.tool_id,
            life=life.counts(),
            window=window.counts(),
            window_s=self.window_s,
            rate_per_s=window.calls / self.window_s,
            sparkline=tuple(sparkline),
        )


class MetricsRegistry:
    """Every tool's :class:`ToolMetrics`, created on first use, and the one snapshot call."""

    __slots__ = ("_tools", "history_s", "window_s")

    def __init__(self, *, window_s: int = 10, history_s: int = 120) -> None:
        if window_s < 1 or history_s < 1:
            raise ValueError("window_s and history_s must be at least 1 second")
        self.window_s = window_s
        self.history_s = history_s
        self._tools: dict[str, ToolMetrics] = {}

    def tool(self, tool_id: str) -> ToolMetrics:
        """The tool's metrics, created on first use (the engine keeps the reference)."""
        metrics = self._tools.get(tool_id)
        if metrics is None:
            metrics = ToolMetrics(tool_id, window_s=self.window_s, history_s=self.history_s)
            self._tools[tool_id] = metrics
        return metrics

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._tools

    def snapshot(self, now: float) -> dict[str, ToolStats]:
        """Every tool's stats at ``now``, in creation order."""
        return {tool_id: metrics.snapshot(now) for tool_id, metrics in self._tools.items()}


__all__ = [
    "GROWTH",
    "LATENCY_CEILING_S",
    "LATENCY_FLOOR_S",
    "LATENCY_PRECISION",
    "UNKNOWN_TOOL_ID",
    "Counts",
    "MetricsRegistry",
    "ToolMetrics",
    "ToolStats",
    "bucket_value_s",
    "latency_bucket",
    "percentiles_ms",
]
