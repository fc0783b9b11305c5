"""The engine → console buffer: the only thing the engine touches on the console's behalf."""

from __future__ import annotations

from collections import deque

from engine.events import Event

DEFAULT_CAPACITY = 50_000


class EventBridge:
    """A bounded buffer the engine's sink appends to, drained by the console about ten times a second.

    The sink never blocks and never raises: when the console falls behind, the oldest events
    are dropped and counted (the console shows the count). ``deque.append`` and ``popleft`` are
    atomic, so the engine's thread and the console's need no lock.
    """

    __slots__ = ("_queue", "capacity", "dropped", "received")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._queue: deque[Event] = deque(maxlen=capacity)
        self.received = 0
        self.dropped = 0

    def __call__(self, event: Event) -> None:
        queue = self._queue
        if len(queue) == self.capacity:
            self.dropped += 1  # the append below pushes the oldest out
        queue.append(event)
        self.received += 1

    def drain(self, limit: int | None = None) -> list[Event]:
        """Take up to ``limit`` events (all waiting by default), oldest first."""
        queue = self._queue
        count = len(queue) if limit is None else min(limit, len(queue))
        popleft = queue.popleft
        return [popleft() for _ in range(count)]
