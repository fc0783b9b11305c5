"""A clean stop in the middle of a turn leaves nothing ``running``: the turn ends ``interrupted``.

``tripwire serve`` stopped by SIGTERM or Ctrl-C (SIGINT), and the live console quit with ``q``,
while a turn's calls are in flight: the engine's turns are cancelled and their end recorded
before the recorder closes, so the store shows the turn ``interrupted`` with the calls that
were in flight.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from console.live import LiveOptions, build_live_app
from engine.events import TurnFinished, TurnInterrupted
from engine.store import TraceStore

ROOT = Path(__file__).resolve().parents[2]

WORKLOAD = """
import anyio
from engine.turn import ToolCall, Turn

async def slow_search(**args):
    await anyio.sleep(600)

async def run(engine):
    engine.register("slow_search", slow_search)
    await engine.run_turn(Turn([ToolCall("a", "slow_search"), ToolCall("b", "slow_search")], id="long"))
"""


def workload(tmp_path: Path) -> str:
    (tmp_path / "agent.py").write_text(textwrap.dedent(WORKLOAD))
    (tmp_path / "manifests").mkdir()
    return f"{tmp_path / 'agent.py'}:run"


def wait_until_running(path: Path, seconds: float = 30) -> None:
    """Until the store shows the turn started (another thread or process records it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                found = conn.execute("SELECT count(*) FROM turns WHERE outcome = 'running'").fetchone()[0]
            except sqlite3.Error:
                found = 0  # still being created
            finally:
                conn.close()
            if found:
                return
        time.sleep(0.02)  # polling another process, bounded by the deadline
    pytest.fail("the turn was never seen running")


def assert_interrupted(path: Path) -> None:
    with TraceStore(path, readonly=True) as store:
        assert store.counts()["running"] == 0
        stored = store.load_turn("long")
    assert stored.row.outcome == "interrupted"
    (interrupted,) = [e for e in stored.events if isinstance(e, TurnInterrupted)]
    assert set(interrupted.in_flight) == {"a", "b"}, "the calls in flight are named"
    (finished,) = [e for e in stored.events if isinstance(e, TurnFinished)]
    assert finished.outcome == "interrupted" and set(finished.statuses.values()) == {"interrupted"}


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serve_stopped_mid_turn_records_the_turn_interrupted(tmp_path: Path, stop: signal.Signals) -> None:
    traces = tmp_path / "traces.db"
    command = [sys.executable, "-m", "console", "serve", "--traces", str(traces),
               "--manifests", str(tmp_path / "manifests"), "--workload", workload(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_running(traces)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, err[-2000:]
    assert_interrupted(traces)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Textual runs on asyncio, the engine in its thread
async def test_quitting_the_live_console_mid_turn_records_the_turn_interrupted(tmp_path: Path) -> None:
    traces = tmp_path / "traces.db"
    options = LiveOptions(manifests=tmp_path / "manifests", traces=traces, workload=workload(tmp_path))
    app = build_live_app(options)
    async with app.run_test() as pilot:
        wait_until_running(traces)
        await pilot.press("q")
    assert_interrupted(traces)
