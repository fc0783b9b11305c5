"""A rate-limit cooldown shared by the fleet: one process's 429 pauses the tool in every process
within a sync period or two (its next round trip publishes it, the others' next one reads it);
the shared record expires at the cooldown's end and a late joiner gets what is left of it; a
record written without the fleet's key is ignored (logged once); a reset ends it fleet-wide.

On a real Redis, on real clocks (tests/engine/fleet/conftest.py), engines started and not.
"""

from __future__ import annotations

import logging
import secrets
import time
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from engine import Engine, RetryPolicy, ToolManifest
from engine.fleet import Fleet, read_fleet, send_command
from engine.fleet.client import FleetClient
from engine.fleet.config import parse_fleet_url
from engine.fleet.keys import FleetKeys
from engine.kinds import ErrorKind
from tests.engine.conftest import Recorder, new_engine, recorded
from tests.engine.fleet.conftest import RedisServer, eventually
from tests.engine.fleet.test_fleet import namespace

pytestmark = pytest.mark.anyio

SYNC_MS = 20
FAST = {"sync_ms": SYNC_MS, "heartbeat_s": 0.05, "timeout_ms": 500, "window_s": 10, "lease_ms": 3000}
KEY = secrets.token_bytes(32)


class TooManyRequests(Exception):
    """An HTTP client's 429 with a ``Retry-After``, as the classifier reads one."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.headers = {"Retry-After": f"{retry_after_s:g}"}


class Api:
    """The rate-limited service as one process sees it: answers, or a 429 once asked to."""

    def __init__(self) -> None:
        self.calls = 0
        self.retry_after_s: float | None = None

    async def __call__(self) -> str:
        self.calls += 1
        if self.retry_after_s is not None:
            retry_after, self.retry_after_s = self.retry_after_s, None
            raise TooManyRequests(retry_after)
        return "ok"


class Proc:
    def __init__(self, engine: Engine, fleet: Fleet, api: Api, events: Recorder) -> None:
        self.engine, self.fleet, self.api, self.events = engine, fleet, api, events

    def facts(self) -> dict[str, Any]:
        return dict(self.engine.stats()["api"].strategies["rate_limit"])

    def cooling(self) -> bool:
        return float(self.facts()["cooldown_remaining_s"]) > 0


def manifests() -> tuple[ToolManifest, ...]:
    return (
        ToolManifest(id="api", retry_policy=RetryPolicy(max_attempts=1), rate_limit={"max_wait_ms": 0}),  # type: ignore[call-arg]
        ToolManifest(id="plain"),
    )


async def join(
    stack: AsyncExitStack, count: int | list[Engine], url: str, key: bytes | None = KEY
) -> list[Proc]:
    """Processes of the fleet at ``url`` (``count`` new engines, or these): engines made before any
    fleet joins (a started one runs in the test's stack, which must nest around the fleets')."""
    engines = count if isinstance(count, list) else [await new_engine(*manifests()) for _ in range(count)]
    procs = []
    for engine in engines:
        api = Api()
        engine.register("api", api)
        engine.register("plain", Api())
        events = recorded(engine)
        fleet = await stack.enter_async_context(Fleet(engine, url, key=key))
        procs.append(Proc(engine, fleet, api, events))
    return procs


async def a_429(proc: Proc, retry_after_s: float) -> None:
    proc.api.retry_after_s = retry_after_s
    result = await proc.engine.try_call("api")
    assert result.error is not None and result.error.kind is ErrorKind.RATE_LIMIT


async def test_a_429_in_one_process_pauses_the_tool_in_the_other_within_a_sync_period(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    async with AsyncExitStack() as stack:
        a, b = await join(stack, 2, redis_server.url(ns, **FAST))
        assert await b.engine.call("api") == "ok"
        await a_429(a, 30)
        started = time.monotonic()
        await eventually(b.cooling, "b learns a's cooldown", 2)
        # a's next round trip publishes it, b's next one reads it: two periods at most, plus the
        # round trips and the loop's lag (about 35 ms here with 20 ms periods)
        assert time.monotonic() - started < 7.5 * SYNC_MS / 1000
        refused = await b.engine.try_call("api")
        assert refused.error is not None and refused.error.kind is ErrorKind.THROTTLED
        assert refused.attempts == 0 and b.api.calls == 1, "b's call never reached the tool"
        assert refused.reason.startswith("rate limit: cooling down for")
        (learned,) = b.events.of("CooldownStarted")
        assert learned.started_by == a.fleet.member.id and learned.extended is False
        assert learned.retry_after_s == 30 and 29 < learned.cooldown_s <= 30
        assert f"(fleet-wide, from {a.fleet.member.id})" in learned.describe()
        assert b.facts()["cooldown_started_by"] == a.fleet.member.id
        (own,) = a.events.of("CooldownStarted")
        assert own.started_by is None, "a's own: no fleet member named"
        with redis_server.client() as r:
            record = r.hgetall(keys.cooldown("api"))
            assert record["member"] == a.fleet.member.id and record["host"] == a.fleet.member.host
            # the key expires at the cooldown's end, stored as the server's wall clock
            assert r.pexpiretime(keys.cooldown("api")) == int(record["until_ms"])
            seconds, micros = r.time()
            server_ms = int(seconds) * 1000 + int(micros) // 1000
            assert 28_000 < int(record["until_ms"]) - server_ms <= 30_000
            assert not r.exists(keys.cooldown("plain")), "a tool without a rate limit takes no part"
        # the fleet's view: a fleet-wide cooldown of api, until T, started by a
        deadline = time.monotonic() + 3
        while (view := await read_fleet(redis_server.url(ns))).tools["api"].cooldown is None:
            assert time.monotonic() < deadline, view
        cooldown = view.tools["api"].cooldown
        assert cooldown is not None
        assert (cooldown.started_by, cooldown.host) == (a.fleet.member.id, a.fleet.member.host)
        assert cooldown.until == int(record["until_ms"]) / 1000 and 28 < cooldown.remaining_s <= 30
        await eventually(
            lambda: b.fleet.rates.summary()["api"]["cooldown_by"] == a.fleet.member.id, "b's summary", 1
        )


async def test_a_late_joiner_gets_what_is_left_of_the_cooldown_not_a_full_one(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    url = redis_server.url(ns, **FAST)
    keys = FleetKeys(ns)
    late = await new_engine(*manifests())
    async with AsyncExitStack() as stack:
        (a,) = await join(stack, 1, url)
        await a_429(a, 4)
        with redis_server.client() as r:
            await eventually(lambda: r.exists(keys.cooldown("api")) == 1, "a publishes its cooldown", 2)
            await anyio.sleep(1.0)  # a second of the cooldown gone before b joins
            left_ms = r.pttl(keys.cooldown("api"))
        assert 2_500 < left_ms < 3_100
        (b,) = await join(stack, [late], url)
        await eventually(b.cooling, "b joins and learns it", 2)
        left_s = float(b.facts()["cooldown_remaining_s"])
        assert left_s < 3.1, "what is left of it, never a fresh 4 s"
        assert abs(left_s - left_ms / 1000) < 0.3
        (learned,) = b.events.of("CooldownStarted")
        assert learned.cooldown_s < 3.1 and learned.started_by == a.fleet.member.id


async def test_a_cooldown_written_without_the_fleet_key_is_ignored_and_logged_once(
    redis_server: RedisServer, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tripwire.fleet")
    ns = namespace(request)
    keys = FleetKeys(ns)
    async with AsyncExitStack() as stack:
        a, b = await join(stack, 2, redis_server.url(ns, **FAST))
        with redis_server.client() as r:
            until_ms = int(r.time()[0]) * 1000 + 60_000
            forged = {"until_ms": until_ms, "member": "evil:1:abcdef", "host": "evil", "pid": 1, "call": "c",
                      "started_ms": until_ms - 60_000, "retry_after_s": "60.0", "mac": "00" * 32}  # fmt: skip
            r.hset(keys.cooldown("api"), mapping=forged)
            r.pexpireat(keys.cooldown("api"), until_ms)
            await anyio.sleep(SYNC_MS * 10 / 1000)  # ten round trips of each
            assert not a.cooling() and not b.cooling()
            assert await b.engine.call("api") == "ok"
            lines = [m for m in caplog.messages if "cooldown record of api ignored" in m]
            assert len(lines) == 2, lines  # once per process, not once per round trip
            assert all("forged or altered" in line and "\n" not in line for line in lines)
            # a's own 429 replaces the forged record (which claimed a later end) and b honours it
            await a_429(a, 20)
            await eventually(b.cooling, "b learns a's real cooldown", 2)
            assert r.hget(keys.cooldown("api"), "member") == a.fleet.member.id
        (learned,) = b.events.of("CooldownStarted")
        assert learned.started_by == a.fleet.member.id


async def test_a_reset_in_one_process_ends_the_cooldown_fleet_wide(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    async with AsyncExitStack() as stack:
        a, b, c = await join(stack, 3, redis_server.url(ns, **FAST))
        await a_429(a, 30)
        await eventually(lambda: b.cooling() and c.cooling(), "b and c learn it", 2)
        b.engine.reset("api", actor="alice", reason="the provider raised our quota")
        with redis_server.client() as r:
            await eventually(lambda: r.exists(keys.cooldown("api")) == 0, "the record deleted", 2)
        await eventually(lambda: not a.cooling() and not c.cooling(), "a and c end theirs", 2)
        assert await a.engine.call("api") == "ok" and await c.engine.call("api") == "ok"
        (ended,) = c.events.of("CooldownEnded")
        assert (ended.how, ended.actor, ended.started_by) == ("reset", "fleet", a.fleet.member.id)
        (own_ended,) = a.events.of("CooldownEnded")
        assert own_ended.how == "reset" and own_ended.actor == "fleet"


async def test_a_fleet_reset_command_ends_the_cooldown_everywhere(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    url = redis_server.url(ns, **FAST)
    async with AsyncExitStack() as stack:
        a, b = await join(stack, 2, url)
        for proc in (a, b):
            proc.engine.runtime.wall_clock = time.time  # commands carry real wall-clock times
        await a_429(a, 30)
        await eventually(b.cooling, "b learns it", 2)
        client = FleetClient(parse_fleet_url(url))
        try:
            await send_command(client, "reset", "api", key=KEY, reason="quota raised")
        finally:
            await client.aclose()
        await eventually(lambda: not a.cooling() and not b.cooling(), "both end it", 3)
        assert await b.engine.call("api") == "ok"


async def test_without_a_fleet_key_cooldowns_stay_local_and_it_says_so_once(
    redis_server: RedisServer, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tripwire.fleet")
    ns = namespace(request)
    async with AsyncExitStack() as stack:
        a, b = await join(stack, 2, redis_server.url(ns, **FAST), key=None)
        await a_429(a, 30)
        await anyio.sleep(SYNC_MS * 5 / 1000)
        assert a.cooling() and not b.cooling()
        with redis_server.client() as r:
            assert not r.exists(FleetKeys(ns).cooldown("api"))
        lines = [m for m in caplog.messages if "cooldowns are not shared" in m]
        assert len(lines) == 2, lines  # once per process


async def test_a_redis_restarted_empty_gets_the_cooldown_back_with_the_same_end(
    own_redis: RedisServer,
) -> None:
    """LiteLLM's lost TTLs: a cooldown is never re-armed as a fresh duration nor dropped because
    Redis forgot it — the processes keep its absolute end, and publish it again as it was signed."""
    url = own_redis.url("restart", **FAST)
    keys = FleetKeys("restart")
    async with AsyncExitStack() as stack:
        a, b = await join(stack, 2, url)
        await a_429(a, 30)
        await eventually(b.cooling, "b learns it", 2)
        with own_redis.client() as r:
            ends_at = r.pexpiretime(keys.cooldown("api"))
        b_left = float(b.facts()["cooldown_remaining_s"])
        own_redis.kill()
        await eventually(lambda: all(p.events.of("FleetUnavailable") for p in (a, b)), "both alone", 5)
        assert a.cooling() and b.cooling(), "Redis away: the cooldown holds"
        own_redis.start()  # empty: nothing was saved
        await eventually(lambda: all(p.events.of("FleetRestored") for p in (a, b)), "both back", 10)
        with own_redis.client() as r:
            await eventually(lambda: r.exists(keys.cooldown("api")) == 1, "published again", 2)
            assert abs(r.pexpiretime(keys.cooldown("api")) - ends_at) <= 5, "the same end, not a fresh 30 s"
            assert r.hget(keys.cooldown("api"), "member") == a.fleet.member.id
        await anyio.sleep(SYNC_MS * 5 / 1000)
        assert a.cooling() and b.cooling()
        assert a.events.of("CooldownEnded") == [] and b.events.of("CooldownEnded") == []
        assert float(b.facts()["cooldown_remaining_s"]) < b_left, "counting down to the same end"


async def test_a_tool_forced_open_while_redis_was_away_gets_the_fleet_cooldown_back(
    own_redis: RedisServer,
) -> None:
    """``fail_closed`` resets the tools it forced open once Redis is back; that reset ends the
    local cooldown, but not the fleet's: the record still standing is applied again."""
    url = own_redis.url("forced", **FAST)
    closed_url = own_redis.url("forced", **FAST, on_unavailable="fail_closed", fail_closed_tools="api")
    engines = [await new_engine(*manifests()) for _ in range(2)]
    async with AsyncExitStack() as stack:
        (a,) = await join(stack, engines[:1], url)
        (b,) = await join(stack, engines[1:], closed_url)
        await a_429(a, 30)
        await eventually(b.cooling, "b learns it", 2)
        own_redis.kill()
        await eventually(lambda: bool(b.events.of("FleetUnavailable")), "b forces api open", 5)
        own_redis.start()
        await eventually(lambda: bool(b.events.of("BreakerReset")), "b resets what it forced", 10)
        (ended,) = b.events.of("CooldownEnded")
        assert ended.actor == "fleet"
        await eventually(lambda: len(b.events.of("CooldownStarted")) == 2, "b learns it again", 3)
        assert b.cooling() and 25 < float(b.facts()["cooldown_remaining_s"]) < 30
        assert b.events.of("CooldownStarted")[-1].started_by == a.fleet.member.id


async def test_keys_of_another_type_are_replaced_never_failing_the_round_trip(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    ns = namespace(request)
    keys = FleetKeys(ns)
    with redis_server.client() as r:
        r.set(keys.cooldown("api"), "not a hash")
        r.lpush(keys.rate("api"), "not a hash")
    limit = {"rate_per_s": 10, "burst": 2, "max_wait_ms": 2000, "scope": "fleet"}
    engines = [await new_engine(ToolManifest(id="api", rate_limit=limit)) for _ in range(2)]  # type: ignore[call-arg]
    async with AsyncExitStack() as stack:
        a, b = await join(stack, engines, redis_server.url(ns, **FAST))
        rounds = a.fleet.round_trips
        await eventually(lambda: a.fleet.round_trips > rounds + 3, "round trips go on", 2)
        assert a.fleet.available and b.fleet.available
        assert await a.engine.call("api") == "ok"
        await a_429(a, 30)
        await eventually(b.cooling, "b learns a's cooldown, the odd key replaced", 2)
        with redis_server.client() as r:
            assert r.type(keys.cooldown("api")) == "hash" and r.type(keys.rate("api")) == "hash"
