"""The confirmation an operator action needs: what it does, to which tools, and why.

One rule, written in the dialog: ``y`` (or ``enter``) acts and ``n``/``esc`` cancels from the
moment it opens; nothing has the focus, so no key typed at it becomes a reason. ``tab`` moves
into the reason field, where keys type; ``enter`` there acts with the reason, ``esc`` cancels.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from engine.strategies.breaker.machine import BreakerState

EFFECTS = {
    "trip": "force the breaker OPEN until reset: every call is rejected at once",
    "reset": "close the breaker and clear its counts: calls flow again",
    "disable": "admit every call while still counting failures: the breaker stops protecting",
}


def keys_hint(action: str) -> str:
    """The dialog's rule, as it shows it."""
    return f"y {action} · n/esc cancel · tab: add a reason, then enter"


@dataclass(frozen=True, slots=True)
class Confirmed:
    reason: str


class ConfirmActionModal(ModalScreen[Confirmed | None]):
    """``y``/``enter`` confirms (with the reason typed after ``tab``), ``n``/``esc`` cancels."""

    AUTO_FOCUS = ""  # nothing focused: y and n are the dialog's keys, never the reason's text
    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel"),
        Binding("y,enter", "confirm", "Confirm", show=False),
    ]
    DEFAULT_CSS = """
    ConfirmActionModal { align: center middle; }
    ConfirmActionModal #dialog {
        width: 72; max-width: 100%; height: auto; padding: 1 2;
        border: thick $warning; background: $surface;
    }
    ConfirmActionModal #question { text-style: bold; margin-bottom: 1; }
    ConfirmActionModal #tools { margin-bottom: 1; }
    ConfirmActionModal #keys { margin-top: 1; color: $text-muted; }
    ConfirmActionModal Input { margin-top: 1; }
    ConfirmActionModal #buttons { height: auto; align-horizontal: right; }
    ConfirmActionModal Button { margin-left: 2; }
    """

    def __init__(self, action: str, tools: dict[str, BreakerState]) -> None:
        super().__init__()
        self.action = action
        self.tools = tools

    def compose(self) -> ComposeResult:
        names = ", ".join(self.tools) if len(self.tools) <= 3 else f"{len(self.tools)} tools"
        with Vertical(id="dialog"):
            yield Static(f"{self.action.capitalize()} {names}?", id="question", markup=False)
            yield Static(
                Content("\n").join(
                    Content.assemble(f"  {tool_id}  now ", (str(state), "bold"))
                    for tool_id, state in self.tools.items()
                ),
                id="tools",
            )
            yield Static(f"This will {EFFECTS[self.action]}.", markup=False)
            yield Static(keys_hint(self.action), id="keys", markup=False)
            yield Input(placeholder="reason (optional, recorded in the audit)", id="reason")
            with Horizontal(id="buttons"):
                yield Button("Cancel (n)", id="cancel")
                yield Button(f"{self.action.capitalize()} (y)", id="confirm", variant="error")

    @on(Input.Submitted, "#reason")
    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        self.dismiss(Confirmed(self.query_one("#reason", Input).value.strip()))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
