"""The console over a fleet (``tripwire console --attach redis://…``).

The view model is tested on views folded from records, without Redis. The app is tested through
its pilot against a real ``redis-server`` and engines in this process, each a member of the fleet
with a :class:`~engine.fleet.Fleet` of its own: the counts, the drill-down, a process that stops
beating (stale, then gone), a trip from the console reaching every engine with their answers
shown, a read-only console, and Redis going away (the banner) and coming back. The snapshots
draw a fixed view, no Redis. Everything real runs on real clocks, bounded by polls.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from console.app import ConsoleApp
from console.cli import main
from console.fleet_app import FleetConsoleApp
from console.fleet_source import NO_KEY, FleetLink
from console.model.fleet import (
    FleetSnapshot,
    SentRecord,
    ack_rows,
    ack_summary,
    age_text,
    member_rows,
    short_member,
    states_text,
    strategies_text,
    strategy_head,
    tool_rows,
    unreachable_text,
    worst_state,
)
from console.screens.confirm import ConfirmActionModal
from console.screens.fleet import FleetScreen, FleetToolScreen
from console.widgets.item_table import ItemTable
from engine import BreakerConfig, BreakerState, Engine, RetryPolicy, ToolManifest
from engine.fleet import Fleet, FleetAck, FleetView, fold_fleet, parse_fleet_url
from tests.polling import until
from tests.redis_server import NO_REDIS, REDIS_SERVER, RedisServer, running_redis

SMALL = (80, 24)
LARGE = (160, 50)
FAST = {"sync_ms": 20, "heartbeat_s": 0.1}
"""The fleet's processes sync and beat fast: the console sees a change within its own poll
(Redis's timeout stays the default 1 s: a loaded machine's slow round trip is not an outage)."""

needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason=NO_REDIS)


# --- the view model, pure -------------------------------------------------------------------


def record(host: str, pid: int, beat_ms: float, **breakers: str) -> dict[str, str]:
    """A member's hash as a process writes it (``breakers``: tool → its state)."""
    summary = {
        t: {
            "state": s,
            "calls": 10,
            "errors": 3 if s != "CLOSED" else 0,
            "failures": 1 if s != "CLOSED" else 0,
        }
        for t, s in breakers.items()
    }
    return {"host": host, "pid": str(pid), "version": "1.4.0", "started": "0", "beat": str(beat_ms),
            "breakers": json.dumps(summary)}  # fmt: skip


def sample_view(now_ms: float = 100_000.0) -> FleetView:
    """Four processes: two live (one sees search OPEN), one stale, one gone; b holds search's lease."""
    records = {
        "web-a:101:aaaaaa": record("web-a", 101, now_ms - 300, search="OPEN", lookup="CLOSED"),
        "web-b:202:bbbbbb": record("web-b", 202, now_ms - 800, search="HALF_OPEN", lookup="CLOSED"),
        "web-c:303:cccccc": record("web-c", 303, now_ms - 7_000, search="CLOSED", lookup="CLOSED"),
        "web-d:404:dddddd": {},  # its record expired: gone
    }
    beats = {m: float(r.get("beat") or now_ms - 40_000) for m, r in records.items()}
    return fold_fleet(
        "prod", now_ms, beats, records, {"search": "web-b:202:bbbbbb", "lookup": None}, stale_s=5, gone_s=30
    )


def test_tools_come_worst_first_with_the_processes_per_state_and_the_probe() -> None:
    rows = tool_rows(sample_view())
    assert [r.tool_id for r in rows] == ["search", "lookup"]
    search, lookup = rows
    assert search.worst == "OPEN" and states_text(search.states) == "1 open · 1 half · 1 closed"
    assert short_member(search.lease_holder) == "web-b:202" and search.calls == 30 and search.errors == 6
    assert search.failures == 2 and f"{search.failure_percent:.1f}" == "6.7"  # calls failed, not attempts
    assert lookup.worst == "CLOSED" and lookup.processes == 3  # the gone process counts nowhere
    assert [r.tool_id for r in tool_rows(sample_view(), "LOOK")] == ["lookup"]
    assert worst_state({}) == "UNKNOWN" and states_text({}) == "no process"


def test_a_tools_bulkheads_show_summed_over_the_processes_that_have_one() -> None:
    now_ms = 100_000.0
    figures = {"in_flight": 2, "max_concurrent": 4, "queued": 1, "max_queued": 5, "rejected": 3}
    records = {
        "a:1:x": {**record("a", 1, now_ms, search="CLOSED"), "strategies": json.dumps({"search": figures})},
        "b:2:y": {
            **record("b", 2, now_ms, search="CLOSED"),
            "strategies": json.dumps(
                {"search": {**figures, "in_flight": 1, "queued": 0, "budget_refused": 2}}
            ),
        },
        "c:3:z": record("c", 3, now_ms, search="CLOSED"),  # an older version: nothing to add
    }
    view = fold_fleet("prod", now_ms, dict.fromkeys(records, now_ms), records, {}, stale_s=5, gone_s=30)
    (row,) = tool_rows(view)
    assert strategies_text(row) == "⧉ 3/8 over 2 processes +1q ⊘6 · ↻⊘2"
    assert strategy_head(row.bulkhead, row.budget) == (
        "bulkhead 3/8 in flight over 2 processes (each its own) · queued 1/10 · refused 6"
        " · retry budget refused 2 over 1 process"
    )
    (plain,) = tool_rows(sample_view(), "lookup")
    assert strategies_text(plain) == "" and plain.bulkhead is None


def test_processes_list_the_stale_first_and_each_ones_breaker_for_the_tool() -> None:
    rows = member_rows(sample_view(), "search")
    assert [(r.host, r.status, r.state) for r in rows] == [
        ("web-c", "stale", "CLOSED"), ("web-a", "live", "OPEN"), ("web-b", "live", "HALF_OPEN"),
        ("?", "gone", "—"),
    ]  # fmt: skip
    assert rows[1].pid == 101 and rows[1].version == "1.4.0" and age_text(rows[1].age_s) == "0.3s"
    assert [age_text(s) for s in (None, 42.0, 185.0, 7_500.0)] == ["—", "42s", "3m05s", "2h05m"]


def test_each_process_answer_to_a_command_and_the_silent_ones_not_answered_once_overdue() -> None:
    acks = {
        "a:1:x": FleetAck("a:1:x", "applied", "FORCED_OPEN", 10.1),
        "b:2:y": FleetAck("b:2:y", "refused", "no fleet command key", 10.1),
        "e:5:z": FleetAck("e:5:z", "applied", "FORCED_OPEN", 10.2),  # joined after it was sent
    }
    sent = SentRecord(7, "trip", "search", 10.0, ("a:1:x", "b:2:y", "c:3:w"), acks)
    assert [(r.member_id, r.status) for r in ack_rows(sent, now=11.0)] == [
        ("b:2:y", "refused"), ("c:3:w", "waiting"), ("a:1:x", "applied"), ("e:5:z", "applied"),
    ]  # fmt: skip
    assert ack_rows(sent, now=16.0)[1].status == "not answered"
    assert ack_summary(sent, now=16.0) == "trip search: applied 2 · refused 1 · not answered 1 (of 4)"
    nobody = SentRecord(8, "reset", "lookup", 10.0, ())
    assert ack_summary(nobody, now=11.0) == "reset lookup: no process to answer (of 0)"


def test_the_banner_says_why_redis_is_unreachable_and_how_old_the_view_is() -> None:
    down = FleetSnapshot(
        "prod", "10.0.0.5:6379/0", sample_view(), 0.0, age_s=12.4, error="ConnectionError: refused"
    )
    assert unreachable_text(down) == (
        "Redis unreachable at 10.0.0.5:6379/0: ConnectionError: refused — showing the last good view,"
        " 12s old, greyed; retrying"
    )
    never = FleetSnapshot("prod", "10.0.0.5:6379/0", None, 0.0, error="TimeoutError")
    assert "showing no view read yet" in unreachable_text(never)


# --- the app on a fixed view: snapshots ------------------------------------------------------


@dataclass
class FixedFleet:
    """A fleet link that always says the same (no Redis): for the snapshots and the key tests."""

    snapshot: FleetSnapshot
    read_only: bool = False
    description: str = "fixed fleet"
    acted: list[tuple[str, str]] = field(default_factory=list)

    def fleet_snapshot(self) -> FleetSnapshot:
        return self.snapshot

    def subscribe(self, sink: Any) -> Any:
        return lambda: None

    def seeds(self) -> list[Any]:
        return []

    def shared_strategies(self) -> dict[str, Any]:
        return {}

    def now(self) -> float:
        return 0.0

    def act(self, action: str, tool_id: str, *, actor: str, reason: str) -> None:
        self.acted.append((action, tool_id))

    def problem(self) -> None:
        return None

    def close(self) -> None:
        pass


def fixed_app(*, down: bool = False) -> FleetConsoleApp:
    acks = {
        "web-a:101:aaaaaa": FleetAck("web-a:101:aaaaaa", "applied", "FORCED_OPEN", 1_762_338_645.2),
        "web-b:202:bbbbbb": FleetAck(
            "web-b:202:bbbbbb", "refused", "this process has no fleet command key", 0
        ),
    }
    sent = SentRecord(7, "trip", "search", 1_762_338_645.0, ("web-a:101:aaaaaa", "web-b:202:bbbbbb",
                                                                "web-c:303:cccccc"), acks)  # fmt: skip
    snapshot = FleetSnapshot(
        "prod", "10.0.0.5:6379/0", sample_view(), 1_762_338_655.0, age_s=12.0 if down else None,
        error="ConnectionError: Error 111 connecting to 10.0.0.5:6379. Connection refused." if down else None,
        commands=(sent,),
    )  # fmt: skip
    return FleetConsoleApp(FixedFleet(snapshot), actor="operator:test", live=False)


async def _drill_down(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x50"])
def test_snapshot_fleet_board(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixed_app(), terminal_size=size)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x50"])
def test_snapshot_fleet_drill_down(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixed_app(), terminal_size=size, run_before=_drill_down)


def test_snapshot_fleet_board_redis_down(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(down=True), terminal_size=SMALL)


@pytest.mark.asyncio
async def test_keys_drill_down_back_confirm_and_the_views_a_fleet_has() -> None:
    app = fixed_app()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        assert app.check_action("view", ("deps",)) is False and app.check_action("view", ("events",)) is True
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, FleetToolScreen) and app.screen.tool_id == "search"
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmActionModal)
        assert list(app.screen.tools) == ["search, fleet-wide (3 processes)"]
        assert app.screen.tools["search, fleet-wide (3 processes)"] is BreakerState.OPEN
        await pilot.press("y")
        await until(pilot, lambda: app.link.acted == [("trip", "search")])  # type: ignore[attr-defined]
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("1")  # the board's key is the fleet's board here
        assert app.current_mode == "fleet"


# --- the app on a real fleet ------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


def fleet_key(tmp_path: Path) -> tuple[bytes, Path]:
    path = tmp_path / "fleet.key"
    key = os.urandom(32)
    path.write_bytes(key)
    path.chmod(0o600)
    return key, path


async def failing() -> str:
    raise ConnectionError("search backend unreachable")


async def lookup() -> int:
    return 1


@asynccontextmanager
async def members(
    url: str, count: int, key: bytes | None = None
) -> AsyncIterator[list[tuple[Engine, Fleet]]]:
    """``count`` engines, each a member of the fleet at ``url``, until the block ends."""
    search = ToolManifest(
        id="search", retry_policy=RetryPolicy(max_attempts=1),
        circuit_breaker=BreakerConfig(failure_threshold=2, timeout_ms=60_000),
    )  # fmt: skip
    async with AsyncExitStack() as stack:
        nodes = []
        for _ in range(count):
            engine = Engine(manifests=[search, ToolManifest(id="lookup")], wall_clock=time.time)
            await stack.enter_async_context(engine)
            engine.register("search", failing)
            engine.register("lookup", lookup)
            fleet = await stack.enter_async_context(Fleet(engine, url, key=key))
            nodes.append((engine, fleet))
        yield nodes


def console_on(url: str) -> FleetConsoleApp:
    return FleetConsoleApp(FleetLink(parse_fleet_url(url), poll_s=0.05), actor="operator:test")


def table_rows(app: ConsoleApp, selector: str) -> list[tuple[str, ...]]:
    table = app.screen.query_one(selector, ItemTable)
    return [tuple(str(c) for c in cells) for _, cells in table.items]


def select(app: ConsoleApp, tool_id: str) -> None:
    table = app.screen.query_one("#fleet-tools", ItemTable)
    table.move_cursor(row=[k for k, _ in table.items].index(tool_id))


def text_of(app: ConsoleApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


@needs_redis
@pytest.mark.asyncio
async def test_the_board_counts_processes_per_state_and_drills_down_to_each(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    url = redis_server.url("counts", quorum=3, **FAST)
    async with members(url, 3) as nodes:
        engine, fleet = nodes[0]
        while engine.breaker("search").state is BreakerState.CLOSED:  # one process sees an outage
            await engine.try_call("search")
        app = console_on(url)
        async with app.run_test(size=SMALL) as pilot:
            await until(pilot, lambda: ("search", "OPEN", "1 open · 2 closed") in
                        [(r[0], r[1], r[5]) for r in table_rows(app, "#fleet-tools")])  # fmt: skip
            assert table_rows(app, "#fleet-tools")[0][0] == "search"  # the worst first
            assert "3 live" in str(app.status_text()) and "1 OPEN" in str(app.status_text())
            assert "read-only" in str(app.status_text())  # no key: says why
            assert NO_KEY in str(app.status_text())
            assert app.check_action("act", ("trip",)) is False
            select(app, "search")
            await pilot.press("enter")
            await until(pilot, lambda: len(table_rows(app, "#fleet-members")) == 3)
            rows = {r[0]: r for r in table_rows(app, "#fleet-members")}
            assert rows[fleet.member.id][1:3] == ("live", "OPEN") and all(
                r[1] == "live" for r in rows.values()
            )
            assert "search — 1 open · 2 closed" in text_of(app, "#fleet-tool-head")


@needs_redis
@pytest.mark.asyncio
async def test_a_process_that_stops_beating_is_shown_stale_then_gone(redis_server: RedisServer) -> None:
    url = redis_server.url("stale", stale_s=0.4, gone_s=1.2, **FAST)
    async with members(url, 2) as nodes:
        _, frozen = nodes[1]

        async def hung() -> None:  # a process stuck (or killed): no beat, no goodbye
            return None

        app = console_on(url)
        async with app.run_test(size=SMALL) as pilot:
            app.open_tool("lookup")
            await pilot.pause()
            await until(pilot, lambda: len(table_rows(app, "#fleet-members")) == 2)
            frozen.tick = hung  # type: ignore[method-assign]
            who = frozen.member.id

            def status() -> str:
                return next((r[1] for r in table_rows(app, "#fleet-members") if r[0] == who), "")

            await until(pilot, lambda: status() == "stale", timeout=5)
            assert table_rows(app, "#fleet-members")[0][0] == who  # the stale first
            await until(pilot, lambda: status() == "gone", timeout=5)
            assert "1 live 1 gone" in str(app.status_text())


@needs_redis
@pytest.mark.asyncio
async def test_a_trip_from_the_console_reaches_every_engine_and_each_answer_is_shown(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    key, key_path = fleet_key(tmp_path)
    url = redis_server.url("trip", key_file=key_path, **FAST)
    keyless_url = redis_server.url("trip", **FAST)  # the same fleet, a process without the key
    async with members(url, 2, key) as nodes, members(keyless_url, 1) as keyless:
        app = console_on(url)
        async with app.run_test(size=LARGE) as pilot:
            await until(pilot, lambda: ("lookup", "CLOSED", "3 closed") in
                        [(r[0], r[1], r[5]) for r in table_rows(app, "#fleet-tools")])  # fmt: skip
            assert "read-only" not in str(app.status_text())
            select(app, "lookup")
            await pilot.press("enter", "t")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmActionModal)
            await pilot.press("y")
            await until(
                pilot, lambda: all(e.breaker("lookup").state is BreakerState.FORCED_OPEN for e, _ in nodes)
            )
            answers_title = lambda: text_of(app, "#fleet-acks-title")  # noqa: E731
            await until(pilot, lambda: "applied 2 · refused 1 (of 3)" in answers_title(),
                        seen=lambda: (answers_title(), app.link.fleet_snapshot()))  # fmt: skip
            answers = {r[0]: r[1:] for r in table_rows(app, "#fleet-acks")}
            ((_, refusing),) = keyless
            assert answers == {
                nodes[0][1].member.id: ("applied", "FORCED_OPEN"),
                nodes[1][1].member.id: ("applied", "FORCED_OPEN"),
                refusing.member.id: ("refused", answers[refusing.member.id][1]),
            }
            assert "command key" in answers[refusing.member.id][1]
            await until(pilot, lambda: "1 FORCED_OPEN" in str(app.status_text()))
            await pilot.press("escape")
            await until(pilot, lambda: "last command — trip lookup: applied 2 · refused 1" in
                        text_of(app, "#fleet-command"))  # fmt: skip


@needs_redis
@pytest.mark.asyncio
async def test_redis_going_away_shows_the_banner_over_the_greyed_view_and_it_recovers(
    own_redis: RedisServer,
) -> None:
    url = own_redis.url("down", **FAST)
    async with members(url, 2):
        app = console_on(url)
        async with app.run_test(size=SMALL) as pilot:
            await until(pilot, lambda: len(table_rows(app, "#fleet-tools")) == 2)
            screen = app.screen
            assert not screen.has_class("-unreachable")
            own_redis.kill()
            await until(pilot, lambda: screen.has_class("-unreachable"), timeout=5)
            banner = text_of(app, "#fleet-banner")
            assert banner.startswith(f"Redis unreachable at 127.0.0.1:{own_redis.port}/0: ")
            assert "showing the last good view" in banner
            assert "REDIS DOWN" in str(app.status_text())
            assert len(table_rows(app, "#fleet-tools")) == 2  # the last good view stays
            own_redis.start()
            await until(pilot, lambda: not screen.has_class("-unreachable"), timeout=10)
            await until(pilot, lambda: "2 live" in str(app.status_text()), timeout=10)
            assert "REDIS DOWN" not in str(app.status_text())


@needs_redis
@pytest.mark.asyncio
async def test_a_defect_while_reading_the_fleet_is_shown_and_the_console_reads_on(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = redis_server.url("defect", **FAST)
    async with members(url, 1):
        link = FleetLink(parse_fleet_url(url), poll_s=0.05)
        app = FleetConsoleApp(link, actor="operator:test")
        read = link.poll
        broken = True

        async def poll_broken_until_told() -> None:
            if broken:
                raise KeyError("members")
            await read()

        link.poll = poll_broken_until_told  # type: ignore[method-assign]
        async with app.run_test(size=SMALL) as pilot:
            await until(pilot, lambda: app.screen.has_class("-unreachable"), timeout=5)
            assert "unexpected KeyError: 'members'" in text_of(app, "#fleet-banner")
            broken = False  # the poller kept going: the next read is shown
            await until(pilot, lambda: len(table_rows(app, "#fleet-tools")) == 2, timeout=5)
            assert not app.screen.has_class("-unreachable")
        assert "reading the fleet failed" in caplog.text


# --- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://h:99999/0?namespace=x", "the fleet URL's port is not a number from 0 to 65535"),
        ("redis://u:hunter2@h/0?namespace=x&quorum=0", "quorum must be at least 1, got 0"),
        ("rediss://h/0?namespace=bad name", "namespace 'bad name' must match"),
    ],
)
def test_a_bad_fleet_url_is_one_line_naming_the_problem_and_exit_2(
    url: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["console", "--attach", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tripwire: --attach: {problem}") and err.count("\n") == 1
    assert "hunter2" not in err


def test_a_fleet_console_refuses_what_only_a_recording_console_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["console", "--attach", "redis://u:hunter2@h/0?namespace=x", "--replay", "t1"]) == 2
    err = capsys.readouterr().err
    assert "--attach redis://u:***@h:6379/0?namespace=x: --replay cannot be used with it" in err
    assert "hunter2" not in err
