"""How figures read on screen: durations, percentages, countdowns, sparklines, state words,
and text in styled runs for the widgets that take Rich.

Plain functions of plain values, shared by every widget and view, so the board, the tool detail
and a replay all spell a thing the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from engine.strategies.breaker.machine import BreakerState

BARS = " ▁▂▃▄▅▆▇█"

STATE_CLASS: dict[BreakerState, str] = {
    BreakerState.CLOSED: "closed",
    BreakerState.OPEN: "open",
    BreakerState.HALF_OPEN: "half-open",
    BreakerState.FORCED_OPEN: "forced-open",
    BreakerState.DISABLED: "disabled",
}
"""The CSS class suffix of a state: colours come from the theme ($success, $warning, $error)."""

STATE_GLYPH: dict[BreakerState, str] = {
    BreakerState.CLOSED: "●",
    BreakerState.OPEN: "●",
    BreakerState.HALF_OPEN: "◐",
    BreakerState.FORCED_OPEN: "■",
    BreakerState.DISABLED: "○",
}

STATE_STYLE: dict[BreakerState, str] = {
    BreakerState.CLOSED: "$success",
    BreakerState.OPEN: "bold $error",
    BreakerState.HALF_OPEN: "bold $warning",
    BreakerState.FORCED_OPEN: "bold reverse $error",
    BreakerState.DISABLED: "$foreground-muted",
}
"""A state's style in Content markup, on the theme's colours."""


def state_label(state: BreakerState) -> str:
    """``● OPEN``: every state is spelled out, colour is never the only carrier."""
    return f"{STATE_GLYPH[state]} {state}"


def clock(at: float) -> str:
    """A wall-clock time of day: ``14:03:27``."""
    return f"{datetime.fromtimestamp(at):%H:%M:%S}"


def call_where(turn_id: str | None, call_id: str) -> str:
    """Where a call ran: ``plan-trip/flights`` (the turn's last part), or the call alone."""
    return f"{turn_id.rsplit('/', 1)[-1]}/{call_id}" if turn_id else call_id


def duration(ms: float | None) -> str:
    """``850ms``, ``2.1s``, ``4m05s``; ``—`` when unknown."""
    if ms is None:
        return "—"
    if ms < 1:
        return f"{ms:.2f}ms"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def countdown(seconds: float) -> str:
    """When something timed happens, from the time left: ``in 7s``, ``in 1m05s``. Once that time
    has passed and the console has not seen it happen, how long ago it was due (``due now``,
    ``due 3s ago``, ``due 2m10s ago``): an engine that is late or gone never reads as "now"."""
    if seconds > 0:
        return f"in {span(int(-(-seconds // 1)))}"  # whole seconds, rounded up
    late = int(-seconds)
    return f"due {span(late)} ago" if late else "due now"


def span(whole: int) -> str:
    """``7s``, ``1m05s``, ``2h05m``."""
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes}m{rest:02d}s"
    hours, rest = divmod(whole // 60, 60)
    return f"{hours}h{rest:02d}m"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"


def error_level(value: float | None) -> str:
    """Hystrix's error-% thresholds (10, 35, 50 %): ok, notice, warn, bad."""
    if value is None or value < 10:
        return "ok"
    if value < 35:
        return "notice"
    if value < 50:
        return "warn"
    return "bad"


def rate(per_second: float) -> str:
    if per_second == 0:
        return "0"
    if per_second < 10:
        return f"{per_second:.1f}"
    return f"{per_second:,.0f}"


def count(n: int) -> str:
    return f"{n:,}"


def short_count(n: int) -> str:
    """A count in at most 4 cells, for the board's narrow count columns: ``9999``, then ``12k``,
    ``999k``, ``1.2M``, ``12M``. Rounded down, and the unit says so: never a number cut short."""
    if n < 10_000:
        return str(n)
    unit, size = ("k", 1_000) if n < 1_000_000 else ("M", 1_000_000) if n < 1_000_000_000 else ("G", 10**9)
    if n < 10 * size:  # 1.2M: one decimal while it fits
        tenths = n // (size // 10)
        return f"{tenths // 10}.{tenths % 10}{unit}"
    return f"{n // size}{unit}"


def occupancy(in_flight: int, limit: int, queued: int, width: int | None = None) -> str:
    """A bulkhead's attempts in flight against its limit, and those queued: ``2/4 +1q``, ``4/4``.
    In ``width`` cells, the space goes first, then the limit (``12+30q``): the counts stay whole."""
    waiting = f"+{short_count(queued)}q" if queued else ""
    shown = f"{short_count(in_flight)}/{short_count(limit)}"
    forms = (f"{shown} {waiting}".rstrip(), f"{shown}{waiting}", f"{short_count(in_flight)}{waiting}")
    if width is None:
        return forms[0]
    return next((text for text in forms if cell_len(text) <= width), fit(forms[-1], width))


def occupancy_level(in_flight: int, limit: int, queued: int, max_queued: int) -> str:
    """ok; warn when every slot is taken; bad when the queue is full too (the next is refused)."""
    if in_flight < limit:
        return "ok"
    return "bad" if queued >= max_queued else "warn"


def seconds_left(seconds: float) -> str:
    """Time left in whole seconds, rounded up: ``27s``, ``1m05s`` (``0s`` once over)."""
    return span(max(0, int(-(-seconds // 1))))


def tokens(level: float, burst: int, width: int | None = None) -> str:
    """A rate limit's tokens left against its burst, whole ones only (an attempt needs one):
    ``3/10``, ``0/2``; in ``width`` cells, the burst goes first (``999``)."""
    left = short_count(int(level + 1e-9))
    forms = (f"{left}/{short_count(burst)}", left)
    if width is None:
        return forms[0]
    return next((text for text in forms if cell_len(text) <= width), fit(forms[-1], width))


def cooldown(seconds: float, width: int | None = None) -> str:
    """A cooldown's time left, rounded up: ``cool 27s``, ``cool 1m05s``; in ``width`` cells, the
    word goes first (``27s``): the time stays whole."""
    left = seconds_left(seconds)
    forms = (f"cool {left}", left)
    if width is None:
        return forms[0]
    return next((text for text in forms if cell_len(text) <= width), fit(forms[-1], width))


def sparkline(values: Sequence[int], width: int) -> str:
    """``values`` in ``width`` bars scaled to their maximum (blank when all are zero).

    More values than bars are summed in equal groups, the newest group last, so two minutes of
    one-second counts fit any width.
    """
    if width <= 0:
        return ""
    group = max(1, -(-len(values) // width))
    newest = list(values[-group * width :])
    newest = [0] * (group * width - len(newest)) + newest
    tail = [sum(newest[i : i + group]) for i in range(0, len(newest), group)]
    peak = max(tail, default=0)
    if peak <= 0:
        return " " * width
    top = len(BARS) - 1
    # A non-zero value always shows at least the lowest bar.
    return "".join(BARS[0] if v <= 0 else BARS[max(1, round(v / peak * top))] for v in tail)


def gauge(fraction: float, width: int) -> str:
    """A bar ``width`` cells wide, ``fraction`` (0–1) of it filled."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def short_digest(digest: str | None) -> str:
    return (digest or "")[:8] or "—"


def fit(text: str, width: int) -> str:
    """``text`` in ``width`` cells: whole if it fits, else cut and ending in ``…``. The one rule
    for free text that does not fit: never cut without saying so (its full text is a key away)."""
    if cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    return set_cell_size(text, width - 1) + "…"


def middle_truncate(text: str, width: int) -> str:
    """Hystrix truncates long names in the middle: ``flight_s…backup``."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    head = (width - 1) // 2 + (width - 1) % 2
    tail = width - 1 - head
    return f"{text[:head]}…{text[len(text) - tail :] if tail else ''}"


Parts = Sequence[str | tuple[str, str]]
"""Text in runs, each plain or with a style that may name theme colours (``bold $error``)."""

_VARIABLE = re.compile(r"\$([a-z0-9-]+)")


def rich_text(parts: Parts, variables: Mapping[str, str]) -> Text:
    """``parts`` as Rich Text, theme colours resolved (for widgets that take Rich, like Tree)."""
    text = Text(no_wrap=True)
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        else:
            content, style = part
            text.append(content, _VARIABLE.sub(lambda m: variables.get(m.group(1), "default"), style))
    return text
