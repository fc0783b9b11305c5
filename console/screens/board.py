"""The board: every tool's breaker at a glance, as a table or as Hystrix-style cards."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.widgets import ContentSwitcher

from console.model import SEVERITY, BoardRow, Changes
from console.screens.base import FilterBar, FilteredScreen
from console.widgets.breaker_card import CARD_WIDTH, BreakerCard
from console.widgets.breaker_table import BreakerTable

RESORT_S = 2.0
"""A sort is re-applied at most this often, so rows do not jump on every update."""
CARDS_UP_TO = 16
"""Boards of up to this many tools start as cards; larger ones as the table."""


class SortKey(StrEnum):
    NAME = "name"
    STATE = "state"
    ERRORS = "error %"
    VOLUME = "volume"
    P99 = "p99"


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
        Binding("enter", "open", "Detail", tooltip="Open the selected tool's detail"),
    ]

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
            self.cards[tool_id].set_class(position == self.selected, "-selected")
        self.cards[self.order[self.selected]].scroll_visible(animate=False)

    def action_move(self, delta: int) -> None:
        self._select(self.selected + delta)

    def action_move_row(self, delta: int) -> None:
        self._select(self.selected + delta * self.columns)

    def action_open(self) -> None:
        if self.selected_tool is not None:
            self.post_message(BreakerTable.Opened(self.selected_tool))


class BoardScreen(FilteredScreen):
    """Every tool's breaker: state in colour and words, failures against the threshold, the
    half-open countdown, rolling counts, error %, rate, p50/p99 and a two-minute sparkline."""

    BINDINGS = [
        Binding("s", "sort", "Sort", tooltip="Cycle the sort: name, state, error %, volume, p99"),
        Binding("S", "reverse_sort", "Reverse", show=False),
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
    """

    def __init__(self) -> None:
        super().__init__()
        self.sort_key = SortKey.NAME
        self.reverse = False
        self.marked: set[str] = set()
        self._order: list[str] = []
        self._sorted_at = float("-inf")
        self._layout_chosen = False

    def compose_body(self) -> ComposeResult:
        with ContentSwitcher(initial="table", id="layouts"):
            yield BreakerTable(id="table")
            yield CardGrid()
        yield FilterBar("filter tools…")

    def on_mount(self) -> None:
        self.query_one(BreakerTable).focus()

    # --- following the model ---------------------------------------------------------------

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        model = self.console_app.model
        if not self._layout_chosen and model.tools:
            self._layout_chosen = True
            if len(model.tools) <= CARDS_UP_TO:
                self._switch("cards")
        rows = {r.tool_id: r for r in model.rows(now) if self._matches(r.tool_id)}
        if full or set(rows) != set(self._order) or now - self._sorted_at >= RESORT_S:
            self._order = [r.tool_id for r in sort_rows(list(rows.values()), self.sort_key, self.reverse)]
            self._sorted_at = now
        ordered = [rows[tool_id] for tool_id in self._order]
        keep = self.selected_tool
        marked = frozenset(self.marked)
        if self._layout == "table":
            self.query_one(BreakerTable).show(ordered, now, marked, keep)
        else:
            self.query_one(CardGrid).show(ordered, now, marked, keep)

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
        self.notify(f"sorted by {self.sort_key}", timeout=1.5)
        self.redraw()

    def action_reverse_sort(self) -> None:
        self.reverse = not self.reverse
        self.redraw()

    def _switch(self, layout: str) -> None:
        self.query_one(ContentSwitcher).current = layout
        self.focus_body()

    def action_layout(self) -> None:
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
