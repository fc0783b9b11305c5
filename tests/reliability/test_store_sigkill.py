"""SIGKILL a recording process again and again: no turn stays running, none announced is lost.

Each round starts tests/engine/crash_worker.py on the same store (its opening reconciles the
turns the previous, killed, worker left running), waits for a few turns announced durable and
for the next one to be stored as running, and kills it with SIGKILL, mid-turn. At the end every
announced turn is intact, every other turn is finished or ``interrupted`` (naming the process
that was recording it), none is ``running``, and the file passes SQLite's integrity check with
the derived rows agreeing with the events.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.events import TurnFinished, TurnStarted
from engine.store import TraceStore
from tests.crash import CrashWorker
from tests.serving import served

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 5
TURNS_PER_ROUND = 3
TOOL_MS = 20
"""Each call's time: a turn stays running for tens of milliseconds, long enough to be killed in."""
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")


def kill_after_turns(path: Path, prefix: str, wanted: int) -> tuple[int, dict[str, int]]:
    """Run the worker until ``wanted`` turns are announced and the next one is running, SIGKILL it;
    (its pid, turns announced)."""
    stderr = path.parent / f"{prefix}worker.log"
    with CrashWorker(path, stderr, "--prefix", prefix, "--tool-ms", str(TOOL_MS)) as worker:
        deadline = time.monotonic() + 20
        worker.wait_for(wanted, deadline)
        wait_for_a_running_turn(path, deadline)
        worker.kill()
    return worker.pid, worker.announced


def wait_for_a_running_turn(path: Path, deadline: float) -> None:
    """Until the worker's next turn is committed as started (and so not finished yet)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        while not running_turns(conn):
            if time.monotonic() > deadline:
                pytest.fail("no turn was seen running")
            time.sleep(0.001)  # polling another process, bounded by the deadline
    finally:
        conn.close()


def running_turns(conn: sqlite3.Connection) -> int:
    try:
        return int(conn.execute("SELECT count(*) FROM turns WHERE outcome = 'running'").fetchone()[0])
    except sqlite3.OperationalError:  # the store is still being created
        return 0


def test_repeated_sigkills_leave_no_turn_running_and_lose_no_announced_turn(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    announced: dict[str, int] = {}
    pids = []
    cut_off = 0
    for round_ in range(ROUNDS):
        pid, done = kill_after_turns(path, f"r{round_}-", TURNS_PER_ROUND)
        pids.append(pid)
        announced.update(done)
        with TraceStore(path, readonly=True) as reader:  # looking does not reconcile
            running = reader.counts()["running"]
        assert running <= 1, "only the turn this kill cut off: the worker's opening reconciled the rest"
        cut_off += running

    with TraceStore(path) as store:  # opening read-write reconciles the last one
        assert store.counts()["running"] == 0
        rows = store.list_turns(limit=10_000).rows
        assert {r.turn_id for r in rows} >= set(announced)
        for turn_id, count in announced.items():
            stored = store.load_turn(turn_id)
            assert stored.row.outcome not in ("running", "interrupted"), turn_id
            assert len(stored.events) == count, turn_id
        interrupted = [r for r in rows if r.outcome == "interrupted"]
        assert len(interrupted) == cut_off >= ROUNDS - 1, (
            "each kill cut a turn off (its end may just make it)"
        )
        for row in interrupted:
            assert row.turn_id not in announced
            assert any(f"pid {pid}, which was recording it" in (row.summary or "") for pid in pids), (
                row.summary
            )
            events = store.load_turn(row.turn_id).events
            assert isinstance(events[0], TurnStarted) and not any(isinstance(e, TurnFinished) for e in events)
        assert len({w.pid for w in store.writers()}) == ROUNDS

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        assert one("SELECT count(*) FROM turns") == one(
            "SELECT count(*) FROM events WHERE event_type = 'TurnStarted'"
        )
        ended = one("SELECT count(*) FROM events WHERE event_type = 'TurnFinished'")
        assert one("SELECT count(*) FROM turns WHERE outcome NOT IN ('running', 'interrupted')") == ended
        assert one("SELECT count(*) FROM attempts") == one(
            "SELECT count(*) FROM events WHERE event_type IN ('ToolError', 'CallSucceeded')"
        )
        assert one("SELECT count(*) FROM events WHERE turn_id IS NOT NULL AND turn IS NULL") == 0
    finally:
        conn.close()


def test_traces_list_after_a_killed_serve_shows_no_turn_running(tmp_path: Path) -> None:
    """What an operator sees first after a crash: the cut-off turn is interrupted, not running."""
    with served(tmp_path) as (process, db):
        deadline = time.monotonic() + 30
        while not db.exists():
            assert time.monotonic() < deadline, "serve created no store"
            time.sleep(0.05)
        wait_for_a_running_turn(db, deadline)
        process.kill()
        assert process.wait(10) == -signal.SIGKILL
    listing = subprocess.run(
        [sys.executable, "-m", "console", "traces", "list", "--json", "--traces", str(db)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    outcomes = [turn["outcome"] for turn in json.loads(listing.stdout)["turns"]]
    assert "interrupted" in outcomes and "running" not in outcomes
    # The listing's own read-write open closed the killed writer: still a crash, not a clean stop.
    assert json.loads(listing.stdout)["engine"]["status"] == "gone"
    again = subprocess.run(
        [sys.executable, "-m", "console", "traces", "list", "--traces", str(db)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert "gone: " in again.stdout and "ended without closing the store" in again.stdout, again.stdout
