"""Export jobs run on a thread of their own, so that a slow or unreachable collector never stalls
the thread that builds spans from events (it would fill its event queue and drop events).

Used by :mod:`engine.exporters.otel` for the exporters it is handed: each job is one batch of
spans or one histogram export. At most ``max_jobs`` wait; past that the oldest is dropped and its
items counted (``dropped``), as a ``BatchSpanProcessor`` drops spans when its queue is full.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("tripwire.otel")

Job = Callable[[], bool]
"""An export: True when the exporter took it."""


class BackgroundSender:
    """Runs jobs in order on a daemon thread named ``name``."""

    def __init__(self, name: str, *, max_jobs: int = 64) -> None:
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1, got {max_jobs}")
        self.max_jobs = max_jobs
        self.dropped = 0
        """Items (spans, data points) of jobs dropped because ``max_jobs`` were waiting."""
        self.failures = 0
        """Jobs that failed (the exporter said so or raised; logged)."""
        self._jobs: deque[tuple[Job, int]] = deque()
        self._busy = False
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job, items: int) -> None:
        """Queue ``job`` (``items`` things to export); never blocks."""
        with self._changed:
            if self._closed:
                self.dropped += items
                return
            if len(self._jobs) >= self.max_jobs:
                _, lost = self._jobs.popleft()
                self.dropped += lost
                if self.dropped == lost or self.dropped % 10_000 < lost:  # the first, then now and then
                    log.warning("the collector is not keeping up: %d items dropped so far", self.dropped)
            self._jobs.append((job, items))
            self._changed.notify_all()

    def wait(self, timeout_s: float) -> bool:
        """Whether every job submitted so far was run within ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._jobs and not self._busy, max(timeout_s, 0.0))

    def close(self, timeout_s: float) -> None:
        """Run what waits (for at most ``timeout_s``), then stop the thread."""
        deadline = time.monotonic() + timeout_s
        self.wait(timeout_s)
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(max(deadline - time.monotonic(), 0.0))

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._jobs or self._closed)
                if not self._jobs:
                    return  # closed, nothing left
                job, _ = self._jobs.popleft()
                self._busy = True
            try:
                ok = job()
            except Exception:  # the exporter's failure must not stop the next jobs
                ok = False
                log.exception("an OpenTelemetry export failed")
            with self._changed:
                if not ok:
                    self.failures += 1
                self._busy = False
                self._changed.notify_all()


__all__ = ["BackgroundSender", "Job"]
