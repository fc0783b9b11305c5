"""A process's membership of a fleet: :class:`Fleet` attaches to an engine and shares, through
Redis, what the processes of one deployment must agree on.

The engine's call path is unchanged: nothing on it waits on the network. The fleet runs as one
task that, every ``sync_ms``, makes one round trip to Redis with everything due:

* what happened here — this process's events (one stream entry per batch), a tool it opened on
  its own (counted toward the quorum), the result of a probe it held the lease for, its
  acknowledgements of operator commands, and its heartbeat once a ``heartbeat_s``;
* what happened elsewhere — new operator commands (applied with ``engine.trip``/``reset``/
  ``disable`` and acknowledged), tools opened fleet-wide by a quorum (``engine.fleet_open``),
  probe results published by the lease holder (``engine.fleet_close`` / ``fleet_open``).

Joining — or back after Redis was away — a process also catches up with what stands: each tool's
standing operator command (:mod:`engine.fleet.overrides`) and a fleet-wide open whose period is
not over (it opens the tool for what is left of that period, read with its expiry). So does a tool
registered after the process joined (``Engine.on_register``), at once with what the process knows
— the standing commands of tools it had not registered, every fleet-wide open — and with what
Redis holds for it on the next round trip.

The half-open probe is the fleet's: each breaker gets a ``probe_gate`` that admits a probe only
while this process holds the tool's lease (``SET NX PX``, its expiry kept beside it; renewed while
the probe runs, freed when the process leaves). A process asks for the lease only once a call of
its own wanted to probe (and was rejected meanwhile): one with no traffic never holds it. While
Redis is away the gates are lifted and every process decides alone (``on_unavailable=local``),
or the configured tools are forced open until it returns (``fail_closed``); either way a
``FleetUnavailable`` event says so, and ``FleetRestored`` when Redis answers again.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, Self

import anyio
import redis
from anyio import current_time

from engine.errors import one_line
from engine.events import BreakerClosed, BreakerOpened, Event, FleetRestored, FleetUnavailable
from engine.fleet.client import UNAVAILABLE, Command, FleetClient
from engine.fleet.commands import load_fleet_key, stored_generation
from engine.fleet.config import FleetConfig, as_config
from engine.fleet.health import RedisHealth
from engine.fleet.keys import FleetKeys
from engine.fleet.member import breaker_summary, heartbeat, strategy_summary, this_process
from engine.fleet.outbox import event_entries
from engine.fleet.overrides import STANDING_ACTIONS, standing_fields
from engine.fleet.rate_limits import SharedRateLimits
from engine.fleet.scripts import GENERATION_FIELD, PROBE_RESULT, RELEASE_LEASE, RENEW_LEASE, REPORT_OPEN, SYNC
from engine.fleet.standing import OperatorState
from engine.store.command_auth import DEFAULT_EXPIRY_S
from engine.store.operator_commands import Acknowledgement, CommandGuard
from engine.strategies.breaker.machine import BreakerState

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.fleet")

FLEET_REASON = "fleet: "
"""Every transition the fleet makes has a reason starting so; the fleet never reports those back."""
FLEET_ACTOR = "fleet"
"""The actor of the fleet's own operator-like transitions (``fail_closed``)."""
TRANSITIONS: frozenset[type[Event]] = frozenset({BreakerOpened, BreakerClosed})
MAX_PENDING = 1_000
"""Reports and acknowledgements kept for Redis while it is away (the newest)."""
_NO_KEY = (
    "this process has no fleet command key (key_file= or $TRIPWIRE_FLEET_KEY_FILE): it takes no commands"
)

_NO_COMMANDS = "this process takes no operator commands (it was started so: tripwire serve --no-commands)"

Handler = Callable[[Any], None]
FAILURES: tuple[type[Exception], ...] = (*UNAVAILABLE, redis.exceptions.RedisError)


class Fleet:
    """``engine``'s membership of the fleet at ``config`` (a :class:`FleetConfig` or its URL).

    Run it as ``async with Fleet(engine, url):`` (a task of its own until the block ends) or
    ``await task_group.start(fleet.run)``. ``key`` is the operator-command key, read from the
    config's key file by default (none: commands are refused, all else is shared); with
    ``commands=False`` the process refuses every operator command, key or not.
    """

    def __init__(
        self,
        engine: Engine,
        config: FleetConfig | str,
        *,
        key: bytes | None = None,
        commands: bool = True,
        rng: random.Random | None = None,
        version: str | None = None,
    ) -> None:
        self.engine = engine
        self.config = as_config(config)
        self.keys = FleetKeys(self.config.namespace)
        self.member = this_process(version)
        self.client = FleetClient(self.config)
        self.health = RedisHealth(rng or random.Random())
        key = key if key is not None or not commands else load_fleet_key(self.config)
        guard = (
            CommandGuard(key, key_name="the fleet's command key") if commands and key is not None else None
        )
        self.operator = OperatorState(
            engine, self.keys, self.member.id, guard, _NO_KEY if commands else _NO_COMMANDS
        )
        """The fleet's operator commands as this process takes them."""
        self.rates = SharedRateLimits(engine, self.keys, self.member, key, self.config, FLEET_ACTOR)
        """The tools' rate limits shared: cooldowns, and ``scope: fleet`` rates leased."""
        self._outbox: deque[Event] = deque()
        """Filled by a direct subscriber (an append: calls pay nothing more), emptied by :meth:`tick`."""
        self._unsent: deque[Event] = deque()
        """Events drained but not in Redis yet (kept while Redis is away, at most ``buffer_events``)."""
        self._unsubscribe: Callable[[], None] | None = None
        self._leases: dict[str, float] = {}
        """Tool → when our probe lease ends (``time.monotonic``): never a lease without its expiry."""
        self._gates: dict[str, Callable[[], bool]] = {}
        self._wanted: set[str] = set()
        """Half-open tools a call here found without the lease, until a probe runs here or the tool
        leaves half-open: only these are asked for (again when a lease ran out unused, so a call
        rarer than ``lease_ms`` still gets to probe), and a process with no call to make never
        holds the probe the others wait for."""
        self._seen_open: dict[str, int] = {}
        self._seen_probe: dict[str, int] = {}
        self._baseline = True
        """Next sync only learns the epochs: a process joining (or back) never replays old decisions."""
        self._last_command = ""
        """The last command id read ("": joining, the server picks where to start)."""
        self._late: set[str] = set()
        """Tools registered since the process joined: the next round trip reads what stands for them."""
        self._to_read: list[str] = []
        """Tools with a standing command that this process has not registered (read after joining)."""
        self._fleet_opens: dict[str, float] = {}
        """Tool → when its fleet-wide open period ends (engine time), as of the last round trip."""
        self._pending: list[Command] = []
        self._forced: set[str] = set()
        self._next_beat = 0.0
        self._stack: AsyncExitStack | None = None
        self.events_dropped = 0
        self.round_trips = 0
        self.commands_sent = 0
        """Redis commands sent so far (each round trip sends several): what ``bench/fleet.py`` counts."""

    def __repr__(self) -> str:
        return f"Fleet({self.config.safe_url}, member={self.member.id})"

    @property
    def available(self) -> bool:
        """Whether Redis answers (else the process runs by ``on_unavailable``)."""
        return self.health.available

    @property
    def acknowledged(self) -> list[Acknowledgement]:
        """This process's acknowledgements of operator commands, newest last (the last 100)."""
        return self.operator.acknowledged

    def holds_lease(self, tool_id: str) -> bool:
        """Whether this process holds the fleet's probe lease for ``tool_id`` now."""
        return self._leases.get(tool_id, 0.0) > time.monotonic()

    # --- running -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            task_group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(task_group.cancel_scope.cancel)
            await task_group.start(self.run)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> NoReturn:
        """Share until cancelled; ready (``task_status.started``) after the first round trip."""
        self._unsubscribe = self.engine.subscribe(self._outbox.append, direct=True)
        forget_hook = self.engine.on_register(self._registered)
        try:
            await self.tick()
            task_status.started()
            while True:
                await anyio.sleep(self.config.sync_ms / 1000.0)
                await self.tick()
        finally:
            forget_hook()
            self._unsubscribe()
            self.rates.detach()
            held = list(self._leases)
            self._lift_gates()
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.timeout_ms / 1000.0):
                await self._leave(held)
            await self.client.aclose()

    async def _leave(self, held: list[str]) -> None:
        """Flush the last events, free the leases ``held`` and say goodbye: a process that stops is
        gone, not stale."""
        if not self.health.available:
            return
        self._unsent.extend(self._drain())
        commands = [*self._pending, *self.operator.pending, *self._event_entries(list(self._unsent))]
        # A lease it holds is freed: the others need not wait for its expiry to probe.
        commands += [("EVAL", RELEASE_LEASE, 1, self.keys.lease(t), self.member.id) for t in held]
        commands += [("ZREM", self.keys.members, self.member.id), ("DEL", self.keys.member(self.member.id))]
        try:
            await self.client.execute(*commands)
        except FAILURES as exc:
            log.warning("fleet: could not leave cleanly: %s", one_line(str(exc)))

    async def tick(self) -> None:
        """One round trip: send what happened here, apply what happened elsewhere."""
        now = time.monotonic()
        fresh = self._drain()
        self._after_local(fresh)
        self.rates.after_local(fresh)
        self._half_open_due()
        permit = self.health.admit(now)
        if permit is None:  # Redis away: wait for the next reconnection attempt
            self._unsent.extend(fresh)
            self._trim()
            return
        if self.health.available:
            self._install_gates()
        batch = fresh
        if self._unsent:  # what an earlier round trip could not send goes first
            batch = [*self._unsent, *fresh]
            self._unsent.clear()
        answers = list(self.operator.pending)  # a tool registered during the round trip adds more
        plan: list[tuple[Command, Handler | None]] = [(c, None) for c in [*self._pending, *answers]]
        plan += [(c, None) for c in self._event_entries(batch)]
        if now >= self._next_beat:
            stats = self.engine.stats()
            strategies, shared_budget = strategy_summary(self.engine, stats)
            beat = heartbeat(
                self.keys, self.config, self.member, breaker_summary(self.engine, stats),
                redis_available=True, events_dropped=self.events_dropped, strategies=strategies,
                shared_budget=shared_budget, rate_limits=self.rates.summary(),
            )  # fmt: skip
            plan.append((beat, None))
        plan += self._lease_attempts(now)
        plan += self.rates.plan()
        tools = list(self.engine.tool_ids)
        joining = self._baseline
        late = self._late & set(tools)
        plan.append(
            (
                self._sync_command(tools, joining, late),
                lambda reply: self._apply_sync(tools, reply, joining, late),
            )
        )
        try:
            replies = await self.client.execute(*(command for command, _ in plan))
        except FAILURES as exc:
            self._unsent.extendleft(reversed(batch))
            self._trim()
            if not isinstance(exc, UNAVAILABLE):
                log.warning("fleet: Redis refused a command: %s", one_line(str(exc)))
            if self.health.failed(permit, time.monotonic(), exc):
                self._became_unavailable()
            return
        self.round_trips += 1
        self.commands_sent += len(plan)
        self._pending = []
        del self.operator.pending[: len(answers)]
        if now >= self._next_beat:
            self._next_beat = now + self.config.heartbeat_s
        down_s = self.health.succeeded(permit, time.monotonic())
        if down_s is not None:
            self._restored(down_s)
        for (_, handle), reply in zip(plan, replies, strict=True):
            if handle is not None:
                handle(reply)
        if self._to_read:
            await self._read_standing()

    # --- what happened here --------------------------------------------------------------

    def _drain(self) -> list[Event]:
        """The events published since the last drain (the deque stays: the subscriber holds it)."""
        batch = list(self._outbox)
        self._outbox.clear()  # no await since the copy: nothing was appended in between
        return batch

    def _after_local(self, events: list[Event]) -> None:
        """What this process's own transitions tell the fleet: an open (toward the quorum), the
        result of the probe it held the lease for."""
        for event in events:
            if type(event) not in TRANSITIONS:
                continue
            assert isinstance(event, BreakerOpened | BreakerClosed)
            if event.actor != "engine" or event.reason.startswith(FLEET_REASON):
                continue  # an operator's, or the fleet's own: nothing new to tell
            tool = event.tool_id
            if tool not in self.engine.tool_ids:
                self._leases.pop(tool, None)
                continue  # unregistered since: nothing to tell about it
            if isinstance(event, BreakerOpened) and event.from_state is BreakerState.CLOSED:
                self._pending.append(self._report_open(tool))
            elif event.from_state is BreakerState.HALF_OPEN and self._leases.pop(tool, None) is not None:
                outcome = "closed" if isinstance(event, BreakerClosed) else "opened"
                self._pending.append(self._probe_result(tool, outcome))

    def _open_ms(self, tool: str) -> int:
        """The tool's open period here: how long a fleet-wide open it starts stands."""
        return max(int(self.engine.breaker(tool).config.timeout_ms), 1)

    def _report_open(self, tool: str) -> Command:
        keys = self.keys
        window_ms = max(int(self.config.window_s * 1000), 1)
        return (
            "EVAL", REPORT_OPEN, 5, keys.opens(tool), keys.tool(tool), keys.quorum(tool),
            keys.fleet_open(tool), keys.fleet_opens, self.member.id, window_ms, self.config.quorum,
            self._open_ms(tool), tool,
        )  # fmt: skip

    def _probe_result(self, tool: str, outcome: str) -> Command:
        keys = self.keys
        return (
            "EVAL", PROBE_RESULT, 6, keys.lease(tool), keys.tool(tool), keys.opens(tool), keys.quorum(tool),
            keys.fleet_open(tool), keys.fleet_opens, self.member.id, outcome, self._open_ms(tool), tool,
        )  # fmt: skip

    def _event_entries(self, batch: list[Event]) -> list[Command]:
        return event_entries(self.keys, self.member.id, self.config.stream_maxlen, batch)

    def _trim(self) -> None:
        """Keep at most ``buffer_events`` events for the stream (the oldest go first) and a bounded
        backlog of reports."""
        excess = len(self._unsent) - self.config.buffer_events
        for _ in range(max(excess, 0)):
            self._unsent.popleft()
        self.events_dropped += max(excess, 0)
        del self._pending[:-MAX_PENDING]
        del self.operator.pending[:-MAX_PENDING]

    def _half_open_due(self) -> None:
        """Half-open the breakers whose open period is over (announced): with a probe gate a
        breaker never half-opens inside a call, and an engine not started has no timer."""
        now = current_time()
        for tool in list(self.engine.tool_ids):
            breaker = self.engine.breaker(tool)
            due = breaker.half_open_at
            if breaker.state is BreakerState.OPEN and due is not None and now >= due:
                self.engine.state(tool)

    # --- the probe lease -----------------------------------------------------------------

    def _gate(self, tool: str) -> Callable[[], bool]:
        leases, wanted = self._leases, self._wanted

        def may_probe() -> bool:
            if leases.get(tool, 0.0) > time.monotonic():
                return True
            wanted.add(tool)  # a call would probe: ask for the lease on the next round trip
            return False

        return may_probe

    def _install_gates(self, tools: list[str] | None = None) -> None:
        for tool in list(self.engine.tool_ids) if tools is None else tools:
            breaker = self.engine.breaker(tool)
            if breaker.probe_gate is None:
                gate = self._gates.get(tool) or self._gates.setdefault(tool, self._gate(tool))
                breaker.probe_gate = gate

    def _lift_gates(self) -> None:
        for tool in list(self.engine.tool_ids):
            breaker = self.engine.breaker(tool)
            if breaker.probe_gate is not None and breaker.probe_gate is self._gates.get(tool):
                breaker.probe_gate = None
        self._leases.clear()
        self._wanted.clear()

    def _lease_attempts(self, now: float) -> list[tuple[Command, Handler | None]]:
        """Ask for the lease of each half-open tool, and renew the lease of each probe running.

        Renewed while the probe runs rather than sized to the tool's timeout: a probe's length
        has no bound that the fleet knows (a tool without a timeout, a stream, an idle timeout
        that progress extends), and a short lease still frees the fleet soon after a prober dies.
        """
        attempts: list[tuple[Command, Handler | None]] = []
        lease_ms = max(int(self.config.lease_ms), 1)
        until = now + lease_ms / 1000.0  # counted from before we ask
        wanted = self._wanted
        for tool in list(self.engine.tool_ids):
            breaker = self.engine.breaker(tool)
            if breaker.state is not BreakerState.HALF_OPEN:
                wanted.discard(tool)  # no probe to run now: a new half-open needs a new call
                continue
            key = self.keys.lease(tool)
            if breaker.probe_in_flight and tool in self._leases:
                wanted.discard(tool)  # the probe runs here: what was wanted is done
                command: Command = ("EVAL", RENEW_LEASE, 1, key, self.member.id, lease_ms)
                attempts.append((command, self._on_lease(tool, until, renewing=True)))
            elif tool in wanted and not self.holds_lease(tool):
                command = ("SET", key, self.member.id, "NX", "PX", lease_ms)
                attempts.append((command, self._on_lease(tool, until, renewing=False)))
        wanted.intersection_update(self.engine.tool_ids)  # unregistered since: forgotten
        return attempts

    def _on_lease(self, tool: str, until: float, *, renewing: bool) -> Handler:
        def handle(reply: Any) -> None:
            if reply:  # the lease is ours until ``until``
                self._leases[tool] = until
            elif renewing:  # another process holds it now: its probe decides
                self._leases.pop(tool, None)

        return handle

    # --- what happened elsewhere ---------------------------------------------------------

    def _sync_command(self, tools: list[str], joining: bool, late: set[str]) -> Command:
        keys = self.keys
        standing = "".join("1" if joining or t in late else "0" for t in tools)
        return (
            "EVAL", SYNC, 3 + 4 * len(tools), keys.commands, keys.fleet_opens, keys.standing,
            *(keys.tool(t) for t in tools), *(keys.lease(t) for t in tools),
            *(keys.fleet_open(t) for t in tools), *(keys.override(t) for t in tools),
            self._last_command, len(tools), standing, int(DEFAULT_EXPIRY_S * 1000), int(joining),
        )  # fmt: skip

    def _apply_sync(self, tools: list[str], reply: Any, joining: bool, late: set[str]) -> None:
        now_ms, _, commands, states, start, opens, standing_tools = reply
        # Stream ids start with the server's time in ms: after Redis restarted empty, new commands
        # still come after the last id read, so nothing is missed.
        self._last_command = self._last_command or str(start)
        self._note_fleet_opens(int(now_ms), opens)
        generations = {t: stored_generation(state[8]) for t, state in zip(tools, states, strict=True)}
        standing = {standing_fields(state[7]).get("id", "") for state in states} - {""}
        for entry_id, flat in commands:
            self._last_command = str(entry_id)
            self.operator.take_command(dict(zip(flat[::2], flat[1::2], strict=True)), generations, standing)
        if self._baseline and not joining:
            return  # back during this round trip: the next one re-joins, standing state and all
        self._baseline = False
        self._late -= late
        for tool, state in zip(tools, states, strict=True):
            if tool not in self.engine.tool_ids:
                continue  # unregistered during the round trip
            joined = "this process joined" if joining else "it was registered" if tool in late else ""
            try:
                self._apply_tool(tool, state, joined)
                self.operator.check_published(tool, generations[tool])
            except (TypeError, ValueError) as exc:  # a value nobody of ours wrote: no opinion
                log.warning(
                    "fleet: unreadable shared state of %s skipped: %s", one_line(tool), one_line(repr(exc))
                )
        if joining:
            self._to_read = [str(t) for t in standing_tools or [] if t not in self.engine.tool_ids]
            self._release_forced()

    def _note_fleet_opens(self, now_ms: int, flat: Any) -> None:
        """Every fleet-wide open, as when its period ends here: for the tools registered later."""
        items = list(flat or [])
        now = current_time()
        opens = {}
        for tool, ends_ms in zip(items[::2], items[1::2], strict=False):
            try:
                opens[str(tool)] = now + (float(ends_ms) - now_ms) / 1000.0
            except ValueError:  # a value nobody of ours wrote: no opinion
                continue
        self._fleet_opens = opens

    async def _read_standing(self) -> None:
        """Read, after joining, the standing commands of the tools this process has not registered:
        they stand for each when it is registered (one more round trip, when joining only)."""
        tools, self._to_read = self._to_read, []
        keys = self.keys
        commands: list[Command] = [("HGETALL", keys.override(t)) for t in tools]
        commands += [("HGET", keys.tool(t), GENERATION_FIELD) for t in tools]
        try:
            replies = await self.client.execute(*commands)
        except FAILURES as exc:  # each is read again when it is registered
            log.warning(
                "fleet: could not read the standing commands of unregistered tools: %s", one_line(str(exc))
            )
            return
        for tool, record, generation in zip(tools, replies[: len(tools)], replies[len(tools) :], strict=True):
            if tool not in self.engine.tool_ids:  # else registered meanwhile: read as late since
                self.operator.wait(tool, standing_fields(record), stored_generation(generation))

    def _registered(self, tool: str) -> None:
        """``tool`` was registered after the process joined: what the fleet is known to hold for it
        applies at once (its standing command, a fleet-wide open); Redis is read for it next."""
        self._late.add(tool)
        if self.health.available:
            self._install_gates([tool])  # the probe is the fleet's from the start
        self.operator.registered(tool)
        left_s = self._fleet_opens.get(tool, 0.0) - current_time()
        if left_s > 0 and self.engine.breaker(tool).state is BreakerState.CLOSED:
            reason = (
                f"{FLEET_REASON}open fleet-wide when it was registered; {left_s:.1f}s of its open period left"
            )
            self._open_with_fleet(tool, reason, int(left_s * 1000))

    def _apply_tool(self, tool: str, state: Any, joined: str) -> None:
        """Apply what the round trip read for ``tool``; ``joined`` says when the process or the tool
        joined the fleet with this round trip ("": earlier, only what is new is applied)."""
        open_epoch, open_count, probe_epoch, outcome, by, holder, open_ms, standing, generation = state
        opened, probed, left_ms = int(open_epoch), int(probe_epoch), int(open_ms)  # before any change
        if holder != self.member.id:
            self._leases.pop(tool, None)
        seen_open, seen_probe = self._seen_open.get(tool), self._seen_probe.get(tool)
        self._seen_open[tool], self._seen_probe[tool] = opened, probed
        if joined:  # epochs learnt, nothing replayed (a vanished key reads 0: learnt too)...
            self.operator.take_standing(tool, standing_fields(standing), stored_generation(generation))
            if left_ms > 0 and self.engine.breaker(tool).state is BreakerState.CLOSED:
                # ...but what stands is caught up with: the fleet's open period is not over.
                self._open_with_fleet(
                    tool,
                    f"{FLEET_REASON}open fleet-wide when {joined} ({open_count} processes "
                    f"opened it within {self.config.window_s:g}s, quorum {self.config.quorum}); "
                    f"{left_ms / 1000:.1f}s of its open period left",
                    left_ms,
                )
            return
        if seen_open is None or seen_probe is None:
            return  # a tool registered since the last sync: its epochs learnt
        if opened > seen_open and self.engine.breaker(tool).state is BreakerState.CLOSED:
            self._open_with_fleet(
                tool,
                f"{FLEET_REASON}{open_count} processes opened it within {self.config.window_s:g}s "
                f"(quorum {self.config.quorum})",
                left_ms,
            )
        if probed > seen_probe and by != self.member.id:
            if outcome == "closed":
                self.engine.fleet_close(tool, f"{FLEET_REASON}the half-open probe of {by} succeeded")
            elif self.engine.breaker(tool).state is BreakerState.HALF_OPEN:
                self._open_with_fleet(tool, f"{FLEET_REASON}the half-open probe of {by} failed", left_ms)

    def _open_with_fleet(self, tool: str, reason: str, left_ms: int) -> None:
        """Open ``tool`` as the fleet did; it half-opens when the fleet's open period ends, ``left_ms``
        from now by the server's reading (none, negative: after the tool's own open period)."""
        if self.engine.fleet_open(tool, reason) and left_ms > 0:
            # The rest of the fleet's period, not a fresh one of our own: the processes half-open
            # together, and a TTL is never held here without its expiry. The engine's timer
            # re-plans from this when the opening wakes it.
            self.engine.breaker(tool).half_open_at = current_time() + left_ms / 1000.0

    # --- Redis away and back -------------------------------------------------------------

    def _release_forced(self) -> None:
        """Reset the tools forced open while Redis was away, but those the fleet's operators
        tripped or disabled meanwhile (their standing command was just applied)."""
        for tool in sorted(self._forced):
            applied = self.operator.applied.get(tool)
            if applied is not None and applied.action in STANDING_ACTIONS:
                continue
            if tool in self.engine.tool_ids and self.engine.breaker(tool).state is BreakerState.FORCED_OPEN:
                self.engine.reset(tool, actor=FLEET_ACTOR, reason=f"{FLEET_REASON}Redis is back")
        self._forced.clear()

    def _became_unavailable(self) -> None:
        self._lift_gates()  # every process decides alone now
        self.rates.unavailable()
        forced = []
        for tool in self.config.forced_when_unavailable(list(self.engine.tool_ids)):
            if self.engine.breaker(tool).state is not BreakerState.FORCED_OPEN:
                reason = f"{FLEET_REASON}Redis unavailable (on_unavailable=fail_closed)"
                self.engine.trip(tool, actor=FLEET_ACTOR, reason=reason)
                self._forced.add(tool)
                forced.append(tool)
        event = FleetUnavailable(
            at=self.engine.wall_clock(), t=current_time(), namespace=self.config.namespace,
            server=self.config.server, error=self.health.last_error, policy=self.config.on_unavailable,
            forced_open=tuple(forced),
        )  # fmt: skip
        log.warning("%s", event.describe())
        self.engine.runtime.publish(event)

    def _restored(self, down_s: float) -> None:
        # The tools forced open stay so until the next round trip brings the standing state
        # (:meth:`_release_forced`): one the operators tripped meanwhile is never closed between.
        self._install_gates()  # the probe is the fleet's again
        self.rates.restored()
        self._baseline = True
        self._next_beat = 0.0
        event = FleetRestored(
            at=self.engine.wall_clock(), t=current_time(), namespace=self.config.namespace,
            server=self.config.server, down_s=down_s,
        )  # fmt: skip
        log.warning("%s", event.describe())
        self.engine.runtime.publish(event)


__all__ = ["FLEET_ACTOR", "FLEET_REASON", "Fleet"]
