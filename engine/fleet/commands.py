"""Operator commands for the whole fleet: signed like a trace store's, sent on a Redis stream,
applied by every process and acknowledged by each; the last command on a tool stands for it
(:mod:`engine.fleet.overrides`).

A command is the same signed content as one queued in a trace store
(:mod:`engine.store.command_auth`: HMAC-SHA256 under a 32-byte owner-only key), with the fleet's
key (``key_file=`` in the URL or ``$TRIPWIRE_FLEET_KEY_FILE``), plus its tool's **generation**,
signed with its id under the same key: one more than the last command's on the tool, taken in the
script that publishes it (a sender that raced another signs again), so that a standing record can
be told from one it superseded (:mod:`engine.fleet.overrides`). Each process checks it with the
trace store's :class:`~engine.store.operator_commands.CommandGuard` (forged, replayed, expired,
reserved actor: refused) and carries it out with ``engine.trip``/``reset``/``disable``, so the
transition is announced with the operator and the reason like any other; then it writes its
acknowledgement under the command's id: applied (with the state it left), failed or refused.
"""

from __future__ import annotations

import hmac
import json
import math
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal, cast

from engine.errors import TripwireError
from engine.fleet.client import Command, FleetClient
from engine.fleet.config import FleetConfig
from engine.fleet.keys import FleetKeys
from engine.fleet.scripts import ACKNOWLEDGE, GENERATION_FIELD, SEND_COMMAND
from engine.store.command_auth import DEFAULT_EXPIRY_S, command_origin, read_key, sign, signed_content
from engine.store.operator_commands import Acknowledgement
from engine.store.rows import CommandRow

FleetAction = Literal["trip", "reset", "disable"]
"""What an operator can do to a tool fleet-wide."""
ACTIONS: tuple[FleetAction, ...] = ("trip", "reset", "disable")
COMMANDS_MAXLEN = 1_000
"""Commands the stream keeps (``MAXLEN ~``): far more than any process has yet to read."""
ACK_TTL_MS = 3_600_000
_FIELDS = ("id", "action", "tool_id", "reason", "actor", "host", "pid", "created_at", "expires_at", "mac")
SEND_ATTEMPTS = 5
"""Times a sender signs again when another command on the tool took its generation first."""
_GENERATION_DOMAIN = "tripwire-fleet-generation-v1"
"""Part of every signed generation: a MAC made for anything else never matches one."""


class CommandConflict(TripwireError, RuntimeError):
    """Other commands on the tool kept taking the generation this sender signed (it gave up)."""


def load_fleet_key(config: FleetConfig) -> bytes | None:
    """The fleet's command key, or None when the config names no key file. A key file that is not
    its owner's alone, or not a key, raises :class:`~engine.store.command_auth.CommandKeyError`."""
    path = config.key_path()
    return read_key(path) if path is not None else None


@dataclass(frozen=True, slots=True)
class SentCommand:
    """A command on the fleet's stream: its id (acknowledgements are filed under it)."""

    id: int
    action: FleetAction
    tool_id: str
    stream_id: str


async def send_command(
    client: FleetClient,
    action: FleetAction,
    tool_id: str,
    *,
    key: bytes,
    reason: str = "",
    expires_in_s: float = DEFAULT_EXPIRY_S,
    now: float | None = None,
) -> SentCommand:
    """Sign and publish ``action`` on ``tool_id`` for every process of the fleet, and make it the
    tool's standing operator state (one script: a process joining later applies a standing trip or
    disable; a reset clears it); the sender is this process as the OS names it. ``now`` is the wall
    clock (``time.time()`` by default). Two round trips: the tool's generation is read, then the
    command signed with the next one is published unless another took it meanwhile (then signed
    again, :data:`SEND_ATTEMPTS` times at most: :class:`CommandConflict`)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown fleet action {action!r}; one of {', '.join(ACTIONS)}")
    origin = command_origin()
    created_at = time.time() if now is None else now
    keys = FleetKeys(client.config.namespace)
    (current,) = await client.execute(("HGET", keys.tool(tool_id), GENERATION_FIELD))
    follows = stored_generation(current)
    for _ in range(SEND_ATTEMPTS):
        generation = follows + 1
        command_id = secrets.randbits(62)  # no shared counter: a Redis restarted empty reuses none
        content = {
            "id": command_id, "action": action, "tool_id": tool_id, "reason": reason, "actor": origin.user,
            "host": origin.host, "pid": origin.pid, "created_at": created_at,
            "expires_at": created_at + expires_in_s,
        }  # fmt: skip
        mac = sign(key, signed_content(**content))  # type: ignore[arg-type]  # the dict's types are right
        fields: list[Any] = []
        for name in _FIELDS:
            value = mac if name == "mac" else content[name]
            fields += [name, repr(value) if isinstance(value, float) else str(value)]
        fields += [
            "generation", str(generation),
            "generation_mac", generation_mac(key, command_id, tool_id, action, generation),
        ]  # fmt: skip
        (reply,) = await client.execute(
            ("EVAL", SEND_COMMAND, 4, keys.commands, keys.override(tool_id), keys.tool(tool_id),
             keys.standing, COMMANDS_MAXLEN, follows, tool_id, *fields)
        )  # fmt: skip
        if not isinstance(reply, int):
            return SentCommand(command_id, action, tool_id, str(reply))
        follows = reply  # another command took it: sign again after the one that did
    raise CommandConflict(
        f"{action} {tool_id}: other commands on it took its generation {SEND_ATTEMPTS} times in a row;"
        " send it again"
    )


def generation_mac(key: bytes, command_id: int, tool_id: str, action: str, generation: int) -> str:
    """The MAC that ties ``generation`` to command ``command_id`` (its content is the command's MAC's)."""
    content = {"domain": _GENERATION_DOMAIN, "id": int(command_id), "tool_id": tool_id, "action": action,
               "generation": int(generation)}  # fmt: skip
    return sign(key, json.dumps(content, sort_keys=True, separators=(",", ":")).encode())


def signed_generation(key: bytes, fields: dict[str, str]) -> int | str:
    """The command's generation when its MAC under ``key`` matches, else why not (on one line)."""
    if "generation" not in fields:
        return (
            "no generation: a command stands only with the generation signed with it"
            " (sent by an older tripwire?)"
        )
    try:
        generation = int(fields["generation"])
        expected = generation_mac(key, int(fields["id"]), fields["tool_id"], fields["action"], generation)
    except (KeyError, ValueError):
        return "unreadable generation: not the one signed with the command"
    given = fields.get("generation_mac", "")
    if generation < 1 or not hmac.compare_digest(expected.encode(), given.encode(errors="replace")):
        return "forged or altered: its generation's MAC does not match under the fleet's command key"
    return generation


def stored_generation(value: Any) -> int:
    """A generation as Redis holds it; none, or a value nobody of ours wrote, is 0 (as the scripts
    read it: a whole number at least 0)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) and number > 0 else 0


def command_row(fields: dict[str, str]) -> CommandRow:
    """A stream entry as the row the command guard checks; raises ValueError for one unreadable."""
    return CommandRow(
        id=int(fields["id"]), created_at=float(fields["created_at"]),
        action=cast(Any, fields["action"]), tool_id=fields["tool_id"], actor=fields["actor"],
        reason=fields.get("reason", ""), status=cast(Any, "pending"), applied_at=None, result=None,
        expires_at=float(fields["expires_at"]), host=fields.get("host"),
        pid=int(fields["pid"]), mac=fields.get("mac"),
    )  # fmt: skip


def acknowledge(keys: FleetKeys, member_id: str, ack: Acknowledgement) -> tuple[Command]:
    """The command (one script: the record never stands without its expiry) that files
    ``member_id``'s acknowledgement under the command's id."""
    record = json.dumps({"status": ack.status, "result": ack.result, "at": ack.at})
    return (("EVAL", ACKNOWLEDGE, 1, keys.acks(ack.command_id), member_id, record, ACK_TTL_MS),)


@dataclass(frozen=True, slots=True)
class FleetAck:
    """One process's answer to a fleet command."""

    member_id: str
    status: Literal["applied", "failed", "refused"]
    result: str
    at: float


async def acknowledgements(client: FleetClient, command_id: int) -> dict[str, FleetAck]:
    """Every process's acknowledgement of command ``command_id`` so far, by member id."""
    keys = FleetKeys(client.config.namespace)
    (raw,) = await client.execute(("HGETALL", keys.acks(command_id)))
    acks = {}
    for member_id, record in dict(raw or {}).items():
        try:
            data = json.loads(record)
            acks[member_id] = FleetAck(member_id, data["status"], str(data["result"]), float(data["at"]))
        except (ValueError, KeyError, TypeError):  # a record nobody of ours wrote: no opinion
            continue
    return acks


__all__ = [
    "ACTIONS",
    "CommandConflict",
    "FleetAck",
    "FleetAction",
    "SentCommand",
    "acknowledge",
    "acknowledgements",
    "command_row",
    "generation_mac",
    "load_fleet_key",
    "send_command",
    "signed_generation",
    "stored_generation",
]
