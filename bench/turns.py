"""Turn throughput: tool calls per second on one core, against the composed stack.

    python bench/turns.py [--turns 4000] [--concurrency 50] [--repeat 3]

Each turn has 5 calls: a, b, c independent; d depends on a and b; e depends on c. Tools
are zero-latency and fail transiently 20 % of the time (a seeded draw per attempt). The
turn trace is on. The composed stack does the same work with tenacity ``AsyncRetrying``,
aiobreaker and ``anyio.fail_after`` per call and anyio task groups for the concurrency.
Both retry immediately (no backoff sleep) and use breakers that never open under this load,
so both do exactly the same attempts and only the overhead differs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiobreaker
import anyio
import tenacity

from engine import BreakerConfig, Engine, RetryPolicy, ToolCall, ToolManifest, Turn

TOOLS = ("a", "b", "c", "d", "e")
FAILURE_RATE = 0.2


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


TURN = Turn(
    [
        ToolCall("a", "a"),
        ToolCall("b", "b"),
        ToolCall("c", "c"),
        ToolCall("d", "d", depends_on=("a", "b"), inputs={}),
        ToolCall("e", "e", depends_on=("c",), inputs={}),
    ],
    deadline_s=300,
)


def composed_stack(rng: random.Random) -> Callable[[], Awaitable[int]]:
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

    async def turn() -> int:
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

    return turn


async def drive(turn: Callable[[], Awaitable[Any]], turns: int, concurrency: int) -> float:
    remaining = turns

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await turn()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return time.perf_counter() - start


async def run(turns: int, concurrency: int, repeat: int) -> dict[str, float]:
    engine = tripwire_engine(random.Random(7))
    composed = composed_stack(random.Random(7))
    calls = turns * len(TOOLS)
    best = {"tripwire": 0.0, "composed": 0.0}
    async with engine:
        for _ in range(repeat):
            seconds = await drive(lambda: engine.run_turn(TURN), turns, concurrency)
            best["tripwire"] = max(best["tripwire"], calls / seconds)
            seconds = await drive(composed, turns, concurrency)
            best["composed"] = max(best["composed"], calls / seconds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    best = anyio.run(run, args.turns, args.concurrency, args.repeat)
    ratio = best["tripwire"] / best["composed"]
    if args.json:
        print(json.dumps({"calls_per_s": best, "ratio": ratio}, indent=2))
        return
    print(
        f"Python {platform.python_version()}, {args.turns:,} turns × 5 calls, {args.concurrency} concurrent"
    )
    print("| stack | tool calls/s |")
    print("| --- | ---: |")
    print(f"| tripwire turns (trace on) | {best['tripwire']:,.0f} |")
    print(f"| tenacity + aiobreaker + fail_after + task groups | {best['composed']:,.0f} |")
    print(f"\ntripwire / composed: {ratio:.2f}× (target ≥ 3×)")


if __name__ == "__main__":
    main()
