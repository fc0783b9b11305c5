"""The fold: :class:`ConsoleModel` takes engine events, batch by batch, into the tools, turns,
manifests and event log the views show, and says what changed."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from console.model.event_log import EVENTS_KEPT, EventRow, event_row
from console.model.manifests import ManifestChange, ManifestView
from console.model.strategies import EngineBudget
from console.model.tools import HISTORY, BoardRow, ErrorRow, InFlight, ToolSeed, ToolView, Transition
from console.model.turns import TURNS_KEPT, CallNode, TurnView, call_nodes
from engine.events import (
    AlternativeUsed,
    AttemptFailed,
    AttemptStarted,
    BreakerRestored,
    BreakerTransitioned,
    BulkheadQueued,
    BulkheadRejected,
    CallEscalated,
    CallFailed,
    CallRejected,
    CallSkipped,
    CallSucceeded,
    CooldownEnded,
    CooldownStarted,
    DefaultUsed,
    Event,
    ManifestLoaded,
    ManifestRefused,
    ManifestRejected,
    ManifestRemoved,
    RateLimitRejected,
    RateLimitWaited,
    RecordingStarted,
    RetryBudgetSpent,
    SharedStrategiesChanged,
    StreamEnded,
    ToolRegistered,
    ToolTimedOut,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnInterrupted,
    TurnStarted,
)
from engine.handler import Decision
from engine.kinds import ErrorClass
from engine.metrics import ToolMetrics
from engine.metrics.counted import count_event
from engine.strategies.breaker.machine import BreakerState

STATS_PER_FLUSH = 25
"""Tools whose rolling figures one board refresh takes again, at most."""
STALE_IN_FLIGHT_S = 5.0
"""An attempt still listed this long after its deadline lost its end event (a gap): dropped."""


@dataclass(slots=True)
class Changes:
    """What one ``apply`` touched, so screens redraw only that."""

    tools: set[str] = field(default_factory=set)
    turns: set[str] = field(default_factory=set)
    manifests: bool = False
    events: int = 0

    def merge(self, other: Changes) -> None:
        self.tools |= other.tools
        self.turns |= other.turns
        self.manifests = self.manifests or other.manifests
        self.events += other.events


class ConsoleModel:
    """The fold of every engine event the console has seen."""

    def __init__(self, seeds: Iterable[ToolSeed] = (), shared: Mapping[str, Any] | None = None) -> None:
        """``shared``: ``defaults.yaml``'s engine-wide sections in force as the console starts (by
        section, as data, as ``SharedStrategiesChanged`` has them)."""
        self.tools: dict[str, ToolView] = {}
        self.engine_budget = EngineBudget()
        """The engine-wide retry budget: its options and its window, every tool's calls in it."""
        self.engine_budget.configure(shared)
        self.turns: OrderedDict[str, TurnView] = OrderedDict()
        self.manifest_version = 0
        self.manifest_changes: deque[ManifestChange] = deque(maxlen=HISTORY)
        self.manifest_change_count = 0
        """Manifest changes folded so far (the deque keeps the newest)."""
        self.rejected: dict[str, ManifestChange] = {}
        """Manifest files refused now, by path (cleared when the file is fixed or removed)."""
        self.events: deque[Event] = deque(maxlen=EVENTS_KEPT)
        """The newest events, for the event log."""
        self.seen = 0
        """Events folded so far."""
        self.last_t: float | None = None
        """Engine time of the newest event."""
        self._stats_seq = 0
        for seed in seeds:
            self.seed(seed)

    def seed(self, seed: ToolSeed) -> None:
        view = self._tool(seed.tool_id)
        view.state, view.consecutive_failures = seed.state, seed.consecutive_failures
        view.half_open_at = seed.half_open_at
        view.set_manifest(seed.manifest)
        if seed.manifest is not None:
            self.manifest_version = max(self.manifest_version, seed.manifest.version)
        view.version += 1

    def _metrics(self, tool_id: str) -> ToolMetrics:
        return self._tool(tool_id).metrics

    def _tool(self, tool_id: str) -> ToolView:
        view = self.tools.get(tool_id)
        if view is None:
            view = self.tools[tool_id] = ToolView(tool_id)
            view.strategies.engine_budget = self.engine_budget
        return view

    # --- folding ---------------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> Changes:
        changes = Changes()
        batch = events if isinstance(events, list) else list(events)
        if not batch:
            return changes
        handlers, metrics, tools = _HANDLERS, self._metrics, changes.tools
        for event in batch:
            handler = handlers.get(type(event))
            if handler is not None:
                handler(self, event, changes)
            counted = count_event(metrics, event)  # as the engine counts it
            if counted is not None:
                tools.add(counted)
        self.events.extend(batch)  # the event log's lines are made only when shown
        self.seen += len(batch)
        self.last_t = batch[-1].t
        changes.events = len(batch)
        for tool_id in changes.tools:
            view = self.tools.get(tool_id)
            if view is not None:  # None: an earlier run's tool, dropped by a RecordingStarted
                view.version += 1
        for turn_id in changes.turns:
            if turn_id in self.turns:
                self.turns[turn_id].version += 1
        return changes

    def expire(self, now: float) -> Changes:
        """Drop in-flight and queued attempts whose end never arrived (events lost to a full buffer)."""
        changes = Changes()
        for view in self.tools.values():
            stale = [k for k, f in view.in_flight.items() if f.deadline + STALE_IN_FLIGHT_S < now]
            for key in stale:
                del view.in_flight[key]
            gone = bool(view.strategies.queued) and view.strategies.expire(now, STALE_IN_FLIGHT_S)
            if stale or gone:
                view.version += 1
                changes.tools.add(view.tool_id)
        return changes

    # --- queries ---------------------------------------------------------------------------

    def rows(self, now: float, budget: int = STATS_PER_FLUSH) -> list[BoardRow]:
        """Every tool's row at ``now``. At most ``budget`` tools have their rolling figures taken
        again, the longest-waiting first: 200 busy tools refresh in turns, never all in one flush."""
        stale = [view for view in self.tools.values() if view.stats_stale(now)]
        if len(stale) > budget:
            stale.sort(key=lambda view: view.stats_seq)
        for view in stale[:budget]:
            self._stats_seq += 1
            view.refresh_stats(now, self._stats_seq)
        return [view.row(now, refresh=False) for view in self.tools.values()]

    def current_turn(self) -> TurnView | None:
        """The newest turn still running, else the newest one."""
        for view in reversed(self.turns.values()):
            if not view.finished:
                return view
        return next(reversed(self.turns.values()), None)

    def event_rows(self, text: str = "", tool_id: str | None = None, *, since: int = 0) -> list[EventRow]:
        """The kept events folded after the ``since``-th, oldest first, as event-log lines,
        filtered by text (case-insensitive: type, tool, message) and tool."""
        return self._event_rows(text, tool_id, self._event_start(since))

    def newest_event_rows(self, text: str = "", *, since: int, limit: int) -> tuple[int, list[EventRow]]:
        """The newest ``limit`` of :meth:`event_rows`, and how many there are in all. Unfiltered,
        the count is arithmetic and only the lines returned are made (a flood is 5,000 events)."""
        start = self._event_start(since)
        if text:
            rows = self._event_rows(text, None, start)
            return len(rows), rows[max(0, len(rows) - limit) :]
        total = max(0, len(self.events) - start)
        return total, self._event_rows("", None, max(start, len(self.events) - limit))

    def _event_start(self, since: int) -> int:
        """The index in ``events`` of the first event folded after the ``since``-th."""
        first = self.seen - len(self.events) + 1  # the sequence number of events[0]
        return max(0, since + 1 - first)

    def _event_rows(self, text: str, tool_id: str | None, start: int) -> list[EventRow]:
        events = self.events
        first = self.seen - len(events) + 1
        needle = text.casefold()
        rows = []
        for index in range(start, len(events)):
            row = event_row(events[index], first + index)
            if (tool_id is None or row.tool_id == tool_id) and (
                not needle or needle in row.text.casefold() or needle in row.event_type.casefold()
            ):
                rows.append(row)
        return rows


# --- event handlers -------------------------------------------------------------------------
# One function per event class: ``(model, event, changes)``. They run for every event, so they
# avoid allocations beyond what they keep.


def _attempt_started(m: ConsoleModel, e: AttemptStarted, c: Changes) -> None:
    view = m._tool(e.tool_id)
    key = (e.turn_id, e.call_id)
    view.in_flight[key] = InFlight(e.call_id, e.turn_id, e.attempt, e.t, e.deadline, e.probe)
    view.strategies.attempt_started(key, e.attempt, e.t)
    view.recent.append(e)
    c.tools.add(e.tool_id)
    if e.turn_id is not None:
        node = _node(m, e.turn_id, e.call_id)
        if node is not None:
            node.status, node.attempts = "running", e.attempt
            c.turns.add(e.turn_id)


def _attempt_failed(m: ConsoleModel, e: AttemptFailed, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.call_ended(e, e.turn_id, e.call_id)
    transient = e.classification is ErrorClass.TRANSIENT
    if e.decision == Decision.RETRY:
        view.strategies.retry_decided(e.t)
    if e.consecutive_failures is not None:
        view.consecutive_failures = e.consecutive_failures
    elif transient:  # traces written before the engine kept the count
        view.consecutive_failures += 1
    else:
        view.consecutive_failures = 0
    view.errors.append(
        ErrorRow(
            e.t, e.at, e.call_id, e.turn_id, e.attempt, str(e.kind), str(e.classification), e.reason,
            e.error, e.status_code, e.decision,
        )
    )  # fmt: skip
    c.tools.add(e.tool_id)


def _timed_out(m: ConsoleModel, e: ToolTimedOut, c: Changes) -> None:
    m._tool(e.tool_id).call_ended(e, e.turn_id, e.call_id)
    c.tools.add(e.tool_id)


def _call_succeeded(m: ConsoleModel, e: CallSucceeded, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.call_ended(e, e.turn_id, e.call_id)
    if not e.partial:
        view.consecutive_failures = 0
    c.tools.add(e.tool_id)
    if e.turn_id is not None:
        node = _node(m, e.turn_id, e.call_id)
        if node is not None:
            node.status, node.attempts = "partial" if e.partial else "succeeded", e.attempts
            how = f"via {node.served_by}, " if node.served_by else ""
            how = "with a default input, " if node.used_default else how
            node.reason = f"{how}after {e.attempts} attempt(s), {e.latency_ms:.0f} ms"
            c.turns.add(e.turn_id)


def _call_failed(m: ConsoleModel, e: CallFailed, c: Changes) -> None:
    tool_id = e.counted_tool  # "(unknown)" for a name no tool has: as the engine counts it
    view = m._tool(tool_id)
    view.call_ended(e, e.turn_id, e.call_id)
    c.tools.add(tool_id)
    node = _node(m, e.turn_id, e.call_id)
    if node is not None:
        node.status, node.attempts = "failed", e.attempts
        node.reason = f"{e.kind}: {e.reason}"
        c.turns.add(str(e.turn_id))


def _call_rejected(m: ConsoleModel, e: CallRejected, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.call_ended(e, e.turn_id, e.call_id)
    view.strategies.call_rejected(e)
    c.tools.add(e.tool_id)
    node = _node(m, e.turn_id, e.call_id)
    if node is not None:
        node.status, node.rejected, node.reason = "failed", True, e.reason
        c.turns.add(str(e.turn_id))


def _bulkhead_queued(m: ConsoleModel, e: BulkheadQueued, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.strategies.attempt_queued(e)
    view.recent.append(e)
    c.tools.add(e.tool_id)


def _bulkhead_rejected(m: ConsoleModel, e: BulkheadRejected, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.strategies.attempt_refused(e)
    view.recent.append(e)
    c.tools.add(e.tool_id)


def _budget_spent(m: ConsoleModel, e: RetryBudgetSpent, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.strategies.budget_spent(e)
    view.recent.append(e)
    c.tools.add(e.tool_id)


def _rate_limit_waited(m: ConsoleModel, e: RateLimitWaited, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.strategies.rate_limit_waited(e)
    view.recent.append(e)
    c.tools.add(e.tool_id)


def _rate_limit_rejected(m: ConsoleModel, e: RateLimitRejected, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.strategies.rate_limit_refused(e)
    view.recent.append(e)
    c.tools.add(e.tool_id)


def _cooldown_started(m: ConsoleModel, e: CooldownStarted, c: Changes) -> None:
    m._tool(e.tool_id).strategies.cooldown_started(e)
    c.tools.add(e.tool_id)


def _cooldown_ended(m: ConsoleModel, e: CooldownEnded, c: Changes) -> None:
    m._tool(e.tool_id).strategies.cooldown_ended(e)
    c.tools.add(e.tool_id)


def _stream_ended(m: ConsoleModel, e: StreamEnded, c: Changes) -> None:
    m._tool(e.tool_id).call_ended(e, e.turn_id, e.call_id)
    c.tools.add(e.tool_id)


def _alternative_used(m: ConsoleModel, e: AlternativeUsed, c: Changes) -> None:
    node = _node(m, e.turn_id, e.call_id)
    if node is not None:
        node.served_by, node.rejected = e.alternative, False
        node.reason = f"via {e.alternative}: {e.reason}"
        c.turns.add(str(e.turn_id))


def _blocked(status: str) -> Callable[[ConsoleModel, CallSkipped | CallEscalated, Changes], None]:
    def handle(m: ConsoleModel, e: CallSkipped | CallEscalated, c: Changes) -> None:
        c.tools.add(e.tool_id)
        node = _node(m, e.turn_id, e.call_id)
        if node is not None:
            node.status, node.reason = status, e.reason
            c.turns.add(str(e.turn_id))

    return handle


def _default_used(m: ConsoleModel, e: DefaultUsed, c: Changes) -> None:
    node = _node(m, e.turn_id, e.call_id)
    if node is not None:
        node.used_default, node.reason = True, e.reason
        c.turns.add(str(e.turn_id))


def _turn_started(m: ConsoleModel, e: TurnStarted, c: Changes) -> None:
    m.turns[e.turn_id] = TurnView(e.turn_id, e.t, e.at, e.deadline_ms, call_nodes(e))
    m.turns.move_to_end(e.turn_id)
    while len(m.turns) > TURNS_KEPT:
        m.turns.popitem(last=False)
    c.turns.add(e.turn_id)


def _turn_cut(status: str, reason: str) -> Callable[[ConsoleModel, Any, Changes], None]:
    def handle(m: ConsoleModel, e: TurnDeadlineExceeded | TurnCanceled | TurnInterrupted, c: Changes) -> None:
        turn = m.turns.get(e.turn_id)
        for call_id in e.unfinished:
            node = turn.calls.get(call_id) if turn is not None else None
            if node is not None:
                node.status, node.reason = status, reason
        for view in m.tools.values():  # whichever tool each call was running or queued on
            queued = view.strategies.queued
            # Every call popped (not ``any`` over a generator: it would stop at the first).
            ended = [
                view.in_flight.pop((e.turn_id, call_id), None) or queued.pop((e.turn_id, call_id), None)
                for call_id in e.unfinished
            ]
            if any(ended):
                view.recent.append(e)
                c.tools.add(view.tool_id)
        c.turns.add(e.turn_id)

    return handle


def _turn_finished(m: ConsoleModel, e: TurnFinished, c: Changes) -> None:
    turn = m.turns.get(e.turn_id)
    if turn is None:
        return
    turn.outcome, turn.summary, turn.duration_ms = e.outcome, e.summary, e.duration_ms
    for call_id, status in e.statuses.items():  # the turn's word is final
        node = turn.calls.get(call_id)
        if node is not None:
            node.status = status
    c.turns.add(e.turn_id)


def _breaker(m: ConsoleModel, e: BreakerTransitioned, c: Changes) -> None:
    view = m._tool(e.tool_id)
    # The event carries the count from before the move; closing zeroes it, in the engine too
    # (a reset would otherwise read CLOSED with "fails 5/5" until the next call).
    closed = e.to_state is BreakerState.CLOSED
    view.state, view.consecutive_failures = e.to_state, 0 if closed else e.consecutive_failures
    view.half_open_at = e.half_open_at if e.to_state is BreakerState.OPEN else None
    reason = e.reason
    if type(e) is BreakerRestored:  # the operator's words, and that a restart put them back
        set_at = f"{datetime.fromtimestamp(e.set_at):%H:%M:%S}" if isinstance(e.set_at, float | int) else "?"
        reason = f"restored on restart (set {set_at}){': ' if e.reason else ''}{e.reason}"
    view.history.append(Transition(e.t, e.at, e.from_state, e.to_state, e.actor, reason))
    c.tools.add(e.tool_id)


def _tool_registered(m: ConsoleModel, e: ToolRegistered, c: Changes) -> None:
    view = m._tool(e.tool_id)
    view.state, view.consecutive_failures = e.state, e.consecutive_failures
    view.half_open_at = e.half_open_at if e.state is BreakerState.OPEN else None
    c.tools.add(e.tool_id)


def _recording_started(m: ConsoleModel, e: RecordingStarted, c: Changes) -> None:
    """Another engine began recording (a restart): its tools as they stood; an earlier run's tools
    leave the board (the traces keep them)."""
    for tool_id in [t for t in m.tools if t not in e.breakers]:
        del m.tools[tool_id]
    m.engine_budget.configure(e.shared_strategies, restart=True)
    for tool_id, breaker in e.breakers.items():
        view = m._tool(tool_id)
        try:
            view.state = BreakerState(breaker["state"])
            view.consecutive_failures = int(breaker.get("consecutive_failures") or 0)
            half_open_at = breaker.get("half_open_at") if view.state is BreakerState.OPEN else None
            view.half_open_at = float(half_open_at) if half_open_at is not None else None
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # written oddly by another process: the tool's next event says more
        view.in_flight.clear()  # the attempts of the run before never end now
        view.strategies.restart()
        c.tools.add(tool_id)


def _manifest_loaded(m: ConsoleModel, e: ManifestLoaded, c: Changes) -> None:
    view = m._tool(e.tool_id)
    content = e.manifest if e.manifest is not None else (view.manifest.content if view.manifest else {})
    view.set_manifest(ManifestView(e.digest, e.version, e.path, e.at, content))
    m.manifest_version = max(m.manifest_version, e.version)
    what = "reloaded" if e.previous_digest else "loaded"
    m.manifest_changes.append(ManifestChange(e.at, what, e.tool_id, e.path, e.version, e.digest))
    m.manifest_change_count += 1
    m.rejected.pop(e.path, None)
    c.tools.add(e.tool_id)
    c.manifests = True


def _shared_changed(m: ConsoleModel, e: SharedStrategiesChanged, c: Changes) -> None:
    """``defaults.yaml``'s engine-wide sections changed: every tool's detail shows them."""
    m.engine_budget.configure(e.strategies)
    c.tools.update(m.tools)
    c.manifests = True


def _manifest_rejected(m: ConsoleModel, e: ManifestRejected, c: Changes) -> None:
    change = ManifestChange(e.at, "rejected", None, e.path, None, e.kept_digest, e.errors)
    m.manifest_changes.append(change)
    m.manifest_change_count += 1
    m.rejected[e.path] = change
    c.manifests = True


def _manifest_refused(m: ConsoleModel, e: ManifestRefused, c: Changes) -> None:
    """Refused unread (a FIFO, too large, a broken symlink): shown with the rejected files."""
    change = ManifestChange(e.at, "refused", None, e.path, None, e.kept_digest, (e.reason,))
    m.manifest_changes.append(change)
    m.manifest_change_count += 1
    m.rejected[e.path] = change
    c.manifests = True


def _manifest_removed(m: ConsoleModel, e: ManifestRemoved, c: Changes) -> None:
    m.manifest_version = max(m.manifest_version, e.version)
    m.manifest_changes.append(ManifestChange(e.at, "removed", e.tool_id, e.path, e.version, None))
    m.manifest_change_count += 1
    m.rejected.pop(e.path, None)
    view = m.tools.get(e.tool_id)
    if view is not None:
        view.set_manifest(None)
        c.tools.add(e.tool_id)
    c.manifests = True


def _node(m: ConsoleModel, turn_id: str | None, call_id: str) -> CallNode | None:
    if turn_id is None:
        return None
    turn = m.turns.get(turn_id)
    return turn.calls.get(call_id) if turn is not None else None


_HANDLERS: dict[type[Event], Callable[[ConsoleModel, Any, Changes], None]] = {
    AttemptStarted: _attempt_started,
    AttemptFailed: _attempt_failed,
    ToolTimedOut: _timed_out,
    CallSucceeded: _call_succeeded,
    CallFailed: _call_failed,
    CallRejected: _call_rejected,
    StreamEnded: _stream_ended,
    BulkheadQueued: _bulkhead_queued,
    BulkheadRejected: _bulkhead_rejected,
    RetryBudgetSpent: _budget_spent,
    RateLimitWaited: _rate_limit_waited,
    RateLimitRejected: _rate_limit_rejected,
    CooldownStarted: _cooldown_started,
    CooldownEnded: _cooldown_ended,
    AlternativeUsed: _alternative_used,
    CallSkipped: _blocked("skipped"),
    CallEscalated: _blocked("escalated"),
    DefaultUsed: _default_used,
    TurnStarted: _turn_started,
    TurnDeadlineExceeded: _turn_cut("timed_out", "cut off by the turn's deadline"),
    TurnCanceled: _turn_cut("canceled", "the turn was stopped"),
    TurnInterrupted: _turn_cut("interrupted", "the engine stopped mid-turn"),
    TurnFinished: _turn_finished,
    ManifestLoaded: _manifest_loaded,
    ManifestRejected: _manifest_rejected,
    ManifestRefused: _manifest_refused,
    ManifestRemoved: _manifest_removed,
    SharedStrategiesChanged: _shared_changed,
    ToolRegistered: _tool_registered,
    RecordingStarted: _recording_started,
}
for _cls in BreakerTransitioned.__subclasses__():
    _HANDLERS[_cls] = _breaker
