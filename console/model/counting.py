"""Events per second over a rolling window: the board's refusal and wait counts."""

from __future__ import annotations

import math
from collections import deque


class RollingCount:
    """Events per second over the last ``window_s`` seconds, ``now``'s included (the board's
    window, as :class:`~engine.metrics.ToolMetrics` counts it)."""

    __slots__ = ("_seconds", "window_s")

    def __init__(self, window_s: int) -> None:
        self.window_s = window_s
        self._seconds: deque[list[int]] | None = None  # [second, count], oldest first; made on first use

    def add(self, t: float) -> None:
        second = math.floor(t)
        seconds = self._seconds
        if seconds is None:
            seconds = self._seconds = deque()
        if seconds and seconds[-1][0] >= second:  # the same second (or a clock that stood still)
            seconds[-1][1] += 1
        else:
            seconds.append([second, 1])
        while seconds[0][0] <= second - self.window_s:
            seconds.popleft()

    def total(self, now: float) -> int:
        if not self._seconds:
            return 0
        first = math.floor(now) - self.window_s + 1
        return sum(n for second, n in self._seconds if second >= first)

    def clear(self) -> None:
        self._seconds = None
