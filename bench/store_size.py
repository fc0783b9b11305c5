"""Trace store size: bytes per event and per turn.

    python bench/store_size.py [--events 200000] [--demo-runs 20] [--tables] [--json]

Measures, in a temporary directory, the data a store holds (its pages in use, once closed) for:

* the realistic workload of bench/trace_store.py: turns of 5 calls whose attempts fail and are
  retried, now and then a breaker going open → half-open → closed (23 events a turn), written
  through ``TraceStore.write`` in batches of 2,000;
* the bundled demo (``tripwire demo``: the travel-agent tools through a scripted outage, with
  the breakers and manifests each turn starts with), recorded ``--demo-runs`` times into one store.

``--tables`` adds the bytes per event of each table and index (SQLite's dbstat). Sizes are exact,
not timed: one run is enough. It imports only ``engine`` and ``console``, so it measures either
tree: ``PYTHONPATH=<tree> python bench/store_size.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from trace_store import stream  # the same realistic workload, one definition

from console.cli.run import run_command
from engine.locations import bundled_manifests
from engine.store import SCHEMA_VERSION, TraceStore


def realistic(path: Path, events: int, batch: int = 2000) -> None:
    it = stream()
    with TraceStore(path) as store:
        written = 0
        while written < events:
            chunk = [next(it) for _ in range(min(batch, events - written))]
            store.write(chunk)
            written += len(chunk)


def demo(path: Path, runs: int) -> None:
    """The bundled demo scenario, recorded ``runs`` times (its report thrown away)."""
    scenario = bundled_manifests() / "demo" / "scenario.yaml"
    quiet = Console(file=io.StringIO())
    for _ in range(runs):
        with contextlib.redirect_stdout(io.StringIO()):
            run_command(
                scenario, bundled_manifests(), real_time=False, as_json=True, console=quiet, traces=path
            )


def measure(path: Path, tables: bool) -> dict[str, Any]:
    """Bytes in use (pages minus free pages) per event and per turn; per table with ``tables``."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def one(sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])

    try:
        events, turns = one("SELECT count(*) FROM events"), one("SELECT count(*) FROM turns")
        used = (one("PRAGMA page_count") - one("PRAGMA freelist_count")) * one("PRAGMA page_size")
        out: dict[str, Any] = {
            "events": events,
            "turns": turns,
            "bytes": used,
            "bytes_per_event": round(used / events, 1),
            "bytes_per_turn": round(used / max(turns, 1)),
        }
        if tables:
            rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")
            out["per_event_by_table"] = {
                name: round(size / events, 1) for name, size in rows if size / events >= 0.5
            }
    finally:
        conn.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=200_000, help="events of the realistic workload")
    parser.add_argument("--demo-runs", type=int, default=20, help="times the demo is recorded")
    parser.add_argument("--tables", action="store_true", help="bytes per event of each table and index")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tripwire-bench-") as tmp:
        realistic(Path(tmp) / "realistic.db", args.events)
        demo(Path(tmp) / "demo.db", args.demo_runs)
        report: dict[str, Any] = {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "schema": SCHEMA_VERSION,
            "realistic": measure(Path(tmp) / "realistic.db", args.tables),
            "demo": measure(Path(tmp) / "demo.db", args.tables),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return report
    print(f"Trace store size — schema {report['schema']}, SQLite {report['sqlite']}\n")
    print("| workload | events | turns | bytes/event | bytes/turn |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in ("realistic", "demo"):
        r = report[name]
        print(
            f"| {name} | {r['events']:,} | {r['turns']:,} | {r['bytes_per_event']:,.0f}"
            f" | {r['bytes_per_turn']:,} |"
        )
    for name in ("realistic", "demo") if args.tables else ():
        print(f"\n{name}, bytes per event by table and index:")
        for table, size in report[name]["per_event_by_table"].items():
            print(f"  {table:32} {size:8.1f}")
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
