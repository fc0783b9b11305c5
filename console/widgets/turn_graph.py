"""``TurnGraph``: a turn's calls as a tree — each under what it depends on — with outcomes and reasons."""

from __future__ import annotations

from collections.abc import Mapping

from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from console.model import CallNode, TurnView
from console.screens.base import Parts, rich_text

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


def turn_label(turn: TurnView) -> Parts:
    return [
        (turn.turn_id, "bold"),
        "  ",
        (turn.outcome.upper().replace("_", " "), OUTCOME_STYLE.get(turn.outcome, "")),
        (f"  {turn.summary}" if turn.summary else "", "$foreground-muted"),
    ]


class TurnGraph(Tree[str]):
    """Redrawn in place while the turn keeps its shape, so expansion and the cursor survive;
    a call with two dependencies appears under both."""

    DEFAULT_CSS = """
    TurnGraph { width: 1fr; height: 1fr; scrollbar-size-horizontal: 0; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("no turn yet", id=id)
        self.show_root = True

    def show(self, turn: TurnView) -> None:
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
