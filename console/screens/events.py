"""The live event stream: every engine event as a line, filterable, pausable, each one openable."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from console.model import Changes, ConsoleModel, EventRow
from console.screens.base import FilterBar, FilteredScreen
from console.screens.text import TextModal, event_fields, field_text
from console.widgets.event_list import EventList, Line, Skipped
from console.widgets.item_table import hint
from engine.events import Event

MAX_LINES = 5_000
MAX_PER_FLUSH = 300


def kept_event(model: ConsoleModel, seq: int) -> Event | None:
    """The ``seq``-th event folded, if the model still keeps it."""
    index = seq - (model.seen - len(model.events) + 1)
    return model.events[index] if 0 <= index < len(model.events) else None


class EventLogScreen(FilteredScreen):
    """``/`` filters by text (event type, tool, message); ``p`` pauses the whole console; ``f``
    follows the newest event or holds the cursor on its event; ``enter`` opens it in full."""

    HELP_TITLE = "Events"

    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Show only events containing the text"),
        Binding("f", "follow", "Follow", tooltip="Follow the newest event, or hold the cursor on its event"),
        Binding("escape", "clear_filter", "Clear filter", show=False, tooltip="Show every event again"),
    ]
    DEFAULT_CSS = """
    EventLogScreen #hint { height: 1; padding: 0 1; color: $foreground-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._last_seq = 0

    def compose_body(self) -> ComposeResult:
        yield EventList(id="log", max_lines=MAX_LINES)
        yield Static(id="hint", classes="fit")
        yield FilterBar("filter events…")

    def on_mount(self) -> None:
        self.focus_body()

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        log = self.query_one(EventList)
        model = self.console_app.model
        if full:
            log.clear()
            self._last_seq = 0
        elif not changes.events:
            return
        total, rows = model.newest_event_rows(self.filter_text, since=self._last_seq, limit=MAX_PER_FLUSH)
        self._last_seq = model.seen
        lines: list[Line] = []
        if total > len(rows):  # faster than anyone reads: show the newest, say so
            lines.append(Skipped(-(rows[0].seq if rows else model.seen + 1), total - len(rows)))
        lines += rows
        log.append(lines)
        self._hint()

    def _hint(self) -> None:
        log = self.query_one(EventList)
        shown = f"{log.row_count:,} events" + (f" matching “{self.filter_text}”" if self.filter_text else "")
        self.query_one("#hint", Static).update(f"{shown} · {hint(log.list_cursor)} · enter opens")

    def focus_body(self) -> None:
        self.query_one(EventList).focus()

    def action_follow(self) -> None:
        log = self.query_one(EventList)
        log.follow(not log.list_cursor.following)

    @on(EventList.Moved)
    def _moved(self) -> None:
        self._hint()

    @on(EventList.Opened)
    def _open(self, event: EventList.Opened) -> None:
        row: EventRow = event.row
        found = kept_event(self.console_app.model, row.seq)
        fields = event_fields(found.to_dict()) if found is not None else [("message", row.text)]
        if found is None:
            fields.append(("note", "the event itself is no longer kept; its line is all there is"))
        title = f"event #{row.seq} · {row.event_type}" + (f" · {row.tool_id}" if row.tool_id else "")
        self.app.push_screen(TextModal(title, field_text(fields)))
