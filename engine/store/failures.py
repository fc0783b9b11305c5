"""What goes wrong writing to a trace store, in SQLite's own words, and how it is reported.

A write the store refuses raises :class:`StoreWriteError`, whose ``kind`` tells a store that
cannot take writes now (locked by another process, a full disk, read-only, an I/O error, a
damaged file: keep the events and try again) from a batch that cannot be written at all (a bug:
write around it). :class:`FailureLog` reports a failure once when it starts, then a count every
minute while it lasts and once when it ends: never a line per batch.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.errors import TraceStoreError, one_line

WriteProblem = Literal["locked", "full", "read-only", "io", "corrupt", "other"]
"""Why a write failed: ``locked`` passes by itself; the others need the disk or the file seen to,
except ``other``: the batch itself cannot be written."""

_BY_CODE: dict[int, WriteProblem] = {
    sqlite3.SQLITE_BUSY: "locked",
    sqlite3.SQLITE_LOCKED: "locked",
    sqlite3.SQLITE_FULL: "full",
    sqlite3.SQLITE_READONLY: "read-only",
    sqlite3.SQLITE_PERM: "read-only",
    sqlite3.SQLITE_IOERR: "io",
    sqlite3.SQLITE_CANTOPEN: "io",
    sqlite3.SQLITE_NOMEM: "io",
    sqlite3.SQLITE_CORRUPT: "corrupt",
    sqlite3.SQLITE_NOTADB: "corrupt",
}


_BY_TEXT: tuple[tuple[tuple[str, ...], WriteProblem], ...] = (
    (("locked", "busy"), "locked"),
    (("disk is full",), "full"),
    (("readonly", "read-only"), "read-only"),
    (("disk I/O",), "io"),
    (("malformed", "not a database"), "corrupt"),
)


class StoreWriteError(TraceStoreError):
    """A write the store refused. ``problem`` is "write failed: " and SQLite's own message."""

    def __init__(self, path: str | Path, problem: str, kind: WriteProblem) -> None:
        super().__init__(path, problem, untouched=False)
        self.kind: WriteProblem = kind

    @property
    def store_cannot_write(self) -> bool:
        """The store, not the batch, is the problem: keep the batch and write it later."""
        return self.kind != "other"


def write_problem(exc: sqlite3.Error) -> WriteProblem:
    """Classify a SQLite error by its result code (its text where the code is missing)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and (kind := _BY_CODE.get(code & 0xFF)) is not None:
        return kind
    text = str(exc)
    for words, problem in _BY_TEXT:
        if any(w in text for w in words):
            return problem
    return "other"


def write_error(path: str | Path, exc: sqlite3.Error, action: str = "write") -> StoreWriteError:
    kind = write_problem(exc)
    name = getattr(exc, "sqlite_errorname", None)
    # "disk I/O error" alone does not say which: the extended code does (SQLITE_IOERR_WRITE, …).
    detail = f" ({name})" if kind == "io" and name else ""
    return StoreWriteError(path, one_line(f"{action} failed: {exc}{detail}"), kind)


@dataclass(slots=True)
class _Cause:
    since: float
    reported_at: float
    failures: int = 1
    unreported: int = 0


class FailureLog:
    """Reports each cause of failure once when it starts, a count every ``every_s`` while it
    lasts, and once when writes work again, with how many attempts failed meanwhile."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        /,
        *,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what
        self.every_s = every_s
        self._clock = clock
        self._causes: dict[str, _Cause] = {}

    @property
    def failing(self) -> bool:
        return bool(self._causes)

    def failed(self, cause: str, *, detail: str = "") -> None:
        """One more failure for ``cause`` (one line); logged only if it is new or a summary is due."""
        now = self._clock()
        known = self._causes.get(cause)
        if known is None:
            self._causes[cause] = _Cause(now, now)
            self.logger.warning("%s failed: %s%s", self.what, cause, detail)
            return
        known.failures += 1
        known.unreported += 1
        if now - known.reported_at >= self.every_s:
            self.logger.warning(
                "%s still fails: %s (%d more times in the last %.0fs)",
                self.what, cause, known.unreported, now - known.reported_at,
            )  # fmt: skip
            known.reported_at, known.unreported = now, 0

    def recovered(self, detail: str = "") -> None:
        """Writes work again: one line per cause that was failing."""
        now = self._clock()
        for cause, known in self._causes.items():
            self.logger.warning(
                "%s works again after %d failed attempt(s) over %.1fs (%s)%s",
                self.what, known.failures, now - known.since, cause, detail,
            )  # fmt: skip
        self._causes.clear()
