"""Another process holds the store's write lock past the busy timeout.

A durable turn waits, retrying with backoff, for at most ``durable_timeout_s``: released in time,
the turn is durable when ``run_turn`` returns; held longer, ``run_turn`` raises TurnNotPersisted
saying "database is locked", and the kept batches are written once the lock is released.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.errors import TurnNotPersisted
from engine.store import TraceRecorder, TraceStore
from engine.turn import ToolCall, Turn
from tests.engine.test_store import travel_engine

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
"""Real processes hold the lock in real time."""

HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


class Holder:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            assert self.proc.wait(10) == 0


@contextmanager
def lock_held(path: Path) -> Iterator[Holder]:
    """Another process takes the write lock and keeps it until released."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    holder = Holder(proc)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.release()


async def test_a_lock_held_past_the_timeout_fails_the_turn_plainly_and_keeps_it(tmp_path: Path) -> None:
    engine, turn = travel_engine()
    path = tmp_path / "t.db"
    with TraceStore(path, busy_timeout_ms=200) as store:
        recorder = TraceRecorder(store, batch_ms=5, durable_timeout_s=1.5).attach(engine)
        assert recorder.flush(5)
        with lock_held(path) as holder:
            started = time.monotonic()
            with pytest.raises(TurnNotPersisted, match=r"write failed: database is locked \(for over 1.5s\)"):
                await engine.run_turn(turn)
            assert time.monotonic() - started >= 1.5, "it waited for the lock, within its bound"
            assert recorder.stats.not_persisted == 1
            holder.release()
            assert recorder.flush(10)
        assert store.load_turn("trip").row.outcome == "ok"
        assert recorder.stats.not_persisted == 0
        recorder.close()


async def test_a_lock_released_in_time_makes_the_turn_durable(tmp_path: Path) -> None:
    engine, _ = travel_engine()
    path = tmp_path / "t.db"
    with TraceStore(path, busy_timeout_ms=200) as store:
        recorder = TraceRecorder(store, batch_ms=5, durable_timeout_s=30).attach(engine)
        assert recorder.flush(5)
        with lock_held(path) as holder:

            def release_after_failed_attempts() -> None:
                deadline = time.monotonic() + 20
                while recorder.stats.errors < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)  # polling the writer thread, bounded
                holder.release()

            releaser = threading.Thread(target=release_after_failed_attempts)
            releaser.start()
            result = await engine.run_turn(Turn([ToolCall("h", "hotel_search")], id="waited"))
            releaser.join(20)
        assert recorder.stats.errors >= 2, "the lock outlasted the busy timeout, twice: the batch was kept"
        assert store.load_turn("waited").row.outcome == result.outcome == "ok"
        recorder.close()
