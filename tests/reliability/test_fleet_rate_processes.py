"""Two real processes share one ``scope: fleet`` rate limit through a real ``redis-server``: each
leases tokens from the fleet's bucket once a sync round trip and spends them locally, and together
they start calls within 10 % of the limit over 10 s — no more (one budget, not one each) and not
much less (the leases keep up). Runs on real time, as the fleet's process tests do (12 s or so);
every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.redis_server import running_redis

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")

MEMBER = Path(__file__).with_name("fleet_rate_member.py")
ROOT = Path(__file__).resolve().parents[2]
RATE_PER_S = 40.0
BURST = 4
FAST = {"sync_ms": 50, "heartbeat_s": 0.2, "stale_s": 1, "gone_s": 2.5, "timeout_ms": 300}
WARM_S = 1.0
"""Measured after both have joined and leased for a second: the bucket's first burst left out."""
MEASURE_S = 10.0


def test_two_processes_together_stay_within_ten_percent_of_the_fleet_rate(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    with running_redis(tmp_path) as redis:
        url = redis.url("rate", **FAST)
        members = []
        outs = [tmp_path / f"calls{n}.txt" for n in range(2)]
        try:
            for out in outs:
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
                members.append(
                    subprocess.Popen(
                        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                    )
                )
            for member in members:
                assert member.stdout is not None
                line = member.stdout.readline()  # bounded: the process exits (EOF) if it fails
                assert line.strip() == "joined", member.stderr.read() if member.stderr else ""
            start = time.time() + WARM_S
            time.sleep(WARM_S + MEASURE_S)  # real processes on real time: the measure itself
            stop.touch()
            for member in members:
                member.wait(timeout=10)
                assert member.returncode == 0, member.stderr.read() if member.stderr else ""
        finally:
            stop.touch()
            for member in members:
                if member.poll() is None:
                    member.kill()
                    member.wait(timeout=5)
    per_member = [[float(t) for t in out.read_text().split()] for out in outs]
    counted = [len([t for t in times if start <= t < start + MEASURE_S]) for times in per_member]
    rate = sum(counted) / MEASURE_S
    assert abs(rate - RATE_PER_S) <= 0.1 * RATE_PER_S, (rate, counted)
    assert min(counted) >= 0.2 * sum(counted), f"both processes got their part: {counted}"
