"""The console's replay player: recorded events played through the views, a turn or a time range,
event by event (not to be confused with :mod:`engine.replay`, which runs a recorded turn again and
checks the engine's decisions).

:class:`Player` is pure: it holds the recorded events and the tools' state before the
first of them, folds them into a :class:`~console.model.ConsoleModel` up to a position, and moves
that position — playing at a speed on a clock it is given, or stepping one event forward or
back. The app shows ``session.model`` through the same views as live. Stepping back re-folds
from the start: even a long range (tens of thousands of events) folds in a few milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from console.model import Changes, ConsoleModel, ManifestView, ToolSeed
from engine.events import Event, TurnStarted
from engine.store import StoredTurn, TraceStore
from engine.strategies.breaker.machine import BreakerState

SPEEDS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
"""The playback speeds ``+`` and ``-`` step through."""


@dataclass(frozen=True, slots=True)
class PlayerSource:
    """What the player plays: the events in order, the tools as they were before, and a name."""

    label: str
    events: tuple[Event, ...]
    seeds: tuple[ToolSeed, ...]


class Player:
    """A position in recorded events, and the model folded up to it."""

    def __init__(self, source: PlayerSource, *, speed: float = 1.0) -> None:
        if not source.events:
            raise ValueError(f"nothing to replay in {source.label}")
        self.source = source
        self.events = source.events
        self.speed = speed
        self.playing = False
        self.position = 0
        """How many events are folded into :attr:`model`."""
        self.model = ConsoleModel(source.seeds)
        self.clock = self.start
        """Replay engine time: events with ``t`` up to here are shown."""

    @property
    def start(self) -> float:
        return self.events[0].t

    @property
    def end(self) -> float:
        return self.events[-1].t

    @property
    def finished(self) -> bool:
        return self.position >= len(self.events)

    @property
    def now(self) -> float:
        return self.clock

    def advance(self, wall_s: float) -> Changes:
        """Play ``wall_s`` seconds of real time at :attr:`speed` (nothing while paused)."""
        if not self.playing:
            return Changes()
        self.clock = min(self.clock + wall_s * self.speed, self.end)
        changes = self._fold_until(self.clock)
        if self.finished:
            self.playing = False
        return changes

    def _fold_until(self, t: float) -> Changes:
        start = self.position
        end = start
        events = self.events
        while end < len(events) and events[end].t <= t:
            end += 1
        self.position = end
        return self.model.apply(list(events[start:end]))

    def toggle(self) -> None:
        if self.finished:  # at the end, play starts over
            self.seek(0)
        self.playing = not self.playing

    def step(self, delta: int) -> Changes:
        """One event forward (``+1``) or back (``-1``); playback pauses."""
        self.playing = False
        return self.seek(self.position + delta)

    def seek(self, position: int) -> Changes:
        """Show the first ``position`` events (clamped), with the clock at the last of them."""
        position = max(0, min(position, len(self.events)))
        if position >= self.position:
            changes = self.model.apply(list(self.events[self.position : position]))
        else:  # back: fold again from the start
            self.model = ConsoleModel(self.source.seeds)
            changes = self.model.apply(list(self.events[:position]))
            changes.tools |= set(self.model.tools)  # every view must redraw
        self.position = position
        self.clock = self.events[position - 1].t if position else self.start
        return changes

    def faster(self, steps: int) -> float:
        """Move ``steps`` along :data:`SPEEDS`; returns the new speed."""
        index = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - self.speed))
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, index + steps))]
        return self.speed


def seeds_from(events: Sequence[Event], store: TraceStore) -> tuple[ToolSeed, ...]:
    """The tools as the first recorded turn of each found them: its breaker snapshot and the
    manifest version in force (when the engine recorded them), else closed and unknown."""
    seeds: dict[str, ToolSeed] = {}
    for event in events:
        if not isinstance(event, TurnStarted):
            continue
        breakers = event.breakers or {}
        manifests = event.manifests or {}
        for tool_id in {*breakers, *manifests}:
            if tool_id in seeds:
                continue
            snapshot = breakers.get(tool_id) or {}
            half_open_in = snapshot.get("half_open_in_s")
            manifest = None
            digest = manifests.get(tool_id)
            content = store.manifest(digest) if digest else None
            if digest and content is not None:
                manifest = ManifestView(digest, 0, "(as recorded)", event.at, content)
            seeds[tool_id] = ToolSeed(
                tool_id,
                BreakerState(snapshot.get("state", "CLOSED")),
                int(snapshot.get("consecutive_failures") or 0),
                event.t + float(half_open_in) if half_open_in is not None else None,
                manifest,
            )
    return tuple(seeds[t] for t in sorted(seeds))


def turn_source(store: TraceStore, stored: StoredTurn) -> PlayerSource:
    events = tuple(stored.events)
    return PlayerSource(f"turn {stored.row.turn_id}", events, seeds_from(events, store))


def range_source(store: TraceStore, *, since: float | None, until: float | None, label: str) -> PlayerSource:
    """The turns that started in the range, whole, and the events outside turns in it, in the
    order they happened (turns of one engine overlap; wall-clock order holds across restarts)."""
    events = tuple(sorted(store.events(since=since, until=until), key=lambda e: e.at))
    return PlayerSource(label, events, seeds_from(events, store))
