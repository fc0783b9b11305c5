"""The fleet's views: the board of its tools (how many processes see each state, who holds the
probe lease, calls and errors summed) and the drill-down into one tool's processes, with the
answers each gave to the last operator command.

Both read a :class:`~console.model.fleet.FleetFeed` (the app's link) at every flush and redraw
only when what it says changed. While Redis does not answer, a banner says so, with the age of
the view still shown, greyed.
"""

from __future__ import annotations

from typing import Any, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import DataTable, Static

from console import render
from console.model import Changes
from console.model.fleet import (
    AckRow,
    FleetFeed,
    FleetSnapshot,
    FleetToolRow,
    MemberRow,
    ack_rows,
    ack_summary,
    age_text,
    latest_command,
    member_rows,
    shared_budget_text,
    short_member,
    state_totals,
    states_text,
    status_counts,
    strategies_text,
    strategy_head,
    tool_rows,
    unreachable_text,
)
from console.screens.base import ConsoleScreen, FilterBar, FilteredScreen
from console.screens.text import TextModal, field_text
from console.widgets.item_table import ItemTable, Row

STATE_RICH: dict[str, str] = {
    "CLOSED": "green", "OPEN": "bold red", "HALF_OPEN": "bold yellow", "FORCED_OPEN": "bold reverse red",
    "DISABLED": "dim",
}  # fmt: skip
"""A state's colour in a table cell (Rich styles: the cells are Rich text); the word is always there."""
ACKS_SHOWN = 6
"""Answers shown under a tool's processes before their table scrolls."""
STATUS_RICH: dict[str, str] = {"live": "green", "stale": "bold yellow", "gone": "dim"}
ACK_RICH: dict[str, str] = {
    "applied": "green", "refused": "bold red", "failed": "bold red", "waiting": "yellow",
    "not answered": "bold yellow",
}  # fmt: skip
STATE_CONTENT: dict[str, str] = {
    "FORCED_OPEN": "bold reverse $error", "OPEN": "bold $error", "HALF_OPEN": "bold $warning",
    "DISABLED": "$foreground-muted",
}  # fmt: skip


def _shared_css(screen: str) -> str:
    """The banner, shown while Redis does not answer, and the tables greyed under it (unscoped:
    the class is on the screen itself)."""
    return f"""
    {screen} #fleet-banner {{
        display: none; height: auto; padding: 0 1; background: $error; color: $text; text-style: bold;
    }}
    {screen}.-unreachable #fleet-banner {{ display: block; }}
    {screen}.-unreachable ItemTable {{ tint: $background 55%; }}
    {screen} .fleet-line {{ height: auto; padding: 0 1; color: $foreground-muted; }}
    """


def feed_of(screen: ConsoleScreen) -> FleetFeed:
    """The fleet the app shows (its link); typed here so that the screens need not import the app."""
    return cast(FleetFeed, cast(Any, screen.app).link)


def state_cell(state: str) -> Text:
    return Text(state, style=STATE_RICH.get(state, ""))


def fleet_status(snapshot: FleetSnapshot, *, paused: str | None = None, read_only: bool = False) -> Content:
    """The status bar of a fleet console: the fleet's health in one line."""
    parts: list[str | tuple[str, str]] = []
    if snapshot.unreachable:
        parts += [("REDIS DOWN", "bold reverse $error"), "  "]  # the banner says since when
    if paused is not None:
        parts += [(paused, "bold reverse $warning"), "  "]
    elif not snapshot.unreachable:
        parts += [("● FLEET", "bold $success"), "  "]
    parts.append(snapshot.namespace)
    view = snapshot.view
    if view is not None:
        counts = status_counts(view)
        parts.append(f" · {counts['live']} live")
        for status in ("stale", "gone"):
            if counts[status]:
                parts += [
                    " ",
                    (
                        f"{counts[status]} {status}",
                        "bold $warning" if status == "stale" else "$foreground-muted",
                    ),
                ]
        totals = state_totals(view)
        parts.append(f" · {len(view.tools)} tools")
        for state in ("FORCED_OPEN", "OPEN", "HALF_OPEN", "DISABLED"):
            if totals.get(state):
                parts += ["  ", (f"{totals[state]} {state}", STATE_CONTENT[state])]
    if read_only:
        parts.append((" · read-only", "$accent"))
        if snapshot.read_only_reason:
            parts.append((f": {snapshot.read_only_reason}", "$accent"))
    parts.append((f" · redis {snapshot.server}", "$foreground-muted"))
    return Content.assemble(*parts)


class ToolTable(ItemTable):
    """The fleet's tools: ``enter`` opens the selected one's processes."""

    BINDINGS = [Binding("enter", "select_cursor", "Open", tooltip="The selected tool's processes")]


class MemberTable(ItemTable):
    """A tool's processes: ``enter`` shows the selected one in full."""

    BINDINGS = [Binding("enter", "select_cursor", "Open", tooltip="The selected process in full")]


def _tool_row(row: FleetToolRow) -> Row:
    failed = render.percent(row.failure_percent)
    processes = Text(states_text(row.states))
    strategies = strategies_text(row)
    if strategies:  # after the states: what an operator reads first stays first
        processes.append(f" · {strategies}", style="yellow" if row.bulkhead and row.bulkhead.queued else "")
    return row.tool_id, (
        row.tool_id, state_cell(row.worst), render.count(row.calls),
        Text(failed, style="red" if (row.failure_percent or 0) >= 10 else ""), short_member(row.lease_holder),
        processes,
    )  # fmt: skip


def _member_row(row: MemberRow) -> Row:
    flag = "" if row.redis_available else " (no redis)"
    return row.member_id, (
        f"{row.member_id}{flag}", Text(row.status, style=STATUS_RICH.get(row.status, "")),
        state_cell(row.state), age_text(row.age_s), row.version,
    )  # fmt: skip


def _ack_row(row: AckRow) -> Row:
    return row.member_id, (row.member_id, Text(row.status, style=ACK_RICH.get(row.status, "")), row.result)


def drawn_key(snapshot: FleetSnapshot, *parts: object) -> tuple[object, ...]:
    """What a fleet screen's redraw depends on: the view read, Redis's state and the answers (to
    the second: ages and "waiting" turn with the clock)."""
    age = None if snapshot.age_s is None else int(snapshot.age_s)
    return (id(snapshot.view), snapshot.error, age, snapshot.commands, int(snapshot.now), *parts)


class FleetScreen(FilteredScreen):
    """The fleet's tools, the worst first; ``enter`` opens a tool's processes."""

    HELP_TITLE = "Fleet"
    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Show only tools whose name contains the text"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    SCOPED_CSS = False
    DEFAULT_CSS = "FleetScreen #fleet-tools { height: 1fr; }" + _shared_css("FleetScreen")

    def __init__(self) -> None:
        super().__init__()
        self._drawn: tuple[object, ...] | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="fleet-banner", markup=False)
        yield Static(id="fleet-summary", classes="fleet-line", markup=False)
        yield ToolTable(
            "TOOL", "FLEET", "CALLS", "FAIL%", "PROBE", "PROCESSES", flex="PROCESSES", newest_first=True,
            following=False, id="fleet-tools",
        )  # fmt: skip
        yield Static(id="fleet-command", classes="fleet-line", markup=False)
        yield FilterBar("filter tools…")

    def on_mount(self) -> None:
        self.focus_body()

    def focus_body(self) -> None:
        self.query_one("#fleet-tools", ItemTable).focus()

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        snapshot = feed_of(self).fleet_snapshot()
        key = drawn_key(snapshot, self.filter_text)
        if not full and key == self._drawn:
            return
        self._drawn = key
        self.set_class(snapshot.unreachable, "-unreachable")
        if snapshot.unreachable:
            self.query_one("#fleet-banner", Static).update(unreachable_text(snapshot))
        view = snapshot.view
        table = self.query_one("#fleet-tools", ItemTable)
        summary = self.query_one("#fleet-summary", Static)
        if view is None:
            summary.update("reading the fleet…" if not snapshot.unreachable else "no view of the fleet yet")
            table.fill([])
        else:
            counts = status_counts(view)
            n = len(view.members)
            shared = f" · {shared_budget_text(view.shared_budget)}" if view.shared_budget else ""
            summary.update(
                f"{n} process{'' if n == 1 else 'es'}: {counts['live']} live · {counts['stale']} stale ·"
                f" {counts['gone']} gone · worst first · enter: its processes{shared}"
            )
            table.fill([_tool_row(r) for r in tool_rows(view, self.filter_text)])
        record = latest_command(snapshot)
        command = self.query_one("#fleet-command", Static)
        command.display = record is not None
        if record is not None:
            rows = ack_rows(record, snapshot.now)
            each = ", ".join(f"{short_member(r.member_id)} {r.status}" for r in rows)
            command.update(f"last command — {ack_summary(record, snapshot.now)}: {each}")

    def selected_tools(self) -> list[str]:
        key = self.query_one("#fleet-tools", ItemTable).selected_key
        return [key] if key is not None else []

    @on(DataTable.RowSelected, "#fleet-tools")
    def _open(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.app.push_screen(FleetToolScreen(event.row_key.value))


class FleetToolScreen(ConsoleScreen):
    """One tool's processes: each one's host, pid, status, heartbeat age, version and its own
    breaker for the tool; below, what each answered to the last command on the tool."""

    HELP_TITLE = "Fleet tool"
    BINDINGS = [Binding("escape", "back", "Back", tooltip="Back to the fleet's tools")]
    SCOPED_CSS = False
    DEFAULT_CSS = (
        "FleetToolScreen #fleet-members { height: 1fr; }"
        " FleetToolScreen #fleet-members { min-height: 4; }" + _shared_css("FleetToolScreen")
    )

    def __init__(self, tool_id: str) -> None:
        super().__init__()
        self.tool_id = tool_id
        self._drawn: tuple[object, ...] | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="fleet-banner", markup=False)
        yield Static(id="fleet-tool-head", classes="fleet-line", markup=False)
        yield MemberTable(
            "PROCESS", "STATUS", "STATE", "BEAT", "VERSION", flex="PROCESS", newest_first=True,
            following=False, id="fleet-members",
        )  # fmt: skip
        yield Static(id="fleet-acks-title", classes="fleet-line", markup=False)
        yield ItemTable("PROCESS", "ANSWER", "RESULT", flex="RESULT", newest_first=True, following=False,
                        id="fleet-acks")  # fmt: skip

    def on_mount(self) -> None:
        self.query_one("#fleet-members", ItemTable).focus()

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        snapshot = feed_of(self).fleet_snapshot()
        key = drawn_key(snapshot)
        if not full and key == self._drawn:
            return
        self._drawn = key
        self.set_class(snapshot.unreachable, "-unreachable")
        if snapshot.unreachable:
            self.query_one("#fleet-banner", Static).update(unreachable_text(snapshot))
        view = snapshot.view
        head = self.query_one("#fleet-tool-head", Static)
        tool = view.tools.get(self.tool_id) if view is not None else None
        if tool is None:
            head.update(f"{self.tool_id} — no process reports it now")
        else:
            probe = f"probe: {short_member(tool.lease_holder)}" if tool.lease_holder else "no probe lease"
            strategies = strategy_head(tool.bulkhead, tool.budget)
            head.update(
                f"{self.tool_id} — {states_text(tool.states)} · {probe} · calls {render.count(tool.calls)}"
                f" · errors {render.count(tool.errors)}{' · ' if strategies else ''}{strategies} · esc back"
            )
        members = member_rows(view, self.tool_id) if view is not None else []
        self.query_one("#fleet-members", ItemTable).fill([_member_row(m) for m in members])
        record = latest_command(snapshot, self.tool_id)
        title = self.query_one("#fleet-acks-title", Static)
        acks = self.query_one("#fleet-acks", ItemTable)
        title.display = acks.display = record is not None
        if record is not None:
            title.update(f"answers to {render.clock(record.sent_at)} {ack_summary(record, snapshot.now)}")
            rows = [_ack_row(r) for r in ack_rows(record, snapshot.now)]
            acks.styles.height = min(len(rows) + 1, ACKS_SHOWN + 1)  # a header and a row each: auto gives 0
            acks.fill(rows)

    def selected_tools(self) -> list[str]:
        return [self.tool_id]

    def action_back(self) -> None:
        self.dismiss(None)

    @on(DataTable.RowSelected, "#fleet-members")
    def _open(self, event: DataTable.RowSelected) -> None:
        """A process in full: its id, where it runs and every breaker it reports."""
        event.stop()
        view = feed_of(self).fleet_snapshot().view
        found = [m for m in view.members if m.id == event.row_key.value] if view is not None else []
        if not found:
            return
        m = found[0]
        fields: list[tuple[str, object]] = [
            ("member", m.id), ("status", m.status), ("host", m.host), ("pid", m.pid), ("version", m.version),
            ("started", render.clock(m.started) if m.started else "—"),
            ("last beat", f"{age_text(m.age_s)} ago"),
            ("redis", "available" if m.redis_available else "away"),
            ("events dropped", m.events_dropped),
        ]  # fmt: skip
        fields += [(f"breaker {tool}", state) for tool, state in sorted(m.breakers.items())]
        fields += [
            (f"strategies {tool}", " · ".join(f"{k} {v}" for k, v in figures.items()))
            for tool, figures in sorted(m.strategies.items())
        ]
        if m.shared_budget is not None:
            fields.append(("engine-wide budget", " · ".join(f"{k} {v}" for k, v in m.shared_budget.items())))
        self.app.push_screen(TextModal(f"process {short_member(m.id)}", field_text(fields)))


__all__ = ["FleetScreen", "FleetToolScreen", "fleet_status"]
