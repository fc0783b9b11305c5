"""The dependency view: a turn's calls as a graph, each with its outcome and the reason for it."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from console.model import Changes
from console.screens.base import ConsoleScreen
from console.widgets.turn_graph import OUTCOME_STYLE, TurnGraph, turn_label


class DependencyScreen(ConsoleScreen):
    """Recent turns on the left; the selected one's graph on the right. Calls are nested under
    what they depend on (a call with two dependencies appears under both); the view follows the
    newest turn until the operator picks one (``f`` follows again)."""

    BINDINGS = [
        Binding("f", "follow", "Follow", tooltip="Follow the newest turn"),
        Binding("escape", "follow", "Follow", show=False),
    ]
    DEFAULT_CSS = """
    DependencyScreen #turns { width: 40; height: 1fr; border: none; border-right: vkey $panel-lighten-2; }
    DependencyScreen #summary { height: auto; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.following = True
        self.turn_id: str | None = None
        self._shown: tuple[str, int] | None = None
        self._listed: list[tuple[str, str]] | None = None
        """The (turn, outcome) pairs the turn list shows."""

    def compose_body(self) -> ComposeResult:
        yield Static(id="summary")
        with Horizontal():
            yield OptionList(id="turns")
            yield TurnGraph(id="graph")

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        model = self.console_app.model
        if not (full or changes.turns):
            return
        self._list_turns(full)
        current = model.current_turn() if self.following else model.turns.get(self.turn_id or "")
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
        follow = (
            Content.styled("following the newest turn", "$foreground-muted")
            if self.following
            else Content("pinned — f follows the newest turn")
        )
        self.query_one("#summary", Static).update(Content.assemble(*turn_label(current), "   ", follow))

    def _list_turns(self, full: bool) -> None:
        turns = list(reversed(self.console_app.model.turns.values()))
        listed = [(t.turn_id, t.outcome) for t in turns]
        if listed == self._listed and not full:
            return
        self._listed = listed
        options = self.query_one("#turns", OptionList)
        highlighted = options.highlighted
        options.set_options(
            Option(
                Content.assemble(
                    (t.outcome.replace("_", " ")[:9].ljust(9), OUTCOME_STYLE.get(t.outcome, "")),
                    " ",
                    t.turn_id,
                ),
                id=t.turn_id,
            )
            for t in turns
        )
        if highlighted is not None and turns:
            options.highlighted = min(highlighted, len(turns) - 1)

    def action_follow(self) -> None:
        self.following = True
        self.redraw()

    @on(OptionList.OptionSelected, "#turns")
    def _pick(self, event: OptionList.OptionSelected) -> None:
        self.following = False
        self.turn_id = event.option.id
        self.redraw()
