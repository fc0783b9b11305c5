"""An engine with a bulkhead, retry budgets and a rate limit, played on a virtual clock: real engine
events, and the engine's own figures at the moment the console tests show.

Five tools, manifests in a directory (``defaults.yaml`` sets an engine-wide retry budget):

- ``search``: a bulkhead of 2 slots and a queue of 1 (1 s wait); its calls take 3 s. At ``CUT``
  two run, one waits, one waited in vain and one found the queue full;
- ``pricing``: its own retry budget (1 retry in 10 s) and a dead service: its first call spends
  the retry, then the budget refuses;
- ``quotes``: a dead service under the engine-wide budget only (2 retries in 10 s, shared);
- ``weather``: none of them, answering at once: it looks as every tool did before strategies;
- ``quota``: a rate limit of 10 calls a second (2 at once, a wait of 100 ms at most), called after
  the others (their call ids stay): two calls at 1.61 s take the burst, one at 1.62 s waits for
  its token and meets the provider's 429 with ``Retry-After: 30`` at 1.71 s: the tool cools down
  for every caller until 31.71 s (the call is not retried: 30 s is past its retry budget); one at
  1.63 s is refused at once (its token is 180 ms away), one at 1.8 s by the cooldown.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import trio.testing

from console.host import seeds_of, shared_of
from console.model import ToolSeed
from engine import Engine
from engine.clock import VirtualWallClock
from engine.events import Event
from engine.metrics import ToolStats
from tests.console.factory import WALL

CUT = 2.0
"""The moment the console shows (engine time): the bulkhead full with one queued."""

SHARED = "defaults: {}\nretry_budget: {budget_percent: 0, min_retries_per_s: 0.2, window_s: 10}\n"
TOOL = (
    "tool:\n  id: {id}\n  side_effect: read_only\n  retry_policy: {{initial_delay_ms: 0, max_delay_ms: 0}}\n"
)
MANIFESTS = {
    "search": TOOL + "  bulkhead: {{max_concurrent: 2, max_queued: 1, queue_timeout_ms: 1000}}\n",
    "pricing": TOOL + "  retry_budget: {{budget_percent: 0, min_retries_per_s: 0.1, window_s: 10}}\n",
    "quotes": TOOL,
    "weather": TOOL,
    "quota": TOOL + "  rate_limit: {{rate_per_s: 10, burst: 2, max_wait_ms: 100}}\n",
}


def write_manifests(directory: Path) -> Path:
    (directory / "defaults.yaml").write_text(SHARED)
    for tool_id, text in MANIFESTS.items():
        (directory / f"{tool_id}.yaml").write_text(text.format(id=tool_id))
    return directory


async def slow_search(**_: Any) -> str:
    await anyio.sleep(3.0)
    return "results"


async def dead(**_: Any) -> str:
    raise ConnectionResetError("connection reset by peer")


async def weather(**_: Any) -> str:
    return "sunny"


class TooManyRequests(Exception):
    """An HTTP client's 429 with a ``Retry-After``, as the classifier reads one."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.headers = {"Retry-After": f"{retry_after_s:g}"}


def quota_tool() -> Callable[..., Awaitable[str]]:
    """Answers twice, then meets the provider's limit (``Retry-After: 30``), then answers."""
    calls: list[int] = []

    async def quota(**_: Any) -> str:
        calls.append(1)
        if len(calls) == 3:
            raise TooManyRequests(30.0)
        return "quota"

    return quota


def strategies_engine(directory: Path) -> Engine:
    engine = Engine(write_manifests(directory), wall_clock=VirtualWallClock(WALL))
    tools = (("search", slow_search), ("pricing", dead), ("quotes", dead), ("weather", weather))
    for tool_id, fn in (*tools, ("quota", quota_tool())):
        engine.register(tool_id, fn)
    return engine


async def traffic(engine: Engine, at: Callable[[float], Awaitable[None]]) -> None:
    """The scene's calls, each at its moment (``at(t)`` sleeps until engine time ``t``)."""

    async def call(tool_id: str, t: float) -> None:
        await at(t)
        await engine.try_call(tool_id)

    async with anyio.create_task_group() as tg:
        for tool_id, t in [
            ("search", 0.0), ("search", 0.0), ("search", 0.1), ("pricing", 0.2), ("quotes", 0.3),
            ("pricing", 0.4), ("quotes", 0.5), ("weather", 0.6), ("search", 1.5), ("search", 1.6),
            ("quota", 1.61), ("quota", 1.61), ("quota", 1.62), ("quota", 1.63), ("quota", 1.8),
        ]:  # fmt: skip
            tg.start_soon(call, tool_id, t)


@dataclass(frozen=True)
class Scene:
    seeds: tuple[ToolSeed, ...]
    events: tuple[Event, ...]
    """Every event up to ``CUT``."""
    stats: dict[str, ToolStats]
    """``engine.stats()`` at ``CUT``."""
    now: float
    """Engine time at ``CUT``."""
    shared: dict[str, Any]
    """The engine-wide strategies in force (``defaults.yaml``), as the console's link gives them."""


@functools.cache
def scene() -> Scene:
    """The scene played once on trio's virtual clock, cut at ``CUT``: identical every run."""
    events: list[Event] = []
    taken: dict[str, ToolStats] = {}
    seen: list[int] = []  # events up to the cut
    moments: list[float] = []
    shared: dict[str, Any] = {}

    async def play() -> list[ToolSeed]:
        with tempfile.TemporaryDirectory() as directory:
            engine = strategies_engine(Path(directory))
            engine.subscribe(events.append, direct=True)
            seeds = seeds_of(engine)
            shared.update(shared_of(engine))
            start = anyio.current_time()
            moments.append(start + CUT)

            async def at(t: float) -> None:
                await anyio.sleep(start + t - anyio.current_time())

            async def cut() -> None:
                await at(CUT)
                taken.update(engine.stats())
                seen.append(len(events))

            async with engine, anyio.create_task_group() as tg:
                tg.start_soon(cut)
                await traffic(engine, at)
            engine.close()
        return [
            replace(s, manifest=replace(s.manifest, path=f"manifests/{s.tool_id}.yaml")) if s.manifest else s
            for s in seeds
        ]

    clock = trio.testing.MockClock(autojump_threshold=0)
    with ThreadPoolExecutor(1) as thread:  # an event loop of its own, whoever calls (a Pilot test)
        seeds = thread.submit(
            partial(anyio.run, play, backend="trio", backend_options={"clock": clock})
        ).result()
    return Scene(tuple(seeds), tuple(events[: seen[0]]), taken, moments[0], shared)
