"""Replaying recorded events: the pure session (position, clock, speed) and the traces view that
starts it, driven by keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable, Select, Static

from console.app import ConsoleApp
from console.cli import main
from console.model import ConsoleModel
from console.player import SPEEDS, range_source, turn_source
from console.player import Player as ReplaySession
from console.player import PlayerSource as ReplaySource
from console.screens.board import BoardScreen
from console.screens.traces import TraceBrowserScreen, TraceScreen
from engine.store import TraceStore
from engine.strategies.breaker.machine import BreakerState
from tests.console.demo_feed import live_demo
from tests.console.fakes import FakeLink

ROOT = Path(__file__).parents[2]
SIZE = (140, 40)


def demo_source() -> ReplaySource:
    seeds, events = live_demo()
    return ReplaySource("the live demo", events, seeds)


# --- the session ------------------------------------------------------------------------------


def test_playing_folds_the_events_whose_time_has_come_at_the_chosen_speed() -> None:
    session = ReplaySession(demo_source(), speed=2.0)
    assert session.position == 0 and session.now == session.start
    session.advance(5.0)
    assert session.position == 0, "paused: nothing moves"
    session.toggle()
    session.advance(5.0)
    assert session.now == session.start + 10.0
    assert session.position == sum(1 for e in session.events if e.t <= session.start + 10.0)
    session.advance(1_000.0)
    assert session.finished and not session.playing and session.now == session.end


def test_stepping_back_shows_exactly_what_stepping_forward_showed() -> None:
    session = ReplaySession(demo_source())
    session.seek(60)
    forward = {t: (v.state, v.consecutive_failures, v.version) for t, v in session.model.tools.items()}
    session.step(1)
    session.step(-1)
    assert session.position == 60 and session.now == session.events[59].t
    back = {t: (v.state, v.consecutive_failures) for t, v in session.model.tools.items()}
    assert back == {t: s[:2] for t, s in forward.items()}
    again = ConsoleModel(demo_source().seeds)
    again.apply(list(session.events[:60]))
    assert {t: v.state for t, v in again.tools.items()} == {
        t: v.state for t, v in session.model.tools.items()
    }


def test_the_breaker_cycle_replays_in_order() -> None:
    session = ReplaySession(demo_source())
    states = []
    while not session.finished:
        session.step(1)
        states.append(session.model.tools["flight_search"].state)
    distinct = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert distinct == [BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]


def test_speed_moves_along_the_ladder_and_stays_on_it() -> None:
    session = ReplaySession(demo_source())
    assert [session.faster(1) for _ in range(6)] == [2.0, 5.0, 10.0, 20.0, 20.0, 20.0]
    assert [session.faster(-1) for _ in range(6)] == [10.0, 5.0, 2.0, 1.0, 0.5, 0.5]
    assert SPEEDS[0] == 0.5 and SPEEDS[-1] == 20.0


def test_an_empty_replay_is_refused() -> None:
    with pytest.raises(ValueError, match="nothing to replay in nowhere"):
        ReplaySession(ReplaySource("nowhere", (), ()))


# --- from the store -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The live demo, recorded on a virtual clock: eight turns, one of them a model's."""
    path = tmp_path_factory.mktemp("traces") / "traces.db"
    assert main(["run", str(ROOT / "manifests/demo/live.yaml"), "--traces", str(path), "--json"]) == 0
    return path


def turn_ids(path: Path) -> list[str]:
    with TraceStore(path, readonly=True) as store:
        return [r.turn_id for r in store.list_turns().rows]


def test_a_stored_turn_replays_from_the_breakers_it_started_with(store_path: Path) -> None:
    while_open = next(t for t in turn_ids(store_path) if t.endswith("/while-open"))
    with TraceStore(store_path, readonly=True) as store:
        source = turn_source(store, store.load_turn(while_open))
    seeds = {s.tool_id: s for s in source.seeds}
    assert seeds["flight_search"].state is BreakerState.OPEN, "as recorded when the turn started"
    assert (
        seeds["flight_search"].manifest is not None and seeds["flight_search"].manifest.failure_threshold == 5
    )
    session = ReplaySession(source)
    session.seek(len(session.events))
    assert session.model.turns[while_open].calls["flights"].label == "alternative used"


def test_a_time_range_replays_every_turn_in_it(store_path: Path) -> None:
    with TraceStore(store_path, readonly=True) as store:
        rows = store.list_turns().rows
        source = range_source(store, since=min(r.started_at for r in rows), until=None, label="all")
    session = ReplaySession(source)
    session.seek(len(session.events))
    assert set(session.model.turns) == {r.turn_id for r in rows}


# --- the traces view and the replay keys ----------------------------------------------------


def app_on(store_path: Path) -> tuple[ConsoleApp, FakeLink]:
    seeds, _ = live_demo()
    link = FakeLink(seeds, clock=1_000.0)
    return ConsoleApp(link, live=False, traces=store_path), link


@pytest.mark.asyncio
async def test_the_traces_view_lists_filters_and_opens_turns(store_path: Path) -> None:
    app, _ = app_on(store_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        screen = app.screen
        assert isinstance(screen, TraceBrowserScreen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = screen.query_one("#turns", DataTable)
        assert table.row_count == len(turn_ids(store_path)) == 9
        screen.query_one("#outcome", Select).value = "timed_out"
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert str(table.get_row_at(0)[1]).endswith("/tight-deadline")
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, TraceScreen)
        assert detail.query_one("#timeline", DataTable).row_count > 5
        assert "TIMED OUT" in str(detail.query_one("#headline", Static).render())
        assert "not run for a model" in str(detail.query_one("#model", Static).render())


@pytest.mark.asyncio
async def test_a_models_turn_shows_the_exact_text_it_received(store_path: Path) -> None:
    app, _ = app_on(store_path)
    ask = next(t for t in turn_ids(store_path) if t.endswith("/ask-model"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        app.push_screen(TraceScreen(ask))
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        shown = str(app.screen.query_one("#model", Static).render())
        with TraceStore(store_path, readonly=True) as store:
            stored = json.dumps([e.to_dict() for e in store.load_turn(ask).events])
        assert "Tool Execution Failed" in shown and "Invalid airport code: ZZZ" in shown
        assert "Error Type: invalid_parameters" in shown and "call_compare" in shown
        assert "Tool Execution Failed" in stored, "the text shown is the text recorded"


@pytest.mark.asyncio
async def test_a_replay_plays_through_the_board_steps_and_ends(store_path: Path) -> None:
    app, link = app_on(store_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("R")
        await app.workers.wait_for_complete()
        await pilot.pause()
        replay = app.replay
        assert replay is not None and isinstance(app.screen, BoardScreen)
        assert "REPLAY" in str(app.status_text())
        assert app.check_action("act", ("trip",)) is False, "operator actions are off in a replay"
        await pilot.press("space")  # pause
        assert not replay.playing
        replay.seek(0)
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert replay.position == 2 and app.model is replay.model
        await pilot.press("left_square_bracket")
        assert replay.position == 1
        await pilot.press("plus")
        assert replay.speed == 2.0
        assert f"event 1/{len(replay.events)}" in str(app.status_text())
        await pilot.press("x")
        assert app.replay is None and app.model is app.live
        assert "LIVE" in str(app.status_text())
        assert not link.actions


@pytest.fixture
def bracketed_store(tmp_path: Path) -> Path:
    """A store whose one turn failed with brackets in its error text."""
    import anyio

    from engine import Engine, ToolCall, Turn
    from engine.store import TraceRecorder

    async def broken() -> None:
        raise ValueError("bad [red]input[/red] and a stray [/bold] tag")

    engine = Engine()
    engine.register("broken", broken)
    path = tmp_path / "traces.db"
    with TraceStore(path) as store, TraceRecorder(store).attach(engine):
        anyio.run(engine.run_turn, Turn([ToolCall("b", "broken")], id="brackets"))
    live_demo()  # the fake link's seeds, played before the app's loop runs
    return path


@pytest.mark.asyncio
async def test_the_traces_view_shows_brackets_in_errors_as_text(bracketed_store: Path) -> None:
    """`[/bold]` in a tool's error would crash Rich markup in a table cell; `[red]` would vanish."""
    app, _ = app_on(bracketed_store)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("5")
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        timeline = app.screen.query_one("#timeline", DataTable)
        cells = [str(timeline.get_row_at(i)[3]) for i in range(timeline.row_count)]
        assert any("bad [red]input[/red] and a stray [/bold] tag" in c for c in cells), cells
