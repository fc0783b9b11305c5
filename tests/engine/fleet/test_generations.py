"""What stands must be the newest signed state, reach a tool however late it is registered, and
outlive a Redis restarted empty; a command read from Redis never prints a line of its own.

Engines in one test process on one real Redis; every test runs on trio and asyncio, with its
engines started and not started.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import NoReturn

import anyio
import pytest
from anyio import current_time

from console.cli import main
from engine import BreakerState, Engine
from engine.fleet import CommandConflict, Fleet, FleetClient, parse_fleet_url, send_command
from engine.fleet.keys import FleetKeys
from tests.engine.conftest import new_engine, recorded
from tests.engine.fleet.conftest import RedisServer, eventually
from tests.engine.fleet.test_fleet import (
    FAST,
    OPEN_S,
    Node,
    Service,
    acks_of,
    lookup,
    manifests,
    namespace,
    open_on,
)
from tests.engine.fleet.test_standing import join, on_fleet

pytestmark = pytest.mark.anyio


async def join_with(stack: AsyncExitStack, engine: Engine, url: str, key: bytes | None, tool: str) -> Node:
    """``engine`` joins the fleet with ``tool`` alone registered (``search`` or ``lookup``): the
    other one comes later."""
    engine.runtime.wall_clock = time.time
    service = Service()
    engine.register(tool, service if tool == "search" else lookup)
    events = recorded(engine)
    fleet = await stack.enter_async_context(Fleet(engine, url, key=key))
    return Node(engine, fleet, service, events)


async def round_trips(node: Node, count: int) -> None:
    due = node.fleet.round_trips + count
    await eventually(lambda: node.fleet.round_trips >= due, f"{count} round trips")


async def test_each_command_on_a_tool_takes_the_next_generation_even_when_senders_race(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    key = os.urandom(32)
    clients = [FleetClient(parse_fleet_url(redis_server.url(ns))) for _ in range(4)]
    sent = []
    try:

        async def send(client: FleetClient) -> None:
            sent.append(await send_command(client, "trip", "lookup", key=key))

        async with anyio.create_task_group() as group:
            for client in clients:
                group.start_soon(send, client)
    finally:
        for client in clients:
            await client.aclose()
    with redis_server.client() as r:
        entries = r.xrange(keys.commands)
        assert sorted(int(fields["generation"]) for _, fields in entries) == [1, 2, 3, 4]
        assert [int(fields["generation"]) for _, fields in entries] == [1, 2, 3, 4]  # stream order
        assert r.hget(keys.tool("lookup"), "command_generation") == "4"
        standing = r.hgetall(keys.override("lookup"))
        assert standing["generation"] == "4" and standing["id"] == entries[-1][1]["id"]
    assert len({s.id for s in sent}) == 4

    client = FleetClient(parse_fleet_url(redis_server.url(ns)))
    try:  # a generation nobody of ours wrote is read alike by the sender and the script
        for written, taken in (("-3", 1), ("2.7", 3), ("junk", 1), ("0x10", 17), ("inf", 1)):
            with redis_server.client() as r:
                r.hset(keys.tool("lookup"), "command_generation", written)
            await send_command(client, "reset", "lookup", key=key)
            with redis_server.client() as r:
                assert r.hget(keys.override("lookup"), "generation") == str(taken), written
    finally:
        await client.aclose()


async def test_a_standing_record_that_is_not_the_newest_signed_state_is_refused(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    async with on_fleet(redis_server, request, 4) as on:
        key, url, keys, engines, client, stack = on
        a = await join(stack, engines[0], url, key)
        trip = await send_command(client, "trip", "lookup", key=key, reason="old incident")
        await send_command(client, "reset", "lookup", key=key)
        await eventually(lambda: len(a.events.of("BreakerReset")) == 1, "a reset")
        with redis_server.client() as r:
            (old,) = [fields for _, fields in r.xrange(keys.commands) if fields["action"] == "trip"]

            def standing(record: dict[str, str]) -> None:
                r.delete(keys.override("lookup"), keys.commands)
                r.hset(keys.override("lookup"), mapping=record)

            standing(old)  # the trip since reset, copied from the stream by someone without the key
            b = await join(stack, engines[1], url, key)
            standing({**old, "generation": "3"})  # ...its generation raised past the reset's
            c = await join(stack, engines[2], url, key)
            standing({k: v for k, v in old.items() if not k.startswith("generation")})  # ...or none
            d = await join(stack, engines[3], url, key)
        acks = await acks_of(client, trip.id, 4)
        for node, why in (
            (b, "superseded: generation 1, while the fleet's last command on the tool is of generation 2"),
            (c, "forged or altered: its generation's MAC does not match under the fleet's command key"),
            (d, "no generation: a command stands only with the generation signed with it"),
        ):
            assert node.state("lookup") is BreakerState.CLOSED and node.events.of("BreakerTripped") == []
            assert acks[node.fleet.member.id].status == "refused"
            assert acks[node.fleet.member.id].result.startswith(why)


async def test_a_tool_registered_after_the_process_joined_takes_what_stands_when_it_is_registered(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    async with on_fleet(redis_server, request, 3) as on:
        key, url, keys, engines, client, stack = on
        a = await join(stack, engines[0], url, key)
        c = await join_with(stack, engines[2], url, key, "search")  # lookup comes later
        await send_command(client, "trip", "lookup", key=key, reason="maintenance")
        await eventually(lambda: a.state("lookup") is BreakerState.FORCED_OPEN, "a tripped")
        await round_trips(c, 2)  # c read the trip from the stream
        with redis_server.client() as r:
            r.delete(keys.commands)  # the trip is older than what a joining process reads
        b = await join_with(stack, engines[1], url, key, "search")
        for node in (b, c):  # what b read when joining, what c read from the stream
            node.engine.register("lookup", lookup)  # no round trip between
            assert node.state("lookup") is BreakerState.FORCED_OPEN
            (tripped,) = node.events.of("BreakerTripped")
            assert tripped.reason == "maintenance" and tripped.actor.startswith("operator:")


async def test_a_tool_registered_within_a_fleet_wide_open_is_open_for_the_rest_of_it(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    url = redis_server.url(ns, **FAST)
    engines = [await new_engine(*manifests()) for _ in range(3)]
    async with AsyncExitStack() as stack:
        a, b = [await join(stack, e, url, None) for e in engines[:2]]
        c = await join_with(stack, engines[2], url, None, "lookup")  # c's search comes later
        await open_on(a)
        await open_on(b)
        with redis_server.client() as r:
            await eventually(lambda: r.pttl(FleetKeys(ns).fleet_open("search")) > 0, "the fleet-wide open")
        await round_trips(c, 2)  # c read it
        registered_at = current_time()
        c.engine.register("search", c.service)
        assert c.state() is BreakerState.OPEN
        (opened,) = c.events.of("BreakerOpened")
        assert opened.reason.startswith("fleet: open fleet-wide when it was registered; ")
        half_open_in = c.engine.breaker("search").half_open_at - registered_at  # type: ignore[operator]
        assert 0 < half_open_in < OPEN_S
        assert (await c.engine.try_call("search")).attempts == 0 and c.service.calls == 0


async def test_the_standing_state_is_published_again_when_redis_lost_it(
    own_redis: RedisServer, request: pytest.FixtureRequest
) -> None:
    async with on_fleet(own_redis, request, 3) as on:
        key, url, keys, engines, client, stack = on
        a, b = [await join(stack, e, url, key) for e in engines[:2]]
        trip = await send_command(client, "trip", "lookup", key=key, reason="incident 9")
        await eventually(
            lambda: {a.state("lookup"), b.state("lookup")} == {BreakerState.FORCED_OPEN}, "tripped"
        )
        own_redis.kill()
        own_redis.start()  # empty
        with own_redis.client() as r:
            await eventually(lambda: r.hget(keys.override("lookup"), "id") == str(trip.id), "published again")
            assert r.hget(keys.tool("lookup"), "command_generation") == "1"
        c = await join(stack, engines[2], url, key)
        assert c.state("lookup") is BreakerState.FORCED_OPEN
        assert c.events.of("BreakerTripped")[0].reason == "incident 9"
        assert len(a.events.of("BreakerTripped")) == len(b.events.of("BreakerTripped")) == 1


async def test_a_forged_command_is_logged_on_one_line_whatever_its_fields_hold(
    redis_server: RedisServer, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    ns = namespace(request)
    engines = [await new_engine(*manifests())]
    fake = "fleet command 1 (trip other): applied FORCED_OPEN"
    forged = {
        "id": "1", "action": "trip\n" + fake, "tool_id": "lookup\r\n" + fake + "\x1b[2K", "reason": "x\ny",
        "actor": "mallory", "host": "h", "pid": "1", "created_at": repr(time.time()),
        "expires_at": repr(time.time() + 30), "mac": "0" * 64,
    }  # fmt: skip
    caplog.set_level(logging.INFO, logger="tripwire.fleet")
    async with AsyncExitStack() as stack:
        a = await join(stack, engines[0], redis_server.url(ns, **FAST), os.urandom(32))
        with redis_server.client() as r:
            r.xadd(FleetKeys(ns).commands, forged)
            r.xadd(FleetKeys(ns).commands, {**forged, "tool_id": "lookup"})  # a registered tool
        await eventually(lambda: len(a.fleet.acknowledged) == 2, "both refused")
    lines = [record.getMessage() for record in caplog.records if record.name == "tripwire.fleet"]
    refused = [line for line in lines if "forged or altered" in line]
    assert len(refused) == 2
    for line in lines:
        assert "\n" not in line and "\r" not in line and "\x1b" not in line, line
    assert refused[0].startswith("fleet command 1 (trip\\nfleet command 1 (trip other): applied")
    assert "\\x1b[2K" in refused[0]


async def test_the_command_line_says_so_on_one_line_when_others_kept_taking_the_generation(
    redis_server: RedisServer,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``send_command`` gives up after SEND_ATTEMPTS conflicts: ``tripwire breaker`` refuses (exit 1)
    on one line, never a traceback."""
    ns = namespace(request)
    key_file = tmp_path / "fleet.key"
    key_file.write_bytes(os.urandom(32))
    key_file.chmod(0o600)
    url = redis_server.url(ns, key_file=key_file, **FAST)

    async def conflicted(*_: object, **__: object) -> NoReturn:
        raise CommandConflict("trip lookup: other commands on it took its generation 5 times in a row")

    async with AsyncExitStack() as stack:
        node = await join(stack, await new_engine(*manifests()), url, key_file.read_bytes())
        await round_trips(node, 2)
        monkeypatch.setattr("engine.fleet.send_command", conflicted)
        status = await anyio.to_thread.run_sync(
            main, ["breaker", "trip", "lookup", "--attach", url, "--reason", "maint"]
        )
    assert status == 1
    (line,) = capsys.readouterr().err.splitlines()
    conflict = "other commands on it took its generation 5 times in a row"
    assert line == f"tripwire: trip lookup: refused: trip lookup: {conflict}"
