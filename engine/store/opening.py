"""Opening a trace store: refuse anything that is not a healthy tripwire store, create and migrate ours.

Opening never modifies a file it refuses: a file that is not SQLite, a SQLite database of
another application, a corrupt, locked or unreadable file, or a schema newer than this code
raises :class:`TraceStoreError`, whose ``str()`` is one line ending "(left untouched)".

Integrity (``PRAGMA quick_check``, which reads the whole file: 0.56 s for 477 MB) is checked when
it is warranted, not on every open: when the last writer did not close the store (killed, or
its machine stopped), when the file is shorter than its header says, when a migration is due,
when the store is small enough that the check costs a few milliseconds, or on request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from engine.errors import TraceStoreError
from engine.files import (
    FILE_MODE,
    create_private_file,
    make_private_directories,
    owned_by_someone_else,
    wider_than_owner,
)
from engine.store import schema

log = logging.getLogger("tripwire.store")

SQLITE_MAGIC = b"SQLite format 3\x00"
CHEAP_CHECK_BYTES = 1 << 20
"""Up to this size a store is checked on every open: quick_check takes 1.2 ms per MB (5 ms on a busy
2-core machine), so at most a few ms here."""

Unclean = Callable[[sqlite3.Connection], "str | None"]
"""Why the store was not closed cleanly by its last writer (:func:`engine.store.writers.unclean_close`),
or None."""


def open_store(
    path: Path,
    readonly: bool,
    synchronous: str,
    busy_timeout_ms: int,
    verify: bool | None,
    create: bool = True,
    unclean: Unclean | None = None,
) -> tuple[sqlite3.Connection, str | None]:
    """Open (or create) the store, refusing anything that is not a healthy tripwire store of ours.

    ``verify``: check integrity always (True), never (False) or when warranted (None). Returns the
    connection and why integrity was checked (and found sound), or None when it was not."""
    if readonly:
        inspect_file(path, readonly=True)
        return validated(path, busy_timeout_ms, verify, readonly=True, unclean=unclean)
    if create:
        created = create_file(path)
    else:
        inspect_file(path, readonly=True)  # nothing there, or an empty file: refused, never created
        created = False
    # An empty file is a creation that was interrupted before SQLite wrote anything: adopt it.
    fresh = created or not inspect_file(path, readonly=False)
    checked = None
    if not fresh:
        reader, checked = validated(path, busy_timeout_ms, verify, readonly=False, unclean=unclean)
        reader.close()
    if not created:  # only once it is known to be a store of ours
        adopt(path)
    conn = connect(path, busy_timeout_ms, readonly=False)
    try:
        if fresh:
            # Our mark goes into the header first: a store interrupted later is still recognisably ours.
            conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
        else:
            check_writable(conn, path, busy_timeout_ms)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        migrate(conn, path, fresh, busy_timeout_ms)
    except BaseException:
        conn.close()
        if created and isinstance(sys.exc_info()[1], TraceStoreError):
            with contextlib.suppress(OSError):
                path.unlink()  # we made it and it holds nothing
        raise
    return conn, checked


def create_file(path: Path) -> bool:
    """Create the file owner-only before SQLite touches it; False when something is there already."""
    try:
        make_private_directories(path.parent)
    except (FileExistsError, NotADirectoryError):
        raise TraceStoreError(
            path, f"cannot create: {path.parent} is not a directory", untouched=False
        ) from None
    except OSError as exc:
        raise TraceStoreError(path, f"cannot create: {exc.strerror or exc}", untouched=False) from None
    try:
        fd = create_private_file(path)
    except OSError as exc:
        raise TraceStoreError(path, f"cannot create: {exc.strerror or exc}", untouched=False) from None
    if fd is None:
        return False
    os.close(fd)
    return True


def adopt(path: Path) -> None:
    """An existing store opened read-write must be its owner's alone: another user's is refused
    (untouched); one others may read is narrowed to 0600, with its -wal and -shm, and said so."""
    if (uid := owned_by_someone_else(path)) is not None:
        raise TraceStoreError(path, f"owned by another user (uid {uid}): a trace store must be its owner's")
    for file in (path, *(Path(f"{path}{suffix}") for suffix in ("-wal", "-shm"))):
        try:
            mode = wider_than_owner(file)
        except FileNotFoundError:
            continue
        if mode is not None:
            os.chmod(file, FILE_MODE)
            log.warning("trace store %s was open to other users (%o): now owner-only", file, mode)


def inspect_file(path: Path, *, readonly: bool) -> bool:
    """Look at the file before SQLite does; returns False for an empty file (nothing in it yet)."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        raise TraceStoreError(path, "no trace store here", untouched=False) from None
    except IsADirectoryError:
        raise TraceStoreError(path, "is a directory, not a trace store") from None
    except OSError as exc:
        raise TraceStoreError(path, f"cannot read: {exc.strerror or exc}") from None
    if not header:
        if readonly:
            raise TraceStoreError(path, "empty file, not a trace store")
        if not os.access(path, os.W_OK):
            raise TraceStoreError(path, "cannot write: permission denied")
        return False
    if not header.startswith(SQLITE_MAGIC):
        raise TraceStoreError(path, "not a SQLite database, so not a trace store")
    if len(header) < 100:
        raise TraceStoreError(path, "corrupt: truncated SQLite header")
    app_id = int.from_bytes(header[68:72], "big")
    if app_id not in (0, schema.APPLICATION_ID):
        raise TraceStoreError(path, f"a SQLite database of another application (application_id {app_id:#x})")
    if not readonly and not os.access(path, os.W_OK):
        raise TraceStoreError(path, "cannot write: permission denied (open it read-only to browse)")
    return True


def connect(path: Path, busy_timeout_ms: int, *, readonly: bool) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.absolute()))}{'?mode=ro' if readonly else '?mode=rw'}"
    try:
        conn = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
    except sqlite3.Error as exc:
        raise TraceStoreError(path, open_problem(exc, busy_timeout_ms)) from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA cache_size = -16000")  # 16 MB: index inserts stay in memory
    except sqlite3.Error as exc:
        conn.close()
        raise TraceStoreError(path, open_problem(exc, busy_timeout_ms)) from None
    return conn


def open_problem(exc: sqlite3.Error, busy_timeout_ms: int) -> str:
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if "locked" in text or "busy" in text or code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return f"locked by another writer (still busy after {busy_timeout_ms / 1000:g}s)"
    if "not a database" in text:
        return "not a SQLite database (or encrypted), so not a trace store"
    if "malformed" in text or "corrupt" in text:
        return f"corrupt: {text}"
    return f"cannot open: {text}"


def validated(
    path: Path, busy_timeout_ms: int, verify: bool | None, *, readonly: bool, unclean: Unclean | None = None
) -> tuple[sqlite3.Connection, str | None]:
    """A read-only connection that has checked this is a healthy tripwire store we can read, and
    why its integrity was checked too (None: it was not)."""
    conn = connect(path, busy_timeout_ms, readonly=True)
    try:
        try:
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = {
                r[0]
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                if not str(r[0]).startswith("sqlite_")
            }
        except sqlite3.Error as exc:
            raise TraceStoreError(path, open_problem(exc, busy_timeout_ms)) from None
        current = len(schema.MIGRATIONS)
        if app_id != schema.APPLICATION_ID:
            if tables:
                listed = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
                raise TraceStoreError(path, f"a SQLite database that is not a trace store (tables: {listed})")
            raise TraceStoreError(path, "an empty SQLite database that is not a trace store")
        if version > current:
            raise TraceStoreError(
                path,
                f"schema version {version} is newer than this tripwire supports ({current})",
            )
        if version == current and not tables >= schema.TABLES:
            raise TraceStoreError(
                path, f"corrupt: missing table(s) {', '.join(sorted(schema.TABLES - tables))}"
            )
        if readonly and version < current:
            raise TraceStoreError(
                path, f"schema version {version} is older than {current}: open it once read-write to migrate"
            )
        reason = (
            "asked to" if verify else None if verify is False else warranted(path, conn, version, unclean)
        )
        if reason is not None:
            log.info("trace store %s: checking its integrity (%s)", path, reason)
            quick_check(conn, path, busy_timeout_ms)
    except BaseException:
        conn.close()
        raise
    return conn, reason


def warranted(path: Path, conn: sqlite3.Connection, version: int, unclean: Unclean | None) -> str | None:
    """Why this store's integrity should be checked as it opens, or None: see the module docstring."""
    if version < len(schema.MIGRATIONS):
        return "before migrating it"
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        return f"cannot look at it: {exc.strerror or exc}"
    if size <= CHEAP_CHECK_BYTES:
        return "a small store"
    page_size = int.from_bytes(header[16:18], "big")
    pages = int.from_bytes(header[28:32], "big")
    # The header's page count is valid when its "version valid for" matches the change counter.
    if header[92:96] == header[24:28] and pages * (65536 if page_size == 1 else page_size) > size:
        return f"the file is shorter than its header says ({size:,} bytes)"
    return unclean(conn) if unclean is not None else None


def file_integrity_problem(path: Path, *, full: bool = False) -> str | None:
    """:func:`integrity_problem` of the file at ``path``, opened read-only whatever its schema
    version: a check of a store older than this code must not need the migration first."""
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return open_problem(exc, 0)
    try:
        return integrity_problem(conn, full=full)
    except sqlite3.Error as exc:
        return open_problem(exc, 0)
    finally:
        conn.close()


def integrity_problem(conn: sqlite3.Connection, *, full: bool = False) -> str | None:
    """``corrupt: <SQLite's first finding>`` on one line, or None when the check finds nothing.

    ``full``: ``integrity_check`` (also compares every index with its table) instead of
    ``quick_check``. Raises sqlite3.Error when the file cannot be read that far."""
    problems = [r[0] for r in conn.execute(f"PRAGMA {'integrity_check' if full else 'quick_check'}(3)")]
    if problems == ["ok"]:
        return None
    lines = [line for p in problems for line in str(p).splitlines() if not line.startswith("***")]
    more = " (and more)" if len(lines) > 1 else ""
    return f"corrupt: {lines[0] if lines else problems[0]}{more}"


def quick_check(conn: sqlite3.Connection, path: Path, busy_timeout_ms: int) -> None:
    """Raise TraceStoreError (one line, "corrupt: …") unless ``PRAGMA quick_check`` finds nothing."""
    try:
        problem = integrity_problem(conn)
    except sqlite3.Error as exc:
        raise TraceStoreError(path, open_problem(exc, busy_timeout_ms)) from None
    if problem is not None:
        raise TraceStoreError(path, problem)


def check_writable(conn: sqlite3.Connection, path: Path, busy_timeout_ms: int) -> None:
    """Take the write lock once: another writer holding it past the busy timeout means locked."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise TraceStoreError(path, open_problem(exc, busy_timeout_ms)) from None


def migrate(conn: sqlite3.Connection, path: Path, fresh: bool, busy_timeout_ms: int) -> None:
    """Bring the schema to the newest version: every missing migration in one transaction."""
    migrations = list(schema.MIGRATIONS)
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) >= len(migrations):
        return
    from sqlite_utils import Database  # only needed to migrate: readers start faster without it

    db = Database(conn, recursive_triggers=False, execute_plugins=False)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise TraceStoreError(path, open_problem(exc, busy_timeout_ms)) from None
    version = step = int(conn.execute("PRAGMA user_version").fetchone()[0])  # another process may have won
    try:
        if version < len(migrations):
            for step in range(version, len(migrations)):
                migrations[step](db)
            conn.execute(f"PRAGMA user_version = {len(migrations)}")
            now = repr(time.time())
            conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [*([("created_at", now)] if fresh else []), (f"schema_{len(migrations)}_at", now)],
            )
        conn.execute("COMMIT")
    except Exception as exc:
        rollback(conn)
        problem = f"migration to schema version {step + 1} failed: {type(exc).__name__}: {exc}"
        raise TraceStoreError(path, problem, untouched=not fresh) from None


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back what is left of a failed transaction, hiding nothing.

    SQLite rolls back by itself on some errors (a full disk, an I/O error): a ROLLBACK then fails
    with "cannot rollback - no transaction is active", which must never replace the real error.
    """
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
