"""Durable turns that finish together share one commit, and wait for it without a thread each.

The store's writes are gated here: the writer thread blocks in its first write until every turn
has finished, so the turns wait together and the next commit takes them all. The waits end in
real time (``durable_timeout_s``) whatever clock the event loop runs on: these tests run on
trio's MockClock and on looptime.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from engine import Engine, ToolManifest
from engine.errors import TurnNotPersisted
from engine.events import Event, TurnFinished
from engine.store import TraceRecorder, TraceStore
from engine.turn import ToolCall, Turn
from tests.engine.conftest import new_engine

pytestmark = pytest.mark.anyio

TURNS = 20


class GatedWrites:
    """``store.write``, blocking while the gate is shut; counts the turn ends each write commits."""

    def __init__(self, store: TraceStore) -> None:
        self.write = store.write
        self.gate = threading.Event()
        self.gate.set()
        self.ends: list[int] = []

    def __call__(self, events: Sequence[Event], **kwargs: Any) -> int:
        assert self.gate.wait(30), "the test opens the gate"
        written = self.write(events, **kwargs)
        if ends := sum(type(e) is TurnFinished for e in events):
            self.ends.append(ends)
        return written


async def recording_engine(store: TraceStore, **kwargs: Any) -> tuple[Engine, TraceRecorder, GatedWrites]:
    engine = await new_engine(ToolManifest(id="h"))

    async def h(**_: Any) -> str:
        return "ok"

    engine.register("h", h)
    gated = GatedWrites(store)
    store.write = gated  # type: ignore[method-assign]
    recorder = TraceRecorder(store, **kwargs).attach(engine)
    assert recorder.flush(10)
    return engine, recorder, gated


def open_when(engine: Engine, gate: threading.Event, ends: int) -> None:
    """Open ``gate`` once ``ends`` turns have published their end (the recorder has queued it)."""
    seen = 0

    def sink(event: Event) -> None:
        nonlocal seen
        if type(event) is TurnFinished:
            seen += 1
            if seen == ends:
                gate.set()

    engine.subscribe(sink, direct=True)


def turn(turn_id: str) -> Turn:
    return Turn([ToolCall("c", "h")], id=turn_id)


async def test_turns_finishing_together_share_a_commit_and_each_is_durable_when_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TraceStore(tmp_path / "t.db") as store, TraceStore(tmp_path / "t.db", readonly=True) as reader:
        engine, recorder, gated = await recording_engine(store)
        handed_to_threads: list[Callable[..., Any]] = []
        run_sync = anyio.to_thread.run_sync

        async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            handed_to_threads.append(func)
            return await run_sync(func, *args, **kwargs)

        monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
        gated.gate.clear()
        open_when(engine, gated.gate, TURNS)
        durable_on_return: dict[str, str] = {}

        async def run(turn_id: str) -> None:
            await engine.run_turn(turn(turn_id))
            durable_on_return[turn_id] = reader.load_turn(turn_id).row.outcome

        async with anyio.create_task_group() as tg:
            for i in range(TURNS):
                tg.start_soon(run, f"t{i}")
        assert durable_on_return == {f"t{i}": "ok" for i in range(TURNS)}, "committed when it returned"
        assert sum(gated.ends) == TURNS
        assert len(gated.ends) <= 2, f"the turns waiting together share one commit: {gated.ends}"
        assert not handed_to_threads, "a waiting turn holds no worker thread: the writer wakes it"
        assert recorder.stats.not_persisted == 0 and recorder.stats.pending == 0
        recorder.close()


async def test_a_wait_that_lasts_too_long_ends_in_real_time_on_any_clock(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        engine, recorder, gated = await recording_engine(store, durable_timeout_s=0.2)
        gated.gate.clear()
        started = time.monotonic()
        with pytest.raises(TurnNotPersisted, match=r"not written within 0.2s") as raised:
            await engine.run_turn(turn("slow"))
        assert time.monotonic() - started >= 0.2, "real seconds, not the loop's (virtual) ones"
        assert raised.value.result.outcome == "ok"
        gated.gate.set()
        assert recorder.flush(10)
        assert store.load_turn("slow").row.outcome == "ok", "written once the store took it"
        await engine.run_turn(turn("next"))  # durable again
        recorder.close()


async def test_a_turn_cancelled_while_it_waits_leaves_no_wait_behind(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        engine, recorder, gated = await recording_engine(store)
        gated.gate.clear()
        ended = anyio.Event()
        engine.subscribe(lambda e: ended.set() if type(e) is TurnFinished else None, direct=True)
        returned: list[str] = []

        async def run() -> None:
            returned.append((await engine.run_turn(turn("cancelled"))).outcome)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await ended.wait()
            for _ in range(5):
                await anyio.lowlevel.checkpoint()  # the turn is waiting for its commit now
            assert len(recorder._waiters) == 1
            tg.cancel_scope.cancel()
        assert not returned and recorder._waiters == [], "cancelled: nobody waits for it any more"
        gated.gate.set()
        assert recorder.flush(10)
        assert store.load_turn("cancelled").row.outcome == "ok", "its events are written all the same"
        await engine.run_turn(turn("after"))
        assert recorder.stats.pending == 0
        recorder.close()
