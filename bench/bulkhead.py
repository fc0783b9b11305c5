"""A tool's bulkhead against an ``anyio.CapacityLimiter`` around the same work, on both backends.

    python bench/bulkhead.py [--callers 10000] [--repeat 5]

Every caller is started at once; each takes a slot (waiting in the queue when none is free),
does the work, and gives the slot back. Three cases:

- ``1 × checkpoint``: one slot, work that only yields — the limiter's own cost, and a strict
  check of first come first served (admission order must be arrival order, every caller);
- ``100 × checkpoint``: 100 slots, the same work;
- ``100 × 1 ms``: 100 slots, work that sleeps 1 ms (a fast tool).

The engine's rows call the same work as a tool through ``engine.try_call``: once with the
tool's ``bulkhead`` section, once without it inside a CapacityLimiter (their ratio is the
bulkhead's cost as the engine runs it).

The real clock; each figure is the best of ``--repeat`` runs, the limiters taking turns.
``calls/s`` is callers over wall time; ``CPU µs/call`` the process's CPU time per caller (less
disturbed by other processes on a shared machine); ``vs limiter`` the CapacityLimiter's figure
over the bulkhead's (100 % = as fast, above = faster). ``disorder`` is the farthest any
caller was admitted from its arrival position: 0 is strict FIFO. With many slots, callers handed
a slot in the same instant resume in the scheduler's order (trio shuffles a batch on purpose),
so a disorder below the slot count is the scheduler's, not the limiter's.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio

from engine import Engine, ToolManifest
from engine.strategies.bulkhead import Bulkhead, BulkheadOptions

Work = Callable[[], Awaitable[None]]


async def checkpoint() -> None:
    await anyio.sleep(0)


async def one_ms() -> None:
    await anyio.sleep(0.001)


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float
    disorder: int


async def run_bulkhead(callers: int, slots: int, work: Work) -> Run:
    bulkhead = Bulkhead(BulkheadOptions(max_concurrent=slots, max_queued=callers))
    tickets = itertools.count()
    order: list[int] = []

    async def caller() -> None:
        ticket = next(tickets)
        if not bulkhead.try_enter():
            refused = await bulkhead.enter(600.0)
            assert refused is None, refused
        order.append(ticket)
        try:
            await work()
        finally:
            bulkhead.leave()

    seconds, cpu_seconds = await _all_at_once(callers, caller)
    assert (bulkhead.in_flight, bulkhead.queued) == (0, 0)
    return Run(seconds, cpu_seconds, _disorder(order))


async def run_capacity_limiter(callers: int, slots: int, work: Work) -> Run:
    limiter = anyio.CapacityLimiter(slots)
    tickets = itertools.count()
    order: list[int] = []

    async def caller() -> None:
        ticket = next(tickets)
        async with limiter:
            order.append(ticket)
            await work()

    seconds, cpu_seconds = await _all_at_once(callers, caller)
    return Run(seconds, cpu_seconds, _disorder(order))


async def run_unlimited(callers: int, slots: int, work: Work) -> Run:
    async def caller() -> None:
        await work()

    return Run(*await _all_at_once(callers, caller), 0)


async def _all_at_once(callers: int, caller: Callable[[], Coroutine[Any, Any, None]]) -> tuple[float, float]:
    start, cpu_start = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(callers):
            tg.start_soon(caller)
    return time.perf_counter() - start, time.process_time() - cpu_start


def _engine(work: Work, **sections: Any) -> Engine:
    # Timeouts and retries as any tool has them; the bulkhead's queue wait long enough for everyone.
    engine = Engine([ToolManifest(id="tool", **sections)])
    engine.register("tool", work)
    return engine


async def run_engine_bulkhead(callers: int, slots: int, work: Work) -> Run:
    bulkhead = {"max_concurrent": slots, "max_queued": callers, "queue_timeout_ms": 600_000}
    engine = _engine(work, bulkhead=bulkhead)

    async def caller() -> None:
        result = await engine.try_call("tool")
        assert result.ok, result.reason

    async with engine:
        return Run(*await _all_at_once(callers, caller), 0)


async def run_engine_capacity_limiter(callers: int, slots: int, work: Work) -> Run:
    engine = _engine(work)
    limiter = anyio.CapacityLimiter(slots)

    async def caller() -> None:
        async with limiter:
            result = await engine.try_call("tool")
        assert result.ok, result.reason

    async with engine:
        return Run(*await _all_at_once(callers, caller), 0)


def _disorder(order: list[int]) -> int:
    return max((abs(position - ticket) for position, ticket in enumerate(order)), default=0)


CASES: tuple[tuple[str, int, Work], ...] = (
    ("1 × checkpoint", 1, checkpoint),
    ("100 × checkpoint", 100, checkpoint),
    ("100 × 1 ms", 100, one_ms),
)
LIMITERS = (
    ("Bulkhead", run_bulkhead),
    ("CapacityLimiter", run_capacity_limiter),
    ("no limit", run_unlimited),
    ("engine, bulkhead", run_engine_bulkhead),
    ("engine in a CapacityLimiter", run_engine_capacity_limiter),
)
REFERENCE = {
    "engine, bulkhead": "engine in a CapacityLimiter",
    "engine in a CapacityLimiter": "engine in a CapacityLimiter",
}
"""Each limiter's figures are compared with the CapacityLimiter's, the engine's with the engine's."""


def measure(backend: str, callers: int, slots: int, work: Work, repeat: int) -> dict[str, Run]:
    """Every limiter's best run; the limiters take turns, so a busy moment of the machine
    falls on all of them alike."""
    runs: dict[str, list[Run]] = {name: [] for name, _ in LIMITERS}
    for _ in range(repeat):
        for name, runner in LIMITERS:
            runs[name].append(anyio.run(runner, callers, slots, work, backend=backend))
    return {
        name: Run(
            seconds=min(r.seconds for r in done),
            cpu_seconds=min(r.cpu_seconds for r in done),
            disorder=max(r.disorder for r in done),
        )
        for name, done in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.callers} callers, best of {args.repeat}; Python {platform.python_version()}")
    print(
        f"{'backend':8} {'case':17} {'limiter':28} {'calls/s':>9} {'vs limiter':>10} "
        f"{'CPU µs/call':>11} {'vs limiter':>10} {'disorder':>8}"
    )
    for backend in ("asyncio", "trio"):
        for case, slots, work in CASES:
            results = measure(backend, args.callers, slots, work, args.repeat)
            for name, result in results.items():
                reference = results[REFERENCE.get(name, "CapacityLimiter")]
                limited = name != "no limit"
                rate = args.callers / result.seconds
                cpu_us = result.cpu_seconds / args.callers * 1e6
                ratio = f"{reference.seconds / result.seconds:.0%}" if limited else ""
                cpu_ratio = f"{reference.cpu_seconds / result.cpu_seconds:.0%}" if limited else ""
                disorder = str(result.disorder) if limited and name not in REFERENCE else ""  # not tracked
                print(
                    f"{backend:8} {case:17} {name:28} {rate:9,.0f} {ratio:>10} "
                    f"{cpu_us:11.1f} {cpu_ratio:>10} {disorder:>8}"
                )


if __name__ == "__main__":
    main()
