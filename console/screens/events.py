"""The live event stream: every engine event as a line, filterable, pausable."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, RichLog

from console.model import Changes, EventRow
from console.screens.base import ConsoleScreen

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


class EventLogScreen(ConsoleScreen):
    """``/`` filters by text (event type, tool, message); ``p`` pauses the whole console."""

    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Show only events containing the text"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    DEFAULT_CSS = """
    EventLogScreen #filter { dock: bottom; display: none; margin-bottom: 1; }
    EventLogScreen #filter.-active { display: block; }
    EventLogScreen RichLog { height: 1fr; background: $surface; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""
        self._last_seq = 0

    def compose_body(self) -> ComposeResult:
        yield RichLog(id="log", max_lines=MAX_LINES, wrap=False, markup=False, auto_scroll=True)
        yield Input(placeholder="filter events…", id="filter")

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        log = self.query_one(RichLog)
        model = self.console_app.model
        if full:
            log.clear()
            self._last_seq = 0
        elif not changes.events:
            return
        rows = model.event_rows(self.filter_text, since=self._last_seq)
        self._last_seq = model.seen
        if len(rows) > MAX_PER_FLUSH:  # faster than anyone reads: show the newest, say so
            skipped = len(rows) - MAX_PER_FLUSH
            log.write(Text(f"… {skipped:,} events not shown (p pauses, / filters)", style="dim italic"))
            rows = rows[-MAX_PER_FLUSH:]
        for row in rows:
            log.write(event_line(row))

    def action_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.add_class("-active")
        field.focus()

    def action_clear_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.value = ""
        field.remove_class("-active")
        self.filter_text = ""
        self.show(Changes(), self.console_app.now, full=True)
        self.query_one(RichLog).focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.show(Changes(), self.console_app.now, full=True)

    @on(Input.Submitted, "#filter")
    def _filter_kept(self) -> None:
        self.query_one(RichLog).focus()
