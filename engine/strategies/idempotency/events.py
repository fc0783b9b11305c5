"""Internal: the idempotency key a call was given. Import it from :mod:`engine.strategies.idempotency`."""

from __future__ import annotations

from dataclasses import dataclass

from engine.event import ToolEvent


@dataclass(slots=True, kw_only=True)
class IdempotencyKeyAssigned(ToolEvent):
    """A call of a keyed side-effecting tool was given its idempotency key, the same for all its sends.

    Every attempt, hedge and keyed alternative of the call sends this key."""

    key: str
    source: str
    """Where it came from: ``given`` (the call's context: a caller, an adapter, the LLM executor's
    tool-call id, or the call an alternative stands in for), ``argument`` (the caller passed the
    keyed argument), ``turn`` (the turn id and call id) or ``generated`` (drawn from the engine's rng)."""
    argument: str | None
    """The argument the key is passed as; None: the tool reads it from the context."""

    def describe(self) -> str:
        how = f"as argument {self.argument}" if self.argument is not None else "in the call's context"
        return f"{self.tool_id} call {self.call_id} keyed {self.key} ({self.source}, passed {how})"
