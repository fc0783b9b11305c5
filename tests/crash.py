"""A recording worker (tests/engine/crash_worker.py) in a real process, to be killed with SIGKILL.

The worker prints ``DONE <turn id> <events>`` for each turn only after ``run_turn`` returned,
which with ``durability="turn"`` means after the turn was committed: every announced turn must
survive the kill.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

import pytest

ROOT = Path(__file__).resolve().parents[1]


class CrashWorker:
    """The worker recording into ``store``, its stderr in ``stderr_path``; killed when the block ends."""

    def __init__(self, store: Path, stderr_path: Path, *args: str) -> None:
        self.stderr_path = stderr_path
        self.announced: dict[str, int] = {}
        """Turn id → how many events it had, for every turn the worker announced as durable."""
        self._lines: queue.Queue[str | None] = queue.Queue()
        with open(stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.engine.crash_worker", str(store), *args],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )  # fmt: skip
        assert self.process.stdout is not None
        stdout = self.process.stdout

        def read() -> None:
            for line in stdout:
                self._lines.put(line)
            self._lines.put(None)

        threading.Thread(target=read, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for(self, wanted: int, deadline: float) -> None:
        """Until ``wanted`` turns are announced; fails the test at ``deadline`` (``time.monotonic``)."""
        while len(self.announced) < wanted:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                pytest.fail(f"only {len(self.announced)} turns announced in time: {self._stderr()}")
            if line is None:
                pytest.fail(f"the worker exited early: {self._stderr()}")
            self._note(line)

    def kill(self) -> None:
        """SIGKILL the worker, then note the turns it announced before it died."""
        os.kill(self.process.pid, signal.SIGKILL)
        assert self.process.wait(10) == -signal.SIGKILL
        while (line := self._lines.get(timeout=10)) is not None:
            self._note(line)

    def _note(self, line: str) -> None:
        word, turn_id, count = line.split()
        assert word == "DONE", line
        self.announced[turn_id] = int(count)

    def _stderr(self) -> str:
        return self.stderr_path.read_text()[-2000:]

    def __enter__(self) -> CrashWorker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
