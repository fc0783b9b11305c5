"""The command line misused, through real processes: one line on stderr, exit 2, nothing lost.

Every case runs ``python -m console`` (what the ``tripwire`` entry point runs) in a directory
of its own, with stdin on /dev/null as a script or CI job would. The processes all start
together, once per module, on a small store the demo recorded: a few seconds in all.
"""

from __future__ import annotations

import contextlib
import io
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from console.cli import PIPE_CLOSED, main
from engine.scenario import load_scenario
from engine.store import TraceStore
from tests.polling import finished

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "manifests"
DEMO_TURNS = len(load_scenario(MANIFESTS / "demo" / "scenario.yaml").spec.turns)
TIMEOUT_S = 30.0
"""A console or a service that starts when it should have refused runs until killed here."""


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    """``{store}`` is the case's store, ``{tmp}`` its own empty directory."""
    expected: str = ""
    """The start of the one line on stderr (exit 2); empty for a closed pipe (exit 141, silent)."""
    own_store: bool = False
    """Run on a copy of the store: the case would damage the shared one if it went wrong."""
    pipe_closed: bool = False
    """stdout is a pipe whose reader has gone before anything is written."""


STORE = ("--traces", "{store}")
LIMIT = "tripwire: --limit must be from 1 to 10000, got"
NO_TERMINAL = "tripwire: the console needs a terminal (stdin is not a TTY); try `tripwire demo`"
KEEP = "tripwire: --keep must be at least 1, got"
THE_STORE = "that is the trace store being exported"

MISUSE = {
    "list --limit 0": Case(("traces", "list", "--limit", "0", *STORE), f"{LIMIT} 0"),
    "list --limit -5": Case(("traces", "list", "--limit", "-5", *STORE), f"{LIMIT} -5"),
    "list --limit 1e20": Case(("traces", "list", "--limit", "99999999999999999999", *STORE),
                              f"{LIMIT} 99999999999999999999"),
    "prune --keep -1": Case(("traces", "prune", "--keep", "-1", *STORE), f"{KEEP} -1", own_store=True),
    "export to a missing directory": Case(("traces", "export", "-o", "{tmp}/missing/dir/x.jsonl", *STORE),
                                          "tripwire: -o {tmp}/missing/dir/x.jsonl: no such directory"),
    "export to a directory": Case(("traces", "export", "-o", "{tmp}", *STORE),
                                  "tripwire: -o {tmp}: is a directory"),
    "export onto the store, forced, by another path": Case(
        ("traces", "export", "-o", "{tmp}/../{tmp_name}/store.db", "--force", *STORE),
        f"tripwire: -o {{tmp}}/../{{tmp_name}}/store.db: {THE_STORE}", own_store=True,
    ),
    "export onto an existing file": Case(("traces", "export", "-o", "{tmp}/kept.jsonl", *STORE),
                                         "tripwire: -o {tmp}/kept.jsonl: already exists; add --force"),
    "console --refresh-hz 100": Case(("console", "--refresh-hz", "100", "--no-record"),
                                     "tripwire: --refresh-hz must be from 1 to 30, got 100"),
    "serve --poll-ms inf": Case(("serve", "--poll-ms", "inf", "--traces", "{tmp}/served.db"),
                                "tripwire: --poll-ms must be at most 60000, got inf"),
    "serve --retention-age 3x": Case(("serve", "--retention-age", "3x", "--traces", "{tmp}/served.db"),
                                     "tripwire: retention age '3x': expected a number and s, m, h, d or w"),
    "console --retention-size lots": Case(("console", "--retention-size", "lots", "--no-record"),
                                          "tripwire: retention size 'lots'"),
    "replay --tolerance-ms -1": Case(("replay", "any-turn", "--tolerance-ms", "-1", *STORE),
                                     "tripwire: --tolerance-ms must be from 0 to 60000, got -1"),
    "no command, no terminal": Case((), NO_TERMINAL),
    "console --attach, no terminal": Case(("console", "--attach", "{store}", "--read-only"), NO_TERMINAL),
}  # fmt: skip

CLOSED_PIPE = {
    "demo": Case(("demo", "--no-record"), pipe_closed=True),
    "run, recording": Case(("run", str(MANIFESTS / "demo" / "scenario.yaml"), "--traces", "{tmp}/t.db"),
                           pipe_closed=True),
    "traces list --json": Case(("traces", "list", "--json", *STORE), pipe_closed=True),
    "traces export": Case(("traces", "export", *STORE), pipe_closed=True),
}  # fmt: skip


@dataclass
class Outcome:
    case: Case
    store: Path
    tmp: Path
    expected: str
    store_before: bytes
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""


def record_store(path: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["demo", "--manifests", str(MANIFESTS), "--traces", str(path), "--json"]) == 0


def turns_in(store: Path) -> int:
    with TraceStore(store, readonly=True, verify=False) as opened:
        return opened.counts()["turns"]


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("shared") / "store.db"
    record_store(store)
    return store


@pytest.fixture(scope="module")
def outcomes(shared_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every case's process, all started together, each waited for up to ``TIMEOUT_S``."""
    with TraceStore(shared_store, readonly=True, verify=False) as opened:
        turn = opened.list_turns(limit=1).rows[0].turn_id
    running: dict[str, subprocess.Popen[str]] = {}
    results: dict[str, Outcome] = {}
    try:
        for name, case in {**MISUSE, **CLOSED_PIPE}.items():
            tmp = tmp_path_factory.mktemp("case")
            store = shared_store
            if case.own_store:
                store = tmp / "store.db"
                shutil.copy(shared_store, store)  # its mode too: the store is 0600, as tripwire made it
            if any("kept.jsonl" in a for a in case.argv):
                (tmp / "kept.jsonl").write_text("kept\n")
            values = {"store": str(store), "tmp": str(tmp), "tmp_name": tmp.name, "turn": turn}
            expected = case.expected.format(**values)
            results[name] = Outcome(case, store, tmp, expected, store.read_bytes())
            running[name] = start([a.format(**values) for a in case.argv], case, cwd=tmp)
        for name, (returncode, out, err) in finished(running, TIMEOUT_S).items():
            outcome = results[name]
            outcome.returncode, outcome.stdout, outcome.stderr = returncode, out, err
        yield results
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def start(argv: list[str], case: Case, *, cwd: Path) -> subprocess.Popen[str]:
    """``cwd`` is the case's own directory: a default path (traces/traces.db) would show up there."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    command = [sys.executable, "-m", "console", *argv]
    if not case.pipe_closed:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, cwd=cwd,
        )  # fmt: skip
    # The reader has gone before the first write: EPIPE every time, not only when the output is
    # larger than the pipe's buffer (as with `| head -1`, where it depends on timing).
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=writer, stderr=subprocess.PIPE,
            text=True, env=env, cwd=cwd,
        )  # fmt: skip
    finally:
        os.close(writer)


@pytest.mark.parametrize("name", MISUSE)
def test_misuse_is_one_line_exit_2_and_loses_nothing(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    assert "Traceback" not in outcome.stderr
    assert outcome.returncode == 2, outcome.stderr
    (line,) = outcome.stderr.splitlines()
    assert line.startswith(outcome.expected)
    assert outcome.stdout == ""
    assert outcome.store.read_bytes() == outcome.store_before, "the store is byte for byte as it was"
    assert turns_in(outcome.store) == DEMO_TURNS
    # SQLite's own -wal and -shm files come and go with readers.
    left = sorted(p.name for p in outcome.tmp.iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert left in ([], ["kept.jsonl"], ["store.db"]), f"nothing created, nothing removed: {left}"
    if left == ["kept.jsonl"]:
        assert (outcome.tmp / "kept.jsonl").read_text() == "kept\n"


@pytest.mark.parametrize("name", CLOSED_PIPE)
def test_a_reader_that_has_gone_ends_the_command_quietly(outcomes: dict[str, Outcome], name: str) -> None:
    outcome = outcomes[name]
    assert outcome.stderr == "", "no traceback, no 'Exception ignored'"
    assert outcome.returncode == PIPE_CLOSED, "128 + SIGPIPE, as a shell reports for git or cat"


def test_a_dumb_terminal_is_refused(tmp_path: Path) -> None:
    """A real terminal (a pseudo-terminal on every stream), but TERM=dumb."""
    screen, terminal = pty.openpty()
    env = {**os.environ, "TERM": "dumb"}
    process = subprocess.Popen(
        [sys.executable, "-m", "console", "console", "--traces", str(tmp_path / "t.db")],
        stdin=terminal, stdout=terminal, stderr=terminal, env=env, cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    os.close(terminal)
    try:
        shown = read_until_exit(process, screen, TIMEOUT_S)
    finally:
        os.close(screen)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 2, shown
    assert shown.strip() == (
        "tripwire: the console needs a terminal (TERM=dumb); try `tripwire demo` or `tripwire serve`"
    )
    assert list(tmp_path.iterdir()) == [], "nothing started, nothing recorded"


def read_until_exit(process: subprocess.Popen[bytes], screen: int, timeout: float) -> str:
    """What the process wrote to its terminal, until it has exited and closed it (or the timeout)."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([screen], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(screen, 65536)
            except OSError:  # EIO: every end of the terminal is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif process.poll() is not None:
            break
    return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
