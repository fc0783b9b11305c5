"""Helpers for engine tests: scripted tools, an event recorder and a deterministic engine."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from engine import Engine, ToolManifest
from engine.events import Event

WALL = 1_762_338_645.0  # 2025-11-05T10:30:45Z, the spec's example timestamp


class Scripted:
    """A tool whose successive invocations follow a script.

    Each step is a value to return, an exception to raise, or an async callable to await
    (its result is returned). ``duration`` is how long every invocation runs first. The
    last step repeats once the script runs out.
    """

    def __init__(self, *steps: Any, duration: float = 0.0) -> None:
        self.steps = list(steps)
        self.duration = duration
        self.started: list[float] = []
        self.args: list[dict[str, Any]] = []
        self.cancelled = 0

    @property
    def calls(self) -> int:
        return len(self.started)

    async def __call__(self, **args: Any) -> Any:
        self.started.append(anyio.current_time())
        self.args.append(args)
        step = self.steps[min(len(self.started), len(self.steps)) - 1]
        try:
            if self.duration:
                await anyio.sleep(self.duration)
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, type) and issubclass(step, BaseException):
                raise step()
            if callable(step):
                return await step()
            return step
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise

    def gaps(self) -> list[float]:
        """Time between successive invocation starts."""
        return [b - a for a, b in zip(self.started, self.started[1:], strict=False)]


async def hang() -> None:
    await anyio.sleep_forever()


def after(seconds: float, outcome: Any) -> Any:
    """A script step that runs ``seconds`` and then raises or returns ``outcome``."""

    async def step() -> Any:
        await anyio.sleep(seconds)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return step


def make_engine(*manifests: ToolManifest, seed: int = 7, **kwargs: Any) -> Engine:
    return Engine(manifests, rng=random.Random(seed), wall_clock=lambda: WALL, **kwargs)


class Recorder(list[Event]):
    def of(self, event_type: str) -> list[Any]:
        return [e for e in self if e.event_type == event_type]

    def types(self) -> list[str]:
        return [e.event_type for e in self]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def recorded(engine: Engine) -> Recorder:
    events = Recorder()
    engine.subscribe(events.append, direct=True)
    return events


AsyncFn = Callable[[], Awaitable[Any]]
