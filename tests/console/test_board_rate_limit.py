"""A rate limit on screen (issue 24 §1): the board shows a limited tool (tokens left, waits,
throttled refusals) and a cooling-down tool with its countdown, ticking as time passes; the tool
detail shows the rate limit and the cooldown with the call that started it, and why a call was
refused in the engine's words. At 80×24 and 160×50, on a real engine's events (``strategies_feed``:
``quota`` cooling down for 29.71 s after a 429 at the cut), agreeing with ``engine.stats()``.
"""

from __future__ import annotations

import pytest

from console.render import clock
from console.widgets.breaker_table import BreakerTable
from tests.console.fakes import FakeLink
from tests.console.strategies_feed import scene
from tests.console.test_board import card, text_of
from tests.console.test_board_strategies import SIZES, cells, detail, on_scene, strategies_app


def facts() -> dict[str, object]:
    return dict(scene().stats["quota"].strategies["rate_limit"])


def test_the_scene_has_a_tool_cooling_down_with_waits_and_throttled_refusals() -> None:
    """What the screens below must show, as the engine had it at the cut."""
    engine = facts()
    assert (engine["waited"], engine["rejected"], engine["cooldowns"]) == (1, 2, 1)
    assert engine["cooldown_remaining_s"] == pytest.approx(29.71)
    assert (engine["tokens"], engine["burst"], engine["cooldown_started_by"]) == (2.0, 2, "c13")


@pytest.mark.asyncio
async def test_the_card_counts_the_cooldown_down_then_shows_the_tokens() -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES["160x50"]) as pilot:
        await on_scene(pilot)
        quota = text_of(app, card(app, "quota"))
        assert "fails 1/5  cool 30s ⧗1 ⊘2" in quota[3], quota
        assert card(app, "quota").border_subtitle == "● CLOSED · cooldown 30s"
        link = app.link
        assert isinstance(link, FakeLink)
        link.clock += 5.0  # no event: the countdown ticks on the clock alone
        app.flush()
        await pilot.pause()
        assert "cool 25s" in text_of(app, card(app, "quota"))[3]
        assert card(app, "quota").border_subtitle == "● CLOSED · cooldown 25s"
        link.clock += 25.0  # over (the engine announces it only at the next attempt)
        app.flush()
        await pilot.pause()
        assert "tok 2/2 ⧗1 ⊘2" in text_of(app, card(app, "quota"))[3], "the tokens, the waits and refusals"
        assert card(app, "quota").border_subtitle == "● CLOSED"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_table_row_shows_the_cooldown_at_any_width_and_the_limit_where_it_fits(size: str) -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        await on_scene(pilot)
        if app.screen.query_one("#layouts").current != "table":  # type: ignore[attr-defined]
            await pilot.press("v")
        table = app.screen.query_one(BreakerTable)
        assert "HALF-OPEN/COOL" in table.render_line(0).text
        quota = cells(table, "quota")
        assert quota["half_open"] == "cool 30s" and quota["rejected"] == "2", "REJ: the throttled calls"
        if size == "160x50":
            assert (quota["rate_limit"], quota["rate_limit_refused"]) == ("30s", "2")
            assert cells(table, "weather")["rate_limit"] == "", "blank for a tool without one"
        link = app.link
        assert isinstance(link, FakeLink)
        link.clock += 40.0
        app.flush()
        await pilot.pause()
        quota = cells(table, "quota")
        assert quota["half_open"] == ""
        if size == "160x50":
            assert quota["rate_limit"] == "2/2"


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_the_detail_shows_the_rate_limit_the_cooldown_and_why_calls_were_throttled(size: str) -> None:
    app = strategies_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        await on_scene(pilot)
        lines = await detail(pilot, app, "quota")
        text = "\n".join(lines)
        assert "quota  ● CLOSED   fails 1/5  cool 30s" in text, "the headline counts it down too"
        assert "rate limit    10/s · tokens 2.0 of burst 2 · max wait 100ms" in text
        assert "waited 1 · refused 2 throttled · scope process" in text
        assert "cooldown      30s left of 30.0s · 1 so far" in text
        assert "started by c13 (its Retry-After 30 s)" in text
        refused = next(e for e in reversed(scene().events) if e.event_type == "RateLimitRejected")
        assert f"c15 at {clock(refused.at)}: call refused by the rate limit:" in text
        assert "rate limit: cooling down for 29.91 s more, max wait 0.1 s" in text, "the engine's reason"


def test_the_scenes_facts_are_what_the_detail_says() -> None:
    """The figures the detail shows above are ``engine.stats()``'s, not the test's own."""
    engine = facts()
    assert (engine["rate_per_s"], engine["max_wait_ms"], engine["scope"]) == (10.0, 100.0, "process")
