"""``tripwire serve`` in a real subprocess, for tests that need an engine in another process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).parents[1]


@contextmanager
def served(directory: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Run ``tripwire serve`` on the bundled manifests, recording into ``directory/traces.db``.

    Its stderr goes to ``directory/serve.log`` (a pipe nobody reads could fill and stall it);
    its stdout is a pipe. The process is killed if it is still running when the block ends.
    """
    db = directory / "traces.db"
    command = [sys.executable, "-m", "console", "serve", "--manifests", str(ROOT / "manifests")]
    command += ["--traces", str(db), *extra]
    with open(directory / "serve.log", "w") as log:
        process = subprocess.Popen(command, cwd=directory, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        yield process, db
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
