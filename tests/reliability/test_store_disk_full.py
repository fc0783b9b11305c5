"""A full disk under a durable recorder: turns fail plainly, at once, and nothing is lost.

A real process (tests/engine/crash_worker.py ``--fill``) records turns with
``durability="turn"``, then its disk fills up: by RLIMIT_FSIZE (the process may not grow a file,
SQLite says "disk I/O error"; everywhere), or for real on a 1 MiB tmpfs mounted in a user and
mount namespace of its own (SQLite says "database or disk is full"; where unprivileged
namespaces are allowed). Every turn announced DONE must be in the store; every turn that could
not be made durable must say so with SQLite's reason, at once; once the disk is freed the kept
batches must be written; and the failure is logged once when it starts and once when it ends.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engine.events import TurnFinished, TurnStarted
from engine.store import TraceStore

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs POSIX resource limits")


def namespaces_work(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1"', "sh", str(tmp_path)],
        capture_output=True,
        timeout=10,
    )
    return probe.returncode == 0


def run_worker(tmp_path: Path, how: str) -> tuple[list[list[str]], str]:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    command = [sys.executable, "-m", "tests.engine.crash_worker"]
    args = [str(store_dir / "t.db"), "--fill", how, "--out", str(tmp_path / "copy.db")]
    if how == "space":  # a 1 MiB file system of its own, gone with the process's namespace
        script = 'mount -t tmpfs -o size=1m tmpfs "$1" && shift && exec "$@"'
        command = ["unshare", "-rm", "sh", "-c", script, "sh", str(store_dir), *command]
    done = subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line.split(" ", 3) for line in done.stdout.splitlines()], done.stderr


@pytest.mark.parametrize(
    ("how", "cause"),
    [("rlimit", "disk I/O error (SQLITE_IOERR_WRITE)"), ("space", "database or disk is full")],
)
def test_a_full_disk_fails_turns_at_once_with_sqlites_reason_and_loses_nothing(
    tmp_path: Path, how: str, cause: str
) -> None:
    if how == "space" and not namespaces_work(tmp_path):
        pytest.skip("unprivileged user and mount namespaces are not available here")
    lines, stderr = run_worker(tmp_path, how)
    words = [line[0] for line in lines]
    assert words[:4] == ["DONE", "DONE", "DONE", "FULL"] and words[-2:] == ["DONE", "COPIED"], words
    done = {line[1]: int(line[2]) for line in lines if line[0] == "DONE"}
    lost = [line for line in lines if line[0] == "LOST"]
    assert len(lost) >= 3
    for _, turn_id, seconds, message in lost:
        assert f"turn {turn_id} not persisted: write failed: {cause}" in message
        assert float(seconds) < 10, "at once: not after durable_timeout_s (60 s)"
    assert ["FLUSHED", "True", "0", "None"] in lines, "the kept batches were written once the disk was freed"

    with TraceStore(tmp_path / "copy.db", readonly=True) as store:
        for turn_id, count in done.items():
            stored = store.load_turn(turn_id)
            assert stored.row.outcome not in ("running", "interrupted") and len(stored.events) == count
        for _, turn_id, _, _ in lost:  # not durable when run_turn returned, written once it could be
            stored = store.load_turn(turn_id)
            assert stored.row.outcome not in ("running", "interrupted"), turn_id
            assert isinstance(stored.events[0], TurnStarted) and isinstance(stored.events[-1], TurnFinished)
        assert store.counts()["running"] == 0
    conn = sqlite3.connect(f"file:{tmp_path / 'copy.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()

    logged = [line for line in stderr.splitlines() if cause in line]
    assert len(logged) == 2, f"once when it starts, once when it ends: {stderr[-2000:]}"
    assert "cannot rollback" not in stderr
