"""Per-call cost of a guarded call against what a user would otherwise compose.

    python bench/call_overhead.py [--calls 100000] [--repeat 5]

All stacks run in one process on one event loop (asyncio), calling a zero-latency async
tool. Each figure is the best of ``--repeat`` runs (the least disturbed by the machine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable

import aiobreaker
import anyio
import tenacity

from engine import BreakerConfig, Engine, ToolError, ToolManifest


async def tool() -> int:
    return 1


def composed_call() -> Callable[[], Awaitable[object]]:
    """The stack a user would compose around ``tool``: tenacity + aiobreaker + ``anyio.fail_after``."""
    breaker = aiobreaker.CircuitBreaker(fail_max=5, timeout_duration=datetime.timedelta(seconds=30))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        wait = tenacity.wait_exponential_jitter(initial=0.1, max=0.8)

    async def composed() -> object:
        async for attempt in tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(5), wait=wait, reraise=True
        ):
            with attempt:
                with anyio.fail_after(30):
                    return await breaker.call_async(tool)
        raise AssertionError("unreachable")

    return composed


async def measure(fn: Callable[[], Awaitable[object]], calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            await fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


async def run(calls: int, repeat: int) -> dict[str, float]:
    results: dict[str, float] = {}

    async def raw() -> object:
        return await tool()

    async def fail_after_only() -> object:
        with anyio.fail_after(30):
            return await tool()

    composed = composed_call()

    engine = Engine([ToolManifest(id="tool"), ToolManifest(id="down", circuit_breaker=BreakerConfig())],
                    rng=random.Random(1))  # fmt: skip
    engine.register("tool", tool)
    engine.register("down", tool)
    sink: deque[object] = deque(maxlen=10_000)

    async def guarded() -> object:
        return await engine.call("tool")

    async def rejected() -> object:
        return await engine.try_call("down")

    async def rejected_raising() -> object:
        try:
            return await engine.call("down")
        except ToolError as error:
            return error

    results["raw await"] = await measure(raw, calls, repeat)
    results["anyio.fail_after"] = await measure(fail_after_only, calls, repeat)
    results["tenacity + aiobreaker + fail_after"] = await measure(composed, calls, repeat)
    async with engine:
        results["tripwire call, no subscriber"] = await measure(guarded, calls, repeat)
        engine.subscribe(sink.append, direct=True)
        results["tripwire call, events on"] = await measure(guarded, calls, repeat)
        engine.trip("down", actor="bench")
        results["rejected by OPEN breaker, events on"] = await measure(rejected, calls, repeat)
        results["rejected, events on, raising ToolError"] = await measure(rejected_raising, calls, repeat)
    engine.close()
    quiet = Engine([ToolManifest(id="down")])
    quiet.register("down", tool)
    quiet.trip("down")

    async def rejected_quiet() -> object:
        return await quiet.try_call("down")

    async with quiet:
        results["rejected by OPEN breaker, no subscriber"] = await measure(rejected_quiet, calls, repeat)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results = anyio.run(run, args.calls, args.repeat)
    composed = results["tenacity + aiobreaker + fail_after"]
    ratio = results["tripwire call, events on"] / composed
    if args.json:
        print(json.dumps({"us_per_call": results, "ratio_engine_to_composed": ratio}, indent=2))
        return
    python = f"Python {platform.python_version()} on {platform.machine()}"
    print(f"{python}, {args.calls:,} calls, best of {args.repeat}")
    print("| stack | µs/call |")
    print("| --- | ---: |")
    for name, micros in results.items():
        print(f"| {name} | {micros:.2f} |")
    print(f"\nratio tripwire (events on) / composed stack: {ratio:.2f} (target ≤ 0.35)")
    quiet = results["rejected by OPEN breaker, no subscriber"]
    loud = results["rejected by OPEN breaker, events on"]
    print(f"rejected by an OPEN breaker: {quiet:.2f} µs without subscribers, {loud:.2f} µs with (target ≤ 3)")


if __name__ == "__main__":
    main()
