"""Crash safety: SIGKILL a process in the middle of recording turns, then check the store.

The worker (crash_worker.py) announces each turn only after ``run_turn`` returned, which with
``durability="turn"`` means after its events were committed. Every announced turn must be
intact, the file must open and pass SQLite's checks, and nothing may be half-written: the
derived rows (turns, attempts, turn_tools) must agree with the events they come from, since
each batch is one transaction.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from engine.events import AttemptFailed, AttemptStarted, CallSucceeded, TurnFinished, TurnStarted
from engine.store import TraceStore
from tests.crash import CrashWorker

WANTED = 20


def run_and_kill(path: Path, stderr_path: Path) -> dict[str, int]:
    """Start the worker, wait until ``WANTED`` turns are announced, SIGKILL it: the turns announced."""
    with CrashWorker(path, stderr_path) as worker:
        worker.wait_for(WANTED, time.monotonic() + 8)
        # The worker went on at once: the next turn's batches are being written as it is killed.
        worker.kill()  # turns announced before the kill must be intact too
    return worker.announced


def test_a_killed_recorder_leaves_every_reported_turn_intact(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    done = run_and_kill(path, tmp_path / "stderr.txt")

    with TraceStore(path, readonly=True) as store:  # it opens (quick_check included)
        for turn_id, count in done.items():
            stored = store.load_turn(turn_id)
            assert stored.row.outcome != "running", turn_id
            assert len(stored.events) == count, turn_id
            assert isinstance(stored.events[0], TurnStarted) and isinstance(stored.events[-1], TurnFinished)
            assert sum(isinstance(e, TurnFinished) for e in stored.events) == 1

        turns = store.list_turns(limit=10_000).rows
        assert {r.turn_id for r in turns} >= set(done)
        for row in turns:
            stored = store.load_turn(row.turn_id)
            finished = [e for e in stored.events if isinstance(e, TurnFinished)]
            assert isinstance(stored.events[0], TurnStarted)
            if row.outcome == "running":
                assert not finished, f"{row.turn_id}: a TurnFinished without its turn row's update"
            else:
                assert finished and finished[0].outcome == row.outcome, row.turn_id
            # Attempts of each call are numbered without gaps, and each has its row in attempts.
            started: dict[tuple[str, str], list[int]] = {}
            for e in stored.events:
                if isinstance(e, AttemptStarted):
                    started.setdefault((e.call_id, e.tool_id), []).append(e.attempt)
            assert all(n == list(range(1, len(n) + 1)) for n in started.values()), row.turn_id
            concluded = [e for e in stored.events if isinstance(e, AttemptFailed | CallSucceeded)]
            assert len(stored.attempts) == len(concluded), row.turn_id
            used = {e.tool_id for e in stored.events if hasattr(e, "call_id") and getattr(e, "tool_id", None)}
            assert used <= set(row.tools), row.turn_id

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        # Derived rows agree with the events everywhere: no batch was half-written.
        started = one("SELECT count(*) FROM events WHERE event_type = 'TurnStarted'")
        assert one("SELECT count(*) FROM turns") == started
        assert one("SELECT count(*) FROM turns WHERE outcome != 'running'") == one(
            "SELECT count(*) FROM events WHERE event_type = 'TurnFinished'"
        )
        assert one("SELECT count(*) FROM attempts") == one(
            "SELECT count(*) FROM events WHERE event_type IN ('ToolError', 'CallSucceeded')"
        )
        orphans = one(
            "SELECT count(*) FROM attempts a LEFT JOIN events e ON e.id = a.event_id"
            " WHERE e.event_type IS NULL OR e.event_type NOT IN ('ToolError', 'CallSucceeded')"
        )
        assert orphans == 0
        assert one("SELECT count(*) FROM events WHERE turn_id IS NOT NULL AND turn IS NULL") == 0
    finally:
        conn.close()
