"""``tripwire traces list|show|export|prune`` and ``tripwire replay``: the stored turns."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from engine.errors import iso_timestamp
from engine.replay import Recording, ReplayError, replay_on_virtual_time
from engine.store import StoredTurn, TraceStore, TraceStoreError, TurnRow

OUTCOME_STYLE = {
    "ok": "green",
    "degraded": "yellow",
    "failed": "red",
    "timed_out": "dark_orange",
    "canceled": "dim",
    "running": "cyan",
}

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class UsageError(Exception):
    """Bad command-line input; ``str()`` is the one line to print."""


def parse_when(text: str | None, *, now: float | None = None) -> float | None:
    """``2h``/``30m``/``7d`` ago, or an ISO 8601 time (UTC unless it says otherwise)."""
    if text is None:
        return None
    if m := _RELATIVE.match(text.strip()):
        return (time.time() if now is None else now) - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"cannot read time {text!r}: use e.g. 2h, 30m, 7d or 2025-11-05T10:30:45Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_span(text: str) -> float:
    """A duration like ``7d`` or ``12h``, in seconds."""
    if m := _RELATIVE.match(text.strip()):
        return float(m.group(1)) * _UNIT_S[m.group(2)]
    raise UsageError(f"cannot read duration {text!r}: use e.g. 30m, 12h, 7d")


def _open(path: Path, *, readonly: bool = True) -> TraceStore:
    if readonly and not path.exists():
        raise TraceStoreError(path, "no trace store here (run `tripwire demo` or `tripwire run` first)")
    return TraceStore(path, readonly=readonly, verify=False)


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
    with _open(traces) as store:
        page = store.list_turns(
            limit=limit,
            cursor=cursor,
            outcome=outcome,
            tool=tool,
            since=parse_when(since),
            until=parse_when(until),
        )
    if as_json:
        print(json.dumps({"turns": [_row_dict(r) for r in page.rows], "next_cursor": page.next_cursor}))
        return 0
    table = Table(title=f"turns in {traces}", title_justify="left")
    for column in ("started", "turn", "outcome", "calls", "ms", "summary"):
        table.add_column(column, overflow="fold", justify="right" if column in ("calls", "ms") else "left")
    for row in page.rows:
        table.add_row(
            iso_timestamp(row.started_at)[:19].replace("T", " "),
            row.turn_id,
            Text(row.outcome, style=OUTCOME_STYLE.get(row.outcome, "")),
            str(row.calls),
            "—" if row.duration_ms is None else f"{row.duration_ms:,.0f}",
            row.summary or "",
        )
    console.print(table)
    if page.next_cursor:
        console.print(f"[dim]more: --cursor {page.next_cursor}[/]")
    return 0


def show_command(traces: Path, turn_id: str, console: Console, *, as_json: bool) -> int:
    with _open(traces) as store:
        stored = store.load_turn(turn_id)
    if as_json:
        print(
            json.dumps({**_row_dict(stored.row), "events": [e.to_dict() for e in stored.events]}, default=str)
        )
        return 0
    row = stored.row
    style = OUTCOME_STYLE.get(row.outcome, "")
    console.print(f"[bold]{row.turn_id}[/]  [{style}]{row.outcome}[/]  {iso_timestamp(row.started_at)}")
    if row.summary:
        console.print(row.summary)
    console.print(_timeline(stored))
    return 0


def _timeline(stored: StoredTurn) -> Table:
    table = Table(title="events", title_justify="left")
    for column in ("+s", "event", "call", "what"):
        table.add_column(column, overflow="fold", justify="right" if column == "+s" else "left")
    start = stored.events[0].t if stored.events else 0.0
    for event in stored.events:
        table.add_row(
            f"{event.t - start:.3f}",
            event.event_type,
            getattr(event, "call_id", None) or "",
            event.describe(),
        )
    return table


def export_command(
    traces: Path, turn_id: str | None, output: Path | None, *, since: str | None, until: str | None
) -> int:
    with _open(traces) as store:
        target = output if output is not None else sys.stdout
        count = store.export_jsonl(target, turn_id=turn_id, since=parse_when(since), until=parse_when(until))
    if output is not None:
        print(f"{count} events written to {output}", file=sys.stderr)
    return 0


def prune_command(
    traces: Path, console: Console, *, older_than: str | None, keep: int | None, as_json: bool = False
) -> int:
    if older_than is None and keep is None:
        raise UsageError("say what to prune: --older-than 7d and/or --keep N")
    with _open(traces, readonly=False) as store:
        removed = store.prune(older_than_s=parse_span(older_than) if older_than else None, keep=keep)
        left = store.counts()["turns"]
    if as_json:
        print(json.dumps({"pruned": removed, "turns_left": left}))
    else:
        console.print(f"pruned {removed} turn(s) from {traces}; {left} left")
    return 0


def replay_command(traces: Path, turn_id: str, console: Console, *, as_json: bool) -> int:
    """Replay a stored turn on virtual time; exit 0 when every decision matches, 1 otherwise."""
    with _open(traces) as store:
        stored = store.load_turn(turn_id)
        try:
            recording = Recording.from_events(stored.events, store.manifest)
        except ReplayError as exc:
            raise TraceStoreError(traces, str(exc), untouched=False) from None
    report = replay_on_virtual_time(recording)
    if as_json:
        print(json.dumps(report.to_dict()))
        return 0 if report.matches else 1
    if report.matches:
        console.print(f"[green]replay of {turn_id} matches[/]: {report.decisions} decisions, all the same")
    else:
        console.print(f"[red]replay of {turn_id} differs[/]")
        for line in (*report.mismatches, *(f"unmatched: {u}" for u in report.unmatched),
                     *(f"unused: {u}" for u in report.unused)):  # fmt: skip
            console.print(f"  {line}", highlight=False)
    if report.result is not None:
        console.print(f"[dim]{report.result.summary}[/]")
    return 0 if report.matches else 1
