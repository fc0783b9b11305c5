"""What a process tells the fleet of its events: batches on the fleet's event stream.

Every event goes in full (``Event.to_dict``) but the success path's and rejections, which are
counted per tool: encoding each would cost more than the call itself (bench/fleet.py), and the
console sums them anyway (:func:`~engine.fleet.view.tail_events` reads them back).
"""

from __future__ import annotations

import json
from typing import Any

from engine.events import AttemptStarted, CallRejected, CallSucceeded, Event
from engine.fleet.client import Command
from engine.fleet.keys import FleetKeys

EVENTS_PER_ENTRY = 1_000
COUNTED: frozenset[type[Event]] = frozenset({AttemptStarted, CallSucceeded, CallRejected})
"""Events the stream carries as counts per tool, not one by one."""


def event_entries(keys: FleetKeys, member_id: str, maxlen: int, batch: list[Event]) -> list[Command]:
    """The stream entries (``XADD MAXLEN ~ maxlen``) that carry ``batch``, ``member_id``'s events."""
    entries: list[Command] = []
    for start in range(0, len(batch), EVENTS_PER_ENTRY):
        full: list[dict[str, Any]] = []
        counts: dict[str, dict[str, int]] = {}
        for event in batch[start : start + EVENTS_PER_ENTRY]:
            if type(event) in COUNTED:
                per_tool = counts.setdefault(event.event_type, {})
                tool = event.tool_id  # type: ignore[attr-defined]  # every counted type is a ToolEvent
                per_tool[tool] = per_tool.get(tool, 0) + 1
            else:
                full.append(event.to_dict())
        entries.append((
            "XADD", keys.events, "MAXLEN", "~", maxlen, "*",
            "member", member_id, "events", json.dumps(full, default=str, separators=(",", ":")),
            "counts", json.dumps(counts, separators=(",", ":")),
        ))  # fmt: skip
    return entries


__all__ = ["COUNTED", "EVENTS_PER_ENTRY", "event_entries"]
