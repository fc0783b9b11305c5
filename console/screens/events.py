"""The live event stream: every engine event as a line, filterable, pausable."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import RichLog

from console.model import Changes, EventRow
from console.screens.base import FilterBar, FilteredScreen

MAX_LINES = 5_000
MAX_PER_FLUSH = 300

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "success": "green", "info": ""}


def event_line(row: EventRow) -> Text:
    stamp = datetime.fromtimestamp(row.at).strftime("%H:%M:%S.%f")[:-3]
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{stamp} ", style="dim")
    line.append(f"{row.event_type:<20} ", style=SEVERITY_STYLE[row.severity] or "bold")
    line.append(row.text, style=SEVERITY_STYLE[row.severity])
    return line


class EventLogScreen(FilteredScreen):
    """``/`` filters by text (event type, tool, message); ``p`` pauses the whole console."""

    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Show only events containing the text"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    DEFAULT_CSS = """
    EventLogScreen RichLog { height: 1fr; background: $surface; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._last_seq = 0

    def compose_body(self) -> ComposeResult:
        yield RichLog(id="log", max_lines=MAX_LINES, wrap=False, markup=False, auto_scroll=True)
        yield FilterBar("filter events…")

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        log = self.query_one(RichLog)
        model = self.console_app.model
        if full:
            log.clear()
            self._last_seq = 0
        elif not changes.events:
            return
        total, rows = model.newest_event_rows(self.filter_text, since=self._last_seq, limit=MAX_PER_FLUSH)
        self._last_seq = model.seen
        if total > len(rows):  # faster than anyone reads: show the newest, say so
            skipped = total - len(rows)
            log.write(Text(f"… {skipped:,} events not shown (p pauses, / filters)", style="dim italic"))
        for row in rows:
            log.write(event_line(row))

    def focus_body(self) -> None:
        self.query_one(RichLog).focus()
