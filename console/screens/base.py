"""What every console view shares: the status bar and the way it follows the model."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from rich.cells import cell_len
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Input, Static
from textual.widgets._footer import FooterKey

from console.model import Changes, ConsoleModel
from console.player import Player
from engine.liveness import duration


class ScreenHost(Protocol):
    """What the views use of the app they run in (:class:`console.app.ConsoleApp`), typed here
    so that the views, which the app imports, need not import it back."""

    @property
    def model(self) -> ConsoleModel:
        """The model the views show: the replay's while one is shown, else the live one."""

    @property
    def now(self) -> float:
        """Engine time as the views show it."""

    @property
    def replay(self) -> Player | None: ...

    @property
    def traces(self) -> Path | None: ...

    def status_text(self) -> Content: ...

    def open_tool(self, tool_id: str) -> None: ...

    def start_replay(
        self, *, turn_id: str | None = None, since: float | None = None, until: float | None = None
    ) -> None: ...


def stale_text(silence: float, status: str = "stale") -> str:
    """The status bar's word for an engine not heard from for ``silence`` seconds: ``STALE`` (no
    heartbeat), ``GONE`` (its process ended without closing the store) or ``STOPPED`` (it closed
    it), as :mod:`engine.liveness` judges it."""
    if silence == float("inf"):
        return "STALE — no word from the engine yet"
    ago = duration(silence)
    if status == "gone":
        return f"GONE — the engine's process ended; last heartbeat {ago} ago"
    if status == "stopped":
        return f"STOPPED — the engine closed the store {ago} ago"
    return f"STALE — no word from the engine for {ago}"


class StatusBar(Static):
    """LIVE, PAUSED (with what is pending) or REPLAY; breaker totals; event rate; drops."""

    DEFAULT_CSS = """
    StatusBar {
        dock: top;
        height: 1;
        padding: 0 1;
        background: $panel;
        color: $foreground;
        text-wrap: nowrap;
        text-overflow: ellipsis;  /* what does not fit ends in …, never cut without a mark */
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


FIRST_IN_FOOTER = ("help", "quit", "trip", "reset", "disable", "replay.stop", "replay.toggle")
"""Binding ids the footer shows first, in this order; the other keys follow in the order of their
bindings (the focused widget's, the view's, the app's) as long as they fit."""


@dataclass(frozen=True, slots=True)
class FooterKeySpec:
    key: str
    display: str
    action: str
    enabled: bool
    tooltip: str


@dataclass(frozen=True, slots=True)
class FooterEntry:
    """One item of the footer: a key and what it does, or a group of keys under one word."""

    keys: tuple[FooterKeySpec, ...]
    description: str
    rank: int

    @property
    def width(self) -> int:
        """Columns it takes, without the space after it."""
        keys = sum(cell_len(k.display) for k in self.keys) + len(self.keys) - 1
        return keys + (1 + cell_len(self.description) if self.description else 0)


def footer_entries(
    bindings: Iterable[tuple[Binding, bool, str]], display: Callable[[Binding], str]
) -> list[FooterEntry]:
    """The footer's items, as Textual's footer makes them: one per action (its first key), the
    neighbouring actions of one binding group together under the group's word."""
    by_action: dict[str, tuple[Binding, bool, str]] = {}
    for binding, enabled, tooltip in bindings:
        by_action.setdefault(binding.action, (binding, enabled, tooltip))
    entries: list[FooterEntry] = []
    run: list[tuple[Binding, bool, str]] = []

    def close_run() -> None:
        if not run:
            return
        group = run[0][0].group
        if group is not None and len(run) > 1:
            keys = tuple(FooterKeySpec(b.key, display(b), b.action, e, t or b.description) for b, e, t in run)
            entries.append(FooterEntry(keys, group.description, _rank(run[0][0])))
        else:
            for b, e, t in run:
                entries.append(FooterEntry((FooterKeySpec(b.key, display(b), b.action, e, t),), b.description,
                                           _rank(b)))  # fmt: skip
        run.clear()

    for item in by_action.values():
        if run and (item[0].group is None or item[0].group != run[0][0].group):
            close_run()
        run.append(item)
    close_run()
    return entries


def _rank(binding: Binding) -> int:
    return FIRST_IN_FOOTER.index(binding.id) if binding.id in FIRST_IN_FOOTER else len(FIRST_IN_FOOTER)


def fit_footer(entries: Sequence[FooterEntry], width: int) -> list[FooterEntry]:
    """The entries a footer ``width`` columns wide shows: the first ones by rank (stable), each
    followed by a space, as many as fit whole; the rest are in ``?`` and the command palette."""
    shown: list[FooterEntry] = []
    used = 0
    for entry in sorted(entries, key=lambda e: e.rank):
        if used + entry.width + 1 <= width:
            shown.append(entry)
            used += entry.width + 1
    return shown


class ConsoleFooter(Footer):
    """Textual's footer, with the essential keys first and only what fits whole: never a key cut
    in two, never a stray character under the palette key."""

    DEFAULT_CSS = """
    ConsoleFooter.-compact FooterKey.-command-palette { margin: 0; }
    """

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._composed_width = 0

    def _width(self) -> int:
        return self.size.width or self.app.size.width

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        self._composed_width = width = self._width()
        active = self.screen.active_bindings
        shown = [(b, enabled, tip) for (_, b, enabled, tip) in active.values() if b.show]
        palette = None
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        if palette is not None:
            _, binding, enabled, _ = palette
            display = self.app.get_key_display(binding)
            width -= 1 + cell_len(display) + 1 + cell_len(binding.description)  # its border, key, text
        for entry in fit_footer(footer_entries(shown, self.app.get_key_display), width):
            last = len(entry.keys) - 1
            for index, key in enumerate(entry.keys):
                yield FooterKey(
                    key.key, key.display, entry.description if index == last else "", key.action,
                    disabled=not key.enabled, tooltip=key.tooltip,
                ).data_bind(compact=Footer.compact)  # fmt: skip
        if palette is not None:
            yield FooterKey(
                binding.key, display, binding.description, binding.action, classes="-command-palette",
                disabled=not enabled, tooltip=binding.tooltip or binding.description,
            )  # fmt: skip

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready and event.size.width != self._composed_width:
            self.call_after_refresh(self.recompose)


class ConsoleScreen(Screen[None]):
    """A view of the model. ``show`` is called on every flush while the screen is active,
    and once with ``full=True`` when it becomes active again (it did no work while hidden).

    A widget of class ``fit`` keeps each line on one line: what does not fit ends in ``…``."""

    DEFAULT_CSS = """
    ConsoleScreen .fit { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    @property
    def console_app(self) -> ScreenHost:
        return cast(ScreenHost, self.app)

    def compose(self) -> ComposeResult:
        yield StatusBar()
        yield from self.compose_body()
        yield ConsoleFooter()

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
