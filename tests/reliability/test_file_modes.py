"""Every file tripwire makes is its owner's: 0600 files, 0700 directories, under any umask (issue 12 §2)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.cli import main
from console.cli.init import init_project
from engine.errors import TraceStoreError
from engine.store import TraceStore
from tests.engine.test_store import turn_events

ROOT = Path(__file__).resolve().parents[2]
WALL = 1_762_338_645.0


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The widest umask there is: nothing is narrowed unless tripwire narrows it."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.usefixtures("open_umask")
def test_a_new_store_its_wal_and_its_new_directories_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "traces.db"
    with TraceStore(path) as store:
        store.write(turn_events("t1", WALL))
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    assert (mode(tmp_path / "deep"), mode(tmp_path / "deep" / "er")) == (0o700, 0o700)


@pytest.mark.usefixtures("open_umask")
def test_exports_are_owner_only_even_over_a_wider_file(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "traces.db") as store:
        store.write(turn_events("t1", WALL))
        fresh, wide = tmp_path / "fresh.jsonl", tmp_path / "wide.jsonl"
        store.export_jsonl(fresh)
        wide.write_text("old\n")
        wide.chmod(0o644)
        store.export_jsonl(wide, force=True)
    assert (mode(fresh), mode(wide)) == (0o600, 0o600)


@pytest.mark.usefixtures("open_umask")
def test_a_wider_store_is_narrowed_and_said_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "traces.db"
    with TraceStore(path) as store:
        store.write(turn_events("t1", WALL))
    path.chmod(0o666)
    Path(f"{path}-wal").touch()
    Path(f"{path}-wal").chmod(0o644)
    empty = tmp_path / "empty.db"  # a creation that was interrupted: adopted
    empty.touch()
    empty.chmod(0o666)
    with caplog.at_level(logging.WARNING, logger="tripwire.store"):
        with TraceStore(path):
            assert (mode(path), mode(Path(f"{path}-wal"))) == (0o600, 0o600)
        TraceStore(empty).close()
    assert (mode(path), mode(empty)) == (0o600, 0o600)
    said = [r.getMessage() for r in caplog.records]
    for narrowed in (path, Path(f"{path}-wal"), empty):  # SQLite gives an empty -wal the store's mode
        assert f"trace store {narrowed} was open to other users (666): now owner-only" in said


def test_another_users_store_is_refused_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "traces.db"
    TraceStore(path).close()
    before = path.read_bytes()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(path).st_uid + 1)  # as another user would open it
    with pytest.raises(TraceStoreError, match=r"owned by another user \(uid \d+\)"):
        TraceStore(path)
    assert path.read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
def test_a_store_given_to_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    TraceStore(path).close()
    os.chown(path, 65534, -1)
    with pytest.raises(TraceStoreError, match=r"owned by another user \(uid 65534\)"):
        TraceStore(path)


@pytest.mark.usefixtures("open_umask")
def test_init_writes_owner_only_files(tmp_path: Path) -> None:
    written = init_project(tmp_path / "project")
    assert {mode(p) for p in written} == {0o600}
    directories = {p.parent for p in written} | {tmp_path / "project"}
    assert {mode(d) for d in directories} == {0o700}


def test_the_command_line_under_umask_000(tmp_path: Path) -> None:
    """A real `tripwire demo` recording into the user's data directory, started with umask 000."""
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "console", "demo", "--json"], cwd=tmp_path, capture_output=True, timeout=120,
        env={**os.environ, "XDG_DATA_HOME": str(data)}, preexec_fn=lambda: os.umask(0),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    store = data / "tripwire" / "traces.db"
    assert (mode(data), mode(store.parent), mode(store)) == (0o700, 0o700, 0o600)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["traces", "export", "-o", str(tmp_path / "x.jsonl"), "--traces", str(store)]) == 0
    assert mode(tmp_path / "x.jsonl") == 0o600
