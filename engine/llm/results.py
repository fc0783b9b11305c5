"""What the model gets back: one :class:`ToolResultItem` per call id, a :class:`ToolBatch` per message.

Executed-tool counting (spec-map kinds.count-executed): only kinds with ``executed=True`` count, and a batch
fails only when it had calls and none executed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.kinds import ErrorKind
from engine.llm.tool_errors import ToolExecutionError
from engine.outcomes import TurnResult


@dataclass(frozen=True, slots=True)
class ToolResultItem:
    """The one result for one call id."""

    call_id: str
    tool_name: str
    content: str
    is_error: bool
    kind: ErrorKind | None
    executed: bool
    """Did the tool run? Only kinds with ``executed=True`` count (spec-map kinds.count-executed)."""
    retryable: bool | None
    alternative: str | None
    status: str
    """A :class:`CallStatus` value, or ``"not_run"`` when the executor refused the call."""
    error: ToolExecutionError | None = None

    def to_openai_message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}

    def to_anthropic_block(self) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": self.call_id,
            "content": self.content,
            "is_error": self.is_error,
        }


@dataclass(slots=True)
class ToolBatch:
    """The results of one assistant message's tool calls, in the calls' order."""

    items: list[ToolResultItem]
    turn: TurnResult | None = None

    @property
    def executed(self) -> int:
        return sum(item.executed for item in self.items)

    @property
    def failed(self) -> bool:
        """Failed only when there were calls and none of them executed (spec-map kinds.turn-failed)."""
        return bool(self.items) and self.executed == 0

    def to_openai_messages(self) -> list[dict[str, Any]]:
        return [item.to_openai_message() for item in self.items]

    def to_anthropic_message(self) -> dict[str, Any]:
        return {"role": "user", "content": [item.to_anthropic_block() for item in self.items]}
