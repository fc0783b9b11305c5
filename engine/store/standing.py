"""Standing operator overrides: an operator's trip or disable holds until an operator resets it,
across restarts of the engine recording into the store.

The store keeps each tool's standing override in ``overrides`` (schema 6): the state, who set it,
why and when, written in the same transaction as the transition that set it; a reset deletes it.
A :class:`~engine.store.TraceRecorder` made with ``overrides="keep"`` (``tripwire serve`` and
``tripwire console`` make theirs so; scenario runs do not) puts them back as it attaches: every
registered tool with a standing override is tripped or disabled again, announced as
``BreakerRestored`` with who set it, when and why — and so is every tool registered later, however
late. ``overrides="forget"`` drops them instead (``OverridesForgotten`` says which, and who
dropped them) and keeps the new ones.

A fleet keeps its own standing state in Redis (:mod:`engine.fleet.overrides`); a process of a
fleet that records into a store keeps both, and they agree: both come from the same operator
transitions.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from engine.clock import time_anywhere
from engine.events import BreakerDisabled, BreakerReset, BreakerTripped, Event, OverridesForgotten
from engine.store.base import StoreCore
from engine.store.command_auth import command_origin
from engine.store.failures import write_error
from engine.strategies.breaker.machine import BreakerState

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.store")

OverridePolicy = Literal["ignore", "keep", "forget"]
"""What a recorder does with the store's standing overrides: ``keep`` puts them back and keeps the
new ones; ``forget`` drops those there and keeps the new ones; ``ignore`` neither reads nor writes
them (a scenario run, whose operator steps are part of the scenario)."""
OVERRIDE_POLICIES: tuple[OverridePolicy, ...] = ("ignore", "keep", "forget")
STANDING_STATES = frozenset({BreakerState.FORCED_OPEN, BreakerState.DISABLED})
"""The states an operator's action leaves standing until an operator resets it."""


@dataclass(frozen=True, slots=True)
class StandingOverride:
    """An operator's trip (``FORCED_OPEN``) or disable (``DISABLED``) of one tool, until reset."""

    state: BreakerState
    actor: str
    reason: str
    set_at: float
    """Wall-clock time at which the operator set it."""

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state.value, "actor": self.actor, "reason": self.reason, "set_at": self.set_at}


OverrideChange = tuple[str, StandingOverride | None]
"""A tool's standing override set (an operator's trip or disable) or cleared (None: a reset)."""


def override_change(event: Event) -> OverrideChange | None:
    """What ``event`` does to its tool's standing override; None for every event but an operator's
    trip, disable or reset (a restored override stands as it was set)."""
    kind = type(event)
    if kind is BreakerTripped or kind is BreakerDisabled:
        e: Any = event
        return e.tool_id, StandingOverride(e.to_state, e.actor, e.reason, e.at)
    if kind is BreakerReset:
        return event.tool_id, None  # type: ignore[attr-defined]
    return None


def write_override_changes(conn: sqlite3.Connection, changes: Iterable[OverrideChange]) -> None:
    """Apply ``changes`` in the transaction under way (the one that stores their transitions)."""
    for tool_id, override in changes:
        if override is None:
            conn.execute("DELETE FROM overrides WHERE tool_id = ?", (tool_id,))
        else:
            conn.execute(
                "INSERT OR REPLACE INTO overrides (tool_id, state, actor, reason, set_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (tool_id, override.state.value, override.actor, override.reason, override.set_at),
            )


class StoreOverrides(StoreCore):
    """The ``overrides`` table: each tool's standing operator override (schema 6 and later)."""

    def standing_overrides(self) -> dict[str, StandingOverride]:
        """Every tool's standing override, by tool id (none in a store older than schema 6). A row
        another process wrote oddly is skipped, saying so: it never stops an engine starting."""
        if not self._has_overrides:
            return {}
        with self._lock:
            rows = self._query("SELECT tool_id, state, actor, reason, set_at FROM overrides ORDER BY tool_id")
        found: dict[str, StandingOverride] = {}
        for tool_id, state, actor, reason, set_at in rows:
            try:
                override = StandingOverride(BreakerState(state), str(actor), str(reason or ""), float(set_at))
            except (TypeError, ValueError) as exc:
                log.warning("trace store %s: standing override of %r skipped: %s", self.path, tool_id, exc)
                continue
            found[str(tool_id)] = override
        return found

    def forget_overrides(self) -> dict[str, StandingOverride]:
        """Drop every standing override; returns those dropped. Raises ``StoreWriteError`` when the
        store refuses the write (then none was dropped)."""
        self._refuse_writes("forget overrides")
        with self._lock:
            dropped = self.standing_overrides()
            if dropped:
                try:
                    with self._conn:
                        self._conn.execute("DELETE FROM overrides")
                except sqlite3.Error as exc:
                    raise write_error(self.path, exc) from None
        return dropped


class OverrideKeeper:
    """The store's standing overrides for one engine: put back as recording starts and on every
    later registration, kept in step with the operators' transitions the recorder sees."""

    def __init__(self, store: StoreOverrides, policy: OverridePolicy) -> None:
        self.policy = policy
        self._store = store
        self._standing: dict[str, StandingOverride] = {}
        self._engine: Engine | None = None
        self._unhook: Callable[[], None] | None = None

    def start(self, engine: Engine) -> None:
        """Read the standing overrides (or drop them) and put them back on the registered tools; the
        same for every tool registered from now on. Events go through ``engine.runtime.publish``."""
        self._engine = engine
        if self.policy == "forget":
            dropped = self._store.forget_overrides()
            if dropped:
                forgotten = {tool: o.as_dict() for tool, o in dropped.items()}
                origin = command_origin()  # who started this engine told it to forget them
                actor = f"operator:{origin.user}@{origin.host}"
                at, t = engine.wall_clock(), time_anywhere(engine.runtime.clock)
                engine.runtime.publish(OverridesForgotten(at=at, t=t, forgotten=forgotten, actor=actor))
        elif self.policy == "keep":
            self._standing = self._store.standing_overrides()
            for tool_id in list(engine.tool_ids):
                self._restore(tool_id)
        self._unhook = engine.on_register(self._restore)

    def change(self, event: Event) -> OverrideChange | None:
        """The standing override ``event`` sets or clears, remembered for tools registered later."""
        change = override_change(event)
        if change is not None:
            tool_id, override = change
            if override is None:
                self._standing.pop(tool_id, None)
            else:
                self._standing[tool_id] = override
        return change

    def stop(self) -> None:
        if self._unhook is not None:
            self._unhook()
            self._unhook = None

    def _restore(self, tool_id: str) -> None:
        override = self._standing.get(tool_id)
        engine = self._engine
        if override is None or engine is None or engine.breaker(tool_id).state is override.state:
            return
        o = override
        engine.restore(tool_id, o.state, actor=o.actor, reason=o.reason, set_at=o.set_at)
        log.info("standing override restored: %s %s (set by %s)", tool_id, override.state, override.actor)


__all__ = [
    "OVERRIDE_POLICIES",
    "STANDING_STATES",
    "OverrideChange",
    "OverrideKeeper",
    "OverridePolicy",
    "StandingOverride",
    "StoreOverrides",
    "override_change",
    "write_override_changes",
]
