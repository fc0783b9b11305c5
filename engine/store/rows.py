"""What the trace store returns: turns, attempts, commands, tool states and writers, as rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from engine.events import Event
from engine.strategies.breaker.machine import BreakerState


@dataclass(frozen=True, slots=True)
class TurnRow:
    """One turn as the browser lists it."""

    turn_id: str
    started_at: float
    ended_at: float | None
    duration_ms: float | None
    outcome: str
    """``running`` until its TurnFinished is stored; then ok, degraded, failed, timed_out, canceled or
    interrupted (its engine or host stopped mid-turn, or the process recording it is gone)."""
    summary: str | None
    calls: int
    executed: int | None
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TurnPage:
    """One page of turn rows, newest first, and the cursor to the next."""

    rows: list[TurnRow]
    next_cursor: str | None
    """Pass as ``cursor`` for the next (older) page; None on the last page."""


class AttemptRow(NamedTuple):
    """One attempt: a failure (``error``), a success (``ok``) or a kept partial result (``partial``).

    A named tuple: a turn has thousands and a frozen dataclass takes ~3 µs each to build.
    """

    event_id: int
    turn_id: str | None
    call_id: str
    tool_id: str
    attempt: int
    outcome: str
    kind: str | None
    error_class: str | None
    status_code: int | None
    message: str | None
    latency_ms: float | None
    fault_type: str | None
    value: Any
    """What a success returned (kept once, in its CallSucceeded event); None for a failure."""
    at: float


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One turn as stored: its row, every event, its attempts and what it started with."""

    row: TurnRow
    events: list[Event]
    """Every event of the turn in the order it happened, breaker transitions its calls caused included."""
    attempts: list[AttemptRow]
    spec: dict[str, Any] | None
    seed: str | None
    breakers: dict[str, Any] | None
    manifests: dict[str, str] | None


CommandAction = Literal["trip", "reset", "disable"]
"""What an operator command asks of a tool's breaker."""
COMMAND_ACTIONS: tuple[CommandAction, ...] = ("trip", "reset", "disable")
"""Every :data:`CommandAction`: what ``TraceStore.submit_command`` accepts."""
CommandStatus = Literal["pending", "applied", "failed", "refused"]
"""Failed: taken, but it could not be carried out (an unknown tool); refused: not taken (a missing
or wrong MAC, a reserved or blank actor, no or a past expiry, an id taken already)."""


@dataclass(frozen=True, slots=True)
class CommandRow:
    """An operator command for the engine serving this store (see :mod:`engine.store.operator_commands`)."""

    id: int
    created_at: float
    """When its sender says it was sent (its own wall clock)."""
    action: CommandAction
    tool_id: str
    actor: str
    """The OS user of the process that sent it (schema 4; before, whatever name it gave)."""
    reason: str
    status: CommandStatus
    applied_at: float | None
    """When the engine acknowledged it (applied, failed or refused), by the engine's wall clock."""
    result: str | None
    """Applied: the breaker state the action left; failed or refused: why, on one line."""
    expires_at: float | None
    """Not applied by then, it is refused: its sender has stopped waiting."""
    host: str | None = None
    """The host and pid of the process that sent it (schema 4)."""
    pid: int | None = None
    mac: str | None = None
    """HMAC-SHA256 of its content under the store's command key (:mod:`engine.store.command_auth`)."""


@dataclass(frozen=True, slots=True)
class StoredManifest:
    """A tool's newest manifest version as the store knows it."""

    digest: str
    content: dict[str, Any]
    version: int | None
    """The engine's registry version, when a ManifestLoaded event said (not for the versions an
    engine started with: it announces only reloads)."""
    path: str | None
    at: float
    """When it came into force, or was first stored."""


@dataclass(frozen=True, slots=True)
class StoredBreaker:
    """A tool's newest breaker state: its last transition, restored override or registration, its
    engine's start, or a later turn's snapshot."""

    state: BreakerState
    consecutive_failures: int
    half_open_at: float | None
    """Engine time at which an OPEN breaker admits a probe."""
    at: float


@dataclass(frozen=True, slots=True)
class ToolState:
    """A tool's newest stored breaker state and manifest (None when the store has none)."""

    tool_id: str
    breaker: StoredBreaker | None
    manifest: StoredManifest | None
    registered: bool = True
    """Whether the engine that recorded last has the tool (False: seen in an earlier run only)."""


@dataclass(frozen=True, slots=True)
class StoreSnapshot:
    """Every tool seen in the store, as of one moment: event ``last_event_id``."""

    tools: list[ToolState]
    last_event_id: int
    """0 when there are no events; follow with :meth:`TraceStore.events_after`."""
    newest_at: float | None
    """Wall-clock and engine time of the newest event."""
    newest_t: float | None
    run_started_id: int = 0
    """Row id of the newest ``RecordingStarted``: where the run of the engine that recorded last
    begins (0 when the store has none)."""


@dataclass(frozen=True, slots=True)
class WriterRow:
    """A process that recorded turns into the store (see :mod:`engine.store.writers`)."""

    id: int
    host: str
    pid: int
    process_key: str | None
    """Boot id, pid namespace and start time of the process (Linux): tells it from a later process
    given the same pid. None where they cannot be read."""
    process_started_at: float | None
    opened_at: float
    heartbeat_at: float
    """Refreshed every few seconds while it records: how a writer on another host is known alive."""
    closed_at: float | None
    """When it stopped recording, cleanly or as found gone."""
    found_gone: bool = False
    """It did not close the store itself: a later read-write open found its process gone (killed,
    crashed) and closed it (``closed_at`` is then when that open did)."""
