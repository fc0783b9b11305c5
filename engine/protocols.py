"""What the modules built on the guarded call need from the engine, and what it needs from a recorder.

Turns (:mod:`engine.runner`) and streams (:mod:`engine.streams`) run calls through the engine,
and the engine offers both: they type against these protocols, never against
:class:`~engine.engine.Engine`, so neither imports :mod:`engine.engine` (which imports them).

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from engine.bus import EventBus
    from engine.call import CallContext, CallResult, RegisteredTool
    from engine.classify import Classification
    from engine.errors import TraceStoreError
    from engine.events import Event
    from engine.handler import ErrorHandler, HandlerLike
    from engine.manifest import ToolManifest
    from engine.metrics import MetricsRegistry
    from engine.redaction import RedactionPolicy
    from engine.strategies.breaker.machine import Transition
    from engine.strategies.timeout.supervisor import TimeoutSupervisor


class TurnRecorder(Protocol):
    """A trace recorder that makes each turn durable before ``run_turn`` returns."""

    async def turn_finished(self, turn_id: str) -> TraceStoreError | None:
        """Wait until the turn is durable; the store's error (naming its real cause) when it cannot be."""
        ...


class EngineCalls(Protocol):
    """Run a guarded call, announce an event, stamp and redact it: what every caller of the engine uses."""

    @property
    def wall_clock(self) -> Callable[[], float]: ...

    async def execute(
        self,
        tool_id: str,
        args: dict[str, Any],
        ctx: CallContext | None = None,
        handler: HandlerLike | None = None,
        *,
        opening_stream: bool = False,
    ) -> CallResult: ...

    def publish(self, event: Event, trace: list[Event] | None = None) -> None: ...

    def redaction_for(self, tool_id: str) -> RedactionPolicy: ...


class CallRuntime(EngineCalls, Protocol):
    """What a call going through its pipeline (:class:`~engine.pipeline.call.Call`) asks of the
    engine's runtime that runs it."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def bus(self) -> EventBus: ...

    @property
    def rng(self) -> random.Random: ...

    @property
    def redaction(self) -> RedactionPolicy: ...

    @property
    def handler(self) -> ErrorHandler | None: ...

    @property
    def tools(self) -> Mapping[str, RegisteredTool]: ...

    def transitioned(self, tr: Transition, ctx: CallContext | None, call_id: str | None) -> None: ...

    def next_call_ordinal(self, tool_id: str) -> int: ...


class EngineForStreams(EngineCalls, Protocol):
    """What a :class:`~engine.streams.ToolStream` needs besides running its opening call."""

    @property
    def bus(self) -> EventBus: ...

    def manifest(self, tool_id: str) -> ToolManifest: ...

    def failed_after_opening(
        self, tool_id: str, error: BaseException, ctx: CallContext | None, call_id: str, *, timed_out: bool
    ) -> Classification: ...


class EngineForTurns(EngineCalls, Protocol):
    """What a :class:`~engine.runner.TurnRunner` needs besides running its calls."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def rng(self) -> random.Random: ...

    @property
    def record(self) -> bool: ...

    @property
    def recorder(self) -> TurnRecorder | None: ...

    @property
    def metrics(self) -> MetricsRegistry: ...

    @property
    def redaction(self) -> RedactionPolicy: ...

    @property
    def timeouts(self) -> TimeoutSupervisor: ...

    @property
    def new_task_group(self) -> Callable[[], TaskGroup]: ...

    @property
    def tool_ids(self) -> Collection[str]: ...

    def manifest(self, tool_id: str) -> ToolManifest: ...

    def next_turn_id(self) -> str: ...

    def next_call_ordinal(self, tool_id: str) -> int: ...

    def starting_state(
        self, tool_ids: Iterable[str], now: float
    ) -> tuple[dict[str, Any], dict[str, str]]: ...
