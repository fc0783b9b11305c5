"""Turn throughput: tool calls per second on one core, against the composed stack.

    python bench/turns.py [--shape dag|chain|fan] [--fan 50] [--length 5]
                          [--concurrency 50] [--calls 20000] [--repeat 5]

Shapes (every call picks one of 5 tools, in turn):

- ``dag`` (the default): 5 calls — a, b, c independent; d depends on a and b; e depends on c;
- ``chain``: ``--length`` calls, each depending on the one before;
- ``fan``: ``--fan`` independent calls.

Tools are zero-latency and fail transiently 20 % of the time (a seeded draw per attempt). The
turn trace is on. The composed stack does the same work with tenacity ``AsyncRetrying``,
aiobreaker and ``anyio.fail_after`` per call and anyio task groups for the concurrency (a
chain runs its calls one after the other in the turn's task). Both retry immediately (no
backoff sleep) and use breakers that never open under this load, so both do exactly the same
attempts and only the overhead differs.

Each repeat runs both stacks, alternately first, for about ``--calls`` tool calls in
``--concurrency`` concurrent turns; the figures are the medians with their min–max spread.
Per timed run it also counts garbage collections and the time spent in them (``gc.callbacks``).
A separate short run per stack, not timed, traces memory with ``tracemalloc``: the peak heap
per turn in flight (collector on), then, with the collector paused, what each call leaves for
it — objects found unreachable by ``gc.collect()`` and the blocks and bytes they held, garbage
only the collector can free.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import random
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import aiobreaker
import anyio
import tenacity

from engine import BreakerConfig, Engine, RetryPolicy, ToolCall, ToolManifest, Turn

TOOLS = ("a", "b", "c", "d", "e")
FAILURE_RATE = 0.2
STACKS = ("tripwire", "composed")


def make_tool(rng: random.Random) -> Callable[..., Awaitable[str]]:
    async def tool(**_: Any) -> str:
        if rng.random() < FAILURE_RATE:
            raise ConnectionResetError("Connection reset by peer")
        return "ok"

    return tool


def tripwire_engine(rng: random.Random) -> Engine:
    policy = RetryPolicy(initial_delay_ms=0, max_delay_ms=0, jitter_percent=0, max_attempts=5)
    breaker = BreakerConfig(failure_threshold=1_000_000)
    manifests = [ToolManifest(id=t, retry_policy=policy, circuit_breaker=breaker) for t in TOOLS]
    engine = Engine(manifests, rng=random.Random(1))
    for name in TOOLS:
        engine.register(name, make_tool(rng))
    return engine


def make_turn(shape: str, fan: int, length: int) -> Turn:
    if shape == "dag":
        return Turn(
            [
                ToolCall("a", "a"),
                ToolCall("b", "b"),
                ToolCall("c", "c"),
                ToolCall("d", "d", depends_on=("a", "b"), inputs={}),
                ToolCall("e", "e", depends_on=("c",), inputs={}),
            ],
            deadline_s=300,
        )
    if shape == "chain":
        calls = [ToolCall("s0", TOOLS[0])]
        calls += [
            ToolCall(f"s{i}", TOOLS[i % 5], depends_on=(f"s{i - 1}",), inputs={}) for i in range(1, length)
        ]
        return Turn(calls, deadline_s=300)
    return Turn([ToolCall(f"f{i}", TOOLS[i % 5]) for i in range(fan)], deadline_s=300)


def composed_stack(rng: random.Random, shape: str, fan: int, length: int) -> Callable[[], Awaitable[int]]:
    tools = {name: make_tool(rng) for name in TOOLS}
    breakers = {
        name: aiobreaker.CircuitBreaker(fail_max=1_000_000, timeout_duration=datetime.timedelta(seconds=30))
        for name in TOOLS
    }

    async def call(name: str) -> str | None:
        try:
            async for attempt in tenacity.AsyncRetrying(
                stop=tenacity.stop_after_attempt(5),
                wait=tenacity.wait_none(),
                retry=tenacity.retry_if_exception_type(ConnectionResetError),
                reraise=True,
            ):
                with attempt, anyio.fail_after(30):
                    return await breakers[name].call_async(tools[name])
        except ConnectionResetError:
            return None
        return None

    async def dag() -> int:
        results: dict[str, str | None] = {}

        async def run(name: str) -> None:
            results[name] = await call(name)

        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for name in ("a", "b", "c"):
                    tg.start_soon(run, name)
            async with anyio.create_task_group() as tg:
                if results["a"] is not None and results["b"] is not None:
                    tg.start_soon(run, "d")
                if results["c"] is not None:
                    tg.start_soon(run, "e")
        return len(results)

    async def chain() -> int:
        done = 0
        with anyio.fail_after(300):
            for i in range(length):
                if await call(TOOLS[i % 5]) is None:
                    break
                done += 1
        return done

    fan_calls = [(f"f{i}", TOOLS[i % 5]) for i in range(fan)]

    async def fan_out() -> int:
        results: dict[str, str | None] = {}

        async def run(call_id: str, name: str) -> None:
            results[call_id] = await call(name)

        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for call_id, name in fan_calls:
                    tg.start_soon(run, call_id, name)
        return len(results)

    return {"dag": dag, "chain": chain, "fan": fan_out}[shape]


async def drive(turn: Callable[[], Awaitable[Any]], turns: int, concurrency: int) -> float:
    remaining = turns

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await turn()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(min(concurrency, turns)):
            tg.start_soon(worker)
    return time.perf_counter() - start


class GcWatch:
    """Collections by generation and the time spent in them, while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.collections[info["generation"]] += 1

    async def timed(self, run: Callable[[], Awaitable[float]]) -> float:
        gc.collect()  # each run starts from the same, clean heap
        gc.callbacks.append(self)
        try:
            return await run()
        finally:
            gc.callbacks.remove(self)


async def memory(run: Callable[[], Awaitable[float]], calls: int, in_flight: int) -> dict[str, float]:
    """The heap a turn in flight holds at the peak (collector on), and what the calls leave for the
    collector (collector paused): unreachable objects, their blocks and bytes, per call."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        await run()
        peak = tracemalloc.get_traced_memory()[1] - base
        gc.collect()
        gc.disable()
        await run()
        before = tracemalloc.take_snapshot()
        found = gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
        gc.enable()
    freed = [stat for stat in after.compare_to(before, "filename") if stat.count_diff < 0]
    return {
        "peak_bytes_per_turn_in_flight": peak / in_flight,
        "objects": found / calls,
        "blocks": -sum(s.count_diff for s in freed) / calls,
        "bytes": -sum(s.size_diff for s in freed) / calls,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    turn = make_turn(args.shape, args.fan, args.length)
    size = len(turn.calls)
    turns = args.turns or max(args.concurrency, round(args.calls / size))
    calls = turns * size
    engine = tripwire_engine(random.Random(7))
    composed = composed_stack(random.Random(7), args.shape, args.fan, args.length)
    drivers: dict[str, Callable[[int], Awaitable[float]]] = {
        "tripwire": lambda n: drive(lambda: engine.run_turn(turn), n, args.concurrency),
        "composed": lambda n: drive(composed, n, args.concurrency),
    }
    rates: dict[str, list[float]] = {s: [] for s in STACKS}
    gc_share: dict[str, list[float]] = {s: [] for s in STACKS}
    gc_runs: dict[str, list[list[int]]] = {s: [] for s in STACKS}
    ratios: list[float] = []
    async with engine:
        for stack in STACKS:  # warm up: imports, caches, the first turn's spec
            await drivers[stack](min(turns, args.concurrency))
        for i in range(args.repeat):
            order = STACKS if i % 2 == 0 else STACKS[::-1]
            for stack in order:
                watch = GcWatch()
                seconds = await watch.timed(lambda s=stack: drivers[s](turns))  # type: ignore[misc]
                rates[stack].append(calls / seconds)
                gc_share[stack].append(watch.seconds / seconds)
                gc_runs[stack].append(watch.collections)
            ratios.append(rates["tripwire"][-1] / rates["composed"][-1])
        short = max(args.concurrency, round(2000 / size))
        left = {
            s: await memory(lambda s=s: drivers[s](short), short * size, args.concurrency)  # type: ignore[misc]
            for s in STACKS
        }
    return {
        "python": platform.python_version(),
        "shape": args.shape,
        "calls_per_turn": size,
        "turns": turns,
        "concurrency": args.concurrency,
        "repeat": args.repeat,
        "calls_per_s": {s: _spread(rates[s]) for s in STACKS},
        "ratio": _spread(ratios),
        "gc_share": {s: _spread(gc_share[s]) for s in STACKS},
        "gc_collections_per_1000_calls": {
            s: [round(statistics.median(r[g] for r in gc_runs[s]) * 1000 / calls, 2) for g in range(3)]
            for s in STACKS
        },
        "memory": left,
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=("dag", "chain", "fan"), default="dag")
    parser.add_argument("--fan", type=int, default=50, help="calls of a fan turn")
    parser.add_argument("--length", type=int, default=5, help="calls of a chain turn")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20_000, help="tool calls per timed run, about")
    parser.add_argument("--turns", type=int, default=0, help="turns per timed run (overrides --calls)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = anyio.run(run, args)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    shape = {"dag": "5-call DAG", "chain": f"{args.length}-call chain", "fan": f"fan of {args.fan}"}
    print(
        f"Python {result['python']}, {shape[args.shape]}, {result['turns']:,} turns per run, "
        f"{args.concurrency} concurrent, medians (min–max) of {args.repeat} interleaved runs"
    )
    head = ("stack", "tool calls/s", "gc time", "gc runs per 1,000 calls (gen 0/1/2)", "peak heap per turn")
    print(f"| {' | '.join(head)} | garbage per call |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    names = {
        "tripwire": "tripwire turns (trace on)",
        "composed": "tenacity + aiobreaker + fail_after + task groups",
    }
    for s in STACKS:
        r, share, left = result["calls_per_s"][s], result["gc_share"][s], result["memory"][s]
        runs = "/".join(f"{n:g}" for n in result["gc_collections_per_1000_calls"][s])
        print(
            f"| {names[s]} | {r['median']:,.0f} ({r['min']:,.0f}–{r['max']:,.0f}) | {share['median']:.0%} | "
            f"{runs} | {left['peak_bytes_per_turn_in_flight'] / 1024:,.1f} kB | "
            f"{left['objects']:.1f} objects, {left['blocks']:.1f} blocks, {left['bytes']:,.0f} B |"
        )
    ratio = result["ratio"]
    print(
        f"\ntripwire / composed: {ratio['median']:.2f}× ({ratio['min']:.2f}–{ratio['max']:.2f}; target ≥ 3×)"
    )


if __name__ == "__main__":
    main()
