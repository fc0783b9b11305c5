"""What fleet mode costs and how fast it shares, against a real ``redis-server`` this script starts.

    python bench/fleet.py [--calls 20000] [--repeat 5] [--engines 4] [--json]
    python bench/fleet.py --processes 8 [--trips 20] [--json]

Three figures, all in one asyncio process:

* per-call overhead: a guarded call on an engine with a :class:`~engine.fleet.Fleet` attached
  against the same call on a local engine with events on (a direct subscriber appending to a
  deque, as bench/call_overhead.py) and with no subscriber; interleaved repeats, the median of
  each with its min–max spread. Every 100 calls the loop yields, so the fleet's task runs
  inside the measurement (its share of the loop counts). Target: at most +1 µs per call;
* Redis commands per second per process while calling at about 2,000 and 8,000 calls per
  second for ``--seconds`` (the server's own count, ``INFO commandstats``): it must not grow
  with the call rate (one round trip per ``sync_ms`` carries everything);
* an operator trip's propagation: ``--engines`` engines each with its own Fleet; the time from
  ``send_command`` until each engine announced the trip, p50 and p99 over ``--trips`` trips.

With ``--processes N``, only the figure issue 17 asks for, across processes: N real
``tripwire serve --fleet`` processes (each with its own trace store, a workload that registers
one tool and waits), and an operator trip (then a reset, alternately) sent with ``send_command``;
its propagation to each process is the time from sending until that process applied it (the
``at`` of its acknowledgement, the same host's wall clock), p50 and p99 over N × ``--trips``.
Target: p99 ≤ 200 ms (with ``sync_ms`` 100, the default).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import Engine, ToolManifest
from engine.events import Event
from engine.fleet import (
    Fleet,
    FleetAction,
    FleetClient,
    acknowledgements,
    parse_fleet_url,
    read_fleet,
    send_command,
)

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = """
import anyio


async def tool() -> int:
    return 1


async def run(engine) -> None:
    engine.register("tool", tool)
    await anyio.sleep_forever()
"""


async def tool() -> int:
    return 1


def start_redis(directory: str) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("bench/fleet.py needs a redis-server binary on PATH")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 5
    while True:
        try:
            client.ping()
            return server, port
        except redis.exceptions.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def make_engine() -> Engine:
    engine = Engine([ToolManifest(id="tool")], rng=random.Random(1))
    engine.register("tool", tool)
    return engine


async def per_call(engine: Engine, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        await engine.call("tool")
        if i % 100 == 99:
            await anyio.sleep(0)
    return (time.perf_counter() - start) / calls * 1e6


async def overhead(url: str, calls: int, repeat: int) -> dict[str, dict[str, float]]:
    bare, local, fleet_engine = make_engine(), make_engine(), make_engine()
    sink: deque[object] = deque(maxlen=10_000)
    local.subscribe(sink.append, direct=True)
    samples: dict[str, list[float]] = {"local, no subscriber": [], "local, events on": [], "fleet on": []}
    async with bare, local, fleet_engine, Fleet(fleet_engine, url):
        for engine in (bare, local, fleet_engine):
            await per_call(engine, calls // 10)  # warm up
        for _ in range(repeat):
            samples["local, no subscriber"].append(await per_call(bare, calls))
            samples["local, events on"].append(await per_call(local, calls))
            samples["fleet on"].append(await per_call(fleet_engine, calls))
    return {
        name: {"median": statistics.median(values), "min": min(values), "max": max(values)}
        for name, values in samples.items()
    }


def redis_commands(port: int) -> int:
    stats = redis.Redis(port=port).info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


async def commands_per_second(url: str, port: int, rate: int, seconds: float) -> dict[str, float]:
    engine = make_engine()
    async with engine, Fleet(engine, url) as fleet:
        before, sent_before = redis_commands(port), fleet.commands_sent
        start = time.monotonic()
        per_tick = max(rate // 100, 1)
        calls = 0
        while (elapsed := time.monotonic() - start) < seconds:
            for _ in range(per_tick):
                await engine.call("tool")
            calls += per_tick
            await anyio.sleep(max(calls / rate - (time.monotonic() - start), 0))
        server = redis_commands(port) - before
        client = fleet.commands_sent - sent_before
    return {
        "calls_per_s": calls / elapsed,
        "server_commands_per_s": server / elapsed,
        "client_commands_per_s": client / elapsed,
    }


def percentiles(latencies: list[float]) -> dict[str, float]:
    latencies = sorted(latencies)
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)],
        "max_ms": latencies[-1],
    }


async def propagation(url: str, engines: int, trips: int) -> dict[str, float]:
    key = os.urandom(32)
    arrived: list[dict[str, float]] = []
    latencies: list[float] = []
    async with AsyncExitStack() as stack:
        for index in range(engines):
            engine = make_engine()
            engine.runtime.wall_clock = time.time
            seen: dict[str, float] = {}
            arrived.append(seen)

            def note(event: Event, seen: dict[str, float] = seen) -> None:
                if event.event_type in ("BreakerTripped", "BreakerReset"):
                    seen[event.event_type] = time.perf_counter()

            engine.subscribe(note, direct=True)
            await stack.enter_async_context(engine)
            await stack.enter_async_context(Fleet(engine, url, key=key, rng=random.Random(index)))
        client = FleetClient(parse_fleet_url(url))
        stack.push_async_callback(client.aclose)
        for trip in range(trips):
            action: FleetAction = "trip" if trip % 2 == 0 else "reset"
            kind = "BreakerTripped" if action == "trip" else "BreakerReset"
            for seen in arrived:
                seen.pop(kind, None)
            sent = time.perf_counter()
            await send_command(client, action, "tool", key=key, reason="bench")
            with anyio.fail_after(5):
                while not all(kind in seen for seen in arrived):
                    await anyio.sleep(0.001)
            latencies += [(seen[kind] - sent) * 1000 for seen in arrived]
            await anyio.sleep(random.uniform(0, 0.1))  # land anywhere in the sync period
    return {"engines": engines, "trips": trips, **percentiles(latencies)}


def serve_processes(directory: Path, url: str, count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` ``tripwire serve --fleet`` processes, each with its own trace store and log."""
    (directory / "agent.py").write_text(WORKLOAD)
    (directory / "manifests").mkdir()
    processes = []
    for n in range(count):
        command = [
            sys.executable, "-m", "console", "serve", "--manifests", str(directory / "manifests"),
            "--traces", str(directory / f"p{n}.db"), "--workload", f"{directory / 'agent.py'}:run",
            "--fleet", url,
        ]  # fmt: skip
        with open(directory / f"p{n}.log", "wb") as log:
            processes.append(subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log))
    return processes


async def process_propagation(url: str, key: bytes, count: int, trips: int) -> dict[str, Any]:
    """An operator trip's (or reset's) propagation to ``count`` served processes (see the docstring)."""
    client = FleetClient(parse_fleet_url(url))
    try:
        with anyio.fail_after(60):
            while True:
                view = await read_fleet(client)
                if sum(m.status == "live" and "tool" in m.breakers for m in view.members) == count:
                    break
                await anyio.sleep(0.1)
        latencies: list[float] = []
        for trip in range(trips):
            action: FleetAction = "trip" if trip % 2 == 0 else "reset"
            sent_at = time.time()
            sent = await send_command(client, action, "tool", key=key, reason="bench", now=sent_at)
            with anyio.fail_after(10):
                while len(acks := await acknowledgements(client, sent.id)) < count:
                    await anyio.sleep(0.005)
            if any(ack.status != "applied" for ack in acks.values()):
                raise SystemExit(f"not applied everywhere: {acks}")
            latencies += [(ack.at - sent_at) * 1000 for ack in acks.values()]
            await anyio.sleep(random.uniform(0, 0.1))  # land anywhere in the sync period
    finally:
        await client.aclose()
    return {"processes": count, "trips": trips, **percentiles(latencies)}


def run_processes(args: argparse.Namespace, directory: str, port: int) -> dict[str, Any]:
    key_file = Path(directory) / "fleet.key"
    key = os.urandom(32)
    key_file.write_bytes(key)
    key_file.chmod(0o600)
    url = f"redis://127.0.0.1:{port}/0?namespace=processes&key_file={key_file}"
    processes = serve_processes(Path(directory), url, args.processes)
    try:
        return {"process_propagation": anyio.run(process_propagation, url, key, args.processes, args.trips)}
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


async def run(args: argparse.Namespace, port: int) -> dict[str, Any]:
    base = f"redis://127.0.0.1:{port}/0?namespace="
    results: dict[str, Any] = {"per_call_us": await overhead(base + "overhead", args.calls, args.repeat)}
    results["commands"] = [
        await commands_per_second(base + f"rate{rate}", port, rate, args.seconds) for rate in (2_000, 8_000)
    ]
    results["propagation"] = await propagation(base + "propagation", args.engines, args.trips)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000, help="calls per repeat for the overhead")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each call rate runs")
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--trips", type=int, default=20)
    parser.add_argument(
        "--processes", type=int, default=0, help="only the trip's propagation to this many served processes"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server, port = start_redis(directory)
        try:
            many = args.processes > 0
            results = run_processes(args, directory, port) if many else anyio.run(run, args, port)
        finally:
            server.kill()
            server.wait()
    if args.processes:
        prop = results["process_propagation"]
        if args.json:
            print(json.dumps(results, indent=2))
            return
        print(
            f"operator trip to {prop['processes']} tripwire serve --fleet processes, {prop['trips']} trips:"
            f" p50 {prop['p50_ms']:.0f} ms, p99 {prop['p99_ms']:.0f} ms, max {prop['max_ms']:.0f} ms"
            " (target p99 ≤ 200)"
        )
        return
    per_call = results["per_call_us"]
    results["fleet_minus_events_on_us"] = (
        per_call["fleet on"]["median"] - per_call["local, events on"]["median"]
    )
    results["fleet_minus_no_subscriber_us"] = (
        per_call["fleet on"]["median"] - per_call["local, no subscriber"]["median"]
    )
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"per-call cost, median of {args.repeat} interleaved repeats of {args.calls:,} calls (min–max)")
    for name, figures in per_call.items():
        print(f"  {name:22} {figures['median']:6.2f} µs  ({figures['min']:.2f}–{figures['max']:.2f})")
    print(f"  fleet on − local events on:     {results['fleet_minus_events_on_us']:+.2f} µs (target ≤ +1)")
    print(f"  fleet on − local no subscriber: {results['fleet_minus_no_subscriber_us']:+.2f} µs")
    for figures in results["commands"]:
        print(
            f"at {figures['calls_per_s']:,.0f} calls/s: {figures['server_commands_per_s']:.1f} Redis"
            f" commands/s (server count; {figures['client_commands_per_s']:.1f}/s sent by the process)"
        )
    prop = results["propagation"]
    print(
        f"operator trip to {prop['engines']} engines, {prop['trips']} trips: p50 {prop['p50_ms']:.0f} ms,"
        f" p99 {prop['p99_ms']:.0f} ms, max {prop['max_ms']:.0f} ms (target p99 ≤ 200)"
    )


if __name__ == "__main__":
    main()
