"""A stopping process and the calls its engine leaves behind in worker threads: a bounded stop.

A plain-function tool runs in a worker thread, which nothing can cancel: when its timeout or a
stop cuts the attempt off, the engine abandons the call at once, but the thread runs on — and
Python waits for every such thread before the process exits: for as long as the call takes, for
ever if it never returns. So ``tripwire serve`` and the console, once stopped (their turns
recorded ``interrupted``, their store closed, the fleet left), give those threads a short grace,
then name the calls they abandon (the engine lists them: ``engine.threads``) and end the process
without waiting for them.
"""

from __future__ import annotations

import os
import sys
import time

from engine.engine import Engine
from engine.errors import one_line

STOP_GRACE_S = 2.0
"""How long a stopped process waits for calls still running in worker threads before it leaves them."""


def leave_stuck_calls(engine: Engine, status: int, *, who: str, grace_s: float = STOP_GRACE_S) -> None:
    """Once ``who`` (``tripwire serve``) has stopped and written everything: when attempts of
    ``engine`` still run in worker threads after ``grace_s``, say which, on one line, and end the
    process with ``status`` now, rather than wait for them."""
    stuck = engine.threads.left_after(grace_s)
    if not stuck:
        return
    now = time.monotonic()
    shown = ", ".join(one_line(running.describe(now)) for running in stuck)
    print(
        f"{who}: stopped; abandoning {len(stuck)} call(s) still running in worker threads"
        f" (a plain function cannot be cancelled): {shown}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(status)  # Python would wait for those threads at exit: for as long as they run


__all__ = ["STOP_GRACE_S", "leave_stuck_calls"]
