"""Replay of a recorded one-hour scenario on virtual time.

    python bench/replay.py [--hours 1.0]

Records the bundled demo scenario, repeated until an hour of engine time has passed, into a
temporary trace store (on a virtual clock); then loads every turn back from SQLite and
replays it on virtual time, checking that each replay matches its recording. Prints the
time the replays take (target ≤ 2 s for one hour).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import anyio
import trio.testing

from engine.clock import VirtualWallClock
from engine.demo import demo_engine
from engine.faults import FaultInjector
from engine.replay import Recording, replay_all_on_virtual_time
from engine.scenario import load_scenario, run_scenario
from engine.store import TraceRecorder, TraceStore

ROOT = Path(__file__).parents[1]


def record(store_path: Path, hours: float) -> tuple[int, float]:
    """Record the demo until ``hours`` of engine time have passed; returns (turns, seconds)."""
    scenario = load_scenario(ROOT / "manifests" / "demo" / "scenario.yaml")
    assert scenario.faults is not None
    engine = demo_engine(
        ROOT / "manifests",
        faults=FaultInjector(scenario.faults),
        seed=scenario.spec.seed,
        wall_clock=VirtualWallClock(1_762_338_645.0),
        record=True,
    )
    store = TraceStore(store_path)
    recorder = TraceRecorder(store, durability="batch").attach(engine)

    async def main() -> tuple[int, float]:
        turns, start = 0, anyio.current_time()
        async with engine:
            while anyio.current_time() - start < hours * 3600:
                turns += len(await run_scenario(engine, scenario, run=f"r{turns // 6 + 1}"))
        return turns, anyio.current_time() - start

    try:
        return anyio.run(
            main, backend="trio", backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)}
        )
    finally:
        recorder.close()
        store.close()
        engine.close()


def replay_all(store_path: Path) -> tuple[int, int, float]:
    """Replay every stored turn; returns (turns, events, seconds)."""
    with TraceStore(store_path, readonly=True, verify=False) as store:
        turn_ids, cursor = [], None
        while True:
            page = store.list_turns(limit=500, cursor=cursor)
            turn_ids += [row.turn_id for row in page.rows]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        started = time.perf_counter()
        recordings = []
        for turn_id in turn_ids:
            stored = store.load_turn(turn_id)
            recordings.append(Recording.from_events(stored.events, store.manifest))
        for report in replay_all_on_virtual_time(recordings):
            if not report.matches:
                raise SystemExit(f"replay of {report.turn_id} differs: {report.mismatches[:3]}")
        events = sum(len(r.events) for r in recordings)
        return len(turn_ids), events, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "traces.db"
        recorded, engine_seconds = record(path, args.hours)
        turns, events, seconds = replay_all(path)
    assert turns == recorded
    result = {"turns": turns, "events": events, "engine_seconds": engine_seconds, "replay_seconds": seconds}
    if args.json:
        print(json.dumps(result))
        return
    scale = f"{turns} turns, {events:,} events, {engine_seconds:,.0f} s of engine time"
    print(f"Python {platform.python_version()}: {scale}")
    print(f"replayed from SQLite on virtual time in {seconds:.2f} s, every decision matching (target ≤ 2 s)")


if __name__ == "__main__":
    main()
