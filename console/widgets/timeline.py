"""``RetryTimeline``: a tool's recent calls on a time axis — attempts, backoff gaps, outcomes."""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.widgets import Static

from console import render
from console.model import CallTimeline

LABEL_WIDTH = 22
"""At most: where the call ran (``turn/call``, cut in the middle past this)."""
SUMMARY_MIN = 14
LABEL_MIN = 10
AXIS_MIN = 8

_ATTEMPT_STYLE = {
    "ok": "$success",
    "error": "$error",
    "timeout": "$warning",
    "cut": "$foreground-muted",
    "running": "$primary",
}
_WAIT = ("░", "$secondary")
"""An attempt a strategy held back (the bulkhead, the rate limit): its wait (however that ended), or
its refusal."""
_OUTCOME_MARK = {
    "succeeded": ("✓", "$success"),
    "partial": ("◑", "$warning"),
    "failed": ("✗", "$error"),
    "rejected": ("⊘", "$secondary"),
    "cut": ("✂", "$foreground-muted"),
    "running": ("…", "$primary"),
}


def timeline_widths(labels: Sequence[str], summaries: Sequence[str], width: int) -> tuple[int, int, int]:
    """(label, axis, summary) widths that fit ``width``: the label and the summary whole while the
    axis keeps ``AXIS_MIN`` cells, then the summary and the label cut (with ``…``) to make room."""
    label = min(LABEL_WIDTH, max(map(len, labels), default=0))
    summary = max(map(len, summaries), default=0)
    free = width - 5  # the gaps and the outcome mark
    short = AXIS_MIN - (free - label - summary)
    if short > 0:
        cut = min(short, max(0, summary - SUMMARY_MIN))
        summary, short = summary - cut, short - cut
    if short > 0:
        label -= min(short, max(0, label - LABEL_MIN))
    return label, max(AXIS_MIN, free - label - summary), summary


def timeline_lines(calls: Sequence[CallTimeline], now: float, width: int) -> list[Content]:
    """One line per call, newest last, on a shared axis as long as the longest call:
    ``█`` attempts coloured by outcome, ``·`` backoff gaps, then the outcome and a summary;
    the whole line fits ``width`` (what is cut ends in ``…``)."""
    wheres = [render.call_where(call.turn_id, call.call_id) for call in calls]
    summaries = [_summary(call, now) for call in calls]
    label_width, axis, summary_width = timeline_widths(wheres, summaries, width)
    span = max(((c.end if c.end is not None else now) - c.start for c in calls), default=0.0)
    scale = axis / span if span > 0 else 0.0
    lines = []
    for call, where, summary in zip(calls, wheres, summaries, strict=True):
        cells: list[tuple[str, str]] = [(" ", "")] * axis
        end = call.end if call.end is not None else now
        gap_from: int | None = None
        for attempt in call.attempts:
            first = _cell(attempt.start - call.start, scale, axis)
            last = _cell((attempt.end if attempt.end is not None else end) - call.start, scale, axis)
            waited = (
                _cell(attempt.queued_at - call.start, scale, axis) if attempt.queued_at is not None else first
            )
            if gap_from is not None:
                for i in range(gap_from, waited):
                    cells[i] = ("·", "$foreground-muted")
            if not attempt.made:  # only its wait shows: it never ran
                waited, first = min(waited, first), last + 1
            for i in range(waited, first):
                cells[i] = _WAIT
            for i in range(first, last + 1):
                cells[i] = ("█", _ATTEMPT_STYLE.get(attempt.outcome, ""))
            gap_from = max(last, first - 1) + 1
        mark, mark_style = _OUTCOME_MARK.get(call.outcome, ("?", ""))
        lines.append(
            Content.assemble(
                render.middle_truncate(where, label_width).ljust(label_width),
                " ",
                *cells,
                " ",
                (mark, mark_style),
                (" " + render.fit(summary, summary_width), "$foreground-muted"),
            )
        )
    return lines


def _summary(call: CallTimeline, now: float) -> str:
    """``5 att · 1.4s · connection_reset``: attempts, how long, and what ended a call that failed;
    then why a strategy refused it or its retry, or that it waits in the bulkhead's queue."""
    end = call.end if call.end is not None else now
    made = call.attempts_made
    summary = f"{len(made)} att · {render.duration((end - call.start) * 1000)}"
    if made and made[-1].kind and call.outcome not in ("succeeded", "running"):
        summary += f" · {made[-1].kind}"
    if call.refusal:
        summary += f" · {call.refusal}"
    elif call.outcome == "running" and call.attempts and call.attempts[-1].outcome == "queued":
        summary += " · queued"
    return summary


def _cell(offset_s: float, scale: float, axis: int) -> int:
    return max(0, min(axis - 1, int(offset_s * scale)))


class RetryTimeline(Static):
    """Recent calls of one tool, oldest first; redrawn to the new width on resize."""

    DEFAULT_CSS = """
    RetryTimeline { height: auto; min-height: 3; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._calls: Sequence[CallTimeline] = ()
        self._now = 0.0

    def show(self, calls: Sequence[CallTimeline], now: float) -> None:
        self._calls, self._now = calls, now
        if not calls:
            self.update(Content.styled("no calls yet", "$foreground-muted"))
            return
        held = {
            a.held_by or "bulkhead"
            for c in calls
            for a in c.attempts
            if a.queued_at is not None or not a.made
        }
        queued = ("  ", _WAIT, f" {', '.join(sorted(held))}") if held else ()
        legend = Content.assemble(
            ("attempts ", "$foreground-muted"), ("█", "$success"), " ok  ", ("█", "$error"), " error  ",
            ("█", "$warning"), " timeout  ", ("█", "$foreground-muted"), " cut off  ",
            ("·", "$foreground-muted"), " backoff", *queued, "\n",
            ("calls    ", "$foreground-muted"), "✓ succeeded  ◑ partial  ✗ failed  ⊘ rejected  ✂ cut off",
        )  # fmt: skip
        width = self.content_size.width or self.app.size.width - 2
        self.update(Content("\n").join([*timeline_lines(calls, now, width), legend]))

    def on_resize(self) -> None:
        if self._calls:
            self.show(self._calls, self._now)
