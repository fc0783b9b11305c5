"""The probe lease held for as long as the probe runs, freed when its holder leaves; and a shared
value nobody of ours wrote is no opinion, not a crash.

Engines in one test process on one real Redis; every test runs on trio and asyncio, with its
engines started and not started.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import pytest
from anyio.abc import TaskStatus

from engine import BreakerState
from engine.fleet import Fleet
from engine.fleet.keys import FleetKeys
from tests.engine.conftest import new_engine, recorded
from tests.engine.fleet.conftest import RedisServer, eventually
from tests.engine.fleet.test_fleet import (
    FAST,
    Node,
    Service,
    fleet_of,
    lookup,
    manifests,
    namespace,
    open_on,
    take_the_lease,
)

pytestmark = pytest.mark.anyio

LEASE_MS = 150


async def test_a_probe_longer_than_the_lease_keeps_it_and_stays_the_only_probe(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    url = redis_server.url(ns, **{**FAST, "lease_ms": LEASE_MS})
    async with AsyncExitStack() as stack:
        nodes = await fleet_of(stack, 2, url)
        for node in nodes:
            await open_on(node)
        prober, other = nodes
        await take_the_lease(prober)
        prober.service.delay_s = 3 * LEASE_MS / 1000
        prober.service.calls = 0
        for node in nodes:
            node.service.up = True
        await eventually(lambda: other.state() is BreakerState.HALF_OPEN, "the other half-opened")
        async with anyio.create_task_group() as group:
            group.start_soon(prober.engine.try_call, "search")  # the probe: 3 leases long
            await eventually(lambda: prober.service.calls == 1, "the probe started")
            while prober.state() is BreakerState.HALF_OPEN:  # meanwhile the other keeps trying
                result = await other.engine.try_call("search")
                assert result.attempts == 0, "a second probe ran while the first was still running"
                assert prober.fleet.holds_lease("search") and not other.fleet.holds_lease("search")
                await anyio.sleep(0.01)
        assert prober.state() is BreakerState.CLOSED
        await eventually(lambda: other.state() is BreakerState.CLOSED, "the probe's success closed the other")
        probes = [e for n in nodes for e in n.events.of("AttemptStarted") if e.probe]
        assert len(probes) == 1 and prober.service.calls == 1


async def serve(fleet: Fleet, scope: anyio.CancelScope, *, task_status: TaskStatus[None]) -> None:
    """``fleet`` in a task of its own, until ``scope`` is cancelled: it may leave in any order."""
    with scope:
        await fleet.run(task_status=task_status)


async def test_a_process_that_leaves_frees_its_lease_at_once(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    url = redis_server.url(ns, **FAST)  # lease_ms 3000
    engines = [await new_engine(*manifests()) for _ in range(2)]
    async with anyio.create_task_group() as group:
        nodes, scopes = [], []
        for engine in engines:
            service = Service()
            engine.register("search", service)
            engine.register("lookup", lookup)
            node = Node(engine, Fleet(engine, url), service, recorded(engine))
            scopes.append(anyio.CancelScope())
            await group.start(serve, node.fleet, scopes[-1])
            nodes.append(node)
        for node in nodes:
            await open_on(node)
        holder, other = nodes
        await take_the_lease(holder)
        await eventually(lambda: other.state() is BreakerState.HALF_OPEN, "the other half-opened")
        assert (await other.engine.try_call("search")).attempts == 0  # it wants the lease too
        scopes[nodes.index(holder)].cancel()  # it stops before it probed
        with redis_server.client() as r:
            gone = holder.fleet.member.id
            await eventually(lambda: r.get(keys.lease("search")) != gone, "the lease freed", 1)
        await eventually(lambda: other.fleet.holds_lease("search"), "the other takes it", 1)
        other.service.up = True
        await other.engine.try_call("search")
        assert other.state() is BreakerState.CLOSED
        group.cancel_scope.cancel()


async def test_a_shared_value_nobody_of_ours_wrote_is_no_opinion_and_the_fleet_goes_on(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    async with AsyncExitStack() as stack:
        a, b, c = await fleet_of(stack, 3, redis_server.url(ns, **FAST))
        with redis_server.client() as r:
            r.hset(keys.tool("search"), "open_epoch", "not a number")
            r.hset(keys.override("lookup"), mapping={"id": "x", "action": "trip"})
            rounds = a.fleet.round_trips
            await eventually(lambda: a.fleet.round_trips >= rounds + 3, "the fleet goes on")
            r.delete(keys.tool("search"))
        assert a.state("lookup") is BreakerState.CLOSED
        await open_on(a)
        await open_on(b)
        await eventually(lambda: c.state() is BreakerState.OPEN, "the quorum still opens the fleet")


async def test_a_tool_called_less_often_than_the_lease_lasts_still_gets_its_probe(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    url = redis_server.url(ns, **{**FAST, "lease_ms": 200})
    async with AsyncExitStack() as stack:
        (node,) = await fleet_of(stack, 1, url)
        await open_on(node)
        node.service.up = True
        await eventually(lambda: node.state() is BreakerState.HALF_OPEN, "half-open", 3)
        for _ in range(6):  # a call every 0.5 s: each lease taken for the last one runs out unused
            if (await node.engine.try_call("search")).attempts:
                break
            await anyio.sleep(0.5)
        assert node.state() is BreakerState.CLOSED
