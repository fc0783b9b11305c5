"""What stands in the fleet reaches a process that was not there when it happened: an operator's
trip or disable holds fleet-wide until reset (for a process joining later, or back after Redis
was away for it), and a fleet-wide open lasts its open period for a process joining within it.

Engines in one test process on one real Redis; every test runs on trio and asyncio, with its
engines started and not started. The commands stream is emptied before a process joins or comes
back: as when the command is older than what a process reads from the stream (30 s).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, NamedTuple

import anyio
import pytest
import redis
from anyio import current_time

from engine import BreakerConfig, BreakerState, Engine, RetryPolicy, ToolManifest
from engine.fleet import Fleet, FleetClient, parse_fleet_url, send_command
from engine.fleet.keys import FleetKeys
from tests.engine.conftest import new_engine, recorded
from tests.engine.fleet.conftest import RedisServer, eventually
from tests.engine.fleet.test_fleet import FAST, Node, Service, acks_of, lookup, manifests, namespace, open_on

pytestmark = pytest.mark.anyio


async def join(stack: AsyncExitStack, engine: Engine, url: str, key: bytes | None) -> Node:
    """``engine`` (made at the test's start: see ``fleet_of``) joins the fleet now."""
    engine.runtime.wall_clock = time.time
    service = Service()
    engine.register("search", service)
    engine.register("lookup", lookup)
    events = recorded(engine)
    fleet = await stack.enter_async_context(Fleet(engine, url, key=key))
    return Node(engine, fleet, service, events)


class OnFleet(NamedTuple):
    key: bytes
    url: str
    keys: FleetKeys
    engines: list[Engine]
    client: FleetClient
    stack: AsyncExitStack


@asynccontextmanager
async def on_fleet(
    server: RedisServer, request: pytest.FixtureRequest, count: int, **params: object
) -> AsyncIterator[OnFleet]:
    """A fleet key, this test's namespace on ``server`` (its URL with ``params``), ``count`` engines
    (made first: see ``fleet_of``), a client and a stack, all closed as the block ends."""
    key = os.urandom(32)
    ns = namespace(request)
    url = server.url(ns, **FAST, **params)
    engines = [await new_engine(*manifests()) for _ in range(count)]
    client = FleetClient(parse_fleet_url(url))
    async with AsyncExitStack() as stack:
        stack.push_async_callback(client.aclose)
        yield OnFleet(key, url, FleetKeys(ns), engines, client, stack)


class Partition:
    """Cuts one process off Redis (its round trips fail as a dead Redis's would) while Redis and
    the others go on."""

    def __init__(self, fleet: Fleet) -> None:
        self.cut = False
        real = fleet.client.execute

        async def execute(*commands: Any) -> list[Any]:
            if self.cut:
                raise redis.exceptions.ConnectionError("cut off by the test")
            return await real(*commands)

        fleet.client.execute = execute  # type: ignore[method-assign]  # the test's stand-in


async def test_a_standing_trip_and_disable_reach_a_process_that_joins_later_until_reset(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    async with on_fleet(redis_server, request, 3) as on:
        key, url, keys, engines, client, stack = on
        a = await join(stack, engines[0], url, key)
        trip = await send_command(client, "trip", "lookup", key=key, reason="maintenance")
        disable = await send_command(client, "disable", "search", key=key, reason="flaky checks")
        await eventually(lambda: a.state("search") is BreakerState.DISABLED, "a took both")
        with redis_server.client() as r:
            r.delete(keys.commands)  # both commands are long past the stream's window
        b = await join(stack, engines[1], url, key)
        assert (b.state("lookup"), b.state("search")) == (BreakerState.FORCED_OPEN, BreakerState.DISABLED)
        (tripped,) = b.events.of("BreakerTripped")
        assert tripped.reason == "maintenance" and tripped.actor.startswith("operator:")
        acks = await acks_of(client, trip.id, 2)
        assert {(x.status, x.result) for x in acks.values()} == {("applied", "FORCED_OPEN")}
        assert set(acks) == {a.fleet.member.id, b.fleet.member.id}  # b acknowledged the standing trip
        assert len(await acks_of(client, disable.id, 2)) == 2
        assert len(a.events.of("BreakerTripped")) == 1  # a applied it once, not again as standing

        await send_command(client, "reset", "lookup", key=key)
        await eventually(lambda: b.state("lookup") is BreakerState.CLOSED, "reset everywhere")
        with redis_server.client() as r:
            r.delete(keys.commands)
        c = await join(stack, engines[2], url, key)
        assert (c.state("lookup"), c.state("search")) == (BreakerState.CLOSED, BreakerState.DISABLED)
        assert c.events.of("BreakerReset") == []  # a reset stands as nothing: a fresh breaker is left alone

        forged = await send_command(client, "trip", "lookup", key=os.urandom(32))
        refusals = await acks_of(client, forged.id, 3)
        for ack in refusals.values():
            assert ack.status == "refused" and "the fleet's command key" in ack.result
            assert "store" not in ack.result


async def test_a_process_back_after_redis_was_away_takes_the_standing_state_it_missed(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    async with on_fleet(redis_server, request, 2) as on:
        key, url, keys, engines, client, stack = on
        a = await join(stack, engines[0], url, key)
        b = await join(stack, engines[1], url, key)
        await send_command(client, "trip", "lookup", key=key)
        await eventually(lambda: a.state("lookup") is BreakerState.FORCED_OPEN, "tripped")
        a.engine.trip("search", reason="this host's own operator")  # not the fleet's: never undone by it
        partition = Partition(a.fleet)
        partition.cut = True
        await eventually(lambda: a.events.of("FleetUnavailable"), "a is cut off")
        await send_command(client, "reset", "lookup", key=key, reason="back in service")
        await send_command(client, "disable", "lookup", key=key)  # superseded by the reset below
        await send_command(client, "reset", "lookup", key=key, reason="back in service")
        await eventually(lambda: b.state("lookup") is BreakerState.CLOSED, "b reset")
        with redis_server.client() as r:
            r.delete(keys.commands)  # a was away longer than the stream remembers
        partition.cut = False
        await eventually(lambda: a.events.of("FleetRestored"), "a is back", 5)
        await eventually(lambda: a.state("lookup") is BreakerState.CLOSED, "a took the standing reset")
        (reset,) = a.events.of("BreakerReset")
        assert reset.reason == "back in service" and reset.actor.startswith("operator:")
        assert a.state("search") is BreakerState.FORCED_OPEN


async def test_a_process_joining_within_a_fleet_wide_open_is_open_for_the_rest_of_it(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    url = redis_server.url(ns, **FAST)
    keys = FleetKeys(ns)
    open_s = 1.0
    slow = (
        ToolManifest(
            id="search",
            retry_policy=RetryPolicy(max_attempts=1),
            circuit_breaker=BreakerConfig(failure_threshold=2, timeout_ms=open_s * 1000),
        ),
        ToolManifest(id="lookup"),
    )
    engines = [await new_engine(*slow) for _ in range(4)]
    async with AsyncExitStack() as stack:
        a, b = [await join(stack, e, url, None) for e in engines[:2]]
        await open_on(a)
        await open_on(b)
        with redis_server.client() as r:
            await eventually(lambda: r.pttl(keys.fleet_open("search")) > 0, "the fleet-wide open stands")
            await anyio.sleep(0.3)
            joined_at = current_time()
            c = await join(stack, engines[2], url, None)
            left_s = r.pttl(keys.fleet_open("search")) / 1000
        assert c.state() is BreakerState.OPEN and c.service.calls == 0
        (opened,) = c.events.of("BreakerOpened")
        assert opened.reason.startswith("fleet: open fleet-wide when this process joined (2 processes")
        half_open_in = c.engine.breaker("search").half_open_at - joined_at  # type: ignore[operator]
        assert left_s <= half_open_in < open_s - 0.15  # the rest of the fleet's period, not a new one
        assert (await c.engine.try_call("search")).attempts == 0
        assert c.state("lookup") is BreakerState.CLOSED

        await eventually(lambda: c.state() is BreakerState.HALF_OPEN, "c half-opens with the fleet", 3)
        a.service.up = b.service.up = c.service.up = True
        deadline = time.monotonic() + 3
        while c.state() is not BreakerState.CLOSED:  # the fleet's one probe closes every process
            assert time.monotonic() < deadline, [n.state() for n in (a, b, c)]
            for node in (a, b, c):
                if node.state() is not BreakerState.CLOSED:
                    await node.engine.try_call("search")
            await anyio.sleep(0.01)
        with redis_server.client() as r:
            assert r.exists(keys.fleet_open("search")) == 0  # the probe ended the fleet's open
        d = await join(stack, engines[3], url, None)
        assert d.state() is BreakerState.CLOSED and d.events.of("BreakerOpened") == []


async def test_a_tool_forced_open_while_redis_was_away_stays_open_when_an_operator_tripped_it_meanwhile(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    async with on_fleet(redis_server, request, 1, on_unavailable="fail_closed") as on:
        key, url, _, engines, client, stack = on
        a = await join(stack, engines[0], url, key)
        partition = Partition(a.fleet)
        partition.cut = True
        await eventually(lambda: a.state("search") is BreakerState.FORCED_OPEN, "forced open: fail_closed")
        await send_command(client, "trip", "search", key=key, reason="incident 42")
        partition.cut = False
        await eventually(lambda: a.state("lookup") is BreakerState.CLOSED, "lookup reset: Redis is back", 3)
        await eventually(lambda: a.events.of("BreakerTripped")[-1].actor != "fleet", "the standing trip", 3)
        assert a.state("search") is BreakerState.FORCED_OPEN
        assert [e.tool_id for e in a.events.of("BreakerReset")] == ["lookup"]  # search never closed between
        assert a.events.of("BreakerTripped")[-1].reason == "incident 42"
