"""Hedged reads against a slow tail, on virtual time (issue 24 §2): p99 latency with and without hedging.

    python bench/hedging.py [--calls 5000] [--slow-percent 5] [--seed 1]

A read-only tool answers in 10-30 ms, except ``--slow-percent`` of its attempts, which take 1 s
(a replica that stalls). ``--calls`` calls run one after the other on trio's virtual clock, once
per configuration: without hedging, hedging after a fixed 50 ms, and hedging after the tool's live
p95 (``hedge_after_ms: p95``: no hedge in the first engine second, before the tool has a p95).
Every configuration sees the same draws of the tool's latency, one per attempt in the order
attempts start. Prints p50/p95/p99 of the calls' latencies (exact order statistics) and the
attempts each call made (the price of hedging).
"""

from __future__ import annotations

import argparse
import math
import random
from typing import Any

import anyio
import trio.testing

from engine import Engine, ToolManifest

CONFIGS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "fixed 50 ms": {"hedge_after_ms": 50, "max_hedges": 1},
    "p95": {"hedge_after_ms": "p95", "max_hedges": 1},
}


def percentile(sorted_values: list[float], p: float) -> float:
    """The nearest-rank ``p``th percentile."""
    return sorted_values[max(0, math.ceil(p / 100 * len(sorted_values)) - 1)]


async def run(hedging: dict[str, Any] | None, calls: int, slow: float, seed: int) -> dict[str, float]:
    sections = {} if hedging is None else {"hedging": hedging}
    manifest = ToolManifest(id="read", side_effect="read_only", timeout_ms=5000, **sections)
    engine = Engine([manifest], rng=random.Random(seed), wall_clock=lambda: 0.0)
    draws = random.Random(seed)

    async def read() -> str:
        stalls = draws.random() < slow
        await anyio.sleep(1.0 if stalls else draws.uniform(0.010, 0.030))
        return "row"

    engine.register("read", read)
    latencies = []
    async with engine:
        for _ in range(calls):
            start = anyio.current_time()
            await engine.call("read")
            latencies.append(anyio.current_time() - start)
        life = engine.stats()["read"].life
    latencies.sort()
    return {
        "p50": percentile(latencies, 50) * 1000,
        "p95": percentile(latencies, 95) * 1000,
        "p99": percentile(latencies, 99) * 1000,
        "attempts": (life.calls + life.retry_count) / life.calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--slow-percent", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    results = {}
    for name, hedging in CONFIGS.items():
        clock = trio.testing.MockClock(autojump_threshold=0)
        results[name] = anyio.run(
            run, hedging, args.calls, args.slow_percent / 100, args.seed,
            backend="trio", backend_options={"clock": clock},
        )  # fmt: skip
    print(f"{args.calls} calls, {args.slow_percent:g} % of attempts take 1 s (virtual time)\n")
    print("| hedging | p50 ms | p95 ms | p99 ms | p99 vs none | attempts per call |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    base = results["none"]["p99"]
    for name, r in results.items():
        lower = "—" if name == "none" else f"{base / r['p99']:.1f}× lower"
        print(
            f"| {name} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {lower} | {r['attempts']:.3f} |"
        )


if __name__ == "__main__":
    main()
