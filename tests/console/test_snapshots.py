"""What the console looks like: SVG snapshots of each view, from the live demo on a frozen clock.

The data are the real engine events of one pass of ``manifests/demo/live.yaml`` played on a
virtual clock, cut at a moment when a breaker is open and a call is waiting on its timeout;
the console's clock is frozen there. Review changes with ``pytest --snapshot-report`` and
accept them with ``--snapshot-update``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from console.app import ConsoleApp
from console.screens.traces import TraceScreen
from tests.console import factory as f
from tests.console.demo_feed import demo_store, events_until, live_demo, mid_outage, start_of
from tests.console.fakes import FakeLink

SIZE = (130, 36)


def demo_app(at: float, *, read_only: bool = False) -> tuple[ConsoleApp, Callable[[Pilot[Any]], Any]]:
    """The console on the demo as it stood at engine time ``at``."""
    seeds, _ = live_demo()
    link = FakeLink(seeds, clock=at, read_only=read_only, description="travel agent, live · manifests/")
    app = ConsoleApp(link, actor="operator:test", live=False)

    async def feed(pilot: Pilot[Any]) -> None:
        link.emit(*events_until(at))
        app.flush()
        await pilot.pause()

    return app, feed


MID_OUTAGE = mid_outage()


def test_board_cards(snap_compare: Any) -> None:
    app, feed = demo_app(MID_OUTAGE)
    assert snap_compare(app, terminal_size=SIZE, run_before=feed)


def test_board_table(snap_compare: Any) -> None:
    app, feed = demo_app(MID_OUTAGE)
    assert snap_compare(app, press=["v"], terminal_size=SIZE, run_before=feed)


def test_tool_detail(snap_compare: Any) -> None:
    app, feed = demo_app(MID_OUTAGE)

    async def open_flight_search(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        app.open_tool("flight_search")
        await pilot.pause()
        app.flush()

    assert snap_compare(app, terminal_size=SIZE, run_before=open_flight_search)


def test_hotel_timeout_countdown(snap_compare: Any) -> None:
    app, feed = demo_app(MID_OUTAGE)

    async def open_hotels(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        app.open_tool("hotel_search")
        await pilot.pause()
        app.flush()

    assert snap_compare(app, terminal_size=SIZE, run_before=open_hotels)


def test_dependencies_of_a_degraded_turn(snap_compare: Any) -> None:
    app, feed = demo_app(start_of("recovered") - 0.5)  # hotel-slow has just ended
    assert snap_compare(app, press=["2"], terminal_size=SIZE, run_before=feed)


def test_confirm_trip(snap_compare: Any) -> None:
    app, feed = demo_app(MID_OUTAGE)
    assert snap_compare(app, press=["right", "right", "right", "t"], terminal_size=SIZE, run_before=feed)


def test_manifests_with_a_refused_file(snap_compare: Any) -> None:
    app, feed = demo_app(MID_OUTAGE)

    async def refuse(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        assert isinstance(app.link, FakeLink)
        app.link.emit(
            f.manifest_loaded("hotel_search", MID_OUTAGE - 5, version=8, digest="9f2c4e1aa0", previous="x",
                              path="manifests/hotel_search.yaml"),
            f.manifest_rejected(
                "manifests/flight_search.yaml", MID_OUTAGE - 1,
                "manifests/flight_search.yaml:4: tool.timeout_ms: Input should be greater than 0",
                kept=app.model.tools["flight_search"].manifest.digest,  # type: ignore[union-attr]
            ),
        )  # fmt: skip
        app.flush()
        await pilot.press("3")
        app.flush()

    assert snap_compare(app, terminal_size=SIZE, run_before=refuse)


def test_paused_read_only_events(snap_compare: Any) -> None:
    app, feed = demo_app(MID_OUTAGE, read_only=True)

    async def pause_then_more(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        await pilot.press("4", "p")
        assert isinstance(app.link, FakeLink)
        app.link.emit(f.opened("custom_api", MID_OUTAGE), f.opened("compare_prices", MID_OUTAGE))
        app.flush()

    assert snap_compare(app, terminal_size=SIZE, run_before=pause_then_more)


def traces_app(tmp_path: Path) -> ConsoleApp:
    seeds, _ = live_demo()
    link = FakeLink(seeds, clock=MID_OUTAGE, description="travel agent, live · manifests/")
    return ConsoleApp(link, actor="operator:test", live=False, traces=demo_store(tmp_path / "traces.db"))


async def settle(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_traces_view(snap_compare: Any, tmp_path: Path) -> None:
    app = traces_app(tmp_path)

    async def browse(pilot: Pilot[Any]) -> None:
        await pilot.press("5")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=browse)


def open_trace(app: ConsoleApp, turn_id: str) -> Callable[[Pilot[Any]], Any]:
    """What the operator does to read one turn: the Traces view (5), then the turn."""

    async def open_turn(pilot: Pilot[Any]) -> None:
        await pilot.press("5")
        await settle(pilot)
        app.push_screen(TraceScreen(turn_id))
        await settle(pilot)
        await settle(pilot)  # the turn's rows come from a worker thread

    return open_turn


def test_a_model_turns_trace(snap_compare: Any, tmp_path: Path) -> None:
    app = traces_app(tmp_path)
    assert snap_compare(app, terminal_size=SIZE, run_before=open_trace(app, "demo/ask-model"))


def test_replay_paused_mid_turn(snap_compare: Any, tmp_path: Path) -> None:
    app = traces_app(tmp_path)

    async def replay(pilot: Pilot[Any]) -> None:
        app.start_replay(turn_id="demo/hotel-slow")
        await settle(pilot)
        session = app.replay
        assert session is not None
        session.playing = False
        session.seek(sum(1 for e in session.events if e.t <= start_of("hotel-slow") + 12.0))
        session.clock = start_of("hotel-slow") + 12.0
        app.open_tool("hotel_search")
        await settle(pilot)
        app.flush()

    assert snap_compare(app, terminal_size=SIZE, run_before=replay)
