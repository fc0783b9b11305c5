"""``BreakerTable``: the board as a wide table, one line per tool, drawn with the Line API.

Only visible lines are rendered, and a line is rendered again only when its tool's figures,
its countdown, the cursor or the marks changed, so 200 tools refreshed ten times a second cost
what the 40 visible ones do.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console import render
from console.model import BoardRow


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    header: str
    width: int
    right: bool
    priority: int
    """Lower shows first when the table is narrow."""
    needs: str | None = None
    """``bulkhead``, ``budget`` or ``rate_limit``: shown only when some tool on the board has one."""


COLUMNS: tuple[Column, ...] = (
    Column("mark", "", 2, False, 0),
    Column("tool", "TOOL", 20, False, 0),
    Column("state", "STATE", 13, False, 0),
    Column("fails", "FAILS", 5, True, 2),
    Column("half_open", "HALF-OPEN", 13, True, 2),
    Column("error", "ERR%", 6, True, 1),
    Column("ok", "OK", 4, True, 3),
    Column("failed", "FAIL", 4, True, 3),
    Column("rejected", "REJ", 4, True, 3),
    Column("bulkhead", "BULKHEAD", 8, True, 5, "bulkhead"),
    Column("bulkhead_refused", "BH⊘", 4, True, 5, "bulkhead"),
    Column("budget_refused", "BUD⊘", 4, True, 6, "budget"),
    Column("rate_limit", "LIMIT", 5, True, 5, "rate_limit"),
    Column("rate_limit_refused", "RL⊘", 4, True, 5, "rate_limit"),
    Column("rate_limit_waited", "RL⧗", 4, True, 12, "rate_limit"),
    Column("attempts_failed", "ATT✗", 4, True, 4),
    Column("timeout", "TMO", 4, True, 10),
    Column("skipped", "SKIP", 4, True, 10),
    Column("rate", "RATE/s", 6, True, 8),
    Column("p50", "P50", 7, True, 9),
    Column("p99", "P99", 7, True, 7),
    Column("spark", "CALLS, LAST 2 MIN", 0, False, 11),
)
"""Left to right as shown. By priority: the tool and its state; error %; failures against the
threshold and the half-open countdown; the window's calls that error % is made of (ok, failed,
rejected: shown together, so that it can be worked out from the row); the failed attempts (where
the breaker's failures come from: a call can fail attempts and still end ok); a bulkhead's
occupancy and refusals and a rate limit's tokens (or its cooldown, counting down) and refusals,
then a retry budget's refusals (on a board with them); p99; rate; p50; then timeouts and skips;
the sparkline; past 160 columns, a rate limit's waits."""
COUNTDOWN = Column("half_open", "HALF-OPEN/COOL", 14, True, 2)
"""The half-open column on a board with a rate limit: a tool cooling down after a 429 shows its
countdown there (``cool 27s``) when its breaker has none, so that 80 columns show it too."""
STRATEGY_COLUMNS = frozenset(c.needs for c in COLUMNS if c.needs)
_COUNTS = {
    "ok": "successes",
    "failed": "failures",
    "rejected": "rejections",
    "attempts_failed": "error_count",
    "timeout": "timeout_count",
    "skipped": "skipped",
}
"""The columns that show a rolling count: the ``Counts`` field each shows (in at most 4 cells:
:func:`render.short_count`)."""
_STRATEGY_CELLS = frozenset(c.key for c in COLUMNS if c.needs)
SPARK_MIN = 10
SPARK_MAX = 60


@functools.cache
def fit_columns(width: int, strategies: frozenset[str] = frozenset()) -> tuple[tuple[Column, int], ...]:
    """The columns that fit ``width``, in table order, with their widths; those of a strategy
    only if ``strategies`` names it (``bulkhead``, ``budget``, ``rate_limit``: some tool on the
    board has one).

    Whole priority levels are taken in order until one does not fit; nothing of a lower
    priority is then shown, even if it would fit the gap (greedy fitting showed TMO at 80
    columns and dropped OK, FAIL and P99). The first level is always shown. The sparkline
    takes what is left, up to ``SPARK_MAX``.
    """
    columns = [c for c in COLUMNS if c.needs is None or c.needs in strategies]
    if "rate_limit" in strategies:
        columns = [COUNTDOWN if c.key == "half_open" else c for c in columns]
    chosen: list[Column] = []
    used = -1  # n columns need n - 1 gaps
    for priority in sorted({c.priority for c in columns}):
        level = [c for c in columns if c.priority == priority]
        need = sum((c.width or SPARK_MIN) + 1 for c in level)
        if chosen and used + need > width:
            break
        chosen += level
        used += need
    fixed = sum(c.width + 1 for c in chosen if c.key != "spark")
    spark = max(SPARK_MIN, min(SPARK_MAX, width - fixed))
    return tuple((c, c.width or spark) for c in columns if c in chosen)


def board_strategies(rows: Sequence[BoardRow]) -> frozenset[str]:
    """The strategies some tool of ``rows`` has, whose columns the table shows."""
    found: set[str] = set()
    for row in rows:
        figures = row.strategies
        if figures is not None:
            if figures.bulkhead is not None:
                found.add("bulkhead")
            if figures.budgeted:
                found.add("budget")
            if figures.rate_limit is not None:
                found.add("rate_limit")
            if len(found) == len(STRATEGY_COLUMNS):
                break
    return frozenset(found)


class BreakerTable(ScrollView, can_focus=True):
    """One line per tool: state in colour and in words, counts, latency and a sparkline."""

    COMPONENT_CLASSES = {
        "breaker-table--header",
        "breaker-table--cursor",
        "breaker-table--closed",
        "breaker-table--open",
        "breaker-table--half-open",
        "breaker-table--forced-open",
        "breaker-table--disabled",
        "breaker-table--error-notice",
        "breaker-table--error-warn",
        "breaker-table--error-bad",
        "breaker-table--muted",
        "breaker-table--spark",
        "breaker-table--mark",
    }
    DEFAULT_CSS = """
    BreakerTable {
        height: 1fr;
        background: $surface;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;  /* at 80 columns the row keeps ERR% and the counts it is made of */
        & > .breaker-table--header { text-style: bold; color: $foreground-muted; }
        & > .breaker-table--cursor { background: $block-cursor-blurred-background; }
        &:focus > .breaker-table--cursor { background: $block-cursor-background; text-style: bold; }
        &:nocolor > .breaker-table--cursor { text-style: bold reverse; }
        & > .breaker-table--closed { color: $success; }
        & > .breaker-table--open { color: $error; text-style: bold; }
        & > .breaker-table--half-open { color: $warning; text-style: bold; }
        & > .breaker-table--forced-open { color: $error; text-style: bold reverse; }
        & > .breaker-table--disabled { color: $foreground-muted; }
        & > .breaker-table--error-notice { color: $text-warning; }
        & > .breaker-table--error-warn { color: $warning; }
        & > .breaker-table--error-bad { color: $error; text-style: bold; }
        & > .breaker-table--muted { color: $foreground-muted; }
        & > .breaker-table--spark { color: $primary; }
        & > .breaker-table--mark { color: $accent; text-style: bold; }
    }
    """
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "First", show=False),
        Binding("end,G", "jump(-1)", "Last", show=False),
        Binding("enter", "open", "Detail", tooltip="Open the selected tool's detail"),
    ]

    cursor = reactive(0, repaint=False)

    class Opened(Message):
        """The operator asked for a tool's detail (``enter`` or a click)."""

        def __init__(self, tool_id: str) -> None:
            super().__init__()
            self.tool_id = tool_id

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[BoardRow] = []
        self._now = 0.0
        self._marked: frozenset[str] = frozenset()
        self._strategies: frozenset[str] = frozenset()
        """The strategies whose columns show: those some tool on the board has."""
        self._cache: dict[str, tuple[tuple[object, ...], Strip]] = {}
        self._styles: dict[str, Style] = {}

    # --- data ------------------------------------------------------------------------------

    @property
    def rows(self) -> Sequence[BoardRow]:
        return self._rows

    @property
    def selected(self) -> str | None:
        return self._rows[self.cursor].tool_id if self._rows else None

    def show(self, rows: list[BoardRow], now: float, marked: frozenset[str], keep: str | None = None) -> None:
        """Show ``rows`` (already sorted) as of ``now``; the cursor stays on ``keep``'s tool.

        Only lines that look different are redrawn: the compositor then recomposes just those.
        """
        reordered = len(rows) != len(self._rows) or any(
            a.tool_id != b.tool_id for a, b in zip(rows, self._rows, strict=False)
        )
        self._rows, self._now, self._marked = rows, now, marked
        strategies = board_strategies(rows)
        if strategies != self._strategies:  # columns came or went: every line changes
            self._strategies = strategies
            self._cache.clear()
            reordered = True
        cursor = self.cursor
        if keep is not None:
            cursor = next((i for i, r in enumerate(rows) if r.tool_id == keep), cursor)
        cursor = max(0, min(cursor, len(rows) - 1))
        if cursor != self.cursor:
            self.set_reactive(BreakerTable.cursor, cursor)
            reordered = True
        if self.virtual_size.height != len(rows) + 1:
            self.virtual_size = Size(self._width, len(rows) + 1)
        if reordered:
            self.refresh()
            return
        width = self._width
        top = int(self.scroll_offset.y)
        for index in range(top, min(len(rows), top + self.size.height - 1)):
            row = rows[index]
            cached = self._cache.get(row.tool_id)
            if cached is None or cached[0] != self._key(row, index == cursor, width):
                self.refresh(Region(0, index - top + 1, width, 1))

    def on_resize(self) -> None:
        self._cache.clear()
        self.virtual_size = Size(self._width, len(self._rows) + 1)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._restyle()

    def on_focus(self) -> None:
        self._restyle()

    def on_blur(self) -> None:
        self._restyle()

    def _restyle(self) -> None:
        """The cursor's colour depends on focus; every style on the theme: start over."""
        self._styles.clear()
        self._cache.clear()
        self.refresh()

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            if name == "base":
                style = self.rich_style
            else:
                style = self.get_component_rich_style(f"breaker-table--{name}", partial=True)
            self._styles[name] = style
        return style

    # --- navigation ------------------------------------------------------------------------

    def watch_cursor(self) -> None:
        self._scroll_to_cursor()
        self.refresh()

    def _scroll_to_cursor(self) -> None:
        # Line 0 is the header; the cursor's row is line cursor + 1.
        self.scroll_to_region(
            Region(0, self.cursor + 1, 1, 1), animate=False, spacing=Spacing(1, 0, 0, 0), force=True
        )

    def action_cursor(self, delta: int) -> None:
        if self._rows:
            self.cursor = max(0, min(self.cursor + delta, len(self._rows) - 1))

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 2))

    def action_jump(self, index: int) -> None:
        if self._rows:
            self.cursor = index % len(self._rows)

    def action_open(self) -> None:
        if self.selected is not None:
            self.post_message(self.Opened(self.selected))

    def on_click(self, event: object) -> None:
        offset = getattr(event, "y", 0) + int(self.scroll_offset.y) - 1
        if 0 <= offset < len(self._rows):
            if offset == self.cursor and getattr(event, "chain", 1) > 1:
                self.action_open()
            self.cursor = offset

    # --- rendering -------------------------------------------------------------------------

    @property
    def _width(self) -> int:
        """The columns the lines may take: not those under the scrollbar, which would hide a
        line's end without a mark."""
        return self.scrollable_content_region.width

    def render_line(self, y: int) -> Strip:
        width = self._width
        if y == 0:
            return self._header(width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self._rows):
            return Strip.blank(width, self._style("base"))
        return self._line(self._rows[index], index == self.cursor, width)

    def _header(self, width: int) -> Strip:
        style = self._style("base") + self._style("header")
        parts = [_cell(c.header, size, c.right) for c, size in fit_columns(width, self._strategies)]
        return _strip([Segment(" ".join(parts), style)], width, style)

    def _key(self, row: BoardRow, selected: bool, width: int) -> tuple[object, ...]:
        """Everything a line shows: equal keys, equal lines (the stats are compared by identity)."""
        half_open = render.countdown(row.half_open_at - self._now) if row.half_open_at is not None else ""
        cooling = row.strategies.rate_limit if row.strategies is not None else None
        cooldown = int(-(-cooling.cooldown_remaining_s(self._now) // 1)) if cooling is not None else 0
        return (row.state, row.consecutive_failures, row.failure_threshold, half_open, row.stats, selected,
                row.tool_id in self._marked, width, row.strategies, self._strategies, cooldown)  # fmt: skip

    def _line(self, row: BoardRow, selected: bool, width: int) -> Strip:
        key = self._key(row, selected, width)
        cached = self._cache.get(row.tool_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        half_open, marked = str(key[3]), bool(key[6])
        base = self._style("base") + self._style("cursor") if selected else self._style("base")
        muted = base + self._style("muted")
        segments: list[Segment] = []
        gap = Segment(" ", base)
        for column, size in fit_columns(width, self._strategies):
            text, style = self._cell(column.key, row, half_open, selected, marked, base, muted, size)
            segments.append(Segment(_cell(text, size, column.right), style))
            segments.append(gap)
        strip = _strip(segments, width, base)
        self._cache[row.tool_id] = (key, strip)
        return strip

    def _cell(
        self, key: str, row: BoardRow, half_open: str, selected: bool, marked: bool, base: Style,
        muted: Style, size: int,
    ) -> tuple[str, Style]:  # fmt: skip
        if key == "mark":  # the cursor is a glyph too, not only a shade: NO_COLOR drops shades
            return ("▶" if selected else " ") + ("✓" if marked else ""), base + self._style("mark")
        if key == "tool":
            return render.middle_truncate(row.tool_id, size), base
        if key == "state":
            state = row.state
            return render.state_label(state), base + self._style(render.STATE_CLASS[state])
        if key == "fails":
            threshold = row.failure_threshold
            text = f"{row.consecutive_failures}/{threshold}" if threshold else str(row.consecutive_failures)
            return text, (base if row.consecutive_failures else muted)
        if key == "half_open":
            if not half_open and row.strategies is not None and row.strategies.rate_limit is not None:
                cooling = row.strategies.rate_limit.cooldown_remaining_s(self._now)
                if cooling > 0:
                    return render.cooldown(cooling, size), base + self._style("error-warn")
            return half_open, base + self._style("half-open") if half_open else muted
        if key == "error":
            level = render.error_level(row.error_percent)
            style = muted if row.error_percent is None else base
            if level != "ok":
                style = base + self._style(f"error-{level}")
            return render.percent(row.error_percent), style
        if key == "rate":
            return render.rate(row.rate), base
        if key in _STRATEGY_CELLS:
            return self._strategy_cell(key, row, base, muted, size)
        counted = _COUNTS.get(key)
        if counted is not None:
            value: int = getattr(row.window, counted)
            return (render.short_count(value) if value else "·"), (base if value else muted)
        if key == "p50":
            return render.duration(row.p50_ms), base
        if key == "p99":
            return render.duration(row.p99_ms), base
        return render.sparkline(row.spark, size), base + self._style("spark")

    def _strategy_cell(
        self, key: str, row: BoardRow, base: Style, muted: Style, size: int
    ) -> tuple[str, Style]:
        """A bulkhead's occupancy and refusals, a budget's refusals, a rate limit's tokens (or its
        cooldown) waits and refusals: blank for a tool without one."""
        figures = row.strategies
        bulkhead = figures.bulkhead if figures is not None else None
        if key.startswith("rate_limit"):
            return self._rate_limit_cell(key, row, base, muted, size)
        if key == "budget_refused":
            if figures is None or not figures.budgeted:
                return "", base
            value = figures.budget_refused
        elif bulkhead is None or figures is None:
            return "", base
        elif key == "bulkhead":
            level = render.occupancy_level(
                bulkhead.in_flight, bulkhead.max_concurrent, bulkhead.queued, bulkhead.max_queued
            )
            text = render.occupancy(bulkhead.in_flight, bulkhead.max_concurrent, bulkhead.queued, size)
            return text, base if level == "ok" else base + self._style(f"error-{level}")
        else:
            value = figures.bulkhead_refused
        if not value:
            return "·", muted
        return render.short_count(value), base + self._style("error-warn")

    def _rate_limit_cell(
        self, key: str, row: BoardRow, base: Style, muted: Style, size: int
    ) -> tuple[str, Style]:
        rate_limit = row.strategies.rate_limit if row.strategies is not None else None
        if rate_limit is None:
            return "", base
        if key == "rate_limit":
            cooling = rate_limit.cooldown_remaining_s(self._now)
            if cooling > 0:
                return render.cooldown(cooling, size), base + self._style("error-bad")
            if rate_limit.tokens is None or rate_limit.burst is None:  # only a cooldown, none now
                return "·", muted
            text = render.tokens(rate_limit.tokens, rate_limit.burst, size)
            return text, base if rate_limit.tokens >= 1.0 else base + self._style("error-warn")
        value = rate_limit.waited_recent if key == "rate_limit_waited" else rate_limit.rejected_recent
        if not value:
            return "·", muted
        return render.short_count(value), base + self._style("error-warn")


def _cell(text: str, width: int, right: bool) -> str:
    length = cell_len(text)
    if length > width:
        return render.middle_truncate(text, width)
    pad = " " * (width - length)
    return pad + text if right else text + pad


def _strip(segments: list[Segment], width: int, style: Style) -> Strip:
    return Strip(segments).crop_extend(0, width, style)


__all__ = ["COLUMNS", "STRATEGY_COLUMNS", "BreakerTable", "Column", "board_strategies", "fit_columns"]
