"""The console over a fleet: :class:`FleetLink` reads a fleet's Redis for the console's screens.

A thread of its own (an anyio blocking portal on asyncio, as :mod:`console.host` runs an engine)
polls the fleet every ``poll_s`` — :func:`~engine.fleet.read_fleet` for the processes and tools,
:func:`~engine.fleet.tail_events` for the live events, :func:`~engine.fleet.acknowledgements`
for the answers to the commands sent from here — and publishes what it read as one immutable
:class:`~console.model.fleet.FleetSnapshot` the UI picks up at its next flush: the UI never
waits on Redis. The events go to the console's bridge like an engine's, so the events view
shows the fleet's.

Operator commands are signed with the fleet's key (``key_file=`` in the URL or
``$TRIPWIRE_FLEET_KEY_FILE``); without one the console is read-only and says why. Redis not
answering is no error here: the last good view stays, with its age and why, until Redis answers
again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any

import anyio
import redis
from anyio.from_thread import BlockingPortal, start_blocking_portal

from console.host import Action
from console.model import ToolSeed
from console.model.fleet import FleetSnapshot, SentRecord
from engine.errors import one_line
from engine.events import Event, event_from_dict
from engine.fleet import (
    FleetClient,
    FleetConfig,
    FleetView,
    acknowledgements,
    load_fleet_key,
    read_fleet,
    send_command,
    tail_events,
)
from engine.fleet.client import UNAVAILABLE
from engine.fleet.keys import FleetKeys
from engine.store.command_auth import CommandKeyError

log = logging.getLogger("tripwire.console")

POLL_S = 0.5
"""How often the fleet is read: its processes beat once a second (``heartbeat_s``)."""
HISTORY_BATCHES = 100
"""Recent entries of the fleet's event stream shown on attaching."""
ACK_FOLLOW_S = 30.0
"""How long the answers to a command are read after it was sent."""
COMMANDS_KEPT = 20
COMMAND_EXPIRY_S = 10.0
"""A command no process applied within this long is refused by all (it never applies late)."""
FAILURES: tuple[type[Exception], ...] = (*UNAVAILABLE, redis.exceptions.RedisError)
NO_KEY = "no fleet command key (key_file= in the URL or $TRIPWIRE_FLEET_KEY_FILE)"


class FleetLink:
    """An :class:`~console.host.EngineLink` onto the fleet at ``config`` (and a
    :class:`~console.model.fleet.FleetFeed` for the fleet's screens). Nothing is read from Redis
    before :meth:`subscribe`: a console starts at once, whatever Redis does."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        read_only: bool = False,
        poll_s: float = POLL_S,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s must be positive, got {poll_s}")
        self.config = config
        self.poll_s = poll_s
        self.wall_clock = wall_clock
        self.read_only_reason: str | None = None
        """Why this console may not act though it was not opened read-only, on one line."""
        self._key: bytes | None = None
        if not read_only:
            try:
                self._key = load_fleet_key(config)
            except CommandKeyError as exc:
                self.read_only_reason = f"fleet key {config.key_path()}: {exc.problem}"
            else:
                if self._key is None:
                    self.read_only_reason = NO_KEY
        self.read_only = read_only or self._key is None
        self.description = f"fleet {config.namespace} at {config.server}"
        self.client = FleetClient(config)
        self._view: FleetView | None = None
        self._read_at: float | None = None
        """When the view was read (``time.monotonic``)."""
        self._error: str | None = None
        self._commands: tuple[SentRecord, ...] = ()
        self._sinks: list[Callable[[Event], None]] = []
        self._cursor: str | None = None
        self._portal: BlockingPortal | None = None
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._poller: Future[None] | None = None
        self._closed = False
        self.polls = 0
        """Polls that read the fleet, so far (tests wait on it)."""

    # --- what the screens read -------------------------------------------------------------

    def fleet_snapshot(self) -> FleetSnapshot:
        """The fleet as last read: its age and the reason while Redis does not answer."""
        age = None
        if self._error is not None and self._read_at is not None:
            age = time.monotonic() - self._read_at
        return FleetSnapshot(
            self.config.namespace, self.config.server, self._view, self.wall_clock(), age, self._error,
            self._commands, self.read_only_reason,
        )  # fmt: skip

    @property
    def stale_for(self) -> float | None:
        """How old the view shown is while Redis does not answer (``inf``: none was read); None
        while it answers. The console greys its views meanwhile."""
        if self._error is None:
            return None
        return float("inf") if self._read_at is None else time.monotonic() - self._read_at

    # --- EngineLink ---------------------------------------------------------------------------

    def subscribe(self, sink: Callable[[Event], None]) -> Callable[[], None]:
        """Hand ``sink`` the fleet's events from now on (after the recent history); the first
        subscription starts the poller."""
        self._sinks = [*self._sinks, sink]  # replaced, never mutated: the poller reads it unlocked
        if self._portal is None and not self._closed:
            self._portal_cm = start_blocking_portal("asyncio")
            self._portal = self._portal_cm.__enter__()
            self._poller = self._portal.start_task_soon(self._poll_forever)

        def unsubscribe() -> None:
            self._sinks = [s for s in self._sinks if s is not sink]

        return unsubscribe

    def seeds(self) -> list[ToolSeed]:
        return []  # the fleet's tools are in its snapshot, not in the per-engine model

    def shared_strategies(self) -> dict[str, Any]:
        return {}  # each process has its own: the fleet's snapshot sums them

    def now(self) -> float:
        return time.monotonic()  # only the events view's model reads it: each process has its clock

    def act(self, action: Action, tool_id: str, *, actor: str, reason: str) -> None:
        """Sign and send ``action`` to every process of the fleet; their answers arrive in the
        snapshot's commands. Blocks for one round trip (call from a worker thread); raises what
        Redis raises when it cannot take the command. ``actor`` is not used: the command names
        this process's OS user, host and pid."""
        if self.read_only or self._key is None:
            why = f": {self.read_only_reason}" if self.read_only_reason else ""
            raise PermissionError(f"the console is read-only{why}")
        portal = self._portal
        if portal is None or self._closed:
            raise RuntimeError("the fleet console is closed")
        portal.call(self._send, action, tool_id, reason)

    def problem(self) -> str | None:
        return None  # Redis's state is the fleet screens' banner, not a toast

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()  # it closes the client on its loop as it ends
        cm, self._portal_cm, self._portal = self._portal_cm, None, None
        if cm is not None:
            cm.__exit__(None, None, None)

    # --- the poller (on the portal's loop) ------------------------------------------------

    async def _poll_forever(self) -> None:
        try:
            while True:
                try:
                    await self.poll()
                except Exception as exc:  # a defect: shown and logged, never a console frozen in silence
                    error = one_line(f"unexpected {type(exc).__name__}: {exc}")[:200]
                    if error != self._error:  # once while it lasts, not every poll
                        log.exception("fleet console: reading the fleet failed")
                    self._error = error
                await anyio.sleep(self.poll_s)
        finally:
            with anyio.CancelScope(shield=True):
                await self.client.aclose()

    async def poll(self) -> None:
        """Read the fleet once: its view, its new events, the answers to recent commands."""
        try:
            view = await read_fleet(self.client)
            if self._cursor is None:
                self._cursor = await self._history_start()
            batches, self._cursor = await tail_events(self.client, self._cursor, count=1_000)
            await self._read_acks()
        except FAILURES as exc:
            self._error = one_line(f"{type(exc).__name__}: {exc}")[:200] or type(exc).__name__
            return
        self._view, self._read_at, self._error = view, time.monotonic(), None
        self.polls += 1
        sinks = self._sinks
        for batch in batches:
            for data in batch.events:
                try:
                    event = event_from_dict(data)
                except (KeyError, TypeError, ValueError):  # a type this console does not know
                    continue
                for sink in sinks:
                    sink(event)

    async def _history_start(self) -> str:
        """The stream id to tail after, so the recent ``HISTORY_BATCHES`` entries come first."""
        keys = FleetKeys(self.config.namespace)
        (entries,) = await self.client.execute(("XREVRANGE", keys.events, "+", "-", "COUNT", HISTORY_BATCHES))
        if not entries:
            return "0-0"
        ms, _, seq = str(entries[-1][0]).partition("-")
        return f"{ms}-{int(seq) - 1}" if int(seq) > 0 else f"{max(int(ms) - 1, 0)}-{2**64 - 1}"

    async def _read_acks(self) -> None:
        now = self.wall_clock()
        for record in self._commands:
            if now - record.sent_at > ACK_FOLLOW_S:
                continue
            acks = await acknowledgements(self.client, record.command_id)
            if acks != dict(record.acks):
                self._replace(record, SentRecord(record.command_id, record.action, record.tool_id,
                                                 record.sent_at, record.expected, acks))  # fmt: skip

    def _replace(self, old: SentRecord, new: SentRecord) -> None:
        # On the portal's loop, like _send: no lock (the UI only reads the tuple, replaced whole).
        self._commands = tuple(new if r is old else r for r in self._commands)

    async def _send(self, action: Action, tool_id: str, reason: str) -> None:
        assert self._key is not None
        view = self._view
        expected = tuple(sorted(m.id for m in view.members if m.status != "gone")) if view else ()
        sent = await send_command(
            self.client, action, tool_id, key=self._key, reason=reason, expires_in_s=COMMAND_EXPIRY_S,
            now=self.wall_clock(),
        )  # fmt: skip
        record = SentRecord(sent.id, action, tool_id, self.wall_clock(), expected)
        self._commands = (*self._commands, record)[-COMMANDS_KEPT:]


__all__ = ["FleetLink"]
