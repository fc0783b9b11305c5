"""Live lists keep the operator's item under the cursor; anything cut can be read whole; ``?`` is
readable at 80×24 (issue 13: §1 "lists move under the cursor", §3, §4, §5).

The pure part (where the cursor goes, how a row reads in full, what the help lists) is tested
without Textual; the views are driven by keys through Pilot on a scripted link with a frozen clock,
and the traces views on a real SQLite trace store that more turns are written into.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.binding import ActiveBinding, Binding
from textual.dom import DOMNode
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import DataTable, Static, TextArea, Tree

from console.app import ConsoleApp
from console.model import EventRow, ToolSeed
from console.screens.deps import DependencyScreen
from console.screens.events import EventLogScreen
from console.screens.help import HelpScreen, help_sections
from console.screens.text import TextModal, field_text
from console.screens.tool import ToolScreen
from console.screens.traces import TraceBrowserScreen, TraceScreen, page_line
from console.selection import ListCursor, reselect
from console.widgets.event_list import EventList
from console.widgets.item_table import hint, one_line, unique_keys
from engine.store import TraceStore
from tests.console import factory as f
from tests.console.demo_feed import demo_store, live_demo
from tests.console.fakes import FakeLink, manifest

# --- where the cursor goes (pure) -------------------------------------------------------------


def test_following_the_cursor_rides_the_newest_row() -> None:
    placed = reselect(["b", "a"], ["d", "c", "b", "a"], "b", following=True)
    assert (placed.index, placed.key, placed.arrived) == (0, "d", frozenset())
    log = reselect(["a", "b"], ["a", "b", "c"], "b", following=True, newest_first=False)
    assert (log.index, log.key) == (2, "c"), "a log's newest row is its last"
    chosen = reselect([], ["r2", "f1", "r1"], None, following=True, newest="r1")
    assert chosen.key == "r1", "the newest that matters (a running turn) when the view says so"


def test_held_the_cursor_stays_on_its_item_and_counts_what_arrived_above() -> None:
    placed = reselect(["c", "b", "a"], ["e", "d", "c", "b", "a"], "b", following=False)
    assert (placed.index, placed.key) == (3, "b")
    assert placed.arrived == {"e", "d"}
    below = reselect(["a", "b"], ["a", "b", "c", "d"], "a", following=False, newest_first=False)
    assert (below.index, below.key, below.arrived) == (0, "a", frozenset({"c", "d"}))


def test_a_vanished_item_hands_the_cursor_to_its_nearest_neighbour() -> None:
    older = reselect(["d", "c", "b", "a"], ["e", "d", "b", "a"], "c", following=False)
    assert older.key == "b", "the row that was below it (older) first"
    newer = reselect(["d", "c", "b"], ["e", "d"], "b", following=False)
    assert newer.key == "d", "then the one above"
    gone = reselect(["a", "b"], ["x", "y"], "b", following=False)
    assert gone.key == "x"
    assert reselect(["a"], [], "a", following=False).index is None


def test_the_cursor_counts_new_rows_until_it_passes_them_and_moving_ends_following() -> None:
    cursor: ListCursor[str] = ListCursor()
    assert cursor.place(["b", "a"]) == 0 and cursor.following
    cursor.moved(1)
    assert not cursor.following and cursor.key == "a"
    assert cursor.place(["c", "b", "a"]) == 2
    assert cursor.place(["e", "d", "c", "b", "a"]) == 4
    assert cursor.new_count == 3
    assert hint(cursor) == "▲ 3 new · ○ held on its row · f follows"
    cursor.moved(2)  # up past d and e? no: onto c, which passes over nothing newer than itself
    assert cursor.new_count == 2, "e and d are still above"
    cursor.moved(0)
    assert cursor.new_count == 0 and not cursor.following, "reaching the top reads them; f follows"
    cursor.follow(True)
    assert cursor.place(["f", "e", "d", "c", "b", "a"]) == 0
    assert hint(cursor) == "● following newest · f holds"


def test_a_logs_cursor_counts_what_arrives_below_it() -> None:
    cursor: ListCursor[int] = ListCursor(newest_first=False)
    assert cursor.place([1, 2, 3]) == 2
    cursor.moved(0)
    assert cursor.place([1, 2, 3, 4, 5]) == 0
    assert cursor.place([2, 3, 4, 5, 6]) == 0, "its event fell off the top: the next one"
    assert cursor.key == 2 and cursor.new_count == 3
    assert hint(cursor).startswith("▼ 3 new")


def test_rows_that_look_alike_keep_keys_of_their_own() -> None:
    assert unique_keys(["a", "b", "a", "a"]) == ["a", "b", "a#2", "a#3"]


def test_a_free_text_cell_is_one_line_cut_with_an_ellipsis() -> None:
    cell = one_line("first line\nsecond [bold]line[/bold]")
    assert cell.plain == "first line ⏎ second [bold]line[/bold]", "text, never markup"
    assert (cell.no_wrap, cell.overflow) == (True, "ellipsis")
    assert one_line(Text("styled", style="red")).style == "red"


# --- the whole text (pure) --------------------------------------------------------------------


def test_a_row_in_full_lists_every_field_whole() -> None:
    reason = "5 consecutive transient failures (connection reset by peer) " * 3
    shown = field_text([("time", "10:31:02"), ("reason", reason.strip()), ("status", None), ("body", "a\nb")])
    assert shown.splitlines() == [
        "time    10:31:02",
        f"reason  {reason.strip()}",
        "status  —",
        "body    a",
        "        b",
    ]


def test_page_line_says_last_page() -> None:
    assert page_line(1, 8, more=False).plain == "page 1 · 8 turns · last page: no older turns"
    assert page_line(2, 50, more=True).plain == "page 2 · 50 turns · n older · b newer"


def test_the_help_lists_the_views_keys_first_and_cursor_keys_last() -> None:
    view, app, widget = DOMNode(), DOMNode(), DOMNode()
    bindings = [
        ActiveBinding(widget, Binding("down", "cursor_down", "Down", show=False), True),
        ActiveBinding(widget, Binding("enter", "select_cursor", "Open", tooltip="Open the turn"), True),
        ActiveBinding(view, Binding("n", "page(1)", "Next", tooltip="The next (older) page"), True),
        ActiveBinding(view, Binding("escape", "leave", "Back", show=False), True),
        ActiveBinding(app, Binding("q", "quit", "Quit"), True),
        ActiveBinding(app, Binding("t", "act('trip')", "Trip"), False),
    ]
    sections = help_sections(bindings, view=view, app=app, view_title="Traces", key_display=lambda b: b.key)
    assert [s.title for s in sections] == [
        "Traces",
        "The list or panel in focus",
        "Everywhere",
        "Moving around",
    ]
    assert [(e.keys, e.description) for e in sections[0].entries] == [
        ("n", "Next — The next (older) page"),
        ("escape", "Back"),
    ]
    assert sections[1].entries[0].description == "Open — Open the turn"
    assert not sections[2].entries[1].enabled


# --- the views ----------------------------------------------------------------------------------

SEEDS = (
    ToolSeed("flight_search", manifest=manifest("flight_search")),
    ToolSeed("hotel_search", manifest=manifest("hotel_search")),
)
CALLS = [{"id": "flights", "tool": "flight_search"}]


def scripted() -> tuple[ConsoleApp, FakeLink]:
    link = FakeLink(SEEDS)
    return ConsoleApp(link, actor="operator:test", live=False), link


def screen_text(app: ConsoleApp) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def turns(*names: str, at: float) -> list[Any]:
    events: list[Any] = []
    for n, name in enumerate(names):
        events += [
            f.turn_started(name, at + n, CALLS),
            f.turn_finished(name, at + n + 0.5, {"flights": "ok"}),
        ]
    return events


@pytest.mark.asyncio
async def test_the_dependency_list_keeps_the_chosen_turn_while_new_turns_arrive() -> None:
    """The report: row 10 went from tight-deadline to ask-model to hotel-slow with no key pressed,
    and enter opened a turn the operator had not chosen."""
    app, link = scripted()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("2")
        assert isinstance(app.screen, DependencyScreen)
        link.emit(*turns("t1", "t2", "t3", "t4", "t5", at=10.0))
        app.flush()
        await pilot.pause()
        await pilot.press("down", "down")  # newest first: t5, t4, t3 ← the operator's choice
        link.emit(*turns("t6", "t7", at=20.0))
        app.flush()
        await pilot.pause()
        text = screen_text(app)
        await pilot.press("enter")
        app.flush()
        await pilot.pause()
        assert app.screen.query_one(Tree).root.data == "t3", "enter opens the turn that was chosen"
        assert "▲ 2 new" in text and "held on its row" in text, "the arrivals were counted, on screen"
        link.emit(*turns("t8", at=30.0))
        app.flush()
        await pilot.pause()
        assert app.screen.query_one(Tree).root.data == "t3", "the graph holds it"
        await pilot.press("f")
        app.flush()
        await pilot.pause()
        assert app.screen.query_one(Tree).root.data == "t8", "f: following the newest again"
        assert "● following newest" in screen_text(app)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = demo_store(tmp_path / "traces.db")
    live_demo()  # the fake link's seeds, played before the app's loop runs
    return path


def write_turns(path: Path, *names: str) -> None:
    """More turns recorded while the console watches: later than every demo turn."""
    with TraceStore(path) as store:
        store.write(turns(*names, at=5_000.0))


def traces_app(path: Path) -> ConsoleApp:
    seeds, _ = live_demo()
    return ConsoleApp(FakeLink(seeds, clock=1_000.0), live=False, traces=path)


async def settle(pilot: Pilot[None]) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.asyncio
async def test_the_traces_list_keeps_the_chosen_turn_across_refreshes(store: Path) -> None:
    app = traces_app(store)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("5")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TraceBrowserScreen)
        table = screen.query_one("#turns", DataTable)
        await pilot.press("down", "down", "down")
        chosen = str(table.get_row_at(table.cursor_row)[1])
        write_turns(store, "late-1", "late-2", "late-3")
        assert isinstance(app.link, FakeLink)
        app.link.clock += 5.0  # the first page is read again every 2 s
        app.flush()
        await settle(pilot)
        assert table.row_count == 12  # the pass's 9 turns and 3 late ones
        assert str(table.get_row_at(table.cursor_row)[1]) == chosen, "the highlight stayed on its turn"
        assert "▲ 3 new" in str(screen.query_one("#page", Static).render())
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TraceScreen) and app.screen.turn_id == chosen


@pytest.mark.asyncio
async def test_n_on_the_last_page_says_last_page(store: Path) -> None:
    app = traces_app(store)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("5")
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        assert "last page" in str(app.screen.query_one("#page", Static).render())


@pytest.mark.asyncio
async def test_an_opened_turn_at_80_columns_shows_what_happened_and_opens_it_whole(store: Path) -> None:
    """The report: the "what happened" column was about 9 characters wide at 80×24."""
    app = traces_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        await settle(pilot)
        app.push_screen(TraceScreen("demo/ask-model"))
        await settle(pilot)
        await settle(pilot)
        assert "hotel_search attempt 1 started" in screen_text(app), "the text column has the width"
        await pilot.press("down", "down", "down", "down", "enter")  # the ToolError
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, TextModal)
        assert "Invalid airport code: ZZZ" in modal.query_one(TextArea).text
        await pilot.press("c")
        assert "Invalid airport code: ZZZ" in app.clipboard
        await pilot.press("escape")
        assert isinstance(app.screen, TraceScreen)


@pytest.mark.asyncio
async def test_the_event_log_holds_its_event_counts_new_ones_and_opens_one_whole() -> None:
    app, link = scripted()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("4")
        assert isinstance(app.screen, EventLogScreen)
        long_reason = "vendor maintenance window announced by the on-call engineer, ticket OPS-4711 " * 2
        link.emit(
            f.tripped("flight_search", 90.0, reason=long_reason.strip()), f.opened("hotel_search", 91.0)
        )
        app.flush()
        await pilot.pause()
        log = app.screen.query_one(EventList)
        assert log.list_cursor.following and isinstance(log.selected, EventRow)
        assert log.selected.event_type == "BreakerOpened", "following: the newest event"
        await pilot.press("up")
        link.emit(f.closed("hotel_search", 92.0), f.half_opened("flight_search", 93.0))
        app.flush()
        await pilot.pause()
        assert isinstance(log.selected, EventRow) and log.selected.event_type == "BreakerTripped"
        assert "▼ 2 new" in str(app.screen.query_one("#hint", Static).render())
        await pilot.press("enter")
        modal = app.screen
        assert isinstance(modal, TextModal)
        assert long_reason.strip() in modal.query_one(TextArea).text, "the reason, whole"
        await pilot.press("escape")
        assert app.screen.query_one(EventList).selected is log.selected


@pytest.mark.asyncio
async def test_enter_on_an_error_or_a_transition_opens_it_whole() -> None:
    """The report: reasons cut even at 160 columns (`except`, `HTTP 5`, `5 consecutive transie`)."""
    app, link = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        link.emit(
            f.failed_attempt("flight_search", "c1", 90.0, streak=1),
            f.failed_attempt("flight_search", "c2", 91.0, streak=2),
            f.opened("flight_search", 92.0),
        )  # fmt: skip
        app.flush()
        app.open_tool("flight_search")
        await pilot.pause()
        app.flush()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ToolScreen)
        errors = screen.query_one("#errors", DataTable)
        errors.focus()
        await pilot.press("down")  # the older error, c1
        link.emit(f.failed_attempt("flight_search", "c3", 93.0, streak=3))
        app.flush()
        await pilot.pause()
        assert "c1" in str(errors.get_row_at(errors.cursor_row)[1]), "the cursor stayed on its error"
        assert "▲ 1 new" in str(screen.query_one("#errors-title", Static).render())
        await pilot.press("enter")
        assert isinstance(app.screen, TextModal)
        assert "connection reset: transient" in app.screen.query_one(TextArea).text
        await pilot.press("escape")
        screen.query_one("#history", DataTable).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, TextModal)
        assert "5 consecutive transient failures" in app.screen.query_one(TextArea).text


@pytest.mark.asyncio
async def test_help_screen_is_readable_at_80_by_24(store: Path) -> None:
    app = traces_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        await settle(pilot)
        app.push_screen(HelpScreen.of(app.screen))
        await pilot.pause()
        lines = screen_text(app).splitlines()
        for key, text in (("n", "Next — The next (older) page"), ("f", "Follow"), ("⏎", "Open — Open the")):
            assert any(f" {key}  {text}" in line for line in lines), (key, lines)
        assert any(" esc  Back to the list" in line for line in lines)
        await pilot.press("escape")
        assert isinstance(app.screen, TraceBrowserScreen)


# --- help and toasts ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_question_mark_opens_the_full_screen_help() -> None:
    app, _ = scripted()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.asyncio
async def test_a_toast_never_hides_the_line_under_the_cursor() -> None:
    app, link = scripted()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.press("4")
        link.emit(*(f.opened("hotel_search", 90.0 + n) for n in range(40)))
        app.flush()
        await pilot.pause()
        app.notify("hotel_search v9", title="Manifest reloaded", timeout=30)
        await pilot.pause(0.1)
        app.flush()
        await pilot.pause()
        log = app.screen.query_one(EventList)
        assert log.list_cursor.index is not None
        row = log.list_cursor.index - int(log.scroll_y)
        assert 0 <= row < log.region.height, "following: the newest event is on screen"
        line = Region(log.region.x, log.region.y + row, log.region.width, 1)
        toasts = [t.region for t in app.screen.query("Toast")]
        assert toasts and not any(line.overlaps(t) for t in toasts), (line, toasts)
