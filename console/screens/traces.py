"""Persisted turns: browse the trace store, open a turn, replay it.

Every query runs on a worker thread (the store is SQLite on disk; the UI never waits on it),
and a newer query cancels an older one. Pages are keyset-paginated by the store, so the 500th
page of a million-event store costs what the first does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Input, Select, Static, Tree

from console import render
from console.model import Changes, ConsoleModel, TurnView
from console.player import seeds_from
from console.render import rich_text
from console.screens.base import ConsoleScreen
from console.screens.text import TextModal, event_fields, field_text
from console.usage import UsageError, parse_when
from console.widgets.item_table import ItemTable, Row, hint
from console.widgets.turn_graph import OUTCOME_STYLE, TurnGraph
from engine.events import Event, ToolResultSent
from engine.store import AttemptRow, StoredTurn, TraceStore, TraceStoreError, TurnPage, TurnRow

PAGE = 50
OUTCOMES = ("ok", "degraded", "failed", "timed_out", "canceled", "interrupted", "running")
REFRESH_S = 2.0
"""The first page is queried again this often while shown: new turns appear."""
NARROW = 120
"""Below this many columns an opened turn stacks its panels: the timeline gets the full width."""


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


def _started(at: float | None) -> str:
    """A turn's start in the list: no year, so the summary keeps its room at 80 columns."""
    return datetime.fromtimestamp(at).strftime("%m-%d %H:%M:%S") if at else "—"


def page_line(page: int, rows: int, *, more: bool, pressed_past_end: bool = False) -> Content:
    """What the line under the list says about paging: where it is, and where ``n``/``b`` go."""
    parts: list[str | tuple[str, str]] = [f"page {page} · {rows} turns"]
    if more:
        parts.append(" · n older")
    else:
        parts.append((" · last page: no older turns", "bold $warning" if pressed_past_end else "bold"))
    parts.append(" · b newer" if page > 1 else "")
    return Content.assemble(*parts)


def turn_row(row: TurnRow, variables: Mapping[str, str]) -> Row:
    outcome = rich_text([(row.outcome.replace("_", " "), OUTCOME_STYLE.get(row.outcome, ""))], variables)
    ms = f"{row.duration_ms:,.0f}" if row.duration_ms is not None else "—"
    cells = (
        _started(row.started_at),
        Text(row.turn_id),
        outcome,
        str(row.calls),
        ms,
        Text(row.summary or ""),
    )
    return row.turn_id, cells


@dataclass(frozen=True, slots=True)
class TraceQuery:
    tool: str | None
    outcome: str | None
    since: float | None
    until: float | None


class TurnTable(ItemTable):
    """The stored turns, newest first; ``enter`` opens one."""

    BINDINGS = [Binding("enter", "select_cursor", "Open", tooltip="Open the selected turn: timeline, graph")]


class TraceBrowserScreen(ConsoleScreen):
    """Turns newest first; ``/`` filters (tool, outcome, since, until), ``n``/``b`` page,
    ``enter`` opens a turn, ``R`` replays it, ``A`` replays every turn in the filter's time range.
    The first page is read again every few seconds: the cursor stays on its turn (``f`` makes it
    ride the newest instead), and turns that arrive above it are counted."""

    HELP_TITLE = "Traces"

    BINDINGS = [
        Binding(
            "slash",
            "filter",
            "Filter",
            tooltip="Filter by tool, outcome and time (since, until: 30m, 2h, 7d ago or an ISO time)",
        ),
        Binding("n", "page(1)", "Next", tooltip="The next (older) page"),
        Binding("b", "page(-1)", "Prev", tooltip="The previous (newer) page"),
        Binding("f", "follow", "Follow", tooltip="Follow the newest turn, or hold the cursor on its turn"),
        Binding("R", "replay_turn", "Replay", tooltip="Replay the selected turn through the board"),
        Binding("A", "replay_range", "Replay range", tooltip="Replay the filter's time range"),
        Binding("escape", "leave_filter", "Back to the list", show=False),
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
        self._past_end = False
        """``n`` was pressed on the last page: the page line says so more loudly."""

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="filters"):
            yield Input(placeholder="tool", id="tool")
            yield Select([(o.replace("_", " "), o) for o in OUTCOMES], prompt="any outcome", id="outcome")
            # Short enough for the field at 80 columns; ``?`` says every form (the filter's key).
            yield Input(placeholder="since e.g. 2h", id="since")
            yield Input(placeholder="until", id="until")
        yield TurnTable("started", "turn", "outcome", "calls", "ms", "summary", flex="summary", id="turns")
        yield Static(id="page", classes="fit")

    def on_mount(self) -> None:
        self.query_one(TurnTable).focus()

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
        variables = self.app.get_css_variables()
        self.query_one(TurnTable).fill([turn_row(row, variables) for row in page.rows])
        self._rows, self._next = page.rows, page.next_cursor
        self._page_line()

    def _page_line(self) -> None:
        table = self.query_one(TurnTable)
        line = page_line(
            len(self._cursors), len(self._rows), more=self._next is not None, pressed_past_end=self._past_end
        )
        if len(self._cursors) == 1:  # only the first page is read again as turns arrive
            line = Content.assemble(line, " · ", hint(table.list_cursor))
        self.query_one("#page", Static).update(line)

    def _say(self, text: str) -> None:
        self.query_one("#page", Static).update(text)

    @property
    def selected_turn(self) -> str | None:
        return self.query_one(TurnTable).selected_key

    # --- actions -----------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.query_one("#tool", Input).focus()

    def action_leave_filter(self) -> None:
        self.query_one(TurnTable).focus()

    def action_follow(self) -> None:
        table = self.query_one(TurnTable)
        table.follow(not table.list_cursor.following)
        self._page_line()

    def action_page(self, direction: int) -> None:
        if direction > 0 and self._next is not None:
            self._cursors.append(self._next)
        elif direction < 0 and len(self._cursors) > 1:
            self._cursors.pop()
        else:
            self._past_end = direction > 0  # nowhere to go: say it, louder for n on the last page
            if self._rows:
                self._page_line()
            return
        self._past_end = False
        self.query_one(TurnTable).list_cursor.reset()
        self._load()

    @on(Input.Submitted)
    @on(Select.Changed)
    def _filter_changed(self) -> None:
        self._cursors = [None]
        self._past_end = False
        self.query_one(TurnTable).list_cursor.reset()
        self._load()
        self.query_one(TurnTable).focus()

    @on(DataTable.RowHighlighted, "#turns")
    def _moved(self) -> None:
        if self._rows:
            self._page_line()

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


def timeline_row(index: int, event: Event, start: float) -> Row:
    call = Text(getattr(event, "call_id", "") or "")
    # Text, never markup: errors and reasons come from outside.
    return str(index), (f"{(event.t - start) * 1000:,.0f}", event.event_type, call, Text(event.describe()))


def attempt_row(index: int, a: AttemptRow) -> Row:
    """An attempt as the list shows it (its kind with the HTTP status, as the tool detail shows
    it); its message and injected fault are in its full view."""
    kind = f"{a.kind or ''} {a.status_code or ''}".strip()
    cells = (
        Text(a.call_id), Text(a.tool_id), str(a.attempt), a.outcome, Text(kind), Text(a.error_class or ""),
        render.duration(a.latency_ms),
    )  # fmt: skip
    return str(index), cells


def attempt_fields(a: AttemptRow) -> list[tuple[str, object]]:
    return [
        ("call", a.call_id), ("tool", a.tool_id), ("attempt", a.attempt), ("outcome", a.outcome),
        ("kind", a.kind), ("class", a.error_class), ("status", a.status_code), ("message", a.message),
        ("latency", render.duration(a.latency_ms)), ("fault", a.fault_type), ("value", a.value),
        ("at", _clock(a.at)),
    ]  # fmt: skip


class StaticTable(ItemTable):
    """A stored turn's rows: nothing arrives, so the cursor starts on the first and stays put."""

    def __init__(self, *columns: str, flex: str | None = None, id: str | None = None) -> None:
        super().__init__(*columns, flex=flex, following=False, id=id)


class TraceScreen(ConsoleScreen):
    """One stored turn: its events on a timeline and every attempt with its error and
    classification (the wider panel), the graph as it ended and the exact text the model received.
    ``enter`` opens a timeline or attempt row in full; ``R`` replays the turn. Under ``NARROW``
    columns the panels stack, the timeline first and as wide as the screen."""

    HELP_TITLE = "A stored turn"

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", tooltip="Back to the list of turns"),
        Binding("R", "replay", "Replay", tooltip="Replay this turn through the board"),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (NARROW, "-wide")]
    DEFAULT_CSS = """
    TraceScreen #headline { height: auto; padding: 0 1; }
    TraceScreen #columns { height: 1fr; }
    TraceScreen .title { color: $accent; text-style: bold; padding: 0 1; }
    TraceScreen #left { width: 3fr; }
    TraceScreen #right { width: 2fr; }
    TraceScreen #timeline { height: 1fr; min-height: 8; scrollbar-size-horizontal: 0; }
    TraceScreen #attempts { height: auto; max-height: 12; scrollbar-size-horizontal: 0; }
    TraceScreen.-narrow #attempts { max-height: 5; }
    TraceScreen TurnGraph { height: auto; max-height: 14; }
    TraceScreen #model { height: auto; padding: 0 1; }
    TraceScreen.-narrow #columns { layout: vertical; }
    TraceScreen.-narrow #left { width: 1fr; height: 2fr; min-height: 6; }
    TraceScreen.-narrow #right { width: 1fr; height: 1fr; }
    TraceScreen.-narrow #timeline { min-height: 4; }
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
                yield StaticTable(
                    "+ms", "event", "call", "what happened", flex="what happened", id="timeline"
                )
                yield Static("Attempts", classes="title")
                yield StaticTable("call", "tool", "#", "outcome", "kind", "class", "ms", id="attempts")
            with VerticalScroll(id="right"):
                yield Static("As it ended", classes="title")
                yield TurnGraph(id="graph")
                yield Static("What the model received", classes="title")
                yield Static(id="model", markup=False)

    def on_mount(self) -> None:
        self.query_one("#timeline", StaticTable).focus()
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
        start = stored.events[0].t if stored.events else 0.0
        timeline = [timeline_row(i, event, start) for i, event in enumerate(stored.events)]
        self.query_one("#timeline", StaticTable).fill(timeline)
        if graph is not None:
            self.query_one(TurnGraph).show(graph)
        self.query_one("#attempts", StaticTable).fill(
            [attempt_row(i, a) for i, a in enumerate(stored.attempts)]
        )
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

    @on(DataTable.RowSelected, "#timeline")
    def _open_event(self, event: DataTable.RowSelected) -> None:
        if self.stored is None or event.row_key.value is None:
            return
        index = int(event.row_key.value)
        shown = self.stored.events[index]
        start = self.stored.events[0].t
        title = f"{self.turn_id} · +{(shown.t - start) * 1000:,.0f} ms · {shown.event_type}"
        self.app.push_screen(TextModal(title, field_text(event_fields(shown.to_dict()))))

    @on(Tree.NodeSelected, "#graph")
    def _open_call(self, event: Tree.NodeSelected[str]) -> None:
        found = self.query_one(TurnGraph).fields_of(event.node)
        if found is not None:
            self.app.push_screen(TextModal(found[0], field_text(found[1])))

    @on(DataTable.RowSelected, "#attempts")
    def _open_attempt(self, event: DataTable.RowSelected) -> None:
        if self.stored is None or event.row_key.value is None:
            return
        attempt = self.stored.attempts[int(event.row_key.value)]
        title = f"{self.turn_id} · {attempt.call_id} attempt {attempt.attempt} ({attempt.tool_id})"
        self.app.push_screen(TextModal(title, field_text(attempt_fields(attempt))))

    def action_replay(self) -> None:
        self.console_app.start_replay(turn_id=self.turn_id)
