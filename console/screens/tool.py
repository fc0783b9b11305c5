"""One tool in detail: in-flight countdowns (and a bulkhead's queue) first, then its strategies,
the retry timeline, recent errors, state history and policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Static

from console import render
from console.model import (
    WINDOW_S,
    BoardRow,
    CallTimeline,
    Changes,
    ErrorRow,
    InFlight,
    ManifestView,
    Queued,
    RateLimitFigures,
    StrategyFigures,
    ToolView,
    Transition,
)
from console.model.rate_limit import rate_limit_options
from console.screens.base import ConsoleScreen
from console.screens.text import TextModal, clock_field, field_text
from console.widgets.item_table import ItemTable, Row, hint, unique_keys
from console.widgets.timeline import RetryTimeline


def policy_lines(manifest: ManifestView | None) -> list[str]:
    """The effective policy, as an operator reads it."""
    if manifest is None:
        return ["no manifest: the defaults apply"]
    c: Mapping[str, Any] = manifest.content
    retry: Mapping[str, Any] = c.get("retry_policy") or {}
    breaker: Mapping[str, Any] = c.get("circuit_breaker") or {}
    lines = [
        f"timeout      {render.duration(c.get('timeout_ms'))} per attempt",
        f"retry        {retry.get('max_attempts', '?')} attempts, {retry.get('strategy', '?')},"
        f" {render.duration(retry.get('initial_delay_ms'))} ×{retry.get('multiplier', '?')}"
        f" up to {render.duration(retry.get('max_delay_ms'))}, ±{retry.get('jitter_percent', '?')}%",
        f"budget       {render.duration(retry.get('max_total_time_ms'))} for all retries",
        f"breaker      opens after {breaker.get('failure_threshold', '?')} transient failures,"
        f" half-opens after {render.duration(breaker.get('timeout_ms'))},"
        f" closes after {breaker.get('success_threshold', '?')} probe(s)",
        f"side effect  {c.get('side_effect', '?')}"
        + (" (retried after ambiguous failures)" if c.get("retry_ambiguous") else ""),
    ]
    bulkhead = c.get("bulkhead")
    if isinstance(bulkhead, Mapping):
        wait = render.duration(bulkhead.get("queue_timeout_ms"))
        queue = (
            f", {bulkhead['max_queued']} more wait up to {wait}"
            if bulkhead.get("max_queued")
            else ", none waits"
        )
        lines.append(f"bulkhead     {bulkhead.get('max_concurrent', '?')} attempts in flight at most{queue}")
    budget = c.get("retry_budget")
    if isinstance(budget, Mapping):
        lines.append(
            f"retry budget {_number(budget.get('budget_percent'))}% of the calls, at least"
            f" {_number(budget.get('min_retries_per_s'))}/s, over {_number(budget.get('window_s'))} s"
        )
    rate_limit = c.get("rate_limit")
    if isinstance(rate_limit, Mapping):
        lines += rate_limit_policy(rate_limit)
    if c.get("alternatives"):
        lines.append(f"alternatives {', '.join(c['alternatives'])}")
    for override in c.get("classification") or ():
        what = ", ".join(f"{k}={v}" for k, v in override.items() if k != "treat_as" and v is not None)
        lines.append(f"override     {what} → {override.get('treat_as')}")
    lines.append(f"manifest     v{manifest.version} {render.short_digest(manifest.digest)} · {manifest.path}")
    return lines


def rate_limit_policy(section: Mapping[str, Any]) -> list[str]:
    """The manifest's ``rate_limit``, as an operator reads it (the engine's defaults filled in)."""
    options = rate_limit_options({"rate_limit": section})
    if options is None:
        return ["rate limit   (as written in the manifest: not understood here)"]
    wait = f"waits up to {render.duration(options.max_wait_ms)}" if options.max_wait_ms else "never waits"
    if options.rate_per_s is not None:
        rate = f"{options.rate_per_s:g}/s, burst {options.bucket_size}"
    else:
        rate = "no rate of its own"
    return [
        f"rate limit   {rate}, {wait}, scope {options.scope}",
        f"cooldown     after a 429: its Retry-After, else {render.duration(options.cooldown_ms)};"
        f" at most {render.duration(options.max_cooldown_ms)}",
    ]


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "?"


IN_FLIGHT_SHOWN = 5
"""Running attempts listed (the nearest deadline first) before a line says how many more run."""


def in_flight_lines(in_flight: Mapping[Any, InFlight], now: float) -> list[Content]:
    if not in_flight:
        return [Content.styled("nothing in flight", "$foreground-muted")]
    lines = []
    running = sorted(in_flight.values(), key=lambda f: f.deadline)
    for f in running[:IN_FLIGHT_SHOWN]:
        total = max(f.deadline - f.started, 1e-9)
        left = max(f.deadline - now, 0.0)
        where = render.call_where(f.turn_id, f.call_id)
        probe = " probe" if f.probe else ""
        style = "$error" if left < total * 0.2 else "$warning" if left < total * 0.5 else "$success"
        lines.append(
            Content.assemble(
                f"{render.middle_truncate(where, 22):<22} #{f.attempt}{probe:<6} ",
                (render.gauge(left / total, 20), style),
                f" {left:5.1f}s left of {render.duration(total * 1000)}",
            )
        )
    if len(running) > IN_FLIGHT_SHOWN:
        more = len(running) - IN_FLIGHT_SHOWN
        lines.append(Content.styled(f"… and {more} more, with later deadlines", "$foreground-muted"))
    return lines


QUEUED_SHOWN = 3
"""Attempts waiting in the bulkhead's queue listed (the longest waiting first)."""


def queued_lines(queued: Mapping[Any, Queued], now: float) -> list[Content]:
    """The attempts waiting for a bulkhead slot: how long each has waited, of how long it may."""
    lines = []
    waiting = sorted(queued.values(), key=lambda q: q.since)
    for q in waiting[:QUEUED_SHOWN]:
        waited = max(now - q.since, 0.0)
        total = q.until - q.since
        where = render.call_where(q.turn_id, q.call_id)
        bounded = 0 < total < float("inf")
        lines.append(
            Content.assemble(
                f"{render.middle_truncate(where, 22):<22} #{q.attempt}{' wait':<6} ",
                (render.gauge(waited / total if bounded else 0.0, 20), "$secondary"),
                f" {waited:5.1f}s waited" + (f" of {render.duration(total * 1000)}" if bounded else ""),
            )
        )
    if len(waiting) > QUEUED_SHOWN:
        more = len(waiting) - QUEUED_SHOWN
        lines.append(Content.styled(f"… and {more} more queued, since later", "$foreground-muted"))
    return lines


def attempt_lines(view: ToolView, now: float) -> list[Content]:
    """The attempts in flight, then those queued for a bulkhead slot."""
    queued = queued_lines(view.strategies.queued, now)
    if queued and not view.in_flight:
        return queued
    return in_flight_lines(view.in_flight, now) + queued


def in_flight_title(strategies: StrategyFigures | None) -> Content:
    """``In flight``, and for a tool with a bulkhead its slots and queue."""
    bulkhead = strategies.bulkhead if strategies is not None else None
    if bulkhead is None:
        return Content("In flight")
    level = render.occupancy_level(
        bulkhead.in_flight, bulkhead.max_concurrent, bulkhead.queued, bulkhead.max_queued
    )
    taken = f"⧉ {bulkhead.in_flight} of {bulkhead.max_concurrent} bulkhead slots taken"
    return Content.assemble(
        "In flight  ",
        (taken, {"ok": "$foreground-muted not bold", "warn": "$warning", "bad": "$error"}[level]),
        (f" · {bulkhead.queued} of {bulkhead.max_queued} queued", "$foreground-muted not bold"),
    )


LABEL = 14
"""The width of a strategy line's label (``retry budget  ``)."""


def strategy_lines(figures: StrategyFigures, now: float) -> list[str]:
    """A tool's bulkhead and retry budget as its detail shows them, each line short enough for 80
    columns, and the newest refusal with its reason whole on a line of its own."""
    lines: list[tuple[str, str]] = []
    bulkhead, budget, shared = figures.bulkhead, figures.retry_budget, figures.shared_budget
    if bulkhead is not None:
        p95 = render.duration(bulkhead.wait_p95_ms)
        lines += [
            ("bulkhead", f"in flight {bulkhead.in_flight}/{bulkhead.max_concurrent} · queued"
                         f" {bulkhead.queued}/{bulkhead.max_queued} · wait p95 {p95}"),
            ("", f"refused {bulkhead.rejected_full} full, {bulkhead.rejected_timeout} wait ran out"
                 f" · {figures.bulkhead_refused} in the last {WINDOW_S} s"),
        ]  # fmt: skip
    if budget is not None:
        lines += [
            ("retry budget", f"in its {budget.window_s:g} s window: {budget.calls} calls ·"
                             f" {budget.retries} retries of {budget.allowed} allowed"),
            ("", f"refused {budget.refused} retries"),
        ]  # fmt: skip
    if figures.engine_budget is not None:
        options, window = figures.engine_budget.options, figures.engine_budget.window
        lines += [
            ("engine budget", f"in its {window.window_s:g} s window: {window.calls} calls ·"
                              f" {window.retries} retries of {window.allowed} allowed"),
            ("", f"options: {options.budget_percent:g} % of calls, at least"
                 f" {options.min_retries_per_s:g} retries/s"),
            ("", f"shared by every tool: refused {window.refused} retries in all"),
        ]  # fmt: skip
    if shared is not None:
        ago = render.span(int(max(now - shared.t, 0.0)))
        lines += [
            ("shared budget", f"refused {shared.refused} of its retries: the engine-wide retry budget"),
            ("", f"at the last: {shared.retries} retries over {shared.calls} calls"
                 f" in {shared.window_s:g} s, {ago} ago"),
        ]  # fmt: skip
    if figures.budgeted:
        lines.append(("", f"{figures.budget_refused} retries refused in the last {WINDOW_S} s"))
    if figures.rate_limit is not None:
        lines += rate_limit_lines(figures.rate_limit, now)
    refusal = figures.last_refusal
    if refusal is not None:
        where = render.call_where(refusal.turn_id, refusal.call_id)
        if not refusal.retry:
            what = "call refused"
        else:  # a budget names the attempt that failed, a bulkhead or a rate limit the retry it refused
            after = refusal.attempt if "budget" in refusal.by else refusal.attempt - 1
            what = f"retry after #{after} refused"
        lines += [
            ("last refused", f"{where} at {render.clock(refusal.at)}: {what} by the {refusal.by}:"),
            ("", refusal.reason),
        ]
    return [f"{label:<{LABEL}}{text}" for label, text in lines]


def rate_limit_lines(rate_limit: RateLimitFigures, now: float) -> list[tuple[str, str]]:
    """A rate limit's figures (the names of ``engine.stats()``'s facts) and its cooldown: how long
    it has left, of how long, and who started it."""
    if rate_limit.rate_per_s is not None and rate_limit.tokens is not None:
        rate = (f"{rate_limit.rate_per_s:g}/s · tokens {rate_limit.tokens:.1f} of burst {rate_limit.burst}"
                f" · max wait {render.duration(rate_limit.max_wait_ms)}")  # fmt: skip
    else:
        rate = f"no rate: only a cooldown · max wait {render.duration(rate_limit.max_wait_ms)}"
    r = rate_limit
    lines = [
        ("rate limit", rate),
        ("", f"waited {r.waited} · refused {r.rejected} throttled · scope {r.scope}"),
        ("", f"in the last {WINDOW_S} s: {r.waited_recent} waited, {r.rejected_recent} refused"),
    ]
    cooldown, left = rate_limit.cooldown, rate_limit.cooldown_remaining_s(now)
    if cooldown is not None and left > 0:
        total = render.duration((cooldown.until - cooldown.started_at) * 1000.0)
        asked = (
            f"its Retry-After {cooldown.retry_after_s:g} s"
            if cooldown.retry_after_s is not None
            else "no Retry-After: the manifest's"
        )
        lines += [
            ("cooldown", f"{render.seconds_left(left)} left of {total} · {rate_limit.cooldowns} so far"),
            ("", f"started by {cooldown.started_by or '?'} ({asked})"),
        ]
    else:
        end = rate_limit.last_end
        how = ""
        if end is not None:
            how = " · the last expired" if end.how == "expired" else f" · the last reset by {end.actor}"
        lines.append(("cooldown", f"none now · {rate_limit.cooldowns} so far{how}"))
    return lines


def figures(row: BoardRow) -> Content:
    """The tool's figures, each with what it is made of: the window's error % next to the calls
    it counts (as on the board), then the same counts since the console started."""
    w, life = row.window, row.stats.life
    n = render.count
    return Content.assemble(
        (f"last {WINDOW_S} s", "$foreground-muted"),
        f"  err {render.percent(row.error_percent)} of ✓{n(w.successes)} ✗{n(w.failures)}"
        f" ⊘{n(w.rejections)}  ↷{n(w.skipped)}  att ✗{n(w.error_count)} ◷{n(w.timeout_count)}"
        f"  {render.rate(row.rate)}/s  p50 {render.duration(row.p50_ms)} p99 {render.duration(row.p99_ms)}",
        ("   since start", "$foreground-muted"),
        f"  ✓{n(life.successes)} ✗{n(life.failures)} ⊘{n(life.rejections)}  ↷{n(life.skipped)}"
        f"  att ✗{n(life.error_count)} ◷{n(life.timeout_count)} ↻{n(life.retry_count)}",
    )


class ToolScreen(ConsoleScreen):
    """Pushed from the board with ``enter``; ``esc`` goes back. The headline and the attempts in
    flight stay on top, whatever the size: their countdowns are what an operator watches. The rest
    scrolls, one section under the other, each as wide as the screen (its tables' free text takes
    what their other columns leave)."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", tooltip="Back to the board"),
        Binding("f", "follow", "Follow", tooltip="The focused list follows its newest row, or holds its row"),
    ]
    DEFAULT_CSS = """
    ToolScreen #headline { height: auto; padding: 0 1; }
    ToolScreen #body { height: 1fr; }
    ToolScreen .section { height: auto; padding: 0 1; margin-bottom: 1; }
    ToolScreen .title { color: $accent; text-style: bold; padding: 0 1; }
    ToolScreen DataTable { height: auto; max-height: 14; margin: 0 1 1 1; scrollbar-size-horizontal: 0; }
    """

    def __init__(self, tool_id: str) -> None:
        super().__init__()
        self.tool_id = tool_id
        self._shown_version = -1
        self._timelines: tuple[ToolView, int, list[CallTimeline]] | None = None
        self._error_rows: dict[str, ErrorRow] = {}
        self._history_rows: dict[str, Transition] = {}

    def compose_body(self) -> ComposeResult:
        yield Static(id="headline")
        yield Static("In flight", classes="title", id="in-flight-title")
        yield Static(id="in-flight", classes="section fit")
        with VerticalScroll(id="body"):
            yield Static("Strategies", classes="title strategies")
            yield Static(id="strategies", classes="section fit strategies", markup=False)
            yield Static("Retry timeline", classes="title")
            yield RetryTimeline(classes="section fit", id="timeline")
            yield Static("Recent errors", classes="title", id="errors-title")
            yield ItemTable("time", "call", "#", "kind", "then", "reason", flex="reason", id="errors")
            yield Static("State history", classes="title", id="history-title")
            yield ItemTable("time", "from", "to", "by", "reason", flex="reason", id="history")
            yield Static("Policy", classes="title")
            yield Static(id="policy", classes="section", markup=False)

    def selected_tools(self) -> list[str]:
        return [self.tool_id]

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        view = self.console_app.model.tools.get(self.tool_id)
        if view is None:
            self.query_one("#headline", Static).update(f"{self.tool_id}: unknown tool")
            return
        row = view.row(now)
        self.query_one("#headline", Static).update(self._headline(row, now))
        self.query_one("#in-flight-title", Static).update(in_flight_title(row.strategies))
        self.query_one("#in-flight", Static).update(Content("\n").join(attempt_lines(view, now)))
        self._strategies(view, row, now)
        if not full and view.version == self._shown_version:
            if view.in_flight or view.strategies.queued:  # running and queued calls grow along the axis
                self.query_one(RetryTimeline).show(self._calls(view), now)
            return
        self._shown_version = view.version
        self.query_one(RetryTimeline).show(self._calls(view), now)
        self.query_one("#policy", Static).update("\n".join(policy_lines(view.manifest)))
        self._errors(view)
        self._history(view)

    def _calls(self, view: ToolView) -> list[CallTimeline]:
        """The tool's retry timeline, built again only when the tool changed, not as time passes."""
        built = self._timelines
        if built is None or built[0] is not view or built[1] != view.version:
            built = self._timelines = (view, view.version, view.timelines())
        return built[2]

    def _strategies(self, view: ToolView, row: BoardRow, now: float) -> None:
        """The Strategies part, shown only for a tool with a bulkhead, a retry budget (the
        engine-wide one included: every tool's calls count in it) or a rate limit."""
        figures = row.strategies
        if figures is None and view.strategies.engine_budget is not None:
            engine_wide = view.strategies.figures(now, len(view.in_flight))
            figures = engine_wide if engine_wide.engine_budget is not None else None
        for part in self.query(".strategies"):
            part.display = figures is not None
        if figures is not None:
            self.query_one("#strategies", Static).update("\n".join(strategy_lines(figures, now)))

    def _headline(self, row: BoardRow, now: float) -> Content:
        threshold = f"/{row.failure_threshold}" if row.failure_threshold else ""
        parts: list[str | tuple[str, str]] = [
            (self.tool_id, "bold"),
            "  ",
            (render.state_label(row.state), render.STATE_STYLE[row.state]),
            (f"   fails {row.consecutive_failures}{threshold}", "bold"),
        ]
        if row.half_open_at is not None:
            parts.append((f"  half-open {render.countdown(row.half_open_at - now)}", "bold $warning"))
        rate_limit = row.strategies.rate_limit if row.strategies is not None else None
        cooling = rate_limit.cooldown_remaining_s(now) if rate_limit is not None else 0.0
        if cooling > 0:
            parts.append((f"  {render.cooldown(cooling)}", "bold $warning"))
        return Content.assemble(*parts, "\n", figures(row))

    # --- the lists: the cursor stays on its row, enter opens it whole ---------------------------

    def _errors(self, view: ToolView) -> None:
        self._error_rows = dict(error_rows(view.errors))
        rows: list[Row] = []
        for key, e in reversed(self._error_rows.items()):
            where = render.call_where(e.turn_id, e.call_id)
            status = f" {e.status_code}" if e.status_code else ""
            kind = f"{e.kind}{status} ({e.error_class})"
            cells = (render.clock(e.at), Text(where), str(e.attempt), Text(kind), Text(e.decision))
            rows.append((key, (*cells, Text(e.reason))))
        self.query_one("#errors", ItemTable).fill(rows)
        self._hints()

    def _history(self, view: ToolView) -> None:
        self._history_rows = dict(history_rows(view.history))
        rows: list[Row] = [
            (
                key,
                (render.clock(tr.at), str(tr.from_state), str(tr.to_state), Text(tr.actor), Text(tr.reason)),
            )
            for key, tr in reversed(self._history_rows.items())
        ]
        self.query_one("#history", ItemTable).fill(rows)
        self._hints()

    def _hints(self) -> None:
        for name, title in (("errors", "Recent errors"), ("history", "State history")):
            table = self.query_one(f"#{name}", ItemTable)
            shown = Content.assemble(
                title, "  ", (hint(table.list_cursor, short=True), "$foreground-muted not bold")
            )
            self.query_one(f"#{name}-title", Static).update(shown if table.row_count else title)

    def action_follow(self) -> None:
        focused = self.focused
        table = focused if isinstance(focused, ItemTable) else self.query_one("#errors", ItemTable)
        table.follow(not table.list_cursor.following)
        self._hints()

    @on(DataTable.RowHighlighted)
    def _moved(self) -> None:
        self._hints()

    @on(DataTable.RowSelected, "#errors")
    def _open_error(self, event: DataTable.RowSelected) -> None:
        found = self._error_rows.get(str(event.row_key.value))
        if found is not None:
            where = render.call_where(found.turn_id, found.call_id)
            title = f"{self.tool_id} · error on {where} #{found.attempt}"
            self.app.push_screen(TextModal(title, field_text(error_fields(found))))

    @on(DataTable.RowSelected, "#history")
    def _open_transition(self, event: DataTable.RowSelected) -> None:
        found = self._history_rows.get(str(event.row_key.value))
        if found is not None:
            title = f"{self.tool_id} · {found.from_state} → {found.to_state}"
            self.app.push_screen(TextModal(title, field_text(transition_fields(found))))


def error_rows(errors: Sequence[ErrorRow]) -> list[tuple[str, ErrorRow]]:
    """The errors, oldest first, each with the key its row keeps while newer ones arrive."""
    keys = unique_keys([f"{e.t}/{e.turn_id}/{e.call_id}/{e.attempt}" for e in errors])
    return list(zip(keys, errors, strict=True))


def history_rows(history: Sequence[Transition]) -> list[tuple[str, Transition]]:
    keys = unique_keys([f"{tr.t}/{tr.from_state}/{tr.to_state}/{tr.actor}" for tr in history])
    return list(zip(keys, history, strict=True))


def error_fields(e: ErrorRow) -> list[tuple[str, object]]:
    return [
        ("time", clock_field(e.at)), ("turn", e.turn_id), ("call", e.call_id), ("attempt", e.attempt),
        ("kind", e.kind), ("status", e.status_code), ("class", e.error_class), ("then", e.decision),
        ("reason", e.reason), ("message", e.message),
    ]  # fmt: skip


def transition_fields(tr: Transition) -> list[tuple[str, object]]:
    return [
        ("time", clock_field(tr.at)), ("from", tr.from_state), ("to", tr.to_state), ("by", tr.actor),
        ("reason", tr.reason),
    ]  # fmt: skip
