"""The real console in a real terminal: tmux runs it, we read the screen, press keys and quit."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


class Terminal:
    def __init__(self, session: str, status_file: Path) -> None:
        self.session = session
        self.status_file = status_file

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session)

    def press(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.session, *keys)

    def exit_status(self, timeout: float = 30.0) -> int | None:
        """The console's exit status, which the shell running it writes once it has ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status_file.exists() and (text := self.status_file.read_text().strip()):
                return int(text)
            time.sleep(0.1)
        return None

    def wait_for(self, condition: Callable[[str], bool], what: str, timeout: float = 20.0) -> str:
        """Poll the screen until ``condition`` holds: the console runs in real time."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if condition(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{what} did not show within {timeout}s; the screen:\n{screen}")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    session = f"tripwire-test-{uuid.uuid4().hex[:8]}"
    # COLUMNS and LINES (pytest's terminal may set them) would override the pane's size. A shell
    # runs the console and writes its exit status to a file: tmux does not always report a
    # program's, and what it prints may be gone from the pane by the time it is read.
    argv = ["env", "-u", "COLUMNS", "-u", "LINES", sys.executable, "-m", "console", "console"]
    status_file = tmp_path / "exit-status"
    console = shlex.join([*argv, "--traces", str(tmp_path / "t.db")])
    command = f"{console}; echo $? > {shlex.quote(str(status_file))}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "140", "-y", "40", "-c", str(ROOT), command],
        check=True,
    )
    subprocess.run(["tmux", "set-option", "-t", session, "remain-on-exit", "on"], check=True)
    try:
        yield Terminal(session, status_file)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_the_console_runs_in_a_real_terminal_and_quits_cleanly(terminal: Terminal, tmp_path: Path) -> None:
    screen = terminal.wait_for(lambda s: "LIVE" in s and "flight_search" in s, "the board")
    assert "CLOSED" in screen and "Quit" in screen
    terminal.press("v")
    terminal.wait_for(lambda s: "TOOL" in s and "STATE" in s and "ERR%" in s, "the table")
    terminal.press("2")
    terminal.wait_for(lambda s: "Follow" in s, "the dependency view")
    terminal.press("q")
    assert terminal.exit_status() == 0, terminal.screen()
    assert (tmp_path / "t.db").exists(), "the run was recorded"
