"""The board and the tool detail at 80×24 and 160×50 (issue 13), as SVG snapshots.

The demo's real engine events, cut mid-outage on a frozen clock (as in ``test_snapshots.py``):
flight_search is OPEN and half-opens in 5 s; a CLOSED card is selected. The overdue snapshots
freeze the clock past that moment without the transition: an engine that went quiet. Review
changes with ``pytest --snapshot-report`` and accept them with ``--snapshot-update``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from console.app import ConsoleApp
from console.screens.board import BoardScreen
from tests.console.demo_feed import events_until, live_demo, mid_outage
from tests.console.fakes import FakeLink

SMALL = (80, 24)
LARGE = (160, 50)
Feed = Callable[[Pilot[Any]], Awaitable[None]]


def demo_app(*, late_by: float = 0.0, open_tool: str | None = None) -> tuple[ConsoleApp, Feed]:
    """The console on the demo mid-outage; its clock ``late_by`` seconds later, with no new event."""
    seeds, _ = live_demo()
    at = mid_outage()
    link = FakeLink(seeds, clock=at + late_by, description="travel agent, live · manifests/")
    app = ConsoleApp(link, actor="operator:test", live=False)

    async def feed(pilot: Pilot[Any]) -> None:
        link.emit(*events_until(at))
        app.flush()
        board = app.screen
        assert isinstance(board, BoardScreen)
        board.redraw()  # sorted as of now, as it would be RESORT_S later: the OPEN breaker first
        await pilot.pause()
        if open_tool is not None:
            app.open_tool(open_tool)
            await pilot.pause()
            app.flush()

    return app, feed


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x50"])
def test_board_cards(snap_compare: Any, size: tuple[int, int]) -> None:
    """Cards: the OPEN one first, the selected one with ``▶`` on a reversed title. At 80
    columns the board starts as the table: ``v`` is the operator's choice of cards."""
    app, feed = demo_app()
    assert snap_compare(app, press=["v"] if size == SMALL else [], terminal_size=size, run_before=feed)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x50"])
def test_board_table(snap_compare: Any, size: tuple[int, int]) -> None:
    """The table: columns by priority, the cursor a ``▶``; the sort on its own line."""
    app, feed = demo_app()
    assert snap_compare(app, press=["v"] if size == LARGE else [], terminal_size=size, run_before=feed)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x50"])
def test_tool_detail(snap_compare: Any, size: tuple[int, int]) -> None:
    app, feed = demo_app(open_tool="flight_search")
    assert snap_compare(app, terminal_size=size, run_before=feed)


def test_overdue_half_open_table(snap_compare: Any) -> None:
    """Ten seconds on, no event: ``due 5s ago``, never ``now``."""
    app, feed = demo_app(late_by=10.0)
    assert snap_compare(app, terminal_size=SMALL, run_before=feed)


def test_overdue_half_open_cards(snap_compare: Any) -> None:
    app, feed = demo_app(late_by=10.0)
    assert snap_compare(app, terminal_size=LARGE, run_before=feed)


def test_board_cards_without_colour(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``NO_COLOR``: the selection and the states still read, in glyphs, words and reverse video."""
    monkeypatch.setenv("NO_COLOR", "1")
    app, feed = demo_app()
    assert app.no_color
    assert snap_compare(app, terminal_size=LARGE, run_before=feed)
