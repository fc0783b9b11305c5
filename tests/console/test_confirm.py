"""The confirm dialog of an operator action: its keys do what it says, from the moment it opens.

The report: focus started in the reason field, so ``y`` typed "y" there, and after ``tab`` the
next ``y`` reset the breaker with the reason "y". Now ``y``/``enter`` act and ``n``/``esc``
cancel at once, and a reason is typed only after ``tab`` has moved into its field.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from console.app import ConsoleApp
from console.model import ToolSeed
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmActionModal, keys_hint
from engine.strategies.breaker.machine import BreakerState
from tests.console.fakes import FakeLink, manifest

pytestmark = pytest.mark.asyncio

SIZE = (120, 30)
ACTOR = "operator:test"


def board_app() -> tuple[ConsoleApp, FakeLink]:
    seeds = [
        ToolSeed("flight_search", BreakerState.FORCED_OPEN, 5, manifest=manifest("flight_search")),
        ToolSeed("hotel_search", manifest=manifest("hotel_search")),
    ]
    link = FakeLink(seeds)
    return ConsoleApp(link, actor=ACTOR), link


async def until(pilot: Pilot[None], condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """The action runs on a worker thread: wait for it, boundedly."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.01)


async def open_dialog(pilot: Pilot[None], key: str) -> tuple[str, ConfirmActionModal]:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    await until(pilot, lambda: isinstance(app.screen, ConsoleScreen) and bool(app.screen.selected_tools()))
    screen = app.screen
    assert isinstance(screen, ConsoleScreen)
    (tool,) = screen.selected_tools()
    await pilot.press(key)
    await pilot.pause()
    assert isinstance(app.screen, ConfirmActionModal)
    return tool, app.screen


async def test_y_resets_at_once_and_never_becomes_the_reason() -> None:
    """The keys of the report: r, y, tab, y. The first y resets, with no reason."""
    app, link = board_app()
    async with app.run_test(size=SIZE) as pilot:
        tool, dialog = await open_dialog(pilot, "r")
        await pilot.press("y")
        await pilot.pause()
        await pilot.press("tab", "y")
        await until(pilot, lambda: bool(link.actions))
        await pilot.pause()
        assert link.actions == [("reset", tool, ACTOR, "")], "one reset, and 'y' is no reason"
        assert not isinstance(app.screen, ConfirmActionModal)
        assert dialog.focused is None, "nothing took the keys the dialog names"


@pytest.mark.parametrize("key", ["n", "escape"])
async def test_n_and_esc_cancel_at_once(key: str) -> None:
    app, link = board_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_dialog(pilot, "t")
        await pilot.press(key)
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmActionModal)
        assert link.actions == []


async def test_enter_confirms_at_once_too() -> None:
    app, link = board_app()
    async with app.run_test(size=SIZE) as pilot:
        tool, _ = await open_dialog(pilot, "t")
        await pilot.press("enter")
        await until(pilot, lambda: bool(link.actions))
        assert link.actions == [("trip", tool, ACTOR, "")]


async def test_a_reason_is_typed_after_tab_and_may_hold_y_and_n() -> None:
    app, link = board_app()
    async with app.run_test(size=SIZE) as pilot:
        tool, dialog = await open_dialog(pilot, "t")
        await pilot.press("tab")
        assert dialog.focused is dialog.query_one("#reason", Input)
        await pilot.press(*"yes, vendor down", "enter")
        await until(pilot, lambda: bool(link.actions))
        assert link.actions == [("trip", tool, ACTOR, "yes, vendor down")]


async def test_esc_in_the_reason_field_cancels() -> None:
    app, link = board_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_dialog(pilot, "d")
        await pilot.press("tab", *"no", "escape")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmActionModal)
        assert link.actions == []


async def test_the_dialog_writes_its_rule() -> None:
    app, _ = board_app()
    async with app.run_test(size=SIZE) as pilot:
        _, dialog = await open_dialog(pilot, "t")
        rule = dialog.query_one("#keys", Static).render()
        assert str(rule) == keys_hint("trip") == "y trip · n/esc cancel · tab: add a reason, then enter"
        buttons = [str(b.label) for b in dialog.query(Button)]
        assert buttons == ["Cancel (n)", "Trip (y)"]
