"""What a strategy is: one protection of a tool's calls, compiled into the tool's pipeline.

A strategy lives in one package under :mod:`engine.strategies` — its options (the manifest
section), the strategy (the hooks below) and its events — and is put in the pipeline by one line
in :data:`engine.strategies.ORDER` (or, from outside the engine, :func:`engine.strategies.install`).

The pipeline (:mod:`engine.pipeline`) calls only the hooks a strategy overrides, in the order of
:data:`~engine.strategies.ORDER`:

- ``call_started(call)`` once per call, before anything else (a retry budget counts calls;
  ``call.start`` is the time, without reading the clock again);
- ``await admit(call)`` before each attempt, once the breaker admitted it: a :class:`Refusal` ends
  the attempt unsent (a full bulkhead). It may wait, never past ``call.deadline``. A strategy
  that can often admit at once also has ``admit_now(call)``: True lets the attempt through
  without ``admit`` (and without an await);
- ``attempt_ended(call)`` after each attempt a strategy admitted, however it ended (a
  cancellation included): give back what ``admit`` took;
- ``attempt_failed(call, classification)`` after each attempt that failed, once its error is
  classified and counted and before the decision (a rate limit starts its cooldown on a 429);
- ``retry_refusal(call)`` when a retry is decided: a reason refuses it (a spent retry budget) and
  the call ends on its last attempt (:func:`engine.decide.refused_retry`); None lets it go on and
  is the strategy's consent (a budget spends a retry then);
- ``operator_reset(now, at, actor)`` when an operator resets the tool (``engine.reset``; the
  tool's own strategies, not the engine-wide shared ones): end what a reset ends (a rate limit's
  cooldown), returning the event that says so (the engine publishes it) or None;
- ``facts(now)`` what a custom error handler (``FailureContext.strategies``) and ``engine.stats()``
  are told about the strategy's state.

A section may suit only some tools (hedging re-sends, so only a ``read_only`` tool may have it):
the class method ``refuse_policy(options, policy)`` says why not, and the manifest is refused with
that reason at the section's line, as any bad field is.

State that outlives a call (a budget's window, a bulkhead's occupants) is the strategy's
``state``: on a hot reload the pipeline is compiled anew and each new strategy is handed the
previous one of its section (:meth:`Strategy.handover`), so no reload drops in-flight state.

Internal: the engine's machinery; :mod:`engine.strategies` has the public names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from engine.classify import Classification
    from engine.events import Event
    from engine.kinds import ErrorKind
    from engine.side_effect import SideEffect


class StrategyOptions(BaseModel):
    """A strategy's manifest section: frozen, no unknown keys, finite numbers."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


Options = TypeVar("Options", bound=StrategyOptions)


@dataclass(frozen=True, slots=True)
class Refusal:
    """An attempt a strategy would not let through: it never reached the tool."""

    kind: ErrorKind
    """Always a kind that did not execute (``ErrorKind.executed`` is False)."""
    reason: str
    """One line for people, the model and the trace: ``bulkhead full: 4 in flight, 8 queued``."""
    strategy: str
    """The section of the strategy that refused."""


class CallView(Protocol):
    """What a strategy sees of the call going through the pipeline."""

    @property
    def tool_id(self) -> str: ...

    @property
    def call_id(self) -> str: ...

    @property
    def turn_id(self) -> str | None: ...

    @property
    def deadline(self) -> float | None:
        """Engine time at which the call's turn ends (None outside a turn)."""
        ...

    @property
    def attempt(self) -> int:
        """The attempt about to start, running, or just ended (1 = the first)."""
        ...

    @property
    def start(self) -> float:
        """Engine time at which the call began."""
        ...

    @property
    def now(self) -> float:
        """Engine time (anyio's clock) now: ``clock()``."""
        ...

    @property
    def clock(self) -> Callable[[], float]:
        """Engine time as the call reads it: the running backend's own clock, cheaper than
        ``anyio.current_time`` (which finds the backend on every read)."""
        ...

    @property
    def wall_clock(self) -> Callable[[], float]: ...

    def announce(self, event: Event) -> None:
        """Publish one of the strategy's events as this call's (the bus, and the turn's trace)."""
        ...

    @property
    def observed(self) -> bool:
        """Whether anyone would see an event: skip building one when not."""
        ...


class PolicyView(Protocol):
    """What :meth:`Strategy.refuse_policy` sees of a tool's manifest (or ``defaults.yaml``)."""

    @property
    def side_effect(self) -> SideEffect: ...


class Strategy(Generic[Options]):
    """One protection of one tool's calls; subclasses override the hooks they need."""

    section: ClassVar[str]
    """The manifest section (``bulkhead``) and the strategy's name in events and stats."""
    options_type: ClassVar[type[StrategyOptions]]
    shared_section: ClassVar[bool] = False
    """May also be set once at the top level of ``defaults.yaml``: one instance shared by every tool."""

    def __init__(self, tool_id: str, options: Options) -> None:
        self.tool_id = tool_id
        self.options = options

    @classmethod
    def refuse_policy(cls, options: Any, policy: PolicyView) -> str | None:
        """Why a tool (or ``defaults.yaml``) under ``policy`` may not have this section with
        ``options`` — one line, as a manifest error says it — or None when it may."""
        return None

    def handover(self, previous: Strategy[Options]) -> None:
        """Take over the live state of the strategy this one replaces on a reload (same section,
        same tool); the new options are already ``self.options``. Stateless strategies do nothing."""

    def call_started(self, call: CallView) -> None:
        """A call of the tool began (before its breaker admitted it)."""

    def admit_now(self, call: CallView) -> bool:
        """Let attempt ``call.attempt`` through at once if it can (True: :meth:`admit` is skipped);
        False sends it to :meth:`admit`. The common case then costs no await."""
        return False

    async def admit(self, call: CallView) -> Refusal | None:
        """Let attempt ``call.attempt`` through, perhaps after a wait bounded by ``call.deadline``."""
        return None

    def attempt_ended(self, call: CallView) -> None:
        """An attempt this strategy admitted ended, however it ended."""

    def attempt_failed(self, call: CallView, classification: Classification) -> None:
        """Attempt ``call.attempt`` failed with an error classified as ``classification`` (before the
        call's decision: a strategy's state changed here is what the handler sees)."""

    def operator_reset(self, now: float, at: float, actor: str) -> Event | None:
        """An operator reset the tool at engine time ``now`` (wall clock ``at``): end what a reset
        ends; the event saying what ended (published by the engine), or None when nothing did."""
        return None

    def retry_refusal(self, call: CallView) -> str | None:
        """Why the retry decided after attempt ``call.attempt`` may not happen, or None (consent)."""
        return None

    def facts(self, now: float) -> Mapping[str, Any]:
        """The strategy's state for a custom handler and ``engine.stats()``: flat, JSON-safe."""
        return {}


def overrides(strategy: Strategy[Any], hook: str) -> bool:
    """Whether ``strategy`` has its own ``hook`` (not :class:`Strategy`'s no-op): the pipeline
    compiles a strategy into a hook's list only then, so a hook nobody has costs nothing."""
    return getattr(type(strategy), hook) is not getattr(Strategy, hook)


SHARED = "*"
"""The tool id of an engine-wide shared strategy (one instance in every tool's pipeline)."""


def strategy_facts(strategies: Iterable[Strategy[Any]], now: float) -> dict[str, Mapping[str, Any]]:
    """Every strategy's facts by section (``shared.<section>`` for an engine-wide one), leaving out
    those with nothing to say."""
    out = {}
    for strategy in strategies:
        facts = strategy.facts(now)
        if facts:
            out[f"shared.{strategy.section}" if strategy.tool_id == SHARED else strategy.section] = facts
    return out
