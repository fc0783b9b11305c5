"""Redis killed mid-run: each process goes on by its policy and says so, then re-joins when Redis
is back; and the password is nowhere — not in an event, a log line, a repr or the stream.

Runs on trio and asyncio, with the engines started and not started.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import AsyncExitStack
from typing import Any

import pytest

from engine import BreakerState
from engine.fleet import Fleet, read_fleet, tail_events
from tests.engine.conftest import new_engine, recorded
from tests.engine.fleet.conftest import RedisServer, eventually
from tests.engine.fleet.test_fleet import FAST, Node, Service, lookup, manifests

pytestmark = pytest.mark.anyio


async def test_redis_killed_mid_run_degrades_to_local_or_fail_closed_and_recovers(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    password = own_redis.password
    assert password
    local_url = own_redis.url("outage", **FAST)
    closed_url = own_redis.url("outage", **FAST, on_unavailable="fail_closed", fail_closed_tools="search")
    engines = [await new_engine(*manifests()) for _ in range(2)]
    async with AsyncExitStack() as stack:
        nodes = []
        for engine, url in zip(engines, (local_url, closed_url), strict=True):
            engine.register("search", Service())
            engine.register("lookup", lookup)
            events = recorded(engine)
            nodes.append(Node(engine, await stack.enter_async_context(Fleet(engine, url)), Service(), events))
        local, closed = nodes
        assert local.fleet.available and closed.fleet.available

        own_redis.kill()
        await eventually(lambda: all(n.events.of("FleetUnavailable") for n in nodes), "both say so", 5)
        (said,) = local.events.of("FleetUnavailable")
        assert said.policy == "local" and said.forced_open == () and "running locally" in said.describe()
        assert said.server == f"default@127.0.0.1:{own_redis.port}/0"
        assert await local.engine.call("search") == "ok"  # local: every tool goes on
        assert local.state() is BreakerState.CLOSED and local.engine.breaker("search").probe_gate is None
        (forced,) = closed.events.of("FleetUnavailable")
        assert forced.policy == "fail_closed" and forced.forced_open == ("search",)
        assert closed.state() is BreakerState.FORCED_OPEN and closed.state("lookup") is BreakerState.CLOSED
        assert "FLEET UNAVAILABLE" in caplog.text

        own_redis.start()  # empty: nothing was saved
        await eventually(lambda: all(n.events.of("FleetRestored") for n in nodes), "both restored", 10)
        # Reset once the standing state is known (the next round trip): none stands here.
        await eventually(lambda: closed.state() is BreakerState.CLOSED, "the forced tool reset", 2)
        assert closed.events.of("BreakerReset")[-1].actor == "fleet"
        assert local.engine.breaker("search").probe_gate is not None  # the probe is the fleet's again

        deadline = time.monotonic() + 3
        while len((view := await read_fleet(local_url)).members) < 2:  # re-registered in the new Redis
            assert time.monotonic() < deadline, view
        assert {m.status for m in view.members} == {"live"}
        streamed: list[Any] = []
        while not any(e["event_type"] == "FleetRestored" for b in streamed for e in b.events):  # next tick
            assert time.monotonic() < deadline, streamed
            streamed = (await tail_events(local_url))[0]

        shown = [repr(n.fleet) for n in nodes] + [str(n.fleet.config) + repr(n.fleet.config) for n in nodes]
        shown += [json.dumps(e.to_dict(), default=str) for n in nodes for e in n.events]
        shown += [json.dumps(b.events) for b in streamed] + [caplog.text, repr(nodes[0].fleet.client)]
        assert [s for s in shown if password in s] == []
