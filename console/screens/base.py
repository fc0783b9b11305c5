"""What every console view shares: the status bar and the way it follows the model."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

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
        self.redraw()

    def redraw(self) -> None:
        """Draw everything afresh as of now, and the status bar."""
        app = self.console_app
        self.show(Changes(), app.now, full=True)
        self.query_one(StatusBar).show(app.status_text())

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        """Redraw what ``changes`` touched (everything when ``full``), as of engine time ``now``."""

    def selected_tools(self) -> list[str]:
        """The tools an operator action applies to here (the marked ones, else the selected one)."""
        return []


class FilterBar(Input):
    """A view's ``/`` filter: docked at the bottom, shown only while in use."""

    DEFAULT_CSS = """
    FilterBar { dock: bottom; display: none; margin-bottom: 1; }
    FilterBar.-active { display: block; }
    """

    def __init__(self, placeholder: str) -> None:
        super().__init__(placeholder=placeholder, id="filter")


class FilteredScreen(ConsoleScreen):
    """A view with a :class:`FilterBar` (its ``compose_body`` yields one): ``/`` opens it, its text is
    ``filter_text``, every change redraws the view, ``enter`` keeps it and ``esc`` clears it."""

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""

    def focus_body(self) -> None:
        """Give the focus back to what the view shows."""

    def action_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.add_class("-active")
        bar.focus()

    def action_clear_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.value = ""
        bar.remove_class("-active")
        self.filter_text = ""
        self.redraw()
        self.focus_body()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.redraw()

    @on(Input.Submitted, "#filter")
    def _filter_kept(self) -> None:
        self.focus_body()
