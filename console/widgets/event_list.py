"""``EventList``: the event stream as lines with a cursor that stays on its event.

A log with a row cursor, drawn line by line (only the lines on screen are made, and they are
cached), bounded to ``max_lines``. Following, the cursor rides the newest event at the bottom;
once the operator moves it, it stays on its event while new ones arrive below (counted for the
view's "▼ 12 new" hint) and old ones fall off the top. ``enter`` (or a click on the cursor's
line) asks the view to open the event in full.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.model import EventRow
from console.selection import ListCursor

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "success": "green", "info": ""}


@dataclass(frozen=True, slots=True)
class Skipped:
    """A line standing for events not shown (more arrived in one flush than anyone reads)."""

    key: int
    count: int


Line = EventRow | Skipped


def line_key(line: Line) -> int:
    """What the cursor follows: the event's sequence number (a gap line: below every event)."""
    return line.seq if isinstance(line, EventRow) else line.key


def event_text(line: Line) -> Text:
    if isinstance(line, Skipped):
        return Text(f"… {line.count:,} events not shown (p pauses, / filters)", style="dim italic")
    stamp = datetime.fromtimestamp(line.at).strftime("%H:%M:%S.%f")[:-3]
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    text.append(f"{stamp} ", style="dim")
    text.append(f"{line.event_type:<20} ", style=SEVERITY_STYLE[line.severity] or "bold")
    text.append(" ⏎ ".join(line.text.splitlines()), style=SEVERITY_STYLE[line.severity])
    return text


class EventList(ScrollView, can_focus=True):
    """Events oldest first; the cursor follows the newest (``f``) or stays on its event."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "Oldest", show=False),
        Binding("end,G", "jump(-1)", "Newest", show=False),
        Binding("enter", "open", "Open", tooltip="Open the selected event: every field, whole"),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {"event-list--cursor"}
    DEFAULT_CSS = """
    EventList { height: 1fr; background: $surface; overflow-x: hidden; }
    EventList > .event-list--cursor {
        background: $block-cursor-blurred-background;
        color: $block-cursor-blurred-foreground;
        text-style: $block-cursor-blurred-text-style;
    }
    EventList:focus > .event-list--cursor {
        background: $block-cursor-background;
        color: $block-cursor-foreground;
        text-style: $block-cursor-text-style;
    }
    """

    class Opened(Message):
        """``enter`` on an event."""

        def __init__(self, row: EventRow) -> None:
            super().__init__()
            self.row = row

    class Moved(Message):
        """The cursor moved or following changed: the view's hint may read differently."""

    def __init__(self, *, max_lines: int, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.lines: list[Line] = []
        self.list_cursor: ListCursor[int] = ListCursor(newest_first=False, following=True)
        self._cache: LRUCache[tuple[int, int, bool, bool], Strip] = LRUCache(256)

    # --- content -----------------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.lines)

    @property
    def selected(self) -> Line | None:
        index = self.list_cursor.index
        return self.lines[index] if index is not None and index < len(self.lines) else None

    def append(self, lines: Iterable[Line]) -> None:
        """New lines at the bottom; the oldest fall off the top past ``max_lines``."""
        before = self.list_cursor.index
        added = list(lines)
        if not added:
            return
        self.lines.extend(added)
        dropped = max(0, len(self.lines) - self.max_lines)
        if dropped:
            del self.lines[:dropped]
        self._place(before, dropped)

    def clear(self) -> None:
        self.lines.clear()
        self.list_cursor.reset()
        self._cache.clear()
        self.virtual_size = Size(self.size.width, 0)
        self._scroll(0)
        self.refresh()

    def follow(self, on: bool) -> None:
        self.list_cursor.follow(on)
        self._place(self.list_cursor.index, 0)
        self.post_message(self.Moved())

    def _place(self, before: int | None, dropped: int) -> None:
        index = self.list_cursor.place([line_key(line) for line in self.lines])
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.lines))
        if index is None:
            self.refresh()
            return
        if self.list_cursor.following:
            self._scroll(len(self.lines) - self.scrollable_content_region.height)
        elif before is not None:
            self._scroll(self.scroll_y - (before - index))  # it keeps its place as old lines fall off
        self._keep_in_view()
        self.refresh()

    # --- the cursor --------------------------------------------------------------------------

    def _move_to(self, index: int) -> None:
        if not self.lines:
            return
        self.list_cursor.moved(max(0, min(len(self.lines) - 1, index)))
        self._keep_in_view()
        self.refresh()
        self.post_message(self.Moved())

    def _scroll(self, y: float) -> None:
        # force: the scrollbars are those of the last layout, maybe from before these lines came
        self.scroll_to(y=max(0, y), animate=False, immediate=True, force=True)

    def _keep_in_view(self) -> None:
        index = self.list_cursor.index
        if index is None:
            return
        height = max(1, self.scrollable_content_region.height)
        top = int(self.scroll_y)
        if index < top:
            self._scroll(index)
        elif index >= top + height:
            self._scroll(index - height + 1)

    def action_move(self, delta: int) -> None:
        self._move_to((self.list_cursor.index or 0) + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(
            (self.list_cursor.index or 0) + direction * max(1, self.scrollable_content_region.height)
        )

    def action_jump(self, where: int) -> None:
        self._move_to(where if where >= 0 else len(self.lines) - 1)

    def action_open(self) -> None:
        line = self.selected
        if isinstance(line, EventRow):
            self.post_message(self.Opened(line))

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_y) + event.y
        if not 0 <= index < len(self.lines):
            return
        if index == self.list_cursor.index or event.chain > 1:
            self.action_open()
        else:
            self._move_to(index)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.lines))
        self._cache.clear()
        self._keep_in_view()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # --- drawing -----------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        index = int(self.scroll_y) + y
        width = self.scrollable_content_region.width
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        line = self.lines[index]
        on_cursor = index == self.list_cursor.index
        key = (line_key(line), width, on_cursor, on_cursor and self.has_focus)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._cache[key] = self._strip(line, width, on_cursor)
        return strip

    def _strip(self, line: Line, width: int, on_cursor: bool) -> Strip:
        text = event_text(line)
        text.truncate(width, overflow="ellipsis")
        base = self.rich_style
        cursor: Style | None = self.get_component_rich_style("event-list--cursor") if on_cursor else None
        segments = list(text.render(self.app.console))
        segments = list(Segment.apply_style(segments, base, cursor))
        return Strip(segments, text.cell_len).crop_extend(0, width, base + cursor if cursor else base)
