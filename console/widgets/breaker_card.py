"""``BreakerCard``: one tool as a Hystrix-style tile, for boards of a few tools."""

from __future__ import annotations

from textual import events
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from console import render
from console.model import BoardRow, StrategyFigures

CARD_WIDTH = 38


class BreakerCard(Static):
    """Name on the top border, state (and the half-open countdown) on the bottom one; inside,
    the sparkline with rate and error %, the rolling counts, failures and latency::

        ╭ flight_search ─────────────────────╮
        │ ▁▂▃▅▇█▇▅▃▂▁▁▁▁   1.2/s  err 40.0%  │
        │ ✓12 ✗3 ⊘5 ↷1 · att ✗17 ◷0          │
        │ fails 5/5   p50 120ms  p99 2.1s    │
        ╰─────────── ● OPEN · half-open in 27s ╯

    The calls (✓ ended with a result, ✗ failed, ⊘ refused without an attempt) are what error %
    is made of: (✗ + ⊘) / (✓ + ✗ + ⊘). ``att ✗`` counts failed attempts, where the breaker's
    failures come from: an open breaker shows them even when every call ended with a result.

    A tool with a bulkhead, a retry budget or a rate limit gives up latency on its last line for
    them (p50, then p99 when it has two): ``⧉ 2/4 +1q ⊘3`` its attempts in flight against the
    limit, those queued and those the bulkhead refused; ``↻⊘2`` the retries a budget refused;
    ``tok 3/10 ⧗2 ⊘1`` a rate limit's tokens left against its burst, the attempts that waited for
    their turn and those refused (throttled) in the board's window — ``cool 27s`` instead of the
    tokens while the tool cools down after a 429, counting down; the bottom border says it too::

        │ fails 0/5  ⧉ 4/4 +2q ⊘3  ↻⊘2       │
        │ fails 0/5  p99 1.2s  cool 27s ⧗0 ⊘4 │
        ╰─────────── ● CLOSED · cooldown 27s ╯

    What does not fit goes, the least telling first: p99, then the budget, then the bulkhead.

    The selected card reads ``▶`` before its name, on a reversed title; a marked one ``✓``:
    glyphs and reverse video, which 16 colours and ``NO_COLOR`` keep, not only a shade.
    """

    DEFAULT_CSS = """
    BreakerCard {
        width: 38;
        height: 5;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        border: round $success;
        border-title-color: $foreground;
        border-subtitle-style: bold;
        &.-closed { border: round $success; border-subtitle-color: $success; }
        &.-open { border: heavy $error; border-subtitle-color: $error; }
        &.-half-open { border: heavy $warning; border-subtitle-color: $warning; }
        &.-forced-open {
            border: double $error; border-subtitle-color: $error; border-subtitle-style: bold reverse;
        }
        &.-disabled { border: dashed $foreground-muted; border-subtitle-color: $foreground-muted; }
        &.-selected { background: $boost; border-title-style: bold reverse; }
        &.-marked { border-title-color: $accent; }
        &.-marked.-selected { border-title-color: $foreground; }
    }
    """

    class Clicked(Message):
        """The operator clicked the card; ``chain`` is 2 for a double click."""

        def __init__(self, tool_id: str, chain: int) -> None:
            super().__init__()
            self.tool_id = tool_id
            self.chain = chain

    def __init__(self, tool_id: str) -> None:
        super().__init__(id=None, markup=False)
        self.tool_id = tool_id
        self._name = render.middle_truncate(tool_id, CARD_WIDTH - 16)
        self.border_title = self._name
        self._shown: tuple[object, ...] | None = None
        self._look: tuple[bool, bool] = (False, False)

    def on_click(self, event: events.Click) -> None:
        self.post_message(self.Clicked(self.tool_id, event.chain))

    @property
    def marked(self) -> bool:
        return self._look[1]

    def select(self, *, selected: bool, marked: bool) -> None:
        """Show the card as selected (``▶``, reversed title) and/or marked (``✓``) or not."""
        if (selected, marked) == self._look:
            return
        self._look = (selected, marked)
        self.set_class(selected, "-selected")
        self.set_class(marked, "-marked")
        self.border_title = f"{'▶ ' if selected else ''}{'✓ ' if marked else ''}{self._name}"

    def show(self, row: BoardRow, now: float, *, selected: bool, marked: bool) -> None:
        self.select(selected=selected, marked=marked)
        half_open = render.countdown(row.half_open_at - now) if row.half_open_at is not None else ""
        cooling = cooldown_left(row, now)
        cooldown = render.cooldown(cooling) if cooling > 0 else ""
        key = (row, half_open, cooldown)
        if key == self._shown:
            return
        self._shown = key
        for state_class in render.STATE_CLASS.values():
            self.set_class(state_class == render.STATE_CLASS[row.state], f"-{state_class}")
        subtitle = render.state_label(row.state)
        if half_open:  # the breaker's countdown first: the cooldown's is on the last line too
            subtitle = f"{subtitle} · half-open {half_open}"
        elif cooldown:
            subtitle = f"{subtitle} · cooldown {render.seconds_left(cooling)}"
        self.border_subtitle = subtitle
        w = row.window
        threshold = f"/{row.failure_threshold}" if row.failure_threshold else ""
        level = render.error_level(row.error_percent)
        n = render.short_count
        error_style = {"ok": "", "notice": "$text-warning", "warn": "$warning", "bad": "bold $error"}[level]
        last_line: list[str | tuple[str, str]] = [
            (
                f"fails {row.consecutive_failures}{threshold}",
                "" if row.consecutive_failures else "$foreground-muted",
            ),
        ]
        strategies = row.strategies
        if strategies is None:
            last_line.append(f"   p50 {render.duration(row.p50_ms)}  p99 {render.duration(row.p99_ms)}")
        else:
            last_line += strategy_parts(row, strategies, now)
        lines = [
            Content.assemble(
                (render.sparkline(row.spark, 12), "$primary"),
                f" {render.rate(row.rate):>5}/s  err ",
                (render.percent(row.error_percent), error_style),
            ),
            Content(
                f"✓{n(w.successes)} ✗{n(w.failures)} ⊘{n(w.rejections)} ↷{n(w.skipped)}"
                f" · att ✗{n(w.error_count)} ◷{n(w.timeout_count)}"
            ),
            Content.assemble(*last_line),
        ]
        self.update(Content("\n").join(lines))


_LEVEL_STYLE = {"ok": "", "warn": "$warning", "bad": "bold $error"}

LINE_WIDTH = CARD_WIDTH - 4
"""Cells inside the border and the padding."""

Part = str | tuple[str, str]


def cooldown_left(row: BoardRow, now: float) -> float:
    """Seconds the tool's rate limit still pauses it for (0: none)."""
    figures = row.strategies
    rate_limit = figures.rate_limit if figures is not None else None
    return rate_limit.cooldown_remaining_s(now) if rate_limit is not None else 0.0


def _refused(count: int, prefix: str = "⊘") -> tuple[str, str]:
    return f"{prefix}{render.short_count(count)}", "$warning" if count else "$foreground-muted"


def strategy_parts(row: BoardRow, strategies: StrategyFigures, now: float) -> list[Part]:
    """The last line's figures after ``fails`` for a tool with a bulkhead, a retry budget or a
    rate limit: as many groups as fit, the rate limit's first (see :class:`BreakerCard`)."""
    n = render.short_count
    groups: dict[str, list[Part]] = {}  # by what they show, most telling first
    rate_limit = strategies.rate_limit
    if rate_limit is not None:
        cooling = rate_limit.cooldown_remaining_s(now)
        if cooling > 0:
            head: Part = (render.cooldown(cooling), "bold $warning")
        elif rate_limit.tokens is not None and rate_limit.burst is not None:
            empty = rate_limit.tokens < 1.0
            head = (f"tok {render.tokens(rate_limit.tokens, rate_limit.burst)}", "$warning" if empty else "")
        else:
            head = ("no cooldown", "$foreground-muted")
        waits = rate_limit.waited_recent
        groups["rate_limit"] = [
            "  ", head, " ", (f"⧗{n(waits)}", "" if waits else "$foreground-muted"), " ",
            _refused(rate_limit.rejected_recent),
        ]  # fmt: skip
    bulkhead = strategies.bulkhead
    if bulkhead is not None:
        full = render.occupancy_level(
            bulkhead.in_flight, bulkhead.max_concurrent, bulkhead.queued, bulkhead.max_queued
        )
        shown = render.occupancy(bulkhead.in_flight, bulkhead.max_concurrent, bulkhead.queued)
        refused = _refused(strategies.bulkhead_refused)
        groups["bulkhead"] = ["  ", (f"⧉ {shown}", _LEVEL_STYLE[full]), " ", refused]
    if strategies.budgeted:
        groups["budget"] = ["  ", _refused(strategies.budget_refused, "↻⊘")]
    groups["p99"] = [f"  p99 {render.duration(row.p99_ms)}"]
    threshold = f"/{row.failure_threshold}" if row.failure_threshold else ""
    room = LINE_WIDTH - len(f"fails {row.consecutive_failures}{threshold}")
    kept: set[str] = set()
    for name, parts in groups.items():
        need = sum(len(p if isinstance(p, str) else p[0]) for p in parts)
        if need <= room and (name != "p99" or len(kept) < 2):
            kept.add(name)
            room -= need
    order = ("p99", "bulkhead", "budget", "rate_limit")  # as shown, left to right
    return [part for name in order if name in kept for part in groups[name]]
