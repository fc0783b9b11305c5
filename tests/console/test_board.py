"""The board (issue 13): what a countdown says, which columns fit, how it starts, what is selected.

Pure rules are tested without Textual; what the operator sees and does (selection, mouse,
resets, the sort line) through Textual's Pilot on a scripted link with a frozen clock.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rich.style import Style
from textual.pilot import Pilot
from textual.widget import Widget

from console.app import ConsoleApp
from console.model import ConsoleModel, ToolSeed
from console.render import countdown
from console.screens.board import (
    DEFAULT_SORT,
    RESORT_S,
    BoardScreen,
    CardGrid,
    SortKey,
    default_layout,
    sort_label,
    sort_rows,
)
from console.screens.tool import ToolScreen
from console.widgets.breaker_card import BreakerCard
from console.widgets.breaker_table import COLUMNS, STRATEGY_COLUMNS, BreakerTable, fit_columns
from engine.events import BreakerReset
from engine.strategies.breaker.machine import BreakerState
from tests.console import factory as f
from tests.console.fakes import FakeLink, manifest

# --- what a countdown says -------------------------------------------------------------------


def test_a_countdown_counts_whole_seconds_up_to_the_moment() -> None:
    assert [countdown(s) for s in (27.0, 0.2, 65.0, 3725.0)] == ["in 27s", "in 1s", "in 1m05s", "in 1h02m"]


def test_a_countdown_that_has_passed_says_how_long_ago_it_was_due() -> None:
    """Not "now" for ever: an engine that is late, or gone, shows as such."""
    assert countdown(0.0) == "due now"
    assert countdown(-0.6) == "due now"
    assert countdown(-3.2) == "due 3s ago"
    assert countdown(-130.0) == "due 2m10s ago"
    assert countdown(-7300.0) == "due 2h01m ago"


# --- which columns fit -----------------------------------------------------------------------


def keys(width: int) -> list[str]:
    return [column.key for column, _ in fit_columns(width)]


def test_at_80_columns_the_table_keeps_state_errors_failures_and_calls() -> None:
    """Error % with every count it is made of: ok, failed and rejected calls."""
    assert keys(80) == ["mark", "tool", "state", "fails", "half_open", "error", "ok", "failed", "rejected"]


def test_at_100_columns_failed_attempts_p99_and_the_rate_come_before_timeouts() -> None:
    assert keys(100) == [*keys(80), "attempts_failed", "rate", "p99"]


@pytest.mark.parametrize("strategies", [frozenset(), STRATEGY_COLUMNS], ids=["plain", "with strategies"])
def test_at_160_columns_every_column_shows_and_the_sparkline_takes_the_rest(
    strategies: frozenset[str],
) -> None:
    """A strategy's columns only on a board where some tool has it: a board without looks as it did.
    Only a rate limit's waits wait for a wider board (past the sparkline, which 160 columns keep)."""
    columns = fit_columns(160, strategies)
    wider = {"rate_limit_waited"}
    every = [c.key for c in COLUMNS if (c.needs is None or c.needs in strategies) and c.key not in wider]
    assert [c.key for c, _ in columns] == every
    assert sum(size for _, size in columns) + len(columns) - 1 == 160
    assert "rate_limit_waited" in [c.key for c, _ in fit_columns(170, strategies)] or not strategies


def test_on_a_board_with_a_rate_limit_the_half_open_column_counts_cooldowns_down_too() -> None:
    """At 80 columns a cooldown shows (``cool 27s``) where the breaker's countdown does."""
    columns = dict(fit_columns(80, frozenset({"rate_limit"})))
    [countdown] = [c for c in columns if c.key == "half_open"]
    assert countdown.header == "HALF-OPEN/COOL" and columns[countdown] == 14
    assert [c.key for c, _ in fit_columns(80, frozenset({"rate_limit"}))] == keys(80)


@pytest.mark.parametrize("strategies", [frozenset(), frozenset({"bulkhead"}), STRATEGY_COLUMNS])
@pytest.mark.parametrize("width", range(38, 240))
def test_columns_are_dropped_by_priority_never_by_greedy_fit(width: int, strategies: frozenset[str]) -> None:
    """What shows is every column up to some priority: never a timeout count in place of p99."""
    present = [c for c in COLUMNS if c.needs is None or c.needs in strategies]
    shown = {column.key for column, _ in fit_columns(width, strategies)}
    cut = max(c.priority for c in present if c.key in shown)
    assert shown == {c.key for c in present if c.priority <= cut}
    if cut > 0:  # the first level always shows; past it, nothing overflows
        assert sum(size for _, size in fit_columns(width, strategies)) + len(shown) - 1 <= width


# --- how the board starts --------------------------------------------------------------------


def test_a_narrow_or_crowded_board_starts_as_the_table() -> None:
    assert default_layout(80, 7) == "table"
    assert default_layout(99, 7) == "table"
    assert default_layout(100, 7) == "cards"
    assert default_layout(160, 7) == "cards"
    assert default_layout(160, 40) == "table"


def test_the_default_sort_puts_unhealthy_breakers_first() -> None:
    model = ConsoleModel(
        ToolSeed(name, state)
        for name, state in [
            ("a_closed", BreakerState.CLOSED), ("b_disabled", BreakerState.DISABLED),
            ("c_half_open", BreakerState.HALF_OPEN), ("d_open", BreakerState.OPEN),
            ("e_forced", BreakerState.FORCED_OPEN),
        ]
    )  # fmt: skip
    order = [r.tool_id for r in sort_rows(model.rows(0.0), DEFAULT_SORT)]
    assert order[:3] == ["e_forced", "d_open", "c_half_open"]


def test_the_sort_is_said_in_words_with_its_direction() -> None:
    assert sort_label(SortKey.ERRORS, reverse=False) == "error % ↓ highest first"
    assert sort_label(SortKey.ERRORS, reverse=True) == "error % ↑ lowest first"
    assert sort_label(SortKey.STATE, reverse=False) == "state ↓ worst first"


# --- on screen -------------------------------------------------------------------------------

SEEDS = (
    ToolSeed("compare_prices", manifest=manifest("compare_prices")),
    ToolSeed("flight_search", manifest=manifest("flight_search")),
    ToolSeed("hotel_search", manifest=manifest("hotel_search")),
    ToolSeed("weather", manifest=manifest("weather")),
)


@pytest.fixture
def no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual reads (and removes) NO_COLOR when an app is made."""
    monkeypatch.setenv("NO_COLOR", "1")


def scripted(clock: float = 100.0) -> tuple[ConsoleApp, FakeLink]:
    link = FakeLink(SEEDS, clock=clock)
    return ConsoleApp(link, actor="operator:test", live=False), link


def lines_of(app: ConsoleApp, widget: Widget) -> list[list[tuple[str, Style | None]]]:
    """What the terminal shows over ``widget``: each line as (text, style) runs."""
    strips = app.screen._compositor.render_strips()
    region = widget.region
    return [
        [(s.text, s.style) for s in strips[y].crop(region.x, region.right)]
        for y in range(region.y, region.bottom)
    ]


def text_of(app: ConsoleApp, widget: Widget) -> list[str]:
    return ["".join(text for text, _ in line) for line in lines_of(app, widget)]


def card(app: ConsoleApp, tool_id: str) -> BreakerCard:
    return next(c for c in app.screen.query(BreakerCard) if c.tool_id == tool_id)


def board(app: ConsoleApp) -> BoardScreen:
    screen = app.screen
    assert isinstance(screen, BoardScreen)
    return screen


def title_is_reversed(app: ConsoleApp, tool_id: str) -> bool:
    top = lines_of(app, card(app, tool_id))[0]
    return any(tool_id in text and style is not None and style.reverse for text, style in top)


async def selection_is_unmistakable(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    await pilot.press("right")
    selected = board(app).selected_tool
    assert selected is not None
    others = [t for t in (s.tool_id for s in SEEDS) if t != selected]
    assert "▶" in text_of(app, card(app, selected))[0], "a marker glyph before the name"
    assert title_is_reversed(app, selected), "a reversed title, which NO_COLOR keeps"
    for other in others:
        assert "▶" not in text_of(app, card(app, other))[0]
        assert not title_is_reversed(app, other)


@pytest.mark.asyncio
async def test_the_selected_card_has_a_marker_and_a_reversed_title() -> None:
    app, _ = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        await selection_is_unmistakable(pilot)


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_color")
async def test_the_selected_card_is_unmistakable_without_colour() -> None:
    app, _ = scripted()
    assert app.no_color
    async with app.run_test(size=(160, 50)) as pilot:
        await selection_is_unmistakable(pilot)


@pytest.mark.asyncio
@pytest.mark.usefixtures("no_color")
async def test_the_table_cursor_is_a_marker_and_reverse_video_without_colour() -> None:
    app, _ = scripted()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(BreakerTable)
        await pilot.press("down")
        lines = lines_of(app, table)
        cursor = lines[1 + table.cursor]
        assert "".join(text for text, _ in cursor).startswith("▶")
        assert all(style is not None and style.reverse for text, style in cursor if text.strip())
        other = lines[1 + (table.cursor + 1) % len(table.rows)]
        assert not "".join(text for text, _ in other).startswith("▶")
        assert not any(style is not None and style.reverse for _, style in other)


@pytest.mark.asyncio
async def test_a_click_selects_a_card_and_a_double_click_opens_it() -> None:
    app, _ = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        assert board(app).selected_tool == "compare_prices"
        assert await pilot.click(card(app, "hotel_search"), offset=(5, 2))
        assert board(app).selected_tool == "hotel_search"
        assert "▶" in text_of(app, card(app, "hotel_search"))[0]
        assert isinstance(app.screen, BoardScreen), "one click only selects"
        await pilot.click(card(app, "weather"), offset=(5, 2), times=2)
        screen = app.screen
        assert isinstance(screen, ToolScreen) and screen.tool_id == "weather"


@pytest.mark.asyncio
async def test_after_a_reset_the_card_shows_no_failures_at_once() -> None:
    app, link = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        link.emit(f.opened("flight_search", 90.0, streak=5))
        app.flush()
        assert any("fails 5/5" in line for line in text_of(app, card(app, "flight_search")))
        link.emit(
            BreakerReset(
                at=f.WALL + 95.0, t=95.0, tool_id="flight_search", from_state=BreakerState.OPEN,
                to_state=BreakerState.CLOSED, reason="fixed", actor="operator:alice", consecutive_failures=5,
            )
        )  # fmt: skip
        app.flush()
        await pilot.pause()
        shown = text_of(app, card(app, "flight_search"))
        assert any("CLOSED" in line for line in shown)
        assert any("fails 0/5" in line for line in shown), shown


@pytest.mark.asyncio
async def test_an_overdue_half_open_says_how_long_ago_it_was_due_everywhere() -> None:
    """The breaker was due to half-open at 90 s; at 100 s its transition has not been seen."""
    app, link = scripted(clock=100.0)
    async with app.run_test(size=(160, 50)) as pilot:
        link.emit(f.opened("flight_search", 60.0, timeout=30.0))
        app.flush()
        await pilot.pause()
        assert any("half-open due 10s ago" in line for line in text_of(app, card(app, "flight_search")))
        await pilot.press("v")
        table = app.screen.query_one(BreakerTable)
        line = 1 + [r.tool_id for r in table.rows].index("flight_search")
        assert "due 10s ago" in table.render_line(line).text
        app.open_tool("flight_search")
        await pilot.pause()
        app.flush()
        headline = "".join(text_of(app, app.screen.query_one("#headline")))
        assert "half-open due 10s ago" in headline and "now" not in headline


@pytest.mark.asyncio
async def test_a_narrow_board_starts_as_the_table_with_the_open_breaker_first() -> None:
    app, link = scripted()
    async with app.run_test(size=(80, 24)) as pilot:
        link.emit(f.opened("weather", 95.0))
        link.clock += RESORT_S  # the board re-sorts every RESORT_S at most: rows do not jump
        app.flush()
        await pilot.pause()
        assert board(app).query_one("#layouts").current == "table"  # type: ignore[attr-defined]
        table = app.screen.query_one(BreakerTable)
        assert table.rows[0].tool_id == "weather"
        header = table.render_line(0).text
        assert "OK" in header and "FAIL" in header and "TMO" not in header


@pytest.mark.asyncio
async def test_the_layout_follows_the_width_until_the_operator_chooses_one() -> None:
    app, _ = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        layouts = board(app).query_one("#layouts")
        assert layouts.current == "cards"  # type: ignore[attr-defined]
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert layouts.current == "table"  # type: ignore[attr-defined]
        await pilot.press("v")  # the operator wants cards, even at 80 columns
        assert layouts.current == "cards"  # type: ignore[attr-defined]
        await pilot.resize_terminal(90, 30)
        await pilot.pause()
        app.flush()
        assert layouts.current == "cards"  # type: ignore[attr-defined]
        assert app.screen.query_one(CardGrid).has_focus


@pytest.mark.asyncio
async def test_the_board_shows_its_sort_and_s_reverses_it() -> None:
    app, _ = scripted()
    async with app.run_test(size=(80, 24)) as pilot:
        line = app.screen.query_one("#sort-line")
        assert "sort: state ↓ worst first" in "".join(text_of(app, line))
        await pilot.press("s")
        assert "sort: error % ↓ highest first" in "".join(text_of(app, line))
        await pilot.press("S")
        assert "sort: error % ↑ lowest first" in "".join(text_of(app, line))
        assert "S reverse" in "".join(text_of(app, line))


@pytest.mark.asyncio
async def test_help_lists_the_reverse_sort_key() -> None:
    app, _ = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("question_mark")
        help_text = app.screen.query_one("#help")
        assert any("S  Reverse sort" in row for row in text_of(app, help_text))


@pytest.mark.asyncio
async def test_switching_layouts_keeps_the_selected_tool() -> None:
    """``t`` acts on what is selected: ``v`` must not quietly select another tool."""
    app, _ = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("right", "right")
        chosen = board(app).selected_tool
        assert chosen == "hotel_search"
        await pilot.press("v")
        assert app.screen.query_one(BreakerTable).selected == chosen
        await pilot.press("down")
        assert board(app).selected_tool == "weather"
        await pilot.press("v")
        assert app.screen.query_one(CardGrid).selected_tool == "weather"
        assert "▶" in text_of(app, card(app, "weather"))[0]


# --- figures that add up (issue 22 §5) --------------------------------------------------------


def cells_of(line: str, width: int) -> dict[str, str]:
    """A table line's cells by column key, cut where ``fit_columns`` puts the columns."""
    cells, x = {}, 0
    for column, size in fit_columns(width):
        cells[column.key] = line[x : x + size].strip()
        x += size + 1
    return cells


def count(cell: str) -> int:
    return 0 if cell == "·" else int(cell)


@pytest.mark.asyncio
@pytest.mark.parametrize("width", [80, 100, 160])
async def test_error_percent_can_be_worked_out_from_the_row_it_is_on(width: int) -> None:
    """ERR% = (FAIL + REJ) / (OK + FAIL + REJ): at 80 columns REJ was dropped, and ``OK 1 FAIL 1``
    read 66.7 %."""
    app, link = scripted()
    async with app.run_test(size=(width, 24)) as pilot:
        link.emit(
            f.started("flight_search", "c1", 90.0), f.succeeded("flight_search", "c1", 90.2),
            f.started("flight_search", "c2", 91.0), f.failed_attempt("flight_search", "c2", 91.1),
            f.call_failed("flight_search", "c2", 91.2), f.rejected("flight_search", "c3", 92.0),
            f.started("hotel_search", "c4", 93.0), f.succeeded("hotel_search", "c4", 93.2),
        )  # fmt: skip
        app.flush()
        if board(app).query_one("#layouts").current != "table":  # type: ignore[attr-defined]
            await pilot.press("v")
        await pilot.pause()
        table = app.screen.query_one(BreakerTable)
        checked = 0
        for y in range(1, len(table.rows) + 1):
            cells = cells_of(table.render_line(y).text, table.size.width)
            ok, failed, rejected = (count(cells[k]) for k in ("ok", "failed", "rejected"))
            if ok + failed + rejected:
                assert cells["error"] == f"{100 * (failed + rejected) / (ok + failed + rejected):.1f}%", cells
                checked += 1
        assert checked == 2


def partial_results_that_open_the_breaker(tool: str, calls: int) -> list[Any]:
    """Calls whose every attempt fails, each ending with a partial result; the breaker opens."""
    events: list[Any] = []
    for i in range(calls):
        t = 80.0 + i
        events += [
            f.started(tool, f"q{i}", t),
            f.failed_attempt(tool, f"q{i}", t + 0.1, streak=i + 1, decision="partial_success"),
            f.succeeded(tool, f"q{i}", t + 0.2, partial=True),
        ]
    return [*events, f.opened(tool, 80.0 + calls, streak=calls)]


@pytest.mark.asyncio
async def test_an_open_breakers_failed_attempts_show_on_its_row_and_its_card() -> None:
    """``● OPEN 5/5`` with ``ERR% 0.0%`` and ``FAIL ·``: the calls ended with partial results, so
    they count as OK; the five failed attempts that opened the breaker show as ATT✗."""
    app, link = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        link.emit(*partial_results_that_open_the_breaker("weather", 5))
        app.flush()
        await pilot.pause()
        assert any("att ✗5" in line for line in text_of(app, card(app, "weather")))
        await pilot.press("v")
        table = app.screen.query_one(BreakerTable)
        y = 1 + [r.tool_id for r in table.rows].index("weather")
        cells = cells_of(table.render_line(y).text, table.size.width)
        assert (cells["state"], cells["fails"], cells["error"]) == ("● OPEN", "5/5", "0.0%")
        assert (cells["ok"], cells["failed"], cells["attempts_failed"]) == ("5", "·", "5")


# --- the cards move like the table (issue 22 §5) ------------------------------------------------


@pytest.mark.asyncio
async def test_home_end_g_and_G_move_the_cards_selection_as_in_the_table() -> None:
    app, _ = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        assert board(app).query_one("#layouts").current == "cards"  # type: ignore[attr-defined]
        first, last = "compare_prices", "weather"
        for key, expected in [("end", last), ("home", first), ("G", last), ("g", first)]:
            await pilot.press(key)
            assert board(app).selected_tool == expected, key
            assert "▶" in text_of(app, card(app, expected))[0]
        await pilot.press("pagedown")
        assert board(app).selected_tool == last
        await pilot.press("pageup")
        assert board(app).selected_tool == first
        await pilot.press("question_mark")
        help_text = "\n".join(text_of(app, app.screen.query_one("#help")))
        assert "home g" in help_text and "end G" in help_text, help_text


# --- what README says of the figures ------------------------------------------------------------

README = (Path(__file__).parents[2] / "README.md").read_text()


def readme_figures() -> list[tuple[list[str], list[str]]]:
    """README's table of the board's figures: each row's names in the table and on a card."""
    table = README.split("**The board's figures.**")[1].split("\n\n")[1]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    return [(re.findall(r"`([^`]+)`", names), re.findall(r"`([^`]+)`", card)) for names, card in rows]


def test_readme_defines_every_column_the_board_table_shows() -> None:
    named = {name for names, _ in readme_figures() for name in names}
    assert named == {c.header for c in COLUMNS if c.header} - {"TOOL"}


@pytest.mark.asyncio
async def test_readme_defines_every_figure_a_card_shows() -> None:
    app, link = scripted()
    async with app.run_test(size=(160, 50)) as pilot:
        link.emit(*partial_results_that_open_the_breaker("weather", 5))
        app.flush()
        await pilot.pause()
        shown = "\n".join(text_of(app, card(app, "weather")))
        strategies = {c.header for c in COLUMNS if c.needs}  # on a tool that has one: test_board_strategies
        for columns, names in readme_figures():
            if not strategies & set(columns):
                assert all(name in shown for name in names), (names, shown)


def test_readme_says_which_columns_show_at_80_and_100_columns() -> None:
    said = re.search(r"At\s+80 columns it shows (.*?); at 100, (.*?) as well", README, re.S)
    assert said is not None
    at_80 = {c.header for c, _ in fit_columns(80) if c.header}
    at_100 = {c.header for c, _ in fit_columns(100) if c.header} - at_80

    def listed(text: str) -> set[str]:
        return set(re.split(r",\s*|\s+and\s+", " ".join(text.split())))

    assert listed(said[1]) == at_80
    assert listed(said[2]) == at_100
