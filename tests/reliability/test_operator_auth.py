"""Only the owner of a store's command key commands the engine serving it (issue 12 §3).

A real ``tripwire serve`` in another process; a real attached console sends it commands, which
are applied, while commands written straight into its store — as any process that can write the
file could — are refused, each with its reason: forged (a wrong MAC), MAC-less, signed but from
a reserved or a blank actor, expired, and one replayed. ``tripwire traces audit`` then lists
the console's commands and every refusal. A console that cannot read the key is read-only and
says why.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from console.attach import AttachedLink
from engine.events import BreakerDisabled, BreakerReset, BreakerTripped
from engine.store import TraceStore
from engine.store.command_auth import command_origin, sign, signed_content
from tests.polling import wait_for
from tests.serving import ROOT, served

DEADLINE_S = 20.0
ME = command_origin()


def first_line(process: subprocess.Popen[str]) -> str:
    """The service's first line on stdout, waited for on a real deadline."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], DEADLINE_S)
    assert ready, "tripwire serve said nothing"
    return process.stdout.readline()


def insert(
    conn: sqlite3.Connection,
    *,
    key: bytes | None,
    mac: str | None = None,
    action: str = "disable",
    tool_id: str = "flight_search",
    reason: str = "",
    actor: str = ME.user,
    created_at: float | None = None,
    expires_in_s: float = 30.0,
) -> int:
    """A command written with sqlite3 alone; signed with ``key`` when one is given."""
    created = time.time() if created_at is None else created_at
    expires_at = created + expires_in_s
    with conn:
        cursor = conn.execute(
            "INSERT INTO commands (created_at, action, tool_id, actor, reason, expires_at, host, pid)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (created, action, tool_id, actor, reason, expires_at, ME.host, ME.pid),
        )
        command_id = cursor.lastrowid
        assert command_id is not None
        if key is not None:
            content = signed_content(
                id=command_id, action=action, tool_id=tool_id, reason=reason, actor=actor, host=ME.host,
                pid=ME.pid, created_at=created, expires_at=expires_at,
            )  # fmt: skip
            mac = sign(key, content)
        conn.execute("UPDATE commands SET mac = ? WHERE id = ?", (mac, command_id))
    return command_id


def status(conn: sqlite3.Connection, command_id: int) -> tuple[str, str | None]:
    row = conn.execute("SELECT status, result FROM commands WHERE id = ?", (command_id,)).fetchone()
    return row[0], row[1]


def audit(db: Path, *extra: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "console", "traces", "audit", "--traces", str(db), *extra],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, "COLUMNS": str(columns)},
    )  # fmt: skip


UNSIGNED = "unsigned: it carries no MAC (only a holder of the store's command key may command)"
FORGED = "forged or altered: its MAC does not match its content under the store's command key"
RESERVED = "reserved actor 'engine': only the engine's own transitions are recorded as 'engine'"
BLANK = "no actor: a command must name the OS user who sent it"
EXPIRED = "expired: not applied within 30s of being sent (the engine was not serving commands)"


def test_a_served_engine_takes_only_its_key_holders_commands_and_the_audit_lists_them(
    tmp_path: Path,
) -> None:
    with served(tmp_path) as (process, db):
        assert first_line(process).startswith(f"tripwire serve: recording to {db}; attach with")
        key_path = db.with_name("traces.db.key")
        assert key_path.stat().st_mode & 0o777 == 0o600, "made with the store, owner-only"
        key = key_path.read_bytes()

        # A real console: its commands are signed and name this process; the engine applies them.
        link = AttachedLink(db)
        try:
            assert not link.read_only and link.read_only_reason is None
            tripped = link.send("trip", "hotel_search", reason="vendor maintenance")
            reset = link.send("reset", "hotel_search", reason="vendor back")
        finally:
            link.close()
        assert (tripped.status, tripped.result, reset.status, reset.result) == (
            "applied", "FORCED_OPEN", "applied", "CLOSED"
        )  # fmt: skip

        # Anyone who can write the store, straight into the table.
        conn = sqlite3.connect(db, timeout=10)
        try:
            refused = {
                insert(conn, key=None, mac="0" * 64): FORGED,
                insert(conn, key=None): UNSIGNED,
                insert(conn, key=key, actor="engine"): RESERVED,
                insert(conn, key=key, actor=""): BLANK,
                insert(conn, key=key, created_at=time.time() - 60): EXPIRED,
            }
            # The console's applied reset, set pending again: signed, unexpired, and taken already.
            with conn:
                conn.execute(
                    "UPDATE commands SET status = 'pending', result = NULL, applied_at = NULL WHERE id = ?",
                    (reset.id,),
                )
            refused[reset.id] = f"replayed: command {reset.id} was taken already"
            wait_for(
                lambda: all(status(conn, i)[0] != "pending" for i in refused),
                "every command answered",
                DEADLINE_S,
            )
            assert {i: status(conn, i) for i in refused} == {
                i: ("refused", why) for i, why in refused.items()
            }
        finally:
            conn.close()

        process.send_signal(signal.SIGTERM)
        assert process.wait(DEADLINE_S) == 0, "a clean stop"

    with TraceStore(db, readonly=True) as store:
        events = list(store.events())
    operator = f"operator:{ME.user}@{ME.host}"
    assert [(type(e), e.actor) for e in events if isinstance(e, BreakerTripped | BreakerReset)] == [
        (BreakerTripped, operator),
        (BreakerReset, operator),
    ], "the console's two commands, each once, by the OS user and host that sent them"
    assert not [e for e in events if isinstance(e, BreakerDisabled)], "no refused command was applied"

    listed = audit(db, "--json")
    assert listed.returncode == 0, listed.stderr
    commands = json.loads(listed.stdout)["commands"]
    assert [c["id"] for c in commands] == sorted([tripped.id, *refused], reverse=True), "newest first"
    by_id = {c["id"]: c for c in commands}
    trip = by_id[tripped.id]
    assert (trip["actor"], trip["host"], trip["pid"], trip["action"], trip["tool_id"]) == (
        ME.user, ME.host, ME.pid, "trip", "hotel_search"
    )  # fmt: skip
    assert (trip["reason"], trip["status"], trip["result"]) == (
        "vendor maintenance",
        "applied",
        "FORCED_OPEN",
    )
    assert trip["sent_at"].endswith("Z") and trip["answered_at"] >= trip["sent_at"]
    assert {i: (by_id[i]["status"], by_id[i]["result"]) for i in refused} == {
        i: ("refused", why) for i, why in refused.items()
    }

    shown = audit(db)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"operator commands in {db}"  # a path: never wrapped either
    assert all(len(line) <= 80 for line in lines[1:]), shown.stdout
    (trip_line,) = [line for line in lines if " trip " in line]
    assert f"{ME.user}@{ME.host}" in trip_line and "hotel_search" in trip_line and "applied" in trip_line
    assert sum(line.endswith(" refused") for line in lines) == len(refused)
    assert "(no actor)@" in shown.stdout and "replayed: command" in shown.stdout


def _without_file_permission_override() -> None:
    """In the child, before exec: root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH is held
    to file modes like any user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


CHECK = """
import json, sys
from console.attach import AttachedLink
link = AttachedLink(sys.argv[1])
try:
    link.send("trip", "hotel_search", reason="")
except PermissionError as exc:
    refused = str(exc)
print(json.dumps([link.read_only, link.store.readonly, link.read_only_reason, refused]))
link.close()
"""


def test_a_console_that_cannot_read_the_key_is_read_only_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        store.command_key()
    key = db.with_name("traces.db.key")
    before = key.read_bytes()
    preexec: Any = None
    if os.geteuid() == 0:
        # The engine's user owns the key (0600); this console runs as root held to file modes.
        os.chown(key, 65534, -1)
        preexec = _without_file_permission_override
    else:
        key.chmod(0o000)
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(db)], capture_output=True, text=True, timeout=60, cwd=ROOT,
        preexec_fn=preexec,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    read_only, opened_read_only, reason, refused = json.loads(done.stdout)
    why = (
        "traces.db.key: cannot read the command key: permission denied (only its owner may command the"
        " engine)"
    )
    assert (read_only, opened_read_only, reason) == (True, True, why)
    assert refused == f"the console is read-only: {why}"
    if os.geteuid() == 0:
        os.chown(key, 0, -1)
    key.chmod(0o600)
    assert key.read_bytes() == before, "never touched"
    with TraceStore(db, readonly=True) as store:
        assert store.command_history() == [], "it wrote nothing"


def test_serve_no_commands_takes_none_and_attached_consoles_are_read_only(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        store.command_key()  # served with commands before
    with served(tmp_path, "--no-commands") as (process, served_db):
        assert served_db == db
        assert first_line(process).startswith(
            f"tripwire serve: recording to {db}, taking no operator commands; attach with"
        )
        link = AttachedLink(db)
        try:
            assert link.read_only and link.store.readonly
            assert link.read_only_reason == (
                "the service on this store takes no operator commands (tripwire serve --no-commands)"
            )
        finally:
            link.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(DEADLINE_S) == 0
