"""``?``: every key of the view it was opened from, full screen, readable at 80×24.

Textual's help panel is a third of the screen (about three words a line at 80 columns) and
cannot be scrolled from the keyboard, so the keys a view adds can sit below the fold. This
screen lists the view's own keys first, then those of the list or panel that has the focus,
then the keys that work everywhere, then the keys that only move the cursor; descriptions
wrap under themselves. Arrows and page keys scroll it; ``esc``, ``?`` or ``q`` close it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import ActiveBinding, Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

_EVERY_SCREENS = frozenset(b.action for b in Screen.BINDINGS if isinstance(b, Binding))
"""Textual's own screen keys (focus next, copy): every view has them, they go last."""


@dataclass(frozen=True, slots=True)
class HelpEntry:
    keys: str
    description: str
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class HelpSection:
    title: str
    entries: tuple[HelpEntry, ...]


def help_sections(
    bindings: Iterable[ActiveBinding],
    *,
    view: DOMNode,
    app: DOMNode,
    view_title: str,
    key_display: Callable[[Binding], str],
) -> list[HelpSection]:
    """The keys in the order an operator looks for them: this view's, the focused widget's,
    everywhere's, then the keys that only move the cursor. One entry per action, all its keys."""
    groups: dict[str, dict[str, list[ActiveBinding]]] = {"view": {}, "widget": {}, "app": {}, "moving": {}}
    for active in bindings:
        binding = active.binding
        if binding.system:
            continue
        if binding.action in _EVERY_SCREENS:
            where = "moving"
        elif active.node is view:
            where = "view"
        elif active.node is app:
            where = "app"
        else:
            where = "widget" if binding.show or binding.action in ("select_cursor", "open") else "moving"
        groups[where].setdefault(binding.action, []).append(active)
    titles = {
        "view": f"{view_title}",
        "widget": "The list or panel in focus",
        "app": "Everywhere",
        "moving": "Moving around",
    }
    sections = []
    for where, by_action in groups.items():
        entries = [_entry(actives, key_display) for actives in by_action.values()]
        if entries:
            sections.append(HelpSection(titles[where], tuple(entries)))
    return sections


def _entry(actives: Sequence[ActiveBinding], key_display: Callable[[Binding], str]) -> HelpEntry:
    first = actives[0]
    keys = " ".join(dict.fromkeys(key_display(a.binding) for a in actives))
    description = first.binding.description or first.binding.action
    tooltip = first.tooltip or first.binding.tooltip
    if tooltip and tooltip != description:
        description = f"{description} — {tooltip}"
    return HelpEntry(keys, description, first.enabled)


def help_table(sections: Sequence[HelpSection]) -> Table:
    """Keys right-aligned in their column, descriptions wrapped in theirs (never under the keys)."""
    table = Table.grid(padding=(0, 2, 0, 0), expand=True)
    table.add_column(justify="right", no_wrap=True, style="bold")
    table.add_column(ratio=1)
    for n, section in enumerate(sections):
        if n:
            table.add_row("", "")
        table.add_row("", Text(section.title, style="bold underline"))
        for entry in section.entries:
            text = Text(entry.description)
            if not entry.enabled:
                text.append(" (not now)")
                text.stylize("dim")
            table.add_row(Text(entry.keys), text)
    return table


class HelpScreen(ModalScreen[None]):
    """The keys of the screen it was opened over (read when it opens: what applies there)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,f1,q", "close", "Close", tooltip="Back to the view"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen #help {
        width: 100%; max-width: 110; height: 100%; max-height: 100%;
        border: round $accent; border-title-color: $accent; border-subtitle-color: $foreground-muted;
        background: $surface; padding: 0 1;
    }
    """

    def __init__(self, sections: Sequence[HelpSection], title: str) -> None:
        super().__init__()
        self.sections = list(sections)
        self.help_title = title

    @classmethod
    def of(cls, screen: Screen[object]) -> HelpScreen:
        """The help for ``screen``: its keys as they stand now (what its focus and state allow)."""
        app = screen.app
        title = getattr(screen, "HELP_TITLE", None) or type(screen).__name__.removesuffix("Screen")
        sections = help_sections(
            screen.active_bindings.values(), view=screen, app=app, view_title=f"This view: {title}",
            key_display=app.get_key_display,
        )  # fmt: skip
        return cls(sections, title)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help") as scroll:
            scroll.border_title = f"Keys — {self.help_title}"
            scroll.border_subtitle = "↑ ↓ pgup pgdn scroll · esc ? q close"
            yield Static(help_table(self.sections), id="keys")

    def on_mount(self) -> None:
        self.query_one("#help", VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
