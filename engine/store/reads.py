"""Reading the trace store: pages of turns, one turn with every event, events by turn or time range.

Every query holds the store's lock for one page at most (keyset pagination), so a slow reader
never blocks the writer.
"""

from __future__ import annotations

import heapq
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from engine.errors import TraceStoreError
from engine.events import AttemptFailed, AttemptStarted, BreakerTransitioned, CallSucceeded, Event
from engine.store.base import StoreCore
from engine.store.codec import (
    EVENT_COLUMNS,
    STORED_COLUMNS,
    decode_event,
    fallback,
    json_value,
    with_turn_fields,
)
from engine.store.export import export_target, write_new_file
from engine.store.rows import AttemptRow, StoredTurn, TurnPage, TurnRow
from engine.store.schema import BREAKER_TRANSITIONS

TRACE_TABLES = ("attempts", "events", "manifests", "turn_tools", "turns")
"""The tables :meth:`StoreReads.counts` counts (operator commands and writers are not traces)."""

Since = float | datetime | None


def _bounds(since: float | None, until: float | None) -> tuple[float, float]:
    """Finite stand-ins for open ends (SQLite prints infinities as text it cannot read back)."""
    return -sys.float_info.max if since is None else since, sys.float_info.max if until is None else until


def _seconds(value: Since) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else value


def _turn_row(r: Sequence[Any]) -> TurnRow:
    tools = tuple(sorted(r[8].split("\x1f"))) if r[8] else ()
    return TurnRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6] or 0, r[7], tools)


def _attempt_row(r: Sequence[Any], events: Mapping[int, Event]) -> AttemptRow:
    if r[5] == "error":
        return AttemptRow._make(r)
    return AttemptRow._make((*r[:12], getattr(events.get(r[0]), "value", None), r[13]))


def _float(value: float | None) -> float | None:
    """As a FLOAT column gave it back: an int as a float."""
    return None if value is None else float(value)


def attempt_rows(ids: Sequence[int], events: Sequence[Event]) -> list[AttemptRow]:
    """A turn's attempts, from its events, as the attempts table held them before schema 5: each
    failure, and each success with the fault injected into its attempt (its AttemptStarted's)."""
    out: list[AttemptRow] = []
    faults: dict[tuple[str, str, int], str] = {}
    for event_id, e in zip(ids, events, strict=True):
        if isinstance(e, AttemptStarted):
            if e.fault_type is not None:
                faults[(e.call_id, e.tool_id, e.attempt)] = e.fault_type
        elif isinstance(e, AttemptFailed):
            faults.pop((e.call_id, e.tool_id, e.attempt), None)
            out.append(
                AttemptRow(
                    event_id, e.turn_id, e.call_id, e.tool_id, e.attempt, "error", e.kind.value,
                    e.classification.value, e.status_code, e.error, _float(e.latency_ms), e.fault_type, None,
                    float(e.at),
                )
            )  # fmt: skip
        elif isinstance(e, CallSucceeded):
            fault = faults.pop((e.call_id, e.tool_id, e.attempts), None)
            out.append(
                AttemptRow(
                    event_id, e.turn_id, e.call_id, e.tool_id, e.attempts, "partial" if e.partial else "ok",
                    None, None, None, None, _float(e.attempt_ms), fault, e.value, float(e.at),
                )
            )  # fmt: skip
    return out


class StoreReads(StoreCore):
    """Browsing what is stored: pages of turns, one turn whole, events by turn or time, exports."""

    _compact: bool
    """Schema 5 or later: attempts worked out from the events (:mod:`engine.store.writes`)."""

    def list_turns(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        outcome: str | None = None,
        tool: str | None = None,
        since: Since = None,
        until: Since = None,
    ) -> TurnPage:
        """A page of turns, newest first, keyset-paginated on (started_at, rowid).

        ``since``/``until`` bound ``started_at`` (wall-clock seconds or a datetime; until excluded).
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where: list[str] = []
        params: list[Any] = []
        if tool is not None:
            source, key_at, key_id = "turn_tools x JOIN turns t ON t.id = x.turn", "x.started_at", "x.turn"
            where.append("x.tool_id = ?")
            params.append(tool)
        else:
            source, key_at, key_id = "turns t", "t.started_at", "t.id"
        if outcome is not None:
            where.append("t.outcome = ?")
            params.append(outcome)
        if (since := _seconds(since)) is not None:
            where.append(f"{key_at} >= ?")
            params.append(since)
        if (until := _seconds(until)) is not None:
            where.append(f"{key_at} < ?")
            params.append(until)
        if cursor is not None:
            where.append(f"({key_at}, {key_id}) < (?, ?)")
            params += self._parse_cursor(cursor)
        sql = (
            "SELECT t.id, t.turn_id, t.started_at, t.ended_at, t.duration_ms, t.outcome, t.summary, t.calls,"
            " t.executed, (SELECT group_concat(tool_id, char(31)) FROM turn_tools WHERE turn = t.id)"
            f" FROM {source}{' WHERE ' + ' AND '.join(where) if where else ''}"
            f" ORDER BY {key_at} DESC, {key_id} DESC LIMIT ?"
        )
        params.append(limit + 1)
        with self._lock:
            found = self._query(sql, params)
        more = len(found) > limit
        found = found[:limit]
        rows = [_turn_row(r[1:]) for r in found]
        next_cursor = f"{found[-1][2]!r}:{found[-1][0]}" if more else None
        return TurnPage(rows, next_cursor)

    def _parse_cursor(self, cursor: str) -> list[Any]:
        at, _, rowid = cursor.rpartition(":")
        try:
            position = [float(at), int(rowid)]
        except ValueError:
            position = []
        if len(position) != 2 or not math.isfinite(position[0]) or not 0 <= position[1] < 1 << 63:
            raise TraceStoreError(self.path, f"invalid cursor {cursor!r}", untouched=False)
        return position

    def load_turn(self, turn_id: str) -> StoredTurn:
        """One turn with every event in order and its attempts; raises if there is no such turn."""
        with self._lock:
            found = self._query(
                "SELECT turn_id, started_at, ended_at, duration_ms, outcome, summary, calls, executed,"
                " (SELECT group_concat(tool_id, char(31)) FROM turn_tools WHERE turn = turns.id),"
                " spec, seed, breakers, manifests, id FROM turns WHERE turn_id = ?",
                (turn_id,),
            )
            if not found:
                raise TraceStoreError(self.path, f"no turn {turn_id!r}", untouched=False)
            rowid = found[0][13]
            stored = self._query(f"SELECT {STORED_COLUMNS} FROM events WHERE turn = ? ORDER BY id", (rowid,))
            legacy = (
                self._query(
                    "SELECT event_id, turn_id, call_id, tool_id, attempt, outcome, kind, class, status_code,"
                    " message, latency_ms, fault_type, NULL, at FROM attempts WHERE turn = ? ORDER BY id",
                    (rowid,),
                )
                if not self._compact
                else None
            )
        row = found[0]
        event_rows = self._with_turn(stored, row[0], row[9], row[11], row[12])
        try:
            events = [decode_event(*r[1:]) for r in event_rows]
            ids = [r[0] for r in event_rows]
            if legacy is None:
                attempts = attempt_rows(ids, events)
            else:
                by_id = dict(zip(ids, events, strict=True))
                attempts = [_attempt_row(r, by_id) for r in legacy]
            return StoredTurn(
                row=_turn_row(row[:9]),
                events=events,
                attempts=attempts,
                spec=json_value(row[9]),
                seed=row[10],
                breakers=json_value(row[11]),
                manifests=json_value(row[12]),
            )
        except (ValueError, TypeError) as exc:
            raise TraceStoreError(
                self.path, f"turn {turn_id!r} cannot be read: {exc}", untouched=False
            ) from None

    @staticmethod
    def _with_turn(
        rows: list[Any], turn_id: str, spec: str | None, breakers: str | None, manifests: str | None
    ) -> list[Any]:
        """One turn's stored rows as :data:`EVENT_COLUMNS` reads them: the turn's id where the row
        left it out (the turn's row has it, unless renamed: then the rows have it), a TurnStarted's
        big fields put back."""
        out = []
        for r in rows:
            if r[2] is None or r[1] == "TurnStarted":
                data = with_turn_fields(r[7], spec, breakers, manifests) if r[1] == "TurnStarted" else r[7]
                r = (r[0], r[1], turn_id if r[2] is None else r[2], *r[3:7], data)
            out.append(r)
        return out

    def events(
        self, *, turn_id: str | None = None, since: Since = None, until: Since = None, chunk: int = 2000
    ) -> Iterator[Event]:
        """Stored events: one turn's, a time range's, or all, in the order they were written.

        A time range (``since``/``until``, until excluded) holds the turns that started in it,
        each whole and in start order, and the events outside turns (operator actions, breaker
        timers, manifest loads) that happened in it, in time order among them. Read in chunks
        (keysets), so iterating slowly never holds the store's lock.
        """
        for row in self._rows(turn_id, since, until, chunk):
            yield self._decode(row)

    def _rows(self, turn_id: str | None, since: Since, until: Since, chunk: int) -> Iterator[Any]:
        since, until = _seconds(since), _seconds(until)
        if turn_id is not None or (since is None and until is None):
            yield from self._event_rows(turn_id, chunk)
            return
        merged = heapq.merge(
            self._turn_rows_between(since, until, chunk), self._outside_rows_between(since, until, chunk)
        )
        for _, row in merged:
            yield row

    def _pages(
        self, sql: str, params: Sequence[Any], key: Sequence[Any], key_of: Callable[[Any], Sequence[Any]],
        chunk: int,
    ) -> Iterator[Any]:  # fmt: skip
        """Every row of a keyset-paginated query whose parameters end with the key and the limit.

        The lock is held per page only, so a slow consumer never blocks the writer."""
        while True:
            with self._lock:
                rows = self._query(sql, (*params, *key, chunk))
            yield from rows
            if len(rows) < chunk:
                return
            key = key_of(rows[-1])

    def _event_rows(self, turn_id: str | None, chunk: int, turn: int | None = None) -> Iterator[Any]:
        where: list[str] = []
        params: list[Any] = []
        if turn is not None:
            where.append("turn = ?")
            params.append(turn)
        elif turn_id is not None:
            with self._lock:
                found = self._query("SELECT id FROM turns WHERE turn_id = ?", (turn_id,))
            # Events of a turn whose start was never stored have no turn row: found by id, slowly.
            where.append("turn = ?" if found else "turn_id = ?")
            params.append(found[0][0] if found else turn_id)
        where.append("id > ?")
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
        return self._pages(sql, params, (0,), lambda row: (row[0],), chunk)

    def _turn_rows_between(self, since: float | None, until: float | None, chunk: int) -> Iterator[Any]:
        """((started_at, 0, turn, id), row) for every event of the turns that started in the range."""
        sql = (
            "SELECT id, started_at FROM turns WHERE started_at >= ? AND started_at < ?"
            " AND (started_at, id) > (?, ?) ORDER BY started_at, id LIMIT ?"
        )
        low, high = _bounds(since, until)
        for turn, started_at in self._pages(sql, (low, high), (low, 0), lambda r: (r[1], r[0]), chunk):
            for row in self._event_rows(None, chunk, turn=turn):
                yield (started_at, 0, turn, row[0]), row

    def _outside_rows_between(self, since: float | None, until: float | None, chunk: int) -> Iterator[Any]:
        """((at, 1, 0, id), row) for the events outside turns that happened in the range."""
        sql = (
            f"SELECT {EVENT_COLUMNS} FROM events INDEXED BY events_outside_turns"
            " WHERE turn IS NULL AND at >= ? AND at < ?"
            " AND (at, id) > (?, ?) ORDER BY at, id LIMIT ?"
        )
        low, high = _bounds(since, until)
        for row in self._pages(sql, (low, high), (low, 0), lambda r: (r[5], r[0]), chunk):
            yield (row[5], 1, 0, row[0]), row

    def last_transition(self, tool_id: str) -> BreakerTransitioned | None:
        """The tool's newest breaker transition (who made it, and why), or None."""
        with self._lock:
            found = self._query(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {BREAKER_TRANSITIONS}"
                " ORDER BY id DESC LIMIT 1",
                (tool_id,),
            )
        event = self._decode(found[0]) if found else None
        return event if isinstance(event, BreakerTransitioned) else None

    def manifest(self, digest: str) -> dict[str, Any] | None:
        """A stored manifest version's content, by digest."""
        with self._lock:
            found = self._query("SELECT content FROM manifests WHERE digest = ?", (digest,))
        return json_value(found[0][0]) if found else None

    def export_jsonl(
        self,
        out: IO[str] | str | Path,
        *,
        turn_id: str | None = None,
        since: Since = None,
        until: Since = None,
        force: bool = False,
    ) -> int:
        """Write events as JSON Lines, one ``event.to_dict()`` per line; returns how many.

        Selects as :meth:`events` does. A path is written safely (see :mod:`engine.store.export`):
        owner-only, whole or not at all, never onto this store; an existing file is replaced only
        with ``force``. Raises :class:`~engine.store.export.ExportRefused` otherwise.
        """
        if turn_id is not None:
            with self._lock:
                known = self._query(
                    "SELECT EXISTS (SELECT 1 FROM turns WHERE turn_id = ?)"
                    " OR EXISTS (SELECT 1 FROM events WHERE turn_id = ?)",
                    (turn_id, turn_id),
                )[0][0]
            if not known:
                raise TraceStoreError(self.path, f"no turn {turn_id!r}", untouched=False)
        if isinstance(out, str | Path):  # whole or not at all, owner-only, never onto this store
            target = export_target(Path(out), self.path, force=force)
            return write_new_file(
                target,
                lambda stream: self.export_jsonl(stream, turn_id=turn_id, since=since, until=until),
                replace=force,
                shown=out,
            )
        count = 0
        for row in self._rows(turn_id, since, until, 2000):
            out.write(json.dumps(self._decode(row).to_dict(), ensure_ascii=False, default=fallback))
            out.write("\n")
            count += 1
        return count

    def counts(self) -> dict[str, int]:
        """Rows per trace table (operator commands and writers are not traces), and turns still
        ``running``."""
        with self._lock:
            # attempts: since schema 5 a view of events (counted without reading their data).
            out = {table: int(self._query(f"SELECT count(*) FROM {table}")[0][0]) for table in TRACE_TABLES}
            out["running"] = int(self._query("SELECT count(*) FROM turns WHERE outcome = 'running'")[0][0])
        return out
