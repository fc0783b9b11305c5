"""``tripwire breaker``: the board and the operator actions of an attached console, from a shell.

``list`` reads what an attached console seeds its board with (each tool's newest breaker state
in the engine's trace store) and each tool's last transition, with who made it and why.
``trip``, ``reset`` and ``disable`` go through :class:`~console.attach.AttachedLink`, the
console's own path: a command signed with the store's key and naming this process's OS user,
host and pid, which the engine checks, applies, records and acknowledges with the breaker state
it left (``tripwire traces audit`` lists it). Exit 0 when applied, 1 when refused or not
answered (saying why), 2 on bad input: an unknown tool, no key to sign with.

With ``--attach redis://…`` the target is a fleet (``tripwire serve --fleet``): ``list`` reads
:func:`~engine.fleet.read_fleet` (per tool the processes in each state, the probe lease's
holder, the sums; per process its state), and an action is signed with the fleet's key, sent
with :func:`~engine.fleet.send_command` and answered by every process
(:func:`~engine.fleet.acknowledgements`): exit 0 only when every live process that has the tool
applied it; 1, naming them, when any refused, failed or did not answer within ``--wait``; 2 when
the fleet's Redis cannot be reached.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console
from rich.text import Text

from console import render
from console.attach import NO_COMMANDS, AttachedLink, CommandFailed
from console.cli.arguments import WAIT_S_MAX
from console.cli.tables import Column, aligned_rows
from console.extras import fleet_target, requires_extra
from console.host import Action
from console.usage import UsageError
from engine.errors import iso_timestamp, one_line
from engine.events import BreakerRestored, BreakerTransitioned, Event, RecordingStarted, ToolRegistered
from engine.strategies.breaker.machine import BreakerState

if TYPE_CHECKING:
    from engine.fleet import FleetAck, FleetClient, FleetConfig, FleetView, MemberView, ToolView

APPLIED, REFUSED = 0, 1
"""Exit statuses; bad input is 2, as for every command."""
ACK_POLL_S = 0.02
"""How often a fleet action looks for new acknowledgements while it waits."""
T = TypeVar("T")
MEMBER_STYLE = {"live": "green", "stale": "yellow", "gone": "dim"}
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
    last: Event | None
    """What last set the state: a transition, a restored override, its registration, or the start
    of the engine that records (see ``TraceStore.last_breaker_change``)."""


def breaker_lines(link: AttachedLink) -> list[BreakerLine]:
    """Every tool of the engine that recorded last, as an attached console's board starts: its
    seed, and what last set its state."""
    now = link.now()
    return [
        BreakerLine(
            seed.tool_id,
            seed.state,
            seed.consecutive_failures,
            seed.half_open_at - now if seed.half_open_at is not None else None,
            link.store.last_breaker_change(seed.tool_id),
        )
        for seed in link.seeds()
    ]


def engine_word(link: AttachedLink) -> str:
    """Whether the engine is heard from, on one line: by its heartbeat and process, never by the
    times of its events."""
    heard = link.heard
    if heard.live:
        return f"the engine is heard from ({heard.who})"
    if heard.status == "never":
        return "no word from an engine yet: is tripwire serve running on it?"
    return f"the engine is {heard.words()}: the states are the last it stored"


def list_command(target: Path | str, console: Console, *, as_json: bool) -> int:
    """``tripwire breaker list``: each tool's breaker, and whether the engine is heard from (a
    ``str`` target is a fleet's URL)."""
    if isinstance(target, str):
        return fleet_list_command(target, console, as_json=as_json)
    path = target
    link = AttachedLink(path, read_only=True, history=0)
    try:
        lines = breaker_lines(link)
        taking = link.store.taking_commands()
        heard = link.heard
        word = engine_word(link)
    finally:
        link.close()
    if as_json:
        print(
            json.dumps(
                {
                    "store": str(path),
                    "engine": {
                        "status": heard.status,
                        "heard_from_s_ago": None if heard.age_s is None else round(heard.age_s, 3),
                        "stale": not heard.live,
                        "writer": heard.who or None,
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
    notes = [_transition(line.tool_id, line.last) for line in lines]
    for text in aligned_rows(console, columns, cells, notes, note_header="last change: by whom, why"):
        console.print(text, soft_wrap=True)  # a tool's line is never wrapped: names stay whole
    return 0


def act_command(
    target: Path | str, action: Action, tool_id: str, *, reason: str, wait_s: float, as_json: bool
) -> int:
    """``tripwire breaker trip|reset|disable``: send the command, wait for the engine's answer (a
    ``str`` target is a fleet's URL: every process's answer)."""
    if not reason.strip():
        raise UsageError("--reason must say why: it is recorded with the transition and in the audit")
    if not 0 < wait_s <= WAIT_S_MAX:
        raise UsageError(f"--wait must be above 0 and at most {WAIT_S_MAX:g}, got {wait_s:g}")
    if isinstance(target, str):
        return fleet_act_command(
            target, action, tool_id, reason=reason.strip(), wait_s=wait_s, as_json=as_json
        )
    path = target
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
    return {
        "tool": line.tool_id,
        "state": str(line.state),
        "consecutive_failures": line.consecutive_failures,
        "half_open_in_s": None if line.half_open_in_s is None else round(line.half_open_in_s, 3),
        "last_transition": _change(line.tool_id, line.last),
    }


def _change(tool_id: str, last: Event | None) -> dict[str, Any] | None:
    """What last set a tool's state, as ``list --json`` prints it (``event`` names its kind)."""
    if isinstance(last, BreakerTransitioned):
        fields = {"from": str(last.from_state), "to": str(last.to_state), "actor": last.actor}
        if isinstance(last, BreakerRestored):
            fields["set_at"] = iso_timestamp(last.set_at)
        return {"at": iso_timestamp(last.at), "event": last.event_type, **fields, "reason": last.reason}
    if isinstance(last, ToolRegistered):
        return {"at": iso_timestamp(last.at), "event": last.event_type, "from": None, "to": str(last.state),
                "actor": "engine", "reason": "registered"}  # fmt: skip
    if isinstance(last, RecordingStarted):
        state = last.breakers.get(tool_id, {}).get("state")
        reason = f"the engine started recording ({last.host} pid {last.pid})"
        return {"at": iso_timestamp(last.at), "event": last.event_type, "from": None, "to": state,
                "actor": "engine", "reason": reason}  # fmt: skip
    return None


def _transition(tool_id: str, last: Event | None) -> str:
    change = _change(tool_id, last)
    if change is None:
        return ""
    if change["event"] == "BreakerRestored":
        why = f": {change['reason']}" if change["reason"] else ""
        set_at = change["set_at"][:19].replace("T", " ")
        return _printable(f"{change['to']} restored: set by {change['actor']} at {set_at} UTC{why}")
    if change["from"] is None:
        return _printable(f"{change['to']}: {change['reason']}")
    why = f": {change['reason']}" if change["reason"] else ""
    return _printable(f"{change['from']} → {change['to']} by {change['actor']}{why}")


def _time(at: float) -> str:
    return iso_timestamp(at)[:19].replace("T", " ")


def _printable(value: object) -> str:
    """Text another process wrote, on one line with its control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


# --- a fleet (--attach redis://…) -------------------------------------------------------------


def fleet_list_command(url: str, console: Console, *, as_json: bool) -> int:
    """``tripwire breaker list --attach redis://…``: per tool, the processes in each state and the
    sums; per process, its state; and who the processes are."""
    config = _fleet_config(url)
    view = _on_fleet(config, _read_view)
    if as_json:
        print(json.dumps(_fleet_dict(config.safe_url, view)))
        return 0
    members = [m for m in view.members if m.status != "gone"]
    counts = ", ".join(f"{sum(m.status == s for m in view.members)} {s}" for s in ("live", "stale", "gone"))
    heading = f"breakers of fleet {config.safe_url}: {len(members)} processes ({counts})"
    console.print(Text(heading, style="bold"), soft_wrap=True)
    if not view.tools:
        console.print(Text("no process of this fleet has been heard from", style="dim"), soft_wrap=True)
        return 0
    columns = (
        Column("tool"), Column("fleet"), Column("calls", "right", "{} calls"),
        Column("errors", "right", "{} errors"), Column("rejected", "right", "{} rejected"),
        Column("lease", spare="probe lease: {}"),
    )  # fmt: skip
    cells = [_tool_cells(tool) for tool in view.tools.values()]
    notes = [
        " · ".join(f"{_printable(m.id)} {m.breakers[tool]}" for m in members if tool in m.breakers)
        for tool in view.tools
    ]
    for text in aligned_rows(console, columns, cells, notes, note_header="each process's breaker"):
        console.print(text, soft_wrap=True)
    console.print()
    member_columns = (
        Column("process"), Column("status"), Column("beat", "right", "beat {} ago"),
        Column("pid", "right", "pid {}"), Column("version", spare="version {}"),
    )  # fmt: skip
    rows = [_member_cells(m) for m in view.members]
    member_notes = [_member_note(m) for m in view.members]
    for text in aligned_rows(console, member_columns, rows, member_notes, note_header="host"):
        console.print(text, soft_wrap=True)
    return 0


def _tool_cells(tool: ToolView) -> tuple[Text | str, ...]:
    lease = _printable(tool.lease_holder or "—")
    counts = (str(tool.calls), str(tool.errors), str(tool.rejections))
    return (_printable(tool.tool_id), _states(tool.states), *counts, lease)


def _member_cells(member: MemberView) -> tuple[Text | str, ...]:
    beat = render.duration(member.age_s * 1000) if member.age_s is not None else "—"
    status = Text(member.status, style=MEMBER_STYLE[member.status])
    return (_printable(member.id), status, beat, str(member.pid), _printable(member.version))


def fleet_act_command(
    url: str, action: Action, tool_id: str, *, reason: str, wait_s: float, as_json: bool
) -> int:
    """``tripwire breaker trip|reset|disable --attach redis://…``: send the command to the fleet and
    wait for every live process's acknowledgement (at most ``wait_s``)."""
    config = _fleet_config(url)
    key = _fleet_key(config)

    async def act(client: FleetClient) -> FleetOutcome:
        # Start-up: redis-py and the fleet are loaded only for a fleet (see _fleet_config).
        import anyio

        from engine.fleet import acknowledgements, read_fleet, send_command

        view = await read_fleet(client)
        having = [m for m in view.members if m.status != "gone" and tool_id in m.breakers]
        if not having:
            known = sorted({t for m in view.members if m.status != "gone" for t in m.breakers})
            raise UsageError(
                f"unknown tool {tool_id!r}: the tools of fleet {config.namespace} are"
                f" {', '.join(known) if known else 'none yet (no process heard from)'}"
            )
        expected = [m.id for m in having if m.status == "live"]
        was = {m.id: m.breakers[tool_id] for m in having}
        stale = [m.id for m in having if m.status == "stale"]
        if not expected:
            return FleetOutcome(None, expected, was, {}, stale)
        sent = await send_command(client, action, tool_id, key=key, reason=reason, expires_in_s=wait_s)
        deadline = time.monotonic() + wait_s
        while True:
            acks = await acknowledgements(client, sent.id)
            if all(m in acks for m in expected) or time.monotonic() >= deadline:
                return FleetOutcome(sent.id, expected, was, acks, stale)
            await anyio.sleep(ACK_POLL_S)

    from engine.fleet import CommandConflict  # start-up: a fleet's, loaded already by _fleet_config

    try:
        outcome = _on_fleet(config, act)
    except CommandConflict as exc:  # others kept commanding the tool: nothing was sent
        return _answer(action, tool_id, reason, as_json, status="refused", why=str(exc))
    return fleet_answer(action, tool_id, reason, wait_s, outcome, as_json)


@dataclass(frozen=True, slots=True)
class FleetOutcome:
    """A fleet action's answers: ``expected`` are the live processes with the tool when it was sent."""

    command_id: int | None
    expected: list[str]
    was: dict[str, str]
    acks: dict[str, FleetAck]
    stale: list[str]
    """Processes with the tool that missed their heartbeats: not waited for (they apply it if they
    come back within the command's expiry)."""

    def missing(self) -> list[str]:
        """The expected processes that did not apply it: refused, failed or not answered."""
        return [m for m in self.expected if m not in self.acks or self.acks[m].status != "applied"]


def fleet_answer(
    action: str, tool_id: str, reason: str, wait_s: float, outcome: FleetOutcome, as_json: bool
) -> int:
    """Print every process's answer; exit 0 when every expected process applied it, else 1."""
    missing = outcome.missing()
    members = [*outcome.expected, *sorted(set(outcome.acks) - set(outcome.expected))]
    answers = [_member_answer(m, outcome, wait_s) for m in members]
    refused = any(outcome.acks[m].status != "applied" for m in missing if m in outcome.acks)
    status = "applied" if not missing and outcome.expected else "refused" if refused else "unanswered"
    why = None
    if not outcome.expected:
        why = "no live process of the fleet has this tool: is tripwire serve --fleet running?"
    elif missing:
        why = f"{len(missing)} of {len(outcome.expected)} live processes did not apply it: " + "; ".join(
            f"{m} {answers[members.index(m)]['status']}" for m in missing
        )
    if as_json:
        print(
            json.dumps(
                {
                    "tool": tool_id, "action": action, "reason": reason, "status": status,
                    "command_id": outcome.command_id, "processes": answers, "why": why,
                    "stale": [m for m in outcome.stale if m not in outcome.acks],
                }
            )
        )  # fmt: skip
    else:
        applied = len(outcome.expected) - len(missing)
        print(
            f"{tool_id}: {action} applied by {applied} of {len(outcome.expected)} live processes"
            f" (command {outcome.command_id})"
        )
        for answer in answers:
            state = f" {answer['state']}" if answer["state"] else ""
            detail = (
                f": {answer['why']}" if answer["why"] else f"; was {answer['was']}" if answer["was"] else ""
            )
            print(f"  {_printable(answer['member'])}{state} ({answer['status']}{detail})")
        if unheard := [_printable(m) for m in outcome.stale if m not in outcome.acks]:
            print(f"  not waited for, stale: {', '.join(unheard)}")
    if why is None:
        return APPLIED
    print(f"tripwire: {action} {tool_id}: {status}: {one_line(why)}", file=sys.stderr)
    return REFUSED


def _member_answer(member: str, outcome: FleetOutcome, wait_s: float) -> dict[str, Any]:
    ack = outcome.acks.get(member)
    if ack is None:
        status, state, why = "unanswered", None, f"no acknowledgement within {wait_s:g}s"
    elif ack.status == "applied":
        status, state, why = "applied", ack.result, None
    else:
        status, state, why = ack.status, None, one_line(ack.result)
    return {"member": member, "status": status, "state": state, "was": outcome.was.get(member), "why": why}


def _fleet_config(url: str) -> FleetConfig:
    """The fleet at ``url``, or a one-line refusal naming what is wrong (never the password)."""
    with requires_extra(fleet_target(url), "fleet"):
        # Start-up: redis-py (an extra) is loaded only when the target is a fleet.
        from engine.fleet import FleetConfigError, parse_fleet_url
    try:
        return parse_fleet_url(url)
    except FleetConfigError as exc:
        raise UsageError(f"--attach: {one_line(str(exc))}") from None


def _fleet_key(config: FleetConfig) -> bytes:
    """The fleet's command key to sign with; without one this shell may not command the fleet."""
    from engine.fleet import KEY_FILE_ENV, load_fleet_key  # start-up: a fleet's, loaded already

    path = config.key_path()
    if path is None:
        raise UsageError(
            f"read-only: no fleet command key to sign with: key_file=PATH in the URL or ${KEY_FILE_ENV}"
        )
    if not path.exists():
        raise UsageError(f"read-only: the fleet's command key {path} does not exist")
    key = load_fleet_key(config)
    assert key is not None  # a path was named
    return key


def _on_fleet(config: FleetConfig, work: Callable[[FleetClient], Awaitable[T]]) -> T:
    """``work`` with a client of the fleet's Redis, on an event loop of its own; Redis out of reach
    is a one-line refusal naming the server (never the password)."""
    import anyio  # start-up: the event loop is loaded only for a fleet

    from engine.fleet import FleetClient
    from engine.fleet.client import UNAVAILABLE, redis_problem

    async def run() -> T:
        client = FleetClient(config)
        try:
            return await work(client)
        finally:
            await client.aclose()

    try:
        return anyio.run(run, backend="asyncio")
    except UNAVAILABLE as exc:
        raise UsageError(redis_problem(config, exc)) from None


async def _read_view(client: FleetClient) -> FleetView:
    from engine.fleet import read_fleet  # start-up: a fleet's, loaded already

    return await read_fleet(client)


def _states(states: dict[str, int]) -> Text:
    """``OPEN 3 · CLOSED 1``: how many processes see the tool in each state, the worst first."""
    text = Text()
    for state, count in sorted(states.items(), key=lambda item: _SEVERITY.get(item[0], -1)):
        style = next((v for k, v in STATE_STYLE.items() if k.value == state), "")
        text.append(" · " if text else "").append(f"{state} {count}", style=style)
    return text


_SEVERITY = {s.value: n for n, s in enumerate((BreakerState.FORCED_OPEN, BreakerState.OPEN,
             BreakerState.HALF_OPEN, BreakerState.DISABLED, BreakerState.CLOSED))}  # fmt: skip


def _member_note(member: MemberView) -> str:
    notes = [member.host]
    if not member.redis_available:
        notes.append("Redis unreachable from it")
    if member.events_dropped:
        notes.append(f"{member.events_dropped} events dropped")
    return _printable(" · ".join(n for n in notes if n))


def _fleet_dict(url: str, view: FleetView) -> dict[str, Any]:
    """What ``list --json`` prints for a fleet: every field of the view, ``per_process`` added."""
    members = [m for m in view.members if m.status != "gone"]
    tools = []
    for tool in view.tools.values():
        fields = {k: v for k, v in asdict(tool).items() if k != "tool_id"}
        per_process = {m.id: m.breakers[tool.tool_id] for m in members if tool.tool_id in m.breakers}
        tools.append(
            {"tool": tool.tool_id, **fields, "processes": tool.processes, "per_process": per_process}
        )
    processes = [asdict(m) | {"age_s": None if m.age_s is None else round(m.age_s, 3)} for m in view.members]
    return {"fleet": url, "namespace": view.namespace, "tools": tools, "processes": processes}


__all__ = [
    "BreakerLine",
    "FleetOutcome",
    "act_command",
    "breaker_lines",
    "fleet_act_command",
    "fleet_answer",
    "fleet_list_command",
    "list_command",
]
