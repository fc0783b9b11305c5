"""One process of tests/reliability/test_fleet_rate_processes.py: an engine whose tool ``api`` has a
``scope: fleet`` rate limit, in the fleet at ``argv[1]``, calling ``api`` back to back from
``argv[3]`` tasks until the file ``argv[4]`` exists; each call that reached the tool appends its
wall-clock time to ``argv[2]``. A line ``joined`` on stdout once it is in the fleet. Given a
seventh argument, a file: once it exists, the tool's next call fails with a 429 asking to retry
after ``COOLDOWN_S`` (once), the line ``429 <time>`` appended to ``argv[2]``.

Run as ``python tests/reliability/fleet_rate_member.py URL OUT TASKS STOP RATE BURST [TRIGGER]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from engine import Engine, RetryPolicy, ToolManifest
from engine.fleet import Fleet

COOLDOWN_S = 3


class TooManyRequests(Exception):
    """An HTTP client's 429 with a ``Retry-After``, as the classifier reads one."""

    def __init__(self) -> None:
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.headers = {"Retry-After": str(COOLDOWN_S)}


async def main(
    url: str, out: Path, tasks: int, stop: Path, rate: float, burst: int, trigger: Path | None
) -> None:
    limit = {"rate_per_s": rate, "burst": burst, "max_wait_ms": 5000, "scope": "fleet"}
    engine = Engine([ToolManifest(id="api", retry_policy=RetryPolicy(max_attempts=1), rate_limit=limit)])  # type: ignore[call-arg]
    with out.open("a", encoding="utf-8", buffering=1) as calls:  # a line at a time: read while it runs
        thrown = []

        async def api() -> str:
            if trigger is not None and not thrown and trigger.exists():
                thrown.append(True)
                calls.write(f"429 {time.time()!r}\n")
                raise TooManyRequests
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
    trigger = Path(sys.argv[7]) if len(sys.argv) > 7 else None
    anyio.run(main, url, Path(out), int(tasks), Path(stop), float(rate), int(burst), trigger)
