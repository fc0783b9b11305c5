"""``tripwire breaker``: the board and the operator actions of an attached console, from a shell.

``list`` reads what an attached console seeds its board with (each tool's newest breaker state
in the engine's trace store) and each tool's last transition, with who made it and why.
``trip``, ``reset`` and ``disable`` go through :class:`~console.attach.AttachedLink`, the
console's own path: a command signed with the store's key and naming this process's OS user,
host and pid, which the engine checks, applies, records and acknowledges with the breaker state
it left (``tripwire traces audit`` lists it). Exit 0 when applied, 1 when refused or not
answered (saying why), 2 on bad input: an unknown tool, no key to sign with.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from console import render
from console.attach import NO_COMMANDS, AttachedLink, CommandFailed
from console.cli.arguments import WAIT_S_MAX
from console.cli.tables import Column, aligned_rows
from console.host import Action
from console.usage import UsageError
from engine.breaker import BreakerState
from engine.errors import iso_timestamp, one_line
from engine.events import BreakerTransitioned

APPLIED, REFUSED = 0, 1
"""Exit statuses; bad input is 2, as for every command."""
STATE_STYLE = {
    BreakerState.CLOSED: "green",
    BreakerState.HALF_OPEN: "yellow",
    BreakerState.OPEN: "red",
    BreakerState.FORCED_OPEN: "bold red",
    BreakerState.DISABLED: "dim",
}


@dataclass(frozen=True, slots=True)
class BreakerLine:
    """One tool's breaker as the store tells it."""

    tool_id: str
    state: BreakerState
    consecutive_failures: int
    half_open_in_s: float | None
    """Engine time left until an OPEN breaker admits a probe; below 0 when that is overdue."""
    last: BreakerTransitioned | None


def breaker_lines(link: AttachedLink) -> list[BreakerLine]:
    """Every tool the store knows, as an attached console's board starts: its seed, and its last
    transition."""
    now = link.now()
    return [
        BreakerLine(
            seed.tool_id,
            seed.state,
            seed.consecutive_failures,
            seed.half_open_at - now if seed.half_open_at is not None else None,
            link.store.last_transition(seed.tool_id),
        )
        for seed in link.seeds()
    ]


def engine_word(link: AttachedLink) -> str:
    """Whether the engine is heard from, on one line."""
    stale = link.stale_for
    if stale == float("inf"):
        return "no word from an engine yet: is tripwire serve running on it?"
    if stale is not None:
        return (
            f"no word from the engine for {render.duration(stale * 1000)}: is tripwire serve running"
            " on it? (the states are the last it stored)"
        )
    return "the engine is heard from"


def list_command(path: Path, console: Console, *, as_json: bool) -> int:
    """``tripwire breaker list``: each tool's breaker, and whether the engine is heard from."""
    link = AttachedLink(path, read_only=True, history=0)
    try:
        lines = breaker_lines(link)
        taking = link.store.taking_commands()
        silence, stale = link.silence, link.stale_for
        word = engine_word(link)
    finally:
        link.close()
    if as_json:
        print(
            json.dumps(
                {
                    "store": str(path),
                    "engine": {
                        "heard_from_s_ago": None if silence is None else round(silence, 3),
                        "stale": stale is not None,
                        "takes_commands": taking,
                    },
                    "tools": [_line_dict(line) for line in lines],
                }
            )
        )
        return 0
    console.print(Text(f"breakers of the engine recording into {path}: {word}", style="bold"), soft_wrap=True)
    if not lines:
        console.print(Text("no tools in the store yet", style="dim"), soft_wrap=True)
        return 0
    columns = (
        Column("tool"), Column("state"), Column("fails", "right", "{} fails"),
        Column("half-open", spare="half-open {}"), Column("changed", spare="changed {} UTC"),
    )  # fmt: skip
    cells = [
        (
            _printable(line.tool_id),
            Text(str(line.state), style=STATE_STYLE.get(line.state, "")),
            str(line.consecutive_failures),
            render.countdown(line.half_open_in_s) if line.half_open_in_s is not None else "—",
            _time(line.last.at) if line.last is not None else "—",
        )
        for line in lines
    ]
    notes = [_transition(line.last) for line in lines]
    for text in aligned_rows(console, columns, cells, notes, note_header="last transition: by whom, why"):
        console.print(text, soft_wrap=True)  # a tool's line is never wrapped: names stay whole
    return 0


def act_command(
    path: Path, action: Action, tool_id: str, *, reason: str, wait_s: float, as_json: bool
) -> int:
    """``tripwire breaker trip|reset|disable``: send the command, wait for the engine's answer."""
    if not reason.strip():
        raise UsageError("--reason must say why: it is recorded with the transition and in the audit")
    if not 0 < wait_s <= WAIT_S_MAX:
        raise UsageError(f"--wait must be above 0 and at most {WAIT_S_MAX:g}, got {wait_s:g}")
    link = AttachedLink(path, ack_timeout_s=wait_s, history=0)
    try:
        seeds = {seed.tool_id: seed for seed in link.seeds()}
        if tool_id not in seeds:
            known = ", ".join(sorted(seeds)) if seeds else "none yet"
            raise UsageError(f"unknown tool {tool_id!r}: the tools of {path} are {known}")
        if link.read_only:
            why = link.read_only_reason or "the store's command key cannot be used"
            if why != NO_COMMANDS:  # nothing to sign with: this shell may not command the engine
                raise UsageError(f"read-only: {why}")
            return _answer(action, tool_id, reason, as_json, status="refused", why=why)
        was = seeds[tool_id].state
        try:
            command = link.send(action, tool_id, reason=reason.strip())
        except CommandFailed as exc:
            return _answer(action, tool_id, reason, as_json, status="refused", why=str(exc), was=was)
        except TimeoutError:
            why = f"no acknowledgement within {wait_s:g}s: is an engine serving commands (tripwire serve)?"
            if (stale := link.stale_for) is not None and stale != float("inf"):
                why += f" (no word from it for {stale:.0f}s)"
            why += "; the command expired unapplied"
            return _answer(action, tool_id, reason, as_json, status="unanswered", why=why, was=was)
    finally:
        link.close()
    state = command.result or "?"
    if as_json:
        applied = _outcome(action, tool_id, reason, "applied", state=state, was=was, command_id=command.id)
        print(json.dumps(applied))
    else:
        print(f"{tool_id}: {state} ({action} applied by the engine, command {command.id}; was {was})")
    return APPLIED


def _answer(
    action: str, tool_id: str, reason: str, as_json: bool, *, status: str, why: str,
    was: BreakerState | None = None,
) -> int:  # fmt: skip
    """A command not applied: why, on stderr (and as JSON on stdout when asked)."""
    if as_json:
        print(json.dumps(_outcome(action, tool_id, reason, status, was=was, why=why)))
    print(f"tripwire: {action} {tool_id}: {status}: {one_line(why)}", file=sys.stderr)
    return REFUSED


def _outcome(
    action: str, tool_id: str, reason: str, status: str, *, state: str | None = None,
    was: BreakerState | None = None, command_id: int | None = None, why: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """What ``--json`` prints for an action: applied, refused or unanswered."""
    return {
        "tool": tool_id, "action": action, "reason": reason.strip(), "status": status, "state": state,
        "was": None if was is None else str(was), "command_id": command_id, "why": why,
    }  # fmt: skip


def _line_dict(line: BreakerLine) -> dict[str, Any]:
    last = line.last
    return {
        "tool": line.tool_id,
        "state": str(line.state),
        "consecutive_failures": line.consecutive_failures,
        "half_open_in_s": None if line.half_open_in_s is None else round(line.half_open_in_s, 3),
        "last_transition": None
        if last is None
        else {
            "at": iso_timestamp(last.at),
            "from": str(last.from_state),
            "to": str(last.to_state),
            "actor": last.actor,
            "reason": last.reason,
        },
    }


def _transition(last: BreakerTransitioned | None) -> str:
    if last is None:
        return ""
    reason = f": {last.reason}" if last.reason else ""
    return _printable(f"{last.from_state} → {last.to_state} by {last.actor}{reason}")


def _time(at: float) -> str:
    return iso_timestamp(at)[:19].replace("T", " ")


def _printable(value: object) -> str:
    """Text another process wrote, on one line with its control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


__all__ = ["BreakerLine", "act_command", "breaker_lines", "list_command"]
