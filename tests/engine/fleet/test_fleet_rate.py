"""A ``scope: fleet`` rate limit: one budget for the whole fleet, leased from one bucket in Redis
once a sync round trip and spent locally; with Redis away each process runs on its share of the
rate (``rate_per_s / live members``) and says so, then leases again once Redis is back.

On a real Redis, on real clocks (tests/engine/fleet/conftest.py), engines started and not. The
lease's arithmetic is tested without Redis in tests/engine/fleet/test_leased_bucket.py; the
fleet's combined rate over 10 s with real processes in tests/reliability/test_fleet_rate_processes.py.
"""

from __future__ import annotations

import signal
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine, RetryPolicy, ToolManifest
from engine.fleet import Fleet, read_fleet
from engine.fleet.keys import FleetKeys
from engine.fleet.leased_bucket import LeasedBucket
from engine.strategies.rate_limit import TokenBucket
from tests.engine.conftest import Recorder, new_engine, recorded
from tests.engine.fleet.conftest import RedisServer, eventually
from tests.engine.fleet.test_fleet import namespace

pytestmark = pytest.mark.anyio

SYNC_MS = 20
FAST = {"sync_ms": SYNC_MS, "heartbeat_s": 0.05, "timeout_ms": 300, "window_s": 10, "lease_ms": 3000}


def manifest(rate_per_s: float, burst: int, **more: Any) -> ToolManifest:
    limit = {"rate_per_s": rate_per_s, "burst": burst, "max_wait_ms": 2000, "scope": "fleet", **more}
    return ToolManifest(id="api", retry_policy=RetryPolicy(max_attempts=1), rate_limit=limit)  # type: ignore[call-arg]


class Counter:
    def __init__(self) -> None:
        self.times: list[float] = []

    async def __call__(self) -> str:
        self.times.append(time.monotonic())
        return "ok"


def facts(engine: Engine) -> dict[str, Any]:
    return dict(engine.stats()["api"].strategies["rate_limit"])


async def hammer(engine: Engine, until: float) -> None:
    """Call ``api`` back to back until ``until`` (monotonic): each call waits for its token."""
    while time.monotonic() < until:
        await engine.try_call("api")


async def test_two_processes_share_one_rate_through_leases(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    engines = [await new_engine(manifest(50, 5)) for _ in range(2)]
    counters = [Counter(), Counter()]
    async with AsyncExitStack() as stack:
        fleets = []
        for engine, counter in zip(engines, counters, strict=True):
            engine.register("api", counter)
            fleets.append(await stack.enter_async_context(Fleet(engine, redis_server.url(ns, **FAST))))
        for engine in engines:
            assert isinstance(
                engine.runtime.tool("api").pipeline.own("rate_limit").state.bucket, LeasedBucket
            )  # type: ignore[union-attr]
        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            for engine in engines:
                for _ in range(3):
                    tg.start_soon(hammer, engine, start + 1.0)
        calls = [t for c in counters for t in c.times if start <= t <= start + 1.0]
        # within the second: at most the bucket (5) plus 1 s at 50/s, plus the leases held at the start
        assert len(calls) <= 5 + 50 + 2 * 2
        assert len(calls) >= 0.8 * 50, "the leases keep up with the rate"
        assert all(len(c.times) > 10 for c in counters), "both processes got their part"
        fleet_rate = facts(engines[0])["fleet_rate"]
        assert fleet_rate["mode"] == "lease" and fleet_rate["members"] == 2
        assert fleet_rate["share_per_s"] == 25.0 and fleet_rate["max_lease"] == 2
        with redis_server.client() as r:
            assert 0 < r.pttl(keys.rate("api")) <= 1000 + 100, "the bucket's key expires (once full again)"
        deadline = time.monotonic() + 3
        while True:
            view = await read_fleet(redis_server.url(ns))
            summaries = [m.rate_limits.get("api", {}) for m in view.members]
            if all(s.get("mode") == "lease" and s.get("members") == 2 for s in summaries):
                break
            assert time.monotonic() < deadline, summaries
        assert {s["scope"] for s in summaries} == {"fleet"}


async def test_redis_away_falls_back_to_the_fleet_share_then_leases_again(own_redis: RedisServer) -> None:
    url = own_redis.url("rate-outage", **FAST)
    engines = [await new_engine(manifest(40, 4)) for _ in range(2)]
    async with AsyncExitStack() as stack:
        nodes: list[tuple[Engine, Counter, Recorder]] = []
        for engine in engines:
            counter = Counter()
            engine.register("api", counter)
            events = recorded(engine)
            await stack.enter_async_context(Fleet(engine, url))
            nodes.append((engine, counter, events))
        for engine, _, _ in nodes:
            await eventually(lambda e=engine: facts(e)["fleet_rate"]["members"] == 2, "both live", 3)  # type: ignore[misc]
        own_redis.kill()
        for engine, _, events in nodes:
            await eventually(lambda ev=events: ev.of("FleetRateFellBack"), "falls back", 5)  # type: ignore[misc]
            (fell,) = events.of("FleetRateFellBack")
            assert (fell.tool_id, fell.rate_per_s, fell.share_per_s, fell.members) == ("api", 40, 20.0, 2)
            assert "runs on its share 20/s (2 members)" in fell.describe()
            assert facts(engine)["fleet_rate"]["mode"] == "fallback"
        # on its share: about 20 calls a second, Redis or not (the call path never waits on it)
        engine, counter, events = nodes[0]
        start = time.monotonic()
        await hammer(engine, start + 1.0)
        done = len([t for t in counter.times if t >= start])
        assert 15 <= done <= 20 + 2 + 1, done
        own_redis.start()
        for engine, _, events in nodes:
            await eventually(lambda ev=events: ev.of("FleetRateRecovered"), "leases again", 10)  # type: ignore[misc]
            (back,) = events.of("FleetRateRecovered")
            assert back.tool_id == "api" and back.fallback_s > 0
            assert facts(engine)["fleet_rate"]["mode"] == "lease"
        assert await engines[0].call("api") == "ok"
        await eventually(lambda: facts(engines[0])["fleet_rate"]["last_lease"] >= 0, "a lease again", 2)


async def test_leaving_the_fleet_gives_the_tool_its_own_bucket_back(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    engine = await new_engine(manifest(10, 2))
    engine.register("api", Counter())
    async with Fleet(engine, redis_server.url(namespace(request), **FAST)):
        assert "fleet_rate" in facts(engine)
    bucket = engine.runtime.tool("api").pipeline.own("rate_limit").state.bucket  # type: ignore[union-attr]
    assert type(bucket) is TokenBucket and (bucket.rate, bucket.burst) == (10, 2)
    assert "fleet_rate" not in facts(engine)
    assert await engine.call("api") == "ok"


async def test_a_process_scope_rate_takes_no_lease(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    engine = await new_engine(manifest(10, 2, scope="process"))
    engine.register("api", Counter())
    async with Fleet(engine, redis_server.url(ns, **FAST)):
        await engine.call("api")
        await anyio.sleep(SYNC_MS * 3 / 1000)
        assert "fleet_rate" not in facts(engine)
        with redis_server.client() as r:
            assert not r.exists(FleetKeys(ns).rate("api"))


async def test_calls_go_on_at_the_share_while_redis_is_paused_never_waiting_on_it(
    own_redis: RedisServer,
) -> None:
    """Redis paused (SIGSTOP: it answers nothing, nor refuses) for a second — before the process
    can know it is away — the calls go on: a lease overdue lets the pool refill at the share."""
    engine = await new_engine(manifest(40, 4))
    counter = Counter()
    engine.register("api", counter)
    async with Fleet(engine, own_redis.url("paused", **FAST)):
        assert own_redis.process is not None
        await hammer(engine, time.monotonic() + 0.3)  # leasing
        own_redis.process.send_signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            await hammer(engine, start + 1.0)
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        done = len([t for t in counter.times if start <= t <= start + 1.0])
        assert 0.6 * 40 <= done <= 40 + 4 + 2, done
        await eventually(lambda: facts(engine)["fleet_rate"]["mode"] == "lease", "leasing again", 10)
        assert await engine.call("api") == "ok"


TOOL = "tool:\n  id: api\n  side_effect: read_only\n  retry_policy: {max_attempts: 1}\n"


async def test_a_reload_keeps_the_lease_and_a_scope_change_gives_the_bucket_back(
    redis_server: RedisServer, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    (tmp_path / "api.yaml").write_text(TOOL + "  rate_limit: {rate_per_s: 50, burst: 5, scope: fleet}\n")
    engine = Engine(tmp_path)
    engine.register("api", Counter())
    async with Fleet(engine, redis_server.url(namespace(request), **FAST)):
        limiter = engine.runtime.tool("api").pipeline.own("rate_limit").state  # type: ignore[union-attr]
        leased = limiter.bucket
        assert isinstance(leased, LeasedBucket)
        (tmp_path / "api.yaml").write_text(TOOL + "  rate_limit: {rate_per_s: 20, burst: 2, scope: fleet}\n")
        engine.reload_manifests()
        assert limiter.bucket is leased and (leased.rate, leased.burst) == (20, 2), "the same lease, new rate"
        assert facts(engine)["fleet_rate"]["mode"] == "lease"
        (tmp_path / "api.yaml").write_text(
            TOOL + "  rate_limit: {rate_per_s: 20, burst: 2, scope: process}\n"
        )
        engine.reload_manifests()
        await eventually(lambda: type(limiter.bucket) is TokenBucket, "its own bucket back", 2)
        assert "fleet_rate" not in facts(engine) and await engine.call("api") == "ok"
