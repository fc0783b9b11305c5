"""Following a live engine from another process: its events as they are committed, and every
tool's newest breaker state and manifest version to start from.

A console attached to a store seeds its board from :meth:`StoreFollow.tool_states` and then
follows :meth:`StoreFollow.events_after` (row ids grow in commit order; a batch is seen whole).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import Any

from engine.errors import TraceStoreError, one_line
from engine.events import BreakerTransitioned, Event, ManifestLoaded, RecordingStarted, ToolRegistered
from engine.store.base import StoreCore
from engine.store.codec import EVENT_COLUMNS, decode_event, json_value
from engine.store.rows import StoredBreaker, StoredManifest, StoreSnapshot, ToolState
from engine.store.schema import BREAKER_STATES, BREAKER_TRANSITIONS, MANIFEST_CHANGES, RECORDING_STARTS
from engine.strategies.breaker.machine import BreakerState


class StoreFollow(StoreCore):
    """What an attached console reads: committed events in order, and every tool's state."""

    def events_after(
        self,
        event_id: int,
        *,
        limit: int = 1000,
        on_unreadable: Callable[[int, str], None] | None = None,
    ) -> list[tuple[int, Event]]:
        """The events stored after row ``event_id``, as (row id, event), in id order: how a console
        follows an engine in another process (ids grow in commit order; a batch is seen whole).

        An event that cannot be read raises, unless ``on_unreadable(row id, problem)`` is given: then
        it is reported there and skipped (a newer engine may write types this code does not know).
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        with self._lock:
            rows = self._query(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?", (event_id, limit)
            )
        if on_unreadable is None:
            return [(row[0], self._decode(row)) for row in rows]
        out: list[tuple[int, Event]] = []
        for row in rows:
            try:
                out.append((row[0], decode_event(*row[1:])))
            except (ValueError, TypeError) as exc:
                on_unreadable(row[0], one_line(f"{row[1]}: {exc}"))
        return out

    def tool_states(self) -> StoreSnapshot:
        """Every tool seen in the store with its newest manifest version and breaker state, read in
        one transaction, and the id of the newest event: follow it with :meth:`events_after`.

        A tool's state is the newest of its breaker events (a transition, a restored override, its
        registration), the recording engine's start (``RecordingStarted``) and a later turn's
        snapshot: never an earlier run's last transition. ``registered`` says whether the engine
        that recorded last has the tool (tools of earlier runs stay listed)."""
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN")  # one snapshot: the writer may commit between our queries
            except sqlite3.Error as exc:
                raise self._fail("read", exc) from None
            try:
                newest = self._query("SELECT id, at, t FROM events ORDER BY id DESC LIMIT 1")
                start = self._recording_start()
                tool_ids = sorted(
                    {
                        *self._distinct_tools("turn_tools", "1"),
                        *self._distinct_tools("manifests", "1"),
                        *self._distinct_tools("events", self._breaker_states),
                        *self._distinct_tools("events", MANIFEST_CHANGES),
                        *(start[1].breakers if start is not None else ()),
                    }
                )
                tools = [self._tool_state(tool_id, start) for tool_id in tool_ids]
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("COMMIT")
        last_id, newest_at, newest_t = newest[0] if newest else (0, None, None)
        return StoreSnapshot(tools, int(last_id), newest_at, newest_t, start[0] if start is not None else 0)

    def last_breaker_change(self, tool_id: str) -> Event | None:
        """What last set the tool's breaker state: its newest transition, restored override or
        registration (``BreakerTransitioned``, ``ToolRegistered``), or the start of the engine that
        recorded last (``RecordingStarted``) when that is newer; None when the store has none."""
        with self._lock:
            found = self._query(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {self._breaker_states}"
                " ORDER BY id DESC LIMIT 1",
                (tool_id,),
            )
            start = self._recording_start()
        if start is not None and tool_id in start[1].breakers and (not found or found[0][0] < start[0]):
            return start[1]
        return self._decode(found[0]) if found else None

    @property
    def _breaker_states(self) -> str:
        """The events that say a tool's breaker state, as an indexed WHERE clause: since schema 6
        restored overrides and registrations too; before, the transitions."""
        return BREAKER_STATES if self._has_overrides else BREAKER_TRANSITIONS

    def _recording_start(self) -> tuple[int, RecordingStarted] | None:
        """The newest ``RecordingStarted`` and its row id (schema 6 and later)."""
        if not self._has_overrides:
            return None
        found = self._query(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE {RECORDING_STARTS} ORDER BY id DESC LIMIT 1"
        )
        event = self._decode(found[0]) if found else None
        return (found[0][0], event) if isinstance(event, RecordingStarted) else None

    def _distinct_tools(self, table: str, where: str) -> list[str]:
        """Distinct tool ids by skipping through an index on (tool_id, …): one probe per tool."""
        sql = (
            "WITH RECURSIVE tools(tool_id) AS ("
            f" SELECT (SELECT min(tool_id) FROM {table} WHERE {where})"
            f" UNION ALL SELECT (SELECT min(tool_id) FROM {table} WHERE {where} AND tool_id > tools.tool_id)"
            " FROM tools WHERE tool_id IS NOT NULL)"
            " SELECT tool_id FROM tools WHERE tool_id IS NOT NULL"
        )
        return [r[0] for r in self._query(sql)]

    def _tool_state(self, tool_id: str, start: tuple[int, RecordingStarted] | None) -> ToolState:
        change = self._query(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {self._breaker_states}"
            " ORDER BY id DESC LIMIT 1",
            (tool_id,),
        )
        manifest_change = self._query(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {MANIFEST_CHANGES}"
            " ORDER BY id DESC LIMIT 1",
            (tool_id,),
        )
        # The newest turn that used the tool: the breaker and manifest it started with.
        turn = self._query(
            "SELECT t.t_start, t.started_at, t.breakers, t.manifests,"
            " (SELECT min(id) FROM events WHERE turn = t.id)"
            " FROM turn_tools x JOIN turns t ON t.id = x.turn WHERE x.tool_id = ?"
            " ORDER BY x.started_at DESC, x.turn DESC LIMIT 1",
            (tool_id,),
        )
        stored = self._query(
            "SELECT digest, first_seen FROM manifests WHERE tool_id = ? ORDER BY first_seen DESC LIMIT 1",
            (tool_id,),
        )
        t_start, started_at, breakers, digests, turn_event_id = turn[0] if turn else (None,) * 5
        registered = start is None or tool_id in start[1].breakers or bool(change and change[0][0] > start[0])
        return ToolState(
            tool_id,
            self._newest_breaker(tool_id, change, start, t_start, started_at, breakers, turn_event_id),
            self._newest_manifest(tool_id, manifest_change, started_at, digests, stored),
            registered,
        )

    def _newest_breaker(
        self, tool_id: str, change: list[Any], start: tuple[int, RecordingStarted] | None,
        t_start: float | None, started_at: float | None, breakers: str | None, turn_event_id: int | None,
    ) -> StoredBreaker | None:  # fmt: skip
        """The newest of three witnesses, by event id: the tool's newest breaker event, the
        recording engine's start, and the snapshot of a turn that started later than both."""
        newest_id, newest = -1, None
        if change:
            newest_id, newest = change[0][0], _breaker_of(self._decode(change[0]))
        if start is not None and start[0] > newest_id and tool_id in start[1].breakers:
            with contextlib.suppress(TraceStoreError):  # written oddly: no word on the tool from it
                newest_id, newest = start[0], self._entry(tool_id, start[1].breakers[tool_id], start[1].at)
        snapshot = (json_value(breakers) or {}).get(tool_id) if breakers else None
        if snapshot is None or (turn_event_id or 0) <= newest_id:
            return newest
        if not isinstance(snapshot, dict) or started_at is None or t_start is None:
            return newest
        half_open_in = snapshot.get("half_open_in_s")
        entry = dict(
            snapshot, half_open_at=t_start + float(half_open_in) if half_open_in is not None else None
        )
        return self._entry(tool_id, entry, started_at)

    def _entry(self, tool_id: str, entry: Any, at: float) -> StoredBreaker:
        """A breaker as a turn's snapshot or ``RecordingStarted`` holds it."""
        try:
            state = BreakerState(entry["state"])
            failures = int(entry.get("consecutive_failures") or 0)
            half_open_at = entry.get("half_open_at") if state is BreakerState.OPEN else None
            return StoredBreaker(state, failures, None if half_open_at is None else float(half_open_at), at)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._unreadable(tool_id, exc) from None

    def _unreadable(self, tool_id: str, exc: Exception) -> TraceStoreError:
        return TraceStoreError(
            self.path, f"the breaker snapshot of {tool_id!r} cannot be read: {exc}", untouched=False
        )

    def _newest_manifest(
        self, tool_id: str, change: list[Any], started_at: float | None, digests: str | None,
        stored: list[Any],
    ) -> StoredManifest | None:  # fmt: skip
        # Three witnesses, newest wins: a ManifestLoaded/Removed event, the newest stored version,
        # and the digest the tool's newest turn started with. On a tie the event wins: it knows more.
        candidates: list[tuple[float, int, str | None, Any]] = []
        if change:
            event: Any = self._decode(change[0])
            digest = event.digest if isinstance(event, ManifestLoaded) else None
            candidates.append((event.at, 2, digest, event))
        in_turn = (json_value(digests) or {}).get(tool_id) if digests else None
        if isinstance(in_turn, str) and started_at is not None:
            candidates.append((started_at, 1, in_turn, None))
        if stored:
            candidates.append((stored[0][1], 0, stored[0][0], None))
        if not candidates:
            return None
        _, _, digest, event = max(candidates, key=lambda c: (c[0], c[1]))
        if digest is None:  # removed: the defaults apply now
            return None
        if not isinstance(event, ManifestLoaded):
            found = self._query(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE tool_id = ? AND {MANIFEST_CHANGES}"
                " AND event_type = 'ManifestLoaded' AND json_extract(data, '$.digest') = ?"
                " ORDER BY id DESC LIMIT 1",
                (tool_id, digest),
            )
            event = self._decode(found[0]) if found else None
        content = self._query("SELECT content, first_seen FROM manifests WHERE digest = ?", (digest,))
        if isinstance(event, ManifestLoaded):
            body = (
                event.manifest if event.manifest is not None else json_value(content[0][0]) if content else {}
            )
            return StoredManifest(digest, body or {}, event.version, event.path, event.at)
        if not content:
            return StoredManifest(digest, {}, None, None, started_at or 0.0)
        return StoredManifest(digest, json_value(content[0][0]) or {}, None, None, content[0][1])


def _breaker_of(event: Event) -> StoredBreaker | None:
    """The state a breaker event left: a transition's or restored override's, or a registration's."""
    if isinstance(event, BreakerTransitioned):
        half_open_at = event.half_open_at if event.to_state is BreakerState.OPEN else None
        return StoredBreaker(event.to_state, event.consecutive_failures, half_open_at, event.at)
    if isinstance(event, ToolRegistered):
        half_open_at = event.half_open_at if event.state is BreakerState.OPEN else None
        return StoredBreaker(event.state, event.consecutive_failures, half_open_at, event.at)
    return None
