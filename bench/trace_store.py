"""Trace store throughput and latency.

    python bench/trace_store.py [--events 200000] [--batch 2000] [--big 1000000] [--repeat 3] [--json]

Measures, on a fresh store in a temporary directory:

* the sustained insert rate through ``TraceStore.write`` in batches of realistic events (per
  call: attempts that fail and are retried, the success, now and then breaker transitions —
  about 5 events per call — inside turns of 5 calls), target ≥ 100k events/s;
* the same end to end through ``TraceRecorder``: ``engine.runtime.publish`` → the sink's deque → the
  writer thread → committed (``flush`` returns);
* the time to ``load_turn`` a 10k-event turn, target ≤ 100 ms;
* on a 1M-event store (built with big batches), the time to ``list_turns(limit=50)``: the first
  page and a deep page through a cursor, with and without an outcome or tool filter, target
  ≤ 50 ms.

Figures are the best of ``--repeat`` runs (this VM's figures wander); nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import Engine
from engine.events import (
    AttemptFailed,
    AttemptStarted,
    BreakerClosed,
    BreakerHalfOpened,
    BreakerOpened,
    CallSucceeded,
    Event,
    TurnFinished,
    TurnStarted,
)
from engine.kinds import ErrorClass, ErrorKind
from engine.store import TraceRecorder, TraceStore
from engine.strategies.breaker.machine import BreakerState

TOOLS = ("flight_search", "hotel_search", "car_rental", "compare_prices", "create_itinerary")
T0 = 1_762_338_645.0


def turn_events(n: int, at: float, calls: int = 5) -> list[Event]:
    """One turn of ``calls`` calls: call i fails ``i % 3`` times before it succeeds; every fifth
    call's tool goes through open → half-open → closed."""
    turn_id = f"t{n}"
    ids = [f"c{i}" for i in range(calls)]
    spec = {
        "id": turn_id,
        "deadline_s": 300.0,
        "calls": [
            {"id": cid, "tool": TOOLS[i % len(TOOLS)], "args": {"city": "New York"}, "depends_on": []}
            for i, cid in enumerate(ids)
        ],
    }
    out: list[Event] = [
        TurnStarted(
            at=at, t=at - T0, turn_id=turn_id, calls=tuple(ids), deadline_ms=300_000.0, spec=spec, seed="5eed"
        )
    ]
    for i, cid in enumerate(ids):
        tool = TOOLS[i % len(TOOLS)]
        t = at - T0 + i * 0.01
        for attempt in range(1, i % 3 + 2):
            out.append(
                AttemptStarted(
                    at=at, t=t, tool_id=tool, call_id=cid, turn_id=turn_id, attempt=attempt,
                    timeout_ms=5000.0, deadline=t + 5.0,
                )
            )  # fmt: skip
            if attempt <= i % 3:
                out.append(
                    AttemptFailed(
                        at=at, t=t, tool_id=tool, call_id=cid, turn_id=turn_id, attempt=attempt,
                        error="HTTP 503: Service Unavailable", error_type="HTTPStatusError",
                        kind=ErrorKind.SERVICE_UNAVAILABLE, classification=ErrorClass.TRANSIENT,
                        rule="status_code", reason="status 503: transient", status_code=503,
                        circuit_breaker_state=BreakerState.CLOSED, retry_count=attempt - 1,
                        decision="retry", decision_reason="transient; retry in 100 ms", delay_ms=100.0,
                        latency_ms=12.5,
                    )
                )  # fmt: skip
        if i % 5 == 4:
            for cls, a, b in (
                (BreakerOpened, BreakerState.CLOSED, BreakerState.OPEN),
                (BreakerHalfOpened, BreakerState.OPEN, BreakerState.HALF_OPEN),
                (BreakerClosed, BreakerState.HALF_OPEN, BreakerState.CLOSED),
            ):
                out.append(
                    cls(
                        at=at, t=t, tool_id=tool, from_state=a, to_state=b, reason="5 consecutive failures",
                        actor="engine", consecutive_failures=5, call_id=cid, turn_id=turn_id,
                    )
                )  # fmt: skip
        out.append(
            CallSucceeded(
                at=at, t=t, tool_id=tool, call_id=cid, turn_id=turn_id, attempts=i % 3 + 1,
                latency_ms=40.0, attempt_ms=12.0, value={"price": 129.5, "currency": "USD"},
            )
        )  # fmt: skip
    out.append(
        TurnFinished(
            at=at + 0.05, t=at - T0 + 0.05, turn_id=turn_id,
            summary="Completed flight search, hotel search and car rental.",
            statuses=dict.fromkeys(ids, "succeeded"), executed=calls, duration_ms=50.0,
            outcome="ok" if n % 4 else "degraded",
        )
    )  # fmt: skip
    return out


def stream(start: int = 0) -> Iterator[Event]:
    n = start
    while True:
        yield from turn_events(n, T0 + n * 0.1)
        n += 1


def take(it: Iterator[Event], count: int) -> list[Event]:
    return [next(it) for _ in range(count)]


def settle() -> None:
    """Move what the benchmark built so far out of the collector's way.

    A live engine's events are short-lived: created, recorded, dropped. The benchmark keeps
    hundreds of thousands of them in lists, which the cyclic GC would otherwise rescan over and
    over while the store works; that would measure the benchmark, not the store.
    """
    gc.collect()
    gc.freeze()


def discard(path: Path) -> None:
    """Remove a store and its WAL files: runs must not pile hundreds of MB onto the disk."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def insert_rate(directory: Path, events: int, batch: int, repeat: int) -> float:
    """events/s through store.write, batches of ``batch``, on a fresh store each run."""

    def run() -> float:
        path = directory / f"insert-{time.monotonic_ns()}.db"
        data = take(stream(), events)
        batches = [data[i : i + batch] for i in range(0, len(data), batch)]
        settle()
        with TraceStore(path) as store:
            start = time.perf_counter()
            for chunk in batches:
                store.write(chunk)
            rate = len(data) / (time.perf_counter() - start)
        discard(path)
        return rate

    return max(run() for _ in range(repeat))


def recorder_rate(directory: Path, events: int, repeat: int) -> float:
    """events/s from engine.runtime.publish to committed, through the recorder's sink and writer thread."""

    def run() -> float:
        path = directory / f"recorder-{time.monotonic_ns()}.db"
        data = take(stream(), events)
        engine = Engine([])
        settle()
        with TraceStore(path) as store:
            recorder = TraceRecorder(store, durability="batch").attach(engine)
            publish = engine.runtime.publish
            start = time.perf_counter()
            for event in data:
                publish(event)
            assert recorder.flush(60)
            elapsed = time.perf_counter() - start
            recorder.close()
            assert recorder.stats.written == len(data), recorder.stats
        discard(path)
        return len(data) / elapsed

    return max(run() for _ in range(repeat))


def load_big_turn(directory: Path, size: int, repeat: int) -> tuple[float, int]:
    """ms to load_turn one turn of about ``size`` events (plus ordinary turns around it)."""
    path = directory / "bigturn.db"
    calls = size // 5
    while len(turn_events(0, T0, calls=calls)) < size:
        calls += 25
    with TraceStore(path) as store:
        store.write(take(stream(), 5_000))
        big = turn_events(10**9, T0 + 10**5, calls=calls)
        store.write(big)
        store.write(take(stream(20_000), 5_000))
    with TraceStore(path, readonly=True) as store:
        loaded = store.load_turn(f"t{10**9}")
        assert len(loaded.events) == len(big), (len(loaded.events), len(big))
        size = len(big)
        del loaded, big
        settle()

        def run() -> float:
            start = time.perf_counter()
            store.load_turn(f"t{10**9}")
            return (time.perf_counter() - start) * 1000

        return best(run, max(repeat, 5)), size


def big_store(directory: Path, events: int) -> tuple[Path, float]:
    path = directory / "big.db"
    it = stream()
    start = time.perf_counter()
    with TraceStore(path) as store:
        written = 0
        while written < events:
            chunk = take(it, min(50_000, events - written))
            store.write(chunk)
            written += len(chunk)
            del chunk
    return path, time.perf_counter() - start


def page_times(path: Path, repeat: int) -> dict[str, dict[str, float]]:
    """ms per list_turns(limit=50) page: first and deep (via a cursor), plain and filtered."""
    with sqlite3.connect(path) as conn:
        total = conn.execute("SELECT count(*) FROM turns").fetchone()[0]
    with TraceStore(path, readonly=True, verify=False) as store:
        deep_cursor = None
        page = store.list_turns(limit=1000)
        for _ in range(total // 2000):  # halfway down, 1000 turns a page
            page = store.list_turns(limit=1000, cursor=page.next_cursor)
        deep_cursor = page.next_cursor
        out: dict[str, dict[str, float]] = {}
        for label, kwargs in (
            ("all", {}),
            ("outcome=degraded", {"outcome": "degraded"}),
            ("tool=car_rental", {"tool": "car_rental"}),
            ("outcome+tool", {"outcome": "degraded", "tool": "car_rental"}),
        ):
            row: dict[str, float] = {}
            for where, cursor in (("first", None), ("deep", deep_cursor)):
                samples = []
                for _ in range(max(repeat, 5) * 4):
                    start = time.perf_counter()
                    got = store.list_turns(limit=50, cursor=cursor, **kwargs)
                    samples.append((time.perf_counter() - start) * 1000)
                    assert len(got.rows) == 50, (label, where, len(got.rows))
                row[where] = min(samples)
                row[f"{where}_median"] = statistics.median(samples)
            out[label] = row
    return out


def open_times(path: Path) -> dict[str, float]:
    out = {}
    for label, verify in (("open (quick_check)", True), ("open (no check)", False)):
        start = time.perf_counter()
        TraceStore(path, readonly=True, verify=verify).close()
        out[label] = (time.perf_counter() - start) * 1000
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000, help="events per insert-rate run")
    parser.add_argument("--batch", type=int, default=2_000, help="events per store.write call")
    parser.add_argument("--big", type=int, default=1_000_000, help="events in the browsing store")
    parser.add_argument("--turn-events", type=int, default=10_000, help="events in the big turn")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="tripwire-bench-") as tmp:
        directory = Path(tmp)
        write_rate = insert_rate(directory, args.events, args.batch, args.repeat)
        end_to_end = recorder_rate(directory, args.events, args.repeat)
        load_ms, turn_size = load_big_turn(directory, args.turn_events, args.repeat)
        path, build_s = big_store(directory, args.big)
        size_mb = path.stat().st_size / 1e6
        pages = page_times(path, args.repeat)
        opened = open_times(path)

    report: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "insert_events_per_s": round(write_rate),
        "recorder_events_per_s": round(end_to_end),
        "load_turn_ms": round(load_ms, 2),
        "load_turn_events": turn_size,
        "big_store_events": args.big,
        "big_store_build_s": round(build_s, 2),
        "big_store_mb": round(size_mb, 1),
        "list_turns_ms": {k: {w: round(v, 3) for w, v in row.items()} for k, row in pages.items()},
        "open_ms": {k: round(v, 1) for k, v in opened.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return report
    print(f"Trace store — Python {report['python']}, SQLite {report['sqlite']}, best of {args.repeat}\n")
    print("| measure | figure | target |")
    print("| --- | ---: | ---: |")
    print(f"| `store.write`, batches of {args.batch:,} | {write_rate:,.0f} events/s | ≥ 100,000 |")
    print(f"| `TraceRecorder`, publish → committed | {end_to_end:,.0f} events/s | |")
    print(f"| `load_turn`, {turn_size:,}-event turn | {load_ms:.1f} ms | ≤ 100 |")
    build_rate = args.big / build_s
    built = f"{build_s:.1f} s ({build_rate:,.0f} events/s)"
    print(f"| build a {args.big:,}-event store ({size_mb:,.0f} MB) | {built} | |")
    for label, row in pages.items():
        for where in ("first", "deep"):
            figure = f"{row[where]:.2f} ms (median {row[f'{where}_median']:.2f})"
            print(f"| `list_turns(limit=50)`, {label}, {where} page | {figure} | ≤ 50 |")
    for label, ms in opened.items():
        print(f"| {label}, {args.big:,}-event store | {ms:,.0f} ms | |")
    return report


if __name__ == "__main__":
    main()
