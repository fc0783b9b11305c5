"""Engines in one test process, each with its own Fleet on one real Redis: a faithful fleet for the
logic (quorum open, one probe across the fleet, operator commands with per-process acks, a
vanished key, the event stream, the reader's view).

Every test runs on trio and asyncio, with its engines started and not started.
"""

from __future__ import annotations

import os
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import BreakerConfig, BreakerState, Engine, RetryPolicy, ToolManifest
from engine.fleet import (
    Fleet,
    acknowledgements,
    read_fleet,
    send_command,
    tail_events,
)
from engine.fleet.client import FleetClient
from engine.fleet.config import parse_fleet_url
from engine.fleet.keys import FleetKeys
from tests.engine.conftest import Recorder, new_engine, recorded
from tests.engine.fleet.conftest import RedisServer, eventually

pytestmark = pytest.mark.anyio

FAST = {"sync_ms": 20, "heartbeat_s": 0.2, "timeout_ms": 500, "window_s": 10, "lease_ms": 3000}
OPEN_S = 0.3


def manifests() -> tuple[ToolManifest, ...]:
    return (
        ToolManifest(
            id="search",
            retry_policy=RetryPolicy(max_attempts=1),
            circuit_breaker=BreakerConfig(failure_threshold=2, timeout_ms=OPEN_S * 1000),
        ),
        ToolManifest(id="lookup"),
    )


class Service:
    """The service behind ``search`` as one process sees it: up or down, and how often it was called."""

    def __init__(self) -> None:
        self.up = True
        self.calls = 0
        self.delay_s = 0.0
        """How long each call takes (a slow probe)."""

    async def __call__(self) -> str:
        self.calls += 1
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        if not self.up:
            raise ConnectionError("search backend unreachable")
        return "ok"


async def lookup() -> int:
    return 1


class Node:
    def __init__(self, engine: Engine, fleet: Fleet, service: Service, events: Recorder) -> None:
        self.engine, self.fleet, self.service, self.events = engine, fleet, service, events

    def state(self, tool: str = "search") -> BreakerState:
        return self.engine.breaker(tool).state


async def fleet_of(
    stack: AsyncExitStack, count: int, url: str, key: bytes | None = None, *, commands: bool = True
) -> list[Node]:
    """``count`` processes of the fleet at ``url``, leaving it as ``stack`` unwinds. The engines
    are all made first: started ones run in the test's own stack, which must nest around the
    fleets' task groups."""
    engines = [await new_engine(*manifests()) for _ in range(count)]
    nodes = []
    for engine in engines:
        engine.runtime.wall_clock = time.time  # commands carry real wall-clock times
        service = Service()
        engine.register("search", service)
        engine.register("lookup", lookup)
        events = recorded(engine)
        fleet = await stack.enter_async_context(Fleet(engine, url, key=key, commands=commands))
        nodes.append(Node(engine, fleet, service, events))
    return nodes


def namespace(request: pytest.FixtureRequest) -> str:
    return "t" + str(abs(hash(request.node.nodeid)))[:12]


async def open_on(node: Node) -> None:
    """Make ``search`` fail in ``node`` until its own breaker opens."""
    node.service.up = False
    while node.state() is BreakerState.CLOSED:
        await node.engine.try_call("search")


async def acks_of(client: FleetClient, command_id: int, count: int) -> dict[str, Any]:
    """The first ``count`` acknowledgements of command ``command_id``, read from Redis (3 s at most)."""
    deadline = time.monotonic() + 3
    while len(acks := await acknowledgements(client, command_id)) < count:
        assert time.monotonic() < deadline, acks
    return dict(acks)


async def take_the_lease(node: Node) -> None:
    """A call in ``node`` once its breaker is half-open: rejected (no lease yet), it makes the
    process ask for the probe lease, which it then holds."""
    await eventually(lambda: node.state() is BreakerState.HALF_OPEN, "half-open", 3)
    assert (await node.engine.try_call("search")).attempts == 0
    await eventually(lambda: node.fleet.holds_lease("search"), "the lease taken", 3)


async def test_one_process_opening_leaves_the_others_closed_and_a_quorum_opens_the_fleet(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    async with AsyncExitStack() as stack:
        a, b, c = await fleet_of(stack, 3, redis_server.url(ns, **FAST))
        await open_on(a)
        keys = FleetKeys(ns)
        with redis_server.client() as r:
            await eventually(lambda: r.zcard(keys.opens("search")) == 1, "a's open counted")
            await anyio.sleep(0.1)  # five sync periods: nothing may follow from one process
            assert (b.state(), c.state()) == (BreakerState.CLOSED, BreakerState.CLOSED)
            await open_on(b)
            await eventually(lambda: c.state() is BreakerState.OPEN, "c opened by the quorum")
        (opened,) = c.events.of("BreakerOpened")
        assert opened.reason == "fleet: 2 processes opened it within 10s (quorum 2)"
        assert opened.actor == "engine" and opened.from_state is BreakerState.CLOSED
        assert c.service.calls == 0  # c never saw a failure of its own
        assert c.state("lookup") is BreakerState.CLOSED  # one tool's outage is that tool's

        deadline = time.monotonic() + 3
        while (view := await read_fleet(a.fleet.client)).tools["search"].states != {"OPEN": 3}:
            assert time.monotonic() < deadline, view.tools["search"]
        assert {m.status for m in view.members} == {"live"} and len(view.members) == 3
        assert view.tools["search"].calls == a.service.calls + b.service.calls


async def test_exactly_one_probe_runs_across_the_fleet_and_its_success_closes_the_others(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    async with AsyncExitStack() as stack:
        nodes = await fleet_of(stack, 3, redis_server.url(ns, **FAST))
        for node in nodes:
            await open_on(node)
        for node in nodes:
            node.service.up = True
            node.service.calls = 0

        def all_closed() -> bool:
            return all(n.state() is BreakerState.CLOSED for n in nodes)

        deadline = time.monotonic() + 5
        while not all_closed():  # every process keeps calling through the half-open period
            assert time.monotonic() < deadline, [n.state() for n in nodes]
            for node in nodes:
                if node.state() is not BreakerState.CLOSED:
                    await node.engine.try_call("search")
            await anyio.sleep(0.01)
        probes = [e for n in nodes for e in n.events.of("AttemptStarted") if e.probe]
        assert len(probes) == 1
        assert sum(n.service.calls for n in nodes) == 1  # the probe is the only call that reached it
        prober = next(n for n in nodes if n.service.calls == 1)
        for node in nodes:
            (closed,) = node.events.of("BreakerClosed")
            if node is prober:
                assert closed.call_id == probes[0].call_id
            else:
                assert closed.reason == f"fleet: the half-open probe of {prober.fleet.member.id} succeeded"


async def test_a_failed_probe_reopens_the_others(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    async with AsyncExitStack() as stack:
        nodes = await fleet_of(stack, 2, redis_server.url(ns, **FAST))
        for node in nodes:
            await open_on(node)
        prober, other = nodes
        await take_the_lease(prober)
        await eventually(lambda: other.state() is BreakerState.HALF_OPEN, "the other half-opened too")
        assert not other.fleet.holds_lease("search")
        assert (await other.engine.try_call("search")).attempts == 0  # rejected: no attempt made
        await prober.engine.try_call("search")  # the probe fails
        await eventually(lambda: other.state() is BreakerState.OPEN, "the other re-opened")
        assert other.events.of("BreakerOpened")[-1].reason.startswith("fleet: the half-open probe of")


async def test_a_process_with_no_call_to_make_never_holds_the_probe_lease(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    async with AsyncExitStack() as stack:
        idle, busy = await fleet_of(stack, 2, redis_server.url(ns, **{**FAST, "lease_ms": 200}))
        for node in (idle, busy):
            await open_on(node)
        await eventually(lambda: idle.state() is BreakerState.HALF_OPEN, "the idle one half-opened")
        await eventually(lambda: busy.state() is BreakerState.HALF_OPEN, "the busy one half-opened")
        with redis_server.client() as r:
            for _ in range(30):  # three lease periods, read in Redis itself: nobody asked, nobody holds it
                assert r.get(FleetKeys(ns).lease("search")) is None
                await anyio.sleep(0.02)
        busy.service.up = True
        deadline = time.monotonic() + 5
        while busy.state() is not BreakerState.CLOSED:  # the busy one asks, gets it, probes
            assert time.monotonic() < deadline, busy.state()
            await busy.engine.try_call("search")
            await anyio.sleep(0.01)
        assert not idle.fleet.holds_lease("search")
        await eventually(lambda: idle.state() is BreakerState.CLOSED, "the probe closed the idle one")


async def test_a_process_that_takes_no_commands_refuses_a_signed_trip_and_says_why(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    key = os.urandom(32)
    url = redis_server.url(namespace(request), **FAST)
    async with AsyncExitStack() as stack:
        (node,) = await fleet_of(stack, 1, url, key, commands=False)  # as `tripwire serve --no-commands`
        client = FleetClient(parse_fleet_url(url))
        try:
            sent = await send_command(client, "trip", "lookup", key=key, reason="maintenance")
            (ack,) = (await acks_of(client, sent.id, 1)).values()
            assert ack.status == "refused"
            assert ack.result.startswith("this process takes no operator commands")
            assert node.state("lookup") is BreakerState.CLOSED
        finally:
            await client.aclose()


async def test_an_operator_trip_reaches_every_process_and_each_acknowledges(
    redis_server: RedisServer, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    key = os.urandom(32)
    url = redis_server.url(namespace(request), **FAST)
    async with AsyncExitStack() as stack:
        nodes = await fleet_of(stack, 3, url, key)
        client = FleetClient(parse_fleet_url(url))
        try:
            sent = await send_command(client, "trip", "lookup", key=key, reason="maintenance")
            await eventually(
                lambda: all(n.state("lookup") is BreakerState.FORCED_OPEN for n in nodes),
                "tripped everywhere",
            )
            for node in nodes:
                (tripped,) = node.events.of("BreakerTripped")
                assert tripped.reason == "maintenance" and tripped.actor.startswith("operator:")
            acks = await acks_of(client, sent.id, 3)
            assert set(acks) == {n.fleet.member.id for n in nodes}
            assert {(a.status, a.result) for a in acks.values()} == {("applied", "FORCED_OPEN")}

            forged = await send_command(client, "reset", "lookup", key=os.urandom(32))
            refused = await acks_of(client, forged.id, 3)
            assert {a.status for a in refused.values()} == {"refused"}
            assert all(n.state("lookup") is BreakerState.FORCED_OPEN for n in nodes)
        finally:
            await client.aclose()


async def test_a_vanished_key_is_no_opinion_and_the_fleet_goes_on(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    async with AsyncExitStack() as stack:
        a, b, c = await fleet_of(stack, 3, redis_server.url(ns, **FAST))
        await open_on(a)
        await open_on(b)
        await eventually(lambda: c.state() is BreakerState.OPEN, "the first fleet open")
        # Every process has seen it: a round trip still under way would bring the old epoch back.
        due = {node: node.fleet.round_trips + 2 for node in (a, b, c)}
        await eventually(
            lambda: all(n.fleet.round_trips >= r for n, r in due.items()), "two more round trips"
        )
        with redis_server.client() as r:  # every shared key of the namespace vanishes
            r.delete(*r.keys(keys.prefix + "*"))
        for node in (a, b, c):
            node.engine.reset("search")
            node.service.up = True
        await eventually(lambda: a.fleet.round_trips > 0, "")
        rounds = a.fleet.round_trips
        await eventually(lambda: a.fleet.round_trips >= rounds + 3, "the fleet goes on")
        await open_on(a)
        await open_on(b)
        await eventually(lambda: c.state() is BreakerState.OPEN, "a second fleet open from epoch 1 again")
        with redis_server.client() as r:  # the heartbeat writes its record again
            await eventually(lambda: r.exists(keys.member(a.fleet.member.id)), "a's record again")


async def test_every_process_streams_its_events_in_batches(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    url = redis_server.url(namespace(request), **FAST)
    async with AsyncExitStack() as stack:
        nodes = await fleet_of(stack, 2, url)
        for node in nodes:
            for _ in range(20):
                await node.engine.call("lookup")
        await open_on(nodes[0])
        members = {n.fleet.member.id for n in nodes}
        seen: dict[str, int] = {}
        whole: list[dict[str, Any]] = []
        last = "0-0"
        deadline = time.monotonic() + 3
        while any(seen.get(m, 0) < 20 for m in members) or not any(
            e["event_type"] == "BreakerOpened" for e in whole
        ):
            assert time.monotonic() < deadline, seen
            batches, last = await tail_events(url, last)
            for batch in batches:  # successes are counted per tool, the rest comes whole
                succeeded = batch.counts.get("CallSucceeded", {}).get("lookup", 0)
                seen[batch.member_id] = seen.get(batch.member_id, 0) + succeeded
                whole += batch.events
        opened = next(e for e in whole if e["event_type"] == "BreakerOpened")
        assert opened["tool_id"] == "search" and "consecutive transient failures" in opened["reason"]
        assert seen == dict.fromkeys(members, 20)


async def test_a_process_that_leaves_is_gone_and_its_breakers_no_longer_count(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    url = redis_server.url(namespace(request), **FAST)
    async with AsyncExitStack() as stack:
        a, b = await fleet_of(stack, 2, url)
        view = await read_fleet(url)
        assert sorted(m.id for m in view.members if m.status == "live") == sorted(
            [a.fleet.member.id, b.fleet.member.id]
        )
        assert view.tools["lookup"].states == {"CLOSED": 2}
        await b.fleet.__aexit__(None, None, None)  # b stops (the last fleet entered: it may leave first)
        view = await read_fleet(url)
        assert [m.id for m in view.members] == [a.fleet.member.id]
        assert view.tools["lookup"].states == {"CLOSED": 1}
        member = view.member(a.fleet.member.id)
        assert member.pid == os.getpid() and member.breakers == {"search": "CLOSED", "lookup": "CLOSED"}
