"""Export README's console screenshots (SVG) from the app itself.

    python tools/screenshots.py        # writes docs/screenshots/*.svg

The data are the live demo's real engine events (one pass of ``manifests/demo/live.yaml`` on
a virtual clock), cut mid-outage, as the snapshot tests use them: every run draws the same.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textual.pilot import Pilot

from console.app import ConsoleApp
from console.screens.traces import TraceScreen
from tests.console.demo_feed import demo_store, events_until, live_demo, start_of
from tests.console.fakes import FakeLink

OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
SIZE = (130, 34)
MID_OUTAGE = start_of("hotel-slow") + 12.0
STORE = demo_store(Path(tempfile.mkdtemp()) / "traces.db")

Step = Callable[[ConsoleApp, Pilot[None]], Awaitable[None]]


async def shoot(name: str, at: float, step: Step | None = None) -> None:
    seeds, _ = live_demo()
    link = FakeLink(seeds, clock=at, description="travel agent, live · manifests/")
    app = ConsoleApp(link, actor="operator:alice", live=False, traces=STORE)
    async with app.run_test(size=SIZE) as pilot:
        link.emit(*events_until(at))
        app.flush()
        await pilot.pause()
        if step is not None:
            await step(app, pilot)
        app.flush()
        await pilot.pause()
        app.save_screenshot(str(OUT / f"{name}.svg"))
    print(f"wrote {OUT / name}.svg")


async def table(app: ConsoleApp, pilot: Pilot[None]) -> None:
    await pilot.press("v")


async def tool(app: ConsoleApp, pilot: Pilot[None]) -> None:
    app.open_tool("flight_search")
    await pilot.pause()


async def deps(app: ConsoleApp, pilot: Pilot[None]) -> None:
    await pilot.press("2")


async def settle(app: ConsoleApp, pilot: Pilot[None]) -> None:
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def traces(app: ConsoleApp, pilot: Pilot[None]) -> None:
    await pilot.press("5")
    await settle(app, pilot)


async def model_turn(app: ConsoleApp, pilot: Pilot[None]) -> None:
    await traces(app, pilot)
    app.push_screen(TraceScreen("demo/ask-model"))
    await settle(app, pilot)


async def replay(app: ConsoleApp, pilot: Pilot[None]) -> None:
    app.start_replay(turn_id="demo/flights-down")
    await settle(app, pilot)
    session = app.replay
    assert session is not None
    session.playing = False
    session.seek(len(session.events))  # the breaker has just opened
    await pilot.press("v")
    await settle(app, pilot)


async def main() -> None:
    os.environ["TZ"] = "UTC"
    time.tzset()
    OUT.mkdir(parents=True, exist_ok=True)
    await shoot("board", MID_OUTAGE)
    await shoot("board-table", MID_OUTAGE, table)
    await shoot("tool-detail", MID_OUTAGE, tool)
    await shoot("dependencies", start_of("recovered") - 0.5, deps)
    await shoot("traces", MID_OUTAGE, traces)
    await shoot("trace-model-turn", MID_OUTAGE, model_turn)
    await shoot("replay", MID_OUTAGE, replay)


if __name__ == "__main__":
    asyncio.run(main())
