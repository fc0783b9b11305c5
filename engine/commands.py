"""Operator commands: trip, reset and disable for an engine running in another process.

A console attached to an engine's trace store (``tripwire console --attach``) cannot reach the
engine's loop; it queues a command in the store's ``commands`` table instead.
:func:`serve_operator_commands` runs in the engine's event loop, polls the table, applies each
command with ``engine.trip``/``reset``/``disable`` — so the transition is recorded like any other,
actor and reason included — and acknowledges it with the breaker state it left. The SQLite work
runs in a worker thread: the loop never waits for the disk.

A command that expired before the engine saw it (its sender stopped waiting: the engine was
down or busy) is refused, never applied late.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NoReturn

import anyio
from anyio.abc import TaskStatus

from engine.errors import one_line
from engine.store import CommandRow, TraceStore, TraceStoreError

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.commands")

DEFAULT_POLL_S = 0.2
BATCH = 50
"""Commands fetched per poll at most; more wait for the next poll."""


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    command_id: int
    status: Literal["applied", "failed"]
    result: str
    """Applied: the breaker state the command left; failed: why, on one line."""
    at: float


def apply_command(engine: Engine, command: CommandRow) -> Acknowledgement:
    """Carry out one command on the engine's loop (it never awaits); never raises."""
    now = engine.wall_clock()
    if command.expires_at is not None and now > command.expires_at:
        ttl = command.expires_at - command.created_at
        reason = f"expired: not applied within {ttl:g}s of being sent (the engine was not serving commands)"
        return Acknowledgement(command.id, "failed", reason, now)
    actions: dict[str, Callable[..., None]] = {
        "trip": engine.trip,
        "reset": engine.reset,
        "disable": engine.disable,
    }
    action = actions.get(command.action)
    if action is None:
        return Acknowledgement(command.id, "failed", f"unknown action {command.action!r}", now)
    try:
        action(command.tool_id, actor=command.actor, reason=command.reason)
        state = engine.state(command.tool_id)
    except LookupError as exc:  # an unknown tool: the message lists the registered ones
        return Acknowledgement(command.id, "failed", one_line(str(exc.args[0] if exc.args else exc)), now)
    except Exception as exc:  # a command must never take the engine down
        return Acknowledgement(command.id, "failed", one_line(f"{type(exc).__name__}: {exc}"), now)
    return Acknowledgement(command.id, "applied", str(state), now)


async def apply_pending_commands(
    engine: Engine, store: TraceStore, *, unacknowledged: dict[int, Acknowledgement] | None = None
) -> list[Acknowledgement]:
    """One poll: apply every pending command in order and acknowledge each in the store.

    ``unacknowledged`` carries acknowledgements a failed write left over between polls: those
    commands are acknowledged again, never applied twice. Raises :class:`TraceStoreError` when
    the store cannot be read or written.
    """
    waiting = {} if unacknowledged is None else unacknowledged
    pending = await anyio.to_thread.run_sync(store.pending_commands, BATCH)
    done: list[Acknowledgement] = []
    for command in pending:
        ack = waiting.get(command.id)
        if ack is None:
            ack = waiting[command.id] = apply_command(engine, command)
            if ack.status == "applied":
                log.info(
                    "operator command %d: %s %s by %s → %s",
                    command.id, command.action, command.tool_id, command.actor, ack.result,
                )  # fmt: skip
            else:
                log.warning("operator command %d refused: %s", command.id, ack.result)
        await anyio.to_thread.run_sync(_acknowledge, store, ack)
        del waiting[command.id]
        done.append(ack)
    pending_ids = {c.id for c in pending}
    for command_id in [i for i in waiting if i not in pending_ids]:
        del waiting[command_id]  # acknowledged meanwhile (our last write did land after all)
    return done


def _acknowledge(store: TraceStore, ack: Acknowledgement) -> None:
    if not store.acknowledge_command(ack.command_id, ack.status, ack.result, now=ack.at):
        log.warning("operator command %d was acknowledged by someone else", ack.command_id)


async def serve_operator_commands(
    engine: Engine,
    store: TraceStore,
    *,
    poll_s: float = DEFAULT_POLL_S,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Apply the operator commands queued in ``store`` to ``engine`` until cancelled.

    Run it in the engine's task group: ``task_group.start_soon(serve_operator_commands, engine,
    store)`` (or ``await task_group.start(...)``: it returns once the first poll is done). A
    store that fails is logged once, on one line, and tried again every poll; the engine never
    sees the error.
    """
    if not poll_s > 0:
        raise ValueError(f"poll_s must be positive, got {poll_s}")
    unacknowledged: dict[int, Acknowledgement] = {}
    failing: str | None = None
    started = False
    while True:
        try:
            await apply_pending_commands(engine, store, unacknowledged=unacknowledged)
        except TraceStoreError as exc:
            if str(exc) != failing:
                log.warning("operator commands: %s; trying again every %gs", exc, poll_s)
                failing = str(exc)
        else:
            if failing is not None:
                log.warning("operator commands: the store works again")
                failing = None
        if not started:
            started = True
            task_status.started()
        await anyio.sleep(poll_s)


__all__ = ["Acknowledgement", "apply_command", "apply_pending_commands", "serve_operator_commands"]
