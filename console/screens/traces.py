"""Persisted turns: browse the trace store, open a turn, replay it.

Every query runs on a worker thread (the store is SQLite on disk; the UI never waits on it),
and a newer query cancels an older one. Pages are keyset-paginated by the store, so the 500th
page of a million-event store costs what the first does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Input, Select, Static

from console import render
from console.model import Changes, ConsoleModel, TurnView
from console.replay import seeds_from
from console.screens.base import ConsoleScreen, rich_text
from console.traces import UsageError, parse_when
from console.widgets.turn_graph import OUTCOME_STYLE, TurnGraph
from engine.events import ToolResultSent
from engine.store import StoredTurn, TraceStore, TraceStoreError, TurnPage, TurnRow

PAGE = 50
OUTCOMES = ("ok", "degraded", "failed", "timed_out", "canceled", "interrupted", "running")
REFRESH_S = 2.0
"""The first page is queried again this often while shown: new turns appear."""


def parse_since(text: str) -> float | None:
    """``30m``, ``2h``, ``7d`` (ago) or an ISO time → wall-clock seconds; '' → None."""
    text = text.strip()
    if not text:
        return None
    try:
        return parse_when(text)
    except UsageError as exc:
        raise ValueError(str(exc)) from None


def _clock(at: float | None) -> str:
    return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S") if at else "—"


@dataclass(frozen=True, slots=True)
class TraceQuery:
    tool: str | None
    outcome: str | None
    since: float | None
    until: float | None


class TraceBrowserScreen(ConsoleScreen):
    """Turns newest first; ``/`` filters (tool, outcome, since, until), ``n``/``b`` page,
    ``enter`` opens a turn, ``R`` replays it, ``A`` replays every turn in the filter's time range."""

    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Filter by tool, outcome and time"),
        Binding("n", "page(1)", "Next", tooltip="The next (older) page"),
        Binding("b", "page(-1)", "Prev", tooltip="The previous (newer) page"),
        Binding("R", "replay_turn", "Replay", tooltip="Replay the selected turn through the board"),
        Binding("A", "replay_range", "Replay range", tooltip="Replay the filter's time range"),
        Binding("escape", "leave_filter", "Back", show=False),
    ]
    DEFAULT_CSS = """
    TraceBrowserScreen #filters { height: 3; padding: 0 1; }
    TraceBrowserScreen #filters Input { width: 1fr; }
    TraceBrowserScreen #filters Select { width: 20; }
    TraceBrowserScreen #turns { height: 1fr; scrollbar-size-horizontal: 0; }
    TraceBrowserScreen #page { height: 1; padding: 0 1; color: $foreground-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._cursors: list[str | None] = [None]
        """The cursor of each page shown so far: page ``i`` starts at ``_cursors[i]``."""
        self._next: str | None = None
        self._rows: list[TurnRow] = []
        self._store: TraceStore | None = None
        self._problem: str | None = None
        self._queried_at = float("-inf")

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="filters"):
            yield Input(placeholder="tool", id="tool")
            yield Select([(o.replace("_", " "), o) for o in OUTCOMES], prompt="any outcome", id="outcome")
            yield Input(placeholder="since: 30m, 2h, 7d or ISO", id="since")
            yield Input(placeholder="until", id="until")
        yield DataTable(id="turns", cursor_type="row", zebra_stripes=True)
        yield Static(id="page")

    def on_mount(self) -> None:
        self.query_one("#turns", DataTable).add_columns(
            "started", "turn", "outcome", "calls", "ms", "summary"
        )
        self.query_one("#turns", DataTable).focus()

    # --- the store ---------------------------------------------------------------------------

    def store(self) -> TraceStore | None:
        """The console's trace store, opened read-only on first use (None if there is none)."""
        path = self.console_app.traces
        if self._store is None and path is not None and self._problem is None:
            try:
                self._store = TraceStore(Path(path), readonly=True, verify=False)
            except TraceStoreError as exc:
                self._problem = str(exc)
        return self._store

    def on_unmount(self) -> None:
        if self._store is not None:
            self._store.close()

    def query_now(self) -> TraceQuery:
        outcome = self.query_one("#outcome", Select).value
        return TraceQuery(
            self.query_one("#tool", Input).value.strip() or None,
            outcome if isinstance(outcome, str) else None,
            parse_since(self.query_one("#since", Input).value),
            parse_since(self.query_one("#until", Input).value),
        )

    # --- following the model ---------------------------------------------------------------

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        first_page = len(self._cursors) == 1
        if full or (first_page and now - self._queried_at >= REFRESH_S):
            self._queried_at = now
            self._load()

    def _load(self) -> None:
        store = self.store()
        if store is None:
            self._say(self._problem or "no trace store: the console was started with --no-record")
            return
        try:
            query = self.query_now()
        except ValueError as exc:
            self._say(str(exc))
            return
        self._fetch(store, query, self._cursors[-1])

    @work(thread=True, exclusive=True, group="trace-query", exit_on_error=False)
    def _fetch(self, store: TraceStore, query: TraceQuery, cursor: str | None) -> None:
        try:
            page = store.list_turns(
                limit=PAGE, cursor=cursor, outcome=query.outcome, tool=query.tool, since=query.since,
                until=query.until,
            )  # fmt: skip
        except TraceStoreError as exc:
            self.app.call_from_thread(self._say, str(exc))
            return
        self.app.call_from_thread(self._show_page, page)

    def _show_page(self, page: TurnPage) -> None:
        table = self.query_one("#turns", DataTable)
        keep = self.selected_turn
        variables = self.app.get_css_variables()
        table.clear()
        for row in page.rows:
            table.add_row(
                _clock(row.started_at), Text(row.turn_id),
                rich_text([(row.outcome.replace("_", " "), OUTCOME_STYLE.get(row.outcome, ""))], variables),
                str(row.calls), f"{row.duration_ms:,.0f}" if row.duration_ms is not None else "—",
                Text(row.summary or ""), key=row.turn_id,
            )  # fmt: skip
        self._rows, self._next = page.rows, page.next_cursor
        if keep is not None and any(r.turn_id == keep for r in page.rows):
            table.move_cursor(row=table.get_row_index(keep))
        more = " · n next" if page.next_cursor else ""
        back = " · b previous" if len(self._cursors) > 1 else ""
        self._say(f"page {len(self._cursors)} · {len(page.rows)} turns{more}{back}")

    def _say(self, text: str) -> None:
        self.query_one("#page", Static).update(text)

    @property
    def selected_turn(self) -> str | None:
        table = self.query_one("#turns", DataTable)
        if not self._rows or table.cursor_row >= len(self._rows):
            return None
        return self._rows[table.cursor_row].turn_id

    # --- actions -----------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.query_one("#tool", Input).focus()

    def action_leave_filter(self) -> None:
        self.query_one("#turns", DataTable).focus()

    def action_page(self, direction: int) -> None:
        if direction > 0 and self._next is not None:
            self._cursors.append(self._next)
        elif direction < 0 and len(self._cursors) > 1:
            self._cursors.pop()
        else:
            return
        self._load()

    @on(Input.Submitted)
    @on(Select.Changed)
    def _filter_changed(self) -> None:
        self._cursors = [None]
        self._load()
        self.query_one("#turns", DataTable).focus()

    @on(DataTable.RowSelected, "#turns")
    def _open(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(TraceScreen(str(event.row_key.value)))

    def action_replay_turn(self) -> None:
        if self.selected_turn is not None:
            self.console_app.start_replay(turn_id=self.selected_turn)

    def action_replay_range(self) -> None:
        try:
            query = self.query_now()
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        if query.since is None:
            self.notify("say where the range starts: since 30m, 2h, … (press /)", severity="warning")
            return
        self.console_app.start_replay(since=query.since, until=query.until)


# --- one turn ---------------------------------------------------------------------------------


def graph_of(stored: StoredTurn, store: TraceStore) -> TurnView | None:
    """The turn's dependency graph as it ended: its events folded as the live view folds them."""
    model = ConsoleModel(seeds_from(stored.events, store))
    model.apply(list(stored.events))
    return model.turns.get(stored.row.turn_id) or next(iter(model.turns.values()), None)


def model_texts(stored: StoredTurn) -> list[tuple[str, str, bool, str]]:
    """(call, tool, is_error, text) of every answer the LLM executor gave the model for this turn."""
    return [
        (e.call_id, e.tool_id, e.is_error, e.content) for e in stored.events if isinstance(e, ToolResultSent)
    ]


class TraceScreen(ConsoleScreen):
    """One stored turn: its events on a timeline, the graph as it ended, every attempt with its
    error and classification, and the exact text the model received. ``R`` replays it."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("R", "replay", "Replay", tooltip="Replay this turn through the board"),
    ]
    DEFAULT_CSS = """
    TraceScreen #headline { height: auto; padding: 0 1; }
    TraceScreen #columns { height: 1fr; }
    TraceScreen .title { color: $accent; text-style: bold; padding: 0 1; }
    TraceScreen #left { width: 1fr; }
    TraceScreen #right { width: 1fr; }
    TraceScreen #timeline { height: 1fr; min-height: 8; }
    TraceScreen #attempts { height: auto; max-height: 12; scrollbar-size-horizontal: 0; }
    TraceScreen TurnGraph { height: auto; max-height: 14; }
    TraceScreen #model { height: auto; padding: 0 1; }
    """

    def __init__(self, turn_id: str) -> None:
        super().__init__()
        self.turn_id = turn_id
        self.stored: StoredTurn | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(f"loading {self.turn_id}…", id="headline", markup=False)
        with Horizontal(id="columns"):
            with Vertical(id="left"):
                yield Static("Timeline", classes="title")
                yield DataTable(id="timeline", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="right"):
                yield Static("As it ended", classes="title")
                yield TurnGraph(id="graph")
                yield Static("Attempts", classes="title")
                yield DataTable(id="attempts", cursor_type="row", zebra_stripes=True)
                yield Static("What the model received", classes="title")
                yield Static(id="model", markup=False)

    def on_mount(self) -> None:
        self.query_one("#timeline", DataTable).add_columns("+ms", "event", "call", "what happened")
        self.query_one("#attempts", DataTable).add_columns(
            "call", "tool", "#", "outcome", "kind", "class", "status", "ms", "fault"
        )
        self._load()

    @work(thread=True, exclusive=True, group="trace-turn", exit_on_error=False)
    def _load(self) -> None:
        path = self.console_app.traces
        if path is None:
            self.app.call_from_thread(self._fail, "no trace store")
            return
        try:
            with TraceStore(Path(path), readonly=True, verify=False) as store:
                stored = store.load_turn(self.turn_id)
                graph = graph_of(stored, store)
        except TraceStoreError as exc:
            self.app.call_from_thread(self._fail, str(exc))
            return
        self.app.call_from_thread(self._fill, stored, graph)

    def _fail(self, problem: str) -> None:
        self.query_one("#headline", Static).update(problem)

    def _fill(self, stored: StoredTurn, graph: TurnView | None) -> None:
        self.stored = stored
        row = stored.row
        self.query_one("#headline", Static).update(
            Content.assemble(
                (row.turn_id, "bold"), "  ",
                (row.outcome.upper().replace("_", " "), OUTCOME_STYLE.get(row.outcome, "")),
                f"  {_clock(row.started_at)} · {render.duration(row.duration_ms)} · {row.calls} call(s)",
                (f"\n{row.summary}" if row.summary else "", "$foreground-muted"),
            )
        )  # fmt: skip
        timeline = self.query_one("#timeline", DataTable)
        start = stored.events[0].t if stored.events else 0.0
        for event in stored.events:
            timeline.add_row(
                f"{(event.t - start) * 1000:,.0f}", event.event_type, getattr(event, "call_id", "") or "",
                Text(event.describe()),  # text, never markup: errors and reasons come from outside
            )  # fmt: skip
        if graph is not None:
            self.query_one(TurnGraph).show(graph)
        attempts = self.query_one("#attempts", DataTable)
        for a in stored.attempts:
            attempts.add_row(
                a.call_id, a.tool_id, str(a.attempt), a.outcome, a.kind or "", a.error_class or "",
                str(a.status_code or ""), render.duration(a.latency_ms), a.fault_type or "",
            )  # fmt: skip
        texts = model_texts(stored)
        if texts:
            blocks = [
                Content.assemble(
                    (f"{call} ({tool})", "bold $error" if is_error else "bold $success"), "\n", text, "\n"
                )
                for call, tool, is_error, text in texts
            ]
            self.query_one("#model", Static).update(Content("\n").join(blocks))
        else:
            self.query_one("#model", Static).update(
                Content.styled(
                    "nothing: this turn was not run for a model (its calls' results went to the code"
                    " that ran the turn, not through the LLM executor)",
                    "$foreground-muted",
                )
            )

    def action_replay(self) -> None:
        self.console_app.start_replay(turn_id=self.turn_id)
