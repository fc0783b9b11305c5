"""The live console says so when its turns are not reaching the trace store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from console.app import ConsoleApp
from console.host import EngineHost
from console.screens.base import StatusBar
from engine.engine import Engine
from engine.store import TraceRecorder, TraceStore
from engine.turn import ToolCall, Turn
from tests.engine.conftest import Scripted

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
"""Textual runs on asyncio; the engine runs in its own thread."""


async def run_turns(engine: Engine) -> None:
    engine.register("hotel_search", Scripted({"hotel": "Ritz"}))
    for n in range(3):
        await engine.run_turn(Turn([ToolCall("h", "hotel_search")], id=f"t{n}"))


async def test_the_status_bar_counts_the_turns_not_persisted(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    with store._lock:  # every write refused: "attempt to write a readonly database"
        store._conn.execute("PRAGMA query_only = 1")
    engine = Engine([])
    recorder = TraceRecorder(store, durability="batch", batch_ms=5).attach(engine)
    host = EngineHost(engine, run_turns, recorder=recorder)
    host.start()
    app = ConsoleApp(host)
    async with app.run_test(size=(80, 24)) as pilot:
        deadline = time.monotonic() + 20
        while host.not_persisted() < 3 and time.monotonic() < deadline:
            await pilot.pause(0.05)  # the engine's thread and the writer's run in real time
        assert "3 turns not persisted" in str(app.status_text())
        app.flush()
        await pilot.pause()
        shown = str(app.screen.query_one(StatusBar).render_line(0).text)
        assert "3 turns not persisted" in shown, "at 80 columns the warning comes before what is cut"
        with store._lock:
            store._conn.execute("PRAGMA query_only = 0")
        assert recorder.flush(10)
        assert "not persisted" not in str(app.status_text())
    with TraceStore(tmp_path / "t.db", readonly=True) as reader:  # the console closed the recorder
        assert [r.outcome for r in reader.list_turns().rows] == ["ok"] * 3
