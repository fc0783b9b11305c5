"""The confirmation an operator action needs: what it does, to which tools, and why."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from engine.breaker import BreakerState

EFFECTS = {
    "trip": "force the breaker OPEN until reset: every call is rejected at once",
    "reset": "close the breaker and clear its counts: calls flow again",
    "disable": "admit every call while still counting failures: the breaker stops protecting",
}


@dataclass(frozen=True, slots=True)
class Confirmed:
    reason: str


class ConfirmActionModal(ModalScreen[Confirmed | None]):
    """``y``/``enter`` confirms (with the typed reason), ``n``/``esc`` cancels."""

    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel"),
        Binding("y", "confirm", "Confirm", show=False),
    ]
    DEFAULT_CSS = """
    ConfirmActionModal { align: center middle; }
    ConfirmActionModal #dialog {
        width: 72; height: auto; padding: 1 2;
        border: thick $warning; background: $surface;
    }
    ConfirmActionModal #question { text-style: bold; margin-bottom: 1; }
    ConfirmActionModal #tools { margin-bottom: 1; }
    ConfirmActionModal Input { margin-bottom: 1; }
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
            yield Input(placeholder="reason (optional, recorded in the trace)", id="reason")
            with Horizontal(id="buttons"):
                yield Button("Cancel (n)", id="cancel")
                yield Button(f"{self.action.capitalize()} (y)", id="confirm", variant="error")

    def on_mount(self) -> None:
        self.query_one("#reason", Input).focus()

    @on(Input.Submitted, "#reason")
    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        self.dismiss(Confirmed(self.query_one("#reason", Input).value.strip()))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
