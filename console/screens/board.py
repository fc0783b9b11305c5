"""The board: every tool's breaker at a glance, as a table or as Hystrix-style cards."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.content import Content
from textual.widgets import ContentSwitcher, Static

from console.model import SEVERITY, BoardRow, Changes
from console.screens.base import FilterBar, FilteredScreen
from console.widgets.breaker_card import CARD_WIDTH, BreakerCard
from console.widgets.breaker_table import BreakerTable

RESORT_S = 2.0
"""A sort is re-applied at most this often, so rows do not jump on every update."""
CARDS_UP_TO = 16
"""Boards of up to this many tools start as cards; larger ones as the table."""
CARDS_FROM_WIDTH = 100
"""Narrower screens start as the table: cards would stack one per row, four to a screen."""


def default_layout(width: int, tools: int) -> str:
    """The layout a board starts in, until the operator picks one with ``v``: cards for a few
    tools on a wide screen, else the table (one line per tool, the unhealthy ones first)."""
    return "cards" if width >= CARDS_FROM_WIDTH and tools <= CARDS_UP_TO else "table"


class SortKey(StrEnum):
    """The board's sorts, in the order ``s`` cycles through them."""

    STATE = "state"
    ERRORS = "error %"
    VOLUME = "volume"
    P99 = "p99"
    NAME = "name"


DEFAULT_SORT = SortKey.STATE
"""FORCED_OPEN, OPEN, HALF_OPEN first, at any width: what needs an operator is on top."""

_DIRECTION: dict[SortKey, tuple[str, str]] = {
    SortKey.NAME: ("A→Z", "Z→A"),
    SortKey.STATE: ("worst first", "healthiest first"),
    SortKey.ERRORS: ("highest first", "lowest first"),
    SortKey.VOLUME: ("busiest first", "quietest first"),
    SortKey.P99: ("slowest first", "fastest first"),
}


def sort_label(key: SortKey, reverse: bool) -> str:
    """The board's sort in words: ``error % ↓ highest first``; reversed, ``↑ lowest first``."""
    return f"{key} {'↑' if reverse else '↓'} {_DIRECTION[key][reverse]}"


_SORTS: dict[SortKey, Callable[[BoardRow], tuple[float | str, ...]]] = {
    SortKey.NAME: lambda r: (r.tool_id,),
    SortKey.STATE: lambda r: (SEVERITY[r.state], -r.consecutive_failures, r.tool_id),
    SortKey.ERRORS: lambda r: (-(r.error_percent or 0.0), -r.rate, r.tool_id),
    SortKey.VOLUME: lambda r: (-r.rate, r.tool_id),
    SortKey.P99: lambda r: (-(r.p99_ms or 0.0), r.tool_id),
}


def sort_rows(rows: list[BoardRow], key: SortKey, reverse: bool = False) -> list[BoardRow]:
    """The board's order: a key, most interesting first; ``reverse`` flips it."""
    return sorted(rows, key=_SORTS[key], reverse=reverse)


class CardGrid(Container, can_focus=True):
    """Cards in a grid as wide as the screen allows; arrows move the selection."""

    DEFAULT_CSS = """
    CardGrid {
        layout: grid;
        grid-size: 3;
        grid-gutter: 0 1;
        grid-columns: 38;
        grid-rows: 5;
        height: 1fr;
        overflow-y: auto;
        padding: 0 1;
    }
    """
    BINDINGS = [
        Binding("left,h", "move(-1)", "Left", show=False),
        Binding("right,l", "move(1)", "Right", show=False),
        Binding("up,k", "move_row(-1)", "Up", show=False),
        Binding("down,j", "move_row(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "First", show=False),
        Binding("end,G", "jump(-1)", "Last", show=False),
        Binding("enter", "open", "Detail", tooltip="Open the selected tool's detail"),
    ]
    """The table's keys, as far as a grid has them: the same habits (k9s, htop) in both layouts."""

    def __init__(self) -> None:
        super().__init__(id="cards")
        self.cards: dict[str, BreakerCard] = {}
        self.order: list[str] = []
        self.selected = 0

    @property
    def columns(self) -> int:
        return max(1, (self.size.width - 2) // (CARD_WIDTH + 1))

    def on_resize(self) -> None:
        self.styles.grid_size_columns = self.columns

    def show(self, rows: list[BoardRow], now: float, marked: frozenset[str], keep: str | None) -> None:
        ids = [r.tool_id for r in rows]
        if set(ids) != set(self.order):  # tools came, went or were filtered: new cards
            self.remove_children()
            self.cards = {tool_id: BreakerCard(tool_id) for tool_id in ids}
            self.mount_all(self.cards.values())
        elif ids != self.order:  # re-sorted: move the cards, keep them
            for index, tool_id in enumerate(ids):
                self.move_child(self.cards[tool_id], before=index)
        self.order = ids
        if keep in ids:
            self.selected = ids.index(keep)
        self.selected = max(0, min(self.selected, len(ids) - 1))
        for index, row in enumerate(rows):
            self.cards[row.tool_id].show(
                row, now, selected=index == self.selected, marked=row.tool_id in marked
            )

    @property
    def selected_tool(self) -> str | None:
        return self.order[self.selected] if self.order else None

    def _select(self, index: int) -> None:
        if not self.order:
            return
        self.selected = max(0, min(index, len(self.order) - 1))
        for position, tool_id in enumerate(self.order):
            card = self.cards[tool_id]
            card.select(selected=position == self.selected, marked=card.marked)
        self.cards[self.order[self.selected]].scroll_visible(animate=False)

    @on(BreakerCard.Clicked)
    def _clicked(self, event: BreakerCard.Clicked) -> None:
        """A click selects the card, a double click opens it (as ``enter`` does)."""
        event.stop()
        if event.tool_id in self.order:
            self._select(self.order.index(event.tool_id))
            if event.chain > 1:
                self.action_open()

    def action_move(self, delta: int) -> None:
        self._select(self.selected + delta)

    def action_move_row(self, delta: int) -> None:
        self._select(self.selected + delta * self.columns)

    def action_page(self, direction: int) -> None:
        rows = max(1, self.size.height // 5)  # whole cards (grid-rows: 5) a screen holds
        self._select(self.selected + direction * rows * self.columns)

    def action_jump(self, index: int) -> None:
        if self.order:
            self._select(index % len(self.order))

    def action_open(self) -> None:
        if self.selected_tool is not None:
            self.post_message(BreakerTable.Opened(self.selected_tool))


class BoardScreen(FilteredScreen):
    """Every tool's breaker: state in colour and words, failures against the threshold, the
    half-open countdown, rolling counts, error %, rate, p50/p99 and a two-minute sparkline."""

    BINDINGS = [
        Binding("s", "sort", "Sort", tooltip="Cycle the sort: state, error %, volume, p99, name"),
        Binding("S", "reverse_sort", "Reverse sort", show=False, tooltip="Reverse the sort's direction"),
        Binding("v", "layout", "Layout", tooltip="Switch between cards and the wide table"),
        Binding(
            "space",
            "mark",
            "Mark",
            tooltip="Mark or unmark the selected tool for a bulk action",
            key_display="␣",
        ),
        Binding("slash", "filter", "Filter", tooltip="Show only tools whose name contains the text"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    DEFAULT_CSS = """
    BoardScreen #layouts { height: 1fr; }
    BoardScreen #sort-line { height: 1; padding: 0 1; color: $foreground-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.sort_key = DEFAULT_SORT
        self.reverse = False
        self.marked: set[str] = set()
        self._order: list[str] = []
        self._sorted_at = float("-inf")
        self._layout_by_operator = False
        """Set by ``v``: from then on the operator's layout stays, whatever the width."""
        self._sort_shown: tuple[SortKey, bool, int] | None = None
        self._carried: str | None = None
        """The tool selected before a switch of layout, for the next draw to select again."""

    def compose_body(self) -> ComposeResult:
        yield Static(id="sort-line", classes="fit", markup=False)
        with ContentSwitcher(initial="table", id="layouts"):
            yield BreakerTable(id="table")
            yield CardGrid()
        yield FilterBar("filter tools…")

    def on_mount(self) -> None:
        self.query_one(BreakerTable).focus()

    # --- following the model ---------------------------------------------------------------

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        model = self.console_app.model
        if not self._layout_by_operator and model.tools:
            layout = default_layout(self.app.size.width, len(model.tools))
            if layout != self._layout:
                self._switch(layout, focus=self.focused is None or self.focused.id in ("table", "cards"))
        self._show_sort_line()
        rows = {r.tool_id: r for r in model.rows(now) if self._matches(r.tool_id)}
        if full or set(rows) != set(self._order) or now - self._sorted_at >= RESORT_S:
            self._order = [r.tool_id for r in sort_rows(list(rows.values()), self.sort_key, self.reverse)]
            self._sorted_at = now
        ordered = [rows[tool_id] for tool_id in self._order]
        keep, self._carried = self._carried or self.selected_tool, None
        marked = frozenset(self.marked)
        if self._layout == "table":
            self.query_one(BreakerTable).show(ordered, now, marked, keep)
        else:
            self.query_one(CardGrid).show(ordered, now, marked, keep)

    def on_resize(self, event: events.Resize) -> None:
        if not self._layout_by_operator:
            self.redraw()  # the width may call for the other layout

    def _show_sort_line(self) -> None:
        """``sort: error % ↓ highest first · s next · S reverse``, redrawn only when it changes."""
        shown = (self.sort_key, self.reverse, len(self.marked))
        if shown == self._sort_shown:
            return
        self._sort_shown = shown
        marked = f" · {len(self.marked)} marked (esc clears)" if self.marked else ""
        label = (sort_label(self.sort_key, self.reverse), "bold $foreground")
        line = Content.assemble("sort: ", label, "  ·  s next · S reverse", marked)
        self.query_one("#sort-line", Static).update(line, layout=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # During a replay space plays and pauses it, and there is nothing to act on.
        return not (action == "mark" and self.console_app.replay is not None)

    def _matches(self, tool_id: str) -> bool:
        return not self.filter_text or self.filter_text.casefold() in tool_id.casefold()

    @property
    def _layout(self) -> str:
        return self.query_one(ContentSwitcher).current or "table"

    @property
    def selected_tool(self) -> str | None:
        if self._layout == "table":
            return self.query_one(BreakerTable).selected
        return self.query_one(CardGrid).selected_tool

    def selected_tools(self) -> list[str]:
        if self.marked:
            return sorted(self.marked)
        return [self.selected_tool] if self.selected_tool is not None else []

    def focus_body(self) -> None:
        self.query_one(BreakerTable if self._layout == "table" else CardGrid).focus()

    # --- actions ---------------------------------------------------------------------------

    def action_sort(self) -> None:
        keys = list(SortKey)
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.redraw()  # the sort line says what it is now: no toast over the board

    def action_reverse_sort(self) -> None:
        self.reverse = not self.reverse
        self.redraw()

    def _switch(self, layout: str, *, focus: bool = True) -> None:
        self._carried = self._carried or self.selected_tool  # the other layout selects the same tool
        self.query_one(ContentSwitcher).current = layout
        if focus:
            self.focus_body()

    def action_layout(self) -> None:
        self._layout_by_operator = True
        self._switch("cards" if self._layout == "table" else "table")
        self.redraw()

    def action_mark(self) -> None:
        tool_id = self.selected_tool
        if tool_id is not None:
            self.marked.symmetric_difference_update({tool_id})
            self.redraw()
            self.refresh_bindings()

    def action_clear_filter(self) -> None:
        if self.query_one(FilterBar).has_class("-active") or self.filter_text:
            super().action_clear_filter()
        elif self.marked:
            self.marked.clear()
            self.redraw()

    @on(BreakerTable.Opened)
    def _open(self, event: BreakerTable.Opened) -> None:
        self.console_app.open_tool(event.tool_id)
