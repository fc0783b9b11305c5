"""The bundled live demo, played once on a virtual clock: real engine events, identical every run."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import anyio
import trio.testing

from console.host import seeds_of
from console.model import ToolSeed
from engine.clock import VirtualWallClock
from engine.demo import demo_engine
from engine.events import Event, TurnStarted
from engine.faults import FaultInjector
from engine.outcomes import TurnResult
from engine.scenario import load_scenario, run_scenario
from engine.store import TraceStore
from tests.console.factory import WALL

ROOT = Path(__file__).parents[2]


@functools.cache
def live_demo() -> tuple[tuple[ToolSeed, ...], tuple[Event, ...]]:
    """The tools as they started and every event of one pass of ``manifests/demo/live.yaml``."""
    scenario = load_scenario(ROOT / "manifests" / "demo" / "live.yaml")
    assert scenario.faults is not None
    engine = demo_engine(
        ROOT / "manifests", faults=FaultInjector(scenario.faults), seed=scenario.spec.seed,
        wall_clock=VirtualWallClock(WALL), record=True,
    )  # fmt: skip
    outside_turns: list[Event] = []  # breaker timers: no turn's trace has them
    engine.subscribe(
        lambda e: outside_turns.append(e) if getattr(e, "turn_id", None) is None else None, direct=True
    )

    async def play() -> tuple[list[ToolSeed], list[TurnResult]]:
        seeds = seeds_of(engine)
        async with engine:
            return seeds, await run_scenario(engine, scenario, run="demo")

    clock = trio.testing.MockClock(autojump_threshold=0)
    seeds, results = anyio.run(play, backend="trio", backend_options={"clock": clock})
    engine.close()
    # trio shuffles the order of simultaneous tasks; turn traces come in a canonical order, so
    # the feed is the same on every run (a stable sort keeps each trace's order).
    events = sorted([*(e for r in results for e in r.trace.events), *outside_turns], key=lambda e: e.t)
    # Manifest paths are absolute: keep them relative so snapshots do not depend on the checkout.
    relative = tuple(
        replace(s, manifest=replace(s.manifest, path=_relative(s.manifest.path))) if s.manifest else s
        for s in seeds
    )
    return relative, tuple(events)


def _relative(path: str) -> str:
    return str(Path(path).relative_to(ROOT)) if Path(path).is_absolute() else path


def events_until(t: float) -> list[Event]:
    """The demo's events up to engine time ``t``."""
    return [e for e in live_demo()[1] if e.t <= t]


def start_of(turn: str) -> float:
    """Engine time at which the demo's turn ``turn`` started."""
    return next(e.t for e in live_demo()[1] if isinstance(e, TurnStarted) and e.turn_id == f"demo/{turn}")


def mid_outage() -> float:
    """The moment the snapshots show: flight_search OPEN (half-opening 5 s later), hotel_search
    12 s into its 30 s timeout."""
    return start_of("hotel-slow") + 12.0


def demo_store(path: Path) -> Path:
    """The demo's pass written to a trace store at ``path``, as a recording engine would: the
    same file on every run (fixed wall clock, canonical order)."""
    seeds, events = live_demo()
    with TraceStore(path) as store:
        for seed in seeds:
            if seed.manifest is not None:
                store.ensure_manifest(seed.manifest.digest, seed.tool_id, seed.manifest.content, at=WALL)
        store.write(list(events))
    return path
