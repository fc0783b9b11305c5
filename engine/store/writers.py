"""Who records into a store, and what becomes of their turns when they are gone.

A store records its process in ``writers`` (host, pid, the process's start time, a heartbeat)
in the same transaction as the first turn it writes, and each turn row names its writer. A
process killed mid-turn (SIGKILL, a crash, the power) never writes the turn's end: the turn
would stay ``running`` for ever. So whenever a store is opened read-write, and every minute
while a recorder runs, the turns still ``running`` whose writer is gone are finished as
``interrupted``. A writer is gone when it closed; when it ran on this machine and its pid is
not alive, or now belongs to another process (a different start time), or the machine has
booted since; or, on another host (or in another pid namespace), when its heartbeat is older
than ``stale_after_s``. A TurnFinished that arrives later (from a
writer wrongly taken for gone) still overwrites the outcome: nothing is lost either way.

A writer that is gone without having closed the store is also why opening checks the store's
integrity (:func:`unclean_close`): a clean close sets ``closed_at``. Reconciling closes the writers
it finds gone, so it leaves a note in ``meta`` (``UNCHECKED``) that the next open checks and a
read-write open whose check passed removes (:meth:`WriterRegistry.integrity_checked`).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.liveness import Heard, judge
from engine.store.base import StoreCore
from engine.store.failures import write_error
from engine.store.opening import rollback
from engine.store.rows import WriterRow

log = logging.getLogger("tripwire.store")

HEARTBEAT_S = 2.0
"""How often a recording writer refreshes its heartbeat: an attached console takes an engine that
has said nothing (no event, no heartbeat) for a few of these for gone (STALE)."""
HEARD_WITHIN_S = 2.5 * HEARTBEAT_S
"""A recording writer with no heartbeat for this long is stale (one beat may be late): what every
reader shows (:func:`engine_heard`)."""
STALE_AFTER_S = 600.0
"""A writer on another host whose heartbeat is older than this is taken for gone; a turn with no
writer recorded (schema 2 and older) that started longer ago than this, too."""
_WRITER_COLUMNS = (
    "id, host, pid, process_key, process_started_at, opened_at, heartbeat_at, closed_at, found_gone"
)
_CHUNK = 500
"""Turn ids per statement: SQLite allows a limited number of parameters."""


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    host: str
    pid: int
    key: str | None
    """``boot id/pid namespace/start ticks`` (Linux): tells this process from a later one with its pid."""
    started_at: float | None

    @property
    def machine(self) -> str | None:
        """The boot and pid namespace part of ``key``: pids compare only within one."""
        return self.key.rsplit("/", 1)[0] if self.key else None


def this_process() -> ProcessIdentity:
    return _identity(os.getpid())  # by pid: a forked child is a writer of its own


@functools.cache
def _identity(pid: int) -> ProcessIdentity:
    ticks = _start_ticks(pid)
    machine = _machine()
    key = f"{machine}/{ticks}" if machine is not None and ticks is not None else None
    started_at = None
    if ticks is not None and (boot_time := _boot_time()) is not None:
        started_at = boot_time + ticks / os.sysconf("SC_CLK_TCK")
    return ProcessIdentity(socket.gethostname(), pid, key, started_at)


@functools.cache
def _machine() -> str | None:
    """This boot of this machine, and our pid namespace (Linux); None elsewhere."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}:{namespace}"


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None if it is not alive (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2 :].split()  # the name may hold spaces and parentheses
    if not rest or rest[0] in ("Z", "X"):
        return None
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    except OSError:
        return False
    return True


def process_alive(writer: WriterRow) -> bool | None:
    """Whether ``writer``'s process still runs, where this process can tell (the same machine:
    its pids mean what ours do); None where it cannot (another host, another pid namespace)."""
    me = this_process()
    machine = writer.process_key.rsplit("/", 1)[0] if writer.process_key else None
    if writer.host == me.host and machine == me.machine:
        if me.machine is None:  # no /proc to read start times from: the pid is all there is
            return _pid_alive(writer.pid)
        ticks = _start_ticks(writer.pid)
        return ticks is not None and f"{me.machine}/{ticks}" == writer.process_key
    if (
        writer.host == me.host
        and machine
        and me.machine
        and machine.split(":")[0] != me.machine.split(":")[0]
    ):
        return False  # this host booted since: every process of the earlier boot is gone
    return None


def _writer(row: Any) -> WriterRow:
    """A ``writers`` row selected as ``_WRITER_COLUMNS``."""
    id_, host, pid, key, started_at, opened_at, heartbeat_at, closed_at, found_gone = row
    return WriterRow(id_, host, pid, key, started_at, opened_at, heartbeat_at, closed_at, bool(found_gone))


def writer_alive(writer: WriterRow, now: float, *, stale_after_s: float = STALE_AFTER_S) -> bool:
    """Could ``writer`` still write the turns it started? See the module docstring."""
    if writer.closed_at is not None:
        return False
    alive = process_alive(writer)
    return alive if alive is not None else now - writer.heartbeat_at < stale_after_s


def engine_heard(writers: list[WriterRow], now: float, *, ages: Mapping[int, float] | None = None) -> Heard:
    """Whether the engine recording into a store is heard from: by its writers' heartbeats and
    processes (:func:`engine.liveness.judge`), never by its events' times. The newest writer
    that is live, else the newest one, decides.

    ``ages``: a reader that follows the store measures each writer's silence itself (since its
    heartbeat last changed, on its own monotonic clock: another host's wall clock may be off);
    otherwise it is ``now - heartbeat_at``.
    """
    judged = []
    for w in writers:
        who = f"{w.host} pid {w.pid}"
        if w.closed_at is not None and w.found_gone:  # killed or crashed: silent since its last heartbeat
            judged.append(Heard("gone", max(0.0, now - w.heartbeat_at), who))
            continue
        if w.closed_at is not None:
            judged.append(Heard("stopped", max(0.0, now - w.closed_at), who))
            continue
        age = ages.get(w.id) if ages is not None else None
        age = max(0.0, now - w.heartbeat_at) if age is None else age
        judged.append(Heard(judge(age, stale_after_s=HEARD_WITHIN_S, alive=process_alive(w)), age, who))
    if not judged:
        return Heard("never", None)
    return next((h for h in reversed(judged) if h.live), judged[-1])


UNCHECKED = "integrity_unchecked"
"""The ``meta`` key of the note that a writer stopped without closing the store, and no check has
passed since: its value says which."""


def _gone_unclosed(conn: sqlite3.Connection, now: float) -> list[WriterRow]:
    rows = conn.execute(f"SELECT {_WRITER_COLUMNS} FROM writers WHERE closed_at IS NULL").fetchall()
    return [w for w in (_writer(r) for r in rows) if not writer_alive(w, now)]


def _stopped(writer: WriterRow) -> str:
    return f"{writer.host} pid {writer.pid}, which wrote into it, stopped without closing it"


def unclean_close(conn: sqlite3.Connection) -> str | None:
    """Why the store's integrity is worth checking as it opens: a writer that is gone without
    having closed it (SIGKILLed, crashed, its machine stopped), or was found so by an earlier
    open; None when every writer that is gone closed it. A writer still alive is recording."""
    try:
        noted = conn.execute("SELECT value FROM meta WHERE key = ?", (UNCHECKED,)).fetchone()
        if noted is not None:
            return str(noted[0])
        gone = _gone_unclosed(conn, time.time())
    except sqlite3.Error as exc:
        if "no such table" in str(exc):
            return None  # schema 2 and older: opening migrates them, checking first
        return f"its writers cannot be read: {exc}"
    return _stopped(gone[0]) if gone else None


class WriterRegistry(StoreCore):
    """The ``writers`` table: registering this store, its heartbeat, and reconciling the others."""

    _has_writers: bool
    """Schema 3 or later: turns name their writer."""
    _heartbeat_at: float
    _writer_unsure: bool
    """Registered in the transaction under way: forgotten if it rolls back."""

    def _ensure_writer(self) -> int | None:
        """This store's writer id, registering it in the transaction under way on first use."""
        if self._writer_id is not None or not self._has_writers:
            return self._writer_id
        me, now = this_process(), self._wall_clock()
        cursor = self._conn.execute(
            "INSERT INTO writers (host, pid, process_key, process_started_at, opened_at, heartbeat_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (me.host, me.pid, me.key, me.started_at, now, now),
        )
        self._writer_id, self._writer_unsure, self._heartbeat_at = cursor.lastrowid, True, now
        return self._writer_id

    def _beat_in_transaction(self) -> None:
        """Refresh the heartbeat with a write that is going on anyway, when it is due."""
        now = self._wall_clock()
        if self._writer_id is not None and now - self._heartbeat_at >= HEARTBEAT_S:
            self._conn.execute("UPDATE writers SET heartbeat_at = ? WHERE id = ?", (now, self._writer_id))
            self._heartbeat_at = now

    def _transaction_ended(self, committed: bool) -> None:
        if self._writer_unsure:
            self._writer_unsure = False
            if not committed:
                self._writer_id = None

    def heartbeat(self, *, register: bool = False) -> bool:
        """Tell other processes this writer is alive (the recorder calls it every few seconds).

        ``register``: a writer that has written no turn yet registers now (a recorder does, so an
        idle engine is known alive too). Returns False when there is nothing to refresh; raises
        StoreWriteError when the store refuses the write."""
        with self._lock:
            if self.readonly or self._closed:
                return False
            if self._writer_id is None:
                if not register or not self._has_writers:
                    return False
                try:
                    self._ensure_writer()  # a statement of its own: committed at once
                except sqlite3.Error as exc:
                    self._transaction_ended(committed=False)
                    raise write_error(self.path, exc) from None
                self._transaction_ended(committed=True)
                return True
            now = self._wall_clock()
            try:
                self._conn.execute("UPDATE writers SET heartbeat_at = ? WHERE id = ?", (now, self._writer_id))
            except sqlite3.Error as exc:
                raise write_error(self.path, exc) from None
            self._heartbeat_at = now
            return True

    def newest_heartbeat(self) -> float | None:
        """The newest heartbeat of a writer still recording (not closed), by its wall clock; None
        when none is. How a reader in another process knows the engine is alive while it is idle."""
        if not self._has_writers:
            return None
        with self._lock:
            found = self._query("SELECT max(heartbeat_at) FROM writers WHERE closed_at IS NULL")
        value = found[0][0] if found else None
        return float(value) if isinstance(value, int | float) else None

    def writers(self) -> list[WriterRow]:
        """Every writer the store knows, oldest first."""
        if not self._has_writers:
            return []
        with self._lock:
            return [_writer(r) for r in self._query(f"SELECT {_WRITER_COLUMNS} FROM writers ORDER BY id")]

    def _close_writer(self) -> None:
        """A clean close: this writer will write no more (its running turns are reconciled)."""
        if self._writer_id is None or self.readonly:
            return
        try:
            self._conn.execute(
                "UPDATE writers SET closed_at = ? WHERE id = ?", (self._wall_clock(), self._writer_id)
            )
        except sqlite3.Error as exc:
            log.warning("trace store %s: could not mark its writer closed: %s", self.path, exc)

    def reconcile(self, *, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> int:
        """Finish as ``interrupted`` the running turns of writers that are gone; returns how many.

        Never raises for a store that cannot take the write (it is tried again on the next open,
        or the next minute of a recorder): reconciling must not stop anyone from opening a store.
        """
        if self.readonly or not self._has_writers:
            return 0
        now = self._wall_clock() if now is None else now
        with self._lock:
            running = {
                r[0] for r in self._query("SELECT DISTINCT writer FROM turns WHERE outcome = 'running'")
            }
            if not running:
                return 0
            ids = sorted(w for w in running if w is not None)
            marks = ", ".join("?" * len(ids))
            rows = self._query(f"SELECT {_WRITER_COLUMNS} FROM writers WHERE id IN ({marks})", ids)
            gone = [_writer(r) for r in rows]
            gone = [w for w in gone if not writer_alive(w, now, stale_after_s=stale_after_s)]
            unknown = (
                None in running
                and self._query(
                    "SELECT EXISTS (SELECT 1 FROM turns WHERE outcome = 'running' AND writer IS NULL"
                    " AND started_at < ?)",
                    (now - stale_after_s,),
                )[0][0]
            )
            if not gone and not unknown:
                return 0
            conn, count = self._conn, 0
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for w in gone:
                        count += self._interrupt(
                            "writer = ?", (w.id,), f"interrupted: {w.host} pid {w.pid}, which was recording"
                            " it, stopped before it finished", now,
                        )  # fmt: skip
                        conn.execute("UPDATE writers SET closed_at = ?, found_gone = 1 WHERE id = ?"
                                     " AND closed_at IS NULL", (now, w.id))  # fmt: skip
                        # Closed now, but not by itself: the next open checks the store's integrity.
                        conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                                     (UNCHECKED, _stopped(w)))  # fmt: skip
                    count += self._interrupt(
                        "writer IS NULL AND started_at < ?", (now - stale_after_s,),
                        "interrupted: left running by a tripwire that did not record its writer", now,
                    )  # fmt: skip
                    conn.execute("COMMIT")
                except BaseException:
                    rollback(conn)
                    raise
            except sqlite3.Error as exc:
                log.warning("trace store %s: could not reconcile interrupted turns: %s", self.path, exc)
                return 0
        if count:
            log.info("trace store %s: %d turn(s) left running by stopped writers marked interrupted",
                     self.path, count)  # fmt: skip
        return count

    def integrity_checked(self) -> None:
        """The check on opening passed: the writers found gone are closed, the note is removed.
        Never raises (the next open checks again)."""
        if self.readonly or not self._has_writers:
            return
        now = self._wall_clock()
        with self._lock:
            conn = self._conn
            try:
                noted = conn.execute("SELECT 1 FROM meta WHERE key = ?", (UNCHECKED,)).fetchone()
                gone = _gone_unclosed(conn, now)
                if noted is None and not gone:
                    return  # nothing to record (a small store is checked on every open)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for w in gone:
                        conn.execute(
                            "UPDATE writers SET closed_at = ?, found_gone = 1 WHERE id = ?", (now, w.id)
                        )
                    conn.execute("DELETE FROM meta WHERE key = ?", (UNCHECKED,))
                    conn.execute("COMMIT")
                except BaseException:
                    rollback(conn)
                    raise
            except sqlite3.Error as exc:
                log.warning("trace store %s: could not record its integrity check: %s", self.path, exc)

    def interrupt_turns(self, turn_ids: list[str], reason: str) -> int:
        """Finish as ``interrupted`` (with ``reason`` as the summary) those of ``turn_ids`` still
        running; returns how many. Raises StoreWriteError when the store refuses the write."""
        self._refuse_writes("write")
        if not turn_ids:
            return 0
        now, count = self._wall_clock(), 0
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for i in range(0, len(turn_ids), _CHUNK):
                        chunk = turn_ids[i : i + _CHUNK]
                        count += self._interrupt(f"turn_id IN ({', '.join('?' * len(chunk))})", chunk,
                                                 reason, now)  # fmt: skip
                    conn.execute("COMMIT")
                except BaseException:
                    rollback(conn)
                    raise
            except sqlite3.Error as exc:
                raise write_error(self.path, exc) from None
            for turn_id in turn_ids:
                self._open_turns.pop(turn_id, None)
        return count

    def _interrupt(self, where: str, params: tuple[object, ...] | list[str], summary: str, now: float) -> int:
        """Ended when its last stored event happened (the best we know), in the transaction under way."""
        last = "coalesce((SELECT max(at) FROM events WHERE turn = turns.id), started_at)"
        cursor = self._conn.execute(
            f"UPDATE turns SET outcome = 'interrupted', summary = ?, ended_at = {last},"
            f" duration_ms = ({last} - started_at) * 1000.0 WHERE outcome = 'running' AND {where}",
            (summary, *params),
        )
        return cursor.rowcount
