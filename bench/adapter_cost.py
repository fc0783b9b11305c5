"""What an adapter adds to a guarded call: the ways of making one tool call, timed interleaved with
events off and on (a direct subscriber appending to a deque), and their table. Shared by
bench/adapter_openai_agents.py and bench/adapter_pydantic_ai.py; not a benchmark of its own."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable

from engine import Engine

COST = "adapter cost"
TARGET_US = 5.0
Way = Callable[[], Awaitable[object]]


async def measure(fn: Way, calls: int) -> float:
    """CPU µs per call (steadier than wall time on a shared machine; the work is CPU-bound)."""
    start = time.process_time()
    for _ in range(calls):
        await fn()
    return (time.process_time() - start) / calls * 1e6


async def compare(
    engine: Engine, ways: dict[str, Way], calls: int, repeat: int, *, adapter: str, baseline: str
) -> dict[str, dict[str, list[float]]]:
    """Each way's figures by "events off"/"events on", plus ``COST``: ``adapter`` − ``baseline``,
    repeat by repeat. Closes the engine."""
    results: dict[str, dict[str, list[float]]] = {}
    sink: deque[object] = deque(maxlen=10_000)
    async with engine:
        for events in ("events off", "events on"):
            unsubscribe = engine.subscribe(sink.append, direct=True) if events == "events on" else None
            for fn in ways.values():  # warm up
                await measure(fn, calls // 10)
            figures: dict[str, list[float]] = {way: [] for way in ways}
            for _ in range(repeat):
                for way, fn in ways.items():
                    figures[way].append(await measure(fn, calls))
            figures[COST] = [a - b for a, b in zip(figures[adapter], figures[baseline], strict=True)]
            results[events] = figures
            if unsubscribe is not None:
                unsubscribe()
    engine.close()
    return results


def arguments(doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser.parse_args()


def report(results: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    """The table (median, min–max), or JSON with ``--json``."""
    table = {
        events: {
            way: {"median": statistics.median(v), "min": min(v), "max": max(v)} for way, v in figures.items()
        }
        for events, figures in results.items()
    }
    if args.json:
        print(json.dumps({"us_per_call": table, "target_us": TARGET_US}, indent=2))
        return
    print(f"Python {platform.python_version()} on {platform.machine()}, {args.calls:,} calls, "
          f"median of {args.repeat} interleaved repeats (min–max), CPU µs per call")  # fmt: skip
    print("| way | events off | events on |")
    print("| --- | ---: | ---: |")
    for way in table["events off"]:
        cells = [table[events][way] for events in ("events off", "events on")]
        print(
            f"| {way} | "
            + " | ".join(f"{c['median']:.2f} ({c['min']:.2f}–{c['max']:.2f})" for c in cells)
            + " |"
        )
    worst = max(table[events][COST]["median"] for events in table)
    print(f"\nadapter cost per call: {worst:.2f} µs at most (target ≤ {TARGET_US:g})")
