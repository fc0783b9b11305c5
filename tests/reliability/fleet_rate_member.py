"""One process of tests/reliability/test_fleet_rate_processes.py: an engine whose tool ``api`` has a
``scope: fleet`` rate limit, in the fleet at ``argv[1]``, calling ``api`` back to back from
``argv[3]`` tasks until the file ``argv[4]`` exists; each call that reached the tool appends its
wall-clock time to ``argv[2]``. A line ``joined`` on stdout once it is in the fleet.

Run as ``python tests/reliability/fleet_rate_member.py URL OUT TASKS STOP RATE BURST``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from engine import Engine, RetryPolicy, ToolManifest
from engine.fleet import Fleet


async def main(url: str, out: Path, tasks: int, stop: Path, rate: float, burst: int) -> None:
    limit = {"rate_per_s": rate, "burst": burst, "max_wait_ms": 5000, "scope": "fleet"}
    engine = Engine([ToolManifest(id="api", retry_policy=RetryPolicy(max_attempts=1), rate_limit=limit)])  # type: ignore[call-arg]
    with out.open("a", encoding="utf-8") as calls:

        async def api() -> str:
            calls.write(f"{time.time()!r}\n")
            return "ok"

        engine.register("api", api)

        async def hammer() -> None:
            while not stop.exists():
                await engine.try_call("api")

        async with engine, Fleet(engine, url):
            print("joined", flush=True)
            async with anyio.create_task_group() as tg:
                for _ in range(tasks):
                    tg.start_soon(hammer)
            calls.flush()


if __name__ == "__main__":
    url, out, tasks, stop, rate, burst = sys.argv[1:7]
    anyio.run(main, url, Path(out), int(tasks), Path(stop), float(rate), int(burst))
