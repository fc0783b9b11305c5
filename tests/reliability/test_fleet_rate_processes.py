"""Real processes (tests/reliability/fleet_rate_member.py) share a tool's rate limit through a real
``redis-server``:

* one ``scope: fleet`` rate: each process leases tokens from the fleet's bucket once a sync round
  trip and spends them locally, and together they start calls within 10 % of the limit over 10 s
  — no more (one budget, not one each) and not much less (the leases keep up);
* a cooldown: a 429 in one process pauses the tool in the other within a couple of sync periods
  until the advised end, then both go on.

Real time, as the fleet's process tests run (about 12 s and 6 s); every wait is bounded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.polling import wait_for
from tests.redis_server import running_redis
from tests.reliability.fleet_rate_member import COOLDOWN_S

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")

MEMBER = Path(__file__).with_name("fleet_rate_member.py")
ROOT = Path(__file__).resolve().parents[2]
RATE_PER_S = 40.0
BURST = 4
SYNC_MS = 50
FAST = {"sync_ms": SYNC_MS, "heartbeat_s": 0.2, "stale_s": 1, "gone_s": 2.5, "timeout_ms": 300}
WARM_S = 1.0
"""Measured after both have joined and leased for a second: the bucket's first burst left out."""
MEASURE_S = 10.0


@contextmanager
def members(tmp_path: Path, url: str, triggers: list[Path | None]) -> Iterator[list[Path]]:
    """One member process per trigger, hammering ``api``, joined when the block starts; stopped
    (and checked to exit cleanly) when it ends. Yields each one's file of call times."""
    stop = tmp_path / "stop"
    outs = [tmp_path / f"calls{n}.txt" for n in range(len(triggers))]
    processes: list[subprocess.Popen[str]] = []
    joined: list[str] = []
    try:
        for out, trigger in zip(outs, triggers, strict=True):
            command = [
                sys.executable,
                str(MEMBER),
                url,
                str(out),
                "4",
                str(stop),
                str(RATE_PER_S),
                str(BURST),
            ]
            command += [str(trigger)] if trigger is not None else []
            process = subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                env=os.environ | {"PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            processes.append(process)
            threading.Thread(target=lambda p=process: joined.extend(p.stdout or []), daemon=True).start()
        wait_for(lambda: len(joined) == len(processes), "every member joined", 15)
        yield outs
        stop.touch()
        for process in processes:
            assert process.wait(timeout=10) == 0
    finally:
        stop.touch()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=5)


def call_times(out: Path) -> list[float]:
    return [float(line) for line in out.read_text().splitlines() if not line.startswith("429")]


def test_two_processes_together_stay_within_ten_percent_of_the_fleet_rate(tmp_path: Path) -> None:
    with running_redis(tmp_path) as redis, members(tmp_path, redis.url("rate", **FAST), [None, None]) as outs:
        start = time.time() + WARM_S
        time.sleep(WARM_S + MEASURE_S)  # real processes on real time: the measure itself
    counted = [len([t for t in call_times(out) if start <= t < start + MEASURE_S]) for out in outs]
    rate = sum(counted) / MEASURE_S
    assert abs(rate - RATE_PER_S) <= 0.1 * RATE_PER_S, (rate, counted)
    assert min(counted) >= 0.2 * sum(counted), f"both processes got their part: {counted}"


def test_a_429_in_one_process_pauses_the_tool_in_the_other(tmp_path: Path) -> None:
    key_file = tmp_path / "fleet.key"
    key_file.write_bytes(os.urandom(32))
    key_file.chmod(0o600)
    trigger = tmp_path / "trigger"
    with running_redis(tmp_path) as redis:
        url = redis.url("cooldown", key_file=key_file, **FAST)
        with members(tmp_path, url, [trigger, None]) as (first, second):
            time.sleep(0.5)  # both calling
            trigger.touch()
            wait_for(lambda: "429" in first.read_text(), "the first member's 429", 5)
            (line,) = [line for line in first.read_text().splitlines() if line.startswith("429")]
            at = float(line.split()[1])
            wait_for(lambda: bool([t for t in call_times(second) if t > at + COOLDOWN_S]), "both go on", 10)
    # its next round trip publishes it, the other's next one reads it: two periods and the lag
    honoured = at + 4 * SYNC_MS / 1000
    for out in (first, second):
        paused = [t for t in call_times(out) if honoured < t < at + COOLDOWN_S - 0.05]
        assert paused == [], f"{out.name}: calls reached the tool during the cooldown: {paused}"
        assert [t for t in call_times(out) if t >= at + COOLDOWN_S - 0.05], f"{out.name} went on after it"
