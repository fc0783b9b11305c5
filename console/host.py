"""Where the console's engine runs: its own thread and event loop, never the UI's.

The console's UI loop never runs engine code, so a slow frame cannot delay a timeout or a
half-open timer. The UI reaches the engine only through :class:`EngineHost`: events arrive
through the non-blocking sink it subscribes, and operator actions cross to the engine's loop
with ``BlockingPortal.call`` from a worker thread.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from console.extras import missing_extra, needs_extra
from console.model import ManifestView, ToolSeed
from engine.demo import demo_engine
from engine.engine import Engine
from engine.errors import TripwireError
from engine.events import Event
from engine.faults import FaultInjector
from engine.scenario import Scenario, load_scenario, run_scenario
from engine.store import TraceRecorder
from engine.strategies.sections import dump_sections

Workload = Callable[[Engine], Awaitable[None]]
"""What drives the engine: ``async def workload(engine)``, run until it returns or the console quits."""
Action = Literal["trip", "reset", "disable"]


class WorkloadError(TripwireError):
    """A ``--workload`` that cannot be loaded; ``str()`` is one line."""


class EngineLink(Protocol):
    """What the console needs of the engine it watches, wherever that engine runs."""

    description: str
    read_only: bool

    def subscribe(self, sink: Callable[[Event], None]) -> Callable[[], None]: ...

    def seeds(self) -> list[ToolSeed]: ...

    def shared_strategies(self) -> dict[str, Any]:
        """``defaults.yaml``'s engine-wide sections in force now, by section, as data (empty: none
        known); the events say how they change from here."""
        ...

    def now(self) -> float:
        """Engine time now (what events' ``t`` are measured in)."""
        ...

    def act(self, action: Action, tool_id: str, *, actor: str, reason: str) -> str | None:
        """Carry out an operator action; blocks until the engine has it (call from a worker).
        Returns the breaker state the engine acknowledges it left, or None when the link gets
        no acknowledgements (the engine's own event then shows what happened)."""
        ...

    def problem(self) -> str | None:
        """Why the engine or its workload cannot be followed, if so (a one-line reason)."""
        ...

    def close(self) -> None: ...


def seeds_of(engine: Engine) -> list[ToolSeed]:
    """Each tool's breaker and manifest as they are now (call on the engine's loop): the
    registered tools, then those with a manifest that are not registered yet (a workload
    registers its tools when it starts; their breakers start closed)."""
    entries = engine.manifests.entries
    seeds = []
    for tool_id in [*engine.tool_ids, *(t for t in entries if t not in engine.tool_ids)]:
        entry = entries.get(tool_id)
        if entry is not None:
            content = entry.manifest.model_dump(mode="json")
            manifest = ManifestView(entry.digest, entry.version, entry.path, entry.loaded_at, content)
        else:  # registered without a manifest file: the defaults apply
            manifest = ManifestView(
                "", 0, "(defaults)", 0.0, engine.manifest(tool_id).model_dump(mode="json")
            )
        if tool_id not in engine.tool_ids:
            seeds.append(ToolSeed(tool_id, manifest=manifest))
            continue
        breaker = engine.breaker(tool_id)
        seeds.append(
            ToolSeed(tool_id, breaker.state, breaker.consecutive_failures, breaker.half_open_at, manifest)
        )
    return seeds


class EngineHost:
    """Runs an engine (and what drives it) on an asyncio loop in a thread of its own."""

    def __init__(
        self,
        engine: Engine,
        workload: Workload | None = None,
        *,
        description: str = "",
        read_only: bool = False,
        recorder: TraceRecorder | None = None,
    ) -> None:
        self.engine = engine
        self.workload = workload
        self.description = description
        self.read_only = read_only
        self.recorder = recorder
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._main: Future[None] | None = None
        self._offset = 0.0
        self._problem: str | None = None

    def start(self) -> None:
        self._portal_cm = start_blocking_portal("asyncio")
        self._portal = self._portal_cm.__enter__()
        # asyncio's clock is time.monotonic(); measure the offset rather than assume it.
        self._offset = self._portal.call(anyio.current_time) - time.monotonic()
        self._main = self._portal.start_task_soon(self._run)

    async def _run(self) -> None:
        async with self.engine:
            if self.workload is not None:
                try:
                    await self.workload(self.engine)
                except Exception as exc:  # the console stays up to show what happened
                    self._problem = f"workload failed: {type(exc).__name__}: {exc}"
            await anyio.sleep_forever()  # timers and hot reload keep running

    def _portal_or_fail(self) -> BlockingPortal:
        if self._portal is None:
            raise RuntimeError("the engine host is not running")
        return self._portal

    # --- EngineLink ------------------------------------------------------------------------

    def subscribe(self, sink: Callable[[Event], None]) -> Callable[[], None]:
        return self.engine.subscribe(sink, direct=True)

    def seeds(self) -> list[ToolSeed]:
        return self._portal_or_fail().call(partial(_async_seeds, self.engine))

    def shared_strategies(self) -> dict[str, Any]:
        return self._portal_or_fail().call(partial(_async_shared, self.engine))

    def now(self) -> float:
        return time.monotonic() + self._offset

    def act(self, action: Action, tool_id: str, *, actor: str, reason: str) -> None:
        if self.read_only:
            raise PermissionError("the console is read-only")
        method = {"trip": self.engine.trip, "reset": self.engine.reset, "disable": self.engine.disable}[
            action
        ]
        self._portal_or_fail().call(partial(method, tool_id, actor=actor, reason=reason))

    def problem(self) -> str | None:
        return self._problem

    def not_persisted(self) -> int:
        """Turns finished that are not in the trace store: held while it refuses writes, or lost."""
        return self.recorder.stats.not_persisted if self.recorder is not None else 0

    def close(self) -> None:
        """Stop the engine (its turns in flight end ``interrupted``), then write what the recorder
        holds: the turns' last events are recorded before the recorder closes."""
        if self._main is not None:
            self._main.cancel()
        if self._portal_cm is not None:
            self._portal_cm.__exit__(None, None, None)
            self._portal_cm = self._portal = None
        if self.recorder is not None:
            self.recorder.close()
            self.recorder.store.close()
        self.engine.close()


async def _async_seeds(engine: Engine) -> list[ToolSeed]:
    return seeds_of(engine)


def shared_of(engine: Engine) -> dict[str, Any]:
    """The engine-wide strategies in force, as ``SharedStrategiesChanged`` carries them."""
    return dump_sections(engine.manifests.shared, "json")


async def _async_shared(engine: Engine) -> dict[str, Any]:
    return shared_of(engine)


# --- workloads ------------------------------------------------------------------------------


class Driven(NamedTuple):
    """A live engine and what drives it."""

    engine: Engine
    workload: Workload | None
    what: str
    """The workload's ``module:function`` or the scenario's name ('' when nothing drives it)."""


def driven_engine(
    manifests: Path, *, scenario: Path | None = None, workload: str | None = None, record: bool = False,
    passes: int | None = None,
) -> Driven:  # fmt: skip
    """A real-time engine hot-reloading ``manifests``, driven by your ``workload``
    (``module:function``) if given, else with the bundled travel tools and ``scenario`` (with its
    fault plan and seed) played in a loop, ``passes`` times (forever by default).

    Raises ``WorkloadError`` or ``ConfigError`` (bad manifests, scenario or fault plan) before
    anything runs.
    """
    if workload is not None:
        drive = import_workload(workload)
        return Driven(Engine(manifests, watch=True, rng=random.Random(0), record=record), drive, workload)
    if scenario is None:
        return Driven(demo_engine(manifests, record=record, watch=True), None, "")
    plan = load_scenario(scenario)
    faults = FaultInjector(plan.faults) if plan.faults is not None else None
    drive = scenario_workload(plan, passes=passes)
    engine = demo_engine(manifests, faults=faults, seed=plan.spec.seed, record=record, watch=True)
    plan.check(engine.tools)
    return Driven(engine, drive, plan.name)


def scenario_workload(scenario: Scenario, *, passes: int | None = None, pause_s: float = 5.0) -> Workload:
    """Play ``scenario`` ``passes`` times (forever by default), ``pause_s`` apart.

    Each pass namespaces its turn ids (``live-1/plan-trip``); a fault plan's ``{turn, call_id}``
    steps fire in every pass, its ordinal steps (``{tool, call}``) in the first only.
    """

    async def play(engine: Engine) -> None:
        stamp = time.strftime("%H%M%S")
        count = 0
        while passes is None or count < passes:
            count += 1
            await run_scenario(engine, scenario, run=f"{stamp}-{count}")
            await anyio.sleep(pause_s)

    return play


def import_workload(spec: str) -> Workload:
    """``module:function`` (a module path or a ``.py`` file) → its ``async def fn(engine)``."""
    module_name, _, function = spec.partition(":")
    if not module_name or not function:
        raise WorkloadError(f"--workload {spec!r}: expected module:function, e.g. agent.load:run")
    try:
        if module_name.endswith(".py"):
            module = _module_from_file(Path(module_name))
        else:
            module = importlib.import_module(module_name)
    except Exception as exc:
        extra = missing_extra(exc) if isinstance(exc, ImportError) else None
        if extra is not None:  # its own imports are the user's; one of tripwire's extras is ours to name
            raise WorkloadError(f"--workload {spec!r}: {needs_extra(module_name, extra)}") from None
        raise WorkloadError(f"--workload {spec!r}: cannot import {module_name}: {exc}") from None
    fn: Any = getattr(module, function, None)
    if fn is None:
        raise WorkloadError(f"--workload {spec!r}: {module_name} has no {function!r}")
    if not inspect.iscoroutinefunction(fn):
        raise WorkloadError(f"--workload {spec!r}: {function} must be an async function taking the engine")
    workload: Workload = fn
    return workload


def _module_from_file(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python file: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
