"""`tripwire serve` keeps its store to the retention policy it is given, in the background."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio

from engine import Engine, ToolCall, Turn
from engine.store import TraceRecorder, TraceStore, TraceStoreError
from tests.polling import wait_for
from tests.serving import served


def turn_ids(db: Path) -> set[str]:
    try:
        with TraceStore(db, readonly=True, create=False) as store:
            return {row.turn_id for row in store.list_turns(limit=1000).rows}
    except TraceStoreError:  # being migrated or written by serve at this very moment
        return set()


async def ok() -> str:
    return "ok"


def record_a_day_old_turn(db: Path) -> str:
    engine = Engine(wall_clock=lambda: time.time() - 86_400)
    engine.register("svc", ok)
    with TraceStore(db) as store, TraceRecorder(store).attach(engine):
        result = anyio.run(engine.run_turn, Turn([ToolCall("a", "svc")], id="yesterday"))
    return result.turn_id


def test_serve_removes_turns_older_than_its_retention_age(tmp_path: Path) -> None:
    db = tmp_path / "traces.db"
    old = record_a_day_old_turn(db)
    assert turn_ids(db) == {old}
    with served(tmp_path, "--retention-age", "12h") as (process, served_db):
        assert served_db == db

        def pruned() -> bool:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            return old not in turn_ids(db) and len(turn_ids(db)) >= 1

        wait_for(pruned, "the day-old turn gone", 30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
