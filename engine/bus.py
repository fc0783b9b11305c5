"""Fan-out of engine events to subscribers that can never stall or break the engine.

Two ways to subscribe:

* queued (default): the engine appends to the subscriber's bounded queue and a dedicated
  thread calls it. A slow subscriber only falls behind; when its queue is full the newest
  events are dropped and counted.
* direct: called inline as the event is emitted. For sinks that only enqueue (a deque's
  ``append``, the console's buffer, the trace writer). Exceptions are still contained.

Internal: import its public names from :mod:`engine`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.events import Event

log = logging.getLogger("tripwire.bus")

Subscriber = Callable[["Event"], object]

_STOP = object()


class _QueuedSubscriber:
    def __init__(self, callback: Subscriber, maxlen: int) -> None:
        self.callback = callback
        self.maxlen = maxlen
        self.queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.dropped = 0
        self.failures = 0
        self.offered = 0
        self.handled = 0
        self._progress = threading.Condition()
        self.thread = threading.Thread(
            target=self._deliver, name=f"tripwire-subscriber-{id(callback):x}", daemon=True
        )
        self.thread.start()

    def offer(self, event: Event) -> None:
        if self.queue.qsize() >= self.maxlen:
            self.dropped += 1
        else:
            self.offered += 1
            self.queue.put(event)

    def _deliver(self) -> None:
        get, get_nowait = self.queue.get, self.queue.get_nowait
        while True:
            batch = [get()]
            try:
                while len(batch) < 512:
                    batch.append(get_nowait())
            except queue.Empty:
                pass
            for event in batch:
                if event is _STOP:
                    return
                try:
                    self.callback(event)  # type: ignore[arg-type]
                except Exception:
                    self.failures += 1
                    if self.failures == 1 or self.failures % 1000 == 0:
                        log.exception("event subscriber %r failed (%d times)", self.callback, self.failures)
            with self._progress:
                self.handled += len(batch)
                self._progress.notify_all()

    def wait_handled(self, timeout: float) -> bool:
        target = self.offered
        with self._progress:
            return self._progress.wait_for(lambda: self.handled >= target, timeout)

    def stop(self) -> None:
        self.queue.put(_STOP)


class EventBus:
    """Delivers every emitted event to every subscriber; ``active`` is False when nobody listens."""

    def __init__(self) -> None:
        self._direct: tuple[Subscriber, ...] = ()
        self._queued: tuple[_QueuedSubscriber, ...] = ()
        self.active = False
        self.direct_failures = 0

    def subscribe(
        self, callback: Subscriber, *, direct: bool = False, maxlen: int = 10_000
    ) -> Callable[[], None]:
        """Subscribe ``callback``; returns a function that unsubscribes it."""
        if direct:
            self._direct = (*self._direct, callback)

            def unsubscribe_direct() -> None:
                self._direct = tuple(s for s in self._direct if s is not callback)
                self._refresh()

            self._refresh()
            return unsubscribe_direct

        sub = _QueuedSubscriber(callback, maxlen)
        self._queued = (*self._queued, sub)
        self._refresh()

        def unsubscribe() -> None:
            if sub in self._queued:
                self._queued = tuple(s for s in self._queued if s is not sub)
                sub.stop()
                self._refresh()

        return unsubscribe

    def _refresh(self) -> None:
        self.active = bool(self._direct or self._queued)

    def emit(self, event: Event) -> None:
        for callback in self._direct:
            try:
                callback(event)
            except Exception:
                self.direct_failures += 1
                if self.direct_failures == 1 or self.direct_failures % 1000 == 0:
                    log.exception("direct event subscriber %r failed", callback)
        for sub in self._queued:
            sub.offer(event)

    def dropped(self) -> int:
        return sum(s.dropped for s in self._queued)

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until queued subscribers have handled everything emitted so far."""
        return all(sub.wait_handled(timeout) for sub in self._queued)

    def close(self) -> None:
        for sub in self._queued:
            sub.stop()
        self._queued = ()
        self._direct = ()
        self._refresh()
