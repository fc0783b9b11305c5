"""The fleet's standing operator state: an operator's trip or disable holds fleet-wide until reset,
for the processes that join later too.

Sending a command (:func:`~engine.fleet.commands.send_command`) also makes it its tool's standing
command (``override:<tool>``, in the same script as its publication). A process joining — or
back after Redis was away — reads each tool's standing command once and applies it when it has
not applied it already: a trip or a disable is carried out like a fresh command; a reset
(nothing stands) only undoes an operator state this process took from the fleet, never a
breaker it learnt itself. A vanished record is no opinion: nothing is undone.

The standing command is checked as when it was sent — signed with the fleet's key, by an OS user,
with an origin and a sane expiry — but not against its expiry, which bounds how late a *command*
may be carried out, not how long a trip stands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from engine.breaker import BreakerState
from engine.store.operator_commands import Acknowledgement, CommandGuard, CommandTarget, apply_command
from engine.store.rows import CommandRow

OPERATOR_STATES = frozenset({BreakerState.FORCED_OPEN, BreakerState.DISABLED})
STANDING_ACTIONS = frozenset({"trip", "disable"})


class _AsSent:
    """The engine with its wall clock set to when the command was sent: the guard's checks run
    as they would have then; the operations are the engine's own."""

    def __init__(self, engine: CommandTarget, sent_at: float) -> None:
        self._engine = engine
        self._sent_at = sent_at

    @property
    def wall_clock(self) -> Callable[[], float]:
        return lambda: self._sent_at

    def trip(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> object:
        return self._engine.trip(tool_id, actor=actor, reason=reason)

    def reset(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> object:
        return self._engine.reset(tool_id, actor=actor, reason=reason)

    def disable(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> object:
        return self._engine.disable(tool_id, actor=actor, reason=reason)

    def state(self, tool_id: str) -> BreakerState:
        return self._engine.state(tool_id)


def standing_due(command: CommandRow, state: BreakerState, applied: tuple[int, str] | None) -> bool:
    """Whether a process whose breaker is in ``state``, having last applied ``applied`` (id,
    action) of the fleet's commands on the tool, must apply the standing ``command``."""
    if applied is not None and applied[0] == command.id:
        return False  # applied already (from the stream, or standing before)
    if command.action in STANDING_ACTIONS:
        return True
    # A reset: undo only an operator state that came from the fleet.
    return applied is not None and applied[1] in STANDING_ACTIONS and state in OPERATOR_STATES


def apply_standing(
    engine: CommandTarget, command: CommandRow, guard: CommandGuard, now: float
) -> Acknowledgement:
    """Check ``command`` as at its sending and carry it out; acknowledged at ``now`` (wall clock)."""
    ack = apply_command(_AsSent(engine, command.created_at), command, guard)
    return dataclasses.replace(ack, at=now)


def standing_fields(flat: Any) -> dict[str, str]:
    """An ``HGETALL`` reply as a dict (empty: no standing command, or a vanished record)."""
    items = list(flat or [])
    return {str(k): str(v) for k, v in zip(items[::2], items[1::2], strict=False)}


__all__ = ["OPERATOR_STATES", "STANDING_ACTIONS", "apply_standing", "standing_due", "standing_fields"]
