"""Writing to the trace store: events, and the turn rows and tools they imply.

A batch is one transaction: the derived rows are inserted with the events they come from, so a
crash never leaves a half-written turn. The hot path encodes each event with its class's
generated row function (:mod:`engine.store.codec`) and inserts with ``executemany``. Rows are
compact since schema 5 (nothing stored twice, see :mod:`engine.store.codec`); into an older
schema, which only a test makes now, they are written as they were then, attempts included.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.events import Event, TurnStarted
from engine.store.base import OpenTurn
from engine.store.codec import (
    ATTEMPT,
    CODECS,
    FAILED,
    FINISHED,
    STARTED,
    SUCCEEDED,
    TURN_STARTED_FIELDS,
    Codec,
    codec_of,
    dumps,
)
from engine.store.failures import write_error
from engine.store.opening import rollback
from engine.store.standing import OverrideChange, write_override_changes
from engine.store.writers import WriterRegistry


@dataclass(slots=True)
class _Pending:
    """Derived rows of a write, inserted together when the events are."""

    next_turn: int
    """The rowid the next new turn gets (we hold the write lock: ids are known in advance)."""
    insert_turn: str
    turns: list[tuple[Any, ...]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: list[tuple[Any, ...]] = field(default_factory=list)
    tools: list[tuple[int, str, float]] = field(default_factory=list)
    finished: list[tuple[Any, ...]] = field(default_factory=list)
    renamed: list[tuple[str, int]] = field(default_factory=list)
    """(turn id, rowid) of the earlier turns renamed "<id>~<rowid>" by this batch."""

    def flush(self, conn: sqlite3.Connection, compact: bool) -> None:
        if self.turns:
            self._insert_turns(conn)
        if self.rows:
            conn.executemany(
                "INSERT INTO events (turn_id, call_id, tool_id, event_type, at, t, data, turn)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                self.rows,
            )
            self.rows.clear()
        if self.renamed and compact:
            # Their events read their turn id from the turn's row: they keep the id they were
            # emitted with, written out now (those of this batch too, hence after the insert).
            conn.executemany("UPDATE events SET turn_id = ? WHERE turn = ? AND turn_id IS NULL", self.renamed)
        self.renamed.clear()
        if self.attempts:
            conn.executemany(
                "INSERT INTO attempts (event_id, turn, turn_id, call_id, tool_id, attempt, outcome, kind,"
                " class, status_code, message, latency_ms, fault_type, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self.attempts,
            )
            self.attempts.clear()
        if self.tools:
            conn.executemany(
                "INSERT OR IGNORE INTO turn_tools (turn, tool_id, started_at) VALUES (?, ?, ?)", self.tools
            )
            self.tools.clear()
        if self.finished:
            conn.executemany(
                "UPDATE turns SET ended_at = ?, duration_ms = ?, outcome = ?, summary = ?, executed = ?,"
                " statuses = ? WHERE id = ?",
                self.finished,
            )
            self.finished.clear()

    def _insert_turns(self, conn: sqlite3.Connection) -> None:
        conn.execute("SAVEPOINT turns")
        try:
            conn.executemany(self.insert_turn, self.turns)
        except sqlite3.IntegrityError:
            # Turn ids repeat (a restarted engine numbers from t1 again; scenarios reuse ids): the
            # earlier turn stays, listed as "<id>~<rowid>"; its events keep the id they were
            # emitted with (they belong to their turn by rowid).
            conn.execute("ROLLBACK TO turns")
            for row in self.turns:
                turn_id = row[1]
                old = conn.execute("SELECT id FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
                if old is not None:
                    conn.execute("UPDATE turns SET turn_id = ? WHERE id = ?", (f"{turn_id}~{old[0]}", old[0]))
                    self.renamed.append((turn_id, old[0]))
                conn.execute(self.insert_turn, row)
        conn.execute("RELEASE turns")
        self.turns.clear()


INSERT_TURN = (
    "INSERT INTO turns (id, turn_id, started_at, t_start, outcome, calls, deadline_ms, seed, spec,"
    " breakers, manifests, writer) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_TURN_V2 = (
    "INSERT INTO turns (id, turn_id, started_at, t_start, outcome, calls, deadline_ms, seed, spec,"
    " breakers, manifests) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)"
)
"""Into a store of schema 2 or older (only a test makes one now): no writer column."""


class StoreWrites(WriterRegistry):
    """Writing events, with the turn rows, tools and attempts they imply, one transaction a batch."""

    _faults: dict[tuple[Any, ...], str]
    """The fault injected into each attempt under way, until the attempt concludes (schema 4 and
    older: the attempts table; since, reads work it out from the turn's events)."""
    _compact: bool
    """Schema 5 or later: rows written compact (:mod:`engine.store.codec`)."""

    def write(
        self,
        events: Sequence[Event],
        *,
        manifests: Iterable[tuple[str, str, Mapping[str, Any]]] = (),
        overrides: Sequence[OverrideChange] = (),
    ) -> int:
        """Store ``events`` in one transaction, with the turn rows, tools and attempts they imply.

        ``manifests`` are ``(digest, tool_id, content)`` snapshots stored in the same transaction;
        ``overrides`` the standing overrides the events set or clear (:mod:`engine.store.standing`).
        Returns the number of events written. Raises :class:`StoreWriteError` (SQLite's own
        message, e.g. "write failed: database or disk is full") when the store refuses it: then
        nothing of the batch was written.
        """
        self._refuse_writes("write")
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for digest, tool_id, content in manifests:
                        self._insert_manifest(digest, tool_id, content, None)
                    if events:
                        self._write_events(events)
                        self._beat_in_transaction()
                    if overrides and self._has_overrides:
                        write_override_changes(conn, overrides)
                    conn.execute("COMMIT")
                except BaseException:
                    rollback(conn)
                    self._open_turns.clear()  # rows they pointed at may be gone: look them up again
                    self._transaction_ended(committed=False)
                    raise
            except sqlite3.Error as exc:
                raise write_error(self.path, exc) from None
            self._transaction_ended(committed=True)
        return len(events)

    def ensure_manifest(
        self, digest: str, tool_id: str, content: Mapping[str, Any], *, at: float | None = None
    ) -> bool:
        """Store a manifest version once; returns whether it was new."""
        self._refuse_writes("write")
        with self._lock:
            try:
                with self._conn:
                    return self._insert_manifest(digest, tool_id, content, at)
            except sqlite3.Error as exc:
                raise write_error(self.path, exc) from None

    def _insert_manifest(
        self, digest: str, tool_id: str, content: Mapping[str, Any], at: float | None
    ) -> bool:
        cur = self._conn.execute(
            "INSERT OR IGNORE INTO manifests (digest, tool_id, content, first_seen) VALUES (?, ?, ?, ?)",
            (digest, tool_id, dumps(content), self._wall_clock() if at is None else at),
        )
        return cur.rowcount > 0

    def _write_events(self, events: Sequence[Event]) -> None:
        """The hot path: one generated tuple per event, derived rows alongside, executemany."""
        conn = self._conn
        # Rows get rowid max + 1 in order (we hold the write lock): the ids are known in advance.
        first_id = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()[0])
        next_turn = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM turns").fetchone()[0])
        pending = _Pending(next_turn, INSERT_TURN if self._has_writers else INSERT_TURN_V2)
        rows, attempts, tools = pending.rows, pending.attempts, pending.tools
        add_row, add_attempt = rows.append, attempts.append
        open_turns, faults, codecs, encode = self._open_turns, self._faults, CODECS, dumps
        compact = self._compact
        looked_up: dict[str, OpenTurn | None] = {}  # turns this store did not start: found or not
        finished: list[str] = []
        event_id = first_id - 1
        for event in events:
            codec = codecs.get(type(event)) or codec_of(type(event))
            action = codec.action
            event_id += 1
            if action == STARTED:
                row: tuple[Any, ...] = self._start_turn(event, codec, pending)  # type: ignore[arg-type]
            elif compact:
                row = codec.row(event) or codec.slow_row(event)
            else:
                row = codec.slow_row(event, compact=False)
            turn_id, call_id, tool_id = row[0], row[1], row[2]
            rowid = None
            if turn_id is not None:
                turn = open_turns.get(turn_id)
                if turn is None:
                    if turn_id in looked_up:
                        turn = looked_up[turn_id]
                    else:
                        turn = looked_up[turn_id] = self._find_turn(turn_id)
                if turn is not None:
                    rowid = turn.rowid
                    if tool_id is not None and tool_id not in turn.tools:
                        turn.tools.add(tool_id)
                        tools.append((rowid, tool_id, turn.started_at))
            if rowid is not None and compact:
                add_row((None, *row[1:], rowid))  # the turn's row has its id
            else:
                add_row((*row, rowid))
            if action <= STARTED or (compact and action != FINISHED):  # attempts: a view since v5
                continue
            e: Any = event
            if action == ATTEMPT:
                if e.fault_type is not None:
                    if len(faults) > 10_000:  # attempts cut off never conclude: bound the memory
                        faults.clear()
                    faults[(turn_id, call_id, tool_id, e.attempt)] = e.fault_type
            elif action == FAILED:
                if faults:
                    faults.pop((turn_id, call_id, tool_id, e.attempt), None)
                add_attempt(
                    (event_id, rowid, turn_id, call_id, tool_id, e.attempt, "error", e.kind,
                     e.classification, e.status_code, e.error, e.latency_ms, e.fault_type, e.at)
                )  # fmt: skip
            elif action == SUCCEEDED:
                fault = faults.pop((turn_id, call_id, tool_id, e.attempts), None) if faults else None
                add_attempt(
                    (event_id, rowid, turn_id, call_id, tool_id, e.attempts, "partial" if e.partial else "ok",
                     None, None, None, None, e.attempt_ms, fault, e.at)
                )  # fmt: skip
            elif action == FINISHED:
                if rowid is None:  # the turn's row is not here
                    continue
                pending.finished.append(
                    (e.at, e.duration_ms, e.outcome, e.summary, e.executed, encode(e.statuses), rowid)
                )
                # Forgotten after this batch: events after the turn's end (the answers the
                # model received) may follow in it, and its row is only inserted at the end.
                finished.append(turn_id)
        pending.flush(conn, compact)
        for turn_id in finished:
            open_turns.pop(turn_id, None)
        last = conn.execute("SELECT max(id) FROM events").fetchone()[0]
        if events and last != event_id:  # never expected: the attempts would point at other events
            raise sqlite3.IntegrityError(f"event ids {first_id}..{event_id} were assigned up to {last}")

    def _start_turn(self, event: TurnStarted, codec: Codec, pending: _Pending) -> tuple[Any, ...]:
        """Queue the turn's row; returns the event's row (schema 5: without the big fields, which
        only the turn's row holds; before: sharing their JSON)."""
        turn_id = event.turn_id
        big = {name: dumps(getattr(event, name)) for name in TURN_STARTED_FIELDS}
        rowid = pending.next_turn
        pending.next_turn += 1
        writer = (self._ensure_writer(),) if self._has_writers else ()
        pending.turns.append(
            (rowid, turn_id, event.at, event.t, len(event.calls), event.deadline_ms, event.seed,
             *big.values(), *writer)
        )  # fmt: skip
        spec = event.spec or {}
        tools = {str(call["tool"]) for call in spec.get("calls", ()) if "tool" in call}
        pending.tools += [(rowid, tool, event.at) for tool in sorted(tools)]
        self._open_turns[turn_id] = OpenTurn(rowid, event.at, tools)
        rest = dumps(codec.values(event, compact=self._compact, skip=TURN_STARTED_FIELDS))
        if not self._compact:
            rest = rest[:-1] + "".join(f',"{name}":{text}' for name, text in big.items()) + "}"
        return turn_id, None, None, codec.event_type, event.at, event.t, rest

    def _find_turn(self, turn_id: str) -> OpenTurn | None:
        """A turn started before this store object saw it (another process, a reopened store)."""
        row = self._conn.execute("SELECT id, started_at FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
        if row is None:
            return None
        tools = {r[0] for r in self._conn.execute("SELECT tool_id FROM turn_tools WHERE turn = ?", (row[0],))}
        return OpenTurn(row[0], row[1], tools)
