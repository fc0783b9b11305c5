"""The dependency view: a turn's calls as a graph, each with its outcome and the reason for it."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import OptionList, Static, Tree
from textual.widgets.option_list import Option
from textual.widgets.tree import TreeNode

from console.model import CallNode, Changes, TurnView
from console.screens.base import ConsoleScreen, Parts, rich_text

STATUS_STYLE = {
    "succeeded": "$success",
    "partial": "$warning",
    "alternative used": "$accent",
    "defaulted": "$warning",
    "failed": "bold $error",
    "rejected": "bold $error",
    "escalated": "bold $error",
    "skipped": "$foreground-muted",
    "timed out": "bold $warning",
    "canceled": "$foreground-muted",
    "running": "$primary",
    "pending": "$foreground-muted",
}
"""Colour by outcome; the outcome is always also written out (SKIPPED, ESCALATED…)."""
OUTCOME_STYLE = {
    "ok": "$success",
    "degraded": "$warning",
    "failed": "$error",
    "timed_out": "$error",
    "canceled": "$foreground-muted",
    "running": "$primary",
}


def call_label(node: CallNode) -> Parts:
    label = node.label
    parts: list[str | tuple[str, str]] = [
        (node.call_id, "bold"),
        f" ({node.served_by or node.tool_id}) ",
        (label.upper(), STATUS_STYLE.get(label, "")),
    ]
    if node.optional:
        parts.append((" optional", "$foreground-muted"))
    if node.reason:
        parts.append((f" — {node.reason}", "$foreground-muted"))
    return parts


def turn_label(turn: TurnView) -> Parts:
    return [
        (turn.turn_id, "bold"),
        "  ",
        (turn.outcome.upper().replace("_", " "), OUTCOME_STYLE.get(turn.outcome, "")),
        (f"  {turn.summary}" if turn.summary else "", "$foreground-muted"),
    ]


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
    DependencyScreen #graph { width: 1fr; height: 1fr; scrollbar-size-horizontal: 0; }
    DependencyScreen #summary { height: auto; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.following = True
        self.turn_id: str | None = None
        self._shown: tuple[str, int] | None = None
        self._turn_ids: list[str] = []

    def compose_body(self) -> ComposeResult:
        yield Static(id="summary")
        with Horizontal():
            yield OptionList(id="turns")
            tree: Tree[str] = Tree("no turn yet", id="graph")
            tree.show_root = True
            yield tree

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        model = self.console_app.model
        if not (full or changes.turns):
            return
        self._list_turns()
        current = model.current_turn() if self.following else model.turns.get(self.turn_id or "")
        if current is None:
            self.query_one("#summary", Static).update(
                "no turn yet" if self.following else f"turn {self.turn_id} is no longer kept"
            )
            return
        self.turn_id = current.turn_id
        key = (current.turn_id, current.version)
        if key != self._shown or full:
            self._draw(current)
            self._shown = key
        follow = (
            Content.styled("following the newest turn", "$foreground-muted")
            if self.following
            else Content("pinned — f follows the newest turn")
        )
        self.query_one("#summary", Static).update(Content.assemble(*turn_label(current), "   ", follow))

    def _list_turns(self) -> None:
        turns = list(reversed(self.console_app.model.turns.values()))
        ids = [t.turn_id for t in turns]
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
        if highlighted is not None and ids:
            options.highlighted = min(highlighted, len(ids) - 1)
        self._turn_ids = ids

    def _draw(self, turn: TurnView) -> None:
        tree: Tree[str] = self.query_one("#graph", Tree)
        same_turn = tree.root.data == turn.turn_id and self._same_shape(tree.root, turn)
        if same_turn:  # relabel in place: expansion and cursor survive
            self._relabel(tree.root, turn)
            tree.root.set_label(self._text(turn_label(turn)))
            return
        tree.clear()
        tree.root.data = turn.turn_id
        tree.root.set_label(self._text(turn_label(turn)))
        for node in turn.roots():
            self._add(tree.root, node, turn, ())
        tree.root.expand_all()

    def _add(self, parent: TreeNode[str], node: CallNode, turn: TurnView, path: tuple[str, ...]) -> None:
        branch = parent.add(self._text(call_label(node)), data=node.call_id, expand=True)
        for dependant in turn.dependants(node.call_id):
            if dependant.call_id not in path:
                self._add(branch, dependant, turn, (*path, node.call_id))
        if not branch.children:
            branch.allow_expand = False

    def _relabel(self, parent: TreeNode[str], turn: TurnView) -> None:
        for child in parent.children:
            node = turn.calls.get(child.data or "")
            if node is not None:
                child.set_label(self._text(call_label(node)))
            self._relabel(child, turn)

    def _text(self, parts: Parts) -> Text:
        return rich_text(parts, self.app.get_css_variables())

    def _same_shape(self, root: TreeNode[str], turn: TurnView) -> bool:
        return [c.data for c in root.children] == [n.call_id for n in turn.roots()]

    def action_follow(self) -> None:
        self.following = True
        self.show(Changes(), self.console_app.now, full=True)

    @on(OptionList.OptionSelected, "#turns")
    def _pick(self, event: OptionList.OptionSelected) -> None:
        self.following = False
        self.turn_id = event.option.id
        self.show(Changes(), self.console_app.now, full=True)
