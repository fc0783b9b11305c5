"""The engine: registered tools, their manifests, events, background services and operator controls.

:class:`Engine` is the facade users hold: its verbs (``register``, ``call``, ``run_turn``,
``trip``…) and read-outs (``stats``, ``state``, ``manifest``…). The machinery it owns is its
:class:`~engine.pipeline.runtime.Runtime` (``engine.runtime``), which runs each call through its
tool's pipeline (:mod:`engine.pipeline`); turns run on it through :mod:`engine.runner`, streams
through :mod:`engine.streams`, adapters and stores through it too.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import inspect
import logging
import random
import re
import time
from collections.abc import Callable, Collection, Iterable
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio import CancelScope, current_time

from engine.bus import EventBus, Subscriber
from engine.call import CallContext, CallResult, RegisteredTool, ToolFn
from engine.clock import backend_cancel_scope, backend_clock, backend_task_group, time_anywhere
from engine.events import BreakerRestored, Event, ToolRegistered
from engine.handler import HandlerLike, as_handler
from engine.manifest import MAX_MANIFEST_BYTES, ManifestFile, ManifestRegistry
from engine.metrics import ToolStats
from engine.pipeline.runtime import Runtime
from engine.policy import TOOL_ID_PATTERN, ToolManifest
from engine.protocols import TurnRecorder
from engine.redaction import RedactionPolicy
from engine.runner import TurnRunner
from engine.strategies.base import strategy_facts
from engine.strategies.breaker.machine import BreakerState, CircuitBreaker
from engine.streams import ToolStream
from engine.watch import DEFAULT_SETTLE_MS, ManifestWatcher

if TYPE_CHECKING:
    from engine.events import Event
    from engine.faults import AttemptInjector
    from engine.handler import ErrorHandler
    from engine.invoke import WorkerThreads
    from engine.kinds import ErrorKind
    from engine.metrics import MetricsRegistry
    from engine.outcomes import TurnResult
    from engine.strategies.timeout.supervisor import TimeoutSupervisor
    from engine.turn import Turn

log = logging.getLogger("tripwire.engine")

TOOL_ID = re.compile(TOOL_ID_PATTERN)


class Engine:
    """Runs tool calls with timeouts, retries, a circuit breaker per tool and an error handler.

    ``manifests`` is a directory of YAML manifests, a :class:`ManifestRegistry`, or an
    iterable of :class:`ToolManifest`. ``async with engine:`` starts the background services
    (the timeout supervisor, the half-open timer and, with ``watch=True``, manifest hot
    reload); calls also work outside it, with breakers half-opening lazily on the next call.
    ``handler`` replaces the default error handler; ``faults`` injects a fault plan.
    ``watch_settle_ms``: how long a changed manifest must stay the same before it applies;
    ``manifest_max_bytes``: manifest files larger than this are refused unread. ``redaction``
    decides what events may not hold (see :mod:`engine.redaction`; a fresh default policy unless
    given, extended by each tool manifest's ``secret_fields``); ``RedactionPolicy.off()`` is logged.
    """

    def __init__(
        self,
        manifests: str | Path | ManifestRegistry | Iterable[ToolManifest] | None = None,
        *,
        watch: bool = False,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        handler: HandlerLike | None = None,
        faults: AttemptInjector | None = None,
        record: bool = False,
        watch_debounce_ms: int = 100,
        watch_settle_ms: float = DEFAULT_SETTLE_MS,
        manifest_max_bytes: int = MAX_MANIFEST_BYTES,
        redaction: RedactionPolicy | None = None,
    ) -> None:
        if isinstance(manifests, ManifestRegistry):
            self.manifests = manifests
        elif isinstance(manifests, str | Path):
            self.manifests = ManifestRegistry.from_directory(
                manifests, at=wall_clock(), max_bytes=manifest_max_bytes
            )
        else:
            self.manifests = ManifestRegistry.from_manifests(manifests or (), at=wall_clock())
        self.runtime = Runtime(
            wall_clock=wall_clock,
            rng=rng if rng is not None else random.Random(),
            handler=as_handler(handler),
            faults=faults,
            record=record,
            redaction=redaction if redaction is not None else RedactionPolicy(),
            manifests=self.manifests,
        )
        """The machinery: runs calls through their pipelines, publishes events (internal)."""
        self.runtime.recompile(self.manifests.shared)
        if not self.redaction.enabled:
            log.warning(
                "redaction is off: secrets in arguments, errors and results are recorded in plain text"
            )
        self._tools = self.runtime.tools
        self._watch = watch
        self._watch_debounce_ms = watch_debounce_ms
        self._watch_settle_ms = watch_settle_ms
        self._stack: AsyncExitStack | None = None
        self._registration_hooks: tuple[Callable[[str], None], ...] = ()

    # --- read-outs of the machinery -------------------------------------------------------

    @property
    def wall_clock(self) -> Callable[[], float]:
        return self.runtime.wall_clock

    @property
    def rng(self) -> random.Random:
        return self.runtime.rng

    @property
    def redaction(self) -> RedactionPolicy:
        return self.runtime.redaction

    @property
    def record(self) -> bool:
        return self.runtime.record

    @property
    def faults(self) -> AttemptInjector | None:
        return self.runtime.faults

    @property
    def handler(self) -> ErrorHandler | None:
        return self.runtime.handler

    @property
    def metrics(self) -> MetricsRegistry:
        return self.runtime.metrics

    @property
    def timeouts(self) -> TimeoutSupervisor:
        return self.runtime.timeouts

    @property
    def threads(self) -> WorkerThreads:
        return self.runtime.threads

    @property
    def recorder(self) -> TurnRecorder | None:
        return self.runtime.recorder

    @recorder.setter
    def recorder(self, recorder: TurnRecorder | None) -> None:
        self.runtime.recorder = recorder

    # --- tools ---------------------------------------------------------------------------

    def register(self, name: str, fn: ToolFn) -> ToolFn:
        """Register ``fn`` as tool ``name``; plain functions run in a worker thread."""
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        if not TOOL_ID.match(name):
            raise ValueError(f"tool name {name!r} must match {TOOL_ID.pattern}")
        call = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count too
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
        # A coroutine function is never an async generator one: skip two inspections (0.8 µs).
        is_stream = not is_async and (inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(call))
        manifest = self.manifests.get(name)
        breaker = CircuitBreaker(name, manifest.circuit_breaker)
        runtime = self.runtime
        self._tools[name] = RegisteredTool(
            name, fn, is_async, is_stream, breaker, self.metrics.tool(name), manifest,
            runtime.compile(name, manifest),
        )  # fmt: skip
        if runtime.bus.active:
            runtime.publish(
                ToolRegistered(
                    at=self.wall_clock(), t=time_anywhere(runtime.clock), tool_id=name, state=breaker.state
                )
            )
        for hook in self._registration_hooks:
            hook(name)
        return fn

    def on_register(self, hook: Callable[[str], None]) -> Callable[[], None]:
        """Call ``hook(tool_id)`` after every later registration, before ``register`` returns: how
        standing state (an operator's override kept in a store or a fleet) reaches a tool however
        late it is registered. Returns a function that removes the hook."""
        self._registration_hooks = (*self._registration_hooks, hook)  # replaced, never mutated

        def remove() -> None:
            self._registration_hooks = tuple(h for h in self._registration_hooks if h is not hook)

        return remove

    def unregister(self, name: str) -> None:
        """Retire tool ``name`` (an MCP server withdrew it): later calls are refused as unknown,
        calls in flight finish; its metrics stay and carry on if the name is registered again."""
        if self._tools.pop(name, None) is None:
            raise LookupError(f"tool {name!r} is not registered")

    def available_tools(self) -> list[str]:
        """The registered tools whose breaker admits a call now, in registration order: the list
        to offer a model that builds its own (a tool whose breaker is open is left out)."""
        now = current_time()
        return [name for name, tool in self._tools.items() if tool.breaker.would_admit(now)]

    @property
    def tools(self) -> list[str]:
        return list(self._tools)

    @property
    def tool_ids(self) -> Collection[str]:
        """A live, read-only view of the registered tool ids (cheap membership tests)."""
        return self._tools.keys()

    def breaker(self, tool_id: str) -> CircuitBreaker:
        """The tool's breaker, to inspect: change it through :meth:`trip`, :meth:`reset` and
        :meth:`disable`, which announce the transition."""
        return self.runtime.tool(tool_id).breaker

    def state(self, tool_id: str) -> BreakerState:
        """The breaker's state now, applying a half-open transition that has come due."""
        breaker = self.runtime.tool(tool_id).breaker
        transition = breaker.poll(current_time())
        if transition is not None:  # come due with no call: the query found it
            self.runtime.transitioned(transition, None, None)
        return breaker.state

    def manifest(self, tool_id: str) -> ToolManifest:
        return self.runtime.manifest(tool_id)

    def stats(self, now: float | None = None) -> dict[str, ToolStats]:
        """Per-tool metrics over the engine's life and the rolling window: one snapshot.

        Calls refused under a name no tool has are counted under ``(unknown)``
        (:data:`engine.metrics.UNKNOWN_TOOL_ID`). ``now`` is engine time; by default the running
        loop's clock.
        """
        now = current_time() if now is None else now
        stats = self.metrics.snapshot(now)
        for name, tool in self._tools.items():
            if tool.pipeline.general and name in stats:
                stats[name] = replace(stats[name], strategies=strategy_facts(tool.pipeline.strategies, now))
        return stats

    def check_arguments(self, tool_id: str, args: dict[str, Any]) -> str | None:
        """Why ``args`` cannot be passed to the tool, on one line, or None if they can."""
        tool = self.runtime.tool(tool_id)
        if tool.signature is None:
            try:
                tool.signature = inspect.signature(tool.fn)
            except (TypeError, ValueError):  # some builtins have no signature: let the call decide
                return None
        try:
            tool.signature.bind(**args)
        except TypeError as exc:
            return str(exc)
        return None

    # --- events --------------------------------------------------------------------------

    def subscribe(
        self, callback: Subscriber, *, direct: bool = False, maxlen: int = 10_000
    ) -> Callable[[], None]:
        """Receive every event; see :class:`engine.bus.EventBus`. Returns an unsubscribe function."""
        return self.runtime.bus.subscribe(callback, direct=direct, maxlen=maxlen)

    @property
    def bus(self) -> EventBus:
        return self.runtime.bus

    def redaction_for(self, tool_id: str) -> RedactionPolicy:
        """The engine's redaction policy extended by the tool manifest's ``secret_fields``."""
        return self.runtime.redaction_for(tool_id)

    # --- operator controls ---------------------------------------------------------------

    def trip(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> None:
        """Force the breaker open until reset."""
        breaker = self.runtime.tool(tool_id).breaker
        self.runtime.transitioned(breaker.trip(current_time(), actor=actor, reason=reason), None, None)

    def reset(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> None:
        """Close the breaker and clear its counts; end what the tool's strategies end on a reset
        (a rate limit's cooldown: ``Strategy.operator_reset``)."""
        tool = self.runtime.tool(tool_id)
        now = current_time()
        self.runtime.transitioned(tool.breaker.reset(now, actor=actor, reason=reason), None, None)
        for strategy in tool.pipeline.strategies:
            if strategy.tool_id != tool_id:  # an engine-wide one: not this tool's to reset
                continue
            ended = strategy.operator_reset(now, self.wall_clock(), actor)
            if ended is not None:
                self.runtime.publish(ended)

    def disable(self, tool_id: str, *, actor: str = "operator", reason: str = "") -> None:
        """Admit every call while still counting failures."""
        breaker = self.runtime.tool(tool_id).breaker
        self.runtime.transitioned(breaker.disable(current_time(), actor=actor, reason=reason), None, None)

    def restore(self, tool_id: str, state: BreakerState, *, actor: str, reason: str, set_at: float) -> None:
        """Put back an operator's standing override — ``FORCED_OPEN`` (a trip) or ``DISABLED`` —
        set by ``actor`` at ``set_at`` (wall clock) for ``reason``, announced as ``BreakerRestored``.
        Works before the engine's event loop runs (a tool registered before ``anyio.run``)."""
        breaker = self.runtime.tool(tool_id).breaker
        if state is BreakerState.FORCED_OPEN:
            move = breaker.trip
        elif state is BreakerState.DISABLED:
            move = breaker.disable
        else:
            raise ValueError(f"only FORCED_OPEN and DISABLED stand until reset, not {state}")
        tr = move(time_anywhere(self.runtime.clock), actor=actor, reason=reason)
        self.runtime.publish(
            BreakerRestored(
                at=self.wall_clock(), t=tr.t, tool_id=tool_id, from_state=tr.from_state, to_state=tr.to_state,
                reason=tr.reason, actor=tr.actor, consecutive_failures=tr.consecutive_failures, set_at=set_at,
            )
        )  # fmt: skip

    # --- the fleet's decisions (engine.fleet applies them between calls) -------------------

    def fleet_open(self, tool_id: str, reason: str) -> bool:
        """Open the breaker because the fleet decided so (announced as ``BreakerOpened`` with
        ``reason``); False when it was not CLOSED or HALF_OPEN, so nothing changed."""
        transition = self.runtime.tool(tool_id).breaker.fleet_open(current_time(), reason)
        if transition is not None:
            self.runtime.transitioned(transition, None, None)
        return transition is not None

    def fleet_close(self, tool_id: str, reason: str) -> bool:
        """Close the breaker because the fleet's probe succeeded elsewhere (``BreakerClosed``);
        False when it was not OPEN or HALF_OPEN, so nothing changed."""
        transition = self.runtime.tool(tool_id).breaker.fleet_close(current_time(), reason)
        if transition is not None:
            self.runtime.transitioned(transition, None, None)
        return transition is not None

    # --- calls, streams and turns --------------------------------------------------------

    async def call(self, tool_id: str, /, **args: Any) -> Any:
        """Call a tool; returns its value (or a partial result) or raises :class:`ToolError`."""
        return (await self.runtime.execute(tool_id, args)).unwrap()

    async def try_call(self, tool_id: str, /, **args: Any) -> CallResult:
        """Like :meth:`call`, but returns a :class:`CallResult` instead of raising."""
        return await self.runtime.execute(tool_id, args)

    def stream(self, tool_id: str, /, **args: Any) -> ToolStream:
        """Consume a streaming tool chunk by chunk: ``async with engine.stream(...) as chunks``."""
        tool = self.runtime.tool(tool_id)
        if not tool.is_stream:
            raise TypeError(
                f"tool {tool_id!r} is not a streaming tool (register an async generator function)"
            )
        return ToolStream(self.runtime, tool_id, args, CallContext(self.runtime.new_call_id()))

    async def run_turn(
        self,
        turn: Turn,
        *,
        stop: anyio.Event | None = None,
        handler: HandlerLike | None = None,
        seed: str | None = None,
    ) -> TurnResult:
        """Run a turn's calls in dependency order; see :mod:`engine.runner`.

        ``seed`` fixes the calls' jitter (a replay passes the recorded one).
        """
        return await TurnRunner(self.runtime, turn, stop=stop, handler=as_handler(handler), seed=seed).run()

    def refuse(
        self, tool_id: str, kind: ErrorKind, message: str, reason: str, *, args: Any = None,
        call_id: str | None = None, turn_id: str | None = None, trace: list[Event] | None = None,
    ) -> CallResult:  # fmt: skip
        """Refuse a call before any attempt (an unknown tool, arguments an LLM executor or adapter cannot
        pass): a permanent ``kind`` failure, counted and announced as ``CallFailed`` with no attempt."""
        return self.runtime.refuse(
            tool_id, kind, message, reason, args=args, call_id=call_id, turn_id=turn_id, trace=trace
        )

    # --- background services -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError("this engine is already started (async with engine: is entered once)")
        try:
            async with AsyncExitStack() as stack:  # unwound if any service fails to start
                runtime = self.runtime
                runtime.clock, runtime.new_scope = backend_clock(), backend_cancel_scope()
                runtime.new_task_group = backend_task_group()
                stack.callback(setattr, runtime, "clock", current_time)
                stack.callback(setattr, runtime, "new_scope", CancelScope)
                stack.callback(setattr, runtime, "new_task_group", anyio.create_task_group)
                task_group = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(runtime.bus.flush, 5.0)
                stack.callback(task_group.cancel_scope.cancel)
                await task_group.start(self.timeouts.run)
                await task_group.start(self._half_open_timer)
                if self._watch and self.manifests.directory is not None:
                    await task_group.start(self._watch_manifests)
                self._stack = stack.pop_all()
            for event in self.manifests.refusal_events(at=self.wall_clock(), t=current_time()):
                self.runtime.publish(event)  # files skipped at start-up: said once the engine runs
        except ExceptionGroup as group:  # one service failed to start: raise its own error
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    def close(self) -> None:
        """Stop subscriber threads. The engine object stays usable for inspection."""
        self.runtime.bus.close()

    async def _half_open_timer(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Announce HALF_OPEN when a breaker's timer is due, even if no call arrives."""
        task_status.started()
        try:
            while True:
                self.runtime.timer_wakeup = wakeup = anyio.Event()
                now = current_time()
                due = None
                for tool in self._tools.values():
                    breaker = tool.breaker
                    transition = breaker.poll(now)
                    if transition is not None:  # the timer's own: no call caused it
                        self.runtime.transitioned(transition, None, None)
                    if breaker.state is BreakerState.OPEN and breaker.half_open_at is not None:
                        due = breaker.half_open_at if due is None else min(due, breaker.half_open_at)
                with CancelScope(deadline=due if due is not None else float("inf")):
                    await wakeup.wait()
        finally:
            self.runtime.timer_wakeup = None

    async def _watch_manifests(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        watcher = ManifestWatcher(
            self.manifests,
            self.reload_manifests,
            self.runtime.publish,
            wall_clock=self.wall_clock,
            settle_ms=self._watch_settle_ms,
            debounce_ms=self._watch_debounce_ms,
        )
        await watcher.run(task_status=task_status)

    def reload_manifests(self, paths: Iterable[Path | ManifestFile] | None = None) -> list[Event]:
        """Re-read manifest files (all of them by default) and apply what is valid.

        Paths are read here, on the calling thread; the watcher passes what it read in a worker
        thread (:class:`ManifestFile`), so its reloads never read or parse on the event loop.
        """
        registry = self.manifests
        try:
            events = registry.reload(
                registry.tracked_files() if paths is None else paths, at=self.wall_clock(), t=current_time()
            )
        except Exception:  # the engine never crashes on a manifest
            log.exception("manifest reload failed")
            events = []
        # Defaults changes reach tools without a file of their own: refresh every tool.
        self.runtime.recompile(registry.shared)
        for event in events:
            self.runtime.publish(event)
        return events


__all__ = ["CallContext", "CallResult", "Engine"]
