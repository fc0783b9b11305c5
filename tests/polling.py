"""Bounded waits on a real clock for what another thread or process does.

Behaviour is checked on virtual time; these only wait for work outside the test's own loop (a
follower thread, a served engine, a file watcher) and fail with what was awaited when it does
not come within the bound.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping

import anyio
from textual.pilot import Pilot

from console.app import ConsoleApp


def wait_for(condition: Callable[[], object], what: str = "condition", timeout: float = 5.0) -> None:
    """Poll ``condition`` every 10 ms until it holds, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.01)


async def eventually(condition: Callable[[], object], what: str = "condition", timeout: float = 5.0) -> None:
    """:func:`wait_for` on the event loop: poll every 10 ms (other tasks run meanwhile) until
    ``condition`` holds, for at most ``timeout`` real seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        await anyio.sleep(0.01)


async def until(
    pilot: Pilot[None],
    condition: Callable[[], bool],
    timeout: float = 10.0,
    *,
    seen: Callable[[], object] | None = None,
) -> None:
    """Flush the console and look, every 20 ms, until ``condition`` holds (at most ``timeout`` s);
    on failure, say what ``seen`` returned last."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    deadline = time.monotonic() + timeout
    while True:
        app.flush()
        if condition():
            return
        if time.monotonic() >= deadline:
            last = f"; seen: {seen()!r}" if seen is not None else ""
            raise AssertionError(f"condition not met within {timeout:g}s{last}")
        await pilot.pause(0.02)


def finished(running: Mapping[str, subprocess.Popen[str]], timeout: float) -> dict[str, tuple[int, str, str]]:
    """Each of ``running`` (started together) as it ended: (exit status, stdout, stderr), all within
    one ``timeout``; one still running then is killed, and its stderr says so."""
    deadline = time.monotonic() + timeout
    ended = {}
    for name, process in running.items():
        try:
            out, err = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            err = (err or "") + f"\n(killed: still running after {timeout:.0f}s)"
        ended[name] = (process.returncode, out or "", err or "")
    return ended
