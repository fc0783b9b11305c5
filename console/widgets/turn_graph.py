"""``TurnGraph``: a turn's calls as a tree — each under what it depends on — with outcomes and reasons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from console.model import CallNode, TurnView
from console.render import Parts, rich_text

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
    "interrupted": "bold $warning",
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
    "interrupted": "$warning",
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


def call_fields(node: CallNode, turn_id: str) -> list[tuple[str, object]]:
    """One call of a turn, every field whole (the graph's line is cut at its width)."""
    return [
        ("turn", turn_id), ("call", node.call_id), ("tool", node.tool_id), ("served by", node.served_by),
        ("outcome", node.label.upper()), ("reason", node.reason), ("attempts", node.attempts),
        ("depends on", ", ".join(node.depends_on)), ("optional", "yes" if node.optional else "no"),
        ("default", "used" if node.used_default else "declared" if node.has_default else "none"),
    ]  # fmt: skip


def turn_fields(turn: TurnView) -> list[tuple[str, object]]:
    return [
        ("turn", turn.turn_id), ("outcome", turn.outcome.upper().replace("_", " ")),
        ("summary", turn.summary),
        ("duration", f"{turn.duration_ms:,.0f} ms" if turn.duration_ms is not None else None),
        ("deadline", f"{turn.deadline_ms:,.0f} ms" if turn.deadline_ms is not None else None),
        ("calls", ", ".join(turn.calls)),
    ]  # fmt: skip


def turn_label(turn: TurnView) -> Parts:
    return [
        (turn.turn_id, "bold"),
        "  ",
        (turn.outcome.upper().replace("_", " "), OUTCOME_STYLE.get(turn.outcome, "")),
        (f"  {turn.summary}" if turn.summary else "", "$foreground-muted"),
    ]


class TurnGraph(Tree[str]):
    """Redrawn in place while the turn keeps its shape, so expansion and the cursor survive;
    a call with two dependencies appears under both. A label longer than its line ends in ``…``
    (``enter`` opens the call whole): the graph never scrolls sideways, so nothing is cut unseen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "enter", "select_cursor", "Open", tooltip="Open the selected call: outcome and reason, whole"
        ),
        Binding("space", "toggle_node", "Fold", tooltip="Fold or unfold the selected call's dependants"),
    ]
    DEFAULT_CSS = """
    TurnGraph { width: 1fr; height: 1fr; scrollbar-size-horizontal: 0; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("no turn yet", id=id)
        self.show_root = True
        self.auto_expand = False  # enter opens the call in full; space folds
        self.turn: TurnView | None = None

    def show(self, turn: TurnView) -> None:
        self.turn = turn
        variables = self.app.get_css_variables()  # costly: once per redraw, not once per label
        root = self.root
        if root.data == turn.turn_id and [c.data for c in root.children] == [n.call_id for n in turn.roots()]:
            self._relabel(root, turn, variables)
            root.set_label(rich_text(turn_label(turn), variables))
            return
        self.clear()  # a new root: expansion and cursor start over
        root = self.root
        root.data = turn.turn_id
        root.set_label(rich_text(turn_label(turn), variables))
        for node in turn.roots():
            self._add(root, node, turn, (), variables)
        root.expand_all()

    def render_label(self, node: TreeNode[str], base_style: Style, style: Style) -> Text:
        label = super().render_label(node, base_style, style)
        # The scrollbar's room is kept even while there is none: one that appears (the graph
        # grew) must not hide the labels' ends.
        room = self.size.width - self.styles.scrollbar_size_vertical - self._indent(node)
        if self.size.width and label.cell_len > room:  # no width yet: not laid out, nothing to fit
            label.truncate(max(1, room), overflow="ellipsis")
        return label

    def _indent(self, node: TreeNode[str]) -> int:
        """Cells of guides before ``node``'s label: one ``guide_depth`` per level below the root."""
        depth = 0
        parent = node.parent
        while parent is not None:
            depth += 1
            parent = parent.parent
        return depth * self.guide_depth if self.show_root else max(0, depth - 1) * self.guide_depth

    def fields_of(self, node: TreeNode[str]) -> tuple[str, list[tuple[str, object]]] | None:
        """A title and the whole fields of what ``node`` shows (the turn, or one of its calls)."""
        turn = self.turn
        if turn is None:
            return None
        if node is self.root:
            return turn.turn_id, turn_fields(turn)
        call = turn.calls.get(node.data or "")
        return (f"{turn.turn_id} · {call.call_id}", call_fields(call, turn.turn_id)) if call else None

    def _add(
        self, parent: TreeNode[str], node: CallNode, turn: TurnView, path: tuple[str, ...],
        variables: Mapping[str, str],
    ) -> None:  # fmt: skip
        branch = parent.add(rich_text(call_label(node), variables), data=node.call_id, expand=True)
        for dependant in turn.dependants(node.call_id):
            if dependant.call_id not in path:
                self._add(branch, dependant, turn, (*path, node.call_id), variables)
        if not branch.children:
            branch.allow_expand = False

    def _relabel(self, parent: TreeNode[str], turn: TurnView, variables: Mapping[str, str]) -> None:
        for child in parent.children:
            node = turn.calls.get(child.data or "")
            if node is not None:
                child.set_label(rich_text(call_label(node), variables))
            self._relabel(child, turn, variables)
