"""Nothing cut without saying so (issue 22 §4): every view of the real app, at 80×24 and 160×50.

The app runs headless on the demo's real traffic (one pass of ``manifests/demo/live.yaml``, cut
mid-outage, plus a manifest reloaded and one refused, and the pass in a trace store); each view is
read back as the terminal shows it. Against what the data hold — the model's tools, errors,
transitions, turns, events and manifests, the stored turns, the status line — three checks:

* words: a token on screen that begins a word of the data without being a word of the data or of
  the console's own strings (``connecti``, ``SUC``, ``10:30:``) is a word cut without a mark;
* phrases: where a piece of free text (a reason, an event's text, a turn's summary) shows on
  screen past its second word, it runs on to its end — on the next line, if wrapped — or stops
  at ``…``;
* the status line: the status whole, or as much as fits and then ``…``.

The same on an engine with a bulkhead and retry budgets (issue 23) and a rate-limited tool cooling
down after a 429 (issue 24). Then the tool detail's
countdowns, first at 80×24, and the rules the views fit text by.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from textual.containers import VerticalScroll
from textual.pilot import Pilot

from console import render
from console.app import ConsoleApp
from console.model import ConsoleModel, InFlight
from console.screens.tool import IN_FLIGHT_SHOWN, in_flight_lines
from console.screens.traces import TraceScreen
from console.widgets.item_table import fit_widths
from console.widgets.timeline import AXIS_MIN, timeline_widths
from engine.store import TraceStore
from tests.console import factory as f
from tests.console.demo_feed import demo_store, events_until, live_demo
from tests.console.fakes import FakeLink
from tests.console.strategies_feed import scene
from tests.console.test_snapshots import MID_OUTAGE, settle

SIZES = {"80x24": (80, 24), "160x50": (160, 50)}
SEPARATORS = re.compile(r"[\s\u2500-\u259f]+")
"""Tokens are what lies between spaces and box-drawing or block characters (borders, guides,
scrollbars, bars)."""
PUNCTUATION = "()[]{},;:·.\"'“”!?"
FIGURE = re.compile(r"[\d.,%/+-]+")
ROOT = Path(__file__).parents[2]
START = 10
"""A phrase is looked for where its first this many characters are on screen."""


# --- what the data hold --------------------------------------------------------------------------


def model_texts(model: ConsoleModel) -> Iterable[str]:
    for view in model.tools.values():
        yield view.tool_id
        for e in view.errors:
            where = render.call_where(e.turn_id, e.call_id)
            yield from (where, e.kind, e.error_class, e.decision, e.reason, render.clock(e.at))
        for tr in view.history:
            yield from (tr.actor, tr.reason, str(tr.from_state), str(tr.to_state), render.clock(tr.at))
        for running in view.in_flight.values():
            yield render.call_where(running.turn_id, running.call_id)
        for waiting in view.strategies.queued.values():
            yield render.call_where(waiting.turn_id, waiting.call_id)
        for call in view.timelines():
            yield render.call_where(call.turn_id, call.call_id)
            yield from (a.kind for a in call.attempts if a.kind)
            yield call.refusal or ""
        rate_limit = view.strategies.rate_limit
        if rate_limit is not None and rate_limit.cooldown is not None:
            yield rate_limit.cooldown.started_by or ""
        refusal = view.strategies.last_refusal
        if refusal is not None:
            yield from (refusal.reason, refusal.by, render.call_where(refusal.turn_id, refusal.call_id))
        if view.manifest is not None:
            yield from (view.manifest.path, render.short_digest(view.manifest.digest))
            yield render.clock(view.manifest.loaded_at)
    for turn in model.turns.values():
        yield from (turn.turn_id, turn.outcome.replace("_", " "), turn.summary)
        for node in turn.calls.values():
            yield from (node.call_id, node.tool_id, node.served_by or "", node.label.upper(), node.reason)
    _, rows = model.newest_event_rows(since=0, limit=1_000_000)
    for row in rows:
        yield from (row.event_type, " ⏎ ".join(row.text.splitlines()))
    for change in model.manifest_changes:
        yield from (change.path, change.tool_id or "", render.clock(change.at), *change.errors)


def store_texts(path: Path) -> Iterable[str]:
    with TraceStore(path, readonly=True, verify=False) as store:
        for row in store.list_turns(limit=1000).rows:
            yield from (row.turn_id, row.summary or "", row.outcome.replace("_", " "))
            turn = store.load_turn(row.turn_id)
            yield from (" ⏎ ".join(e.describe().splitlines()) for e in turn.events)
            for a in turn.attempts:
                yield from (a.call_id, a.tool_id, a.outcome, a.kind or "", a.error_class or "")


def words_of(texts: Iterable[str]) -> set[str]:
    return {word.strip(PUNCTUATION) for text in texts for word in SEPARATORS.split(text)} - {""}


# --- the checks ------------------------------------------------------------------------------------


def cut_words(lines: list[str], words: set[str], own: frozenset[str] = frozenset()) -> list[str]:
    """Tokens on screen that begin a word of the data without being a word of the data or of the
    console's ``own`` (``start`` of ``since start``), and bear no ``…``. Figures are left to the
    phrases: ``0.0`` begins ``0.00ms`` and is a rate."""
    heads = {w[:n] for w in words for n in range(3, len(w))}
    found = []
    for y, line in enumerate(lines):
        for raw in SEPARATORS.split(line):
            token = raw.strip(PUNCTUATION)
            if len(token) < 3 or "…" in token or token in words or token in own or FIGURE.fullmatch(token):
                continue
            if token in heads:
                found.append(f"line {y}: {token!r} in {line.strip()!r}")
    return found


def console_words() -> frozenset[str]:
    """Every word the console's code writes (its string literals, f-strings' fixed parts), and the
    key names Textual's footer writes: words of the views' own, not data."""
    texts: list[str] = ["esc"]
    for path in (ROOT / "console").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    return frozenset(words_of(texts))


def cut_phrases(lines: list[str], phrases: set[str]) -> list[str]:
    """Places where a phrase of the data shows from its start to past its second word, then stops
    short, neither at ``…`` nor at the end of the line (wrapped; the status line has a check of its
    own), and not inside another phrase shown (a reason quoted in an event's text). Where several
    phrases begin alike, the one the screen follows furthest is the one shown."""
    starts: dict[str, list[str]] = {}
    for phrase in phrases:
        if " " in phrase.strip() and len(phrase) >= START:
            starts.setdefault(phrase[:START], []).append(phrase)
    found = []
    for y, line in enumerate(lines):
        shown: list[tuple[int, int]] = []  # spans of phrases shown whole, or up to "…"
        short: list[tuple[int, int, str]] = []
        for x in range(len(line) - START + 1):
            candidates = starts.get(line[x : x + START])
            if not candidates:
                continue
            reached = [(shared(line[x:], p), p) for p in candidates]
            whole = [j for j, p in reached if j == len(p) or line[x + j : x + j + 1] == "…"]
            j, phrase = max(reached)
            if whole or not line[x + j :].strip():
                shown.append((x, x + max(whole or [j])))  # whole, marked, or wrapped (the line ends)
            elif j >= two_words(phrase):
                short.append((x, j, phrase))
        for x, j, phrase in short:
            if not any(start <= x < end for start, end in shown):
                found.append(f"line {y}: {phrase[:j]!r}, then {line[x + j]!r} instead of {phrase[j:]!r}")
    return found


def shared(shown: str, phrase: str) -> int:
    """How many characters of ``phrase`` ``shown`` starts with."""
    n = 0
    for a, b in zip(shown, phrase, strict=False):
        if a != b:
            break
        n += 1
    return n


def two_words(phrase: str) -> int:
    """Where a phrase's second word ends."""
    second = phrase.find(" ", phrase.find(" ") + 1)
    return len(phrase) if second < 0 else second


def cut_status(lines: list[str], status: str) -> list[str]:
    """The status line shows the status whole, or as much as fits and then ``…``."""
    shown = lines[0].strip()
    if shown == status or (shown.endswith("…") and status.startswith(shown[:-1].rstrip())):
        return []
    return [f"the status line {shown!r} is not {status!r}, whole or ending in …"]


def screen_lines(app: ConsoleApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


# --- the views -------------------------------------------------------------------------------------


OWN = console_words()
DETAILS = ("flight_search", "hotel_search", "custom_api")
"""Tool details with something of their own: an open breaker and its errors, a call in flight,
partial results and a permanent error."""


class Tour:
    """Each view in turn, read back and checked against the data."""

    def __init__(self, app: ConsoleApp, pilot: Pilot[Any], store: Path | None) -> None:
        self.app, self.pilot = app, pilot
        self.stored = list(store_texts(store)) if store is not None else []
        self.problems: list[str] = []

    async def look(self, name: str) -> None:
        await settle(self.pilot)
        self.app.flush()
        await self.pilot.pause()
        status = self.app.status_text().plain
        texts = [status, *self.stored, *model_texts(self.app.model)]
        lines = screen_lines(self.app)
        self.problems += [f"{name}: {p}" for p in cut_status(lines, status)]
        self.problems += [f"{name}: {p}" for p in cut_words(lines, words_of(texts), OWN)]
        self.problems += [f"{name}: {p}" for p in cut_phrases(lines, set(texts))]

    async def scrolled(self, name: str) -> None:
        """The view again, every scrollable part of it at its end."""
        for scroll in self.app.screen.query(VerticalScroll):
            scroll.scroll_end(animate=False, immediate=True)
        await self.look(f"{name}, scrolled to the end")


def demo(tmp_path: Path) -> tuple[ConsoleApp, FakeLink, Path]:
    seeds, _ = live_demo()
    link = FakeLink(seeds, clock=MID_OUTAGE, description="travel agent, live · manifests/ · traces.db")
    store = demo_store(tmp_path / "traces.db")
    return ConsoleApp(link, actor="operator:test", live=False, traces=store), link, store


async def tour(app: ConsoleApp, link: FakeLink, pilot: Pilot[Any], store: Path) -> list[str]:
    link.emit(*events_until(MID_OUTAGE))
    link.emit(
        f.manifest_loaded("hotel_search", MID_OUTAGE - 5, version=8, digest="9f2c4e1aa0", previous="x",
                          path="manifests/hotel_search.yaml"),
        f.manifest_rejected(
            "manifests/flight_search.yaml", MID_OUTAGE - 1,
            "manifests/flight_search.yaml:4: tool.timeout_ms: Input should be greater than 0",
        ),
    )  # fmt: skip
    app.flush()
    seen = Tour(app, pilot, store)
    await seen.look("the board")
    await pilot.press("v")
    await seen.look("the board's other layout")
    for tool_id in DETAILS:
        app.open_tool(tool_id)
        await seen.look(f"{tool_id}'s detail")
        await seen.scrolled(f"{tool_id}'s detail")
        app.pop_screen()
    await pilot.press("2")
    await seen.look("the dependencies")
    await pilot.press(*["down"] * 5, "enter")  # demo/flights-down: failures with reasons
    await seen.look("the dependencies of flights-down")
    await pilot.press("3")
    await seen.look("the manifests")
    await pilot.press("4")
    await seen.look("the events")
    await pilot.press("5")
    await seen.look("the stored turns")
    app.push_screen(TraceScreen("demo/flights-down"))
    await settle(pilot)
    await seen.look("a stored turn")
    await seen.scrolled("a stored turn")
    app.pop_screen()
    app.start_replay(turn_id="demo/hotel-slow")
    await seen.look("a replay")
    return seen.problems


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_no_view_cuts_a_word_without_an_ellipsis(tmp_path: Path, size: str) -> None:
    app, link, store = demo(tmp_path)
    async with app.run_test(size=SIZES[size]) as pilot:
        problems = await tour(app, link, pilot, store)
    assert not problems, "\n".join(problems)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_no_view_of_bulkheads_and_budgets_cuts_a_word_without_an_ellipsis(size: str) -> None:
    """The board and the details of tools with a full bulkhead, budgets spent, a rate limit cooling
    down with throttled refusals, and none."""
    played = scene()
    link = FakeLink(played.seeds, clock=played.now, description="agent with strategies, live")
    app = ConsoleApp(link, actor="operator:test", live=False)
    async with app.run_test(size=SIZES[size]) as pilot:
        link.emit(*played.events)
        app.flush()
        seen = Tour(app, pilot, None)
        await seen.look("the board")
        await pilot.press("v")
        await seen.look("the board's other layout")
        for tool_id in ("search", "pricing", "quotes", "weather", "quota"):
            app.open_tool(tool_id)
            await seen.look(f"{tool_id}'s detail")
            await seen.scrolled(f"{tool_id}'s detail")
            app.pop_screen()
        await pilot.press("4")
        await seen.look("the events")
    assert not seen.problems, "\n".join(seen.problems)


def test_the_checks_find_a_silent_cut_and_pass_a_marked_one() -> None:
    """What the checks catch: a word, a phrase or the status line cut without a mark; not one
    ending in ``…``, nor a phrase wrapped onto the next line."""
    words = words_of(["connection_reset", "HTTP 503 is transient"])
    assert cut_words(["  10:30:49  connecti  retry"], words)
    assert not cut_words(["  10:30:49  connecti…  retry", "  connection_reset"], words)
    phrases = {"HTTP 503 is transient", "attempt 2 failed: HTTP 503 is transient"}
    assert cut_phrases([" HTTP 503 is   retry "], phrases)
    assert not cut_phrases([" HTTP 503 is t…  retry ", " attempt 2 failed: HTTP 503 is transient "], phrases)
    assert not cut_phrases([" HTTP 503 is", " transient and more"], phrases), "wrapped"
    assert not cut_phrases([" attempt 2 failed: HTTP 503 is…  retry "], phrases), "quoted, cut with …"
    status = "● LIVE  7 tools · manifests v7 · 3 ev/s"
    assert cut_status([" ● LIVE  7 tools · manifests   "], status)
    assert not cut_status([" ● LIVE  7 tools · manifests v…"], status)
    assert not cut_status([f" {status} "], status)


@pytest.mark.asyncio
async def test_at_80x24_the_tool_detail_shows_the_timeout_countdowns_first(tmp_path: Path) -> None:
    """The countdown README tells you to watch was below the visible area at 80×24; it stays on
    top, also when the rest of the detail is scrolled."""
    app, link, _ = demo(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        link.emit(*events_until(MID_OUTAGE))
        app.flush()
        app.open_tool("hotel_search")
        await settle(pilot)
        app.flush()
        await pilot.pause()
        assert any("18.0s left of 30.0s" in line for line in screen_lines(app))
        app.screen.query_one("#body", VerticalScroll).scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert any("18.0s left of 30.0s" in line for line in screen_lines(app))


# --- the rules, one by one -------------------------------------------------------------------------


def test_text_that_does_not_fit_ends_in_an_ellipsis() -> None:
    assert render.fit("connection_reset", 16) == "connection_reset"
    assert render.fit("connection_reset", 9) == "connecti…"
    assert render.fit("界界界", 5) == "界界…", "cells, not characters"


def test_a_count_too_long_for_its_column_takes_a_unit_never_a_cut() -> None:
    shown = [render.short_count(n) for n in (0, 9_999, 10_000, 999_999, 1_234_567, 12_345_678, 3 * 10**9)]
    assert shown == ["0", "9999", "10k", "999k", "1.2M", "12M", "3.0G"]
    assert all(len(s) <= 4 for s in shown)


def test_table_columns_fit_their_width_the_free_text_taking_what_is_left() -> None:
    # time, call, #, kind, then, reason: the reason (flexible) takes the rest when all fit...
    content, floors = [8, 20, 1, 35, 15, 100], [8, 6, 1, 6, 6, 6]
    assert fit_widths(content, floors, 145, flex=5) == [8, 20, 1, 35, 15, 66]
    # ...and when they do not, the widest text is cut to a common width; figures stay whole.
    narrow = fit_widths(content, floors, 62, flex=5)
    assert narrow == [8, 13, 1, 13, 13, 14] and sum(narrow) == 62
    assert sum(fit_widths([40, 40], [40, 40], 30, last_resort=[4, 4])) <= 30, "labels at the least"


def test_a_retry_timeline_line_gives_way_in_its_summary_then_its_label() -> None:
    labels, summaries = ["flights-down/flights"], ["5 att · 1.4s · connection_reset"]
    assert timeline_widths(labels, summaries, 158) == (20, 102, 31)
    label, axis, summary = timeline_widths(labels, summaries, 48)
    assert (axis, summary) == (AXIS_MIN, 15) and label + axis + summary + 5 == 48


def test_the_in_flight_list_says_how_many_more_run_than_it_shows() -> None:
    running = {
        i: InFlight(f"c{i}", "turn", 1, started=0.0, deadline=30.0 + i, probe=False)
        for i in range(IN_FLIGHT_SHOWN + 2)
    }
    lines = [line.plain for line in in_flight_lines(running, now=10.0)]
    assert len(lines) == IN_FLIGHT_SHOWN + 1 and lines[0].startswith("turn/c0 ")
    assert lines[-1] == "… and 2 more, with later deadlines"
