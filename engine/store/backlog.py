"""What a recorder batches — events, manifest snapshots, standing-override changes — and what it
keeps while its store refuses writes: the batches, oldest first, within a bound.

Every item a recorder queues has a sequence number (the order the engine emitted it in). A
batch keeps the range it was taken with, so a writer knows how far everything is settled once
a batch is written, whatever became of the items inside it.

Past ``limit`` items, the oldest batches are thinned first: only the turns' starts and ends, the
manifest versions and the standing-override changes stay (a turn is then stored with its outcome,
without its attempts), the rest is lost. If the thinned batches alone are still over the bound,
the oldest go whole. Either way the loss is counted: events, and the turns whose end was dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.events import Event, TurnFinished, TurnStarted
from engine.store.standing import OverrideChange

_KEPT_WHEN_THINNED = (TurnStarted, TurnFinished)


@dataclass(frozen=True, slots=True)
class ManifestSnapshot:
    """A manifest version's content, stored once per digest."""

    digest: str
    tool_id: str
    content: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StandingChange:
    """A standing override set or cleared, written in the transaction of the event that did it."""

    change: OverrideChange


Item = Event | ManifestSnapshot | StandingChange


def split_items(
    items: list[Item],
) -> tuple[list[Event], list[tuple[str, str, Mapping[str, Any]]], list[OverrideChange], int]:
    """The events, the manifest snapshots, the standing-override changes, and how many of the
    events are TurnFinished."""
    events: list[Event] = []
    manifests: list[tuple[str, str, Mapping[str, Any]]] = []
    overrides: list[OverrideChange] = []
    finished = 0
    for item in items:
        if isinstance(item, Event):
            events.append(item)
            if type(item) is TurnFinished:
                finished += 1
        elif isinstance(item, StandingChange):
            overrides.append(item.change)
        else:
            manifests.append((item.digest, item.tool_id, item.content))
    return events, manifests, overrides, finished


@dataclass(slots=True)
class HeldBatch:
    base: int
    """The sequence number of its first item."""
    size: int
    """How many items it was taken with: its sequence numbers end before ``base + size``."""
    items: list[Any]
    thinned: bool = False

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True, slots=True)
class Loss:
    events: int
    turns: int
    """Turns whose TurnFinished was dropped."""
    ranges: list[tuple[int, int]]
    """The sequence ranges (start, end) of the batches something was lost from."""
    settled: int | None
    """The end of the last batch dropped whole: everything before it is settled (written or lost)."""


def finished_turns(items: list[Any]) -> int:
    return sum(1 for item in items if type(item) is TurnFinished)


class Backlog:
    """Batches a store refused, oldest first, kept to be written when it takes writes again."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the backlog limit must be at least 1, got {limit}")
        self.limit = limit
        self.items = 0
        self._batches: deque[HeldBatch] = deque()

    def __bool__(self) -> bool:
        return bool(self._batches)

    def hold(self, batch: HeldBatch) -> None:
        self._batches.append(batch)
        self.items += len(batch.items)

    def first(self) -> HeldBatch:
        return self._batches[0]

    def written(self) -> HeldBatch:
        """The first batch was written (what was left of it): forget it."""
        batch = self._batches.popleft()
        self.items -= len(batch.items)
        return batch

    def shrunk(self, batch: HeldBatch, remaining: list[Any]) -> None:
        """Part of ``batch`` (the first) was written: only ``remaining`` is held now."""
        self.items -= len(batch.items) - len(remaining)
        batch.items = remaining

    def trim(self) -> Loss | None:
        """Bring the backlog within its limit: thin the oldest batches, then drop the oldest."""
        if self.items <= self.limit:
            return None
        events = turns = 0
        ranges: list[tuple[int, int]] = []
        settled = None
        for batch in self._batches:
            if self.items <= self.limit:
                break
            if batch.thinned:
                continue
            kept = [i for i in batch.items if not isinstance(i, Event) or isinstance(i, _KEPT_WHEN_THINNED)]
            events += len(batch.items) - len(kept)
            self.items -= len(batch.items) - len(kept)
            batch.items, batch.thinned = kept, True
            ranges.append((batch.base, batch.end))
        while self.items > self.limit and len(self._batches) > 1:  # one batch may be over it alone
            batch = self._batches.popleft()
            events += sum(1 for i in batch.items if isinstance(i, Event))
            turns += finished_turns(batch.items)
            self.items -= len(batch.items)
            ranges.append((batch.base, batch.end))
            settled = batch.end
        return Loss(events, turns, ranges, settled) if ranges else None

    def drain(self) -> list[HeldBatch]:
        """Everything held, oldest first, leaving the backlog empty (a recorder that stops)."""
        batches = list(self._batches)
        self._batches.clear()
        self.items = 0
        return batches
