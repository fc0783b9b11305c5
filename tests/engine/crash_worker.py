"""The process test_store_crash.py kills: turns in a loop, each durable before it is announced.

    python -m tests.engine.crash_worker TRACES_DB

Real asyncio, real (tiny) tool work, transient failures from a seeded draw so retries and
breaker transitions happen, a recorder with ``durability="turn"`` and short batches so commits
are frequent. After each ``run_turn`` returns it prints ``DONE <turn_id> <events in the trace>``
and flushes stdout: from then on the turn must survive anything, SIGKILL included.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import anyio

from engine import BreakerConfig, Engine, RetryPolicy, ToolManifest
from engine.store import TraceRecorder, TraceStore
from engine.turns import ToolCall, Turn

TOOLS = ("flight_search", "hotel_search", "compare_prices")


def make_tool(rng: random.Random) -> Any:
    async def tool(**args: Any) -> dict[str, Any]:
        await anyio.sleep(0.0005)
        if rng.random() < 0.25:
            raise ConnectionResetError("connection reset by peer")
        return {"args": sorted(args), "rows": [rng.random() for _ in range(3)]}

    return tool


async def main(path: str) -> None:
    policy = RetryPolicy(initial_delay_ms=1, max_delay_ms=2, max_attempts=3)
    breaker = BreakerConfig(failure_threshold=3, timeout_ms=20)
    engine = Engine(
        [ToolManifest(id=name, retry_policy=policy, circuit_breaker=breaker) for name in TOOLS],
        rng=random.Random(1),
        record=True,
    )
    rng = random.Random(7)
    for name in TOOLS:
        engine.register(name, make_tool(rng))
    store = TraceStore(path)
    TraceRecorder(store, durability="turn", batch_ms=2).attach(engine)
    async with engine:
        n = 0
        while True:
            n += 1
            turn = Turn(
                [
                    ToolCall("flights", "flight_search", {"origin": "SFO", "n": n}),
                    ToolCall("hotels", "hotel_search", {"city": "New York"}),
                    ToolCall("compare", "compare_prices", depends_on=["flights", "hotels"], default=None),
                ],
                id=f"turn-{n}",
                deadline_s=5,
            )
            result = await engine.run_turn(turn)
            print(f"DONE {result.turn_id} {len(result.trace)}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], backend="asyncio")
