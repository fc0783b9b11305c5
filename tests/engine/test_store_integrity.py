"""Integrity is checked when it is warranted, not on every open: a store closed cleanly opens without
reading the whole file; one whose writer was killed is checked; ``tripwire traces check`` on request."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from engine.errors import TraceStoreError
from engine.store import TraceStore, opening
from engine.store.schema import MIGRATIONS
from engine.store.writers import UNCHECKED
from tests.crash import CrashWorker
from tests.engine.conftest import WALL
from tests.engine.test_store import _filled, _garbled, sha, turn_events


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every store quick_check runs on as it opens; stores of any size count as large."""
    monkeypatch.setattr(opening, "CHEAP_CHECK_BYTES", 0)
    seen: list[Path] = []
    real = opening.quick_check

    def spy(conn: Any, path: Path, busy_timeout_ms: int) -> None:
        seen.append(path)
        real(conn, path, busy_timeout_ms)

    monkeypatch.setattr(opening, "quick_check", spy)
    return seen


def test_a_store_closed_cleanly_opens_without_quick_check(tmp_path: Path, checks: list[Path]) -> None:
    path = tmp_path / "t.db"
    _filled(path)
    for readonly in (False, True, False):
        with TraceStore(path, readonly=readonly) as store:
            assert store.checked_on_open is None
            assert store.load_turn("t1").row.outcome == "ok"
    assert checks == []
    with TraceStore(path, verify=True) as store:  # on request
        assert store.checked_on_open == "asked to"
    assert checks == [path]


def test_a_small_store_is_checked_on_every_open(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with TraceStore(path) as store:
        store.write(turn_events("t1", WALL))
    assert path.stat().st_size <= opening.CHEAP_CHECK_BYTES
    with TraceStore(path, readonly=True) as store:
        assert store.checked_on_open == "a small store"


def test_a_store_whose_writer_was_killed_is_checked_once(tmp_path: Path, checks: list[Path]) -> None:
    path = tmp_path / "traces.db"
    with CrashWorker(path, tmp_path / "stderr.txt") as worker:
        worker.wait_for(3, time.monotonic() + 8)
        worker.kill()
    with TraceStore(path, readonly=True) as reader:  # a reader cannot note it: it checks each time
        assert reader.checked_on_open is not None and "stopped without closing it" in reader.checked_on_open
    with TraceStore(path) as store:
        assert store.checked_on_open is not None and "stopped without closing it" in store.checked_on_open
        assert all(w.closed_at is not None for w in store.writers())
    assert len(checks) == 2
    with TraceStore(path) as store, TraceStore(path, readonly=True):  # checked and found sound: done
        assert store.checked_on_open is None
    assert len(checks) == 2


def test_turns_reconciled_without_a_check_leave_a_note_for_the_next_open(
    tmp_path: Path, checks: list[Path]
) -> None:
    path = tmp_path / "traces.db"
    with CrashWorker(path, tmp_path / "stderr.txt") as worker:
        worker.wait_for(2, time.monotonic() + 8)
        worker.kill()
    conn = sqlite3.connect(path)  # killed mid-turn for sure: its last turn left running
    with conn:
        conn.execute("UPDATE turns SET outcome = 'running' WHERE id = (SELECT max(id) FROM turns)")
    conn.close()
    with TraceStore(path, verify=False) as store:  # its turns are reconciled, unchecked
        assert all(w.closed_at is not None for w in store.writers())
        noted = store.db.execute("SELECT value FROM meta WHERE key = ?", (UNCHECKED,)).fetchone()
    assert checks == [] and noted is not None and "stopped without closing it" in noted[0]
    with TraceStore(path) as store:
        assert store.checked_on_open == noted[0]
        assert store.db.execute("SELECT 1 FROM meta WHERE key = ?", (UNCHECKED,)).fetchone() is None
    assert checks == [path]


def test_a_truncated_store_is_refused_whatever_its_size(tmp_path: Path, checks: list[Path]) -> None:
    path = tmp_path / "t.db"
    _filled(path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size * 3 // 4)
    before = sha(path)
    for readonly in (False, True):
        with pytest.raises(TraceStoreError) as info:
            TraceStore(path, readonly=readonly)
        assert str(info.value).startswith(f"{path}: corrupt: ") and "\n" not in str(info.value)
    assert sha(path) == before


def test_traces_check_exits_0_when_sound_and_1_with_one_line_when_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.db"
    _filled(path)
    assert main(["traces", "check", "--traces", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {path} (")
    assert main(["traces", "check", "--full", "--json", "--traces", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["problem"], report["check"]) == (True, None, "integrity_check")

    bad = tmp_path / "bad.db"
    _garbled(bad)
    before = sha(bad)
    assert main(["traces", "check", "--traces", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"tripwire: {bad}: corrupt: ") and err.count("\n") == 1
    assert main(["traces", "check", "--json", "--traces", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["ok"] is False and json.loads(out)["problem"].startswith("corrupt: ")
    assert sha(bad) == before, "a check changes nothing"
    assert main(["traces", "check", "--traces", str(tmp_path / "none.db")]) == 2


def test_traces_check_reads_an_older_store_as_it_is_without_migrating_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v4.db"
    with monkeypatch.context() as m:
        m.setattr("engine.store.schema.MIGRATIONS", MIGRATIONS[:4])
        with TraceStore(path) as v4:
            assert v4.schema_version == 4
    before = sha(path)
    assert main(["traces", "check", "--traces", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {path} (")
    assert sha(path) == before, "a check changes nothing, not even the schema version"
