"""Writers and reconciling: no turn stays ``running`` after the process recording it is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.store import MIGRATIONS, TraceStore
from engine.store.writers import STALE_AFTER_S, this_process
from tests.engine.conftest import WALL
from tests.engine.test_store import turn_events

LINUX = sys.platform.startswith("linux")


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    return proc.pid


def add_writer(store: TraceStore, *, host: str, pid: int, key: str | None, heartbeat_at: float) -> int:
    cursor = store._conn.execute(
        "INSERT INTO writers (host, pid, process_key, opened_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)",
        (host, pid, key, heartbeat_at, heartbeat_at),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def running_turn(store: TraceStore, turn_id: str, writer: int | None) -> None:
    """A turn left running, as if ``writer`` had recorded its start and was then stopped."""
    store.write(turn_events(turn_id, WALL, outcome=None))
    store._conn.execute("UPDATE turns SET writer = ? WHERE turn_id = ?", (writer, turn_id))


def outcome(store: TraceStore, turn_id: str) -> str:
    return store.load_turn(turn_id).row.outcome


def test_the_first_turn_written_records_its_writer(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db", wall_clock=lambda: WALL) as store:
        assert store.writers() == [], "opening or reading registers nothing"
        store.write(turn_events("t1", WALL))
        store.write(turn_events("t2", WALL))
        (writer,) = store.writers()
        me = this_process()
        assert (writer.host, writer.pid, writer.opened_at, writer.closed_at) == (
            me.host,
            os.getpid(),
            WALL,
            None,
        )
        turns = store._conn.execute("SELECT DISTINCT writer FROM turns").fetchall()
        assert turns == [(writer.id,)]
        if LINUX:
            assert writer.process_key is not None and writer.process_started_at is not None
            assert writer.process_started_at <= time.time() + 1
    with TraceStore(tmp_path / "t.db", readonly=True) as reader:
        assert reader.writers()[0].closed_at is not None, "a clean close is recorded"


def test_a_rolled_back_write_forgets_the_writer_it_registered(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        store._conn.execute(
            "CREATE TRIGGER no_turns BEFORE INSERT ON turns BEGIN SELECT RAISE(ABORT, 'no'); END"
        )
        with pytest.raises(Exception, match="no"):
            store.write(turn_events("t1", WALL))
        store._conn.execute("DROP TRIGGER no_turns")
        store.write(turn_events("t1", WALL))
        assert [w.id for w in store.writers()] == [1]
        assert store._conn.execute("SELECT writer FROM turns").fetchall() == [(1,)]


def test_the_turns_of_a_dead_writer_are_interrupted_when_the_store_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    me = this_process()
    with TraceStore(path) as store:
        dead = add_writer(store, host=me.host, pid=dead_pid(), key=me.key, heartbeat_at=time.time())
        running_turn(store, "killed", dead)
        running_turn(store, "mine", None)
        store._conn.execute(
            "UPDATE turns SET writer = NULL, started_at = ? WHERE turn_id = 'mine'", (time.time(),)
        )
        running_turn(store, "alive", store._writer_id)
        assert outcome(store, "killed") == "running"
        with TraceStore(path) as again:  # opened while this store (alive) is still open
            assert outcome(again, "killed") == "interrupted"
            row = again.load_turn("killed").row
            pid = again.writers()[0].pid
            assert (
                row.summary
                == f"interrupted: {me.host} pid {pid}, which was recording it, stopped before it finished"
            )
            assert row.ended_at == WALL and row.duration_ms == 0.0, "ended when its last event happened"
            assert outcome(again, "alive") == "running", "a live writer's turn is left alone"
            assert outcome(again, "mine") == "running", "no writer recorded, but too recent to tell"
            found = again.writers()[0]
            assert found.closed_at is not None and found.found_gone, "the dead writer is marked gone"
    with TraceStore(path, readonly=True) as after:
        assert [w.found_gone for w in after.writers()] == [True, False], "a clean close is not a crash"


@pytest.mark.skipif(not LINUX, reason="process start times are read from /proc")
def test_a_pid_now_used_by_another_process_is_a_writer_that_is_gone(tmp_path: Path) -> None:
    me = this_process()
    assert me.key is not None
    with TraceStore(tmp_path / "t.db") as store:
        earlier = me.key.rsplit("/", 1)[0] + "/1"  # our pid, started at another time
        reused = add_writer(store, host=me.host, pid=me.pid, key=earlier, heartbeat_at=time.time())
        running_turn(store, "t1", reused)
        assert store.reconcile() == 1
        assert outcome(store, "t1") == "interrupted"


def test_a_writer_on_another_host_is_gone_when_its_heartbeat_is_stale(tmp_path: Path) -> None:
    now = time.time()
    with TraceStore(tmp_path / "t.db") as store:
        elsewhere = add_writer(store, host="elsewhere", pid=1, key="boot:ns/5", heartbeat_at=now - 60)
        running_turn(store, "remote", elsewhere)
        assert store.reconcile(now=now) == 0, "a heartbeat a minute old: alive"
        assert store.reconcile(now=now + STALE_AFTER_S) == 1
        assert outcome(store, "remote") == "interrupted"


def test_a_late_end_overwrites_interrupted(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        events = turn_events("t1", WALL)
        store.write(events[:-1])
        assert store.interrupt_turns(["t1", "unknown"], "interrupted: test") == 1
        assert outcome(store, "t1") == "interrupted"
        store.write(events[-1:])  # the writer was not gone after all: its TurnFinished wins
        assert outcome(store, "t1") == "ok"


def test_the_heartbeat_is_refreshed_by_writes_and_on_its_own(tmp_path: Path) -> None:
    now = [WALL]
    with TraceStore(tmp_path / "t.db", wall_clock=lambda: now[0]) as store:
        assert store.heartbeat() is False, "nothing to refresh before the first turn"
        store.write(turn_events("t1", WALL))
        now[0] += 1
        store.write(turn_events("t2", WALL))
        assert store.writers()[0].heartbeat_at == WALL, "refreshed by a write only when due"
        now[0] += 10
        store.write(turn_events("t3", WALL))
        assert store.writers()[0].heartbeat_at == WALL + 11
        now[0] += 1
        assert store.heartbeat() is True
        assert store.writers()[0].heartbeat_at == WALL + 12


def test_a_schema_2_store_is_migrated_in_place_and_its_stale_running_turns_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.db"
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS[:2])
    with TraceStore(path) as v2:
        assert v2.schema_version == 2
        v2.write(turn_events("done", WALL) + turn_events("left", WALL, outcome=None))
        before = v2.counts()
        assert "writers" not in v2.db.table_names()
    monkeypatch.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS)
    with TraceStore(path) as store:
        assert store.schema_version == len(MIGRATIONS)
        assert {"writers"} <= set(store.db.table_names()) and "writer" in store.db.table("turns").columns_dict
        assert store.counts() == {**before, "running": 0}
        assert outcome(store, "done") == "ok"
        assert outcome(store, "left") == "interrupted"
        assert store.load_turn("left").row.summary == (
            "interrupted: left running by a tripwire that did not record its writer"
        )
        store.write(turn_events("new", WALL))
        assert len(store.writers()) == 1


@pytest.mark.skipif(not LINUX, reason="boot ids are read from /proc")
def test_a_writer_from_before_this_machine_last_booted_is_gone(tmp_path: Path) -> None:
    me = this_process()
    assert me.machine is not None
    namespace = me.machine.split(":", 1)[1]
    with TraceStore(tmp_path / "t.db") as store:
        before = add_writer(
            store, host=me.host, pid=me.pid, key=f"another-boot:{namespace}/5", heartbeat_at=time.time()
        )
        running_turn(store, "t1", before)
        assert store.reconcile() == 1, "a fresh heartbeat does not matter: that boot's processes are gone"
