"""The fleet's standing operator state: an operator's trip or disable holds fleet-wide until reset,
for the processes that join later too.

Sending a command (:func:`~engine.fleet.commands.send_command`) also makes it its tool's standing
command (``override:<tool>``, in the same script as its publication). A process joining — or
back after Redis was away, or registering the tool after it joined — reads the tool's standing
command and applies it when it has not applied it already: a trip or a disable is carried out like
a fresh command; a reset (nothing stands) only undoes an operator state this process took from the
fleet, never a breaker it learnt itself. A vanished record is no opinion: nothing is undone.

The standing command is checked as when it was sent — signed with the fleet's key, by an OS user,
with an origin and a sane expiry — but not against its expiry, which bounds how late a *command*
may be carried out, not how long a trip stands. And it must be the newest signed state of its tool:
its generation (signed with it) no older than the last command published on the tool
(``command_generation``) nor than the last one this process applied. An older signed command
copied into the record by someone who may write to Redis but holds no key — a trip since reset —
is refused as superseded; so is a record without a generation (written by a tripwire before
generations: send the command again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import one_line
from engine.store.operator_commands import Acknowledgement, CommandGuard, CommandTarget, apply_command
from engine.store.rows import CommandRow
from engine.strategies.breaker.machine import BreakerState

OPERATOR_STATES = frozenset({BreakerState.FORCED_OPEN, BreakerState.DISABLED})
STANDING_ACTIONS = frozenset({"trip", "disable"})


@dataclass(frozen=True, slots=True)
class Applied:
    """The fleet command a process carried out last on a tool."""

    id: int
    action: str
    generation: int | None
    """Its signed generation (None: a command sent without one)."""
    fields: dict[str, str]
    """The command as signed: what is published again when Redis has lost it."""


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


def standing_due(command: CommandRow, state: BreakerState, applied: Applied | None) -> bool:
    """Whether a process whose breaker is in ``state``, having last applied ``applied`` of the
    fleet's commands on the tool, must apply the standing ``command``."""
    if applied is not None and applied.id == command.id:
        return False  # applied already (from the stream, or standing before)
    if command.action in STANDING_ACTIONS:
        return True
    # A reset: undo only an operator state that came from the fleet.
    return applied is not None and applied.action in STANDING_ACTIONS and state in OPERATOR_STATES


def superseded(generation: int, fleet_generation: int, applied: Applied | None) -> str | None:
    """Why a standing command of ``generation`` is not its tool's newest signed state — the fleet's
    last command on the tool is of ``fleet_generation``, this process applied ``applied`` — or None."""
    if generation < fleet_generation:
        return (
            f"superseded: generation {generation}, while the fleet's last command on the tool is of "
            f"generation {fleet_generation}"
        )
    if applied is not None and applied.generation is not None and generation < applied.generation:
        return (
            f"superseded: generation {generation}, while this process applied generation {applied.generation}"
        )
    return None


def apply_standing(
    engine: CommandTarget, command: CommandRow, guard: CommandGuard, now: float, refusal: str | None = None
) -> Acknowledgement:
    """Check ``command`` as at its sending and carry it out; acknowledged at ``now`` (wall clock).
    ``refusal`` (why it no longer stands) refuses it once the guard has found nothing worse."""
    if refusal is not None:
        return Acknowledgement(command.id, "refused", refusal_as_sent(guard, command) or refusal, now)
    ack = apply_command(_AsSent(engine, command.created_at), command, guard)
    return dataclasses.replace(ack, at=now)


def refusal_as_sent(guard: CommandGuard, command: CommandRow) -> str | None:
    """Why ``guard`` refuses ``command`` checked as at its sending (a standing command is not
    late), or None; never raises."""
    try:
        return guard.refusal(command, command.created_at)
    except Exception as exc:  # a row of odd types, even signed, must not take the engine down
        return one_line(f"unreadable: {type(exc).__name__}: {exc}")


def standing_fields(flat: Any) -> dict[str, str]:
    """An ``HGETALL`` reply — a dict, or flat pairs from a script — as a dict (empty: no standing
    command, or a vanished record)."""
    if isinstance(flat, dict):
        return {str(k): str(v) for k, v in flat.items()}
    items = list(flat or [])
    return {str(k): str(v) for k, v in zip(items[::2], items[1::2], strict=False)}


__all__ = [
    "OPERATOR_STATES",
    "STANDING_ACTIONS",
    "Applied",
    "apply_standing",
    "refusal_as_sent",
    "standing_due",
    "standing_fields",
    "superseded",
]
