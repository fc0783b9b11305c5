"""What the live lists, an opened turn, a row read in full and ``?`` look like at 80×24 and 160×50.

Built like ``test_snapshots.py``: the demo's real events on a frozen clock, and a small trace store
of the demo's pass. Review with ``pytest --snapshot-report``, accept with ``--snapshot-update``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from console.screens.help import HelpScreen
from tests.console.demo_feed import events_until, start_of
from tests.console.fakes import FakeLink
from tests.console.test_snapshots import MID_OUTAGE, demo_app, open_trace, settle, traces_app

SIZES = {"80x24": (80, 24), "160x50": (160, 50)}


@pytest.mark.parametrize("size", SIZES)
def test_dependencies_holding_a_turn_while_new_ones_arrive(snap_compare: Any, size: str) -> None:
    """The cursor held on a turn (down, down); two turns arrive above it and are counted."""
    app, feed = demo_app(start_of("ask-model") - 0.1)

    async def hold_then_more(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        await pilot.press("2", "down", "down")
        assert isinstance(app.link, FakeLink)
        app.link.emit(*(e for e in events_until(MID_OUTAGE) if e.t > start_of("ask-model") - 0.1))
        app.link.clock = MID_OUTAGE
        app.flush()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZES[size], run_before=hold_then_more)


@pytest.mark.parametrize("size", SIZES)
def test_traces_list(snap_compare: Any, tmp_path: Path, size: str) -> None:
    app = traces_app(tmp_path)

    async def browse(pilot: Pilot[Any]) -> None:
        await pilot.press("5")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=browse)


@pytest.mark.parametrize("size", SIZES)
def test_an_opened_turn(snap_compare: Any, tmp_path: Path, size: str) -> None:
    """Under 120 columns the panels stack and the timeline's text takes the width."""
    app = traces_app(tmp_path)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=open_trace(app, "demo/ask-model"))


@pytest.mark.parametrize("size", SIZES)
def test_a_transition_read_in_full(snap_compare: Any, size: str) -> None:
    """``enter`` on the state history's row: the reason the table cut, whole."""
    app, feed = demo_app(MID_OUTAGE)

    async def open_transition(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        app.open_tool("flight_search")
        await pilot.pause()
        app.flush()
        await pilot.pause()
        app.screen.query_one("#history", DataTable).focus()
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZES[size], run_before=open_transition)


@pytest.mark.parametrize("size", SIZES)
def test_help_of_the_board(snap_compare: Any, size: str) -> None:
    app, feed = demo_app(MID_OUTAGE)

    async def help_screen(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        app.push_screen(HelpScreen.of(app.screen))  # what ? opens (see the lists report for app.py)
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZES[size], run_before=help_screen)
