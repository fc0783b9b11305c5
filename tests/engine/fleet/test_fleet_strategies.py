"""The strategies' figures in a fleet: each process publishes its bulkheads' occupancy and its
budgets' refusals with its heartbeat, and the fleet's view sums them per tool (each process has a
bulkhead of its own: the limits add up). On a real Redis, like tests/engine/fleet/test_fleet.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AsyncExitStack

import anyio
import pytest

from engine import Engine, RetryPolicy, ToolManifest
from engine.fleet import Fleet, FleetBudget, FleetBulkhead, FleetView, read_fleet
from tests.engine.conftest import new_engine
from tests.engine.fleet.conftest import RedisServer

pytestmark = pytest.mark.anyio

Manifest: Callable[..., ToolManifest] = ToolManifest
"""``ToolManifest``, with the strategies' sections its validator knows and its signature does not."""
FAST = {"sync_ms": 20, "heartbeat_s": 0.05, "timeout_ms": 500, "window_s": 10, "lease_ms": 3000}


def slow_manifest() -> ToolManifest:
    return Manifest(
        id="slow",
        retry_policy=RetryPolicy(max_attempts=1),
        bulkhead={"max_concurrent": 2, "max_queued": 2, "queue_timeout_ms": 30_000},
        retry_budget={"budget_percent": 10, "min_retries_per_s": 0},
    )


async def wait_for_view(url: str, wanted: FleetBulkhead, timeout: float = 5.0) -> FleetView:
    """The fleet's view once its ``slow`` bulkhead figures are ``wanted`` (heartbeats catch up)."""
    deadline = time.monotonic() + timeout
    while True:
        view = await read_fleet(url)
        tool = view.tools.get("slow")
        if tool is not None and tool.bulkhead == wanted:
            return view
        assert time.monotonic() < deadline, tool
        await anyio.sleep(0.02)


async def test_the_fleet_view_sums_each_process_bulkhead_and_its_refusals(
    redis_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    url = redis_server.url("s" + str(abs(hash(request.node.nodeid)))[:12], **FAST)
    release = anyio.Event()

    async def slow() -> str:
        await release.wait()
        return "ok"

    async with AsyncExitStack() as stack:
        engines: list[Engine] = [
            await new_engine(slow_manifest(), ToolManifest(id="plain")) for _ in range(2)
        ]
        for engine in engines:
            engine.register("slow", slow)
            engine.register("plain", slow)
            await stack.enter_async_context(Fleet(engine, url))
        a, b = engines
        refused = []
        async with anyio.create_task_group() as tg:
            for _ in range(4):  # two take a's slots, two wait in its queue
                tg.start_soon(a.try_call, "slow")
            tg.start_soon(b.try_call, "slow")  # one of b's two slots
            await wait_for_view(url, FleetBulkhead(3, 4, 2, 4, 0, 2))
            refused.append(await a.try_call("slow"))  # a's queue is full: refused at once
            view = await wait_for_view(url, FleetBulkhead(3, 4, 2, 4, 1, 2))
            release.set()
        assert refused[0].attempts == 0
        slow_tool = view.tools["slow"]
        assert slow_tool.budget == FleetBudget(refused=0, processes=2)
        assert view.tools["plain"].bulkhead is None and view.tools["plain"].budget is None
        assert view.shared_budget is None  # no defaults.yaml budget
        member = view.member(next(m.id for m in view.members if m.strategies["slow"]["in_flight"] == 2))
        assert member.strategies == {
            "slow": {"in_flight": 2, "max_concurrent": 2, "queued": 2, "max_queued": 2, "rejected": 1,
                     "budget_refused": 0}
        }  # fmt: skip
        # every call done: the next heartbeats say the slots are free again
        await wait_for_view(url, FleetBulkhead(0, 4, 0, 4, 1, 2))
