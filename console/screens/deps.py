"""The dependency view: a turn's calls as a graph, each with its outcome and the reason for it."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import DataTable, Static, Tree

from console.model import Changes, TurnView
from console.render import rich_text
from console.screens.base import ConsoleScreen
from console.screens.text import TextModal, field_text
from console.widgets.item_table import ItemTable, Row, hint
from console.widgets.turn_graph import OUTCOME_STYLE, TurnGraph, turn_label


class TurnList(ItemTable):
    """Recent turns, newest first; ``enter`` shows the selected one's graph."""

    BINDINGS = [Binding("enter", "select_cursor", "Open", tooltip="Show the selected turn's graph")]


class DependencyScreen(ConsoleScreen):
    """Recent turns on the left; the chosen one's graph on the right. Calls are nested under
    what they depend on (a call with two dependencies appears under both). Following (``f``),
    the list's cursor and the graph ride the newest turn; moving the cursor holds it on its turn
    (new turns arriving above are counted), and ``enter`` shows that turn's graph."""

    HELP_TITLE = "Dependencies"

    BINDINGS = [
        Binding("f", "follow", "Follow", tooltip="Follow the newest turn, or hold the cursor on its turn"),
        Binding("escape", "follow_newest", "Newest", tooltip="Back to following the newest turn"),
    ]
    DEFAULT_CSS = """
    DependencyScreen #turns { width: 40; height: 1fr; max-height: 100%; border-right: vkey $panel-lighten-2; }
    DependencyScreen #summary { height: auto; padding: 0 1; }
    DependencyScreen #turns-hint { height: 1; padding: 0 1; color: $foreground-muted; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.turn_id: str | None = None
        """The turn the graph shows."""
        self._shown: tuple[str, int] | None = None
        self._listed: list[tuple[str, str]] | None = None
        """The (turn, outcome) pairs the turn list shows."""

    @property
    def following(self) -> bool:
        return self.query_one(TurnList).list_cursor.following

    def compose_body(self) -> ComposeResult:
        yield Static(id="summary")
        yield Static(id="turns-hint", classes="fit")
        with Horizontal():
            yield TurnList("outcome", "turn", flex="turn", id="turns", show_header=False)
            yield TurnGraph(id="graph")

    def on_mount(self) -> None:
        self.query_one(TurnList).focus()

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        model = self.console_app.model
        if not (full or changes.turns):
            return
        newest = model.current_turn()
        self._list_turns(full, newest)
        current = newest if self.following else model.turns.get(self.turn_id or "")
        if current is None:
            self.query_one("#summary", Static).update(
                "no turn yet" if self.following else f"turn {self.turn_id} is no longer kept"
            )
            return
        self.turn_id = current.turn_id
        key = (current.turn_id, current.version)
        if key != self._shown or full:
            self.query_one(TurnGraph).show(current)
            self._shown = key
        self._summary(current)

    def _summary(self, current: TurnView) -> None:
        where = (
            Content.styled("the graph follows the newest turn", "$foreground-muted")
            if self.following
            else Content("the graph holds this turn · enter shows the selected one")
        )
        self.query_one("#summary", Static).update(Content.assemble(*turn_label(current), "   ", where))

    def _list_turns(self, full: bool, newest: TurnView | None) -> None:
        turns = list(reversed(self.console_app.model.turns.values()))
        listed = [(t.turn_id, t.outcome) for t in turns]
        table = self.query_one(TurnList)
        if listed != self._listed or full:
            self._listed = listed
            variables = self.app.get_css_variables()
            rows: list[Row] = [
                (
                    t.turn_id,
                    (
                        rich_text(
                            [(t.outcome.replace("_", " "), OUTCOME_STYLE.get(t.outcome, ""))], variables
                        ),
                        Text(t.turn_id),
                    ),
                )
                for t in turns
            ]
            table.fill(rows, newest=newest.turn_id if newest is not None else None)
        self._hint()

    def _hint(self) -> None:
        table = self.query_one(TurnList)
        self.query_one("#turns-hint", Static).update(f"{table.row_count} turns · {hint(table.list_cursor)}")

    def action_follow(self) -> None:
        table = self.query_one(TurnList)
        table.follow(not table.list_cursor.following)
        self.redraw()

    def action_follow_newest(self) -> None:
        self.query_one(TurnList).follow(True)
        self.redraw()

    @on(DataTable.RowHighlighted, "#turns")
    def _moved(self) -> None:
        self._hint()
        if not self.following and self.turn_id is not None and self.turn_id in self.console_app.model.turns:
            self._summary(self.console_app.model.turns[self.turn_id])

    @on(Tree.NodeSelected, "#graph")
    def _open_call(self, event: Tree.NodeSelected[str]) -> None:
        found = self.query_one(TurnGraph).fields_of(event.node)
        if found is not None:
            self.app.push_screen(TextModal(found[0], field_text(found[1])))

    @on(DataTable.RowSelected, "#turns")
    def _pick(self, event: DataTable.RowSelected) -> None:
        table = self.query_one(TurnList)
        if event.row_key.value is None:
            return
        if table.list_cursor.following:  # enter on the newest turn while following: hold it there
            table.list_cursor.follow(False)
        self.turn_id = str(event.row_key.value)
        self.redraw()
