"""What the operator sees after a restart is true (issue 22 §1): a trip or disable stands until reset.

A real ``tripwire serve``; an operator trips one tool and disables another from the shell; the
service is SIGKILLed and started again on the same store. The restarted engine puts both back
(``BreakerRestored``: who set them, when and why) and refuses the tripped tool's calls, and every
reader agrees with it: ``tripwire breaker list --json``, the attached console (headless) and the
real console in tmux. A reset clears the override for the next restart; ``--forget-overrides``
starts clean and records that it did.
"""

from __future__ import annotations

import json
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from console.app import ConsoleApp
from console.attach import AttachedLink
from console.cli import main
from engine.events import (
    AttemptStarted,
    BreakerRestored,
    CallRejected,
    OverridesForgotten,
    RecordingStarted,
)
from engine.store import TraceStore
from engine.store.command_auth import command_origin
from engine.strategies.breaker.machine import BreakerState
from tests.console.test_terminal import Terminal
from tests.polling import until, wait_for
from tests.serving import ROOT, served

DEADLINE_S = 20.0
ME = command_origin()
OPERATOR = f"operator:{ME.user}@{ME.host}"


def ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    found, _, _ = select.select([process.stdout], [], [], DEADLINE_S)
    assert found and process.stdout.readline().startswith("tripwire serve: recording to")


def breaker(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(["breaker", *argv])
    out, _ = capsys.readouterr()
    return status, out


def listed(capsys: pytest.CaptureFixture[str], db: Path) -> dict[str, Any]:
    status, out = breaker(capsys, "list", "--attach", str(db), "--json")
    assert status == 0
    listing: dict[str, Any] = json.loads(out)
    return listing


def tools(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["tool"]: tool for tool in listing["tools"]}


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(10)


def run_events(db: Path) -> list[Any]:
    """The events of the newest run of the engine recording into ``db``."""
    with TraceStore(db, readonly=True) as store:
        events = list(store.events())
    start = max(i for i, e in enumerate(events) if isinstance(e, RecordingStarted))
    return events[start:]


@pytest.fixture
def tripped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A store whose engine was SIGKILLed after an operator tripped hotel_search and disabled
    custom_api."""
    with served(tmp_path) as (process, db):
        ready(process)
        for action, tool, reason in (("trip", "hotel_search", "maint"), ("disable", "custom_api", "flaky")):
            status, out = breaker(capsys, action, tool, "--attach", str(db), "--reason", reason)
            assert status == 0, out
        kill(process)  # at once: "applied" means stored, the override with it
    return db


def test_a_trip_and_a_disable_stand_after_sigkill_and_every_reader_agrees_with_the_engine(
    tripped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tripped
    before = listed(capsys, db)
    assert before["engine"]["status"] == "gone", "its process ended: no reader takes it for live"
    with served(tmp_path) as (process, _):
        ready(process)
        listing = listed(capsys, db)
        assert listing["engine"]["status"] == "live"
        assert listing["engine"]["writer"] == f"{ME.host} pid {process.pid}"
        states = tools(listing)
        assert states["hotel_search"]["state"] == "FORCED_OPEN"
        assert states["custom_api"]["state"] == "DISABLED"
        restored = states["hotel_search"]["last_transition"]
        assert (restored["event"], restored["actor"], restored["reason"]) == (
            "BreakerRestored",
            OPERATOR,
            "maint",
        )
        assert states["flight_search_backup"]["state"] == "CLOSED"
        assert states["flight_search_backup"]["last_transition"]["event"] == "RecordingStarted"

        # The engine itself refuses the tripped tool's calls: rejected, never attempted.
        wait_for(
            lambda: any(isinstance(e, CallRejected) and e.tool_id == "hotel_search" for e in run_events(db)),
            "a call of hotel_search after the restart",
            DEADLINE_S,
        )
        events = run_events(db)
        assert not [e for e in events if isinstance(e, AttemptStarted) and e.tool_id == "hotel_search"]
        (trip,) = [e for e in events if isinstance(e, BreakerRestored) and e.tool_id == "hotel_search"]
        assert (trip.to_state, trip.actor, trip.reason) == (BreakerState.FORCED_OPEN, OPERATOR, "maint")

        # A reset clears it: the next restart starts the tool CLOSED.
        status, out = breaker(capsys, "reset", "hotel_search", "--attach", str(db), "--reason", "back")
        assert status == 0, out
        kill(process)
    with served(tmp_path) as (process, _):
        ready(process)
        states = tools(listed(capsys, db))
        assert (states["hotel_search"]["state"], states["custom_api"]["state"]) == ("CLOSED", "DISABLED")


@pytest.mark.asyncio
async def test_an_attached_console_shows_the_restarted_engines_state(tripped: Path, tmp_path: Path) -> None:
    db = tripped
    with served(tmp_path) as (process, _):
        ready(process)
        app = ConsoleApp(AttachedLink(db, read_only=True), traces=db)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: bool(app.model.tools), DEADLINE_S)
            model = app.model.tools
            assert model["hotel_search"].state is BreakerState.FORCED_OPEN
            assert model["custom_api"].state is BreakerState.DISABLED
            assert model["flight_search_backup"].state is BreakerState.CLOSED
            assert app.stale_for is None, "● LIVE: the restarted engine beats"
            kill(process)
            await until(pilot, lambda: app.stale_for is not None, DEADLINE_S)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_console_in_a_real_terminal_shows_the_restored_trip(tripped: Path, tmp_path: Path) -> None:
    db = tripped
    session = f"tripwire-restart-{uuid.uuid4().hex[:8]}"
    argv = [
        "env",
        "-u",
        "COLUMNS",
        "-u",
        "LINES",
        sys.executable,
        "-m",
        "console",
        "console",
        "--attach",
        str(db),
    ]
    with served(tmp_path) as (process, _):
        ready(process)
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                session,
                "-x",
                "80",
                "-y",
                "24",
                "-c",
                str(ROOT),
                shlex.join(argv),
            ],
            check=True,
        )
        try:
            terminal = Terminal(session, tmp_path / "unused")

            def row(screen: str, tool: str) -> str:
                return next((line for line in screen.splitlines() if tool in line), "")

            screen = terminal.wait_for(
                lambda s: "FORCED_OPEN" in row(s, "hotel_search") and "LIVE" in s,
                "hotel_search FORCED_OPEN, LIVE",
            )
            assert "DISABLED" in row(screen, "custom_api")
            assert "STALE" not in screen
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_forget_overrides_starts_clean_and_says_so(
    tripped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tripped
    with served(tmp_path, "--forget-overrides") as (process, _):
        ready(process)
        states = tools(listed(capsys, db))
        assert (states["hotel_search"]["state"], states["custom_api"]["state"]) == ("CLOSED", "CLOSED")
        (forgotten,) = [e for e in run_events(db) if isinstance(e, OverridesForgotten)]
        assert set(forgotten.forgotten) == {"hotel_search", "custom_api"}
        assert forgotten.forgotten["hotel_search"]["actor"] == OPERATOR
        assert forgotten.actor == OPERATOR
        process.send_signal(signal.SIGINT)
        process.wait(DEADLINE_S)
    with served(tmp_path) as (process, _):  # forgotten for good
        ready(process)
        states = tools(listed(capsys, db))
        assert (states["hotel_search"]["state"], states["custom_api"]["state"]) == ("CLOSED", "CLOSED")


def test_a_finished_virtual_clock_run_is_never_heard_from_after_it_exits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """§2: the demo stamps its events up to ~70 s ahead of the wall clock; the reader decides by
    the writer's heartbeat and process: the demo closed the store, so it is stopped."""
    db = tmp_path / "t.db"
    assert main(["demo", "--traces", str(db)]) == 0
    capsys.readouterr()
    with TraceStore(db, readonly=True) as store:
        ahead = max(e.at for e in store.events())
    listing = listed(capsys, db)
    assert listing["engine"]["status"] == "stopped" and listing["engine"]["stale"] is True
    assert ahead > time.time() + 30, "the events are stamped ahead: they must not read as word"
    status = main(["traces", "list", "--traces", str(db), "--json", "--limit", "1"])
    assert status == 0
    assert json.loads(capsys.readouterr().out)["engine"]["status"] == "stopped"
