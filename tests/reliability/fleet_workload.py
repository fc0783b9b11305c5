"""The workload of each ``tripwire serve --fleet`` process in tests/reliability/test_fleet_processes.py.

One tool, ``backend``, asks the test's HTTP service (``$FLEET_TEST_BACKEND``) for an answer: the
service is shared by every process, so an outage is the fleet's, and it sees every request that
reaches it (each names its process's pid). A turn of one call every ``$FLEET_TEST_PAUSE_S``;
each turn's id is appended to ``$FLEET_TEST_TURNS`` once it has ended, so the test can check that
every turn the workload ran is in the process's trace store.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import anyio

from engine import Engine
from engine.turn import ToolCall, Turn

BACKEND_ENV = "FLEET_TEST_BACKEND"
TURNS_ENV = "FLEET_TEST_TURNS"
PAUSE_ENV = "FLEET_TEST_PAUSE_S"
PID_HEADER = "X-Fleet-Pid"


def _ask(url: str) -> str:
    request = urllib.request.Request(url, headers={PID_HEADER: str(os.getpid())})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return str(answer.read().decode())
    except urllib.error.HTTPError as exc:  # the service is down: a transient failure to the breaker
        raise ConnectionError(f"backend answered {exc.code}") from None


async def backend() -> str:
    return await anyio.to_thread.run_sync(_ask, os.environ[BACKEND_ENV])


async def run(engine: Engine) -> None:
    engine.register("backend", backend)
    pause_s = float(os.environ.get(PAUSE_ENV, "0.05"))
    with open(os.environ[TURNS_ENV], "a", encoding="utf-8") as turns:
        count = 0
        while True:
            count += 1
            turn_id = f"p{os.getpid()}-{count}"
            await engine.run_turn(Turn([ToolCall("ask", "backend")], id=turn_id))
            turns.write(turn_id + "\n")
            turns.flush()
            await anyio.sleep(pause_s)
