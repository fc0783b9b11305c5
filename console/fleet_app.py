"""The console over a fleet (``tripwire console --attach redis://…``): the console's app, in the
fleet's mode.

The same app as for one engine — flush loop, footer, help, the confirm dialog, the events view
(fed the fleet's events) — with the fleet's board where the engine's board was, and none of the
views that need one engine (dependencies, manifests, traces). Operator actions go to every
process of the fleet; their answers show in the fleet's views.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.content import Content
from textual.screen import Screen

from console.app import VIEWS, ConsoleApp
from console.fleet_source import FleetLink
from console.host import Action
from console.model.fleet import FleetFeed, worst_state
from console.screens.base import ConsoleScreen
from console.screens.confirm import ConfirmActionModal, Confirmed
from console.screens.fleet import FleetScreen, FleetToolScreen, fleet_status
from engine.fleet import FleetConfig
from engine.strategies.breaker.machine import BreakerState

FLEET_VIEWS = ("fleet", "events")
"""The views a fleet has: the engine's others (dependencies, manifests, traces) need one engine."""


class FleetConsoleApp(ConsoleApp):
    """The console on a fleet's :class:`~console.model.fleet.FleetFeed` (a ``FleetLink``)."""

    MODES: ClassVar[dict[str, type[Screen[None]]]] = {
        **ConsoleApp.MODES,
        "fleet": FleetScreen,
    }
    DEFAULT_MODE = "fleet"

    @property
    def feed(self) -> FleetFeed:
        return self.link  # type: ignore[return-value]  # a fleet app is only made on a fleet link

    def action_view(self, mode: str) -> None:
        super().action_view("fleet" if mode == "board" else mode)

    def open_tool(self, tool_id: str) -> None:
        if self.current_mode != "fleet":
            self.switch_mode("fleet")
        self.push_screen(FleetToolScreen(tool_id))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "view" and parameters and parameters[0] not in (*FLEET_VIEWS, "board"):
            return False
        if action == "act" and not self.link.read_only:
            screen = self.screen
            if isinstance(screen, ConsoleScreen) and screen.selected_tools():
                return True
            return None if isinstance(screen, FleetScreen) else False  # greyed until a tool is there
        return super().check_action(action, parameters)

    def status_text(self) -> Content:
        paused = f"❚❚ PAUSED · {self.pending_while_paused:,} new events" if self.paused else None
        return fleet_status(self.feed.fleet_snapshot(), paused=paused, read_only=self.link.read_only)

    def confirm_action(self, action: Action, tools: list[str]) -> None:
        """Ask, naming how many processes each tool reaches and the worst state one sees it in."""
        if self.link.read_only or not tools:
            return
        view = self.feed.fleet_snapshot().view
        states: dict[str, BreakerState] = {}
        for tool_id in tools:
            tool = view.tools.get(tool_id) if view is not None else None
            worst = worst_state(tool.states) if tool is not None else "CLOSED"
            processes = tool.processes if tool is not None else 0
            label = f"{tool_id}, fleet-wide ({processes} process{'' if processes == 1 else 'es'})"
            states[label] = BreakerState(worst) if worst in BreakerState.__members__ else BreakerState.CLOSED

        def confirmed(answer: Confirmed | None) -> None:
            if answer is not None:
                self._carry_out(action, tools, answer.reason)

        self.push_screen(ConfirmActionModal(action, states), confirmed)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from App.get_system_commands(self, screen)
        for mode in FLEET_VIEWS:
            title = "Fleet" if mode == "fleet" else VIEWS[mode]
            yield SystemCommand(
                f"Go to {title}", f"The {title.lower()} view", lambda m=mode: self.switch_mode(m)
            )
        view = self.feed.fleet_snapshot().view
        for tool_id in sorted(view.tools) if view is not None else []:
            yield SystemCommand(
                f"Open {tool_id}", "Its processes", lambda t=tool_id: self.open_tool(t), discover=False
            )
            if not self.link.read_only:
                actions: tuple[Action, ...] = ("trip", "reset", "disable")
                for action in actions:
                    yield SystemCommand(
                        f"{action.capitalize()} {tool_id}", f"{action.capitalize()} it in every process",
                        lambda a=action, t=tool_id: self.confirm_action(a, [t]), discover=False,
                    )  # fmt: skip


def build_fleet_app(config: FleetConfig, *, read_only: bool = False, refresh_hz: float = 10.0) -> ConsoleApp:
    """The console on the fleet at ``config``; nothing reads Redis before the app runs."""
    link = FleetLink(config, read_only=read_only)
    return FleetConsoleApp(link, refresh_hz=refresh_hz, freeze_gc=True)


__all__ = ["FLEET_VIEWS", "FleetConsoleApp", "build_fleet_app"]
