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

import types
import typing
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar

from engine.breaker import BreakerState
from engine.errors import iso_timestamp
from engine.kinds import ErrorClass, ErrorKind

EVENT_TYPES: dict[str, type[Event]] = {}
"""Every concrete event class by its ``event_type``: how a stored event finds its class again."""

allocate = object.__new__
"""Hot paths build events as ``Cls.__init__(allocate(Cls), ...)``: on CPython 3.11 calling the
class with keyword arguments first packs them into a dict, which costs more than the ``__init__``
itself (about 0.45 µs of 0.7 µs per event)."""


@dataclass(slots=True, kw_only=True)
class Event:
    event_type: ClassVar[str] = "Event"
    _abstract: ClassVar[bool] = True

    at: float
    t: float

    def __init_subclass__(cls, event_type: str | None = None, abstract: bool = False, **kwargs: Any) -> None:
        object.__init_subclass__(**kwargs)  # zero-arg super() breaks under dataclass(slots=True)
        # dataclass(slots=True) re-creates the class without these keywords: read them back.
        if abstract or cls.__dict__.get("_abstract"):
            cls._abstract = True
            return
        cls.event_type = event_type or cls.__dict__.get("event_type") or cls.__name__
        EVENT_TYPES[cls.event_type] = cls  # the re-created class replaces the first one

    def describe(self) -> str:
        """One line for people: logs, the console, summaries."""
        return self.event_type

    def to_dict(self) -> dict[str, Any]:
        names = _FIELD_NAMES.get(type(self)) or _field_names(type(self))
        out: dict[str, Any] = {"event_type": self.event_type, "timestamp": iso_timestamp(self.at)}
        for name in names:
            value = getattr(self, name)
            out[name] = value.value if isinstance(value, Enum) else value
        out["message"] = self.describe()
        return out


_FIELD_NAMES: dict[type[Event], tuple[str, ...]] = {}


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


# --- tool calls ---------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ToolEvent(Event, abstract=True):
    """Something that happened to one call of one tool."""

    tool_id: str
    call_id: str
    turn_id: str | None = None


@dataclass(slots=True, kw_only=True)
class AttemptStarted(ToolEvent):
    """An attempt began, with the deadline at which it will be cut off."""

    attempt: int
    timeout_ms: float
    deadline: float
    """Engine time at which this attempt is cut off: its timeout or the turn's deadline."""
    probe: bool = False
    fault_type: str | None = None
    """Set when a fault plan injected this attempt's behaviour."""

    def describe(self) -> str:
        probe = " (half-open probe)" if self.probe else ""
        return f"{self.tool_id} attempt {self.attempt} started{probe}"


@dataclass(slots=True, kw_only=True)
class ToolTimedOut(ToolEvent, event_type="ToolTimeout"):
    """An attempt hit the tool's timeout and was terminated."""

    attempt: int
    timeout_ms: float

    def describe(self) -> str:
        return f"Tool timeout after {self.timeout_ms / 1000:g}s ({self.tool_id}, attempt {self.attempt})"


@dataclass(slots=True, kw_only=True)
class AttemptFailed(ToolEvent, event_type="ToolError"):
    """One failed attempt and what was decided about it (spec-map trace.decisions)."""

    attempt: int
    error: str
    error_type: str
    kind: ErrorKind
    classification: ErrorClass
    rule: str
    reason: str
    status_code: int | None
    circuit_breaker_state: BreakerState
    retry_count: int
    """Retries made before this attempt (0 for the first)."""
    decision: str
    decision_reason: str
    delay_ms: float | None = None
    latency_ms: float = 0.0
    fault_type: str | None = None
    retryable: bool = True
    retry_after_s: float | None = None
    has_partial: bool = False
    """The error carried what the tool returned before failing (a partial result)."""
    consecutive_failures: int | None = None
    """The breaker's streak of transient failures once this attempt was counted."""

    def describe(self) -> str:
        return (
            f"{self.tool_id} attempt {self.attempt} failed: {self.error} "
            f"[{self.kind}, {self.classification}] → {self.decision}: {self.decision_reason}"
        )


@dataclass(slots=True, kw_only=True)
class CallSucceeded(ToolEvent):
    """The call returned a value ("Tool succeeded on retry 2"), or kept a partial one."""

    attempts: int
    latency_ms: float
    """From the call's start, retries included."""
    partial: bool = False
    attempt_ms: float = 0.0
    """The successful attempt's own duration."""
    value: Any = None
    """The result, JSON-safe and redacted (see :mod:`engine.redaction`), when the engine records
    (``Engine(record=True)``)."""

    def describe(self) -> str:
        if self.partial:
            return f"{self.tool_id} kept a partial result after {self.attempts} attempt(s)"
        if self.attempts > 1:
            return f"Tool succeeded on retry {self.attempts} ({self.tool_id})"
        return f"{self.tool_id} succeeded in {self.latency_ms:.1f} ms"


@dataclass(slots=True, kw_only=True)
class CallFailed(ToolEvent):
    """The call ended in a ToolError: permanent, out of retries, short-circuited or unknown."""

    attempts: int
    kind: ErrorKind
    classification: ErrorClass
    error: str
    reason: str
    latency_ms: float
    decision: str = "escalate"

    def describe(self) -> str:
        attempts = f"{self.attempts} attempt(s)"
        return f"{self.tool_id} failed after {attempts}: {self.error} → {self.decision} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class CallRejected(ToolEvent):
    """Short-circuited by the breaker: no attempt was made."""

    state: BreakerState
    reason: str

    def describe(self) -> str:
        return f"{self.tool_id} rejected: {self.reason}"


@dataclass(slots=True, kw_only=True)
class StreamEnded(ToolEvent):
    """A streaming call ended: ``completed``, ``abandoned`` by its consumer, or ``truncated``."""

    outcome: str
    chunks: int
    error: str | None = None
    kind: ErrorKind | None = None

    def describe(self) -> str:
        cause = f": {self.error}" if self.error else ""
        return f"{self.tool_id} stream {self.outcome} after {self.chunks} chunk(s){cause}"


@dataclass(slots=True, kw_only=True)
class AlternativeUsed(ToolEvent):
    """The handler routed the call to an alternative tool ("Used alternative tool")."""

    alternative: str
    reason: str

    def describe(self) -> str:
        return f"Used alternative tool {self.alternative} for {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class HandlerFailed(ToolEvent):
    """A custom error handler raised; the default decision was applied instead."""

    error: str
    fallback: str

    def describe(self) -> str:
        return f"error handler failed for {self.tool_id}: {self.error}; applied default: {self.fallback}"


@dataclass(slots=True, kw_only=True)
class ToolResultSent(ToolEvent):
    """The LLM executor answered a tool call: the exact text the model received."""

    content: str
    """An error's text exactly as the model got it (redacted, capped); a result's text made from the
    result redacted — the model itself gets the tool's own result."""
    is_error: bool
    status: str
    """A call status, or ``not_run`` when the executor refused the call."""
    error_type: str | None = None
    kind: ErrorKind | None = None

    def describe(self) -> str:
        verdict = "an error" if self.is_error else "a result"
        return f"the model received {verdict} for {self.call_id} ({self.tool_id}, {len(self.content)} chars)"


# --- turns --------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class TurnStarted(Event):
    """A turn began: its calls, in order, and its deadline."""

    turn_id: str
    calls: tuple[str, ...]
    deadline_ms: float | None
    spec: dict[str, Any] | None = None
    """The turn as data: every call's tool, args, dependencies, optional flag and default (args and
    defaults redacted by the call's tool's policy)."""
    seed: str = ""
    """Seeds the calls' jitter: with it a replay retries exactly as the run did."""
    breakers: dict[str, dict[str, Any]] | None = None
    """When recording: each relevant breaker's state at the start (see ``CircuitBreaker.snapshot``)."""
    manifests: dict[str, str] | None = None
    """When recording: the digest of each relevant tool's manifest in force."""

    def describe(self) -> str:
        limit = f", deadline {self.deadline_ms / 1000:g}s" if self.deadline_ms is not None else ""
        return f"turn {self.turn_id} started: {len(self.calls)} call(s){limit}"


@dataclass(slots=True, kw_only=True)
class DependencyBlocked(ToolEvent, abstract=True):
    """A call's dependencies did not all succeed: what blocked it, and what was done instead."""

    blocked_by: tuple[str, ...]
    reason: str


@dataclass(slots=True, kw_only=True)
class CallSkipped(DependencyBlocked):
    """An optional call was not run because a dependency did not succeed."""

    def describe(self) -> str:
        return f"Optional tool skipped due to dependency failure: {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class CallEscalated(DependencyBlocked):
    """A required call could not run because a dependency did not succeed."""

    def describe(self) -> str:
        return f"Required tool skipped due to dependency failure: {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class DefaultUsed(DependencyBlocked):
    """A call ran with its declared default in place of a failed dependency's output."""

    def describe(self) -> str:
        return f"Used default value for {self.tool_id} (in place of {', '.join(self.blocked_by)})"


@dataclass(slots=True, kw_only=True)
class TurnDeadlineExceeded(Event):
    """The turn's deadline passed: unfinished calls were cut off and reported as timed out."""

    turn_id: str
    deadline_ms: float
    unfinished: tuple[str, ...]

    def describe(self) -> str:
        cut = ", ".join(self.unfinished) or "nothing"
        return f"turn {self.turn_id} hit its {self.deadline_ms / 1000:g}s deadline; timed out: {cut}"


@dataclass(slots=True, kw_only=True)
class TurnCanceled(Event):
    """The turn was stopped on request: unfinished calls were cancelled."""

    turn_id: str
    unfinished: tuple[str, ...]

    def describe(self) -> str:
        return f"turn {self.turn_id} stopped; canceled: {', '.join(self.unfinished) or 'nothing'}"


@dataclass(slots=True, kw_only=True)
class TurnInterrupted(Event):
    """The turn's caller was cancelled (the engine or its host stopped) before the turn ended.

    ``in_flight`` are the calls that were running then; ``unfinished`` every call without an
    outcome (in flight or never started). A ``TurnFinished`` with outcome ``interrupted`` follows.
    """

    turn_id: str
    in_flight: tuple[str, ...]
    unfinished: tuple[str, ...]
    reason: str = "the caller was cancelled"

    def describe(self) -> str:
        running = ", ".join(self.in_flight) or "nothing"
        return f"turn {self.turn_id} interrupted ({self.reason}); in flight: {running}"


@dataclass(slots=True, kw_only=True)
class TurnFinished(Event):
    """A turn ended; its summary is the plain sentence for the user."""

    turn_id: str
    summary: str
    statuses: dict[str, str]
    """Call id → final status, in turn order."""
    executed: int
    duration_ms: float
    outcome: str = "ok"
    """``ok`` (every call succeeded), ``degraded``, ``failed`` (no tool executed: spec-map kinds.turn-failed),
    ``timed_out`` (the deadline cut it), ``canceled`` (stopped) or ``interrupted`` (its caller was
    cancelled: the engine or its host stopped mid-turn)."""

    def describe(self) -> str:
        return f"turn {self.turn_id} finished in {self.duration_ms:.0f} ms: {self.summary}"


# --- breakers -----------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class BreakerTransitioned(Event, abstract=True):
    """A breaker changed state."""

    tool_id: str
    from_state: BreakerState
    to_state: BreakerState
    reason: str
    actor: str
    consecutive_failures: int
    half_open_at: float | None = None
    """Engine time at which an OPEN breaker admits a probe."""
    call_id: str | None = None
    """The call that caused the transition, by its attempt or by arriving after the open period
    (None for the half-open timer, a state query and operators)."""
    turn_id: str | None = None
    """The turn of that call, when it ran in one."""

    def describe(self) -> str:
        by = "" if self.actor == "engine" else f" by {self.actor}"
        return f"{self.tool_id}: {self.from_state} → {self.to_state}{by} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class BreakerOpened(BreakerTransitioned):
    """Too many consecutive transient failures, or a failed probe: calls are rejected."""

    def describe(self) -> str:
        return f"Circuit breaker opened for {self.tool_id} ({self.reason})"


@dataclass(slots=True, kw_only=True)
class BreakerHalfOpened(BreakerTransitioned):
    """The open timer ran out: one probe at a time is admitted.

    ``call_id`` names the call that arrived after the open period and made the transition (it
    is the probe); None when the engine's half-open timer, or ``engine.state()``, made it first.
    """


@dataclass(slots=True, kw_only=True)
class BreakerClosed(BreakerTransitioned):
    """Enough probes succeeded: normal operation resumes.

    ``call_id`` names the probe whose success closed the breaker.
    """


@dataclass(slots=True, kw_only=True)
class BreakerTripped(BreakerTransitioned):
    """Forced open by an operator until reset."""


@dataclass(slots=True, kw_only=True)
class BreakerReset(BreakerTransitioned):
    """Closed by an operator."""


@dataclass(slots=True, kw_only=True)
class BreakerDisabled(BreakerTransitioned):
    """Admits everything while still counting, by an operator's choice."""


# --- manifests ----------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ManifestLoaded(Event):
    """A valid manifest came into force (at start-up or on hot reload)."""

    tool_id: str
    path: str
    version: int
    digest: str
    previous_digest: str | None = None
    manifest: dict[str, Any] | None = None
    """The manifest now in force, as data (every default filled in): what a console shows."""

    def describe(self) -> str:
        verb = "reloaded" if self.previous_digest else "loaded"
        return f"manifest for {self.tool_id} {verb} from {self.path} (v{self.version}, {self.digest})"


@dataclass(slots=True, kw_only=True)
class ManifestRejected(Event):
    """An invalid manifest file was refused; the last good version stays in force."""

    path: str
    errors: tuple[str, ...]
    kept_digest: str | None
    """Digest of the last good version still in force, if there is one."""

    def describe(self) -> str:
        kept = f"; keeping {self.kept_digest}" if self.kept_digest else ""
        more = f" (+{len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        return f"manifest rejected: {self.errors[0] if self.errors else self.path}{more}{kept}"


@dataclass(slots=True, kw_only=True)
class ManifestRefused(Event):
    """A manifest file was refused unread (a FIFO, too large, a broken symlink); the last good version stays.

    ``path`` is the manifest directory itself when it is gone: watching resumes when it is back.
    """

    path: str
    reason: str
    kept_digest: str | None = None
    """Digest of the last good version still in force, if there is one."""

    def describe(self) -> str:
        kept = f"; keeping {self.kept_digest}" if self.kept_digest else ""
        return f"manifest refused: {self.path}: {self.reason}{kept}"


@dataclass(slots=True, kw_only=True)
class ManifestRemoved(Event):
    """A manifest file was deleted; its tool falls back to the defaults."""

    tool_id: str
    path: str
    version: int

    def describe(self) -> str:
        return f"manifest for {self.tool_id} removed ({self.path}); the tool falls back to defaults"


_BREAKER_EVENTS: dict[BreakerState, type[BreakerTransitioned]] = {
    BreakerState.OPEN: BreakerOpened,
    BreakerState.HALF_OPEN: BreakerHalfOpened,
    BreakerState.CLOSED: BreakerClosed,
    BreakerState.FORCED_OPEN: BreakerTripped,
    BreakerState.DISABLED: BreakerDisabled,
}


def breaker_event_type(to_state: BreakerState, actor: str) -> type[BreakerTransitioned]:
    if to_state is BreakerState.CLOSED and actor != "engine":
        return BreakerReset
    return _BREAKER_EVENTS[to_state]


def vocabulary_markdown() -> str:
    """README's table of event types, generated from :data:`EVENT_TYPES`."""
    rows = ["| event_type | class | meaning |", "| --- | --- | --- |"]
    for name, cls in EVENT_TYPES.items():
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        rows.append(f"| `{name}` | `{cls.__name__}` | {doc} |")
    return "\n".join(rows)


@dataclass(frozen=True, slots=True)
class FieldShape:
    """What one event field holds, as codecs (JSON, the trace store) need to know it."""

    name: str
    only: Any
    """The one type besides None the field may hold (``float | None`` → float), else None."""
    convert: type | None
    """The Enum subclass or ``tuple`` that rebuilds the value from JSON; None when JSON holds it as is."""
    nullable: bool


_SHAPES: dict[type[Event], tuple[FieldShape, ...]] = {}


def field_shapes(cls: type[Event]) -> tuple[FieldShape, ...]:
    """The shape of every field of ``cls``, worked out once per class."""
    shapes = _SHAPES.get(cls)
    if shapes is None:
        hints = typing.get_type_hints(cls)
        shapes = _SHAPES[cls] = tuple(_field_shape(f.name, hints[f.name]) for f in fields(cls))
    return shapes


def _field_shape(name: str, hint: Any) -> FieldShape:
    # A union is unpacked into its options; any other generic (tuple[str, ...]) is one option.
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    solid = [o for o in options if o is not type(None)]
    convert: type | None = None
    for option in solid:
        origin = typing.get_origin(option) or option
        if isinstance(origin, type) and (issubclass(origin, Enum) or origin is tuple):
            convert = origin
            break
    return FieldShape(name, solid[0] if len(solid) == 1 else None, convert, len(solid) < len(options))


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output (stored traces, replays)."""
    cls = EVENT_TYPES[data["event_type"]]
    kwargs = {}
    for shape in field_shapes(cls):
        if shape.name in data:
            value = data[shape.name]
            convert = shape.convert
            kwargs[shape.name] = convert(value) if convert is not None and value is not None else value
    return cls(**kwargs)


__all__ = [
    "EVENT_TYPES", "AlternativeUsed", "AttemptFailed", "AttemptStarted", "BreakerClosed",
    "BreakerDisabled", "BreakerHalfOpened", "BreakerOpened", "BreakerReset", "BreakerTransitioned",
    "BreakerTripped", "CallEscalated", "CallFailed", "CallRejected", "CallSkipped", "CallSucceeded",
    "DefaultUsed", "DependencyBlocked", "Event", "HandlerFailed", "ManifestLoaded", "ManifestRefused",
    "ManifestRejected", "ManifestRemoved", "StreamEnded", "ToolEvent", "ToolResultSent", "ToolTimedOut",
    "TurnCanceled", "TurnDeadlineExceeded", "TurnFinished", "TurnInterrupted", "TurnStarted",
    "event_from_dict", "vocabulary_markdown",
]  # fmt: skip
