"""An attached console whose engine dies says so (issue 13 §2, issue 22 §2): GONE, not ● LIVE.

A real ``tripwire serve`` in another process, a console attached to its store; the service is
SIGKILLed (no clean close, nothing more written). Its process has ended, so the status bar says
``GONE — the engine's process ended; last heartbeat N s ago`` (an engine whose process lives but
says nothing is ``STALE``) and the board is greyed as the last known state; a fresh ``tripwire
serve`` on the same store brings it back to ``● LIVE``.
"""

from __future__ import annotations

import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from console.app import ConsoleApp
from console.attach import STALE_AFTER_S, AttachedLink
from console.screens.base import StatusBar
from console.widgets.breaker_table import BreakerTable
from tests.serving import served

DEADLINE_S = 20.0


def ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    found, _, _ = select.select([process.stdout], [], [], DEADLINE_S)
    assert found and process.stdout.readline().startswith("tripwire serve: recording to")


async def until(pilot: Pilot[None], condition: Callable[[], bool], timeout: float) -> float:
    """Flush and look until ``condition`` holds; returns how long it took (on a real deadline)."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"not within {timeout:g}s: {status(app)!r}"
        await pilot.pause(0.05)
        app.flush()
    return time.monotonic() - start


def status(app: ConsoleApp) -> str:
    return str(app.screen.query_one(StatusBar).content)


def greyed(app: ConsoleApp) -> bool:
    return app.has_class("-stale") and app.screen.query_one(BreakerTable).styles.tint.a > 0


@pytest.mark.asyncio
async def test_a_killed_engine_shows_stale_and_a_new_one_live_again(tmp_path: Path) -> None:
    with served(tmp_path) as (process, db):
        ready(process)
        app = ConsoleApp(AttachedLink(db, read_only=True), traces=db)
        async with app.run_test(size=(160, 50)) as pilot:
            await until(pilot, lambda: status(app).startswith("● LIVE") and bool(app.model.tools), DEADLINE_S)
            assert not greyed(app)

            process.send_signal(signal.SIGKILL)
            process.wait(10)
            # Its process ended: gone at once, whatever its last heartbeat (issue 22 §2).
            await until(pilot, lambda: status(app).startswith("GONE — the engine's process ended"),
                        timeout=STALE_AFTER_S + 5)  # fmt: skip
            assert "● LIVE" not in status(app) and "last known:" in status(app)
            assert greyed(app), "the board is greyed: its last known state"

            with served(tmp_path) as (again, same):
                assert same == db
                ready(again)
                await until(pilot, lambda: status(app).startswith("● LIVE"), DEADLINE_S)
                assert not greyed(app)
