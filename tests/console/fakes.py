"""A scripted engine link: fixed seeds, a frozen clock, events pushed by the test."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from console.host import Action
from console.model import ManifestView, ToolSeed
from engine.events import BreakerDisabled, BreakerReset, BreakerTripped, Event
from engine.strategies.breaker.machine import BreakerState
from tests.console import factory as f

_ECHO = {"trip": (BreakerTripped, BreakerState.FORCED_OPEN), "reset": (BreakerReset, BreakerState.CLOSED),
         "disable": (BreakerDisabled, BreakerState.DISABLED)}  # fmt: skip


def manifest(tool: str, *, version: int = 1, threshold: int = 5, timeout_ms: float = 30_000) -> ManifestView:
    content = {
        "id": tool, "timeout_ms": timeout_ms, "side_effect": "read_only",
        "retry_policy": {"strategy": "exponential_backoff", "initial_delay_ms": 100.0, "multiplier": 2.0,
                         "max_delay_ms": 800.0, "jitter_percent": 10.0, "max_attempts": 5,
                         "max_total_time_ms": 2000.0},
        "circuit_breaker": {"failure_threshold": threshold, "success_threshold": 1, "timeout_ms": 30_000.0},
    }  # fmt: skip
    return ManifestView(f"{tool[:4]}{version:04d}cafe", version, f"manifests/{tool}.yaml", f.WALL, content)


@dataclass
class FakeLink:
    """Stands in for the engine: ``act`` echoes the transition the engine would announce."""

    tools: Iterable[ToolSeed]
    clock: float = 100.0
    read_only: bool = False
    description: str = "scripted"
    echo: bool = True
    sink: Callable[[Event], None] | None = None
    actions: list[tuple[str, str, str, str]] = field(default_factory=list)
    closed: bool = False
    shared: dict[str, Any] = field(default_factory=dict)
    """The engine-wide strategies in force as the console starts."""

    def subscribe(self, sink: Callable[[Event], None]) -> Callable[[], None]:
        self.sink = sink
        return self._unsubscribe

    def _unsubscribe(self) -> None:
        self.sink = None

    def seeds(self) -> list[ToolSeed]:
        return list(self.tools)

    def shared_strategies(self) -> dict[str, Any]:
        return dict(self.shared)

    def now(self) -> float:
        return self.clock

    def act(self, action: Action, tool_id: str, *, actor: str, reason: str) -> None:
        self.actions.append((action, tool_id, actor, reason))
        if self.echo:
            cls, state = _ECHO[action]
            self.emit(
                cls(
                    at=f.WALL + self.clock, t=self.clock, tool_id=tool_id, from_state=BreakerState.CLOSED,
                    to_state=state, reason=reason, actor=actor, consecutive_failures=0,
                )
            )  # fmt: skip

    def problem(self) -> str | None:
        return None

    def close(self) -> None:
        self.closed = True

    def emit(self, *events: Event) -> None:
        assert self.sink is not None, "the console has not subscribed"
        for event in events:
            self.sink(event)
