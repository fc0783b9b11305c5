"""The console's view model: everything the screens show, folded from engine events.

Pure: no Textual, no I/O, no clock of its own. ``ConsoleModel.apply(events)`` folds a batch of
engine events (live, from a stored trace, or replayed) and says what changed; every query that
depends on time takes ``now``, in engine time (the events' ``t``). Screens render from it and
nothing else, so the same model drives the live board, an attached console and a replay.

Rolling figures are the engine's own: each tool's events feed an
:class:`engine.metrics.ToolMetrics` through :func:`engine.metrics.counted.count_event` — the
definition the engine's own counting is tested against — so the console's counts, error %,
percentiles and sparkline are the engine's, for live, attached and replayed data alike, in
bounded memory whatever the event rate.

One module per concept: :mod:`~console.model.tools` (a tool's breaker, in-flight attempts,
history and board row), :mod:`~console.model.timelines` (a tool's calls, attempt by attempt),
:mod:`~console.model.turns` (a turn's calls and what they depend on),
:mod:`~console.model.strategies` (a tool's bulkhead and retry budget),
:mod:`~console.model.rate_limit` (its rate limit and cooldown), :mod:`~console.model.counting`,
:mod:`~console.model.manifests`, :mod:`~console.model.event_log` (the event log's lines) and
:mod:`~console.model.fold` (:class:`ConsoleModel`, the fold itself and its queries).
"""

from console.model.event_log import EVENTS_KEPT, EventRow, event_row
from console.model.fold import STALE_IN_FLIGHT_S, STATS_PER_FLUSH, Changes, ConsoleModel
from console.model.manifests import ManifestChange, ManifestView
from console.model.rate_limit import CooldownEndSeen, CooldownSeen, RateLimitFigures
from console.model.strategies import (
    EngineBudget,
    EngineBudgetFigures,
    Queued,
    Refusal,
    SharedBudgetSeen,
    StrategyFigures,
    ToolStrategies,
)
from console.model.timelines import RECENT_CALLS, AttemptSpan, CallTimeline, build_timelines
from console.model.tools import (
    HISTORY,
    RECENT_EVENTS,
    SEVERITY,
    SPARK_S,
    WINDOW_S,
    BoardRow,
    ErrorRow,
    InFlight,
    ToolSeed,
    ToolView,
    Transition,
)
from console.model.turns import TURNS_KEPT, CallNode, TurnView, call_nodes

__all__ = [
    "EVENTS_KEPT",
    "HISTORY",
    "RECENT_CALLS",
    "RECENT_EVENTS",
    "SEVERITY",
    "SPARK_S",
    "STALE_IN_FLIGHT_S",
    "STATS_PER_FLUSH",
    "TURNS_KEPT",
    "WINDOW_S",
    "AttemptSpan",
    "BoardRow",
    "CallNode",
    "CallTimeline",
    "Changes",
    "ConsoleModel",
    "CooldownEndSeen",
    "CooldownSeen",
    "EngineBudget",
    "EngineBudgetFigures",
    "ErrorRow",
    "EventRow",
    "InFlight",
    "ManifestChange",
    "ManifestView",
    "Queued",
    "RateLimitFigures",
    "Refusal",
    "SharedBudgetSeen",
    "StrategyFigures",
    "ToolSeed",
    "ToolStrategies",
    "ToolView",
    "Transition",
    "TurnView",
    "build_timelines",
    "call_nodes",
    "event_row",
]
