"""Helpers for engine tests: scripted tools, an event recorder and a deterministic engine.

Engine modes: a test that builds its engine with ``await new_engine(...)`` runs in every mode
the engine runs in — not started, and started with ``async with engine`` (as the console and
``tripwire serve`` run it) — on each backend of ``anyio_backend``: four runs. A test limits
its modes with ``@pytest.mark.engine_modes("started", reason=...)``.

Pipeline paths: in two of the four runs (trio started, asyncio not started) every engine the test
builds compiles a pass-through strategy into every tool's pipeline, so its calls take the general
path; the other two take the backbone's fused path. Each path thus runs on both backends, started
and not, and the whole suite shows the two paths behave the same (issue 23).
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from contextvars import ContextVar
from typing import Any

import anyio
import pytest

from engine import Engine, ToolManifest
from engine.events import Event
from engine.strategies import registry
from engine.strategies.base import CallView, Refusal, Strategy, StrategyOptions

WALL = 1_762_338_645.0  # 2025-11-05T10:30:45Z, the example timestamp of spec-map trace.shape


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


ENGINE_MODES = ("unstarted", "started")
_started_engines: ContextVar[AsyncExitStack | None] = ContextVar("started_engines", default=None)


async def new_engine(*manifests: ToolManifest, seed: int = 7, **kwargs: Any) -> Engine:
    """:func:`make_engine`, in the test's engine mode: started (until the test ends) or not."""
    engine = make_engine(*manifests, seed=seed, **kwargs)
    stack = _started_engines.get()
    if stack is not None:
        await stack.enter_async_context(engine)
    return engine


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engine_modes(*modes, reason): the engine modes a new_engine test runs in, and why"
    )


def _builds_engine(code: Any, module: dict[str, Any], seen: set[Any]) -> bool:
    """Does this code call ``new_engine``, itself or through the module's helpers?"""
    if code in seen:
        return False
    seen.add(code)
    for name in code.co_names:
        if name == "new_engine":
            return True
        helper = module.get(name)
        if callable(helper):
            helper = inspect.unwrap(helper)  # a decorated helper (an async context manager) too
        if inspect.isfunction(helper) and _builds_engine(helper.__code__, module, seen):
            return True
    nested = (c for c in code.co_consts if inspect.iscode(c))
    return any(_builds_engine(c, module, seen) for c in nested)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    function = metafunc.function
    if not inspect.iscoroutinefunction(function):
        return
    if not _builds_engine(function.__code__, function.__globals__, set()):
        return
    marker = metafunc.definition.get_closest_marker("engine_modes")
    modes = marker.args if marker is not None else ENGINE_MODES
    if marker is not None and not marker.kwargs.get("reason"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: engine_modes needs a reason")
    if "engine_mode" not in metafunc.fixturenames:
        metafunc.fixturenames.append("engine_mode")
    metafunc.parametrize("engine_mode", modes, indirect=True)


class PassThrough(Strategy[StrategyOptions]):
    """Has every hook and changes nothing: a tool with it takes the pipeline's general path."""

    section = "pass_through"
    options_type = StrategyOptions

    def call_started(self, call: CallView) -> None:
        pass

    async def admit(self, call: CallView) -> Refusal | None:
        return None

    def attempt_ended(self, call: CallView) -> None:
        pass

    def retry_refusal(self, call: CallView) -> str | None:
        return None


def general_path(backend: Any, mode: str) -> bool:
    """Whether a test run in ``mode`` on ``backend`` takes the general path (see the docstring)."""
    name = backend[0] if isinstance(backend, tuple) else str(backend)
    return (name == "trio") == (mode == "started")


@pytest.fixture
def engine_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    mode: str = request.param
    if not general_path(request.getfixturevalue("anyio_backend"), mode):
        yield mode
        return
    uninstall = registry.install_strategy(PassThrough, every_tool=True)
    try:
        yield mode
    finally:
        uninstall()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run each started-mode test inside a stack that its engines are started on."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("engine_mode") != "started":
            continue
        assert isinstance(item, pytest.Function)
        item.obj = _with_started_engines(item.obj)


def _with_started_engines(test: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(test)
    async def run(*args: Any, **kwargs: Any) -> Any:
        async with AsyncExitStack() as stack:  # in the test's own task: engines stop as it ends
            token = _started_engines.set(stack)
            try:
                return await test(*args, **kwargs)
            finally:
                _started_engines.reset(token)

    return run


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
