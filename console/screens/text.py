"""The whole text of a row that a table had to cut: an error, a transition, an event, a change.

Opened with ``enter`` on the row; ``esc`` closes it. The text is read-only but selectable
(arrows with shift, or the mouse) and ``c`` copies the selection, or everything, to the
clipboard (``ctrl+c`` quits the console, so copying has a key of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static, TextArea

from console import render

Field = tuple[str, object]


def field_text(fields: Sequence[Field]) -> str:
    """``name  value`` lines, names aligned; a value's further lines indented under it, whole."""
    shown = [(name, _value(value)) for name, value in fields]
    width = max((len(name) for name, _ in shown), default=0)
    lines = []
    for name, value in shown:
        first, *rest = value.split("\n") if value else [""]
        lines.append(f"{name:<{width}}  {first}".rstrip())
        lines += [" " * (width + 2) + line for line in rest]
    return "\n".join(lines)


def event_fields(record: Mapping[str, Any]) -> list[Field]:
    """An event's fields (``Event.to_dict()``) as the modal lists them, the message first."""
    first = ("message", "event_type", "timestamp")
    fields: list[Field] = [(name, record[name]) for name in first if name in record]
    fields += [(name, value) for name, value in record.items() if name not in first]
    return fields


def _value(value: object) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float):
        return format(value, ".15g")  # whole, without float noise (17.8718, not 17.871800000000007)
    if isinstance(value, Mapping):
        return "\n".join(f"{k}: {_value(v)}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value) or "—"
    return str(value)


def clock_field(at: float | None) -> str:
    return render.clock(at) if at else "—"


class TextModal(ModalScreen[None]):
    """One row's text, whole and wrapped to the width there is."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", tooltip="Back to the list"),
        Binding("c", "copy", "Copy", tooltip="Copy the selection (or all the text) to the clipboard"),
    ]
    DEFAULT_CSS = """
    TextModal { align: center middle; }
    TextModal #dialog {
        width: 100; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    TextModal #title { text-style: bold; color: $accent; height: auto; }
    TextModal TextArea, TextModal TextArea:focus { height: auto; max-height: 30; border: none; padding: 0; }
    TextModal #keys { color: $foreground-muted; height: 1; }
    """

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.title_text, id="title", markup=False)
            yield TextArea(self.text, read_only=True, soft_wrap=True, id="text", highlight_cursor_line=False)
            yield Static("esc closes · c copies · shift+arrows or the mouse select", id="keys")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_close(self) -> None:
        self.dismiss(None)

    def action_copy(self) -> None:
        area = self.query_one(TextArea)
        copied = area.selected_text or self.text
        self.app.copy_to_clipboard(copied)
        what = "the selection" if area.selected_text else "all the text"
        self.query_one("#keys", Static).update(f"copied {what} ({len(copied):,} characters) · esc closes")
