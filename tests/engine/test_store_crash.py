"""Crash safety: SIGKILL a process in the middle of recording turns, then check the store.

The worker (crash_worker.py) announces each turn only after ``run_turn`` returned, which with
``durability="turn"`` means after its events were committed. Every announced turn must be
intact, the file must open and pass SQLite's checks, and nothing may be half-written: the
derived rows (turns, attempts, turn_tools) must agree with the events they come from, since
each batch is one transaction.
"""

from __future__ import annotations

import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.events import AttemptFailed, AttemptStarted, CallSucceeded, TurnFinished, TurnStarted
from engine.store import TraceStore

ROOT = Path(__file__).resolve().parents[2]
WANTED = 20


def run_and_kill(path: Path, stderr_path: Path) -> dict[str, int]:
    """Start the worker, read DONE lines until ``WANTED`` turns are reported, SIGKILL it."""
    done: dict[str, int] = {}
    lines: queue.Queue[str | None] = queue.Queue()
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.engine.crash_worker", str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert proc.stdout is not None
        stdout = proc.stdout

        def read() -> None:
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 8
        while len(done) < WANTED:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                pytest.fail(f"only {len(done)} turns reported in time: {stderr_path.read_text()[-2000:]}")
            if line is None:
                pytest.fail(f"the worker exited early: {stderr_path.read_text()[-2000:]}")
            word, turn_id, count = line.split()
            assert word == "DONE"
            done[turn_id] = int(count)
        # The worker went on at once: the next turn's batches are being written as it is killed.
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(5) == -signal.SIGKILL
        while (line := lines.get(timeout=5)) is not None:  # reported before the kill: must be intact too
            word, turn_id, count = line.split()
            done[turn_id] = int(count)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()
    return done


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
