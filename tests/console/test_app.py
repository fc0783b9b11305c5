"""The console app, driven by keys through Textual's Pilot: views, operator actions, hot reload.

Operator actions and manifest reloads run against a real engine in its own thread (the way
the console runs one); the views are checked against a scripted link with a frozen clock.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static, Tree

from console.app import ConsoleApp
from console.host import EngineHost
from console.model import ToolSeed
from console.screens.board import RESORT_S, BoardScreen, CardGrid
from console.screens.confirm import ConfirmActionModal
from console.screens.deps import DependencyScreen
from console.screens.events import EventLogScreen
from console.screens.help import HelpScreen
from console.screens.manifests import ManifestScreen
from console.screens.tool import ToolScreen
from console.widgets.breaker_table import BreakerTable
from console.widgets.event_list import EventList
from engine.demo import DEMO_TOOLS
from engine.engine import Engine
from engine.strategies.breaker.machine import BreakerState
from tests.console import factory as f
from tests.console.fakes import FakeLink, manifest
from tests.polling import until

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).parents[2]
SIZE = (140, 40)


# --- a real engine --------------------------------------------------------------------------


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    target = tmp_path / "manifests"
    target.mkdir()
    for path in (ROOT / "manifests").glob("*.yaml"):
        shutil.copy(path, target / path.name)
    return target


@pytest.fixture
def host(manifests: Path) -> Iterator[EngineHost]:
    engine = Engine(manifests, watch=True, watch_debounce_ms=20)
    for name, fn in DEMO_TOOLS.items():
        engine.register(name, fn)
    host = EngineHost(engine, description="test engine")
    host.start()
    yield host
    host.close()


def engine_state(host: EngineHost, tool_id: str) -> BreakerState:
    assert host._portal is not None
    return host._portal.call(lambda: host.engine.state(tool_id))


def table(app: ConsoleApp) -> BreakerTable:
    return app.screen.query_one(BreakerTable)


async def to_table(pilot: Pilot[None]) -> BreakerTable:
    """The demo's seven tools start as cards; ``v`` switches to the table."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    if app.screen.query_one(CardGrid).display and app.screen.query_one("#layouts").current == "cards":  # type: ignore[attr-defined]
        await pilot.press("v")
    return table(app)


async def select(pilot: Pilot[None], tool_id: str) -> None:
    grid = await to_table(pilot)
    while grid.selected != tool_id:
        await pilot.press("down")


async def test_trip_by_keys_forces_the_breaker_open_and_the_board_shows_it(host: EngineHost) -> None:
    app = ConsoleApp(host, actor="operator:test")
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "flight_search")
        await pilot.press("t")
        assert isinstance(app.screen, ConfirmActionModal)
        await pilot.press("tab", *"vendor maintenance", "enter")
        await until(pilot, lambda: engine_state(host, "flight_search") is BreakerState.FORCED_OPEN)
        await until(pilot, lambda: app.model.tools["flight_search"].state is BreakerState.FORCED_OPEN)
        row = next(r for r in table(app).rows if r.tool_id == "flight_search")
        assert row.state is BreakerState.FORCED_OPEN
        line = table(app).render_line(1 + table(app).rows.index(row)).text
        assert "FORCED_OPEN" in line
        transition = app.model.tools["flight_search"].history[-1]
        assert (transition.actor, transition.reason) == ("operator:test", "vendor maintenance")

        await pilot.press("r", "enter")  # reset, no reason
        await until(pilot, lambda: app.model.tools["flight_search"].state is BreakerState.CLOSED)
        assert engine_state(host, "flight_search") is BreakerState.CLOSED


async def test_the_board_changes_only_when_the_engines_event_arrives(host: EngineHost) -> None:
    app = ConsoleApp(host)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "hotel_search")
        unsubscribe = app._unsubscribe
        assert unsubscribe is not None
        unsubscribe()  # the engine's events no longer reach the console
        await pilot.press("t", "enter")
        await until(pilot, lambda: engine_state(host, "hotel_search") is BreakerState.FORCED_OPEN)
        app.flush()
        assert app.model.tools["hotel_search"].state is BreakerState.CLOSED, "no optimistic update"


async def test_marked_tools_are_tripped_together(host: EngineHost) -> None:
    app = ConsoleApp(host)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "compare_prices")
        await pilot.press("space", "down", "space")
        await pilot.press("t")
        modal = app.screen
        assert isinstance(modal, ConfirmActionModal)
        assert list(modal.tools) == ["compare_prices", "create_itinerary"]
        await pilot.press("enter")
        for tool_id in ("compare_prices", "create_itinerary"):
            await until(pilot, lambda t=tool_id: app.model.tools[t].state is BreakerState.FORCED_OPEN)  # type: ignore[misc]


async def test_a_manifest_edited_on_disk_shows_its_new_version(host: EngineHost, manifests: Path) -> None:
    app = ConsoleApp(host)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        assert isinstance(app.screen, ManifestScreen)
        before = app.model.tools["hotel_search"].manifest
        assert before is not None
        path = manifests / "hotel_search.yaml"
        path.write_text(path.read_text().replace("timeout_ms: 30000", "timeout_ms: 12000"))
        await until(pilot, lambda: app.model.tools["hotel_search"].manifest.digest != before.digest)  # type: ignore[union-attr]
        await pilot.pause()
        rows = app.screen.query_one("#in-force", DataTable)
        version = str(rows.get_row("hotel_search")[1]).split()[0]  # "v8 0a24d09a": version and digest
        assert version == f"v{app.model.tools['hotel_search'].manifest.version}" != f"v{before.version}"  # type: ignore[union-attr]
        assert str(rows.get_row("hotel_search")[2]) == "12.0s"
        assert any("hotel_search" in str(n.message) for n in app._notifications)


async def test_a_broken_manifest_shows_its_error_and_the_last_good_one_stays(
    host: EngineHost, manifests: Path
) -> None:
    app = ConsoleApp(host)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        path = manifests / "hotel_search.yaml"
        path.write_text(path.read_text().replace("timeout_ms: 30000", "timeout_ms: -5"))
        await until(pilot, lambda: bool(app.model.rejected))
        await pilot.pause()
        shown = str(app.screen.query_one("#rejected", Static).render())
        assert "hotel_search.yaml" in shown and "timeout_ms" in shown
        assert host._portal is not None
        assert host._portal.call(lambda: host.engine.manifest("hotel_search").timeout_ms) == 30_000
        assert app.model.tools["hotel_search"].manifest.content["timeout_ms"] == 30_000  # type: ignore[union-attr]
        await pilot.press("1")
        assert isinstance(app.screen, BoardScreen), "the app is alive and answers keys"


# --- the views, on a scripted link ----------------------------------------------------------

SEEDS = (
    ToolSeed("flight_search", manifest=manifest("flight_search")),
    ToolSeed("hotel_search", manifest=manifest("hotel_search")),
    ToolSeed("compare_prices", manifest=manifest("compare_prices")),
)


def scripted(**kwargs: object) -> tuple[ConsoleApp, FakeLink]:
    link = FakeLink(SEEDS, **kwargs)  # type: ignore[arg-type]
    return ConsoleApp(link, actor="operator:test", live=False), link


async def test_read_only_hides_the_operator_actions() -> None:
    app, link = scripted(read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        assert app.check_action("act", ("trip",)) is False
        await pilot.press("t")
        assert isinstance(app.screen, BoardScreen) and not link.actions
        assert "read-only" in str(app.status_text())


async def test_a_cancelled_action_does_nothing() -> None:
    app, link = scripted()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("t", "escape")
        assert isinstance(app.screen, BoardScreen) and not link.actions


async def test_enter_opens_the_tool_detail_and_escape_goes_back() -> None:
    app, link = scripted()
    async with app.run_test(size=SIZE) as pilot:
        link.emit(
            f.started("flight_search", "c1", 90.0),
            f.failed_attempt("flight_search", "c1", 90.1, streak=1),
            f.started("flight_search", "c1", 90.3, attempt=2),
            f.started("hotel_search", "c2", 95.0, timeout=30.0),
        )  # fmt: skip
        app.flush()
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, ToolScreen) and screen.tool_id == "compare_prices"
        # Back on the board, flight_search (one failure) sorts before compare_prices: the
        # selection stays on compare_prices, and left is the tool before it.
        await pilot.press("escape", "left", "enter")
        screen = app.screen
        assert isinstance(screen, ToolScreen) and screen.tool_id == "flight_search"
        app.flush()
        assert "connection_reset" in str(screen.query_one("#errors", DataTable).get_row_at(0))
        assert "timeout      30.0s per attempt" in str(screen.query_one("#policy", Static).render())
        await pilot.press("escape", "right", "right", "enter")
        app.flush()
        in_flight = str(app.screen.query_one("#in-flight", Static).render())
        assert "c2" in in_flight and "25.0s left of 30.0s" in in_flight, "the countdown runs on the app clock"


async def test_the_dependency_view_follows_the_newest_turn() -> None:
    app, link = scripted()
    calls = [
        {"id": "flights", "tool": "flight_search"},
        {"id": "compare", "tool": "compare_prices", "depends_on": ["flights"], "optional": True},
    ]
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        assert isinstance(app.screen, DependencyScreen)
        link.emit(
            f.turn_started("t1", 90.0, calls), f.call_failed("flight_search", "flights", 91.0, turn="t1"),
            f.skipped("compare_prices", "compare", 91.0, "t1", ("flights",)),
        )  # fmt: skip
        app.flush()
        tree = app.screen.query_one(Tree)
        flights = tree.root.children[0]
        assert "FAILED" in str(flights.label) and "SKIPPED" in str(flights.children[0].label)
        link.emit(f.turn_started("t2", 92.0, calls))
        app.flush()
        assert tree.root.data == "t2"


async def test_the_event_log_filters_and_pause_holds_the_display() -> None:
    app, link = scripted()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        assert isinstance(app.screen, EventLogScreen)
        link.emit(f.opened("flight_search", 90.0), f.succeeded("hotel_search", "c1", 90.5))
        app.flush()
        log = app.screen.query_one(EventList)
        assert len(log.lines) == 2
        await pilot.press("slash", *"opened", "enter")
        assert app.screen.query_one("#filter", Input).value == "opened"
        assert len(log.lines) == 1
        await pilot.press("p")
        link.emit(f.opened("hotel_search", 91.0), f.opened("compare_prices", 91.0))
        app.flush()
        assert len(log.lines) == 1, "paused: the display waits"
        assert "PAUSED · 2 new events" in str(app.status_text())
        await pilot.press("p")
        assert len(log.lines) == 3
        assert app.model.tools["compare_prices"].state is BreakerState.OPEN


async def test_sort_cycles_and_keeps_the_cursor_on_its_tool() -> None:
    app, link = scripted()
    async with app.run_test(size=SIZE) as pilot:
        grid = await to_table(pilot)
        assert [r.tool_id for r in grid.rows] == ["compare_prices", "flight_search", "hotel_search"]
        await pilot.press("down")
        assert grid.selected == "flight_search"
        link.emit(f.opened("hotel_search", 95.0))
        app.flush()
        assert [r.tool_id for r in grid.rows][-1] == "hotel_search", "rows do not jump on every event"
        link.clock += RESORT_S
        app.flush()
        assert grid.rows[0].tool_id == "hotel_search", "by state, the breaker that opened goes first"
        assert grid.selected == "flight_search"
        await pilot.press("s", "s", "s", "s")  # error %, volume, p99, name
        assert [r.tool_id for r in grid.rows] == ["compare_prices", "flight_search", "hotel_search"]
        assert grid.selected == "flight_search"


async def test_the_palette_offers_views_tools_and_actions() -> None:
    app, _ = scripted()
    async with app.run_test(size=SIZE):
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {
            "Go to Dependencies",
            "Open hotel_search",
            "Trip hotel_search",
            "Reset hotel_search",
        } <= titles


async def test_help_lists_the_keys() -> None:
    app, _ = scripted()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert not isinstance(app.screen, HelpScreen)
