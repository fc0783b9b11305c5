"""Timer punctuality: how late tripwire's timers fire against the backend's own, idle and under load.

    python bench/timing.py [--backend asyncio trio] [--load 1000] [--duration 1.5] [--repeat 5] [--json]

Three timers, each measured as lateness: the moment the woken code runs minus the moment it was
due, on the backend's clock.

* tool timeout: a tool that never returns, called through ``engine.try_call`` under its
  ``timeout_ms``, against the same coroutine under ``anyio.fail_after`` and under the backend's
  own (``asyncio.timeout`` / ``trio.fail_after``); lateness is when the tool sees its cancellation.
* half-open: a breaker opened by a failure announces HALF_OPEN at ``half_open_at`` with no call
  arriving (the engine's timer; a direct subscriber notes the time), against a task sleeping until
  the same kind of moment (``anyio.sleep_until`` / ``asyncio.sleep`` / ``trio.sleep_until``).
* backoff: a tool failing once, retried after a fixed delay with no jitter; lateness is the
  retry's start minus the failure's moment minus the delay, against a loop that catches the error
  and sleeps the delay (``anyio.sleep`` / ``asyncio.sleep`` / ``trio.sleep``).

Load: ``--load`` engine calls in flight for the whole run (each a tool that spins ``--work-us``
of CPU then yields), so one pass of the event loop takes about load x (work + a step). Idle:
none. Every variant runs at the same time, ``--probes`` tasks each, in windows of ``--duration``
seconds, so they share the same load; each window gives a p50 / p99 per variant, and the table
shows the median over ``--repeat`` windows with the spread (min-max), and the ratio of
tripwire's p99 to the backend's own in each window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import trio

from engine import BreakerConfig, Engine, RetryPolicy, ToolManifest
from engine.events import BreakerHalfOpened, BreakerOpened, Event

TIMERS = ("timeout", "half-open", "backoff")
VARIANTS = ("tripwire", "anyio", "native")
NATIVE = {"asyncio": "asyncio.timeout / asyncio.sleep", "trio": "trio.fail_after / trio.sleep_until"}

Samples = dict[str, dict[str, list[float]]]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    """One engine, its load and its probes, on the running backend."""

    def __init__(self, backend: str, args: argparse.Namespace) -> None:
        self.backend = backend
        self.args = args
        self.timeout_s = args.timer_ms / 1000.0
        self.samples: Samples = defaultdict(lambda: defaultdict(list))
        self.opened_at: dict[str, float] = {}
        self.half_opened: dict[str, anyio.Event] = {}
        self.failed_at: dict[str, float] = {}
        self.engine = self._engine()

    # --- the engine ------------------------------------------------------------------------

    def _engine(self) -> Engine:
        args, never = self.args, BreakerConfig(failure_threshold=1_000_000)
        once = RetryPolicy(max_attempts=1)
        manifests = [ToolManifest(id="load", timeout_ms=3_600_000, retry_policy=once, circuit_breaker=never)]
        for i in range(args.probes):
            manifests += [
                ToolManifest(
                    id=f"hang{i}", timeout_ms=args.timer_ms, retry_policy=once, circuit_breaker=never
                ),
                ToolManifest(
                    id=f"flaky{i}", retry_policy=once,
                    circuit_breaker=BreakerConfig(failure_threshold=1, timeout_ms=args.timer_ms),
                ),
                ToolManifest(
                    id=f"backoff{i}", circuit_breaker=never,
                    retry_policy=RetryPolicy(
                        strategy="fixed", initial_delay_ms=args.timer_ms, max_delay_ms=args.timer_ms,
                        jitter_percent=0, max_attempts=2, max_total_time_ms=3_600_000,
                    ),
                ),
            ]  # fmt: skip
        engine = Engine(manifests, rng=random.Random(1))
        engine.register("load", self._load_tool)
        for i in range(args.probes):
            engine.register(f"hang{i}", self._hang_tool("tripwire"))
            engine.register(f"flaky{i}", self._flaky_tool)
            engine.register(f"backoff{i}", self._backoff_tool(f"backoff{i}", "tripwire"))
        engine.subscribe(self._on_event, direct=True)
        return engine

    async def _load_tool(self) -> None:
        spin = self.args.work_us / 1e6
        while True:
            end = time.perf_counter() + spin
            while time.perf_counter() < end:
                pass
            await anyio.sleep(0)

    def _hang_tool(self, variant: str) -> Callable[[], Awaitable[None]]:
        async def hang() -> None:
            due = anyio.current_time() + self.timeout_s
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.samples["timeout"][variant].append(anyio.current_time() - due)
                raise

        return hang

    async def _flaky_tool(self) -> None:
        raise ConnectionResetError("Connection reset by peer")

    def _backoff_tool(self, key: str, variant: str) -> Callable[[], Awaitable[None]]:
        async def backoff() -> None:
            now = anyio.current_time()
            failed_at = self.failed_at.pop(key, None)
            if failed_at is None:  # the first attempt fails
                self.failed_at[key] = now
                raise ConnectionResetError("Connection reset by peer")
            self.samples["backoff"][variant].append(now - failed_at - self.timeout_s)

        return backoff

    def _on_event(self, event: Event) -> None:
        if isinstance(event, BreakerOpened) and event.half_open_at is not None:
            self.opened_at[event.tool_id] = event.half_open_at
        elif isinstance(event, BreakerHalfOpened) and event.call_id is None:
            due = self.opened_at.pop(event.tool_id, None)
            if due is not None:
                self.samples["half-open"]["tripwire"].append(anyio.current_time() - due)
            waiter = self.half_opened.get(event.tool_id)
            if waiter is not None:
                waiter.set()

    # --- probes ----------------------------------------------------------------------------

    async def _native_sleep_until(self, due: float) -> None:
        if self.backend == "trio":
            await trio.sleep_until(due)
        else:
            await asyncio.sleep(due - asyncio.get_running_loop().time())

    async def _probe_timeout(self, i: int, variant: str, end: float) -> None:
        hang = self._hang_tool(variant)
        while anyio.current_time() < end:
            if variant == "tripwire":
                await self.engine.try_call(f"hang{i}")
                continue
            try:
                if variant == "anyio":
                    with anyio.fail_after(self.timeout_s):
                        await hang()
                elif self.backend == "trio":
                    with trio.fail_after(self.timeout_s):
                        await hang()
                else:
                    async with asyncio.timeout(self.timeout_s):
                        await hang()
            except (TimeoutError, trio.TooSlowError):
                pass

    async def _probe_half_open(self, i: int, variant: str, end: float) -> None:
        tool = f"flaky{i}"
        while anyio.current_time() < end:
            if variant == "tripwire":
                self.half_opened[tool] = waiter = anyio.Event()
                await self.engine.try_call(tool)  # fails: the breaker opens
                await waiter.wait()
                continue
            due = anyio.current_time() + self.timeout_s
            if variant == "anyio":
                await anyio.sleep_until(due)
            else:
                await self._native_sleep_until(due)
            self.samples["half-open"][variant].append(anyio.current_time() - due)

    async def _probe_backoff(self, i: int, variant: str, end: float) -> None:
        key = f"backoff{i}-{variant}"
        fails = self._backoff_tool(key, variant)
        while anyio.current_time() < end:
            if variant == "tripwire":
                await self.engine.try_call(f"backoff{i}")
                continue
            try:
                await fails()
            except ConnectionResetError:
                if variant == "anyio":
                    await anyio.sleep(self.timeout_s)
                elif self.backend == "trio":
                    await trio.sleep(self.timeout_s)
                else:
                    await asyncio.sleep(self.timeout_s)
                await fails()

    async def window(self) -> Samples:
        """Every variant of every timer at once for ``--duration`` seconds; their lateness samples."""
        self.samples = defaultdict(lambda: defaultdict(list))
        end = anyio.current_time() + self.args.duration
        probes = {
            "timeout": self._probe_timeout,
            "half-open": self._probe_half_open,
            "backoff": self._probe_backoff,
        }
        async with anyio.create_task_group() as tg:
            for i in range(self.args.probes):
                for timer in TIMERS:
                    for variant in VARIANTS:
                        tg.start_soon(probes[timer], i, variant, end)
        return self.samples


async def run_backend(backend: str, args: argparse.Namespace) -> dict[str, list[Samples]]:
    windows: dict[str, list[Samples]] = {}
    for load in (0, args.load):
        bench = Bench(backend, args)
        async with bench.engine, anyio.create_task_group() as load_group:
            for _ in range(load):
                load_group.start_soon(bench.engine.try_call, "load")
            await anyio.sleep(0.2)  # the load under way
            windows[f"load {load}"] = [await bench.window() for _ in range(args.repeat)]
            load_group.cancel_scope.cancel()
        bench.engine.close()
    return windows


def summarise(windows: list[Samples]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for timer in TIMERS:
        rows: dict[str, Any] = {}
        for variant in VARIANTS:
            per = [w[timer][variant] for w in windows]
            rows[variant] = {
                "samples": sum(len(s) for s in per),
                "p50_ms": [percentile(s, 0.50) * 1e3 for s in per],
                "p99_ms": [percentile(s, 0.99) * 1e3 for s in per],
                "max_ms": [max(s, default=float("nan")) * 1e3 for s in per],
                "p99_pooled_ms": percentile([x for s in per for x in s], 0.99) * 1e3,
            }
        rows["ratio_p99_tripwire_to_native"] = [
            t / n if n > 0 else float("nan")
            for t, n in zip(rows["tripwire"]["p99_ms"], rows["native"]["p99_ms"], strict=True)
        ]
        out[timer] = rows
    return out


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", nargs="+", default=["asyncio", "trio"], choices=["asyncio", "trio"])
    parser.add_argument("--load", type=int, default=1000, help="engine calls in flight under load")
    parser.add_argument("--work-us", type=float, default=10.0, help="CPU each load call spins per step")
    parser.add_argument("--timer-ms", type=float, default=20.0, help="timeout, open period and backoff delay")
    parser.add_argument("--probes", type=int, default=8, help="tasks per timer and variant")
    parser.add_argument("--duration", type=float, default=1.5, help="seconds per window")
    parser.add_argument("--repeat", type=int, default=5, help="windows per backend and load")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    for backend in args.backend:
        windows = anyio.run(run_backend, backend, args, backend=backend)
        results[backend] = {load: summarise(ws) for load, ws in windows.items()}
    if args.json:
        report = {"args": vars(args), "python": platform.python_version(), "results": results}
        print(json.dumps(report, indent=2))
        return
    print(f"lateness in ms, median of {args.repeat} windows (min–max); timers of {args.timer_ms:g} ms")
    print("| backend | load | timer | tripwire p50 | tripwire p99 | anyio p99 | native p99 | p99 ratio |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for backend, loads in results.items():
        for load, timers in loads.items():
            for timer, rows in timers.items():
                print(
                    f"| {backend} | {load} | {timer} | {spread(rows['tripwire']['p50_ms'])} "
                    f"| {spread(rows['tripwire']['p99_ms'])} | {spread(rows['anyio']['p99_ms'])} "
                    f"| {spread(rows['native']['p99_ms'])} "
                    f"| {spread(rows['ratio_p99_tripwire_to_native'], '{:.2f}')} |"
                )
    print(f"native: {', '.join(f'{b}: {NATIVE[b]}' for b in args.backend)}")


if __name__ == "__main__":
    main()
