"""``tripwire traces where|list|show|export|prune|audit|check``: the stored turns, the operator
commands sent to the engines recording them, and the store's integrity."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from console.cli.tables import Column, aligned_rows, cli_table
from console.usage import UsageError, parse_span, parse_when
from engine.errors import iso_timestamp
from engine.liveness import Heard
from engine.store import CommandRow, ExportRefused, StoredTurn, TraceStore, TraceStoreError, TurnRow
from engine.store.opening import file_integrity_problem
from engine.store.writers import engine_heard

REFRESH_BUSY_MS = 200
"""How long a listing waits for a writer's lock before showing the store as it is."""

OUTCOME_STYLE = {
    "ok": "green",
    "degraded": "yellow",
    "failed": "red",
    "timed_out": "dark_orange",
    "canceled": "dim",
    "interrupted": "magenta",
    "running": "cyan",
}


def open_store(path: Path, *, readonly: bool = True) -> TraceStore:
    """The trace store at ``path`` for a command, brought up to date first when it is only read."""
    if readonly and not path.exists():
        raise TraceStoreError(path, "no trace store here (run `tripwire demo` or `tripwire run` first)")
    if readonly and os.access(path, os.W_OK):
        _bring_up_to_date(path)
    return TraceStore(path, readonly=readonly, verify=False)


def _bring_up_to_date(path: Path) -> None:
    """Open the store read-write for a moment, when we may: that finishes as ``interrupted`` the
    turns of writers that are gone (a SIGKILLed ``serve``) and migrates an older schema, so what
    is shown is true. Best effort: a store busy or refusing writes is shown as it is. Integrity is
    checked when it is warranted (a writer stopped without closing the store): a corrupt store is
    still shown as far as it can be read."""
    with contextlib.suppress(TraceStoreError):
        TraceStore(path, verify=None, create=False, busy_timeout_ms=REFRESH_BUSY_MS).close()


def where_command(traces: Path, why: str, console: Console, *, as_json: bool) -> int:
    """Which trace store the commands here use, why, and whether it exists yet."""
    exists = traces.exists()
    if as_json:
        print(json.dumps({"path": str(traces.absolute()), "why": why, "exists": exists}))
        return 0
    state = "" if exists else "; nothing recorded there yet"
    console.print(f"{traces.absolute()}", highlight=False, soft_wrap=True)
    console.print(Text(f"{why}{state}", style="dim"), soft_wrap=True)
    return 0


def _engine_dict(heard: Heard) -> dict[str, Any]:
    """Whether the engine recording into the store is heard from, as ``--json`` prints it."""
    age = None if heard.age_s is None else round(heard.age_s, 3)
    return {"status": heard.status, "heard_from_s_ago": age, "writer": heard.who or None}


def _row_dict(row: TurnRow) -> dict[str, Any]:
    return {
        "turn_id": row.turn_id,
        "started_at": iso_timestamp(row.started_at),
        "duration_ms": row.duration_ms,
        "outcome": row.outcome,
        "summary": row.summary,
        "calls": row.calls,
        "executed": row.executed,
        "tools": list(row.tools),
    }


def list_command(
    traces: Path,
    console: Console,
    *,
    limit: int,
    cursor: str | None,
    outcome: str | None,
    tool: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> int:
    with open_store(traces) as store:
        page = store.list_turns(
            limit=limit,
            cursor=cursor,
            outcome=outcome,
            tool=tool,
            since=parse_when(since),
            until=parse_when(until),
        )
        heard = engine_heard(store.writers(), time.time())
    if as_json:
        turns = [_row_dict(r) for r in page.rows]
        print(json.dumps({"turns": turns, "next_cursor": page.next_cursor, "engine": _engine_dict(heard)}))
        return 0
    console.print(Text(f"turns in {traces}", style="bold"), soft_wrap=True)
    console.print(Text(f"the engine recording into it: {heard.words()}", style="dim"), soft_wrap=True)
    columns = (Column("started"), Column("turn"), Column("outcome"), Column("calls", "right", "{} calls"),
               Column("ms", "right", "{} ms"))  # fmt: skip
    cells = [
        (
            iso_timestamp(row.started_at)[:19].replace("T", " "),
            row.turn_id,
            Text(row.outcome, style=OUTCOME_STYLE.get(row.outcome, "")),
            str(row.calls),
            "—" if row.duration_ms is None else f"{row.duration_ms:,.0f}",
        )
        for row in page.rows
    ]
    notes = [row.summary or "" for row in page.rows]
    for line in aligned_rows(console, columns, cells, notes, note_header="summary"):
        console.print(line, soft_wrap=True)  # a turn's line is never wrapped: its id stays whole
    if page.next_cursor:
        console.print(Text(f"more: --cursor {page.next_cursor}", style="dim"), soft_wrap=True)
    return 0


def show_command(traces: Path, turn_id: str, console: Console, *, as_json: bool) -> int:
    with open_store(traces) as store:
        stored = store.load_turn(turn_id)
        heard = engine_heard(store.writers(), time.time())
    row = stored.row
    if as_json:
        shown = {**_row_dict(row), "events": [e.to_dict() for e in stored.events]}
        if row.outcome == "running":
            shown["engine"] = _engine_dict(heard)
        print(json.dumps(shown, default=str))
        return 0
    heading = Text.assemble(
        (row.turn_id, "bold"), "  ", (row.outcome, OUTCOME_STYLE.get(row.outcome, "")), "  ",
        iso_timestamp(row.started_at),
    )  # fmt: skip
    console.print(heading, soft_wrap=True)  # the id is never wrapped
    if row.outcome == "running":  # still running, or left so by an engine that is not heard from
        console.print(
            Text(f"the engine recording into {traces}: {heard.words()}", style="dim"), soft_wrap=True
        )
    if row.summary:
        console.print(Text(row.summary))
    console.print(_timeline(stored))
    return 0


def _timeline(stored: StoredTurn) -> Table:
    table = cli_table("events")
    table.add_column("+s", justify="right", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("call", no_wrap=True)
    table.add_column("what", overflow="fold", ratio=1)
    start = stored.events[0].t if stored.events else 0.0
    for event in stored.events:
        table.add_row(
            f"{event.t - start:.3f}",
            event.event_type,
            getattr(event, "call_id", None) or "",
            Text(event.describe()),  # text, never markup: errors and reasons come from outside
        )
    return table


def export_command(
    traces: Path,
    turn_id: str | None,
    output: Path | None,
    *,
    since: str | None,
    until: str | None,
    force: bool = False,
) -> int:
    """Events as JSON Lines to stdout (streamed), or into a new file that appears whole or not at all."""
    since_at, until_at = parse_when(since), parse_when(until)
    with open_store(traces) as store:
        if output is None:
            store.export_jsonl(sys.stdout, turn_id=turn_id, since=since_at, until=until_at)
            return 0
        try:
            count = store.export_jsonl(output, turn_id=turn_id, since=since_at, until=until_at, force=force)
        except ExportRefused as exc:
            hint = {"force": "; add --force to replace it", "stream": "; leave out -o to write to stdout"}
            raise UsageError(f"-o {exc.path}: {exc.problem}{hint.get(exc.remedy or '', '')}") from None
    print(f"{count} events written to {output}", file=sys.stderr)
    return 0


def prune_command(
    traces: Path, console: Console, *, older_than: str | None, keep: int | None, as_json: bool = False
) -> int:
    if older_than is None and keep is None:
        raise UsageError("say what to prune: --older-than 7d and/or --keep N")
    span = parse_span(older_than) if older_than is not None else None
    if span is not None and not span > 0:
        raise UsageError(f"--older-than must be longer than 0, got {older_than!r}")
    with open_store(traces, readonly=False) as store:
        removed = store.prune(older_than_s=span, keep=keep)
        left = store.counts()["turns"]
    if as_json:
        print(json.dumps({"pruned": removed, "turns_left": left}))
    else:
        console.print(f"pruned {removed} turn(s) from {traces}; {left} left")
    return 0


COMMAND_STYLE = {"applied": "green", "failed": "red", "refused": "bold red", "pending": "cyan"}


def check_command(traces: Path, console: Console, *, full: bool, as_json: bool) -> int:
    """SQLite's integrity check on the whole store: 0 when it finds nothing wrong, 1 when the store
    is corrupt (the problem on one line, on stderr). Reads the whole file; changes nothing."""
    if not traces.exists():
        raise TraceStoreError(traces, "no trace store here", untouched=False)
    check = "integrity_check" if full else "quick_check"
    started = time.perf_counter()
    try:
        with TraceStore(traces, readonly=True, verify=False) as store:
            problem = store.check(full=full)
    except TraceStoreError as exc:
        if exc.problem.startswith("corrupt"):
            problem = exc.problem
        elif " is older than " in exc.problem:  # ours, not yet migrated: check it as it is
            problem = file_integrity_problem(traces, full=full)
        else:
            raise  # not a store, locked, unreadable: exit 2 like every command
    elapsed_ms = (time.perf_counter() - started) * 1000
    size = traces.stat().st_size
    if as_json:
        print(json.dumps({"path": str(traces), "ok": problem is None, "problem": problem, "check": check,
                          "bytes": size, "ms": round(elapsed_ms, 1)}))  # fmt: skip
    elif problem is None:
        line = f"ok: {traces} ({size / 1e6:,.1f} MB, {check} in {elapsed_ms:,.0f} ms)"
        console.print(line, highlight=False, soft_wrap=True)
    if problem is not None:
        print(f"tripwire: {traces}: {problem}", file=sys.stderr)
        return 1
    return 0


def audit_command(
    traces: Path, console: Console, *, since: str | None, until: str | None, limit: int, as_json: bool
) -> int:
    """The operator commands, newest first: who sent what, when, why, and what became of it."""
    with open_store(traces) as store:
        rows = store.command_history(since=parse_when(since), until=parse_when(until), limit=limit)
    if as_json:
        print(json.dumps({"commands": [_command_dict(row) for row in rows]}))
        return 0
    if not rows:
        console.print(Text(f"no operator commands in {traces}", style="dim"), soft_wrap=True)
        return 0
    console.print(Text(f"operator commands in {traces}", style="bold"), soft_wrap=True)
    columns = (Column("answered"), Column("who"), Column("pid", "right", "pid {}"), Column("action"),
               Column("tool"), Column("outcome"))  # fmt: skip
    cells = [
        (
            _time(row.applied_at if row.applied_at is not None else row.created_at),
            _who(row),
            _printable(row.pid if row.pid is not None else "—"),
            _printable(row.action),
            _printable(row.tool_id),
            Text(_printable(row.status), style=COMMAND_STYLE.get(row.status, "")),
        )
        for row in rows
    ]
    notes = [_command_note(row) for row in rows]
    for line in aligned_rows(console, columns, cells, notes, note_header="why, and what became of it"):
        console.print(line, soft_wrap=True)  # a command's line is never wrapped: names stay whole
    return 0


def _command_dict(row: CommandRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "sent_at": _iso(row.created_at),
        "answered_at": _iso(row.applied_at),
        "expires_at": _iso(row.expires_at),
        "actor": row.actor,
        "host": row.host,
        "pid": row.pid,
        "action": row.action,
        "tool_id": row.tool_id,
        "reason": row.reason,
        "status": row.status,
        "result": row.result,
    }


def _command_note(row: CommandRow) -> str:
    parts = [f"reason: {row.reason}"] if row.reason else []
    result = row.result or ""
    if row.status == "applied":
        parts.append(f"left it {result}")
    elif row.status == "pending":
        parts.append("not answered yet")
    else:
        parts.append(f"{row.status}: {result}")
    return _printable(" · ".join(parts))


def _who(row: CommandRow) -> str:
    actor = _printable(row.actor) if str(row.actor).strip() else "(no actor)"
    return f"{actor}@{_printable(row.host) if row.host else '?'}"


def _printable(value: object) -> str:
    """What another process wrote into the table, shown on one line with its control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


def _iso(at: object) -> str | None:
    if at is None:
        return None
    try:
        return iso_timestamp(float(at))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):  # a time another process wrote oddly
        return _printable(at)


def _time(at: object) -> str:
    iso = _iso(at)
    return "—" if iso is None else iso[:19].replace("T", " ")
