"""The fleet as the console shows it: rows of tools and of processes, and what each process
answered to an operator command, from a :class:`~engine.fleet.FleetView`.

Pure: no Textual, no Redis, no clock of its own. :class:`FleetSnapshot` is what a fleet link
hands the screens (the last good view, how old it is, why Redis does not answer if it does not,
the commands sent from here and their acknowledgements); every function here turns it into what
one line or one table shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from console.render import span
from engine.fleet import FleetAck, FleetBudget, FleetBulkhead, FleetView, MemberView

STATE_ORDER: dict[str, int] = {"FORCED_OPEN": 0, "OPEN": 1, "HALF_OPEN": 2, "DISABLED": 3, "CLOSED": 4}
"""Worst first, as the board sorts; a state this console does not know sorts last."""
STATE_SHORT: dict[str, str] = {
    "FORCED_OPEN": "forced", "OPEN": "open", "HALF_OPEN": "half", "DISABLED": "off", "CLOSED": "closed",
}  # fmt: skip
"""A state's word where a table counts processes per state."""
STATUS_ORDER: dict[str, int] = {"stale": 0, "live": 1, "gone": 2}
"""Processes: the stale ones first (the news), then the live, then the gone (history)."""
ACK_WAIT_S = 5.0
"""A process that has not acknowledged a command this long after it was sent has not answered
(a fleet applies commands within its ``sync_ms``, 100 ms by default)."""

AckStatus = Literal["applied", "failed", "refused", "waiting", "not answered"]


@dataclass(frozen=True, slots=True)
class SentRecord:
    """An operator command this console sent to the fleet, and the answers so far."""

    command_id: int
    action: str
    tool_id: str
    sent_at: float
    """Wall-clock time it was sent."""
    expected: tuple[str, ...]
    """The processes that were not gone when it was sent: each should answer."""
    acks: Mapping[str, FleetAck] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """What a fleet link knows now, for the screens."""

    namespace: str
    server: str
    """Where Redis is (``host:port/db``): never the password."""
    view: FleetView | None
    """The last view read from Redis; None until one was."""
    now: float
    """Wall-clock time of this snapshot."""
    age_s: float | None = None
    """Seconds since that view was read, while Redis does not answer (None while it does)."""
    error: str | None = None
    """Why Redis does not answer, on one line; None while it does."""
    commands: tuple[SentRecord, ...] = ()
    """Commands sent from this console, newest last."""
    read_only_reason: str | None = None

    @property
    def unreachable(self) -> bool:
        return self.error is not None


class FleetFeed(Protocol):
    """What the fleet screens read: a link to a fleet (live Redis, or a fixed view in tests)."""

    def fleet_snapshot(self) -> FleetSnapshot: ...


@dataclass(frozen=True, slots=True)
class FleetToolRow:
    """One tool across the fleet: its worst state, how many processes see each, its probe."""

    tool_id: str
    worst: str
    states: dict[str, int]
    lease_holder: str | None
    calls: int
    errors: int
    """Failed attempts (retries included), summed."""
    failures: int
    """Calls that ended failed, summed."""
    bulkhead: FleetBulkhead | None = None
    """Its bulkheads summed over the processes reporting one; None when none does."""
    budget: FleetBudget | None = None
    """Its own retry budgets' refusals summed; None when no process reports one."""

    @property
    def processes(self) -> int:
        return sum(self.states.values())

    @property
    def failure_percent(self) -> float | None:
        """Calls that ended failed, of all calls (attempt errors would pass 100 % with retries)."""
        return 100.0 * self.failures / self.calls if self.calls else None


def worst_state(states: Mapping[str, int]) -> str:
    """The most urgent state any process sees (``UNKNOWN`` when none reports the tool)."""
    seen = [s for s, n in states.items() if n > 0]
    return min(seen, key=lambda s: (STATE_ORDER.get(s, len(STATE_ORDER)), s)) if seen else "UNKNOWN"


def tool_rows(view: FleetView, text: str = "") -> list[FleetToolRow]:
    """Every tool whose name contains ``text``, the worst first: by worst state, then by how many
    processes are not CLOSED, then by name."""
    rows = [
        FleetToolRow(
            t.tool_id,
            worst_state(t.states),
            dict(t.states),
            t.lease_holder,
            t.calls,
            t.errors,
            t.failures,
            t.bulkhead,
            t.budget,
        )
        for t in view.tools.values()
        if text.casefold() in t.tool_id.casefold()
    ]
    return sorted(
        rows,
        key=lambda r: (STATE_ORDER.get(r.worst, len(STATE_ORDER)), -(r.processes - r.states.get("CLOSED", 0)),
                       r.tool_id),
    )  # fmt: skip


def states_text(states: Mapping[str, int]) -> str:
    """``2 open · 1 closed``: the processes per state, worst first, none left out."""
    ordered = sorted(
        ((s, n) for s, n in states.items() if n > 0),
        key=lambda item: STATE_ORDER.get(item[0], len(STATE_ORDER)),
    )
    return " · ".join(f"{n} {STATE_SHORT.get(s, s.lower())}" for s, n in ordered) or "no process"


def processes_text(count: int) -> str:
    return f"{count} process{'' if count == 1 else 'es'}"


def bulkhead_text(bulkhead: FleetBulkhead) -> str:
    """``⧉ 3/8 over 2 processes +1q ⊘4``: attempts in flight against the limits summed over the
    processes (each has a bulkhead of its own), those queued, and those refused since each started."""
    queued = f" +{bulkhead.queued}q" if bulkhead.queued else ""
    refused = f" ⊘{bulkhead.rejected}" if bulkhead.rejected else ""
    return (
        f"⧉ {bulkhead.in_flight}/{bulkhead.max_concurrent} over {processes_text(bulkhead.processes)}"
        f"{queued}{refused}"
    )


def strategies_text(row: FleetToolRow) -> str:
    """A tool's bulkheads and budgets on the board: ``⧉ 3/8 over 2 processes +1q · ↻⊘2`` (empty
    when no process reports either, an older version's processes included)."""
    parts = [bulkhead_text(row.bulkhead)] if row.bulkhead is not None else []
    if row.budget is not None:
        parts.append(f"↻⊘{row.budget.refused}")
    return " · ".join(parts)


def strategy_head(bulkhead: FleetBulkhead | None, budget: FleetBudget | None) -> str:
    """A tool's strategies across the fleet, in words, for its drill-down."""
    parts = []
    if bulkhead is not None:
        parts.append(
            f"bulkhead {bulkhead.in_flight}/{bulkhead.max_concurrent} in flight over"
            f" {processes_text(bulkhead.processes)} (each its own) · queued"
            f" {bulkhead.queued}/{bulkhead.max_queued} · refused {bulkhead.rejected}"
        )
    if budget is not None:
        parts.append(f"retry budget refused {budget.refused} over {processes_text(budget.processes)}")
    return " · ".join(parts)


def shared_budget_text(budget: FleetBudget) -> str:
    """The engine-wide retry budgets, summed over the processes that have one."""
    return (
        f"engine-wide retry budget over {processes_text(budget.processes)}: {budget.retries} retries of"
        f" {budget.allowed} allowed over {budget.calls} calls · refused {budget.refused}"
    )


def short_member(member_id: str | None) -> str:
    """``host:pid`` of a member id ``host:pid:random`` (what an operator recognises)."""
    if not member_id:
        return "—"
    host, _, rest = member_id.rpartition(":")
    return host or rest


def age_text(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``3m05s`` ago-style ages; ``—`` when unknown."""
    if seconds is None:
        return "—"
    return f"{seconds:.1f}s" if seconds < 10 else span(int(seconds))


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One process, as the drill-down lists it."""

    member_id: str
    host: str
    pid: int
    version: str
    status: str
    age_s: float | None
    state: str
    """Its breaker's state for the tool drilled into (``—``: it does not have the tool)."""
    redis_available: bool


def member_rows(view: FleetView, tool_id: str | None = None) -> list[MemberRow]:
    """Every process, the stale first, then the live, then the gone; each by host and pid."""
    members = sorted(view.members, key=lambda m: (STATUS_ORDER.get(m.status, 3), m.host, m.pid, m.id))
    return [_member_row(m, tool_id) for m in members]


def _member_row(member: MemberView, tool_id: str | None) -> MemberRow:
    state = member.breakers.get(tool_id, "—") if tool_id is not None else "—"
    return MemberRow(
        member.id, member.host or "?", member.pid, member.version or "?", member.status, member.age_s,
        state, member.redis_available,
    )  # fmt: skip


def status_counts(view: FleetView) -> dict[str, int]:
    """Processes per status: live, stale, gone (every one named, zero included)."""
    counts = dict.fromkeys(("live", "stale", "gone"), 0)
    for member in view.members:
        counts[member.status] = counts.get(member.status, 0) + 1
    return counts


def state_totals(view: FleetView) -> dict[str, int]:
    """Tools per worst state: how many tools some process sees OPEN, and so on."""
    totals: dict[str, int] = {}
    for tool in view.tools.values():
        worst = worst_state(tool.states)
        totals[worst] = totals.get(worst, 0) + 1
    return totals


@dataclass(frozen=True, slots=True)
class AckRow:
    """One process's answer to a command."""

    member_id: str
    status: AckStatus
    result: str


def ack_rows(record: SentRecord, now: float, *, wait_s: float = ACK_WAIT_S) -> list[AckRow]:
    """Each process's answer: every process expected to answer, and any other that did (one that
    joined since); without an answer, ``waiting`` until ``wait_s`` after sending, then ``not
    answered``. Refusals and failures first, then the silent, then the applied."""
    silent: AckStatus = "waiting" if now - record.sent_at < wait_s else "not answered"
    rows = [
        AckRow(m, record.acks[m].status, record.acks[m].result) if m in record.acks else AckRow(m, silent, "")
        for m in dict.fromkeys([*record.expected, *sorted(record.acks)])
    ]
    order = {"refused": 0, "failed": 1, "not answered": 2, "waiting": 3, "applied": 4}
    return sorted(rows, key=lambda r: (order[r.status], r.member_id))


def ack_summary(record: SentRecord, now: float, *, wait_s: float = ACK_WAIT_S) -> str:
    """``trip search: applied 2 · refused 1 · not answered 1 (of 4)``."""
    rows = ack_rows(record, now, wait_s=wait_s)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    order = ("applied", "refused", "failed", "waiting", "not answered")
    parts = " · ".join(f"{s} {counts[s]}" for s in order if counts.get(s))
    return f"{record.action} {record.tool_id}: {parts or 'no process to answer'} (of {len(rows)})"


def latest_command(snapshot: FleetSnapshot, tool_id: str | None = None) -> SentRecord | None:
    """The newest command sent from here (on ``tool_id`` when given)."""
    for record in reversed(snapshot.commands):
        if tool_id is None or record.tool_id == tool_id:
            return record
    return None


def unreachable_text(snapshot: FleetSnapshot) -> str:
    """The banner while Redis does not answer: why, and how old the view shown is."""
    age = (
        "no view read yet" if snapshot.view is None else f"the last good view, {age_text(snapshot.age_s)} old"
    )
    return f"Redis unreachable at {snapshot.server}: {snapshot.error} — showing {age}, greyed; retrying"


__all__ = [
    "ACK_WAIT_S",
    "STATE_ORDER",
    "AckRow",
    "AckStatus",
    "FleetFeed",
    "FleetSnapshot",
    "FleetToolRow",
    "MemberRow",
    "SentRecord",
    "ack_rows",
    "ack_summary",
    "age_text",
    "bulkhead_text",
    "latest_command",
    "member_rows",
    "processes_text",
    "shared_budget_text",
    "short_member",
    "state_totals",
    "states_text",
    "status_counts",
    "strategies_text",
    "strategy_head",
    "tool_rows",
    "unreachable_text",
    "worst_state",
]
