"""Trace store open time against its size.

    python bench/store_open.py [--sizes 10,100,500] [--repeat 5] [--json]

Builds one store in a temporary directory (a few thousand real turns written through
``TraceStore.write``, then grown with copies of its events in big SQL batches: opening depends on
the file's size, not on what its rows say) and, at each size in MB, times side by side, interleaved,
``--repeat`` times each:

* ``TraceStore(path)``: read-write with the default ``verify`` (integrity checked when warranted:
  this store was closed cleanly, so not);
* ``TraceStore(path, verify=True)``: read-write, ``PRAGMA quick_check`` on every open (what every
  open did before schema 5's tripwire);
* ``TraceStore(path, readonly=True)``: read-only, the default.

Medians with the spread (min–max) in ms; the target is ≤ 20 ms at any size for the default open.
On a tree without ``verify=None`` (before) the default open is the checking one: run it against
either tree with ``PYTHONPATH=<tree> python bench/store_open.py``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.events import AttemptStarted, CallSucceeded, Event, TurnFinished, TurnStarted
from engine.store import TraceStore

T0 = 1_762_338_645.0


def turn(n: int) -> list[Event]:
    turn_id, at = f"t{n}", T0 + n
    out: list[Event] = [TurnStarted(at=at, t=n, turn_id=turn_id, calls=("c",), deadline_ms=30_000.0)]
    for attempt in (1, 2):
        out.append(AttemptStarted(at=at, t=n, tool_id="search", call_id="c", turn_id=turn_id, attempt=attempt,
                                  timeout_ms=5000.0, deadline=n + 5.0))  # fmt: skip
    out.append(CallSucceeded(at=at, t=n, tool_id="search", call_id="c", turn_id=turn_id, attempts=2,
                             latency_ms=40.0, value={"hits": ["x" * 40] * 4}))  # fmt: skip
    out.append(TurnFinished(at=at, t=n, turn_id=turn_id, summary="ok", statuses={"c": "succeeded"},
                            executed=1, duration_ms=40.0, outcome="ok"))  # fmt: skip
    return out


def build(path: Path) -> None:
    with TraceStore(path) as store:
        for start in range(0, 5000, 1000):
            store.write([e for n in range(start, start + 1000) for e in turn(n)])


def grow(path: Path, megabytes: float) -> float:
    """Copy events (outside turns) until the file holds ``megabytes``; returns its size in MB."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        # No journal while growing (the store is not in use): the file is written once.
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        target = megabytes * 1e6
        while (used := conn.execute("PRAGMA page_count").fetchone()[0] * page) < target:
            rows = max(1000, min(500_000, int((target - used) / 250)))
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO events (turn_id, call_id, tool_id, event_type, at, t, data, turn)"
                " SELECT turn_id, call_id, tool_id, event_type, at, t, data, NULL FROM events"
                " WHERE event_type = 'CallSucceeded' LIMIT ?",
                (rows,),
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()
    return path.stat().st_size / 1e6


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def opens(path: Path, repeat: int) -> dict[str, list[float]]:
    ways: dict[str, Callable[[], None]] = {
        "default": lambda: TraceStore(path).close(),
        "quick_check": lambda: TraceStore(path, verify=True).close(),
        "readonly": lambda: TraceStore(path, readonly=True).close(),
    }
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for way in ways.values():  # a first open of each warms the file cache
        way()
    for _ in range(repeat):
        for name, way in ways.items():
            samples[name].append(timed(way))
    return samples


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="10,100,500", help="store sizes in MB, ascending (default 10,100,500)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="opens of each kind at each size")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tripwire-bench-") as tmp:
        path = Path(tmp) / "traces.db"
        build(path)
        for size in sizes:
            megabytes = grow(path, size)
            samples = opens(path, args.repeat)
            row: dict[str, Any] = {"mb": round(megabytes, 1)}
            for name, values in samples.items():
                row[name] = {
                    "median_ms": round(statistics.median(values), 2),
                    "min_ms": round(min(values), 2),
                    "max_ms": round(max(values), 2),
                }
            row["ratio"] = round(row["default"]["median_ms"] / row["quick_check"]["median_ms"], 4)
            rows.append(row)
    report = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version, "repeat": args.repeat,
              "sizes": rows}  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
        return report
    print(
        f"Trace store open — Python {report['python']}, SQLite {report['sqlite']},"
        f" median (min–max) of {args.repeat}\n"
    )
    print("| store | open (default) | open, quick_check every time | read-only open | default / checking |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        cells = [f"{row[k]['median_ms']:,.1f} ms ({row[k]['min_ms']:,.1f}–{row[k]['max_ms']:,.1f})"
                 for k in ("default", "quick_check", "readonly")]  # fmt: skip
        print(f"| {row['mb']:,.0f} MB | {' | '.join(cells)} | {row['ratio']:.3f}× |")
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
