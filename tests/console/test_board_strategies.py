"""Bulkheads and retry budgets on screen (issue 23): a tool's card, table row and detail show its
bulkhead's occupancy and refusals and its budget's refusals, and say why a call or its retry was
refused; tools without them look as they always did. At 80×24 and 160×50, on a real engine's
events (``strategies_feed``: a full bulkhead with one queued, budgets spent) on a frozen clock.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from console.app import ConsoleApp
from console.attach import AttachedLink
from console.model import ConsoleModel
from console.widgets.breaker_table import COLUMNS, STRATEGY_COLUMNS, BreakerTable, fit_columns
from engine.events import Event, RecordingStarted
from engine.store import TraceStore
from tests.console.fakes import FakeLink
from tests.console.strategies_feed import scene
from tests.console.test_board import card, readme_figures, text_of
from tests.polling import until, wait_for

SIZES = {"80x24": (80, 24), "160x50": (160, 50)}


def strategies_app() -> ConsoleApp:
    """The console on the scene's tools as they started, its clock frozen at the scene's cut."""
    played = scene()
    return ConsoleApp(FakeLink(played.seeds, clock=played.now), actor="operator:test", live=False)


async def on_scene(pilot: Pilot[Any]) -> ConsoleApp:
    """The app fed the scene's events, as its engine sends them."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    link = app.link
    assert isinstance(link, FakeLink)
    link.emit(*scene().events)
    app.flush()
    await pilot.pause()
    return app


def screen_text(app: ConsoleApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def detail(pilot: Pilot[Any], app: ConsoleApp, tool_id: str) -> list[str]:
    app.open_tool(tool_id)
    await pilot.pause()
    app.flush()
    await pilot.pause()
    return screen_text(app)


def shown(lines: list[str], text: str) -> bool:
    return any(text in line for line in lines)


# --- the board --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_cards_show_occupancy_and_refusals_and_a_plain_tool_keeps_its_latency() -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES["160x50"]) as pilot:
        await on_scene(pilot)
        search = "\n".join(text_of(app, card(app, "search")))
        assert "⧉ 2/2 +1q ⊘2" in search, "2 of 2 slots, 1 queued; 2 refused by the bulkhead"
        assert "⊘2" in search.splitlines()[2], "the calls it refused are rejected calls (REJ) too"
        for budgeted in ("pricing", "quotes"):
            assert "↻⊘2" in "\n".join(text_of(app, card(app, budgeted))), budgeted
        weather = text_of(app, card(app, "weather"))
        assert "p50" in weather[3] and "p99" in weather[3]
        assert not any("⧉" in line or "↻⊘" in line for line in weather)
        tools = ("search", "pricing", "quota")
        cards = "\n".join(line for tool in tools for line in text_of(app, card(app, tool)))
        strategies = {c.header for c in COLUMNS if c.needs}
        for columns, names in readme_figures():  # what README says a card with them shows
            if columns == ["LIMIT"]:  # the tokens, or the cooldown instead of them
                assert "cool" in names and "tok" in names and "cool 30s" in cards
            elif strategies & set(columns):
                assert all(name in cards for name in names), (columns, names)


def cells(table: BreakerTable, tool_id: str) -> dict[str, str]:
    y = 1 + [r.tool_id for r in table.rows].index(tool_id)
    line, x, found = table.render_line(y).text, 0, {}
    for column, size in fit_columns(table.size.width, STRATEGY_COLUMNS):
        found[column.key] = line[x : x + size].strip()
        x += size + 1
    return found


@pytest.mark.asyncio
async def test_the_table_has_strategy_columns_blank_for_tools_without_and_error_percent_adds_up() -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES["160x50"]) as pilot:
        await on_scene(pilot)
        await pilot.press("v")
        table = app.screen.query_one(BreakerTable)
        header = table.render_line(0).text
        assert all(name in header for name in ("BULKHEAD", "BH⊘", "BUD⊘"))
        search, pricing, weather = (cells(table, t) for t in ("search", "pricing", "weather"))
        assert (search["bulkhead"], search["bulkhead_refused"], search["budget_refused"]) == (
            "2/2 +1q",
            "2",
            "",
        )
        assert (pricing["bulkhead"], pricing["bulkhead_refused"], pricing["budget_refused"]) == ("", "", "2")
        assert (weather["bulkhead"], weather["bulkhead_refused"], weather["budget_refused"]) == ("", "", "")
        assert (search["rejected"], search["error"]) == ("2", "100.0%"), "REJ: the calls the bulkhead refused"


@pytest.mark.asyncio
async def test_at_80_columns_the_table_keeps_the_columns_it_always_had() -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES["80x24"]) as pilot:
        await on_scene(pilot)
        table = app.screen.query_one(BreakerTable)
        assert [c.key for c, _ in fit_columns(table.size.width, STRATEGY_COLUMNS)] == [
            c.key for c, _ in fit_columns(table.size.width)
        ]
        assert "BULKHEAD" not in table.render_line(0).text and "OK FAIL  REJ" in table.render_line(0).text


# --- the tool detail --------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_detail_shows_the_bulkhead_and_why_calls_were_refused(size: str) -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        lines = await detail(pilot, await on_scene(pilot), "search")
        assert shown(lines, "In flight  ⧉ 2 of 2 bulkhead slots taken · 1 of 1 queued")
        assert shown(lines, "c9                     #1 wait") and shown(lines, "0.5s waited of 1.0s")
        assert shown(lines, "bulkhead      in flight 2/2 · queued 1/1 · wait p95 1.0s")
        assert shown(lines, "refused 1 full, 1 wait ran out · 2 in the last 60 s")
        assert shown(lines, "c10 at 10:30:46: call refused by the bulkhead:")
        assert shown(lines, "              bulkhead full: 2 in flight, 1 queued"), "whole, on its own line"
        timeline = {
            line.split()[0]: line for line in lines if line.split() and line.split()[0] in ("c3", "c10")
        }
        assert "⊘ 0 att · 0.00ms · bulkhead full: 2 in flight, 1 queued" in timeline["c10"]
        assert "░" in timeline["c3"] and "bulkhead queue wait ran out" in timeline["c3"], "its wait, then why"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_detail_shows_the_budgets_and_why_retries_were_refused(size: str) -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        app = await on_scene(pilot)
        lines = await detail(pilot, app, "pricing")
        assert shown(lines, "retry budget  in its 10 s window: 2 calls · 1 retries of 1 allowed")
        assert shown(lines, "refused 2 retries") and shown(lines, "2 retries refused in the last 60 s")
        assert shown(lines, "c6 at 10:30:45: retry after #1 refused by the retry budget:")
        assert shown(lines, "              retry budget spent: 1 retries over 2 calls in 10 s")
        assert sum("✗ 1 att" in line and "retry refused: retry bud" in line for line in lines) == 1
        app.pop_screen()
        lines = await detail(pilot, app, "quotes")
        assert shown(lines, "shared budget refused 2 of its retries: the engine-wide retry budget")
        assert shown(lines, "at the last: 2 retries over 7 calls in 10 s, 1s ago")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_a_tool_without_strategies_has_no_strategies_part(size: str) -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        lines = await detail(pilot, await on_scene(pilot), "weather")
        assert not app.screen.query_one("#strategies").display
        assert not shown(lines, "Strategies") and not shown(lines, "bulkhead")
        assert shown(lines, "In flight") and shown(lines, "Retry timeline")


# --- attached: the same figures from the trace store --------------------------------------------


def test_an_attached_console_folds_the_same_figures_from_the_store(tmp_path: Path) -> None:
    """Another process's engine recorded the scene: the stored events give the engine's figures."""
    played = scene()
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        for seed in played.seeds:
            assert seed.manifest is not None
            store.ensure_manifest(seed.manifest.digest, seed.tool_id, seed.manifest.content, at=0.0)
        store.write(list(played.events))
    link = AttachedLink(db, poll_s=0.01)
    got: list[Event] = []
    try:
        model = ConsoleModel(link.seeds())
        link.subscribe(got.append)
        wait_for(lambda: len(got) == len(played.events), "the stored events")
    finally:
        link.close()
    model.apply(got)
    for tool_id in ("search", "pricing"):
        figures = model.tools[tool_id].row(played.now).strategies
        assert figures is not None
        engine = played.stats[tool_id].strategies
        if "bulkhead" in engine:
            assert asdict(figures.bulkhead) == engine["bulkhead"]  # type: ignore[arg-type]
        if "retry_budget" in engine:
            assert asdict(figures.retry_budget) == {  # type: ignore[arg-type]
                k: v for k, v in engine["retry_budget"].items() if k != "shared"
            }


# --- the engine-wide retry budget: its options and window, own-engine and attached -------------


def engine_budget_line() -> str:
    engine = scene().stats["quotes"].strategies["shared.retry_budget"]
    return (
        f"engine budget in its 10 s window: {engine['calls']} calls · {engine['retries']} retries of"
        f" {engine['allowed']} allowed"
    )


def attached_store(tmp_path: Path, *, history_from_start: bool) -> Path:
    """The scene recorded by another process's engine, which says at its start which engine-wide
    strategies were in force (``RecordingStarted``)."""
    played = scene()
    first = played.events[0]
    started = RecordingStarted(
        at=first.at, t=first.t, host="host", pid=1, shared_strategies=played.shared,
        breakers={s.tool_id: {"state": "CLOSED", "consecutive_failures": 0} for s in played.seeds},
    )  # fmt: skip
    db = tmp_path / "traces.db"
    with TraceStore(db) as store:
        for seed in played.seeds:
            assert seed.manifest is not None
            store.ensure_manifest(seed.manifest.digest, seed.tool_id, seed.manifest.content, at=0.0)
        store.write([started, *played.events] if history_from_start else [started])
    return db


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_detail_shows_the_engine_wide_budget_with_its_options_and_window(size: str) -> None:
    played = scene()
    app = ConsoleApp(FakeLink(played.seeds, clock=played.now, shared=played.shared), actor="t", live=False)
    async with app.run_test(size=SIZES[size]) as pilot:
        app = await on_scene(pilot)
        for tool_id in ("quotes", "weather"):  # every tool's calls count in it: every detail shows it
            lines = await detail(pilot, app, tool_id)
            assert shown(lines, engine_budget_line()), (tool_id, lines)
            assert shown(lines, "options: 0 % of calls, at least 0.2 retries/s")
            assert shown(lines, "shared by every tool: refused 2 retries in all")
            app.pop_screen()
        lines = await detail(pilot, app, "weather")
        assert not shown(lines, "bulkhead") and not shown(lines, "retry budget  ")


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_an_attached_detail_shows_the_engine_wide_budget_from_the_store(
    size: str, tmp_path: Path
) -> None:
    played = scene()
    link = AttachedLink(attached_store(tmp_path, history_from_start=True), poll_s=0.01)
    app = ConsoleApp(link, actor="t", live=False)
    async with app.run_test(size=SIZES[size]) as pilot:

        def folded() -> bool:
            app.flush()
            return app.live.seen == len(played.events) + 1

        await until(pilot, folded)
        app.open_tool("quotes")
        await pilot.pause()
        lines = screen_text(app)
        # The store's events are old (its engine's clock): their window has passed since.
        assert shown(lines, "engine budget in its 10 s window: 0 calls · 0 retries of 2 allowed"), lines
        assert shown(lines, "options: 0 % of calls, at least 0.2 retries/s")
        assert shown(lines, "shared by every tool: refused 2 retries in all")


def test_an_attached_link_seeds_the_engine_wide_strategies_its_engine_started_with(tmp_path: Path) -> None:
    """The engine's start is older than the history the console reads: the link still says them."""
    link = AttachedLink(attached_store(tmp_path, history_from_start=False), poll_s=0.01, history=0)
    try:
        assert link.shared_strategies() == scene().shared and "retry_budget" in scene().shared
        model = ConsoleModel(link.seeds(), link.shared_strategies())
    finally:
        link.close()
    figures = model.engine_budget.figures(0.0)
    assert figures is not None and figures.options.min_retries_per_s == 0.2
