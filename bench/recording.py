"""Recording at the speed of running: turns/s unrecorded against recorded into a trace store.

    python bench/recording.py [--turns 1000] [--concurrency 1 10 50] [--repeat 5] [--backend asyncio]

Each turn has bench/turns.py's shape: 5 calls (a, b, c independent; d depends on a and b; e on
c), zero-latency tools failing transiently 20 % of the time (a seeded draw per attempt, retried
at once), the engine's turn trace on. Each measurement is a fresh engine and, recorded, a fresh
store in a temporary directory with a ``TraceRecorder``:

* ``unrecorded``: no recorder;
* ``turn``: ``durability="turn"``: ``run_turn`` returns once the turn's events are committed;
* ``batch``: ``durability="batch"``: ``run_turn`` never waits; the clock stops once ``flush``
  returns, so the figure is the rate the writer sustains, not how fast it can fall behind.

``--turns`` turns run per measurement (after 50 warm-up turns), ``--concurrency`` of them at a
time. The three modes alternate within each repeat (their order rotates); the table gives the
median turns/s of ``--repeat`` repeats with the min–max spread, and the median of the per-repeat
ratios recorded/unrecorded. ``--profile MODE`` runs one recorded measurement under cProfile
(every thread) instead and prints where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from turns import make_turn, tripwire_engine  # the same turns and tools, one definition

from engine import Engine
from engine.store import TraceRecorder, TraceStore

MODES = ("unrecorded", "turn", "batch")
WARMUP = 50
TURN = make_turn("dag", fan=0, length=0)


def make_engine(seed: int) -> Engine:
    """bench/turns.py's engine: the same tools, failing 20 % of the time on a seeded draw."""
    return tripwire_engine(random.Random(seed))


async def drive(engine: Engine, turns: int, concurrency: int) -> None:
    remaining = turns

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await engine.run_turn(TURN)

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)


async def measure(mode: str, turns: int, concurrency: int, seed: int, directory: Path) -> float:
    """Turns per second of one measurement."""
    engine = make_engine(seed)
    store = recorder = None
    if mode != "unrecorded":
        store = TraceStore(directory / f"{mode}-{seed}-{concurrency}.db")
        recorder = TraceRecorder(store, durability="turn" if mode == "turn" else "batch").attach(engine)
    try:
        async with engine:
            await drive(engine, WARMUP, concurrency)
            if recorder is not None:
                recorder.flush(30)
            start = time.perf_counter()
            await drive(engine, turns, concurrency)
            if recorder is not None and mode == "batch":
                recorder.flush(120)
            seconds = time.perf_counter() - start
    finally:
        if recorder is not None:
            recorder.close()
        if store is not None:
            store.close()
    return turns / seconds


async def run(
    turns: int, levels: list[int], repeat: int, directory: Path
) -> dict[int, dict[str, list[float]]]:
    rates: dict[int, dict[str, list[float]]] = {c: {m: [] for m in MODES} for c in levels}
    for r in range(repeat):
        for concurrency in levels:
            order = MODES[r % 3 :] + MODES[: r % 3]  # rotate: no mode always runs first
            for mode in order:
                rates[concurrency][mode].append(await measure(mode, turns, concurrency, r, directory))
    return rates


def summary(rates: dict[int, dict[str, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for concurrency, by_mode in rates.items():
        base = by_mode["unrecorded"]
        entry: dict[str, Any] = {}
        for mode, values in by_mode.items():
            entry[mode] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
            if mode != "unrecorded":
                ratios = [v / b for v, b in zip(values, base, strict=True)]
                entry[mode]["ratio"] = statistics.median(ratios)
                entry[mode]["ratio_min"] = min(ratios)
                entry[mode]["ratio_max"] = max(ratios)
        out[str(concurrency)] = entry
    return out


def profile(mode: str, turns: int, concurrency: int, backend: str, directory: Path) -> None:
    """One measurement under cProfile, the writer thread's share included (threading.setprofile)."""
    profiler = cProfile.Profile()
    threading.setprofile(lambda *_: profiler.enable())  # new threads (the writer) profile too
    profiler.enable()
    rate = anyio.run(measure, mode, turns, concurrency, 0, directory, backend=backend)
    profiler.disable()
    threading.setprofile(None)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
    print(f"{mode}, {concurrency} concurrent: {rate:,.0f} turns/s under the profiler")
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--profile", choices=("turn", "batch"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile:
            profile(args.profile, args.turns, args.concurrency[0], args.backend, Path(tmp))
            return
        rates = anyio.run(run, args.turns, args.concurrency, args.repeat, Path(tmp), backend=args.backend)
    result = summary(rates)
    if args.json:
        print(json.dumps({"backend": args.backend, "turns": args.turns, "turns_per_s": result}, indent=2))
        return
    print(
        f"Python {platform.python_version()}, {args.backend}, {args.turns:,} turns × 5 calls per measurement,"
        f" median of {args.repeat} (min–max)"
    )
    print('| concurrency | unrecorded turns/s | durability="turn" | ratio | durability="batch" | ratio |')
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for concurrency, entry in result.items():
        cells = [concurrency, _rate(entry["unrecorded"])]
        for mode in ("turn", "batch"):
            e = entry[mode]
            cells += [_rate(e), f"{e['ratio']:.2f}× ({e['ratio_min']:.2f}–{e['ratio_max']:.2f})"]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    print("\ntargets: turn ≥ 0.6× at 1 concurrent, ≥ 0.8× at 50; batch ≥ 0.85×")


def _rate(e: dict[str, float]) -> str:
    return f"{e['median']:,.0f} ({e['min']:,.0f}–{e['max']:,.0f})"


if __name__ == "__main__":
    main()
