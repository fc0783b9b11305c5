"""Retention: old turns leave the store, by age and by size, in small steps that never hold up writes.

:meth:`StoreRetention.prune` removes everything a rule matches in one transaction (``tripwire
traces prune``). A recorder given a :class:`RetentionPolicy` applies it in the background
instead: every ``interval_s`` its writer thread removes the oldest turns that are too old, or
while the store's data is over ``max_bytes``, a batch at a time between the batches it writes.
A batch is one short transaction whose size adapts so that it takes about ``step_s``.

Size is the data SQLite holds (pages in use): the file does not shrink when rows go, the pages
they free are reused, so a store under a size policy stops growing at about that size.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from engine.store.base import StoreCore
from engine.store.failures import write_error
from engine.store.opening import rollback

log = logging.getLogger("tripwire.store")

DEFAULT_MAX_AGE_S = 7 * 86400.0
"""Retention's default: turns older than a week are removed."""
DEFAULT_MAX_BYTES = 1 << 30
"""Retention's default: the oldest turns are removed while the store is over 1 GiB."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_DURATION_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)
_OFF = ("off", "none", "0")


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What the store keeps: turns younger than ``max_age_s``, data up to ``max_bytes``
    (None: no limit of that kind). The defaults: 7 days, 1 GiB."""

    max_age_s: float | None = DEFAULT_MAX_AGE_S
    max_bytes: int | None = DEFAULT_MAX_BYTES
    interval_s: float = 60.0
    """How often to look for something to remove."""
    step_s: float = 0.05
    """How long one step (one transaction) should take: the longest a write waits for it."""
    first_batch: int = 200
    """Turns removed by the first step; later steps adapt to ``step_s``."""

    def __post_init__(self) -> None:
        if self.max_age_s is not None and not self.max_age_s > 0:
            raise ValueError(f"retention: max age must be positive, got {self.max_age_s:g}s")
        if self.max_bytes is not None and not self.max_bytes > 0:
            raise ValueError(f"retention: max size must be positive, got {self.max_bytes} bytes")
        if not self.interval_s > 0 or not self.step_s > 0 or self.first_batch < 1:
            raise ValueError("retention: interval_s and step_s must be positive, first_batch at least 1")

    @classmethod
    def parse(cls, max_age: str | None = None, max_size: str | None = None) -> RetentionPolicy:
        """From command-line text: ``7d``, ``12h``, ``30m`` and ``1GiB``, ``500MB``; ``off`` for no
        limit; None for the default. Raises ValueError with a one-line message."""
        age = DEFAULT_MAX_AGE_S if max_age is None else parse_duration(max_age)
        size = DEFAULT_MAX_BYTES if max_size is None else parse_size(max_size)
        return cls(max_age_s=age, max_bytes=size)

    def describe(self) -> str:
        age = "any age" if self.max_age_s is None else f"{self.max_age_s / 86400:g} days"
        size = "any size" if self.max_bytes is None else f"{self.max_bytes / (1 << 20):,.0f} MiB"
        return f"turns kept for {age}, up to {size}"


def parse_duration(text: str) -> float | None:
    """``7d`` → seconds; ``off``/``none``/``0`` → None."""
    if text.strip().lower() in _OFF:
        return None
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"retention age {text!r}: expected a number and s, m, h, d or w (e.g. 7d), or off")
    return float(match[1]) * _DURATION_S[match[2]]


def parse_size(text: str) -> int | None:
    """``1GiB``, ``500MB``, ``200m`` → bytes (k, M, G, T are powers of 1000; KiB, MiB… of 1024)."""
    if text.strip().lower() in _OFF:
        return None
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(
            f"retention size {text!r}: expected a number and B, KB, MB, GB or KiB, MiB, GiB, or off"
        )
    base = 1024 if match[3] else 1000
    power = " kmgt".index(match[2].lower() or " ")
    return int(float(match[1]) * base**power)


class StepResult(NamedTuple):
    turns: int
    """Turns removed (with their events, attempts and tools)."""
    outside: int
    """Events outside turns removed."""
    more: bool
    """Whether the policy still finds something to remove."""


class StoreRetention(StoreCore):
    """Removing old turns: all at once (:meth:`prune`) or a step at a time (:meth:`prune_step`)."""

    _compact: bool
    """Schema 5 or later: ``attempts`` is a view of the events, nothing to delete there."""

    def prune(
        self, *, older_than_s: float | None = None, keep: int | None = None, now: float | None = None
    ) -> int:
        """Remove turns started more than ``older_than_s`` ago and/or all but the newest ``keep``.

        A turn goes with its events, attempts and tools; events and attempts outside turns go by
        age only. Manifest versions are kept (they are small and old turns may name them).
        Returns the number of turns removed.
        """
        self._refuse_writes("prune")
        if older_than_s is None and keep is None:
            return 0
        cutoff = (
            (self._wall_clock() if now is None else now) - older_than_s if older_than_s is not None else None
        )
        doomed: list[str] = []
        params: list[Any] = []
        if cutoff is not None:
            doomed.append("SELECT id FROM turns WHERE started_at < ?")
            params.append(cutoff)
        if keep is not None:
            doomed.append(
                "SELECT id FROM (SELECT id FROM turns ORDER BY started_at DESC, id DESC LIMIT -1 OFFSET ?)"
            )
            params.append(max(keep, 0))
        removed, _, _ = self._remove(" UNION ".join(doomed), params, cutoff, None, over_bytes=None)
        return removed

    def used_bytes(self) -> int:
        """The data the store holds: its pages in use (the file may be larger: freed pages stay)."""
        with self._lock:
            return self._used_bytes()

    def _used_bytes(self) -> int:
        pages, free, size = (
            int(self._conn.execute(f"PRAGMA {p}").fetchone()[0])
            for p in ("page_count", "freelist_count", "page_size")
        )
        return (pages - free) * size

    def prune_step(self, policy: RetentionPolicy, *, limit: int, now: float | None = None) -> StepResult:
        """One short transaction of ``policy``: at most ``limit`` turns, oldest first, that are too
        old, or while the data is over the size limit; and up to ``limit × 20`` old events
        outside turns. Raises StoreWriteError when the store refuses the write."""
        self._refuse_writes("prune")
        now = self._wall_clock() if now is None else now
        cutoff = None if policy.max_age_s is None else now - policy.max_age_s
        with self._lock:
            over = policy.max_bytes is not None and self._used_bytes() > policy.max_bytes
        params: list[Any]
        if over:
            doomed, params = "SELECT id FROM turns ORDER BY started_at, id LIMIT ?", [limit]
        elif cutoff is not None:
            doomed, params = (
                "SELECT id FROM turns WHERE started_at < ? ORDER BY started_at, id LIMIT ?",
                [cutoff, limit],
            )
        else:
            return StepResult(0, 0, False)
        turns, outside, still_over = self._remove(
            doomed, params, cutoff, limit * 20, over_bytes=policy.max_bytes if over else None
        )
        more = turns >= limit or outside >= limit * 20 or (still_over and (turns > 0 or outside > 0))
        return StepResult(turns, outside, more)

    def _remove(
        self, doomed: str, params: list[Any], cutoff: float | None, outside_limit: int | None,
        *, over_bytes: int | None,
    ) -> tuple[int, int, bool]:  # fmt: skip
        """Delete the turns ``doomed`` selects, with everything of theirs, and the events outside
        turns older than ``cutoff`` (or, over ``over_bytes`` with no turn left, the oldest ones).
        Returns (turns, events outside turns, still over ``over_bytes``)."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        "CREATE TEMP TABLE IF NOT EXISTS doomed (id INTEGER PRIMARY KEY, turn_id TEXT)"
                    )
                    conn.execute("DELETE FROM temp.doomed")
                    conn.execute(
                        "INSERT OR IGNORE INTO temp.doomed SELECT id, turn_id FROM turns"
                        f" WHERE id IN ({doomed})",
                        params,
                    )
                    ids = [r[0] for r in conn.execute("SELECT turn_id FROM temp.doomed")]
                    for table in (
                        ("events", "turn_tools") if self._compact else ("events", "attempts", "turn_tools")
                    ):
                        conn.execute(f"DELETE FROM {table} WHERE turn IN (SELECT id FROM temp.doomed)")
                    conn.execute("DELETE FROM turns WHERE id IN (SELECT id FROM temp.doomed)")
                    conn.execute("DELETE FROM temp.doomed")
                    outside = self._remove_outside(cutoff, outside_limit, over_bytes is not None and not ids)
                    still_over = over_bytes is not None and self._used_bytes() > over_bytes
                    conn.execute("COMMIT")
                except BaseException:
                    rollback(conn)
                    raise
            except sqlite3.Error as exc:
                raise write_error(self.path, exc, "prune") from None
            for turn_id in ids:  # events that still arrive for them are kept outside turns
                self._open_turns.pop(turn_id, None)
        return len(ids), outside, still_over

    def _remove_outside(self, cutoff: float | None, limit: int | None, oldest: bool) -> int:
        """Events and attempts outside turns: older than ``cutoff``, or the oldest ``limit``."""
        conn = self._conn
        if cutoff is None and not oldest:
            return 0
        if limit is None:
            removed = conn.execute("DELETE FROM events WHERE turn IS NULL AND at < ?", (cutoff,)).rowcount
            if not self._compact:
                conn.execute("DELETE FROM attempts WHERE turn IS NULL AND at < ?", (cutoff,))
            return removed
        where, params = ("AND at < ?", [cutoff]) if not oldest else ("", [])
        removed = conn.execute(
            "DELETE FROM events WHERE id IN (SELECT id FROM events INDEXED BY events_outside_turns"
            f" WHERE turn IS NULL {where} ORDER BY at LIMIT ?)",
            [*params, limit],
        ).rowcount
        if not self._compact:
            conn.execute(
                "DELETE FROM attempts WHERE id IN"
                f" (SELECT id FROM attempts WHERE turn IS NULL {where} LIMIT ?)",
                [*params, limit],
            )
        return removed


class RetentionSchedule:
    """When the next step of a policy is due and how many turns it takes: the writer thread of a
    recorder runs :meth:`step` whenever :meth:`due`, between the batches it writes."""

    MIN_BATCH, MAX_BATCH = 10, 20_000

    def __init__(self, policy: RetentionPolicy, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.limit = policy.first_batch
        self.removed = 0
        """Turns removed so far."""
        self._clock = clock
        self._due = clock()
        self._run_removed = 0

    def due(self) -> bool:
        return self._clock() >= self._due

    def step(self, store: StoreRetention) -> bool:
        """One step; returns whether another is wanted at once. Raises what the store raises."""
        started = self._clock()
        try:
            result = store.prune_step(self.policy, limit=self.limit)
        except Exception:
            self._due = started + self.policy.interval_s
            raise
        took = self._clock() - started
        if took > self.policy.step_s:  # keep each transaction short: writes wait for it
            self.limit = max(self.MIN_BATCH, self.limit // 2)
        elif took < self.policy.step_s / 4 and result.turns >= self.limit:
            self.limit = min(self.MAX_BATCH, self.limit * 2)
        self.removed += result.turns
        self._run_removed += result.turns
        if result.more:
            self._due = self._clock()
            return True
        if self._run_removed:
            log.info("trace store %s: retention removed %d turn(s) (%s)", store.path, self._run_removed,
                     self.policy.describe())  # fmt: skip
            self._run_removed = 0
        self._due = self._clock() + self.policy.interval_s
        return False
