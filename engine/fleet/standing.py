"""A process's side of the fleet's operator commands: what it takes, acknowledges and keeps.

A command comes from the stream (carried out like a store's, :mod:`engine.store.operator_commands`)
or as what stands for its tool (:mod:`engine.fleet.overrides`): read when the process joins or comes
back, when it registers the tool after it joined, or from the stream when a process published it
again. Each is acknowledged under the command's id. A command on a tool this process has not
registered waits for the registration, as the tool's standing state (the newest one, checked then).

The last command carried out on each tool is kept as signed: when the fleet's generation of the
tool is older than it — Redis restarted empty and lost the standing state while this process
holds it — the process publishes it again (the command as its operator signed it, not a new one),
so a process that joins later takes the same state as the others.

Every field of a command is logged through :func:`~engine.errors.one_line`: a forged tool id or
action holding a line break never prints a line of its own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from engine.errors import one_line
from engine.fleet.client import Command
from engine.fleet.commands import COMMANDS_MAXLEN, acknowledge, command_row, signed_generation
from engine.fleet.keys import FleetKeys
from engine.fleet.overrides import Applied, apply_standing, refusal_as_sent, standing_due, superseded
from engine.fleet.scripts import PUBLISH_AGAIN
from engine.store.operator_commands import Acknowledgement, CommandGuard, apply_command
from engine.store.rows import CommandRow

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.fleet")

ACKNOWLEDGED_KEPT = 100
STANDING = "standing"
"""The field that marks a stream entry as a standing command published again (``1``)."""
_NOT_PUBLISHED = frozenset({"stream_id", STANDING})
"""Fields of a record that are Redis's, not the command's: never published again."""


class OperatorState:
    """The fleet's operator commands as ``engine``'s process takes them (``guard`` None: it takes
    none, and says ``refusal``). :attr:`pending` holds what the next round trip sends."""

    def __init__(
        self, engine: Engine, keys: FleetKeys, member_id: str, guard: CommandGuard | None, refusal: str
    ) -> None:
        self.engine = engine
        self.keys = keys
        self.member_id = member_id
        self.guard = guard
        self.refusal = refusal
        self.applied: dict[str, Applied] = {}
        """Tool → the last fleet command this process carried out on it."""
        self.waiting: dict[str, tuple[dict[str, str], int]] = {}
        """Tool not registered here → its newest standing command known, and the fleet's generation
        of the tool then."""
        self.pending: list[Command] = []
        self.acknowledged: list[Acknowledgement] = []
        """This process's acknowledgements, newest last (the last 100)."""
        self._published: dict[str, int] = {}
        """Tool → the generation this process published again, until the fleet holds it."""
        self._refused: dict[str, int] = {}
        """Tool → the standing command refused last (read again, it is not refused twice)."""

    # --- from the stream -----------------------------------------------------------------

    def take_command(self, fields: dict[str, str], generations: dict[str, int], standing: set[str]) -> None:
        """A command read from the stream; ``generations`` are the fleet's per registered tool, and
        ``standing`` the ids of the standing commands read in the same round trip (applied as such)."""
        command = _parsed(fields, "operator command")
        if command is None or fields.get("id") in standing:
            return  # unreadable, or a joining process's (or a new tool's) standing command: not late
        tool = command.tool_id
        if fields.get(STANDING) == "1":  # published again by a process: it stands, no fresher
            if tool in self.engine.tool_ids:
                self.take_standing(tool, fields, generations.get(tool, 0))
            else:
                self.wait(tool, fields, 0)
            return
        if tool not in self.engine.tool_ids:
            self._wait_for_registration(command, fields)
            return
        applied = self.applied.get(tool)
        if applied is not None and applied.id == command.id:
            return  # applied already, as the tool's standing command
        if self.guard is None:
            ack = Acknowledgement(command.id, "refused", self.refusal, self.engine.wall_clock())
        else:
            ack = apply_command(self.engine, command, self.guard)
        self._acknowledge(command, ack, fields)

    def _wait_for_registration(self, command: CommandRow, fields: dict[str, str]) -> None:
        """A command on a tool not registered here: refused now if it must be (checked as at its
        sending: it will stand, not run late), else it stands for the tool once registered
        (unacknowledged until then: this process has no such tool yet)."""
        now = self.engine.wall_clock()
        refusal = self.refusal if self.guard is None else refusal_as_sent(self.guard, command)
        if refusal is not None:
            self._acknowledge(command, Acknowledgement(command.id, "refused", refusal, now), fields)
            return
        generation = self._generation(fields)
        self.wait(command.tool_id, fields, generation if isinstance(generation, int) else 0)
        log.info("fleet command %d (%s %s): waits for the tool to be registered here", command.id,
                 one_line(command.action), one_line(command.tool_id))  # fmt: skip

    def wait(self, tool: str, fields: dict[str, str], fleet_generation: int) -> None:
        """``fields`` stand for ``tool`` once it is registered here (the newer of two, by generation)."""
        if not fields:
            return
        held = self.waiting.get(tool)
        if held is not None and _claimed(held[0]) > _claimed(fields):
            return
        self.waiting[tool] = (fields, fleet_generation)

    # --- what stands -----------------------------------------------------------------------

    def registered(self, tool: str) -> None:
        """``tool`` was registered: what stands for it waited for this."""
        held = self.waiting.pop(tool, None)
        if held is not None:
            self.take_standing(tool, *held)

    def take_standing(self, tool: str, fields: dict[str, str], fleet_generation: int) -> None:
        """Apply ``tool``'s standing command, if it is due here and still its newest signed state
        (the fleet's last command on the tool is of ``fleet_generation``)."""
        if not fields:
            return  # none, or a vanished record: no opinion
        command = _parsed(fields, f"standing command of {one_line(tool)}")
        if command is None or command.tool_id != tool:
            return  # unreadable, or filed under another tool's key: not this tool's
        applied = self.applied.get(tool)
        if self._refused.get(tool) == command.id or not standing_due(
            command, self.engine.breaker(tool).state, applied
        ):
            return
        now = self.engine.wall_clock()
        if self.guard is None:
            ack = Acknowledgement(command.id, "refused", self.refusal, now)
        else:
            generation = self._generation(fields)
            why = (
                generation
                if isinstance(generation, str)
                else superseded(generation, fleet_generation, applied)
            )
            ack = apply_standing(self.engine, command, self.guard, now, why)
        if ack.status == "refused":
            self._refused[tool] = command.id
        self._acknowledge(command, ack, fields, "standing ")

    def check_published(self, tool: str, fleet_generation: int) -> None:
        """Publish again the last command this process carried out on ``tool`` when the fleet's
        generation of the tool is older (Redis lost it): the others and later joiners take it."""
        applied = self.applied.get(tool)
        if applied is None or applied.generation is None or fleet_generation >= applied.generation:
            self._published.pop(tool, None)
            return
        if self._published.get(tool) == applied.generation:
            return  # sent already: the fleet has not answered yet
        self._published[tool] = applied.generation
        fields = [STANDING, "1"]
        for name, value in applied.fields.items():
            if name not in _NOT_PUBLISHED:
                fields += [name, value]
        keys = self.keys
        self.pending.append((
            "EVAL", PUBLISH_AGAIN, 4, keys.commands, keys.override(tool), keys.tool(tool), keys.standing,
            COMMANDS_MAXLEN, applied.generation, tool, *fields,
        ))  # fmt: skip
        log.warning(
            "fleet: the standing %s of %s (command %d, generation %d) is missing from Redis (restarted "
            "empty?): published again",
            one_line(applied.action), one_line(tool), applied.id, applied.generation,
        )  # fmt: skip

    # --- acknowledging ---------------------------------------------------------------------

    def _generation(self, fields: dict[str, str]) -> int | str:
        assert self.guard is not None  # only a process that takes commands checks them
        return signed_generation(self.guard.key, fields)

    def _acknowledge(
        self, command: CommandRow, ack: Acknowledgement, fields: dict[str, str], kind: str = ""
    ) -> None:
        if ack.status == "applied":
            generation = self._generation(fields) if self.guard is not None else None
            self.applied[command.tool_id] = Applied(
                command.id, command.action, generation if isinstance(generation, int) else None, dict(fields)
            )
        level = logging.INFO if ack.status == "applied" else logging.WARNING
        log.log(level, "fleet %scommand %d (%s %s): %s %s", kind, ack.command_id, one_line(command.action),
                one_line(command.tool_id), ack.status, one_line(ack.result))  # fmt: skip
        self.acknowledged = [*self.acknowledged[-(ACKNOWLEDGED_KEPT - 1) :], ack]
        self.pending += acknowledge(self.keys, self.member_id, ack)


def _parsed(fields: dict[str, str], what: str) -> CommandRow | None:
    try:
        return command_row(fields)
    except (KeyError, ValueError) as exc:
        log.warning("fleet: unreadable %s skipped: %s", what, one_line(repr(exc)))
        return None


def _claimed(fields: dict[str, str]) -> int:
    """The generation a record says it is of (checked when it is applied, not here)."""
    try:
        return int(fields.get("generation", "0"))
    except ValueError:
        return 0


__all__ = ["STANDING", "OperatorState"]
