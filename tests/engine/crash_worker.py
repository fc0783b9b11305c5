"""The process the crash and disk-full tests run: turns in a loop, each durable before it is announced.

    python -m tests.engine.crash_worker DB [--prefix P] [--tool-ms MS] [--fill rlimit|space --out COPY]

Real asyncio, real (tiny) tool work, transient failures from a seeded draw so retries and
breaker transitions happen (each tool call takes ``--tool-ms``, 0.5 by default), a recorder
with ``durability="turn"`` and short batches so commits are frequent. After each ``run_turn``
returns it prints ``DONE <turn_id> <events in the trace>`` and flushes stdout: from then on the
turn must survive anything, SIGKILL included. Turn ids are ``<prefix>turn-<n>``.

``--fill`` runs the disk-full script instead of looping for ever: three turns, then the disk
fills up (``rlimit``: the process may not grow a file past its size now, RLIMIT_FSIZE; ``space``:
the file system is filled by a filler file, for a small file system made for the test), then
turns until one is not persisted and two more, each line ``LOST <turn_id> <seconds> <message>``;
then the disk is freed, the recorder flushed (``FLUSHED <ok> <not persisted> <problem>``), one
more turn, and the store is copied to ``--out`` with SQLite's backup (``space``: the file system
goes with the test's namespace). Log lines go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import random
import resource
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from engine import BreakerConfig, Engine, RetryPolicy, ToolManifest
from engine.errors import TurnNotPersisted
from engine.store import TraceRecorder, TraceStore
from engine.turn import ToolCall, Turn

TOOLS = ("flight_search", "hotel_search", "compare_prices")


def make_tool(rng: random.Random, seconds: float) -> Any:
    async def tool(**args: Any) -> dict[str, Any]:
        await anyio.sleep(seconds)
        if rng.random() < 0.25:
            raise ConnectionResetError("connection reset by peer")
        return {"args": sorted(args), "rows": [rng.random() for _ in range(3)]}

    return tool


def make_engine(tool_s: float = 0.0005) -> Engine:
    policy = RetryPolicy(initial_delay_ms=1, max_delay_ms=2, max_attempts=3)
    breaker = BreakerConfig(failure_threshold=3, timeout_ms=20)
    engine = Engine(
        [ToolManifest(id=name, retry_policy=policy, circuit_breaker=breaker) for name in TOOLS],
        rng=random.Random(1),
        record=True,
    )
    rng = random.Random(7)
    for name in TOOLS:
        engine.register(name, make_tool(rng, tool_s))
    return engine


def make_turn(turn_id: str, n: int) -> Turn:
    return Turn(
        [
            ToolCall("flights", "flight_search", {"origin": "SFO", "n": n}),
            ToolCall("hotels", "hotel_search", {"city": "New York"}),
            ToolCall("compare", "compare_prices", depends_on=["flights", "hotels"], default=None),
        ],
        id=turn_id,
        deadline_s=5,
    )


async def main(path: str, prefix: str, tool_s: float) -> None:
    engine = make_engine(tool_s)
    store = TraceStore(path)
    TraceRecorder(store, durability="turn", batch_ms=2).attach(engine)
    async with engine:
        n = 0
        while True:
            n += 1
            result = await engine.run_turn(make_turn(f"{prefix}turn-{n}", n))
            print(f"DONE {result.turn_id} {len(result.trace)}", flush=True)


class Disk:
    """Fills the disk the store is on, and frees it again."""

    def __init__(self, how: str, path: Path) -> None:
        self.how, self.path = how, path
        self.filler = path.parent / "filler"

    def fill(self) -> None:
        if self.how == "rlimit":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
            files = [p for p in self.path.parent.iterdir() if p.name.startswith(self.path.name)]
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (max(p.stat().st_size for p in files), hard))
            return
        try:
            with open(self.filler, "wb", buffering=0) as f:  # until the file system has no room left
                while True:
                    f.write(b"\0" * 65536)
        except OSError:
            pass  # full

    def free(self) -> None:
        if self.how == "rlimit":
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        else:
            self.filler.unlink()


async def disk_full(path: str, prefix: str, how: str, out: str) -> None:
    engine = make_engine()
    store = TraceStore(path)
    recorder = TraceRecorder(store, durability="turn", batch_ms=2, durable_timeout_s=60).attach(engine)
    disk = Disk(how, Path(path))
    n = lost = 0

    async def turn() -> None:
        nonlocal n, lost
        n += 1
        started = time.monotonic()
        try:
            result = await engine.run_turn(make_turn(f"{prefix}turn-{n}", n))
        except TurnNotPersisted as exc:
            lost += 1
            print(f"LOST {exc.result.turn_id} {time.monotonic() - started:.3f} {exc}", flush=True)
        else:
            print(f"DONE {result.turn_id} {len(result.trace)}", flush=True)

    async with engine:
        for _ in range(3):
            await turn()
        disk.fill()
        print("FULL", flush=True)
        while not lost and n < 2000:
            await turn()
        for _ in range(2):
            await turn()
        disk.free()
        flushed = recorder.flush(30)
        stats = recorder.stats
        print(f"FLUSHED {flushed} {stats.not_persisted} {stats.problem}", flush=True)
        await turn()
    recorder.close()
    store.close()
    with sqlite3.connect(path) as source, sqlite3.connect(out) as copy:
        source.backup(copy)
    print("COPIED", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--tool-ms", type=float, default=0.5)
    parser.add_argument("--fill", choices=("rlimit", "space"))
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.fill is not None and args.out is None:
        parser.error("--fill needs --out")
    if args.fill is None:
        anyio.run(main, args.path, args.prefix, args.tool_ms / 1000, backend="asyncio")
    else:
        anyio.run(disk_full, args.path, args.prefix, args.fill, args.out, backend="asyncio")
