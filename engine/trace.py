"""The turn trace (spec-map trace.decisions): every event of one turn, in time order.

Events at the same instant are ordered by call (dependency depth, then turn order) rather
than by how tasks happened to be scheduled, so the same plan and seed give the same trace.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.events import Event, ToolEvent


@dataclass(slots=True)
class TurnTrace:
    turn_id: str
    events: list[Event] = field(default_factory=list)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def of(self, *event_types: str) -> list[Event]:
        """The events of the given ``event_type`` names."""
        return [e for e in self.events if e.event_type in event_types]

    def for_call(self, call_id: str) -> list[Event]:
        return [e for e in self.events if isinstance(e, ToolEvent) and e.call_id == call_id]

    def messages(self) -> list[str]:
        """One line per event, for people."""
        return [e.describe() for e in self.events]

    def to_dicts(self) -> list[dict[str, Any]]:
        """The JSON shape of spec-map trace.shape: ``event_type``, ``tool_id``, ``timestamp``, … per event."""
        return [e.to_dict() for e in self.events]

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps({"turn_id": self.turn_id, "events": self.to_dicts()}, indent=indent, default=str)
