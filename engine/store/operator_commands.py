"""Operator commands: trip, reset and disable for an engine running in another process.

A console attached to an engine's trace store (``tripwire console --attach``) cannot reach the
engine's loop; it queues a signed command in the store's ``commands`` table instead.
:func:`serve_operator_commands` runs in the engine's event loop, polls the table, checks each
command (:class:`CommandGuard`), applies it with ``engine.trip``/``reset``/``disable`` — so the
transition is recorded like any other, with the operator and the reason — and acknowledges it
with the breaker state it left. The SQLite work runs in a worker thread: the loop never waits
for the disk.

Writing the store is not enough to command the engine. A command is refused — acknowledged as
``refused`` with the reason, which ``tripwire traces audit`` lists — when its MAC under the
store's command key (:mod:`engine.store.command_auth`) is missing or wrong, when its actor is
blank or one the engine records its own transitions as, when it names no host or pid, when it
has no expiry, one too far off, or one past by the engine's clock (its sender has stopped
waiting: never applied late), and when its id was taken already.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NoReturn, Protocol

import anyio
from anyio.abc import TaskStatus

from engine.errors import TraceStoreError, one_line
from engine.store.command_auth import MAX_EXPIRY_S, verify
from engine.store.rows import CommandRow
from engine.store.store import TraceStore
from engine.strategies.breaker.machine import BreakerState

log = logging.getLogger("tripwire.commands")

DEFAULT_POLL_S = 0.2
BATCH = 50
FLUSH_S = 2.0
"""How long an applied command waits for the recorder to store its transition before it is
acknowledged anyway (a store that refuses writes must not hold the answer back for good)."""
"""Commands fetched per poll at most; more wait for the next poll."""
RESERVED_ACTORS = frozenset({"engine"})
"""The actors the engine records its own transitions as (a breaker's timers and counts): an
operator command claiming one would pass for the engine's own decision."""
ACTOR_MAX = 256


class CommandTarget(Protocol):
    """What carrying out a command needs of the engine (:class:`~engine.Engine` is one)."""

    @property
    def wall_clock(self) -> Callable[[], float]: ...

    # What the operations return is not used: declared ``object`` so any return type fits.
    def trip(self, tool_id: str, *, actor: str = ..., reason: str = ...) -> object: ...
    def reset(self, tool_id: str, *, actor: str = ..., reason: str = ...) -> object: ...
    def disable(self, tool_id: str, *, actor: str = ..., reason: str = ...) -> object: ...
    def state(self, tool_id: str) -> BreakerState: ...


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """What the engine answered to one operator command, as the store records it."""

    command_id: int
    status: Literal["applied", "failed", "refused"]
    result: str
    """Applied: the breaker state the command left; failed or refused: why, on one line."""
    at: float


def operator_name(command: CommandRow) -> str:
    """How a command's transition names the operator: ``operator:<user>@<host>``."""
    return f"operator:{command.actor}@{command.host}"


class CommandGuard:
    """What the engine checks before it takes a command, and the ids it has taken.

    An id is remembered until an hour after its command expired (by then the command is refused
    as expired anyway, and a wall clock set back a little does not let it through again).
    """

    def __init__(
        self, key: bytes, *, max_expiry_s: float = MAX_EXPIRY_S, key_name: str = "the store's command key"
    ) -> None:
        self.key = key
        self.max_expiry_s = max_expiry_s
        self.key_name = key_name
        """How refusals name the key (a fleet's guard says "the fleet's command key")."""
        self._taken: dict[int, float] = {}
        """Command id → its expiry."""

    def refusal(self, command: CommandRow, now: float) -> str | None:
        """Why ``command`` must not be applied at ``now`` (the engine's wall clock), or None."""
        if not command.mac:
            return f"unsigned: it carries no MAC (only a holder of {self.key_name} may command)"
        if not verify(self.key, command):
            return f"forged or altered: its MAC does not match its content under {self.key_name}"
        # Signed with our key: the fields are the types the sender wrote.
        if command.id in self._taken:
            return f"replayed: command {command.id} was taken already"
        actor = command.actor.strip()
        if not actor:
            return "no actor: a command must name the OS user who sent it"
        if actor.lower() in RESERVED_ACTORS:
            return f"reserved actor {actor!r}: only the engine's own transitions are recorded as {actor!r}"
        if len(command.actor) > ACTOR_MAX or not command.actor.isprintable() or actor != command.actor:
            return f"bad actor {one_line(command.actor[:40])!r}: not the name of an OS user"
        if not command.host or command.pid is None or command.pid <= 0:
            return "no origin: a command must name the host and pid it was sent from"
        expires_at = command.expires_at
        if expires_at is None or not math.isfinite(expires_at):
            return "no expiry: a command must say until when it may be applied"
        lifetime = expires_at - command.created_at
        if lifetime > self.max_expiry_s or expires_at - now > self.max_expiry_s:
            return f"expiry too far off: a command may wait at most {self.max_expiry_s:g}s"
        if now > expires_at:
            waited = f"not applied within {lifetime:g}s of being sent"
            return f"expired: {waited} (the engine was not serving commands)"
        return None

    def take(self, command: CommandRow, now: float) -> None:
        """Remember ``command``'s id: it is never applied again."""
        forget_before = now - self.max_expiry_s
        for command_id in [i for i, expiry in self._taken.items() if expiry < forget_before]:
            del self._taken[command_id]
        self._taken[command.id] = command.expires_at if command.expires_at is not None else now


def apply_command(engine: CommandTarget, command: CommandRow, guard: CommandGuard) -> Acknowledgement:
    """Check one command and carry it out on the engine's loop (it never awaits); never raises."""
    now = engine.wall_clock()
    try:
        refusal = guard.refusal(command, now)
    except Exception as exc:  # a row of odd types, even signed, must not take the engine down
        refusal = one_line(f"unreadable: {type(exc).__name__}: {exc}")
    if refusal is not None:
        return Acknowledgement(command.id, "refused", refusal, now)
    guard.take(command, now)  # before acting: whatever happens next, it happens once
    actions: dict[str, Callable[..., object]] = {
        "trip": engine.trip,
        "reset": engine.reset,
        "disable": engine.disable,
    }
    action = actions.get(command.action)
    if action is None:
        return Acknowledgement(command.id, "failed", f"unknown action {command.action!r}", now)
    try:
        action(command.tool_id, actor=operator_name(command), reason=command.reason)
        state = engine.state(command.tool_id)
    except LookupError as exc:  # an unknown tool: the message lists the registered ones
        return Acknowledgement(command.id, "failed", one_line(str(exc.args[0] if exc.args else exc)), now)
    except Exception as exc:  # a command must never take the engine down
        return Acknowledgement(command.id, "failed", one_line(f"{type(exc).__name__}: {exc}"), now)
    return Acknowledgement(command.id, "applied", str(state), now)


async def apply_pending_commands(
    engine: CommandTarget,
    store: TraceStore,
    guard: CommandGuard,
    *,
    unacknowledged: dict[int, Acknowledgement] | None = None,
    flush: Callable[[float], bool] | None = None,
) -> list[Acknowledgement]:
    """One poll: check and apply every pending command in order and acknowledge each in the store.

    ``unacknowledged`` carries acknowledgements a failed write left over between polls: those
    commands are acknowledged again, never applied twice. ``flush(timeout_s)``: the engine's
    recorder's, waited for (in a worker thread) before an applied command is acknowledged, so the
    transition — and the standing override it sets — is stored by then. Raises
    :class:`TraceStoreError` when the store cannot be read or written.
    """
    waiting = {} if unacknowledged is None else unacknowledged
    pending = await anyio.to_thread.run_sync(store.pending_commands, BATCH)
    done: list[Acknowledgement] = []
    for command in pending:
        ack = waiting.get(command.id)
        if ack is None:
            ack = waiting[command.id] = apply_command(engine, command, guard)
            _log(command, ack)
            if flush is not None and ack.status == "applied":
                await anyio.to_thread.run_sync(flush, FLUSH_S)
        await anyio.to_thread.run_sync(_acknowledge, store, ack)
        del waiting[command.id]
        done.append(ack)
    pending_ids = {c.id for c in pending}
    for command_id in [i for i in waiting if i not in pending_ids]:
        del waiting[command_id]  # acknowledged meanwhile (our last write did land after all)
    return done


def _log(command: CommandRow, ack: Acknowledgement) -> None:
    sender = f"{one_line(str(command.actor))!r} on {one_line(str(command.host))} pid {command.pid}"
    if ack.status == "applied":
        log.info(
            "operator command %d: %s %s by %s → %s",
            command.id,
            command.action,
            command.tool_id,
            sender,
            ack.result,
        )
    elif ack.status == "refused":
        log.warning("operator command %d from %s refused: %s", command.id, sender, ack.result)
    else:
        log.warning("operator command %d from %s failed: %s", command.id, sender, ack.result)


def _acknowledge(store: TraceStore, ack: Acknowledgement) -> None:
    if not store.acknowledge_command(ack.command_id, ack.status, ack.result, now=ack.at):
        log.warning("operator command %d was acknowledged by someone else", ack.command_id)


async def serve_operator_commands(
    engine: CommandTarget,
    store: TraceStore,
    *,
    key: bytes | None = None,
    poll_s: float = DEFAULT_POLL_S,
    flush: Callable[[float], bool] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Apply the operator commands queued in ``store`` to ``engine`` until cancelled.

    Run it in the engine's task group: ``task_group.start_soon(serve_operator_commands, engine,
    store)`` (or ``await task_group.start(...)``: it returns once the first poll is done).
    Commands must be signed with ``key``, by default the store's command key, made beside the
    store if there is none; a key that cannot be used raises
    :class:`~engine.store.command_auth.CommandKeyError` before the first poll. A store that
    fails later is logged once, on one line, and tried again every poll; the engine never sees
    the error. ``flush``: the recorder's (``TraceRecorder.flush``), so an applied command is
    acknowledged only once its transition is stored.
    """
    if not poll_s > 0:
        raise ValueError(f"poll_s must be positive, got {poll_s}")
    if key is None:
        key = await anyio.to_thread.run_sync(store.command_key)
    try:
        await anyio.to_thread.run_sync(store.set_taking_commands, True)
    except TraceStoreError as exc:  # only what attached consoles are told: the commands still work
        log.warning("operator commands: cannot say so in the store: %s", exc)
    guard = CommandGuard(key)
    unacknowledged: dict[int, Acknowledgement] = {}
    failing: str | None = None
    started = False
    while True:
        try:
            await apply_pending_commands(engine, store, guard, unacknowledged=unacknowledged, flush=flush)
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


__all__ = [
    "RESERVED_ACTORS",
    "Acknowledgement",
    "CommandGuard",
    "CommandTarget",
    "apply_command",
    "apply_pending_commands",
    "operator_name",
    "serve_operator_commands",
]
