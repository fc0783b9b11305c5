"""TraceRecorder: an engine's events into a trace store, from a writer thread, durable when it says so.

The engine-side sink only appends to a deque. The writer thread drains it every ``batch_ms``
(or as soon as ``max_batch`` items wait) and commits each batch in one transaction.

With ``durability="turn"`` the recorder is ``engine.recorder``: ``run_turn`` returns once the
turn's events are committed, and raises :class:`~engine.errors.TurnNotPersisted` (the turn's
result on ``.result``) when they cannot be: at once when the store cannot take writes (a full
disk, read-only, an I/O error), after ``durable_timeout_s`` when another process holds the
write lock. Its message is SQLite's own ("database or disk is full").

A batch the store refuses is never dropped: it is kept, with everything after it, and written
when the store takes writes again, retried with a backoff of up to ``max_backoff_s``. The
backlog is bounded (``max_held`` events, see :mod:`engine.store.backlog`); what goes past it is
counted as lost and logged once. Failures are logged once per cause, then a count a minute,
then once when writes work again (:class:`~engine.store.failures.FailureLog`).

Attaching records what the engine never announces (:mod:`engine.store.starting`): the manifest
versions in force, and every tool's breaker as recording starts. With ``overrides="keep"`` it puts
back the operators' standing overrides and keeps them (:mod:`engine.store.standing`). The writer
thread also keeps the store's
record of this process alive (a heartbeat every few seconds, from the start), reconciles turns
left running by writers that are gone, and applies a
:class:`~engine.store.retention.RetentionPolicy` when given one, in short steps between batches.
Closing the recorder writes what is queued and finishes as ``interrupted`` every turn it saw
start and not finish.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Self

from engine.closing import ClosedOnExit
from engine.errors import TraceStoreError
from engine.events import (
    BreakerDisabled,
    BreakerReset,
    BreakerTripped,
    Event,
    ManifestLoaded,
    TurnFinished,
    TurnStarted,
)
from engine.store.backlog import Backlog, HeldBatch, Item, Loss, ManifestSnapshot, StandingChange, split_items
from engine.store.codec import ATTEMPT, FINISHED, STARTED
from engine.store.failures import FailureLog, StoreWriteError
from engine.store.retention import RetentionPolicy, RetentionSchedule
from engine.store.standing import OVERRIDE_POLICIES, OverrideKeeper, OverridePolicy
from engine.store.starting import starting_events
from engine.store.store import TraceStore
from engine.store.waits import PENDING, DeadlineKeeper, DurableWait, Verdict, settle_waits
from engine.store.writers import HEARTBEAT_S

if TYPE_CHECKING:
    from engine.engine import Engine

log = logging.getLogger("tripwire.store")

RECONCILE_S = 60.0
"""How often a recorder looks for turns left running by writers that are gone."""


_MANIFEST, _OVERRIDE = ATTEMPT + 1, ATTEMPT + 2
_SINK_ACTIONS: dict[type[Event], int] = {
    TurnStarted: STARTED,
    TurnFinished: FINISHED,
    ManifestLoaded: _MANIFEST,
    BreakerTripped: _OVERRIDE,
    BreakerDisabled: _OVERRIDE,
    BreakerReset: _OVERRIDE,
}
"""The events the recorder's sink looks at; every other event is only appended."""


@dataclass(frozen=True, slots=True)
class RecorderStats:
    """The recorder's counters so far (:meth:`TraceRecorder.stats`)."""

    written: int
    """Events committed."""
    batches: int
    errors: int
    """Failed attempts to write a batch (each batch is kept and tried again)."""
    dropped: int
    """Events lost: past the backlog's bound, unwritable (a bug), or still unwritten at close."""
    pending: int
    """Items not settled yet: queued, being written, or held while the store refuses writes."""
    not_persisted: int = 0
    """Turns finished whose end is not in the store: held while it refuses writes, or lost."""
    held: int = 0
    """Items kept while the store refuses writes."""
    problem: str | None = None
    """Why the store refuses writes now, in SQLite's words; None while it takes them."""


class TraceRecorder(ClosedOnExit):
    """Records an engine's events into a :class:`TraceStore` from a writer thread; see the module
    docstring. ``"batch"`` durability trades the guarantee for speed: ``run_turn`` never waits,
    and a crash may lose the last ``batch_ms`` of events."""

    def __init__(
        self,
        store: TraceStore,
        *,
        durability: Literal["turn", "batch"] = "turn",
        batch_ms: float = 50,
        max_batch: int = 10_000,
        durable_timeout_s: float = 10.0,
        max_held: int = 100_000,
        max_backoff_s: float = 1.0,
        retention: RetentionPolicy | None = None,
        overrides: OverridePolicy = "ignore",
    ) -> None:
        if durability not in ("turn", "batch"):
            raise ValueError(f"durability must be 'turn' or 'batch', got {durability!r}")
        if overrides not in OVERRIDE_POLICIES:
            raise ValueError(f"overrides must be one of {', '.join(OVERRIDE_POLICIES)}, got {overrides!r}")
        if not batch_ms > 0 or max_batch < 1:
            raise ValueError(
                f"batch_ms must be positive and max_batch at least 1, got {batch_ms}, {max_batch}"
            )
        if store.readonly:
            raise StoreWriteError(store.path, "opened read-only: cannot record into it", "read-only")
        self.store = store
        self.durability = durability
        self.batch_s = batch_ms / 1000.0
        self.max_batch = max_batch
        self.durable_timeout_s = durable_timeout_s
        self.max_backoff_s = max_backoff_s
        self.retention = RetentionSchedule(retention) if retention is not None else None
        self._keeper = OverrideKeeper(store, overrides) if overrides != "ignore" else None
        # Engine side: the sink appends and counts.
        self._queue: deque[Item] = deque()
        self._enqueued = 0
        self._finished = 0
        """TurnFinished events enqueued."""
        self._marks: dict[str, int] = {}
        """Durable turns: the sequence number after their TurnFinished."""
        self._starts: dict[str, int] = {}
        """Durable turns: the sequence number of their TurnStarted."""
        self._open: dict[str, None] = {}
        """Turns seen to start and not to finish (closing finishes them as interrupted)."""
        self._digests: set[str] = set()
        self._engine: Engine | None = None
        self._unsubscribe: Callable[[], None] | None = None
        # Writer side: only the writer thread changes these (under ``_done`` where others wait).
        self._taken = 0
        self._settled = 0
        """Every item before this sequence number is written or lost."""
        self._lost: deque[tuple[int, int, str]] = deque(maxlen=1024)
        """Sequence ranges something was lost from, newest last (older ones concern turns long done)."""
        self._backlog = Backlog(max_held)
        self._failure: StoreWriteError | None = None
        self._failures_in_row = 0
        self._retry_at = 0.0
        self._failures = FailureLog(log, f"trace recorder: writing to {store.path}")
        self._loss_logged = False
        self._written = self._batches = self._errors = self._dropped = self._lost_turns = 0
        self._finished_written = 0
        self._beat_at = self._reconcile_at = 0.0
        self._wake = threading.Event()
        self._force = False
        self._done = threading.Condition()
        self._waiters: list[DurableWait] = []  # durable turns waiting for a commit (under ``_done``)
        self._deadlines = DeadlineKeeper(self._expire, durable_timeout_s)
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- engine side ---------------------------------------------------------------------

    def attach(self, engine: Engine) -> Self:
        """Subscribe to ``engine`` (inline: the sink only enqueues) and start the writer thread."""
        if self._engine is not None:
            raise RuntimeError("this recorder is already attached to an engine")
        self._engine = engine
        for event in starting_events(engine, keeps_overrides=self._keeper is not None):
            self._sink(event)  # before subscribing: an engine announces neither
        self._unsubscribe = engine.subscribe(self._sink, direct=True)
        if self._keeper is not None:
            self._keeper.start(engine)  # restores are announced: this recorder records them
        if self.durability == "turn":
            engine.recorder = self
            self._deadlines.start()
        self._start()
        return self

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tripwire-trace-writer", daemon=True)
            self._thread.start()

    def _sink(self, event: Event) -> None:
        """Called inline in the engine's thread: append and count, nothing that can block."""
        queue = self._queue
        what = _SINK_ACTIONS.get(type(event))
        if what is None:
            queue.append(event)
        else:
            e: Any = event
            if what == STARTED:
                if e.manifests:
                    for tool_id, digest in e.manifests.items():
                        self._snapshot(digest, tool_id)
                self._open[e.turn_id] = None
                if self.durability == "turn":
                    self._starts[e.turn_id] = self._enqueued
            elif what == _MANIFEST:
                self._snapshot(e.digest, e.tool_id, e.manifest)
            elif what == _OVERRIDE and self._keeper is not None:
                change = self._keeper.change(event)
                if change is not None:  # written in the transition's own transaction
                    queue.append(StandingChange(change))
                    self._enqueued += 1
            queue.append(event)
            if what == FINISHED:
                self._finished += 1
                self._open.pop(e.turn_id, None)
                if self.durability == "turn":
                    self._marks[e.turn_id] = self._enqueued + 1
        self._enqueued += 1
        if len(queue) >= self.max_batch and not self._wake.is_set():
            # Once: set on every event (10 a turn with batch durability, 50 concurrent), it contended.
            self._wake.set()

    def _snapshot(self, digest: str, tool_id: str, content: dict[str, Any] | None = None) -> None:
        """Queue a manifest version's content, once per digest, if it is still the one in force.

        ``content``: the version as data when the caller has it (a ManifestLoaded carries it).
        """
        engine = self._engine
        if digest in self._digests or engine is None:
            return
        try:
            if engine.manifests.digest(tool_id) != digest:
                return  # superseded already: its content is gone
            if content is None:
                content = engine.manifest(tool_id).model_dump(mode="json")
        except Exception as exc:
            log.warning("trace recorder: could not snapshot manifest %s of %s: %s", digest, tool_id, exc)
            return
        self._digests.add(digest)
        self._queue.append(ManifestSnapshot(digest, tool_id, content))
        self._enqueued += 1

    async def turn_finished(self, turn_id: str) -> TraceStoreError | None:
        """With durability "turn": None once everything up to the turn's TurnFinished is committed;
        the store's error (SQLite's words) when it cannot be: at once if the store cannot take
        writes, after ``durable_timeout_s`` if it stays locked. Turns finishing together share a
        commit; the writer wakes them with one call into their loop (:mod:`engine.store.waits`)."""
        # No mark: a turn id run twice at once; waiting for everything so far is always enough.
        mark = self._marks.pop(turn_id, None) or self._enqueued
        start = self._starts.pop(turn_id, 0)
        if self._settled >= mark and not self._lost:
            return None
        waiter = DurableWait(mark, start, time.monotonic() + self.durable_timeout_s, self.store.path)
        with self._done:
            if waiter.decide(self._verdict(waiter, time.monotonic())):
                return waiter.problem
            self._waiters.append(waiter)
        if not self._wake.is_set():
            self._wake.set()
        try:
            await waiter.wait()
        finally:
            if not waiter.done:  # cancelled: nobody waits for it any more
                with self._done, contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        return waiter.problem

    def _verdict(self, wait: DurableWait, now: float) -> Verdict:
        """Whether a durable wait is over (holding ``_done``): durable, or why not (something in
        its sequence range [start, mark) may have been lost, the store refuses writes, …)."""
        lost = next((why for lo, hi, why in self._lost if lo < wait.mark and wait.start < hi), None)
        if lost is not None:
            return f"events lost: {lost}"
        if self._settled >= wait.mark:
            return None
        failure = self._failure
        if failure is not None and failure.kind != "locked":
            return failure.problem
        if self._thread is None:
            return "the recorder stopped before writing it"
        if now >= wait.deadline:
            limit = f"{self.durable_timeout_s:g}s"
            return f"{failure.problem} (for over {limit})" if failure else f"not written within {limit}"
        return PENDING

    def _expire(self) -> DurableWait | None:  # the deadline keeper's: the oldest wait left
        with self._done:
            self._notify()
            return next(iter(self._waiters), None)

    def _notify(self) -> None:
        """What waiters wait for changed (holding ``_done``): wake ``flush``, settle the durable waits."""
        self._done.notify_all()
        if self._waiters:
            now, verdict = time.monotonic(), self._verdict
            self._waiters = settle_waits(self._waiters, lambda wait: verdict(wait, now))

    # --- writer side ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.batch_s)
            self._wake.clear()
            stopping, force, self._force = self._stopping, self._force, False
            try:
                self._cycle(force=force or stopping)
                if not stopping and self._maintain():
                    self._wake.set()  # more retention to do: after the next batch
            except Exception:  # a bug here must not stop recording for good
                log.exception("trace recorder: writer failed")
            if stopping:
                return

    def _cycle(self, *, force: bool) -> None:
        """Write what is held, then what is queued, in order; stop at the first refusal."""
        if self._failure is not None and not force and time.monotonic() < self._retry_at:
            self._hold_queue()
            return
        while self._backlog:
            held = self._backlog.first()
            if not self._attempt(held):
                self._hold_queue()
                return
            self._backlog.written()
            self._settle(held)
        queue = self._queue
        while queue:
            batch = self._take()
            if not self._attempt(batch):
                self._backlog.hold(batch)
                self._hold_queue()
                return
            self._settle(batch)

    def _take(self) -> HeldBatch:
        items: list[Item] = []
        popleft = self._queue.popleft
        with contextlib.suppress(IndexError):
            for _ in range(self.max_batch):
                items.append(popleft())
        batch = HeldBatch(self._taken, len(items), items)
        self._taken += len(items)
        return batch

    def _hold_queue(self) -> None:
        """While the store refuses writes: move what is queued into the backlog, within its bound."""
        while self._queue:
            self._backlog.hold(self._take())
        loss = self._backlog.trim()
        if loss is not None:
            self._lose(loss)

    def _attempt(self, batch: HeldBatch) -> bool:
        """Write ``batch``; False when the store refuses it (then it is kept, maybe shrunk)."""
        events, manifests, overrides, finished = split_items(batch.items)
        try:
            self.store.write(events, manifests=manifests, overrides=overrides)
        except StoreWriteError as exc:
            if exc.store_cannot_write:
                self._refused(exc)
                return False
            return self._write_around(batch, exc)
        except Exception as exc:
            return self._write_around(batch, exc)
        self._written += len(events)
        self._finished_written += finished
        self._batches += 1
        if self._failure is not None:
            self._recovered()
        return True

    def _write_around(self, batch: HeldBatch, exc: Exception) -> bool:
        """A batch the store cannot write at all (a bug): write it item by item, losing only the
        items that fail. False if the store refuses writes meanwhile (the rest is kept)."""
        cause = f"{type(exc).__name__}: {exc}" if not isinstance(exc, TraceStoreError) else exc.problem
        log.error("trace recorder: a batch cannot be written (%s); writing it one event at a time", cause)
        items = batch.items
        for i, item in enumerate(items):
            events, manifests, overrides, finished = split_items([item])
            try:
                self.store.write(events, manifests=manifests, overrides=overrides)
            except StoreWriteError as item_exc:
                if item_exc.store_cannot_write:
                    self._backlog_shrink(batch, items[i:])
                    self._refused(item_exc)
                    return False
                self._unwritable(batch, item, item_exc.problem)
            except Exception as item_exc:
                self._unwritable(batch, item, f"{type(item_exc).__name__}: {item_exc}")
            else:
                self._written += len(events)
                self._finished_written += finished
                if self._failure is not None:
                    self._recovered()
        self._batches += 1
        return True

    def _backlog_shrink(self, batch: HeldBatch, remaining: list[Item]) -> None:
        if self._backlog and self._backlog.first() is batch:
            self._backlog.shrunk(batch, remaining)
        else:
            batch.items = remaining

    def _unwritable(self, batch: HeldBatch, item: Item, problem: str) -> None:
        self._dropped += 1
        self._lost_turns += type(item) is TurnFinished
        with self._done:
            self._lost.append(
                (batch.base, batch.end, f"a {type(item).__name__} cannot be written: {problem}")
            )
            self._notify()
        log.error("trace recorder: dropped a %s that cannot be written: %s", type(item).__name__, problem)

    def _refused(self, exc: StoreWriteError) -> None:
        self._errors += 1
        self._failures_in_row += 1
        delay = min(self.max_backoff_s, self.batch_s * 2 ** min(self._failures_in_row - 1, 16))
        self._retry_at = time.monotonic() + delay
        self._failures.failed(
            exc.problem.removeprefix("write failed: "),
            detail="; keeping the events to write when it recovers",
        )
        with self._done:
            self._failure = exc
            self._notify()

    def _recovered(self) -> None:
        self._failures.recovered(f"; {self._dropped:,} events lost so far" if self._dropped else "")
        self._failures_in_row = 0
        self._loss_logged = False
        with self._done:
            self._failure = None
            self._notify()

    def _lose(self, loss: Loss) -> None:
        self._dropped += loss.events
        self._lost_turns += loss.turns
        if not self._loss_logged:
            self._loss_logged = True
            log.error(
                "trace recorder: %s: over %d events held while it refuses writes: dropping the oldest"
                " (turn starts and ends are kept while they fit); the losses are counted",
                self.store.path, self._backlog.limit,
            )  # fmt: skip
        with self._done:
            why = f"over {self._backlog.limit:,} events held while the store refused writes"
            self._lost.extend((lo, hi, why) for lo, hi in loss.ranges)
            if loss.settled is not None:
                self._settled = max(self._settled, loss.settled)
            self._notify()

    def _settle(self, batch: HeldBatch) -> None:
        with self._done:
            self._settled = batch.end
            self._notify()

    def _maintain(self) -> bool:
        """Heartbeat, reconciling and retention, when due and the store takes writes. Returns
        whether more retention is waiting."""
        if self._failure is not None:
            return False
        now, store = time.monotonic(), self.store
        try:
            if now >= self._beat_at:
                self._beat_at = now + HEARTBEAT_S
                store.heartbeat(register=True)  # an idle engine is alive too
            if now >= self._reconcile_at:
                self._reconcile_at = now + RECONCILE_S
                store.reconcile()
            if self.retention is not None and self.retention.due():  # one short step per cycle
                return self.retention.step(store)
        except StoreWriteError as exc:  # the next batch will say so, once
            log.debug("trace recorder: upkeep of %s failed: %s", store.path, exc)
        return False

    # --- control -------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until everything enqueued so far is written (or lost); False on timeout. A store
        that refuses writes is tried again at once, and then as often as every ``batch_ms``."""
        target = self._enqueued
        if self._settled >= target:
            return True
        if self._thread is None:
            self._cycle(force=True)
            return self._settled >= target
        self._force = True
        self._wake.set()
        deadline = time.monotonic() + timeout
        with self._done:
            while self._settled < target:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return self._settled >= target
                self._done.wait(min(left, self.batch_s))
                self._force = True  # a retry waits for its backoff: a flush asks for it now
                self._wake.set()
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Detach from the engine, write what is queued, finish as ``interrupted`` the turns seen
        to start and not to finish, and stop the writer (the store stays open)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._keeper is not None:
            self._keeper.stop()
        engine = self._engine
        if engine is not None and engine.recorder is self:
            engine.recorder = None
        flushed = self.flush(timeout)
        unfinished = list(self._open)
        self._open.clear()
        if unfinished and flushed:
            try:
                self.store.interrupt_turns(
                    unfinished, "interrupted: recording stopped before the turn finished"
                )
            except TraceStoreError as exc:
                log.warning("trace recorder: could not mark %d unfinished turn(s) interrupted: %s",
                            len(unfinished), exc)  # fmt: skip
        thread = self._thread
        if thread is not None:
            self._stopping = True
            self._wake.set()
            thread.join(timeout)
            with self._done:
                self._thread = None
                self._notify()
        self._deadlines.stop(timeout)
        self._abandon()

    def _abandon(self) -> None:
        """What is still unwritten after the last attempt is lost: counted and said once."""
        if self._thread is not None and self._thread.is_alive():
            return  # still writing (a join timed out): leave it be
        held = self._backlog.drain()
        lost = [item for batch in held for item in batch.items] + list(self._queue)
        self._queue.clear()
        if not lost and self._settled >= self._enqueued:
            return
        events = sum(1 for item in lost if isinstance(item, Event))
        self._dropped += events
        self._lost_turns += sum(1 for item in lost if type(item) is TurnFinished)
        problem = self._failure.problem if self._failure is not None else "the writer did not finish in time"
        log.error("trace recorder: closed with %d event(s) not written to %s: %s", events, self.store.path,
                  problem)  # fmt: skip
        with self._done:
            self._lost.append((self._settled, self._enqueued, f"the recorder closed: {problem}"))
            self._settled = self._enqueued
            self._notify()

    @property
    def stats(self) -> RecorderStats:
        failure = self._failure
        return RecorderStats(
            self._written,
            self._batches,
            self._errors,
            self._dropped,
            self._enqueued - self._settled,
            # Failing, every turn end not written counts (queued or held); else only the lost ones.
            self._finished - self._finished_written if failure is not None else self._lost_turns,
            self._backlog.items,
            failure.problem if failure is not None else None,
        )
