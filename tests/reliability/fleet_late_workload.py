"""The workload of the ``tripwire serve --fleet`` processes in tests/reliability/test_fleet_adversarial.py.

It registers one tool, ``backend``, ``$LATE_S`` seconds after it starts (0: at once) — as a real
workload does once it has connected to what it serves — then calls it in a turn every
``$PAUSE_S``. The tool is a plain function: it appends a line to ``$CALLS_FILE`` each time it
actually runs (so the test sees whether a call reached it), then fails (``$MODE=fail``: a
connection error, which opens the breaker), answers (``ok``), or sleeps ``$STUCK_S`` (``stuck``:
far past its timeout, which a thread cannot be cancelled from). Once the tool is registered,
``registered`` is written beside the calls file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio

from engine import Engine
from engine.turn import ToolCall, Turn


def backend() -> str:
    with open(os.environ["CALLS_FILE"], "a", encoding="utf-8") as calls:
        calls.write(f"{time.time()}\n")
    mode = os.environ.get("MODE", "ok")
    if mode == "fail":
        raise ConnectionError("backend unreachable")
    if mode == "stuck":
        time.sleep(float(os.environ.get("STUCK_S", "3600")))
    return "ok"


async def run(engine: Engine) -> None:
    await anyio.sleep(float(os.environ.get("LATE_S", "0")))
    engine.register("backend", backend)
    Path(os.environ["CALLS_FILE"]).with_name("registered").write_text("yes")
    pause_s = float(os.environ.get("PAUSE_S", "0.05"))
    count = 0
    while True:
        count += 1
        await engine.run_turn(Turn([ToolCall("ask", "backend")], id=f"t{count}"))
        await anyio.sleep(pause_s)
