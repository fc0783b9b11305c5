"""One tool as the console knows it: its breaker, its running attempts, its history and its
rolling figures, and the row the board shows of it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from console.model.manifests import ManifestView
from console.model.strategies import StrategyFigures, ToolStrategies
from console.model.timelines import RECENT_CALLS, CallTimeline, build_timelines
from engine.events import Event
from engine.metrics import Counts, ToolMetrics, ToolStats
from engine.strategies.breaker.machine import BreakerState

WINDOW_S = 60
"""Rolling counts, error % and percentiles cover this many seconds. Hystrix used 10 s for
services answering thousands of calls a second; an agent's tools see a few calls a minute."""
SPARK_S = 120
"""The sparkline's length: calls per second over the last two minutes."""
HISTORY = 50
"""Breaker transitions and errors kept per tool."""
RECENT_EVENTS = 64
"""Call events kept per tool, to draw its retry timeline from."""

SEVERITY: dict[BreakerState, int] = {
    BreakerState.FORCED_OPEN: 0,
    BreakerState.OPEN: 1,
    BreakerState.HALF_OPEN: 2,
    BreakerState.DISABLED: 3,
    BreakerState.CLOSED: 4,
}
"""Board order when sorting by state: the most urgent first."""


@dataclass(frozen=True, slots=True)
class Transition:
    t: float
    at: float
    from_state: BreakerState
    to_state: BreakerState
    actor: str
    reason: str


@dataclass(frozen=True, slots=True)
class ErrorRow:
    t: float
    at: float
    call_id: str
    turn_id: str | None
    attempt: int
    kind: str
    error_class: str
    reason: str
    message: str
    status_code: int | None
    decision: str


@dataclass(slots=True)
class InFlight:
    call_id: str
    turn_id: str | None
    attempt: int
    started: float
    deadline: float
    probe: bool


@dataclass(frozen=True, slots=True)
class BoardRow:
    """One tool as the board shows it at a moment."""

    tool_id: str
    state: BreakerState
    consecutive_failures: int
    failure_threshold: int | None
    half_open_at: float | None
    stats: ToolStats
    in_flight: int
    strategies: StrategyFigures | None = None
    """The tool's bulkhead and retry budget; None for a tool with neither (the board shows it as
    it always did)."""

    @property
    def window(self) -> Counts:
        return self.stats.window

    @property
    def error_percent(self) -> float | None:
        return self.stats.window.error_percent

    @property
    def rate(self) -> float:
        """Calls per second over the window."""
        return self.stats.rate_per_s

    @property
    def p50_ms(self) -> float | None:
        return self.stats.window.p50_ms

    @property
    def p99_ms(self) -> float | None:
        return self.stats.window.p99_ms

    @property
    def spark(self) -> tuple[int, ...]:
        return self.stats.sparkline


class ToolView:
    """Everything the console knows about one tool; ``version`` grows with every change."""

    __slots__ = (
        "_row",
        "_row_version",
        "_stats",
        "_stats_second",
        "_stats_version",
        "consecutive_failures",
        "errors",
        "half_open_at",
        "history",
        "in_flight",
        "manifest",
        "metrics",
        "recent",
        "state",
        "stats_seq",
        "strategies",
        "tool_id",
        "version",
    )

    def __init__(self, tool_id: str, state: BreakerState = BreakerState.CLOSED) -> None:
        self.tool_id = tool_id
        self.state = state
        self.consecutive_failures = 0
        self.half_open_at: float | None = None
        self.history: deque[Transition] = deque(maxlen=HISTORY)
        self.errors: deque[ErrorRow] = deque(maxlen=HISTORY)
        self.in_flight: dict[tuple[str | None, str], InFlight] = {}
        """The attempt each running call is on, by (turn, call)."""
        self.recent: deque[Event] = deque(maxlen=RECENT_EVENTS)
        """This tool's newest call events (and the deadlines that cut its calls off): the
        retry timeline is built from them when it is shown, not on every event."""
        self.metrics = ToolMetrics(tool_id, window_s=WINDOW_S, history_s=SPARK_S)
        self.manifest: ManifestView | None = None
        self.strategies = ToolStrategies(WINDOW_S)
        self.version = 0
        self._row: BoardRow | None = None
        self._row_version = -1
        self._stats: ToolStats | None = None
        self._stats_version = -1
        self._stats_second = -1
        self.stats_seq = 0
        """The board refresh that last took its rolling figures: the longest-waiting go first."""

    def set_manifest(self, manifest: ManifestView | None) -> None:
        """The manifest now in force (its strategies' sections with it)."""
        self.manifest = manifest
        self.strategies.configure(manifest.content if manifest is not None else None)

    @property
    def failure_threshold(self) -> int | None:
        return self.manifest.failure_threshold if self.manifest is not None else None

    def lifetime(self, now: float) -> Counts:
        return self.row(now).stats.life

    def stats_stale(self, now: float) -> bool:
        """The tool changed since its figures were taken, or their window moved on a second."""
        return self._stats is None or self._stats_version != self.version or self._stats_second != int(now)

    def refresh_stats(self, now: float, seq: int = 0) -> None:
        self._stats = self.metrics.snapshot(now)
        self._stats_version, self._stats_second, self.stats_seq = self.version, int(now), seq

    def row(self, now: float, *, refresh: bool = True) -> BoardRow:
        """The board's figures at ``now``: the breaker's always current, the rolling ones (a
        snapshot of the tool's metrics) taken again if stale, unless ``refresh`` is False (the
        board takes them in turns: see :meth:`ConsoleModel.rows`)."""
        if self._stats is None or (refresh and self.stats_stale(now)):
            self.refresh_stats(now)
        stats = self._stats
        assert stats is not None
        row = self._row
        if row is None or self._row_version != self.version or row.stats is not stats:
            strategies = self.strategies
            figures = strategies.figures(now, len(self.in_flight)) if strategies.active else None
            row = self._row = BoardRow(
                self.tool_id, self.state, self.consecutive_failures, self.failure_threshold,
                self.half_open_at if self.state is BreakerState.OPEN else None, stats, len(self.in_flight),
                figures,
            )  # fmt: skip
            self._row_version = self.version
        return row

    def timelines(self, limit: int = RECENT_CALLS) -> list[CallTimeline]:
        """The newest ``limit`` calls of this tool, oldest first, attempt by attempt."""
        return build_timelines(self.recent, limit)

    def call_ended(self, e: Event, turn_id: str | None, call_id: str) -> None:
        """A call's attempt ended (``e`` says how): no longer in flight, kept for the timeline."""
        self.in_flight.pop((turn_id, call_id), None)
        self.strategies.call_ended((turn_id, call_id))
        self.recent.append(e)


@dataclass(frozen=True, slots=True)
class ToolSeed:
    """What the console knows of a tool before any event: its breaker and manifest."""

    tool_id: str
    state: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    half_open_at: float | None = None
    manifest: ManifestView | None = None
