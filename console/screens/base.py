"""What every console view shares: the status bar and the way it follows the model."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from console.model import Changes

if TYPE_CHECKING:
    from console.app import ConsoleApp


Parts = Sequence[str | tuple[str, str]]
"""Text in runs, each plain or with a style that may name theme colours (``bold $error``)."""

_VARIABLE = re.compile(r"\$([a-z0-9-]+)")


def rich_text(parts: Parts, variables: Mapping[str, str]) -> Text:
    """``parts`` as Rich Text, theme colours resolved (for widgets that take Rich, like Tree)."""
    text = Text(no_wrap=True)
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        else:
            content, style = part
            text.append(content, _VARIABLE.sub(lambda m: variables.get(m.group(1), "default"), style))
    return text


class StatusBar(Static):
    """LIVE, PAUSED (with what is pending) or REPLAY; breaker totals; event rate; drops."""

    DEFAULT_CSS = """
    StatusBar {
        dock: top;
        height: 1;
        padding: 0 1;
        background: $panel;
        color: $foreground;
    }
    """

    def __init__(self) -> None:
        super().__init__(id="status", markup=False)
        self._shown: Content | None = None

    def show(self, content: Content) -> None:
        """Redraw only when the text changed; one line, so never a layout pass."""
        if content != self._shown:
            self._shown = content
            self.update(content, layout=False)


class ConsoleScreen(Screen[None]):
    """A view of the model. ``show`` is called on every flush while the screen is active,
    and once with ``full=True`` when it becomes active again (it did no work while hidden)."""

    BODY_ID = "body"

    @property
    def console_app(self) -> ConsoleApp:
        return cast("ConsoleApp", self.app)

    def compose(self) -> ComposeResult:
        yield StatusBar()
        yield from self.compose_body()
        yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_screen_resume(self) -> None:
        app = self.console_app
        self.query_one(StatusBar).show(app.status_text())
        self.show(Changes(), app.now, full=True)

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        """Redraw what ``changes`` touched (everything when ``full``), as of engine time ``now``."""

    def selected_tools(self) -> list[str]:
        """The tools an operator action applies to here (the marked ones, else the selected one)."""
        return []
