"""Engine events: typed, immutable, past-tense facts.

Every event carries ``at`` (wall-clock seconds from the engine's injectable clock) and ``t``
(engine time from anyio). ``event_type`` is the class name, except for the two names the
turn trace fixes (spec-map trace.shape): a failed attempt is ``ToolError`` and a timeout ``ToolTimeout``.
Fields are flat primitives and enums, so events serialise and compare cheaply. Free text and
values (errors, arguments, recorded results) are redacted where an event is made
(:mod:`engine.redaction`), so the store, exports, the console and logs all see the same value.

Events are values: nobody mutates one after it is emitted. They are not ``frozen``
dataclasses because that costs ~0.9 µs per event on the hot path (measured), where every
guarded call emits two.
"""

from __future__ import annotations

# ruff: noqa: I001 - the import order is the order event types register in (EVENT_TYPES, README's
# vocabulary table): calls, turns, breakers, manifests, fleet, an engine's run, strategies.
from engine.event import EVENT_TYPES, Event, ToolEvent
from engine.event import allocate as allocate  # internal: the hot paths' constructor
from engine.events.calls import (
    AlternativeUsed,
    AttemptFailed,
    AttemptStarted,
    CallFailed,
    CallRejected,
    CallSucceeded,
    HandlerFailed,
    StreamEnded,
    ToolResultSent,
    ToolTimedOut,
)
from engine.events.turns import (
    CallEscalated,
    CallSkipped,
    DefaultUsed,
    DependencyBlocked,
    TurnCanceled,
    TurnDeadlineExceeded,
    TurnFinished,
    TurnInterrupted,
    TurnStarted,
)
from engine.events.breakers import (
    BreakerClosed,
    BreakerDisabled,
    BreakerHalfOpened,
    BreakerOpened,
    BreakerReset,
    BreakerRestored,
    BreakerTransitioned,
    BreakerTripped,
)
from engine.events.breakers import breaker_event_type as breaker_event_type  # internal
from engine.events.manifests import (
    ManifestLoaded,
    ManifestRefused,
    ManifestRejected,
    ManifestRemoved,
    SharedStrategiesChanged,
)
from engine.events.fleet import FleetRateFellBack, FleetRateRecovered, FleetRestored, FleetUnavailable
from engine.events.lifecycle import OverridesForgotten, RecordingStarted, ToolRegistered
from engine.strategies.bulkhead.events import BulkheadQueued, BulkheadRejected
from engine.strategies.budget.events import RetryBudgetSpent
from engine.strategies.idempotency.events import IdempotencyKeyAssigned
from engine.strategies.rate_limit.events import (
    CooldownEnded,
    CooldownStarted,
    RateLimitRejected,
    RateLimitWaited,
)
from engine.strategies.hedging.events import AttemptAbandoned, HedgeRaceWon, HedgeRefused, HedgeStarted
from engine.events.shapes import field_shapes as field_shapes  # internal: the codecs'
from engine.events.shapes import event_from_dict, vocabulary_markdown

__all__ = [
    "EVENT_TYPES", "AlternativeUsed", "AttemptFailed", "AttemptStarted", "BreakerClosed", "BreakerDisabled",
    "BreakerHalfOpened", "BreakerOpened", "BreakerReset", "BreakerRestored", "BreakerTransitioned",
    "BreakerTripped", "BulkheadQueued", "BulkheadRejected", "CallEscalated", "CallFailed", "CallRejected",
    "CallSkipped", "CallSucceeded", "CooldownEnded", "CooldownStarted", "DefaultUsed", "DependencyBlocked",
    "Event", "FleetRateFellBack", "FleetRateRecovered", "FleetRestored", "FleetUnavailable", "HandlerFailed",
    "IdempotencyKeyAssigned", "ManifestLoaded", "ManifestRefused", "ManifestRejected", "ManifestRemoved",
    "OverridesForgotten", "RateLimitRejected", "RateLimitWaited", "RecordingStarted", "RetryBudgetSpent",
    "SharedStrategiesChanged", "StreamEnded", "ToolEvent", "ToolRegistered", "ToolResultSent",
    "ToolTimedOut", "TurnCanceled", "TurnDeadlineExceeded", "TurnFinished", "TurnInterrupted",
    "TurnStarted", "event_from_dict", "vocabulary_markdown",
]  # fmt: skip
__all__ += ["AttemptAbandoned", "HedgeRaceWon", "HedgeRefused", "HedgeStarted"]  # hedging's
