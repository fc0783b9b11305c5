"""The confirm dialog and a STALE board at 80×24 and 160×50 (issue 13), as SVG snapshots.

The demo's real engine events, cut mid-outage on a frozen clock (as in ``test_snapshots.py``).
The dialog is the trip of the selected tool, its rule written in it; the STALE board is the same
moment with an engine that has said nothing for 12 s: greyed, the status bar saying so. Review
changes with ``pytest --snapshot-report`` and accept them with ``--snapshot-update``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from textual.pilot import Pilot

from console.app import ConsoleApp
from console.screens.base import ConsoleScreen
from tests.console.demo_feed import events_until, live_demo, mid_outage
from tests.console.fakes import FakeLink

SMALL = (80, 24)
LARGE = (160, 50)
Feed = Callable[[Pilot[Any]], Awaitable[None]]


@dataclass
class SilentLink(FakeLink):
    """The demo's link, with an engine that has said nothing for ``stale_for`` seconds."""

    stale_for: float | None = None


def demo_app(*, stale_for: float | None = None) -> tuple[ConsoleApp, Feed]:
    seeds, _ = live_demo()
    at = mid_outage()
    link = SilentLink(seeds, clock=at, description="attached to traces.db", stale_for=stale_for)
    app = ConsoleApp(link, actor="operator:test", live=False)

    async def feed(pilot: Pilot[Any]) -> None:
        link.emit(*events_until(at))
        app.flush()
        screen = app.screen
        assert isinstance(screen, ConsoleScreen)
        screen.redraw()
        await pilot.pause()
        app.flush()
        await pilot.pause()

    return app, feed


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x50"])
def test_confirm_trip(snap_compare: Any, size: tuple[int, int]) -> None:
    app, feed = demo_app()
    assert snap_compare(app, press=["t"], terminal_size=size, run_before=feed)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x50"])
def test_stale_board(snap_compare: Any, size: tuple[int, int]) -> None:
    app, feed = demo_app(stale_for=12.0)
    assert snap_compare(app, terminal_size=size, run_before=feed)
