"""``ItemTable``: a live table whose cursor stays on its item while the rows change under it.

Views refill it with keyed rows as often as they like (``fill``); the cursor is put back on the
same item (:class:`~console.selection.ListCursor`), the viewport keeps that item where it was on
screen, and the rows that arrived on the newest side are counted for the view's "▲ 3 new" hint.
The operator moving the cursor (keys or mouse) ends following; ``follow`` starts it again.
One column may be *flexible*: it takes the width the others leave, so free text stays readable
at 80 columns. Nothing is cut without saying so: the columns always fit the table's width, and
when they cannot all be whole, the widest columns of text are cut to a common width (the
figures, times and words in plain strings stay whole), each cut cell ending in "…"; the full
text is one ``enter`` away.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from console.selection import ListCursor

Cell = str | Text
Row = tuple[str, Sequence[Cell]]
"""A row's key (what the cursor follows) and its cells."""
FLEX_MIN = 12
"""The flexible column is at least this wide while the others can give it room."""
CUT_MIN = 6
"""A column of text cut to fit keeps at least this many cells (or its label's width)."""


def hint(cursor: ListCursor[Any], *, short: bool = False) -> str:
    """What the view says about its list's cursor: following, or held with what arrived
    (``short``: for a section title in a narrow column)."""
    new = f"{cursor.glyph} {cursor.new_count} new · " if cursor.new_count else ""
    if short:
        return "● following" if cursor.following else f"{new}○ held"
    if cursor.following:
        return "● following newest · f holds"
    return f"{new}○ held on its row · f follows"


def unique_keys(keys: Sequence[str]) -> list[str]:
    """``keys`` made unique: a repeated key gets ``#2``, ``#3``… in order (items that look
    alike, like two transitions in the same millisecond, are still two rows)."""
    seen: dict[str, int] = {}
    out = []
    for key in keys:
        n = seen[key] = seen.get(key, 0) + 1
        out.append(key if n == 1 else f"{key}#{n}")
    return out


def one_line(cell: Cell, *, markup: bool = False) -> Text:
    """A cell on one line, cut with an ellipsis where its column ends (``markup``: a string
    cell is markup, as DataTable reads it)."""
    if isinstance(cell, Text):
        text = cell.copy()
    else:
        text = Text.from_markup(cell) if markup and "[" in cell else Text(cell)
    if "\n" in text.plain:
        text = Text(" ⏎ ").join(text.split("\n", allow_blank=True))
    text.no_wrap, text.overflow, text.end = True, "ellipsis", ""
    return text


class ItemTable(DataTable[Any]):
    """A DataTable of keyed items with a :class:`ListCursor`; ``enter`` opens the item."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open", tooltip="Open the selected row: its whole text"),
    ]
    DEFAULT_CSS = """
    /* The width it is given, never its content's: the flexible column fills it. A thin scrollbar:
       its room is kept for it (see _column_widths), one column is all it costs. */
    ItemTable { width: 1fr; scrollbar-size-vertical: 1; }
    """

    def __init__(
        self,
        *columns: str,
        flex: str | None = None,
        newest_first: bool = True,
        following: bool = True,
        show_header: bool = True,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(
            id=id, classes=classes, cursor_type="row", zebra_stripes=True, show_header=show_header
        )
        self.labels = columns
        self.flex = flex
        self.list_cursor: ListCursor[str] = ListCursor(newest_first=newest_first, following=following)
        self.items: list[Row] = []
        self._placing = False
        self._widths: tuple[int | None, ...] = ()

    # --- what is shown -----------------------------------------------------------------------

    @property
    def selected_key(self) -> str | None:
        return self.list_cursor.key

    def fill(self, rows: Sequence[Row], *, newest: str | None = None) -> None:
        """Show ``rows`` (display order); the cursor stays on its item, or rides ``newest``
        (default: the newest end) while following."""
        self._take_move()
        before = self.list_cursor.index
        top = self.scroll_y
        self.items = list(rows)
        index = self.list_cursor.place([key for key, _ in rows], newest=newest)
        widths = self._column_widths()
        with self._placing_cursor():
            self.clear(columns=widths != self._widths)
            if widths != self._widths:
                self._widths = widths
                for label, width in zip(self.labels, widths, strict=True):
                    self.add_column(label, width=width, key=label)
            flex = self.labels.index(self.flex) if self.flex in self.labels else None
            for key, cells in rows:
                self.add_row(*(one_line(c, markup=i != flex) for i, c in enumerate(cells)), key=key)
            if index is None:
                return
            # The item keeps its place on screen: rows that arrive above push the view, not it.
            shift = index - before if before is not None and not self.list_cursor.following else 0
            self.scroll_to(y=max(0, top + shift), animate=False, immediate=True, force=True)
            self.move_cursor(row=index, animate=False, scroll=True)

    def follow(self, on: bool) -> None:
        """Follow the newest row (``f``), or hold the cursor on its item."""
        self._take_move()
        self.list_cursor.follow(on)
        self.fill(self.items)

    def refit(self) -> None:
        """Lay the rows out again for the width there is now."""
        if self.items or self.labels:
            self.fill(self.items)

    def on_resize(self) -> None:
        # Another width: the columns fit it again. Narrower (a toast took rows, the terminal
        # shrank): the cursor's row stays in view.
        self.call_after_refresh(self.refit)

    # --- the operator's moves ----------------------------------------------------------------

    def watch_cursor_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        super().watch_cursor_coordinate(old, new)
        if not self._placing and new.row != self.list_cursor.index and new.row < len(self.items):
            self.list_cursor.moved(new.row)  # a key or a click, not a refill: follow the item from here

    def _take_move(self) -> None:
        """A move the watcher could not see (none expected): read it off the table."""
        index = self.list_cursor.index
        if index is not None and self.cursor_row != index and self.cursor_row < len(self.items):
            self.list_cursor.moved(self.cursor_row)

    @contextmanager
    def _placing_cursor(self) -> Iterator[None]:
        self._placing = True
        try:
            yield
        finally:
            self._placing = False

    # --- widths ------------------------------------------------------------------------------

    def _column_widths(self) -> tuple[int, ...]:
        """Widths that fit the table: see :func:`fit_widths`. Columns of text (``Text`` cells, as
        views give free text) may be cut; columns of plain strings (figures, times, names) stay
        whole unless nothing else is left to cut."""
        flex = self.labels.index(self.flex) if self.flex in self.labels else None
        content: list[int] = []
        floors: list[int] = []
        labels = [cell_len(label) for label in self.labels]
        for i, label in enumerate(labels):
            cells = [cells[i] for _, cells in self.items if i < len(cells)]
            width = max([label, *(_cell_len(c) for c in cells)])
            content.append(width)
            if i == flex:
                floors.append(label)
            elif any(isinstance(c, Text) for c in cells):
                floors.append(min(width, max(label, CUT_MIN)))
            else:
                floors.append(width)
        # Room for a vertical scrollbar is kept even while there is none: a row that appears
        # must not push the last column out of view.
        room = (self.size.width or self.app.size.width) - self.styles.scrollbar_size_vertical
        room -= 2 * self.cell_padding * len(labels)
        return tuple(fit_widths(content, floors, room, flex=flex, last_resort=labels))


def fit_widths(
    content: Sequence[int], floors: Sequence[int], room: int, *, flex: int | None = None,
    last_resort: Sequence[int] = (),
) -> list[int]:  # fmt: skip
    """Column widths that add up to at most ``room``.

    When every column fits as wide as its ``content`` (the ``flex`` one at least ``FLEX_MIN``
    wide), each is, and the ``flex`` one takes what is left. Otherwise the widest are cut to a
    common width, none below its floor (a column that must stay whole has its width as floor),
    and the ``flex`` one takes what that leaves; if even the floors do not fit, every column is
    cut down to ``last_resort`` (its label).
    """

    def level(cap: int, lows: Sequence[int]) -> list[int]:
        return [max(low, min(n, cap)) for n, low in zip(content, lows, strict=True)]

    widths = list(content)
    if flex is not None:
        widths[flex] = max(floors[flex], FLEX_MIN)
    for lows in (floors, last_resort or floors):
        if sum(widths) <= room:
            break
        low, high = 0, max(content, default=0)
        while low < high:  # the highest common width that fits
            mid = (low + high + 1) // 2
            low, high = (mid, high) if sum(level(mid, lows)) <= room else (low, mid - 1)
        widths = level(low, lows)
    if flex is not None:
        widths[flex] += max(0, room - sum(widths))
    return widths


def _cell_len(cell: Cell) -> int:
    """Cells it takes as the table shows it (a string cell is markup to DataTable)."""
    if isinstance(cell, Text):
        return cell.cell_len
    return Text.from_markup(cell).cell_len if "[" in cell else cell_len(cell)
