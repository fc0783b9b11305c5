"""Operator commands for the whole fleet: signed like a trace store's, sent on a Redis stream,
applied by every process and acknowledged by each; the last command on a tool stands for it
(:mod:`engine.fleet.overrides`).

A command is the same signed content as one queued in a trace store
(:mod:`engine.store.command_auth`: HMAC-SHA256 under a 32-byte owner-only key), with the fleet's
key (``key_file=`` in the URL or ``$TRIPWIRE_FLEET_KEY_FILE``). Each process checks it with the
trace store's :class:`~engine.store.operator_commands.CommandGuard` (forged, replayed, expired,
reserved actor: refused) and carries it out with ``engine.trip``/``reset``/``disable``, so the
transition is announced with the operator and the reason like any other; then it writes its
acknowledgement under the command's id: applied (with the state it left), failed or refused.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal, cast

from engine.fleet.client import Command, FleetClient
from engine.fleet.config import FleetConfig
from engine.fleet.keys import FleetKeys
from engine.fleet.scripts import ACKNOWLEDGE, SEND_COMMAND
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
    clock (``time.time()`` by default)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown fleet action {action!r}; one of {', '.join(ACTIONS)}")
    origin = command_origin()
    created_at = time.time() if now is None else now
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
    keys = FleetKeys(client.config.namespace)
    (stream_id,) = await client.execute(
        ("EVAL", SEND_COMMAND, 2, keys.commands, keys.override(tool_id), COMMANDS_MAXLEN, *fields)
    )
    return SentCommand(command_id, action, tool_id, str(stream_id))


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
    "FleetAck",
    "FleetAction",
    "SentCommand",
    "acknowledge",
    "acknowledgements",
    "command_row",
    "load_fleet_key",
    "send_command",
]
