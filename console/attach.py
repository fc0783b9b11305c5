"""The console attached to an engine in another process, through its trace store.

An agent service (``tripwire serve``, or your own process running a
:class:`~engine.store.TraceRecorder` and :func:`~engine.store.serve_operator_commands`)
records its events in a trace store. :class:`AttachedLink` follows that store: a thread of its
own (never the UI's) reads the events committed since the last poll, every 100 ms, and hands
them to the console's bridge as an engine's sink would, so the board runs a few hundred
milliseconds behind the engine at most. Operator actions become rows in the store's command
table, signed with the store's command key and naming this process's OS user, host and pid;
the engine checks them, applies them, records the transition like any other, and acknowledges
each with the breaker state it left, which :meth:`AttachedLink.act` waits for. A console that
cannot read the key (or attached to a service that takes no commands) is read-only, and says why.

Whether the engine is heard from comes from the heartbeat its recorder writes every couple of
seconds and its process (the ``writers`` table, :func:`~engine.store.writers.engine_heard`), never
from its events' times (a run on a virtual clock stamps them ahead of the wall clock): when it has
not beaten for :data:`STALE_AFTER_S`, or its process is gone, :attr:`AttachedLink.stale_for` says
for how long, and the console shows the board as the last known state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console import render
from console.app import ConsoleApp
from console.host import Action
from console.model import ManifestView, ToolSeed
from engine.errors import TripwireError
from engine.events import Event, RecordingStarted
from engine.liveness import Heard
from engine.store import CommandRow, StoreSnapshot, ToolState, TraceStore, TraceStoreError
from engine.store.command_auth import CommandKeyError, command_key_path, read_key
from engine.store.writers import HEARD_WITHIN_S, engine_heard

log = logging.getLogger("tripwire.console")

POLL_S = 0.1
"""How often the store is read for new events: the board's lag is this plus the recorder's batch."""
PAGE = 5_000
"""Events read per query at most; a backlog is read page after page without waiting."""
HISTORY = 5_000
"""Recent events replayed on attaching, so rolling figures, timelines and the turn graph start full."""
ACK_TIMEOUT_S = 5.0
"""How long an operator action waits for the engine; not applied by then, it expires unapplied."""
ACK_GRACE_S = 1.0
"""Applied just before it expired, a command's acknowledgement is still on its way: wait this too."""
UNANSWERED_S = 3.0
"""A command pending this long means no engine is serving commands (one polls every 0.2 s)."""
CHECK_S = 1.0
"""How often the follower thread looks for unanswered commands."""
NO_COMMANDS = "the service on this store takes no operator commands (tripwire serve --no-commands)"
STALE_AFTER_S = HEARD_WITHIN_S
"""No heartbeat for this long: the engine is taken for gone (one beat may be late)."""


class CommandFailed(TripwireError):
    """The engine refused an operator command; ``str()`` is its one-line reason."""


class AttachedLink:
    """An :class:`~console.host.EngineLink` to an engine in another process, through its trace store.

    Opening reads what the console is seeded with (every tool's newest breaker state and
    manifest) and refuses a missing, corrupt or foreign store with a one-line
    :class:`~engine.store.TraceStoreError`. Nothing is recorded; a console that may act opens the
    store read-write to queue its commands (and migrates an older store, as an engine would).

    It may act when it can read the store's command key (``traces.db.key``, its owner's alone)
    and the service did not say it takes no commands; otherwise it is read-only and
    :attr:`read_only_reason` says why, on one line.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        poll_s: float = POLL_S,
        history: int = HISTORY,
        ack_timeout_s: float = ACK_TIMEOUT_S,
        unanswered_s: float = UNANSWERED_S,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not poll_s > 0 or not ack_timeout_s > 0 or history < 0:
            raise ValueError(
                f"poll_s and ack_timeout_s must be positive and history at least 0, got {poll_s},"
                f" {ack_timeout_s}, {history}"
            )
        self.path = Path(path)
        self.read_only_reason: str | None = None
        """Why this console may not act though it was not opened read-only, on one line."""
        self._key: bytes | None = None
        if not read_only:
            key_path = command_key_path(self.path)
            try:
                self._key = read_key(key_path)
            except CommandKeyError as exc:
                self.read_only_reason = f"{key_path.name}: {exc.problem}"
        self.read_only = read_only or self._key is None
        self.description = f"attached to {self.path}"
        self.poll_s = poll_s
        self.ack_timeout_s = ack_timeout_s
        self.unanswered_s = unanswered_s
        self.wall_clock = wall_clock
        """Stamps commands and dates events: the engine's ``at`` is on the same clock."""
        self.store = TraceStore(self.path, readonly=self.read_only, verify=False, create=False)
        try:
            if not read_only and self.store.taking_commands() is False:
                self.read_only_reason = NO_COMMANDS  # says more than a missing key would
                if self._key is not None:  # opened read-write for nothing: read-only it is
                    self.read_only, self._key = True, None
                    self.store.close()
                    self.store = TraceStore(self.path, readonly=True, verify=False, create=False)
            self.snapshot: StoreSnapshot = self.store.tool_states()
        except BaseException:
            self.store.close()
            raise
        # The recent history of the engine that recorded last: an earlier run's is in the traces.
        self._cursor = max(0, self.snapshot.last_event_id - history, self.snapshot.run_started_id - 1)
        """The row id of the last event handed on."""
        self._newest: tuple[float, float] | None = None
        """(engine time, wall-clock time) of the newest event: the engine's clock, estimated."""
        if self.snapshot.newest_t is not None and self.snapshot.newest_at is not None:
            self._newest = (self.snapshot.newest_t, self.snapshot.newest_at)
        self.history_until: float | None = self.snapshot.newest_at
        """Wall-clock time of the newest event when the link opened: what happened by then is
        history (the console folds it without toasts)."""
        self._beats: dict[int, tuple[float, float]] = {}
        """Writer id → (its heartbeat as last read, when it was that old on our monotonic clock)."""
        self._heard = Heard("never", None)
        self._heard = self._listen_now()
        self._sinks: list[Callable[[Event], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._store_problem: str | None = None
        self._engine_problem: str | None = None
        self.followed = 0
        """Events handed on so far."""

    # --- EngineLink --------------------------------------------------------------------------

    def subscribe(self, sink: Callable[[Event], None]) -> Callable[[], None]:
        """Hand ``sink`` every event stored from now on (after the recent history, first)."""
        self._sinks = [*self._sinks, sink]  # replaced, never mutated: the follower reads it unlocked
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._follow, name="tripwire-attach", daemon=True)
            self._thread.start()

        def unsubscribe() -> None:
            self._sinks = [s for s in self._sinks if s is not sink]

        return unsubscribe

    def seeds(self) -> list[ToolSeed]:
        """Every tool of the engine that recorded last, as of the moment the link opened the store
        (tools seen only in earlier runs are history: the traces have them)."""
        return [_seed(tool) for tool in self.snapshot.tools if tool.registered]

    def shared_strategies(self) -> dict[str, Any]:
        """The engine-wide strategies the engine that recorded last started with (its
        ``RecordingStarted``); a change since is a ``SharedStrategiesChanged`` the console folds
        when it is in the history it reads."""
        started = self.snapshot.run_started_id
        if not started:
            return {}
        try:
            found = self.store.events_after(started - 1, limit=1)
        except TraceStoreError:
            return {}  # the follower reports it
        event = found[0][1] if found else None
        return dict(event.shared_strategies) if isinstance(event, RecordingStarted) else {}

    def now(self) -> float:
        """Engine time: the newest event's, plus the wall-clock time since it happened."""
        newest = self._newest
        if newest is None:
            return time.monotonic()  # no events yet: an asyncio engine's clock on this machine
        t, at = newest
        return t + max(0.0, self.wall_clock() - at)

    def act(self, action: Action, tool_id: str, *, actor: str, reason: str) -> str:
        """Act, and return the engine's acknowledgement: the breaker state the action left.

        ``actor`` is not used: the engine records the OS user, host and pid of this process.
        """
        return self.send(action, tool_id, reason=reason).result or ""

    def act_acknowledged(self, action: Action, tool_id: str, *, actor: str, reason: str) -> str:
        """:meth:`act`, by the name that says it waits for the engine's acknowledgement."""
        return self.act(action, tool_id, actor=actor, reason=reason)

    def send(self, action: Action, tool_id: str, *, reason: str) -> CommandRow:
        """Queue the signed command and wait for the engine to acknowledge it; returns it applied.

        Raises :class:`CommandFailed` when the engine refuses it (an unknown tool, a command it
        would not take) and ``TimeoutError`` when no engine acknowledges it in time: it then
        expires, never applied late. Blocks: call it from a worker thread.
        """
        if self.read_only or self._key is None:
            why = f": {self.read_only_reason}" if self.read_only_reason else ""
            raise PermissionError(f"the console is read-only{why}")
        sent = self.wall_clock()
        command_id = self.store.submit_command(
            action, tool_id, reason=reason, expires_in_s=self.ack_timeout_s, now=sent, key=self._key
        )
        deadline = time.monotonic() + self.ack_timeout_s + ACK_GRACE_S
        while True:
            command = self.store.command(command_id)
            if command.status == "applied":
                return command
            if command.status in ("failed", "refused"):
                raise CommandFailed(f"the engine refused it: {command.result}")
            if time.monotonic() >= deadline or self._closed:
                raise TimeoutError(
                    f"no acknowledgement from the engine within {self.ack_timeout_s:g}s (is it serving"
                    " commands: tripwire serve?); the command expires unapplied"
                )
            time.sleep(0.02)

    def problem(self) -> str | None:
        """Why the engine seems unreachable, if it does (the console shows it once per incident)."""
        return self._store_problem or self._engine_problem

    @property
    def heard(self) -> Heard:
        """Whether the engine is heard from, by its heartbeat and process (read every second)."""
        return self._heard

    @property
    def silence(self) -> float | None:
        """Seconds since the engine's last heartbeat; None if it never beat."""
        return self._heard.age_s

    @property
    def stale_for(self) -> float | None:
        """How long the engine has said nothing, once it is not live — silent over
        :data:`STALE_AFTER_S`, its process gone, or stopped (``inf`` when it never said anything);
        None while it is heard from."""
        heard = self._heard
        if heard.live:
            return None
        return float("inf") if heard.age_s is None else heard.age_s

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        self.store.close()

    # --- the follower thread -----------------------------------------------------------------

    def _follow(self) -> None:
        next_check = 0.0
        while not self._stop.is_set():
            try:
                page = self.store.events_after(self._cursor, limit=PAGE, on_unreadable=self._skip)
                self._store_problem = None
            except TraceStoreError as exc:
                self._store_problem = f"cannot follow the trace store: {exc.problem}"
                page = []
            if page:
                sinks = self._sinks
                for _, event in page:
                    for sink in sinks:
                        sink(event)
                last_id, last = page[-1]
                self._cursor = max(self._cursor, last_id)
                self._newest = (last.t, last.at)
                self.followed += len(page)
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + CHECK_S
                self._listen()
                self._check_engine()
            if len(page) < PAGE:
                self._stop.wait(self.poll_s)

    def _listen(self) -> None:
        self._heard = self._listen_now()

    def _listen_now(self) -> Heard:
        """The engine's liveness from its writers' heartbeats: a writer's silence is measured on our
        monotonic clock from when its heartbeat last changed (another host's clock may be off);
        first seen, it is as old as its stamp says."""
        try:
            writers = self.store.writers()
        except TraceStoreError:
            return self._heard  # the follower says the store cannot be read
        mono, now = time.monotonic(), self.wall_clock()
        ages = {}
        for w in writers:
            seen = self._beats.get(w.id)
            if seen is None or seen[0] != w.heartbeat_at:
                age = max(0.0, now - w.heartbeat_at) if seen is None else 0.0
                seen = self._beats[w.id] = (w.heartbeat_at, mono - age)
            ages[w.id] = mono - seen[1]
        return engine_heard(writers, now, ages=ages)

    def _skip(self, event_id: int, problem: str) -> None:
        self._cursor = max(self._cursor, event_id)
        log.warning("attached console: skipped event %d of %s: %s", event_id, self.path, problem)

    def _check_engine(self) -> None:
        """An engine serving commands answers within a poll: a command left pending says none is."""
        try:
            pending = self.store.pending_commands(1)
        except TraceStoreError:
            return  # reported by the follower already
        now = self.wall_clock()
        if not pending or not isinstance(pending[0].created_at, float):  # a row another wrote oddly
            self._engine_problem = None
            return
        if now - pending[0].created_at < self.unanswered_s:
            self._engine_problem = None
            return
        command = pending[0]
        sent = render.clock(command.created_at)
        what = f"{command.action} of {command.tool_id} sent at {sent} is unacknowledged"
        heard = self._heard
        if not heard.live:
            self._engine_problem = f"the engine seems gone ({heard.words()}), and a {what}"
        else:
            self._engine_problem = (
                f"the engine records events but applies no operator commands: a {what}"
                " (is it running tripwire serve?)"
            )


def _seed(tool: ToolState) -> ToolSeed:
    manifest = None
    if (m := tool.manifest) is not None:
        # A version the engine started with was never announced: its number and file are unknown.
        manifest = ManifestView(m.digest, m.version or 0, m.path or "—", m.at, m.content)
    breaker = tool.breaker
    if breaker is None:
        return ToolSeed(tool.tool_id, manifest=manifest)
    return ToolSeed(tool.tool_id, breaker.state, breaker.consecutive_failures, breaker.half_open_at, manifest)


def build_attached_app(
    path: Path, *, read_only: bool = False, refresh_hz: float = 10.0, replay_turn: str | None = None
) -> ConsoleApp:
    """The console on the engine recording into ``path`` (starting in the replay of ``replay_turn``
    when given); raises ``TraceStoreError`` before any screen."""
    link = AttachedLink(path, read_only=read_only)
    app = ConsoleApp(link, refresh_hz=refresh_hz, freeze_gc=True, traces=path)  # browse and replay it too
    app.replay_turn = replay_turn
    return app


__all__ = ["AttachedLink", "CommandFailed", "build_attached_app"]
